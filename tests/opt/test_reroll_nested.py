"""Rerolling loops whose steps call helpers, hold inner loops and read several windows: autograd's
fluid and wing examples (``benchmarks/fluid_examples.py``) at small sizes, and small programs of
the same shapes. Oracles: the same function with ``reroll=False``, finite differences, autograd when
installed; the structure: the scans and their nesting, the printed loops; the log when a loop cannot
be rolled."""

import functools
import logging
import re

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb
import pullback.api.transforms
from benchmarks import fluid_examples as fe
from pullback.ir.verify import verify
from pullback.opt import reroll as rr
from pullback.primitives.control import scan_p

RNG = np.random.default_rng(1)


@pytest.fixture
def short_loops(monkeypatch):
    """Reroll loops of 3 steps or more, however small their body."""
    monkeypatch.setattr(pullback.api.transforms, "reroll", functools.partial(rr.reroll, min_steps=3, min_eqns=1))


def scans(program) -> list:
    return [e for e in program.eqns if e.prim is scan_p]


def assert_same(rolled, flat, args, rtol=1e-11):
    (v1, g1), (v2, g2) = rolled.value_and_grad(*args), flat.value_and_grad(*args)
    np.testing.assert_allclose(v1, v2, rtol=rtol, atol=1e-14)
    for a, b in zip(g1 if isinstance(g1, tuple) else (g1,), g2 if isinstance(g2, tuple) else (g2,)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-14)


def test_the_fluid_simulation_is_one_loop_over_its_steps_and_matches_unrolled_and_finite_differences():
    smoke, target = fe.fluid_data(12)
    f = fe.fluid_objective(np, smoke, target, steps=8)  # 8 steps of 3 advections and 10 Jacobi sweeps
    x = 0.3 * RNG.uniform(-1, 1, 2 * 12 * 12)  # no cell centre on a grid line: bilinear weights are smooth
    rolled = pb.differentiate(f)
    primal = verify(rolled.ir(x, stage="primal"))
    (loop,) = scans(primal)
    assert loop.params["length"] == 8 and len(primal.eqns) < 30
    verify(rolled.ir(x, stage="grad"))
    assert_same(rolled, pb.differentiate(f, reroll=False), (x,))
    check_grads(rolled.fn, (x,), modes=("rev",))
    source = rolled.source(x)
    assert "for t in range(8):" in source and "for t in range(7, -1, -1):" in source


def test_the_wing_nests_its_jacobi_sweeps_in_the_loop_over_steps():
    f, x = fe.wing_objective(np, steps=4), fe.wing_params()
    rolled = pb.differentiate(f)
    primal = verify(rolled.ir(x, stage="primal"))
    outer = [e for e in scans(primal) if e.params["length"] == 4]
    assert len(outer) == 1 and len(scans(primal)) == 2  # the sweeps of the projection before the loop; the loop
    (inner,) = scans(outer[0].params["body"])
    assert inner.params["length"] == 50  # all the sweeps: the first (of p = 0) folded in, p starting from 0
    verify(rolled.ir(x, stage="grad"))
    value, grad = rolled.value_and_grad(x)
    np.testing.assert_allclose(value, f(x), rtol=1e-12)
    check_grads(rolled.fn, (x,), modes=("rev",))
    autograd = pytest.importorskip("autograd")
    import autograd.numpy as anp

    v_ag, g_ag = autograd.value_and_grad(fe.wing_objective(anp, steps=4))(x)
    np.testing.assert_allclose(value, v_ag, rtol=1e-11)
    np.testing.assert_allclose(grad, g_ag, rtol=1e-9, atol=1e-14)


def cell(w, h, x):
    return np.tanh(w * h + x)


def test_a_step_calling_a_helper_twice_on_two_windows_of_two_arrays(short_loops):
    def f(w, X, Y):
        h = np.zeros(3)
        for t in range(X.shape[1]):
            h = cell(w, h, X[:, t]) + 0.5 * cell(w, np.roll(h, 1), Y[t])  # a column of X, a row of Y
        return np.sum(h ** 2)

    args = (0.7, RNG.standard_normal((3, 6)), RNG.standard_normal((6, 3)))
    rolled = pb.differentiate(f, argnums=(0, 1, 2))
    primal = verify(rolled.ir(*args, stage="primal"))
    assert [e.params["length"] for e in scans(primal)] == [5]  # h = 0 makes the first step differ
    assert_same(rolled, pb.differentiate(f, argnums=(0, 1, 2), reroll=False), args)
    check_grads(rolled.fn, args)


def test_an_inner_loop_in_each_step_nests(short_loops):
    def f(a, x):
        for _ in range(5):
            y = x
            for _ in range(4):
                y = 0.5 * np.sin(y) + a * y
            x = x + 0.1 * y
        return np.sum(x)

    args = (0.3, RNG.standard_normal(4))
    rolled = pb.differentiate(f, argnums=(0, 1))
    primal = verify(rolled.ir(*args, stage="primal"))
    (outer,) = scans(primal)
    assert outer.params["length"] == 5 and len(scans(outer.params["body"])) == 1
    assert_same(rolled, pb.differentiate(f, argnums=(0, 1), reroll=False), args)
    check_grads(rolled.fn, args)


def test_invariants_each_step_recomputes_are_hoisted_once(short_loops):
    mask = RNG.uniform(size=5)

    def f(m, x):
        for _ in range(6):
            x = np.tanh(x * (1 - m) + np.roll(1 - m, 1))  # 1 - m: invariant, computed twice a step
        return np.sum(x)

    args = (mask, RNG.standard_normal(5))
    rolled = pb.differentiate(f, argnums=(0, 1))
    primal = verify(rolled.ir(*args, stage="primal"))
    (loop,) = scans(primal)
    assert sum(e.prim.name == "sub" for e in primal.eqns) == 1  # 1 - m, once, before the loop
    assert not any(e.prim.name == "sub" for e in loop.params["body"].eqns)
    assert_same(rolled, pb.differentiate(f, argnums=(0, 1), reroll=False), args)


def test_rows_written_by_index_each_step_roll_into_the_loop(short_loops):
    def f(x, w):
        ys = np.zeros((7, 3))
        for t in range(7):
            x = np.tanh(w * x + 0.1)
            ys[t] = x  # row t of the result: written at the step's index
        return np.sum(ys * np.arange(1.0, 8.0)[:, None])

    args = (RNG.standard_normal(3), 0.9)
    rolled = pb.differentiate(f, argnums=(0, 1))
    primal = verify(rolled.ir(*args, stage="primal"))
    (loop,) = scans(primal)
    assert loop.params["length"] >= 6
    assert "dynamic_update_slice" in [e.prim.name for e in loop.params["body"].eqns]
    np.testing.assert_allclose(rolled(*args), f(*args), rtol=1e-13)
    assert_same(rolled, pb.differentiate(f, argnums=(0, 1), reroll=False), args)
    check_grads(rolled.fn, args)


def test_a_loop_that_cannot_roll_is_reported_in_the_log_with_the_reason(caplog):
    def f(x):
        ys = np.zeros((300, 3))
        for t in range(300):
            x = np.tanh(0.9 * x + 0.1)
            ys[t, :2] = x[:2]  # part of a row written by index: no loop made of it
        return np.sum(ys)

    x = RNG.standard_normal(3)
    with caplog.at_level(logging.INFO, logger="pullback"):
        program = pb.differentiate(f).ir(x, stage="primal")
    assert not scans(program)
    (message,) = [r.getMessage() for r in caplog.records if "not rolled" in r.getMessage()]
    assert "steps of" in message and "writes into an array at an index that changes each step" in message
    assert "test_reroll_nested.py" in message


def test_a_rolled_loop_is_not_reported(caplog):
    def f(x):
        for _ in range(300):
            x = np.tanh(0.9 * x + 0.1) + np.sin(x)
        return np.sum(x)

    with caplog.at_level(logging.INFO, logger="pullback"):
        program = pb.differentiate(f).ir(RNG.standard_normal(3), stage="primal")
    assert len(scans(program)) == 1
    assert not [r for r in caplog.records if "not rolled" in r.getMessage()]


def test_the_wings_jacobi_loops_carry_the_users_p_and_sum_cotangents_under_its_names():
    """The wing's Jacobi sweeps from ``p = np.zeros(...)``: each rolled loop (the projection before the
    steps, and one in each step) runs all 50 sweeps with the carry ``p`` (the first sweep's rolls
    of zeros folded in), no ``carry`` partway through a statement; the backward loops sum the cotangents
    of the rolls of ``open_`` as ``open__bar_sum...``. Gradient against finite differences."""
    f, x = fe.wing_objective(np, steps=2, rows=24, cols=24), fe.wing_params(24, 24)
    d = pb.differentiate(f, compile="numpy")
    src = d.source(x)
    loops = re.split(r"for t(?:_\d+)? in range\(50\):\n", src)[1:]
    assert len(loops) == 3, src  # the projection before the steps, and one in each of the 2 steps
    for loop in loops:
        first = [line.strip() for line in loop.splitlines() if not line.strip().startswith("#")][0]
        assert re.fullmatch(r"part_\d+ = p(_\d+)?\[:, 23:\]", first), loop[:300]
    assert "= carry / 4.0" not in src and "open__bar_sum" in src, src
    # the sums of ``1 - open_`` and ``den + 0.001`` (arithmetic on open_, not moves): named from their expressions
    assert "carry" not in src and "sub_open = 1.0 - open_\n" in src and "add_den = den + 0.001\n" in src, src
    assert re.search(r"\n +sub_open_bar_sum(_\d+)? = sub_open_bar_sum(_\d+)? \+ ", src), src
    direction = RNG.standard_normal(x.shape)
    eps = 1e-6
    fd = (f(x + eps * direction) - f(x - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(d.grad(x) @ direction, fd, rtol=1e-5)
