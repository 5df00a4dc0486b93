"""Each execution of a statement names its own values: an unrolled loop's steps print ``h``, ``h_1``, ...
(not ``tanh``, ``tanh_1``), and a rolled loop's carries and records take the body's names (``h``,
``h_steps``, ``h_bar``), not ``carry`` and ``y_steps``. The gradients stay those of the unrolled program
and of finite differences."""

import functools
import re

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb

RNG = np.random.default_rng(7)
W = 0.3 * RNG.standard_normal((4, 4))
X = RNG.standard_normal(4)


def tanh_rnn(steps):
    def f(W, x):
        h = x
        for _ in range(steps):
            h = np.tanh(W @ h)
        return np.sum(h ** 2)
    return f


def _step(W, h):
    return np.tanh(W @ h)


def helper_rnn(steps):
    def f(W, x):
        h = x
        for _ in range(steps):
            h = _step(W, h)
        return np.sum(h ** 2)
    return f


def oscillator(steps):
    def f(W, x):
        v = W @ x
        for _ in range(steps):
            x, v = x + 0.01 * v, v - 0.01 * x
        return np.sum(x ** 2) + np.sum(v)
    return f


def swapped(steps):
    def f(W, x):
        a, b = x, W @ x
        for _ in range(steps):
            a, b = np.tanh(W @ b), np.sin(a)
        return np.sum(a * b)
    return f


def _names(src: str) -> set[str]:
    return set(re.findall(r"^\s*(\w+)(?:, \w+)* = ", src, re.M)) | set(re.findall(r"^\s*\w+, (\w+) = ", src, re.M))


@pytest.mark.parametrize("make, names", [
    (tanh_rnn, ["h"]), (helper_rnn, ["h"]), (oscillator, ["x", "v"]), (swapped, ["a", "b"])])
def test_an_unrolled_loop_names_every_step(make, names):
    f = make(200)  # below reroll's MIN_EQNS: unrolled
    src = pb.differentiate(f).source(W, X)
    assert "for " not in src
    for name in names:  # each of the 200 steps makes its own: name, name_1, ... (some may be freed or fused)
        made = [n for n in _names(src) if re.fullmatch(rf"{name}(_\d+)?", n)]
        assert len(made) >= 150, (name, len(made))
    assert not re.search(r"\btanh_\d+ = ", src)  # (the forward steps; the backward's adds are sums of cotangents)


@pytest.mark.parametrize("make, carries", [
    (tanh_rnn, ["h"]), (helper_rnn, ["h"]), (oscillator, ["x", "v"]), (swapped, ["a", "b"])])
def test_a_rolled_loop_names_its_carries_after_the_users_variables(make, carries):
    f = make(1000)
    rolled = pb.differentiate(f, compile="numpy")
    src = rolled.source(W, X)
    assert "for t in range(1000):" in src or "for _ in range(1000):" in src
    assert "carry" not in src and "y_steps" not in src
    names = _names(src)
    for c in carries:
        assert f"{c}_bar" in names or f"{c}_bar_1" in names, (c, sorted(names))
        assert re.search(rf"\b{c}(_\d+)? = ", src), c
    unrolled = pb.differentiate(f, reroll=False, compile="numpy")
    for a, b in zip(rolled.grad(W, X), unrolled.grad(W, X)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_the_rolled_rnn_records_its_carry_as_h_steps_and_matches_finite_differences():
    f = tanh_rnn(1000)
    rolled = pb.differentiate(f, compile="numpy")
    src = rolled.source(W, X)
    assert "h = x" in src and "h_steps[t] = h" in src and "h_bar = W.T @ " in src
    check_grads(rolled.fn, (W, X), modes=("rev",))


def test_statements_named_once_per_execution_in_the_ir():
    """A statement of several lines, one call making several equations (``np.linalg.solve``) and a call
    made several times within one execution (``functools.reduce``) are each one execution; a
    comprehension's statement is never cut (its steps run within one execution)."""
    def multiline(x):
        p = x
        for _ in range(3):
            p = (np.sin(p)
                 + np.cos(p))
        return np.sum(p)

    def solve(A, x):
        h = x
        for _ in range(3):
            h = np.linalg.solve(A, h)
        return np.sum(h)

    def reduced(x):
        y = functools.reduce(np.add, [np.sin(x), x, x])
        return np.sum(y)

    def comprehension(x):
        s = np.stack([np.sin(r) for r in x])
        a, b = [np.cos(r) for r in (x, s)]
        return np.sum(a * b)

    x = np.linspace(0.1, 0.9, 4)

    def named(prog, prim=None):
        return [(e.prim.name, e.outputs[0].hint) for e in prog.eqns if prim is None or e.prim.name == prim]

    assert named(pb.make_ir(multiline)(x), "add") == [("add", "p")] * 3
    assert all(h == "" for p, h in named(pb.make_ir(multiline)(x)) if p in ("sin", "cos"))
    assert named(pb.make_ir(solve)(2 * np.eye(4), x), "reshape")[1::2] == [("reshape", "h")] * 3
    assert named(pb.make_ir(reduced)(x), "add") == [("add", ""), ("add", "y")]
    prog = pb.make_ir(comprehension)(x)
    assert all(h == "" for p, h in named(prog, "sin"))
    assert named(prog, "concatenate") == [("concatenate", "s")] and named(prog, "cos") == [("cos", "a"), ("cos", "b")]


def test_a_scalar_broadcast_in_a_rolled_step_sums_its_gradient_under_its_name():
    """``a * x`` in the step reads ``a`` broadcast, hoisted before the loop: the backward loop sums its
    cotangent as ``a_bar_sum``, not in a ``carry``."""
    def decay(a, x0):
        x = x0
        for _ in range(300):
            x = np.tanh(a * x) * np.exp(-0.01 * x)
        return np.sum(x)

    a, x0 = 0.7, np.linspace(0.1, 0.9, 50)
    d = pb.differentiate(decay, argnums=(0, 1), compile="numpy")
    src = d.source(a, x0)
    assert "for t in range(300):" in src and "carry" not in src
    assert re.search(r"a_bar(_\d+)? = np.sum\(a_bar_sum\)", src)
    for g, u in zip(d.grad(a, x0), pb.differentiate(decay, argnums=(0, 1), reroll=False).grad(a, x0)):
        np.testing.assert_allclose(g, u, rtol=1e-12, atol=1e-14)


def _zeros_and_sine(x):
    a = np.zeros(6)
    s = np.sin(x)
    return a.reshape(2, 3), s


def test_telling_executions_apart_keeps_no_finished_frame_alive():
    """A helper's array, returned as a view and filled in by its caller, is the caller's alone once the
    helper returns: the trace keeps no reference to the helper's frame (its locals) to tell executions apart."""
    def f(x):
        ys, s = _zeros_and_sine(x)
        ys[0] = s
        return np.sum(ys)

    np.testing.assert_allclose(pb.grad(f)(np.ones(3)), np.cos(np.ones(3)))


def test_a_rolled_loops_row_read_takes_the_users_name():
    """``row = xs[t]`` in a rolled loop: the body's row of ``xs`` is the user's ``row``, not ``x``."""
    def f(xs):
        acc = np.zeros(3)
        for t in range(xs.shape[0]):
            row = xs[t]
            acc = acc * 0.5 + row
        return np.sum(acc ** 2)

    xs = RNG.standard_normal((1200, 3))
    rolled = pb.differentiate(f, compile="numpy")
    src = rolled.source(xs)
    loop = src.split("for t in range(1199):\n", 1)[1]
    assert re.match(r"\s+row(_\d+)? = xs(_\d+)?\[t\]\n", loop), loop
    unrolled = pb.differentiate(f, reroll=False, compile="numpy")
    np.testing.assert_allclose(rolled.grad(xs), unrolled.grad(xs), rtol=1e-12, atol=1e-14)
    check_grads(rolled.fn, (xs,), modes=("rev",))


PERM = np.array([2, 0, 3, 1])


def permuted(steps):
    def f(x):
        for _ in range(steps):
            x = x[PERM]
        return np.sum(x * np.arange(1.0, 5.0))
    return f


def test_a_step_whose_only_operation_is_indexing_names_each_execution():
    """``x = x[perm]`` alone in a loop: each step's one equation is at the same instruction as the step
    before's, with no call between, so the subscript itself counts as a call (``frontend.construct.index``):
    every step names its ``x`` (not the last step's alone), and the rolled loop prints ``x = x[perm]`` with
    the user's ``x`` as its carry, from the parameter itself. Gradients: the unrolled ones, finite differences."""
    x = np.array([0.5, -1.0, 2.0, 0.25])
    prog = pb.make_ir(permuted(4))(x)
    assert [e.outputs[0].hint for e in prog.eqns if e.prim.name == "gather"] == ["x"] * 4
    f = permuted(1000)
    rolled = pb.differentiate(f, compile="numpy")
    src = rolled.source(x)
    assert re.search(r"for _ in range\(1000\):\n(\s+#.*\n)?\s+x = x\[PERM\]\n", src), src
    assert "carry" not in src and "x_1 = x\n" not in src, src
    unrolled = pb.differentiate(f, reroll=False, compile="numpy")
    np.testing.assert_allclose(rolled.grad(x), unrolled.grad(x), rtol=1e-12, atol=1e-14)
    check_grads(rolled.fn, (x,), modes=("rev",))


def alternating(steps):
    def f(x):
        for t in range(steps):
            x = np.tanh(0.5 * x) + 0.1 if t % 2 else np.sin(0.9 * x) - 0.1  # each branch its own function
        return np.sum(x ** 2)
    return f


def test_steps_alternating_branches_of_a_conditional_expression_name_their_own_values():
    """The branches of ``a if t % 2 else b`` are functions of their own (frontend.convert): a step taking
    the other branch enters other code, at its start. Going back into code left at a later place is
    another execution, so each step's last value is ``x`` (but the first: its branch was never left)."""
    x = np.linspace(0.1, 0.9, 4)
    prog = pb.make_ir(alternating(6))(x)
    last = [e.outputs[0].hint for e in prog.eqns if e.prim.name in ("add", "sub")]
    assert last == ["", "x", "x", "x", "x", "x"]
    f = alternating(800)  # rolled, as 400 steps of two: the carry and its cotangent are ``x``'s
    rolled = pb.differentiate(f, compile="numpy")
    src = rolled.source(x)
    assert "for t in range(400):" in src and "carry" not in src
    assert re.search(r"^ {8}x(_\d+)? = ", src, re.M) and re.search(r"^ {8}x_bar(_\d+)? = ", src, re.M), src
    h = 1e-6
    fd = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(rolled.grad(x), fd, rtol=1e-6, atol=1e-9)


def rotation(x):
    a, b, c = x, np.sin(x), np.cos(x)
    for _ in range(400):
        a, b, c = b, c, 0.4 * a + 0.3 * np.sin(b) + 0.3 * np.tanh(c)
    return np.sum(c * a)


def swapping(x):
    a, b = x, np.sin(x)
    for _ in range(400):
        a, b = b, 0.5 * a + 0.5 * np.sin(b)
    return np.sum(b)


@pytest.mark.parametrize("f, carries", [(swapping, "a, b"), (rotation, "a, b, c")])
def test_a_tuple_assignment_passing_values_on_carries_the_users_names(f, carries):
    """``a, b = b, f(a)``: ``a`` takes ``b``'s value, made by no equation; the rolled loop reads it a step
    after ``b`` read it, a carry the body passes on (``b, a = b_new, b``), named ``a`` by the statement."""
    x = np.array([0.1, 0.5, -0.3])
    d = pb.differentiate(f, compile="numpy")
    src = d.source(x)
    assert "for t in range(400):" in src and "carry" not in src, src
    names = carries.split(", ")
    assert all(re.search(rf"\b{n}(_\d+)?\b", src) and re.search(rf"\b{n}_bar(_\d+)?\b", src) for n in names), src
    h = 1e-6
    fd = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(d.grad(x), fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(d.grad(x), pb.differentiate(f, reroll=False).grad(x), rtol=1e-12, atol=1e-14)
