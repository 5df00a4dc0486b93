"""Logistic regression over data on disk, fitted on a Dask cluster: the NumPy loss, differentiated by
pullback and printed as a ``dask.array`` program (one ``dask.compute`` of value and gradient per
evaluation, so each evaluation reads the chunks once), minimised by ``scipy.optimize.minimize``
with the parameters a small NumPy array on the client.

    python examples/dask_logistic.py                  # a LocalCluster of two worker processes
    python examples/dask_logistic.py tcp://host:8786  # an existing cluster's scheduler

The data is written as a stack of ``.npy`` chunks (``da.to_npy_stack``) and read back with
``da.from_npy_stack``: the workers read it from disk at each evaluation, so it need not fit in memory
(on a real cluster, the path must be one that every worker can read: a shared file system).
"""

from __future__ import annotations

import sys
import tempfile

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster
from scipy.optimize import minimize

import pullback as pb


@pb.differentiate
def loss(w, X, y):
    """Mean negative log-likelihood, plus a small ridge penalty."""
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z) + 1e-3 * (w @ w)


def write_dataset(directory: str, n: int = 200_000, d: int = 20, rows_per_chunk: int = 25_000, seed: int = 0):
    """Synthetic rows written to ``directory`` as .npy chunks; the true weights returned."""
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal(d) / np.sqrt(d)
    X = da.random.default_rng(seed).standard_normal((n, d), chunks=(rows_per_chunk, d))
    p = 1 / (1 + da.exp(-(X @ w_true)))
    y = (da.random.default_rng(seed + 1).random(n, chunks=rows_per_chunk) < p).astype(float)
    da.to_npy_stack(f"{directory}/X", X)
    da.to_npy_stack(f"{directory}/y", y)
    return w_true


def fit(X, y):
    """L-BFGS on the chunked data: each evaluation is one pass over X and y."""
    w0 = np.zeros(X.shape[1])
    return minimize(loss.value_and_grad, w0, args=(X, y), jac=True, method="L-BFGS-B")


def main(address: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as directory:
        if address is None:
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
            client = Client(cluster)
        else:
            cluster, client = None, Client(address)
        try:
            w_true = write_dataset(directory)
            X, y = da.from_npy_stack(f"{directory}/X"), da.from_npy_stack(f"{directory}/y")
            print(loss.source(np.zeros(X.shape[1]), X, y))
            result = fit(X, y)
            print(f"{result.nfev} evaluations, loss {result.fun:.6f}, "
                  f"|w - w_true| / |w_true| = {np.linalg.norm(result.x - w_true) / np.linalg.norm(w_true):.3f}")
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
