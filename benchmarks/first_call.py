"""``python -m benchmarks.first_call [--repeats N] [--write]``: pullback's first call against one
eager value-and-gradient call of autograd, on programs that are Python loops.

A user who runs a program once, or edits and reruns it, pays pullback's first call: tracing,
rerolling, differentiating, printing, ``compile()`` and the run. autograd (HIPS) pays no
compilation; each of its calls records a tape and walks it back. The programs are autograd's own
examples, ported in ``benchmarks/fluid_examples.py`` (the 110 x 110 smoke simulation over 100 steps
and the 40 x 60 wing over 20 steps, the sizes the examples run), and the Kalman filter of
``examples/kalman_filter.py`` written as a Python loop (``kalman_nll_unrolled``) over 300 steps,
with autograd's own SciPy wrappers for the triangular solves. pullback runs each with its loops
rolled back up (the default) and with ``reroll=False`` (every step unrolled).

Every measurement is a fresh process with an empty Numba cache (so no import, trace or cache is
shared) after imports and inputs are made: wall-clock seconds and the process's CPU seconds
(steadier on a shared machine), the median over ``--repeats`` processes. autograd's number is the
median over three calls in its process, its first call included. The values and gradients (against
fixed weights) are checked to agree with autograd's before any time is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import replace_section

RESULTS = Path(__file__).parent / "RESULTS.md"
HEADING = "## first call against one eager autograd call (`python -m benchmarks.first_call`)"
KALMAN_STEPS = 300
PROGRAMS = ("fluidsim", "wing", "kalman")
EAGER = "pullback reroll=False, first call eager"
RUNS = ("autograd", "pullback", "pullback reroll=False", EAGER)


def kalman_autograd(A, B, log_qh, log_qv, v, mu0, S0):
    """``kalman_nll_unrolled`` for autograd: ``side="right"`` solves written as solves of the transpose."""
    import autograd.numpy as anp
    from autograd.scipy.linalg import solve_triangular

    dh, dv = A.shape[0], B.shape[0]
    S_h, S_v = anp.exp(log_qh) * anp.eye(dh), anp.exp(log_qv) * anp.eye(dv)
    f, F = mu0, S0
    nll = 0.0
    for t in range(v.shape[0]):
        mu_h = anp.dot(A, f) if t else f
        S_hh = anp.dot(anp.dot(A, F), A.T) + S_h if t else F
        mu_v = anp.dot(B, mu_h)
        S_hh_Bt = anp.dot(S_hh, B.T)
        S_vv = anp.dot(B, S_hh_Bt) + S_v
        L = anp.linalg.cholesky(S_vv)
        K = solve_triangular(L, solve_triangular(L, S_hh_Bt.T, lower=True), lower=True, trans="T").T
        delta = v[t] - mu_v
        w = solve_triangular(L, delta, lower=True)
        nll = nll + 0.5 * anp.dot(w, w) + anp.sum(anp.log(anp.diag(L))) + 0.5 * dv * anp.log(2 * anp.pi)
        f = mu_h + anp.dot(K, delta)
        ImKB = anp.eye(dh) - anp.dot(K, B)
        F = anp.dot(anp.dot(ImKB, S_hh), ImKB.T) + anp.dot(anp.dot(K, S_v), K.T)
    return nll


def problem(name: str, peer: bool):
    """(objective, argument, argnums): the objective of one argument's tuple of arrays, written for
    autograd.numpy (``peer``) or NumPy."""
    from benchmarks import fluid_examples as fe

    if peer:
        import autograd.numpy as np_
    else:
        np_ = np
    if name == "fluidsim":
        smoke, target = fe.fluid_data()
        return fe.fluid_objective(np_, smoke, target), (fe.fluid_params(),), 0
    if name == "wing":
        return fe.wing_objective(np_), (fe.wing_params(),), 0
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    import kalman_filter as kf

    A, B, v = kf.simulate(KALMAN_STEPS)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    return (kalman_autograd if peer else kf.kalman_nll_unrolled), args, (0, 1, 2, 3)


def _checksum(grads) -> float:
    """The gradient against fixed weights: one number to compare between implementations."""
    flat = np.concatenate([np.ravel(g) for g in (grads if isinstance(grads, tuple) else (grads,))])
    return float(flat @ np.cos(np.arange(flat.size)))


def measure(name: str, run: str) -> dict:
    """One fresh process's numbers for one program and one implementation."""
    fn, args, argnums = problem(name, run == "autograd")
    if run == "autograd":
        import autograd

        vg = autograd.value_and_grad(fn, argnums)
        walls, cpus = [], []
        for _ in range(3):
            w, c = time.perf_counter(), time.process_time()
            value, grads = vg(*args)
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
        return {"wall": statistics.median(walls), "cpu": statistics.median(cpus), "value": float(value),
                "grad": _checksum(grads)}
    import pullback as pb

    # the compiled rows compile the whole gradient at the first call; the eager row walks the primal program
    # equation by equation (``api.eager``), as ``first_call="auto"`` does for a long unrolled program
    d = pb.differentiate(fn, argnums=argnums, reroll=run == "pullback",
                         first_call="eager" if run == EAGER else "compiled")
    w, c = time.perf_counter(), time.process_time()
    value, grads = d.value_and_grad(*args)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    w = time.perf_counter()
    d.value_and_grad(*args)
    primal = d.ir(*args, stage="primal")
    loops = sum(e.prim.name == "scan" for e in primal.eqns)
    return {"wall": wall, "cpu": cpu, "value": float(value), "grad": _checksum(grads),
            "second": time.perf_counter() - w, "eqns": len(primal.eqns), "loops": loops}


def child(name: str, run: str) -> dict:
    """One measurement in a fresh process with an empty Numba cache (a first call, not a rerun's)."""
    with tempfile.TemporaryDirectory(prefix="pullback-first-call-") as cache:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]), PULLBACK_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-m", "benchmarks.first_call", "--child", name, run],
                             capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(repeats: int, runs: tuple[str, ...] = RUNS, programs: tuple[str, ...] = PROGRAMS) -> list[str]:
    rows = ["| program | implementation | wall, s | CPU, s | wall ratio to autograd | CPU ratio to autograd "
            "| primal equations (scans) |", "|---|---|---|---|---|---|---|"]
    for name in programs:
        got = {run: [child(name, run) for _ in range(repeats)] for run in runs}
        base = got["autograd"][0]
        for run, results in got.items():
            for what, rtol in (("value", 1e-9), ("grad", 1e-7)):
                if not np.isclose(results[0][what], base[what], rtol=rtol, atol=1e-12):
                    raise AssertionError(f"{name}: {run}'s {what} {results[0][what]}, autograd's {base[what]}")
        ref_wall = statistics.median(r["wall"] for r in got["autograd"])
        ref = statistics.median(r["cpu"] for r in got["autograd"])
        for run, results in got.items():
            wall = statistics.median(r["wall"] for r in results)
            cpu = statistics.median(r["cpu"] for r in results)
            size = "" if run == "autograd" else f"{results[0]['eqns']} ({results[0]['loops']})"
            rows.append(f"| {name} | {run} | {wall:.2f} | {cpu:.2f} | {wall / ref_wall:.2f} | {cpu / ref:.2f} "
                        f"| {size} |")
            print(rows[-1], flush=True)
    return rows


def write(section: list[str]) -> None:
    """Replace (or add) this benchmark's section of RESULTS.md, keeping the rest."""
    replace_section(RESULTS, HEADING, section)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_call")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per measurement (median)")
    parser.add_argument("--write", action="store_true", help=f"write the table into {RESULTS.name}")
    parser.add_argument("--runs", nargs="+", choices=RUNS[1:], default=RUNS[1:],
                        help="the pullback rows to measure (autograd's is always measured)")
    parser.add_argument("--programs", nargs="+", choices=PROGRAMS, default=PROGRAMS)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
        print(json.dumps(measure(*args.child)))
        return
    from importlib.metadata import version

    rows = table(args.repeats, ("autograd", *args.runs), tuple(args.programs))
    section = [HEADING, "", f"`python -m benchmarks.first_call --repeats {args.repeats}` on {platform.machine()}, "
               f"Python {platform.python_version()}, NumPy {np.__version__}, autograd "
               f"{version('autograd')}; load average {os.getloadavg()[0]:.1f} on "
               f"{os.cpu_count()} cores when written. Medians over fresh processes; pullback's time is its "
               "first call (trace, reroll, differentiate, print, compile, run), autograd's one eager "
               "value-and-gradient call. CPU seconds are the process's own, steadier than wall-clock "
               "on a shared machine.", "", *rows]
    print("\n".join(section))
    if args.write:
        write(section)
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
