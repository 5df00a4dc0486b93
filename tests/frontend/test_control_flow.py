"""Python's ``if``, ``while``, ``for i in range(n)`` and ``a if c else b`` on traced values, converted
into ``cond``, ``while_loop`` and loops: values as Python computes them, derivatives as finite
differences give them, and the printed program showing ``if`` and ``while`` again."""

import numpy as np
import pytest
from pullback.testing import check_jvp, check_vjp

import pullback as pb


def _piecewise(x):
    if np.sum(x) > 0:
        y = np.sin(x) * 2.0
        z = y + 1.0
    else:
        y = np.cos(x)
        z = y * y
    return np.sum(y * z)


def _early_return(x):
    s = np.sum(x)
    if s > 1.0:
        return s ** 2
    t = np.exp(-s)
    return t * s


def _nested(x):
    total = 0.0
    if x[0] > 0:
        if x[1] > 0:
            total = total + np.sum(x ** 3)
        else:
            total = total - np.sum(x)
    return total + np.prod(x)


def _conditional_expression(x):
    return np.sum(np.tanh(x) if np.max(x) > 0.5 else x ** 2)


@pytest.mark.parametrize("f", [_piecewise, _early_return, _nested, _conditional_expression])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_branches_on_traced_values(f, sign):
    x = sign * np.array([0.7, 0.4, 1.1])
    np.testing.assert_allclose(pb.jit(f)(x), f.__wrapped__(x) if hasattr(f, "__wrapped__") else _eager(f, x),
                               rtol=1e-14)
    check_vjp(f, (x,))
    check_jvp(f, (x,))


def _eager(f, x):
    """``f`` run by Python itself: the conditions on NumPy values are Python's bools."""
    return f(x)


def test_the_printed_program_shows_the_if():
    src = pb.differentiate(_piecewise).source(np.ones(3))
    assert "if " in src and "else:" in src


def _fixed_point(a):
    x = 1.0
    while np.abs(np.cos(a * x) - x) > 1e-13:
        x = np.cos(a * x)
    return x


def _taylor_exp(x):
    term, total, n = 1.0, 1.0, 1
    while np.abs(term) > 1e-16:
        term = term * x / n
        total = total + term
        n = n + 1
    return total


def test_while_on_a_traced_condition():
    """A fixed point of cos(a x) and e^x summed until a term falls below a tolerance: values, and
    forward-mode derivatives (the implicit-function derivative; e^x itself)."""
    a = 0.5
    x = _fixed_point(a)
    assert pb.jit(_fixed_point)(a) == pytest.approx(x, abs=1e-12)
    _, dx = pb.jvp(_fixed_point, (a,), (1.0,))
    s = np.sin(a * x)
    assert dx == pytest.approx(-x * s / (1 + a * s), rel=1e-8)  # x = cos(a x)  =>  x' = -x s / (1 + a s)
    for v in (-2.0, 0.3, 1.7):
        value, derivative = pb.jvp(_taylor_exp, (v,), (1.0,))
        assert value == pytest.approx(np.exp(v), rel=1e-14) and derivative == pytest.approx(np.exp(v), rel=1e-13)
    assert "while " in pb.jit(_taylor_exp).source(0.3)
    assert pb.grad(_fixed_point)(a) == pytest.approx(-x * s / (1 + a * s), rel=1e-8)  # reverse mode too
    for v in (-2.0, 0.3, 1.7):
        assert pb.grad(_taylor_exp)(v) == pytest.approx(np.exp(v), rel=1e-13)
    src = pb.differentiate(_fixed_point).source(a)
    assert "while " in src and "x_steps.append(" in src  # the loop's variable keeps the user's name


def test_for_over_a_traced_range():
    def f(x, n):
        acc = np.zeros_like(x)
        for i in range(n):
            acc = acc + x * i
        return np.sum(acc)

    for n in (0, 1, 4):
        assert pb.jit(f)(np.ones(2), n) == 2.0 * sum(range(n))
        _, t = pb.jvp(lambda x, n=n: f(x, n), (np.ones(2),), (np.ones(2),))
        assert t == 2.0 * sum(range(n))
        np.testing.assert_allclose(pb.grad(f)(np.ones(2), n), np.full(2, float(sum(range(n)))))


def test_conditions_known_when_tracing_stay_pythons():
    """A condition on shapes or Python values runs as Python's own ``if``: one branch traced."""
    def f(x, flag=True):
        if x.shape[0] > 2 and flag:
            out = np.sum(x[:2])
        else:
            out = np.sum(x)
        for i in range(x.shape[0]):
            out = out + x[i]
        return out

    assert pb.make_ir(f)(np.ones(3)).eqns and "if " not in pb.jit(f).source(np.ones(3))
    assert pb.jit(f)(np.arange(3.0)) == f(np.arange(3.0))


def test_a_variable_defined_on_one_path_only_is_named():
    def f(x):
        if np.sum(x) > 0:
            y = x * 2
        return np.sum(y)

    with pytest.raises(pb.TracingError, match="y must be defined"):
        pb.jit(f)(np.ones(2))


def test_a_loop_variable_that_changes_shape_is_named():
    def f(x):
        acc = x[0] * 0.0  # traced: the loop is a traced one from its first test
        while np.sum(acc) < 10.0:
            acc = acc + x
        return acc

    with pytest.raises(pb.TracingError, match=r"acc changes from float64\[\] to float64\[2\]"):
        pb.jit(f)(np.ones(2))


def test_closures_and_branches_share_variables():
    """Blocks assign the enclosing function's variables (``nonlocal``): a helper defined before the
    ``if`` sees what the branch assigned."""
    def f(x):
        scale = 1.0
        read = lambda: scale * x  # noqa: E731
        if np.sum(x) > 0:
            scale = 3.0
        return np.sum(read())

    assert pb.jit(f)(np.ones(2)) == 6.0 and pb.jit(f)(-np.ones(2)) == -2.0


def test_constructs_left_as_written_are_named_when_their_test_is_traced():
    def returns_from_a_loop(x):
        while True:
            if np.sum(x) > 0:
                return x
            x = x * 2

    with pytest.raises(pb.ConcretizationError, match="an if statement with a break, continue or return"):
        pb.jit(returns_from_a_loop)(np.ones(3))

    def loop_else(x):
        while np.sum(x) < 5:
            x = x * 2
        else:
            x = x + 1
        return x

    with pytest.raises(pb.ConcretizationError, match="a while loop with a return or else clause"):
        pb.jit(loop_else)(np.ones(3))


def _newton_sqrt(a):
    x = a
    while True:
        x_new = 0.5 * (x + a / x)
        if np.abs(x_new - x) < 1e-12:
            break
        x = x_new
    return x_new


def _sum_of_squares_of_positives(x):
    total = 0.0 * x[0]
    i = 0
    while i < x.shape[0]:
        i = i + 1
        if x[i - 1] < 0:
            continue
        total = total + x[i - 1] ** 2
    return total


def test_break_and_continue_on_traced_conditions():
    """``break`` and ``continue`` in a ``while`` become flags, as AutoGraph's: Newton's method stopped by
    a tolerance, and a step skipped where a traced value is negative."""
    for a in (2.0, 9.0, 0.3):
        assert pb.jit(_newton_sqrt)(a) == pytest.approx(np.sqrt(a), rel=1e-15)
        assert pb.grad(_newton_sqrt)(a) == pytest.approx(0.5 / np.sqrt(a), rel=1e-10)
    x = np.array([1.0, -2.0, 3.0, -1.0, 0.5])
    assert pb.jit(_sum_of_squares_of_positives)(x) == _sum_of_squares_of_positives(x) == 10.25
    np.testing.assert_allclose(pb.grad(_sum_of_squares_of_positives)(x), np.where(x > 0, 2 * x, 0.0))


def test_not_of_a_branchs_literal_boolean():
    """A branch's literal ``True`` is a Python bool at run time, whose ``~`` is -2: the printed
    negation of a 0-d boolean is ``np.logical_not`` (regression)."""
    def f(x):
        flag = False
        if x[1] < 0:
            flag = True
        if np.logical_not(np.logical_or(False, flag)):
            return x[1] ** 2
        return 0.0 * x[1]

    assert pb.jit(f)(np.array([1.0, -2.0])) == 0.0 and pb.jit(f)(np.array([1.0, 2.0])) == 4.0
