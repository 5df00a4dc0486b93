"""Rerolling: Python loops that tracing unrolled, made ``scan``s again. Oracles: the same function
with ``reroll=False`` (every step unrolled, the path the rest of the suite tests), NumPy, finite
differences; and the structure: one scan, a gradient whose size does not grow with the loop."""

import functools
import os
import re
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pullback.testing import check_grads

import pullback as pb
import pullback.api.transforms
from pullback.ir.verify import verify
from pullback.opt import reroll as rr
from pullback.primitives.control import scan_p
from tests.regressions.test_random_programs import examples, programs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import kalman_filter as kf  # noqa: E402

RNG = np.random.default_rng(0)


@pytest.fixture
def short_loops(monkeypatch):
    """Reroll loops of 3 steps or more, however small their body: the mechanism on small programs."""
    monkeypatch.setattr(pullback.api.transforms, "reroll", functools.partial(rr.reroll, min_steps=3, min_eqns=1))


def scans(program) -> int:
    return sum(e.prim is scan_p for e in program.eqns)


def agree(fn, args, argnums, rtol=1e-12):
    """Value and gradient of ``fn`` rerolled against the same function unrolled; the rerolled
    program verifies. Returns the rerolled ``differentiate``."""
    rolled = pb.differentiate(fn, argnums=argnums)
    flat = pb.differentiate(fn, argnums=argnums, reroll=False)
    verify(rolled.ir(*args, stage="primal"))
    verify(rolled.ir(*args, stage="grad"))
    (v1, g1), (v2, g2) = rolled.value_and_grad(*args), flat.value_and_grad(*args)
    np.testing.assert_allclose(v1, v2, rtol=rtol, atol=rtol)
    for a, b in zip(g1 if isinstance(g1, tuple) else (g1,), g2 if isinstance(g2, tuple) else (g2,)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    return rolled


def kalman_args(T):
    A, B, v = kf.simulate(T)
    return A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2)


def test_the_unrolled_kalman_filter_is_one_loop_and_matches_unrolled_and_scan():
    args = kalman_args(40)  # 1,500 equations: long enough for the default thresholds
    rolled = agree(kf.kalman_nll_unrolled, args, (0, 1, 2, 3))
    primal = rolled.ir(*args, stage="primal")
    assert scans(primal) == 1 and len(primal.eqns) < 80
    # the first step (t = 0: no prediction, nll from 0.0) is folded in: the loop starts from mu0 and S0 and
    # is cut after the update, the prediction ending each step (the last one's is computed and not read)
    assert next(e for e in primal.eqns if e.prim is scan_p).params["length"] == 40
    value, grads = rolled.value_and_grad(*args)
    v_scan, g_scan = kf.nll.value_and_grad(*args)
    np.testing.assert_allclose(value, v_scan, rtol=1e-12)
    for a, b in zip(grads, g_scan):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    source = rolled.source(*args)
    assert "for t in range(40):" in source and "for t in range(39, -1, -1):" in source
    assert "# kalman_filter.py" in source.split("for t in range(40):")[1]  # the user's lines, in the loop
    assert "mu_h = mu0" in source and "S_hh = S0" in source and "nll = np.float64(0.0)" in source
    # the step body once forward and once backward: one Cholesky, one error check, one transposed Cholesky
    assert source.count("dpotrf(") == 1 and source.count("if info") == 1 and source.count("dtrmm(") == 1


def test_the_gradient_does_not_grow_with_the_number_of_steps():
    sizes = {T: len(pb.differentiate(kf.kalman_nll_unrolled, argnums=(0, 1, 2, 3)).ir(*kalman_args(T), stage="grad")
                    .eqns) for T in (40, 120)}
    assert sizes[40] == sizes[120]


def test_short_loops_stay_unrolled_and_reroll_false_keeps_any_loop_unrolled():
    args = kalman_args(5)
    assert scans(pb.differentiate(kf.kalman_nll_unrolled).ir(*args, stage="primal")) == 0
    assert scans(pb.differentiate(kf.kalman_nll_unrolled, reroll=False).ir(*kalman_args(40), stage="primal")) == 0


def test_windows_along_another_axis_and_literals_that_change_each_step(short_loops):
    def f(w, X):
        h = np.zeros(3)
        for t in range(X.shape[1]):
            h = np.tanh(w * h + X[:, t]) + 0.01 * t  # a column per step; t a literal that changes
        return np.sum(h ** 2)

    args = (0.7, RNG.standard_normal((3, 6)))
    rolled = agree(f, args, (0, 1))
    assert scans(rolled.ir(*args, stage="primal")) == 1
    check_grads(rolled.fn, args, order=1)


def test_values_of_earlier_steps_read_after_the_loop_are_stacked(short_loops):
    def f(a, x):
        ys, last = [], None
        for _ in range(5):
            last = np.sin(x)  # read after the loop from the last step only: a carry starting from zeros
            x = a * x + last
            ys.append(x)
        return np.sum(np.stack(ys) * np.arange(1.0, 6.0)[:, None]) + np.sum(last)

    args = (0.8, RNG.standard_normal(4))
    rolled = agree(f, args, (0, 1))
    assert scans(rolled.ir(*args, stage="primal")) == 1
    np.testing.assert_allclose(rolled(*args), f(*args), rtol=1e-13)


def test_a_step_reading_two_steps_back_is_still_right(short_loops):
    def f(x):
        a, b = x, np.cos(x)
        for _ in range(8):
            a, b = b, np.sin(a) * 0.5 + b  # reads the value of two steps back through a swap: a carry pair
        return np.sum(b)

    x = RNG.standard_normal(3)
    agree(f, (x,), 0)
    np.testing.assert_allclose(pb.jit(f)(x), f(x), rtol=1e-13)


def test_loop_invariant_equations_are_hoisted_out_of_the_body(short_loops):
    """``np.exp(A)`` is the same every step: computed once before the loop. ``A.T`` is too, but a transpose
    (a free view) stays in the step as written, so that the backward loop sums ``A``'s cotangent in one
    accumulator (``A_bar_sum``), not one for ``A.T`` beside it, transposed after the loop."""
    def f(A, x):
        for _ in range(6):
            x = np.tanh(np.exp(A) @ x + A.T @ x)
        return np.sum(x)

    args = (RNG.standard_normal((3, 3)), RNG.standard_normal(3))
    rolled = agree(f, args, (0, 1))
    body = next(e for e in rolled.ir(*args, stage="primal").eqns if e.prim is scan_p).params["body"]
    assert [e.prim.name for e in body.eqns] == ["transpose", "dot_general", "dot_general", "add", "tanh"]
    src = rolled.source(*args)
    assert src.count("= np.exp(A)") == 1 and "A.T @ " in src.split("for t in range(6):")[1]
    assert len(re.findall(r"\bA_bar_sum = ", src)) == 2 and "_T = " not in src and "_T\n" not in src  # no A.T's sum
    # the hoisted np.exp(A), unnamed, is named from its expression, and its cotangent's sum after it
    assert "exp_A = np.exp(A)" in src and "exp_A_bar_sum = exp_A_bar_sum" not in src
    assert "carry" not in src and re.search(r"exp_A_bar_sum = .*dger\(1\.0, x_2, mul, a=exp_A_bar_sum", src)


def test_unnamed_invariants_and_their_sums_are_named_from_their_expressions(short_loops):
    """``1.0 - a`` and ``a + 0.5``, read each step and named by nobody: the loop reads ``sub_a`` and
    ``add_a``, and the backward loop sums their cotangents as ``sub_a_bar_sum`` and ``add_a_bar_sum``,
    not in ``carry`` and ``carry_1``."""
    def f(a, x):
        for _ in range(6):
            x = x * (1.0 - a) + np.sin(x) / (a + 0.5)
        return np.sum(x)

    args = (RNG.uniform(0.1, 0.5, 4), RNG.standard_normal(4))
    rolled = agree(f, args, (0, 1))
    src = rolled.source(*args)
    assert "sub_a = 1.0 - a\n" in src and "add_a = a + 0.5\n" in src and "carry" not in src
    assert "sub_a_bar_sum = sub_a_bar_sum + sub_a_bar\n" in src
    assert "add_a_bar_sum = add_a_bar_sum + add_a_bar\n" in src
    check_grads(f, args, order=1, modes=("rev",))  # against finite differences


def _python_loop(p, T, steps_in_xs):
    """``p`` stepped T times by a Python loop: its first input carried, its second (if any) one row
    of xs per step; each step's output also summed with the step's index as a weight."""
    inputs = [np.asarray(x) for x in p.inputs]
    xs = np.stack([inputs[1] * (1.0 + 0.1 * t) for t in range(T)]) if steps_in_xs and len(inputs) > 1 else None
    rest = inputs[2:] if xs is not None else inputs[1:]

    def unrolled(c, *args):
        xs_, others = (args[0], args[1:]) if xs is not None else (None, args)
        total = 0.0
        for t in range(T):
            out = p(c, *([xs_[t]] if xs_ is not None else []), *others)
            c = c * 0.5 + 0.1 * np.tanh(np.sum(out))
            total = total + np.sum(out) * (t + 1.0)
        out = np.sum(c) + total
        return np.real(out) + 0.5 * np.imag(out)

    return unrolled, (inputs[0], *([xs] if xs is not None else []), *rest)


@given(programs(dtypes=("float64", "complex128"), smooth=True, max_ops=4), st.integers(4, 7), st.booleans())
@examples(25)
def test_random_loops_rerolled_match_the_unrolled_program(p, T, steps_in_xs):
    unrolled, args = _python_loop(p, T, steps_in_xs)
    with np.errstate(all="ignore"):
        expected = unrolled(*args)
    if not np.all(np.isfinite(expected)):
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pullback.api.transforms, "reroll", functools.partial(rr.reroll, min_steps=3, min_eqns=1))
        rolled = pb.differentiate(unrolled, argnums=tuple(range(len(args))))
        primal = verify(rolled.ir(*args, stage="primal"))
        verify(rolled.ir(*args, stage="grad"))
        np.testing.assert_allclose(rolled(*args), expected, rtol=1e-9, atol=1e-9)
        g = rolled.grad(*args)
    assert scans(primal) >= 1  # at least the T - 1 copies after the first (its total starts from a literal)
    g_u = pb.differentiate(unrolled, argnums=tuple(range(len(args))), reroll=False).grad(*args)
    for a, b in zip(g, g_u):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9)


def test_arrays_from_the_users_scope_read_each_step(short_loops):
    """Tracing makes a new constant each time a step reads a NumPy array from the user's scope: a
    different row per step becomes a table the loop steps through; the same array, an invariant."""
    rows, index = RNG.standard_normal((6, 3)), np.array([0, 2, 1])

    def f(x):
        for t in range(6):
            x = np.tanh(x[index] * rows[t])  # rows[t] is a NumPy row, index the same array each step
        return np.sum(x)

    x = RNG.standard_normal(3)
    rolled = agree(f, (x,), 0)
    primal = rolled.ir(x, stage="primal")
    assert scans(primal) == 1
    assert [v.shape for v in primal.constvars if v.shape[:1] == (6,)] == [(6, 3)]  # rows: one table
    np.testing.assert_allclose(rolled(x), f(x), rtol=1e-13)


def _scan_length(program) -> int:
    return next(e for e in program.eqns if e.prim is scan_p).params["length"]


def test_a_first_step_fed_by_initial_values_is_folded_into_the_loop(short_loops):
    """Step 0 lacks the step's first equation (``u = a * x if t else x``) and reads the number 0.0 for the
    total: it is the loop's first step all the same, started from ``x0`` and 0 (no step printed before the
    loop); the last step's ``a * x``, which the program never computed, is computed and not read."""
    def f(a, x0, xs):
        x, total = x0, 0.0
        for t in range(6):
            u = a * x if t else x
            y = np.sin(u) + xs[t]
            total = total + np.sum(y * y)
            x = y
        return total

    args = (0.7, RNG.standard_normal(3), RNG.standard_normal((6, 3)))
    rolled = agree(f, args, (0, 1, 2))
    primal = rolled.ir(*args, stage="primal")
    assert scans(primal) == 1 and _scan_length(primal) == 6
    assert not any(e.prim.name == "sin" for e in primal.eqns)  # no step before the loop
    np.testing.assert_allclose(rolled(*args), f(*args), rtol=1e-13)
    check_grads(rolled.fn, args, order=1)
    code = [line for line in rolled.source(*args).splitlines() if not line.lstrip().startswith("#")]
    assert sum("np.sin(" in line for line in code) == 1  # the step once


def test_a_first_step_whose_missing_start_could_fail_stays_before_the_loop(short_loops):
    """Folding would compute the start of a step after the last (here a logarithm, which may warn): the
    first step stays before the loop, and the values are those of the unrolled program."""
    def f(a, x0):
        x = x0
        for t in range(6):
            u = np.log(a * x) if t else x
            x = np.sin(u) + 2.0
        return np.sum(x)

    args = (0.7, RNG.uniform(1.0, 2.0, 3))
    rolled = agree(f, args, (0, 1))
    primal = rolled.ir(*args, stage="primal")
    assert scans(primal) == 1 and _scan_length(primal) == 5
    check_grads(rolled.fn, args, order=1)


def test_what_a_first_step_computes_otherwise_stays_before_the_loop(short_loops):
    """Step 0 computes ``2 * x`` where later steps compute ``a * x``, on the same line: that product alone
    stays before the loop, which starts from it, ``a * x`` ending each of the 6 steps."""
    def f(a, x0):
        x = x0
        for t in range(6):
            x = np.sin(a * x if t else 2.0 * x) + 1.0
        return np.sum(x)

    args = (0.7, RNG.standard_normal(3))
    rolled = agree(f, args, (0, 1))
    primal = rolled.ir(*args, stage="primal")
    assert _scan_length(primal) == 6
    outside = [e.prim.name for e in primal.eqns if e.prim is not scan_p]
    assert "sin" not in outside and outside.count("mul") == 1  # 2.0 * x0
    np.testing.assert_allclose(rolled(*args), f(*args), rtol=1e-13)


def test_a_first_step_reading_rolls_of_zeros_as_fills_is_folded_in_with_the_users_carry(short_loops):
    """Tracing makes ``np.roll(np.zeros(n), 1)`` a fill, so step 0 of a Jacobi sweep from ``p = 0`` lacks
    the rolls of ``p``: the loop is cut where the statement ``p = (x + ...) / 4`` starts, not after its
    sum (which would carry that partial sum), and step 0 is folded in, the carry ``p`` starting from the
    fill: ``p = zeros`` before all 6 steps, no step before the loop, no ``carry`` in the source."""
    def f(x, w):
        p = np.zeros(x.shape)
        for _ in range(6):
            p = (x + np.roll(p, 1) + np.roll(p, -1)) / 4.0
            p = np.tanh(w * p)
        return np.sum(p ** 2)

    args = (np.array([0.5, -1.0, 2.0, 3.0, 0.1]), 0.8)
    rolled = agree(f, args, (0, 1))
    primal = rolled.ir(*args, stage="primal")
    assert scans(primal) == 1 and _scan_length(primal) == 6
    assert not any(e.prim.name in ("div", "tanh", "concatenate") for e in primal.eqns if e.prim is not scan_p)
    check_grads(rolled.fn, args, order=1)
    source = rolled.source(*args)
    before, loop = source.split("    for t in range(6):\n", 1)
    assert "\n    p = np.zeros((5,))\n" in before, before  # the zeros start the carry p alone: made as p
    statements = [line.strip() for line in loop.splitlines() if not line.strip().startswith("#")]
    assert statements[0] == "part = p[4:]", loop  # the step starts with the statement's first roll, of p
    assert "carry" not in source, source


def test_a_first_step_is_not_folded_where_the_last_steps_start_is_read_after_the_loop(short_loops):
    """Folded, the last step's ``u = a * x`` would end the step before it, and reading it after the loop
    would keep every step's ``u``: the first step stays before the loop instead."""
    def f(a, x0, xs):
        x = x0
        for t in range(6):
            u = a * x if t else x
            x = np.sin(u) + xs[t]
        return np.sum(u) + np.sum(x)

    args = (0.7, RNG.standard_normal(3), RNG.standard_normal((6, 3)))
    rolled = agree(f, args, (0, 1, 2))
    primal = rolled.ir(*args, stage="primal")
    assert _scan_length(primal) == 5
    assert not any(v.shape[:1] == (5,) or v.shape[:1] == (6,) for e in primal.eqns if e.prim is scan_p
                   for v in e.outputs)  # no stacked outputs


def test_a_last_step_without_the_steps_end_is_folded_into_the_loop(short_loops):
    """Cut so that ``u = a * x`` ends each step (the fewest values cross there), the loop's last step lacks
    it: the loop is all 6 steps all the same, the last one computing an ``a * x`` nothing reads."""
    def f(a, x0, xs):
        x = x0
        for t in range(6):
            u = a * x if t else x
            x = np.sin(u) + xs[t]
        return np.sum(x)

    args = (0.7, RNG.standard_normal(3), RNG.standard_normal((6, 3)))
    rolled = agree(f, args, (0, 1, 2))
    primal = rolled.ir(*args, stage="primal")
    assert scans(primal) == 1 and _scan_length(primal) == 6
    assert not any(e.prim.name == "sin" for e in primal.eqns)  # no step before or after the loop
    check_grads(rolled.fn, args, order=1)
