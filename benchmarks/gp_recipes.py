"""``python -m benchmarks.gp_recipes [--quick]``: the GP negative log likelihood's gradient with
the kernel matrix K given (no kernel construction), written three ways, against the expert.

    nll(K, y) = 0.5 y^T K^{-1} y + 0.5 log det K

- ``cholesky``: ``L = cholesky(K)``, ``z = solve_triangular(L, y)``, ``0.5 z.z + sum log diag L``;
- ``cho_solve``: ``c = cho_factor(K)``, ``0.5 y . cho_solve(c, y) + sum log diag c``;
- ``solve(pos)``: ``0.5 y . solve(K, y, assume_a='pos') + 0.5 logdet(K)``;
- SciPy's ``cho_factor(K)`` (its default upper factor) + ``cho_solve``, and SciPy's
  ``solve(K, y, assume_a='pos')`` + NumPy's ``slogdet(K)`` (issue 28).

The expert (``expert``): potrf, potrs, potri, syr through scipy.linalg.lapack/blas on K's Fortran-
order view (no hidden copy), the triangle mirrored in place: K_bar = (K^{-1} - a a^T) / 2, a =
K^{-1} y. JAX (jit, float64) when installed. Times are the minimum over repeats after a warm-up, the
implementations taking turns within each repeat (so that a varying machine load falls on all of them
alike), wall and CPU (the process's, all threads); ratios are to the expert. Peak memory is
tracemalloc's high-water mark during one call (NumPy's allocations, so not JAX's), in n x n float64
buffers; the inputs are not counted.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import pullback.linalg as pl
import scipy.linalg
from scipy.linalg import blas, lapack

import pullback as pb
from benchmarks.handwritten import mirror_lower


def nll_cholesky(K, y):
    L = np.linalg.cholesky(K)
    z = pl.solve_triangular(L, y, lower=True)
    return 0.5 * z @ z + np.sum(np.log(np.diag(L)))


def nll_cho_solve(K, y):
    c = pl.cho_factor(K, lower=True)
    return 0.5 * y @ pl.cho_solve(c, y) + np.sum(np.log(np.diag(c[0])))


def nll_cho_factor_upper(K, y):  # SciPy's default, lower=False: the spelling most users write (issue 28)
    c = scipy.linalg.cho_factor(K)
    return 0.5 * y @ scipy.linalg.cho_solve(c, y) + np.sum(np.log(np.diag(c[0])))


def nll_solve_slogdet(K, y):  # SciPy's solve and NumPy's slogdet: one factorisation (issue 28)
    return 0.5 * y @ scipy.linalg.solve(K, y, assume_a="pos") + 0.5 * np.linalg.slogdet(K)[1]


def nll_solve(K, y):
    return 0.5 * y @ pl.solve(K, y, assume_a="pos") + 0.5 * pl.logdet(K)


def expert(K, y):
    """potrf, potrs, potri, syr: one n x n buffer (U, overwritten by K^{-1}, then the gradient).

    K is C-ordered and symmetric, so ``K.T`` is K in Fortran order: LAPACK reads it without f2py's
    hidden copy to Fortran order, and factorises it as K = U^T U (the upper triangle)."""
    U, info = lapack.dpotrf(K.T, lower=0)
    if info:
        raise np.linalg.LinAlgError("not positive definite")
    a, info = lapack.dpotrs(U, y, lower=0)
    value = 0.5 * (y @ a) + np.sum(np.log(np.diag(U)))
    W, info = lapack.dpotri(U, lower=0, overwrite_c=1)  # upper triangle of K^{-1}, Fortran order
    W = blas.dsyr(-1.0, a, a=W, lower=0, overwrite_a=1)  # upper triangle of K^{-1} - a a^T
    mirror_lower(W.T)  # W.T is C-ordered with the lower triangle filled
    W *= 0.5
    return value, W


def _jax_grad():
    try:
        import jax
        import jax.numpy as jnp
        import jax.scipy.linalg as jsl
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def nll(K, y):
        L = jnp.linalg.cholesky(K)
        z = jsl.solve_triangular(L, y, lower=True)
        return 0.5 * z @ z + jnp.sum(jnp.log(jnp.diag(L)))

    f = jax.jit(jax.value_and_grad(nll))
    return lambda K, y: jax.block_until_ready(f(K, y))


def problem(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n))
    K = x @ x.T / n + np.eye(n)
    return K, rng.standard_normal(n)


def implementations() -> dict:
    impls = {"expert (potrf, potrs, potri, syr)": expert}
    for label, fn in [("pullback, cholesky + solve_triangular", nll_cholesky),
                      ("pullback, cho_factor + cho_solve", nll_cho_solve),
                      ("pullback, solve(pos) + logdet", nll_solve),
                      ("pullback, scipy cho_factor (upper, default) + cho_solve", nll_cho_factor_upper),
                      ("pullback, scipy solve(pos) + np.linalg.slogdet", nll_solve_slogdet)]:
        impls[label] = pb.differentiate(fn).value_and_grad
    jax_fn = _jax_grad()
    if jax_fn is not None:
        impls["JAX jit (cholesky + solve_triangular)"] = jax_fn
    return impls


def peak_buffers(fn, K, y) -> float:
    fn(K, y)
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn(K, y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / (K.shape[0] ** 2 * 8)


def best_times(impls: dict, K, y, repeats: int) -> dict[str, tuple[float, float]]:
    """Minimum wall and CPU time (this process, all threads) per implementation, taking turns."""
    for fn in impls.values():
        fn(K, y)
    wall = {k: [] for k in impls}
    cpu = {k: [] for k in impls}
    for _ in range(repeats):
        for label, fn in impls.items():
            t, c = time.perf_counter(), time.process_time()
            fn(K, y)
            wall[label].append(time.perf_counter() - t)
            cpu[label].append(time.process_time() - c)
    return {k: (min(wall[k]), min(cpu[k])) for k in impls}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 256 and 512")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--n", type=int, nargs="*", help="sizes (default 1024 2048)")
    args = parser.parse_args(argv)
    sizes = args.n or ([256, 512] if args.quick else [1024, 2048])
    impls = implementations()
    print("| n | implementation | best ms | ratio | CPU ms | ratio | peak n x n buffers | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        K, y = problem(n)
        want = expert(K, y)[1]
        for label, fn in impls.items():
            got = np.asarray(fn(K, y)[1])
            assert np.allclose(got, want, rtol=1e-8, atol=1e-10 * np.abs(want).max()), label
        times = best_times(impls, K, y, args.repeats)
        rows = [(label, *times[label], peak_buffers(fn, K, y)) for label, fn in impls.items()]
        _, t0, c0, m0 = rows[0]
        for label, t, c, m in rows:
            memory = "" if label.startswith("JAX") else f"{m:.2f} | {m / m0:.2f}"
            timing = f"{1e3 * t:.1f} | {t / t0:.2f} | {1e3 * c:.1f} | {c / c0:.2f}"
            print(f"| {n} | {label} | {timing} | {memory or ' | '} |")


if __name__ == "__main__":
    main()
