"""The first call's work is linear in the program, stage by stage: counted (each stage's own function
calls, ``benchmarks.compile_time.WorkCount``), not timed, so neither the machine's speed nor its load
can hide a stage that grows faster than the program."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb
from benchmarks import compile_time as ct

# function calls per primal equation of the whole first call, counted on the chain at 800 equations: a
# budget that says when a change makes every equation dearer (1,420 before issue 29's work, 1,100 after
# its first pass, 1,200 once printing grew, 1,102 after its second pass, 1,133 since; then cut by printing
# from templates, whole-program passes that return at once where their triggers are absent, a leaner trace,
# jvp and transpose, and a simplifier that visits only what changed and tries only the rules an operand can
# trigger: 588; then 303, by a namer and emitters that skip what cannot apply, a lean emit path for jvp
# and transpose, Params shared per kind of equation in the trace, and cheaper simplifier bookkeeping; then
# 262, by passes keyed by the Vars themselves, CSEs that key only what changed since the last, and fewer
# objects per equation in sink and memory planning; the 10x target is about 150). The suite prints
# NumPy programs (conftest): under the default ``compile="auto"`` the chain at 800 equations is a Numba loop.
CHAIN_CALLS_PER_EQN = 275


def work(kind: str, size: int) -> tuple[dict[str, int], int]:
    fn, args, argnums = ct.PROBLEMS[kind](size)
    g = pb.differentiate(fn, argnums=argnums, reroll=False, first_call="compiled")  # the whole pipeline
    counter = ct.WorkCount()
    with counter.installed():
        value, _ = g.value_and_grad(*args)
    assert np.isfinite(value)
    return counter.calls, len(g.ir(*args, stage="primal").eqns)


@pytest.mark.parametrize("kind, n", [("chain", 100), pytest.param("kalman", 8, marks=pytest.mark.slow)])
def test_no_stage_grows_faster_than_the_program(kind, n):
    work(kind, n)  # caches and imports of this kind of program: the first run's own
    (c1, e1), (c2, e2), (c4, e4) = work(kind, n), work(kind, 2 * n), work(kind, 4 * n)
    assert 1.9 < (e4 - e2) / (e2 - e1) < 2.1  # the programs themselves double
    for stage in set(c1) | set(c2) | set(c4):
        first = c2.get(stage, 0) - c1.get(stage, 0)
        second = c4.get(stage, 0) - c2.get(stage, 0)
        # linear: the second doubling adds twice what the first added; quadratic would add four times
        assert second <= 2.3 * first + 300, (stage, c1.get(stage), c2.get(stage), c4.get(stage))
    assert sum(c4.values()) / e4 <= 1.05 * sum(c2.values()) / e2


def test_first_call_work_per_equation_within_budget():
    work("chain", 50)
    calls, eqns = work("chain", 800)
    assert sum(calls.values()) / eqns <= CHAIN_CALLS_PER_EQN, dict(sorted(calls.items(), key=lambda kv: -kv[1]))
