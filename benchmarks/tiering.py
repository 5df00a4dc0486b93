"""``python -m benchmarks.tiering [--repeats N] [--write]``: when ``compile="auto"`` should compile a
program's loops that Numba's on-disk cache lacks, measured.

For each program, in a fresh process with an empty Numba cache: its first call under ``compile="auto"``
(trace, transform, print, run as NumPy), the median NumPy call, the median call with its loops
compiled, and the compile itself (import Numba, print, LLVM: the first compiled call less a compiled
call; Numba's own import reported apart), then the load of the same loops from the cache that
compile wrote (what a process pays once the cache holds them). The break-even is the number of calls
whose savings repay the compile, ``compile / (NumPy - compiled)``, and the NumPy time those calls take.

Ski rental decides from these: compiling when the NumPy calls have taken as long as the compile would
costs at most twice the better choice made knowing the number of calls in advance. The compile runs in
a subprocess (``numba_loops.Warming``) while the calls go on as NumPy, so its cost to the caller is
CPU on another core, not a wait, and the table also shows the first calls' times around it.

Programs: the Kalman filter of ``examples/kalman_filter.py`` at 300 steps written as a Python loop and
rolled back up; RK4 Lotka-Volterra and the heat equation of ``benchmarks/small_steps.py``; autograd's
fluid (110 x 110, 100 steps) and wing (20 steps) examples of ``benchmarks/fluid_examples.py``, rolled;
a 1000-step RNN ``h = np.tanh(W @ h)`` (16 units) written as a Python loop.
"""

from __future__ import annotations

import argparse
import json
import math
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
HEADING = "## When compile=\"auto\" compiles: break-even calls (`python -m benchmarks.tiering`)"
CALLS_HEADING = "## compile=\"auto\"'s first calls from an empty Numba cache (`python -m benchmarks.tiering --calls`)"
PROGRAMS = ("kalman", "rk4", "heat", "fluidsim", "wing", "rnn")
RNN_STEPS, RNN_UNITS = 1000, 16


def rnn(W, h0):
    h = h0
    for _ in range(RNN_STEPS):
        h = np.tanh(W @ h)
    return np.sum(h * h)


def problem(name: str):
    """(objective, args, argnums) of a program, NumPy-side."""
    from benchmarks import first_call

    if name in ("kalman", "fluidsim", "wing"):
        return first_call.problem(name, peer=False)
    import pullback as pb
    from benchmarks import small_steps

    if name == "rk4":
        return small_steps.lotka_volterra(np, pb.scan)
    if name == "heat":
        return small_steps.heat(np, pb.fori_loop)
    rng = np.random.default_rng(0)
    return rnn, (rng.standard_normal((RNN_UNITS, RNN_UNITS)) / RNN_UNITS ** 0.5, rng.standard_normal(RNN_UNITS)), 0


def _median_call(fn, args, budget: float = 2.0) -> tuple[float, float]:
    """The median wall-clock and CPU seconds of a call of ``fn``."""
    walls: list[float] = []
    cpus: list[float] = []
    while len(walls) < 5 or (sum(walls) < budget and len(walls) < 200):
        t, c = time.perf_counter(), time.process_time()
        fn(*args)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def _leaves(x) -> list:
    return [y for part in x for y in _leaves(part)] if isinstance(x, tuple | list) else [np.ravel(x)]


def _same(a, b) -> bool:
    return all(np.allclose(x, y, rtol=1e-7, atol=1e-10) for x, y in zip(_leaves(a), _leaves(b)))


def measure(name: str) -> dict:
    """One fresh process's numbers for one program (see the module docstring)."""
    import pullback as pb
    from pullback.api.transforms import Staged
    from pullback.backends import numba_loops

    fn, args, argnums = problem(name)
    numba_loops.AUTO_WARM_SECONDS = math.inf  # measured as NumPy throughout
    d = pb.differentiate(fn, argnums=argnums, compile="auto", first_call="compiled")
    t = time.perf_counter()
    d.value_and_grad(*args)
    first = time.perf_counter() - t
    staged = d._stage("grad", args)
    flat = d._flat(args)[0]
    numpy_call, numpy_cpu = _median_call(staged, flat)
    out = {"first": first, "numpy": numpy_call, "numpy_cpu": numpy_cpu, "eqns": len(staged.program.eqns)}
    if not staged._deferred:  # "auto" compiles nothing here
        return out
    t = time.perf_counter()
    import numba  # noqa: F401

    out["numba_import"] = time.perf_counter() - t
    compiled = Staged(staged.program, staged.treedef)
    compiled.loops, compiled.warm = "auto", True
    t, c = time.perf_counter(), time.process_time()
    got = compiled(*flat)
    out["compile_and_call"], cpu = time.perf_counter() - t, time.process_time() - c
    out["compiled"], out["compiled_cpu"] = _median_call(compiled, flat)
    out["functions"] = compiled.source.count("@numba.njit")
    out["compile"] = out["compile_and_call"] - out["compiled"] + out["numba_import"]
    out["compile_cpu"] = cpu - out["compiled_cpu"] + out["numba_import"]
    if not _same(got, staged(*flat)):
        raise AssertionError(f"{name}: the compiled program disagrees with the NumPy one")
    loaded = Staged(staged.program, staged.treedef)
    loaded.loops = "auto"
    t = time.perf_counter()
    loaded(*flat)
    out["load"] = time.perf_counter() - t - out["compiled"]
    if loaded._deferred:
        raise AssertionError(f"{name}: the cache the compile wrote does not hold the loops")
    return out


def calls(name: str, seconds: float) -> dict:
    """The times of a program's calls under ``compile="auto"`` as shipped, from an empty Numba cache: for
    ``seconds``, and on (up to three times as long) until 1,000 calls have run, 30 since its loops came in."""
    import pullback as pb

    fn, args, argnums = problem(name)
    d = pb.differentiate(fn, argnums=argnums, compile="auto", first_call="compiled")
    times: list[float] = []
    compiled_at = None
    start = time.perf_counter()
    while True:
        t = time.perf_counter()
        d.value_and_grad(*args)
        times.append(time.perf_counter() - t)
        if compiled_at is None and not d._stage("grad", args)._deferred:
            compiled_at = len(times) - 1
        elapsed = time.perf_counter() - start
        if compiled_at == 0 or elapsed > 3 * seconds or (elapsed > seconds and len(times) >= 1000 and (
                compiled_at is not None and len(times) - compiled_at > 30)):
            break  # (compiled_at 0: auto compiles nothing here)
    return {"times": times, "compiled_at": compiled_at}


def child(name: str) -> dict:
    """``measure`` in a fresh process with an empty Numba cache."""
    with tempfile.TemporaryDirectory(prefix="pullback-tiering-") as cache:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]), PULLBACK_CACHE_DIR=cache,
                   NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
        done = subprocess.run([sys.executable, "-m", "benchmarks.tiering", "--child", name], capture_output=True,
                              text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def calls_child(name: str, seconds: float, tree: Path) -> dict:
    """``calls`` in a fresh process with an empty Numba cache, importing pullback (and these benchmarks'
    programs) from ``tree``: this checkout, or another (``--against``) to compare with."""
    with tempfile.TemporaryDirectory(prefix="pullback-tiering-") as cache:
        env = dict(os.environ, PYTHONPATH=str(tree), PULLBACK_CACHE_DIR=cache)
        env.pop("NUMBA_CACHE_DIR", None)
        script = (f"import sys; sys.argv = ['tiering', '--calls-child', {name!r}, {str(seconds)!r}]; "
                  f"import runpy; runpy.run_path({__file__!r}, run_name='__main__')")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tree)
    if done.returncode:
        raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def calls_table(seconds: float, trees: dict[str, Path], programs: tuple[str, ...]) -> list[str]:
    """The first calls of each program under each tree's ``compile="auto"`` (see ``calls``)."""
    counts = (100, 1000)
    rows = ["| program | code | first call, s | slowest later call, s | "
            + " | ".join(f"first {n:,} calls, s" for n in counts)
            + f" | calls in the first {seconds:.0f} s | last 20 calls, ms (median) |",
            "|---|---|---|---|" + "---|" * len(counts) + "---|---|"]
    for name in programs:
        for label, tree in trees.items():
            got = calls_child(name, seconds, tree)
            times = got["times"]
            if got["compiled_at"] == 0:
                rows.append(f"| {name} | {label} | {times[0]:.2f} | (auto compiles no loop) |"
                            + " |" * (len(counts) + 2))
                print(rows[-1], flush=True)
                continue
            cumulative = np.cumsum(times)
            spans = " | ".join(f"{cumulative[n - 1]:.1f}" if n <= len(times) else "" for n in counts)
            rows.append(f"| {name} | {label} | {times[0]:.2f} | {max(times[1:]):.2f} | {spans} | "
                        f"{int(np.searchsorted(cumulative, seconds))} | {statistics.median(times[-20:]) * 1e3:.2f} |")
            print(rows[-1], flush=True)
    return rows


def table(repeats: int, programs: tuple[str, ...] = PROGRAMS) -> list[str]:
    rows = ["| program | equations | first call, s | NumPy call, ms | compiled call, ms | compiled functions "
            "| compile, s (import numba) | load from cache, s | break-even calls | NumPy time to break even, s |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name in programs:
        got = [child(name) for _ in range(repeats)]

        def med(key: str, got: list[dict] = got) -> float:
            return statistics.median(r[key] for r in got)

        if "compile" not in got[0]:
            rows.append(f"| {name} | {got[0]['eqns']} | {med('first'):.2f} | {med('numpy') * 1e3:.2f} "
                        f"({med('numpy_cpu') * 1e3:.2f}) | (auto compiles no loop) | | | | | |")
        else:
            saved = med("numpy_cpu") - med("compiled_cpu")
            calls = med("compile_cpu") / saved if saved > 0 else math.inf
            rows.append(f"| {name} | {got[0]['eqns']} | {med('first'):.2f} | {med('numpy') * 1e3:.2f} "
                        f"({med('numpy_cpu') * 1e3:.2f}) | {med('compiled') * 1e3:.2f} "
                        f"({med('compiled_cpu') * 1e3:.2f}) | {got[0]['functions']} | {med('compile'):.1f} "
                        f"({med('compile_cpu'):.1f}; {med('numba_import'):.1f}) | {med('load'):.2f} | {calls:.0f} "
                        f"| {calls * med('numpy_cpu'):.1f} |")
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tiering")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per program (median)")
    parser.add_argument("--write", action="store_true", help=f"write the table into {RESULTS.name}")
    parser.add_argument("--programs", nargs="+", choices=PROGRAMS, default=PROGRAMS)
    parser.add_argument("--calls", type=float, metavar="SECONDS",
                        help="instead: each program's first calls for SECONDS, from an empty cache")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT",
                        help="with --calls: also measure the pullback of another checkout (its benchmarks too)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--calls-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child or args.calls_child:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
        print(json.dumps(measure(args.child) if args.child else calls(args.calls_child[0],
                                                                        float(args.calls_child[1]))))
        return
    if args.calls:
        trees = {"this checkout": Path(__file__).parents[1]}
        if args.against:
            trees = {f"{args.against}": args.against.resolve(), **trees}
        rows = calls_table(args.calls, trees, tuple(args.programs))
        section = [CALLS_HEADING, "", f"`python -m benchmarks.tiering --calls {args.calls:g}"
                   + (f" --against {args.against}" if args.against else "") + f"` on {platform.machine()}; load "
                   f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when written. One fresh process per "
                   "row, each with an empty Numba cache, calling value and gradient under `compile=\"auto\"` as that "
                   "checkout ships it, for the seconds given and until 1,000 calls have run, 30 of them since the "
                   "loops came in (up to three times the seconds).", "", *rows]
        _show(section, CALLS_HEADING, args.write)
        return
    rows = table(args.repeats, tuple(args.programs))
    section = [HEADING, "", f"`python -m benchmarks.tiering --repeats {args.repeats}` on {platform.machine()}, "
               f"Python {platform.python_version()}, NumPy {np.__version__}; load average "
               f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when written. Medians over fresh processes, "
               "each with an empty Numba cache; value and gradient per call. Wall-clock seconds, CPU seconds in "
               "parentheses (steadier on a shared machine); the break-even is in CPU seconds: the compile's over "
               "the CPU a compiled call saves.", "", *rows]
    _show(section, HEADING, args.write)


def _show(section: list[str], heading: str, write: bool) -> None:
    """Print ``section``; with ``--write``, put it in RESULTS.md under ``heading`` too."""
    print("\n".join(section))
    if write:
        replace_section(RESULTS, heading, section)
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
