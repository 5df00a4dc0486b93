"""GP negative log marginal likelihood, value and gradient w.r.t. the three kernel
hyperparameters: pullback against an expert's hand-written SciPy gradient.

    python benchmarks/gp_nll.py            # n = 256, 1024, 2048
    python benchmarks/gp_nll.py --quick    # n = 256, 1024

Times are medians (and minima) over repeats after a warm-up, in one run; peak memory is
the max RSS of a fresh process running the case, minus that of one that only builds the
data. JAX and PyTorch (the `compare` extra) are reported as skipped when not installed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

import gp_regression  # noqa: E402

D = 3


def data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    y = np.sin(X @ np.ones(D)) + 0.1 * rng.standard_normal(n)
    return np.array([0.3, 0.1, -2.0]), X, y


def hand_written(theta, X, y):
    """What an expert writes: one Cholesky, one potri for the trace terms, O(n^2) rest."""
    ell, sf2, sn2 = np.exp(theta)
    n = X.shape[0]
    Xs = X / ell
    sq = np.sum(Xs**2, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2 * (Xs @ Xs.T)
    Kf = sf2 * np.exp(-0.5 * d2)
    A = Kf + sn2 * np.eye(n)
    L, info = scipy.linalg.lapack.dpotrf(A, lower=1, overwrite_a=1)
    if info:
        raise np.linalg.LinAlgError("not positive definite")
    alpha, _ = scipy.linalg.lapack.dpotrs(L, y, lower=1)
    value = 0.5 * (y @ alpha) + np.sum(np.log(np.diag(L))) + 0.5 * n * np.log(2 * np.pi)
    W, _ = scipy.linalg.lapack.dpotri(L, lower=1, overwrite_c=1)  # lower triangle of A^{-1}
    W = np.tril(W) + np.tril(W, -1).T
    W -= np.outer(alpha, alpha)
    Kf *= W  # W o K
    grad = 0.5 * np.array([np.sum(Kf * d2), np.sum(Kf), sn2 * np.trace(W)])
    return value, grad


def pullback_gp(theta, X, y):
    return gp_regression.neg_log_marginal_likelihood.value_and_grad(theta, X, y)


IMPLEMENTATIONS = {"hand-written SciPy": hand_written, "pullback": pullback_gp}


def timeit(fn, args, repeats: int) -> tuple[float, float]:
    fn(*args)  # warm-up (and, for pullback, trace + compile)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return float(np.median(times)), float(np.min(times))


def peak_memory_mb(impl: str, n: int) -> float:
    """Max RSS of a fresh process running ``impl`` twice, minus one that only builds the data."""
    def run(which):
        out = subprocess.run([sys.executable, __file__, "--memory", which, str(n)], capture_output=True, text=True,
                             check=True)
        return json.loads(out.stdout)["maxrss_mb"]

    return run(impl) - run("none")


def max_rss_mb() -> float:
    """This process's peak resident memory. Linux's ru_maxrss survives exec (a child would
    report its parent's peak), so read the address space's own high-water mark."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory_child(impl: str, n: int) -> None:
    args = data(n)
    if impl != "none":
        IMPLEMENTATIONS[impl](*args)
        IMPLEMENTATIONS[impl](*args)
    print(json.dumps({"maxrss_mb": max_rss_mb()}))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory:
        _memory_child(args.memory[0], int(args.memory[1]))
        return
    sizes = [256, 1024] if args.quick else [256, 1024, 2048]
    print("| n | implementation | median ms | min ms | ratio to hand-written | peak memory over data, MB |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        case = data(n)
        v_ref, g_ref = hand_written(*case)
        v, g = pullback_gp(*case)
        assert np.isclose(v, v_ref, rtol=1e-8) and np.allclose(g, g_ref, rtol=1e-6), (v, v_ref, g, g_ref)
        base = None
        for name, fn in IMPLEMENTATIONS.items():
            med, best = timeit(fn, case, args.repeats)
            base = base or med
            mem = peak_memory_mb(name, n)
            print(f"| {n} | {name} | {med * 1e3:.1f} | {best * 1e3:.1f} | {med / base:.2f} | {mem:.0f} |")
        for peer in ("jax", "torch"):
            try:
                __import__(peer)
            except ImportError:
                print(f"| {n} | {peer} | skipped (not installed) | | | |")


if __name__ == "__main__":
    main()
