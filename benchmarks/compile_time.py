"""``python -m benchmarks.compile_time [--quick] [--write]``: first-call time against program length.

The first call of ``pb.grad(f)(x)`` traces, differentiates (jvp, partial_eval, transpose),
optimises (simplify, cse, dce), sinks residuals, plans memory, names, prints and compiles. Every
stage should be linear in the number of equations, so the time per equation should stay flat as
programs grow. Two programs, their Python loops left unrolled (``reroll=False``): an elementwise
chain (``x = np.sin(x) * .9 + .1 * x``, four equations per step) of 1k, 10k and 100k equations, and
the Kalman filter of ``examples/kalman_filter.py`` unrolled (its Python-loop version) over 30, 100,
300 and 1,000 steps. Then the same Kalman loop as users get it, rerolled into a scan
(``transforms/reroll.py``), at 30 to 10,000 steps: there the equations counted are the rerolled
program's. Each size runs in a fresh process, after a small warm-up gradient so that one-time imports
are not counted. Times are wall-clock and the process's CPU time (steadier on a shared machine). For
the largest size of each program, a second run splits the time by stage (each stage's own time,
stages inside it excluded).
``--write`` puts the tables in benchmarks/RESULTS.md under their own heading.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "RESULTS.md"
HEADING = "## compile time against program length (first call of the gradient)"
CHAIN_EQNS = [1_000, 10_000, 100_000]
KALMAN_STEPS = [30, 100, 300, 1_000]
REROLLED_STEPS = [30, 300, 1_000, 10_000]
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

    @contextlib.contextmanager
    def installed(self):
        """Wrap the stages where their callers look them up; undo on exit."""
        from pullback.api import stages as ad
        from pullback.api import transforms as api
        from pullback.backends import codegen, compiler, memory, render
        from pullback.opt import simplify

        patches = [(api, "trace", "trace"), (ad, "jvp", "jvp"),
                   (ad, "partial_eval", "partial_eval"), (ad, "transpose", "transpose"), (ad, "simplify", "simplify"),
                   (api, "reroll", "reroll"), (ad, "cse", "cse"), (ad, "dce", "dce"), (ad, "structure", "structure"),
                   (ad, "reorder_contractions", "contraction order"), (simplify, "dce", "dce"), (ad, "sink", "sink"),
                   (codegen, "generate", "naming and emitters"), (memory, "plan", "memory planning"),
                   (render, "body", "printing (render)"), (compiler, "compile", "compile()")]
        saved = []
        for module, attr, stage in patches:
            had = attr in vars(module)
            saved.append((module, attr, had, vars(module).get(attr)))
            setattr(module, attr, self.wrap(stage, getattr(module, attr) if had else compile))
        try:
            yield self
        finally:
            for module, attr, had, old in reversed(saved):
                if had:
                    setattr(module, attr, old)
                else:
                    delattr(module, attr)


def measure(kind: str, size: int, stages: bool) -> dict:
    """In this (fresh) process: the first call's time, and the equation counts."""
    import pullback as pb

    pb.grad(lambda x: np.sum(np.sin(x) * x))(np.ones(2))  # warm-up: imports and caches of a tiny program
    fn, args, argnums = PROBLEMS[kind](size)
    g = pb.differentiate(fn, argnums=argnums, reroll=REROLL[kind])
    clock = StageClock()
    with clock.installed() if stages else contextlib.nullcontext():
        wall, cpu = time.perf_counter(), time.process_time()
        g.value_and_grad(*args)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"wall": wall, "cpu": cpu, "primal_eqns": len(g.ir(*args, stage="primal").eqns),
            "grad_eqns": len(g.ir(*args, stage="grad").eqns), "lines": len(g.source(*args).splitlines()),
            "stages": clock.spent}


def child_run(kind: str, size: int, stages: bool) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.compile_time", "--child", kind, str(size)] + (["--stages"] if stages
                                                                                             else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(kind: str, sizes: list[int]) -> tuple[list[str], dict]:
    label = {"chain": "equations (traced)", "kalman": "steps", "rerolled": "steps"}[kind]
    rows = [f"| {label} | primal eqns | gradient eqns | printed lines | first call, s | CPU, s "
            "| CPU per primal eqn, us | CPU per gradient eqn, us |", "|---|---|---|---|---|---|---|---|"]
    last = {}
    for size in sizes:
        r = child_run(kind, size, stages=False)
        rows.append(f"| {size:,} | {r['primal_eqns']:,} | {r['grad_eqns']:,} | {r['lines']:,} | {r['wall']:.2f} "
                    f"| {r['cpu']:.2f} | {r['cpu'] / r['primal_eqns'] * 1e6:.0f} "
                    f"| {r['cpu'] / r['grad_eqns'] * 1e6:.0f} |")
        print(rows[-1], flush=True)
        last = r
    return rows, last


def stage_rows(kind: str, size: int) -> list[str]:
    r = child_run(kind, size, stages=True)
    total = r["cpu"]
    rows = [f"Stages at {size:,} ({'equations' if kind == 'chain' else 'steps'}), each stage's own CPU time "
            f"(total {total:.2f} s with the clocks in place):", "", "| stage | CPU, s | share |", "|---|---|---|"]
    spent = dict(sorted(r["stages"].items(), key=lambda kv: -kv[1]))
    spent["other (api glue, value_and_grad's seeding, running the result)"] = max(
        0.0, total - sum(spent.values()))
    rows += [f"| {stage} | {s:.2f} | {s / total:.0%} |" for stage, s in spent.items()]
    for row in rows:
        print(row, flush=True)
    return rows


def write(section: list[str]) -> None:
    """Replace (or add) this benchmark's section of RESULTS.md, keeping the rest."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    block = "\n".join(section) + "\n"
    pattern = re.compile(re.escape(HEADING) + r".*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: block + "\n", text, count=1)
    else:
        marker = "## Discussion"
        text = text.replace(marker, block + "\n" + marker, 1) if marker in text else text.rstrip("\n") + "\n\n" + block
    RESULTS.write_text(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_time")
    parser.add_argument("--quick", action="store_true", help="the two smaller sizes of each program")
    parser.add_argument("--write", action="store_true", help=f"write the tables into {RESULTS.name}")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--stages", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
        print(json.dumps(measure(args.child[0], int(args.child[1]), args.stages)))
        return
    sizes = QUICK if args.quick else {"chain": CHAIN_EQNS, "kalman": KALMAN_STEPS, "rerolled": REROLLED_STEPS}
    section = [HEADING, "", f"`python -m benchmarks.compile_time{' --quick' if args.quick else ''}` on "
               f"{platform.machine()}, Python {platform.python_version()}: a fresh process per size; wall time and "
               "the process's CPU time of the first `value_and_grad` call (trace, transforms, printing, compiling "
               f"and one run). Load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when the run "
               "started: on a shared machine the CPU time is the steadier measure. Targets: CPU per equation flat "
               "within 1.5x from 1k to 100k equations; the Kalman filter at 300 steps under 3 s.", ""]
    for kind, title in (("chain", "elementwise chain `x = np.sin(x) * .9 + .1 * x`, `reroll=False`"),
                        ("kalman", "Kalman filter (examples/kalman_filter.py), unrolled, `reroll=False`"),
                        ("rerolled", "the same Python loop as a user gets it: rerolled into a scan (the default)")):
        print(f"\n{title}", flush=True)
        rows, _ = table(kind, sizes[kind])
        section += [f"{title}:", "", *rows, "", *stage_rows(kind, sizes[kind][-1]), ""]
    if args.write:
        write(section)
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
