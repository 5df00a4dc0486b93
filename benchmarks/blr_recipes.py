"""``python -m benchmarks.blr_recipes [--sizes 500x5000 1000x4000] [--repeats 5] [--write]``: the Bayesian
linear regression criterion of ``examples/bayesian_linear_regression.py`` (Seeger et al. 3.3), its
Cholesky route (M = I + alpha X X^T = L L^T), value and gradient with respect to X (d x n), the log
noise and the log prior, against a hand-written SciPy gradient.

The expert: with b = X y, z = L^{-1} b, a = M^{-1} b, s = exp(log_noise),
    G = (M^{-1} + (alpha / s) a a^T) / 2,  X_bar = 2 alpha G X - (alpha / s) a y^T,
    alpha_bar = <G, X X^T> - z.z / (2 s):
syrk and potrf into one d x d buffer, potri and syr in place (its triangle mirrored), one gemm into
the d x n gradient and ger into it, all through SciPy's BLAS (a rank-1 update, no second d x n buffer).
Peak memory is tracemalloc's high-water mark of NumPy's allocations during one call, inputs not
counted, as a ratio to the expert's; times are medians of interleaved repeats.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.linalg import blas, lapack

import pullback as pb
from benchmarks import harness
from benchmarks.harness import traced_peak_mb

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

from bayesian_linear_regression import blr_cholesky  # noqa: E402


def _mirror_upper(w: np.ndarray, block: int = 256) -> None:
    """Copy the upper triangle of the square ``w`` onto its lower one, in place, by blocks."""
    n = w.shape[0]
    for i in range(0, n, block):
        j = min(i + block, n)
        d = w[i:j, i:j]
        lower = np.tril_indices(j - i, -1)
        d[lower] = d.T[lower]
        if j < n:
            w[j:, i:j] = w[i:j, j:].T


def expert(X, y, log_noise, log_prior):
    d, n = X.shape
    s, alpha = np.exp(log_noise), np.exp(log_prior - log_noise)
    M = blas.dsyrk(alpha, X)  # upper triangle of alpha X X^T, F-ordered
    M[np.diag_indices(d)] += 1.0
    L, info = lapack.dpotrf(M, overwrite_a=1)  # upper U, M = U^T U
    if info:
        raise np.linalg.LinAlgError("not positive definite")
    b = blas.dgemv(1.0, X.T, y, trans=1)  # SciPy's BLAS throughout: NumPy's own pool would fight it for the cores
    z = blas.dtrsv(L, b, trans=1)  # U^T z = b
    value = 0.5 * ((y @ y - alpha * (z @ z)) / s + n * (np.log(2 * np.pi) + log_noise)) + np.sum(
        np.log(np.abs(np.diagonal(L))))
    a = blas.dtrsv(L, z)  # M^{-1} b
    G, info = lapack.dpotri(L, overwrite_c=1)  # upper triangle of M^{-1}
    G = blas.dsyr(alpha / s, a, a=G, overwrite_a=1)  # + (alpha / s) a a^T, upper
    _mirror_upper(G)
    G *= 0.5
    GX = blas.dgemm(1.0, X.T, G).T  # (X^T G)^T = G X, G symmetric; C-ordered
    alpha_bar = np.einsum("ij,ij->", GX, X) - (z @ z) / (2 * s)
    GX *= 2 * alpha
    blas.dger(-alpha / s, y, a, a=GX.T, overwrite_a=1)  # GX.T += y (-(alpha/s) a)^T, in place
    s_bar = -0.5 * (y @ y - alpha * (z @ z)) / s ** 2
    return value, (GX, s_bar * s + 0.5 * n - alpha_bar * alpha, alpha_bar * alpha)


def data(d: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n)
    X = rng.standard_normal((d, n)) / n ** 0.5
    X[0] = 1.0 / n ** 0.5
    return X, 1 - 2 * x + 0.1 * rng.standard_normal(n), -2.0, 0.5


def _flat(out):
    value, grads = out
    return [value, *grads]


def measure(sizes, repeats: int):
    ours = pb.value_and_grad(blr_cholesky, argnums=(0, 2, 3))
    rows = []
    for d, n in sizes:
        args = data(d, n)
        for a, b in zip(_flat(expert(*args)), _flat(ours(*args))):  # the same numbers first
            np.testing.assert_allclose(b, a, rtol=1e-7, atol=1e-9 * max(1.0, float(np.max(np.abs(a)))))
        times = {"expert": [], "pullback": []}
        for _ in range(repeats):
            for label, fn in (("expert", expert), ("pullback", ours)):
                t = time.perf_counter()
                fn(*args)
                times[label].append(time.perf_counter() - t)
        peak = {label: traced_peak_mb(fn, args) for label, fn in (("expert", expert), ("pullback", ours))}
        med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
        for label in ("expert", "pullback"):
            rows.append((f"{d}x{n}", label, med[label], med[label] / med["expert"], peak[label],
                         peak[label] / peak["expert"]))
        print(f"d x n = {d}x{n}: pullback/expert time {med['pullback'] / med['expert']:.2f}, peak memory "
              f"{peak['pullback']:.1f} / {peak['expert']:.1f} MB = {peak['pullback'] / peak['expert']:.2f}", flush=True)
    return rows


def table(rows) -> str:
    lines = ["| d x n | implementation | median, ms | time ratio | peak memory, MB | memory ratio |",
             "|---|---|---|---|---|---|"]
    for size, label, med, r_t, mb, r_m in rows:
        lines.append(f"| {size} | {label} | {med:.1f} | {r_t:.2f} | {mb:.1f} | {r_m:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["500x5000", "1000x4000"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes]
    text = table(measure(sizes, args.repeats))
    print(text)
    if args.write:
        harness.append_results(
            "Bayesian linear regression, Cholesky route: time and peak memory",
            f"`python -m benchmarks.blr_recipes --sizes {' '.join(args.sizes)} --repeats {args.repeats}`; value and "
            "gradient (X, log noise, log prior), float64, against the hand-written SciPy gradient (syrk, potrf, "
            "potri, syr, gemm, ger). Peak memory: tracemalloc's high-water mark of one call, inputs not counted",
            text)


if __name__ == "__main__":
    main()
