"""``python -m benchmarks.scatter_sums``: the gradient of a factorisation fitted to observed
entries only, ``sum((sum(U[rows] * V[cols], 1) - y)**2)``, whose transpose sums rows at repeated
indices (``numpy_indexing._row_sums`` picks the form). Against the hand-written gradient with
``np.add.at`` and with a ``scipy.sparse`` product (the strongest by hand), JAX (``jit``) and
PyTorch, in one run; median of 21 calls after a warm-up."""

from __future__ import annotations

import numpy as np
import scipy.sparse

import pullback as pb
from benchmarks.harness import median_ms


def loss(U, V, rows, cols, y):
    return np.sum((np.sum(U[rows] * V[cols], axis=1) - y) ** 2)


def hand_add_at(U, V, rows, cols, y):
    Ur, Vc = U[rows], V[cols]
    r = 2.0 * (np.sum(Ur * Vc, axis=1) - y)
    gU, gV = np.zeros_like(U), np.zeros_like(V)
    np.add.at(gU, rows, r[:, None] * Vc)
    np.add.at(gV, cols, r[:, None] * Ur)
    return gU, gV


def hand_sparse(U, V, rows, cols, y):
    """The residuals as a sparse n x m matrix R: the gradients are ``R @ V`` and ``R^T @ U``."""
    r = 2.0 * (np.einsum("ij,ij->i", U[rows], V[cols]) - y)
    R = scipy.sparse.csr_array((r, (rows, cols)), shape=(U.shape[0], V.shape[0]))
    return R @ V, R.T @ U



def main() -> None:
    rng = np.random.default_rng(0)
    impls = {"hand, np.add.at": hand_add_at, "hand, sparse product": hand_sparse,
             "pullback": pb.grad(loss, argnums=(0, 1))}
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        g = jax.jit(jax.grad(lambda U, V, rows, cols, y: jnp.sum((jnp.sum(U[rows] * V[cols], axis=1) - y) ** 2),
                             argnums=(0, 1)))
        impls["JAX jit"] = lambda *a: jax.block_until_ready(g(*a))
    except ImportError:
        pass
    try:
        import torch

        def torch_grad(U, V, rows, cols, y):
            U, V = (torch.tensor(a, requires_grad=True) for a in (U, V))
            rows, cols, y = map(torch.from_numpy, (rows, cols, y))
            torch.sum((torch.sum(U[rows] * V[cols], dim=1) - y) ** 2).backward()
            return U.grad, V.grad

        impls["PyTorch"] = torch_grad
    except ImportError:
        pass
    print("| n x m, observed, k | " + " | ".join(f"{name}, ms" for name in impls) + " | pullback / best hand |")
    print("|---" * (len(impls) + 2) + "|")
    for n, m, nnz, k in ((300, 200, 6000, 10), (3000, 2000, 100_000, 10), (300, 200, 6000, 2)):
        U, V = rng.standard_normal((n, k)), rng.standard_normal((m, k))
        rows, cols, y = rng.integers(0, n, nnz), rng.integers(0, m, nnz), rng.standard_normal(nnz)
        args = (U, V, rows, cols, y)
        want = hand_add_at(*args)
        for name, fn in impls.items():
            got = fn(*args)
            assert all(np.allclose(np.asarray(a), b) for a, b in zip(got, want)), name
        times = {name: median_ms(fn, args) for name, fn in impls.items()}
        best = min(times["hand, np.add.at"], times["hand, sparse product"])
        print(f"| {n} x {m}, {nnz}, {k} | " + " | ".join(f"{t:.3f}" for t in times.values())
              + f" | {times['pullback'] / best:.2f} |")


if __name__ == "__main__":
    main()
