"""``python -m benchmarks.compile_time [--quick] [--max N] [--write]``: first-call time and memory by length.

The first call of ``pb.grad(f)(x)`` traces, differentiates (jvp, partial_eval, transpose),
optimises (simplify, cse, dce), sinks residuals, plans memory, names, prints and compiles. Every
stage should be linear in the number of equations, so the time per equation should stay flat as
programs grow. Two programs, their Python loops left unrolled (``reroll=False``): an elementwise
chain (``x = np.sin(x) * .9 + .1 * x``, four equations per step) of 100 to 100k equations (to 10^6 with
``--max 1000000``: the chain traces at a few us per equation of Python, so the tracer is not the limit), and
the Kalman filter of ``examples/kalman_filter.py`` unrolled (its Python-loop version) over 30, 100,
300 and 1,000 steps. Then the same Kalman loop as users get it, rerolled into a scan
(``transforms/reroll.py``), at 30 to 10,000 steps: there the equations counted are the rerolled
program's. Each size runs in a fresh process, after a small warm-up gradient so that one-time imports
are not counted. Times are wall-clock and the process's CPU time (steadier on a shared machine). For
the largest size of each program, a second run splits the time by stage (each stage's own time,
stages inside it excluded). Memory is the process's peak resident size during the first call above
its size before it, per equation: what building and compiling the program holds at its peak.
``--write`` puts the tables in benchmarks/RESULTS.md under their own heading.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import replace_section

RESULTS = Path(__file__).parent / "RESULTS.md"
HEADING = "## compile time against program length (first call of the gradient)"
CHAIN_EQNS = [100, 1_000, 10_000, 100_000]
KALMAN_STEPS = [30, 100, 300, 1_000]
REROLLED_STEPS = [30, 300, 1_000, 10_000]
WORK_MAX = 100_000  # counting calls costs a third more: not above this size
QUICK = {"chain": [1_000, 10_000], "kalman": [30, 100], "rerolled": [30, 300]}


def chain_problem(n_eqns: int):
    steps = n_eqns // 4

    def chain(x):
        for _ in range(steps):
            x = np.sin(x) * 0.9 + 0.1 * x
        return np.sum(x)

    return chain, (np.linspace(0.1, 0.9, 3),), 0


def kalman_problem(steps: int):
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    import kalman_filter as kf

    A, B, v = kf.simulate(steps)
    unrolled = getattr(kf, "kalman_nll_unrolled", kf.kalman_nll)  # the Python loop, traced step by step
    return unrolled, (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2)), (0, 1, 2, 3)


PROBLEMS = {"chain": chain_problem, "kalman": kalman_problem, "rerolled": kalman_problem}
# the straight-line pipeline (every stage linear in the equations) is measured with the loops left
# unrolled; "rerolled" is the same Kalman filter as a user gets it, its loop made a scan again
REROLL = {"chain": False, "kalman": False, "rerolled": True}


# (module, attribute, stage): the functions each stage's callers look up, wrapped where they look them up
STAGES = [("api", "trace", "trace"), ("ad", "jvp", "jvp"), ("ad", "partial_eval", "partial_eval"),
          ("ad", "transpose", "transpose"), ("pipeline", "simplify", "simplify"), ("api", "reroll", "reroll"),
          ("ad", "cse", "cse"), ("ad", "dce", "dce"), ("pipeline", "cse", "cse"), ("pipeline", "dce", "dce"),
          ("pipeline", "structure", "structure"), ("pipeline", "reorder_contractions", "contraction order"),
          ("simplify", "dce", "dce"), ("ad", "sink", "sink"),
          ("codegen", "generate", "naming and emitters"), ("memory", "plan", "memory planning"),
          ("render", "body", "printing (render)"), ("compiler", "compile", "compile()")]


@contextlib.contextmanager
def stages_wrapped(wrap):
    """Each stage's function replaced by ``wrap(stage, fn)`` where its callers look it up; undone on exit."""
    from pullback.api import stages as ad
    from pullback.api import transforms as api
    from pullback.backends import codegen, compiler, memory, render
    from pullback.opt import pipeline, simplify

    modules = {"api": api, "ad": ad, "pipeline": pipeline, "simplify": simplify, "codegen": codegen,
               "compiler": compiler, "memory": memory, "render": render}
    saved = []
    for name, attr, stage in STAGES:
        module = modules[name]
        had = attr in vars(module)
        saved.append((module, attr, had, vars(module).get(attr)))
        setattr(module, attr, wrap(stage, getattr(module, attr) if had else compile))
    try:
        yield
    finally:
        for module, attr, had, old in reversed(saved):
            if had:
                setattr(module, attr, old)
            else:
                delattr(module, attr)


class StageClock:
    """Each stage's own CPU time: a stage called inside another is subtracted from the outer one."""

    def __init__(self):
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list] = []

    def wrap(self, stage: str, fn):
        def timed(*args, **kwargs):
            frame = [time.process_time(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                total = time.process_time() - frame[0]
                self.spent[stage] = self.spent.get(stage, 0.0) + total - frame[1]
                self.calls[stage] = self.calls.get(stage, 0) + 1
                if self._stack:
                    self._stack[-1][1] += total

        return timed

    def installed(self):
        return stages_wrapped(self.wrap)


class WorkCount:
    """Each stage's own work, counted rather than timed: the Python functions it calls (``sys.setprofile``'s
    call events, builtins' too), a stage inside another counted as its own. Machine speed and load
    cannot change it, so per equation it shows a stage that grows faster than the program exactly."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self._stack: list[str] = ["other"]

    def wrap(self, stage: str, fn):
        def counted(*args, **kwargs):
            self._stack.append(stage)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()

        return counted

    def _event(self, frame, event, arg) -> None:
        if event == "call" or event == "c_call":
            stage = self._stack[-1]
            self.calls[stage] = self.calls.get(stage, 0) + 1

    @contextlib.contextmanager
    def installed(self):
        with stages_wrapped(self.wrap):
            sys.setprofile(self._event)
            try:
                yield self
            finally:
                sys.setprofile(None)


def measure(kind: str, size: int, stages: str | None) -> dict:
    """In this (fresh) process: the first call's time, and the equation counts; ``stages``: "time" (each
    stage's own CPU time) or "work" (each stage's own function calls, ``WorkCount``)."""
    import pullback as pb

    pb.grad(lambda x: np.sum(np.sin(x) * x))(np.ones(2))  # warm-up: imports and caches of a tiny program
    fn, args, argnums = PROBLEMS[kind](size)
    g = pb.differentiate(fn, argnums=argnums, reroll=REROLL[kind],
                         first_call=os.environ.get("PULLBACK_BENCH_FIRST_CALL", "compiled"))
    probe = {"time": StageClock, "work": WorkCount}[stages]() if stages else None
    before = resident_bytes()
    with probe.installed() if probe is not None else contextlib.nullcontext():
        wall, cpu = time.perf_counter(), time.process_time()
        g.value_and_grad(*args)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return {"wall": wall, "cpu": cpu, "peak_bytes": peak, "primal_eqns": len(g.ir(*args, stage="primal").eqns),
            "grad_eqns": len(g.ir(*args, stage="grad").eqns), "lines": len(g.source(*args).splitlines()),
            "stages": (probe.spent if stages == "time" else probe.calls) if probe is not None else {}}


def resident_bytes() -> int:
    """The process's resident size now (Linux's /proc; the peak so far elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_run(kind: str, size: int, stages: str | None = None) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.compile_time", "--child", kind, str(size)] + (
        ["--stages", stages] if stages else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(kind: str, sizes: list[int]) -> tuple[list[str], dict]:
    label = {"chain": "equations (traced)", "kalman": "steps", "rerolled": "steps"}[kind]
    rows = [f"| {label} | primal eqns | gradient eqns | printed lines | first call, s | CPU, s "
            "| CPU per primal eqn, us | CPU per gradient eqn, us | peak memory, MB | bytes per primal eqn |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    last = {}
    for size in sizes:
        r = child_run(kind, size)
        rows.append(f"| {size:,} | {r['primal_eqns']:,} | {r['grad_eqns']:,} | {r['lines']:,} | {r['wall']:.2f} "
                    f"| {r['cpu']:.2f} | {r['cpu'] / r['primal_eqns'] * 1e6:.0f} "
                    f"| {r['cpu'] / r['grad_eqns'] * 1e6:.0f} | {r['peak_bytes'] / 2**20:.0f} "
                    f"| {r['peak_bytes'] / r['primal_eqns']:,.0f} |")
        print(rows[-1], flush=True)
        last = r
    return rows, last


OTHER = "other (api glue, value_and_grad's seeding, running the result)"


def per_equation_rows(kind: str, sizes: list[int], stages: str) -> list[str]:
    """Each stage's own cost per primal equation at every size, and the largest over the smallest: 1.0 is
    flat (linear in the program). ``stages="time"``: CPU us (the clocks in place); "work": function calls."""
    runs = {size: child_run(kind, size, stages) for size in sizes}
    per: dict[str, list[float]] = {}
    for k, size in enumerate(sizes):
        r = runs[size]
        spent = dict(r["stages"])
        if stages == "time":
            spent[OTHER] = max(0.0, r["cpu"] - sum(spent.values()))
        else:
            spent[OTHER] = spent.pop("other", 0)
        spent["total"] = (r["cpu"] if stages == "time" else sum(spent.values()))
        for stage, v in spent.items():
            per.setdefault(stage, [0.0] * len(sizes))[k] = v / r["primal_eqns"] * (1e6 if stages == "time" else 1)
    unit = "CPU us" if stages == "time" else "function calls"
    label = "equations" if kind == "chain" else "steps"
    rows = [f"| stage: {unit} per primal equation, at {label} | " + " | ".join(f"{n:,}" for n in sizes)
            + " | largest / smallest |", "|---|" + "---|" * (len(sizes) + 1)]
    order = sorted(per, key=lambda st: (st == "total", -per[st][-1]))
    for stage in order:
        v = per[stage]
        ratio = f"{v[-1] / v[0]:.2f}" if v[0] > (0.5 if stages == "time" else 5) else "(small)"
        rows.append(f"| {stage} | " + " | ".join(f"{x:.1f}" if stages == "time" else f"{x:.0f}" for x in v)
                    + f" | {ratio} |")
    for row in rows:
        print(row, flush=True)
    return rows


def stage_rows(kind: str, size: int) -> list[str]:
    r = child_run(kind, size, "time")
    total = r["cpu"]
    rows = [f"Stages at {size:,} ({'equations' if kind == 'chain' else 'steps'}), each stage's own CPU time "
            f"(total {total:.2f} s with the clocks in place):", "", "| stage | CPU, s | share |", "|---|---|---|"]
    spent = dict(sorted(r["stages"].items(), key=lambda kv: -kv[1]))
    spent[OTHER] = max(0.0, total - sum(spent.values()))
    rows += [f"| {stage} | {s:.2f} | {s / total:.0%} |" for stage, s in spent.items()]
    for row in rows:
        print(row, flush=True)
    return rows


def write(section: list[str]) -> None:
    """Replace (or add) this benchmark's section of RESULTS.md, keeping the rest."""
    replace_section(RESULTS, HEADING, section)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_time")
    parser.add_argument("--quick", action="store_true", help="the two smaller sizes of each program")
    parser.add_argument("--max", type=int, default=CHAIN_EQNS[-1], metavar="N",
                        help="the chain at every power of ten up to N equations (10^6: minutes, GBs)")
    parser.add_argument("--write", action="store_true", help=f"write the tables into {RESULTS.name}")
    parser.add_argument("--first-call", choices=("compiled", "eager", "auto"), default="compiled",
                        help="first_call: the whole pipeline (default) or the eager walk (api/eager.py)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--stages", choices=["time", "work"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
        print(json.dumps(measure(args.child[0], int(args.child[1]), args.stages)))
        return
    os.environ["PULLBACK_BENCH_FIRST_CALL"] = args.first_call  # read by the child processes
    sizes = QUICK if args.quick else {"chain": CHAIN_EQNS, "kalman": KALMAN_STEPS, "rerolled": REROLLED_STEPS}
    if args.max > CHAIN_EQNS[-1]:
        extra = [10**k for k in range(len(str(CHAIN_EQNS[-1])), len(str(args.max)))]
        sizes = {**sizes, "chain": [*sizes["chain"], *extra]}
    section = [HEADING, "", f"`python -m benchmarks.compile_time{' --quick' if args.quick else ''}"
               f"{f' --max {args.max}' if args.max > CHAIN_EQNS[-1] else ''}"
               f"{f' --first-call {args.first_call}' if args.first_call != 'compiled' else ''}` on "
               f"{platform.machine()}, Python {platform.python_version()}: a fresh process per size; wall time and "
               "the process's CPU time of the first `value_and_grad` call (trace, transforms, printing, compiling "
               f"and one run). Load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when the run "
               "started: on a shared machine the CPU time is the steadier measure, and the function calls each "
               "stage makes (`WorkCount`) the exact one. Targets: cost per equation flat "
               "within 1.5x from 1k to 100k equations; the Kalman filter at 300 steps under 3 s.", ""]
    for kind, title in (("chain", "elementwise chain `x = np.sin(x) * .9 + .1 * x`, `reroll=False`"),
                        ("kalman", "Kalman filter (examples/kalman_filter.py), unrolled, `reroll=False`"),
                        ("rerolled", "the same Python loop as a user gets it: rerolled into a scan (the default)")):
        print(f"\n{title}", flush=True)
        rows, _ = table(kind, sizes[kind])
        section += [f"{title}:", "", *rows, ""]
        if kind == "rerolled":  # the rerolled program's length does not grow: its stages at the largest size
            section += [*stage_rows(kind, sizes[kind][-1]), ""]
            continue
        work_sizes = [n for n in sizes[kind] if n <= WORK_MAX]
        section += ["Each stage's own CPU time per primal equation, with the clocks in place:", "",
                    *per_equation_rows(kind, work_sizes, "time"), "",
                    "Each stage's own function calls per primal equation (Python's and builtins'; exact):", "",
                    *per_equation_rows(kind, work_sizes, "work"), ""]
    if args.write:
        write(section)
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
