"""``python -m benchmarks.lu_recipes [--sizes 1024 2048] [--repeats 5] [--write]``: the gradients of
LU and Cholesky composites (issue 16) against the strongest hand-written SciPy LAPACK gradient.

Cases (value and gradient, float64, A = randn + n I, K SPD given):
  inv      sum(W * inv(A))                 expert: getrf, getri, two gemms (A_bar = -X^T W X^T)
  solve    sum(W * solve(A, B)), wrt A, B  expert: getrf, getrs(trans=1), getrs, one gemm
  det      det(A)                          expert: getrf, getri, a scaling (det A^{-T})
  slogdet  slogdet(A)[1]                   expert: getrf, getri (A^{-T})
Every expert factorises A^T on A's F-view ``A.T``, so that f2py copies A's buffer as it lies rather
than transposing it (issue 28), and uses A^T's factors transposed.
(The GP written with ``solve(assume_a='pos')`` and ``logdet`` is in ``benchmarks.gp_recipes``.)
Medians and minima of interleaved repeats (the two implementations alternate, so load drifts hit
both alike), and the median CPU time of the process (all threads; steadier on a shared machine);
peak memory is tracemalloc's high-water mark of NumPy's allocations during one call.
``--write`` appends the table to benchmarks/RESULTS.md under its own heading.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.linalg import lapack

import pullback as pb
from benchmarks import harness
from benchmarks.harness import traced_peak_mb


def _getri(lu, piv):
    work, _ = lapack.dgetri_lwork(lu.shape[0])
    x, info = lapack.dgetri(lu, piv, lwork=int(work), overwrite_lu=1)
    return x


def _getrf(a):
    lu, piv, info = lapack.dgetrf(a)
    if info > 0:
        raise np.linalg.LinAlgError("singular matrix")
    return lu, piv


def inv_expert(A, W):
    """getrf of A's F-view A.T (A^T's factors: f2py copies A's buffer as it lies), getri: G = A^{-T}."""
    G = _getri(*_getrf(A.T))
    return np.sum(W * G.T), -(G @ W) @ G


def solve_expert(A, B, W):
    """A^T's factors: A X = B is getrs(trans=1), A^T B_bar = W getrs(trans=0)."""
    lu, piv = _getrf(A.T)
    X, _ = lapack.dgetrs(lu, piv, B, trans=1)
    B_bar, _ = lapack.dgetrs(lu, piv, W)
    return np.sum(W * X), (-B_bar @ X.T, B_bar)


def _sign(lu, piv):
    return -1.0 if np.count_nonzero(piv != np.arange(piv.shape[0])) % 2 else 1.0


def det_expert(A):
    lu, piv = _getrf(A.T)  # det A^T = det A
    d = _sign(lu, piv) * np.prod(np.diagonal(lu))
    X = _getri(lu, piv)  # A^{-T}
    X *= d
    return d, X


def slogdet_expert(A):
    lu, piv, _ = lapack.dgetrf(A.T)
    return np.sum(np.log(np.abs(np.diagonal(lu)))), _getri(lu, piv)


def cases(n: int, rng):
    A = rng.standard_normal((n, n)) + n ** 0.5 * np.eye(n)
    W, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    return {
        "inv": ((A, W), inv_expert, pb.value_and_grad(lambda A, W: np.sum(W * np.linalg.inv(A)))),
        "solve": ((A, B, W), solve_expert,
                  pb.value_and_grad(lambda A, B, W: np.sum(W * np.linalg.solve(A, B)), argnums=(0, 1))),
        "det": ((A / n ** 0.5,), det_expert, pb.value_and_grad(np.linalg.det)),
        "slogdet": ((A,), slogdet_expert, pb.value_and_grad(lambda A: np.linalg.slogdet(A)[1])),
    }


def _flat(out):
    value, grads = out
    return [value, *(grads if isinstance(grads, tuple | list) else (grads,))]


def measure(sizes, repeats: int):
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        for name, (args, expert, ours) in cases(n, rng).items():
            for a, b in zip(_flat(expert(*args)), _flat(ours(*args))):  # the same numbers first
                np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-8 * max(1.0, float(np.max(np.abs(a)))))
            times = {"expert": [], "pullback": []}
            cpu = {"expert": [], "pullback": []}
            for _ in range(repeats if n >= 512 else 20 * repeats):  # small n: calls of 0.1 ms, more of them
                for label, fn in (("expert", expert), ("pullback", ours)):
                    fn(*args)  # untimed: the state a call leaves (BLAS threads, freed pages) is this one's own
                    t, c = time.perf_counter(), time.process_time()
                    fn(*args)
                    times[label].append(time.perf_counter() - t)
                    cpu[label].append(time.process_time() - c)
            peak = {label: traced_peak_mb(fn, args) for label, fn in (("expert", expert), ("pullback", ours))}
            med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
            low = {k: 1e3 * float(np.min(v)) for k, v in times.items()}
            cpu_med = {k: 1e3 * float(np.median(v)) for k, v in cpu.items()}
            for label in ("expert", "pullback"):
                rows.append((name, n, label, med[label], low[label], med[label] / med["expert"],
                             low[label] / low["expert"], cpu_med[label] / cpu_med["expert"],
                             peak[label] / peak["expert"]))
            print(f"{name:26s} n={n:5d}  pullback/expert: median {med['pullback'] / med['expert']:.2f}, "
                  f"min {low['pullback'] / low['expert']:.2f}, CPU {cpu_med['pullback'] / cpu_med['expert']:.2f}, "
                  f"peak memory {peak['pullback'] / peak['expert']:.2f}", flush=True)
    return rows


def table(rows) -> str:
    lines = ["| case | n | implementation | median, ms | min, ms | ratio (median) | ratio (min) | ratio (CPU time) "
             "| peak memory ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for name, n, label, med, low, r_med, r_min, r_cpu, r_mem in rows:
        lines.append(f"| {name} | {n} | {label} | {med:.1f} | {low:.1f} | {r_med:.2f} | {r_min:.2f} | {r_cpu:.2f} "
                     f"| {r_mem:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = parser.parse_args()
    rows = measure(args.sizes, args.repeats)
    text = table(rows)
    print(text)
    if args.write:
        harness.append_results(
            "LU and Cholesky composites differentiated at the solve (issue 16)",
            f"`python -m benchmarks.lu_recipes --sizes {' '.join(map(str, args.sizes))} --repeats {args.repeats}`; "
            "value and gradient, float64, against hand-written SciPy LAPACK gradients (getrf/getri/getrs); "
            "interleaved repeats. Peak memory: tracemalloc's high-water mark of one call, as a ratio to the expert's",
            text)


if __name__ == "__main__":
    main()
