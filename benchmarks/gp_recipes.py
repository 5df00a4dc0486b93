"""``python -m benchmarks.gp_recipes [--quick]``: the GP negative log likelihood's gradient with
the kernel matrix K given (no kernel construction), in every spelling of ``SPELLINGS``, against the expert.

    nll(K, y) = 0.5 y^T K^{-1} y + 0.5 log det K

- ``cholesky``: ``L = cholesky(K)``, ``z = solve_triangular(L, y)``, ``0.5 z.z + sum log diag L``;
- ``cho_solve``: ``c = cho_factor(K)`` (SciPy's default upper factor, its lower one, pullback's),
  ``0.5 y . cho_solve(c, y) + sum log diag c``;
- ``solve(pos)``: ``0.5 y . solve(K, y, assume_a='pos') + 0.5 logdet(K)`` (pullback's, and SciPy's
  solve with NumPy's ``slogdet``: one factorisation, issue 28);
- ``inv`` + ``slogdet``: ``0.5 y . inv(K) y + 0.5 slogdet(K)``, which does not say that K is positive
  definite: its expert is the LU one (getrf, getri, ger);
and each but the last again with a noise term, the likelihood of ``K + s I``.

The expert (``expert``): potrf, potrs, potri, syr through scipy.linalg.lapack/blas on K's Fortran-
order view (no hidden copy), the triangle mirrored in place: K_bar = (K^{-1} - a a^T) / 2, a =
K^{-1} y; with the noise term (``expert_noise``) it first makes K + s I in one copy, which potrf
factors in place. JAX (jit, float64) when installed. Times are the minimum over repeats after a warm-up, the
implementations taking turns within each repeat (so that a varying machine load falls on all of them
alike), wall and CPU (the process's, all threads); ratios are to each row's expert (the LU expert for
the LU row, the expert with noise for the noisy rows). Peak memory is
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


def nll_cho_factor_lower(K, y):
    c = scipy.linalg.cho_factor(K, lower=True)
    return 0.5 * y @ scipy.linalg.cho_solve(c, y) + np.sum(np.log(np.diag(c[0])))


def nll_solve_slogdet(K, y):  # SciPy's solve and NumPy's slogdet: one factorisation (issue 28)
    return 0.5 * y @ scipy.linalg.solve(K, y, assume_a="pos") + 0.5 * np.linalg.slogdet(K)[1]


def nll_solve(K, y):
    return 0.5 * y @ pl.solve(K, y, assume_a="pos") + 0.5 * pl.logdet(K)


def nll_inv_slogdet(K, y):  # an explicit inverse: nothing says K is positive definite, so LU (getrf, getri)
    return 0.5 * y @ np.linalg.inv(K) @ y + 0.5 * np.linalg.slogdet(K)[1]


NOISE = 0.1


def noisy(nll):
    """The same likelihood of K + s I (a noise term on the diagonal), its gradient in K."""
    def f(K, y):
        return nll(K + NOISE * np.eye(K.shape[0]), y)

    f.__name__ = f"{nll.__name__}_noise"
    return f


SPELLINGS = {
    "np.linalg.cholesky + solve_triangular": nll_cholesky,
    "cho_factor(lower=True) + cho_solve": nll_cho_factor_lower,
    "scipy cho_factor (upper, default) + cho_solve": nll_cho_factor_upper,
    "pullback cho_factor + cho_solve": nll_cho_solve,
    "pullback solve(pos) + logdet": nll_solve,
    "scipy solve(pos) + np.linalg.slogdet": nll_solve_slogdet,
    "np.linalg.inv + slogdet (LU)": nll_inv_slogdet,
}


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


def expert_noise(K, y):
    """The expert with a noise term: K + s I in one copy (which potrf then factors in place)."""
    A = K.copy()
    A.flat[:: A.shape[0] + 1] += NOISE
    U, info = lapack.dpotrf(A.T, lower=0, overwrite_a=1)
    if info:
        raise np.linalg.LinAlgError("not positive definite")
    del A
    a, info = lapack.dpotrs(U, y, lower=0)
    value = 0.5 * (y @ a) + np.sum(np.log(np.diag(U)))
    W, info = lapack.dpotri(U, lower=0, overwrite_c=1)
    W = blas.dsyr(-1.0, a, a=W, lower=0, overwrite_a=1)
    mirror_lower(W.T)
    W *= 0.5
    return value, W


def _getri(lu, piv):
    work, _ = lapack.dgetri_lwork(lu.shape[0])
    x, info = lapack.dgetri(lu, piv, lwork=int(work), overwrite_lu=1)
    return x


def expert_lu(K, y):
    """The LU expert for ``inv`` + ``slogdet``, which do not say that K is positive definite: getrf of
    K^T (K's Fortran-order view: one copy, the factors), getri in place, which gives K^{-T} = X^T, two
    products with a vector and one rank-1 update of it: K_bar = (X^T - (X^T y) (X y)^T) / 2."""
    lu, piv, info = lapack.dgetrf(K.T)
    if info > 0:
        raise np.linalg.LinAlgError("singular matrix")
    value_ld = np.sum(np.log(np.abs(np.diagonal(lu))))
    G = _getri(lu, piv)  # K^{-T}, F-ordered
    a, b = G.T @ y, G @ y
    value = 0.5 * (y @ a) + 0.5 * value_ld
    G *= 0.5
    G = blas.dger(-0.5, b, a, a=G, overwrite_a=1)
    return value, G


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
    """label -> (function, its expert's label): every spelling, without and with the noise term."""
    impls = {"expert (potrf, potrs, potri, syr)": (expert, None),
             "expert with noise (copy, potrf in place, potrs, potri, syr)": (expert_noise, None),
             "LU expert (getrf, getri, ger)": (expert_lu, None)}
    for label, fn in SPELLINGS.items():
        lu = "LU" in label
        impls[f"pullback, {label}"] = (pb.differentiate(fn).value_and_grad,
                                       "LU expert (getrf, getri, ger)" if lu else "expert (potrf, potrs, potri, syr)")
    for label, fn in SPELLINGS.items():
        if "LU" in label:
            continue
        impls[f"pullback, {label}, K + s I"] = (pb.differentiate(noisy(fn)).value_and_grad,
                                               "expert with noise (copy, potrf in place, potrs, potri, syr)")
    jax_fn = _jax_grad()
    if jax_fn is not None:
        impls["JAX jit (cholesky + solve_triangular)"] = (jax_fn, "expert (potrf, potrs, potri, syr)")
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
            fn(K, y)  # untimed: the state a call leaves (BLAS threads, freed pages) is this one's own
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
        wants = {label: np.asarray(fn(K, y)[1]) for label, (fn, ref) in impls.items() if ref is None}
        wants["expert (potrf, potrs, potri, syr)"] = expert(K, y)[1]
        for label, (fn, ref) in impls.items():
            want = wants[ref or label]
            got = np.asarray(fn(K, y)[1])
            assert np.allclose(got, want, rtol=1e-8, atol=1e-10 * np.abs(want).max()), label
        times = best_times({k: f for k, (f, _) in impls.items()}, K, y, args.repeats)
        peaks = {label: peak_buffers(fn, K, y) for label, (fn, _) in impls.items()}
        for label, (_, ref) in impls.items():
            t, c = times[label]
            t0, c0 = times[ref or label]
            m, m0 = peaks[label], peaks[ref or label]
            memory = "" if label.startswith("JAX") else f"{m:.2f} | {m / m0:.2f}"
            timing = f"{1e3 * t:.1f} | {t / t0:.2f} | {1e3 * c:.1f} | {c / c0:.2f}"
            print(f"| {n} | {label} | {timing} | {memory or ' | '} |", flush=True)


if __name__ == "__main__":
    main()
