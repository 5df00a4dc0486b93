"""Reverse mode through loops of unknown length (``while_loop``, ``fori_loop`` with traced bounds):
gradients against the same loop unrolled to the number of steps it ran (a straight-line program,
differentiated without any loop), implicit-function derivatives, finite differences and eager NumPy;
and the printed shape: a forward ``while`` appending to lists, a backward ``for`` in reverse."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pullback.testing import check_grads

import pullback as pb
from tests.regressions.test_random_programs import examples, programs

RNG = np.random.default_rng(3)


def _fd(f, x, eps=1e-6):
    """Central differences of a scalar function, entry by entry."""
    x = np.asarray(x, float)
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size).reshape(-1, *x.shape)]
                    ).reshape(x.shape)


# --- iterations that stop when they converge ----------------------------------------------------


def fixed_point(a):
    """x = cos(a x), iterated from 0.5 until two iterates agree."""
    def body(c):
        x, _ = c
        return np.cos(a * x), x

    return pb.while_loop(lambda c: np.abs(c[0] - c[1]) > 1e-14, body, (np.float64(0.5), np.float64(10.0)))[0]


def fixed_point_numpy(a, steps=None):
    """The same in NumPy; with ``steps``, exactly that many iterations (an unrolled program)."""
    x, prev, k = 0.5, 10.0, 0
    while (abs(x - prev) > 1e-14) if steps is None else k < steps:
        x, prev, k = np.cos(a * x), x, k + 1
    return x, k


def test_fixed_point_gradient_is_the_implicit_functions_derivative():
    a = 0.7
    x, steps = fixed_point_numpy(a)
    value, g = pb.value_and_grad(fixed_point)(a)
    assert value == x  # the same iterations as NumPy's
    # x = cos(a x)  =>  dx/da = -sin(a x) x / (1 + a sin(a x))
    np.testing.assert_allclose(g, -np.sin(a * x) * x / (1 + a * np.sin(a * x)), rtol=1e-12)
    # the derivative of the iterations themselves: the loop unrolled to the steps it ran
    np.testing.assert_allclose(g, pb.grad(lambda a: fixed_point_numpy(a, steps)[0])(a), rtol=1e-14)
    np.testing.assert_allclose(g, _fd(lambda a: fixed_point(float(a)), a), rtol=1e-7)


def newton_sqrt(a):
    def body(c):
        x, _ = c
        return 0.5 * (x + a / x), x

    return pb.while_loop(lambda c: np.abs(c[0] - c[1]) > 1e-12 * c[0], body, (a, 2.0 * a + 1.0))[0]


@pytest.mark.parametrize("a", [2.0, 7.0, 1e4])
def test_newton_sqrt(a):
    np.testing.assert_allclose(pb.grad(newton_sqrt)(a), 0.5 / np.sqrt(a), rtol=1e-10)
    check_grads(newton_sqrt, (a,), order=1)


def exp_series(x):
    """exp(x) as its Taylor series, summed until a term falls below 1e-16 of the sum."""
    def body(c):
        total, term, k = c
        term = term * x / k
        return total + term, term, k + 1.0

    return pb.while_loop(lambda c: np.abs(c[1]) > 1e-16 * np.abs(c[0]), body, (1.0, 1.0, 1.0))[0]


def exp_series_unrolled(x, terms):
    total, term = 1.0, 1.0
    for k in range(1, terms + 1):
        term = term * x / k
        total = total + term
    return total


@pytest.mark.parametrize("x", [0.5, -2.0, 5.0])
def test_taylor_series_summed_until_a_term_is_small(x):
    value, g = pb.value_and_grad(exp_series)(x)
    np.testing.assert_allclose(value, np.exp(x), rtol=1e-14)
    np.testing.assert_allclose(g, np.exp(x), rtol=1e-13)  # the series' derivative is the series less its last term
    terms = next(k for k in range(1, 100) if exp_series_unrolled(x, k) == value)
    assert g == pytest.approx(pb.grad(lambda x: exp_series_unrolled(x, terms))(x), rel=1e-15)


# --- fori_loop with traced bounds ---------------------------------------------------------------


W = 0.4 * RNG.standard_normal((3, 3))


def rnn(x, n, lo=0):
    return np.sum(pb.fori_loop(lo, n, lambda i, h: np.tanh(W @ h + x * i), x) ** 2)


def rnn_unrolled(x, n, lo=0):
    h = x
    for i in range(lo, n):
        h = np.tanh(W @ h + x * i)
    return np.sum(h ** 2)


@pytest.mark.parametrize("n", [0, 1, 4, 9])
def test_fori_loop_with_a_traced_upper_bound(n):
    x = RNG.standard_normal(3)
    f = pb.differentiate(rnn)
    value, g = f.value_and_grad(x, np.int64(n))
    assert value == pytest.approx(rnn_unrolled(x, n), rel=1e-14)
    np.testing.assert_allclose(g, pb.grad(lambda x: rnn_unrolled(x, n))(x), rtol=1e-12, atol=1e-15)
    # traced lower bound too
    g2 = pb.grad(rnn)(x, np.int64(n + 2), np.int64(2))
    np.testing.assert_allclose(g2, pb.grad(lambda x: rnn_unrolled(x, n + 2, 2))(x), rtol=1e-12, atol=1e-15)


def test_one_program_for_every_trip_count():
    f = pb.differentiate(rnn)
    x = RNG.standard_normal(3)
    for n in (3, 0, 11):
        f.value_and_grad(x, np.int64(n))
    assert f.source(x, np.int64(3)) == f.source(x, np.int64(11))


def test_zero_trip_loops():
    def f(x, limit):
        return np.sum(np.sin(pb.while_loop(lambda v: np.sum(v) < limit, lambda v: v * 2.0 + np.sin(v), x)))

    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(pb.grad(f)(x, 0.0), np.cos(x))  # the condition fails at once
    np.testing.assert_allclose(pb.grad(f)(x, 5.0), _fd(lambda x: f(x, 5.0), x), rtol=1e-7)


# --- the printed program ----------------------------------------------------------------------


def test_printed_gradient_is_a_while_loop_then_a_for_loop_in_reverse():
    src = pb.differentiate(rnn).source(RNG.standard_normal(3), np.int64(3))
    forward, backward = src.split("for t in range(")
    assert "while lt:" in forward and ".append(" in forward and "= []" in forward
    assert backward.startswith("steps - 1, -1, -1):")
    assert "while" not in backward and ".append(" not in backward
    assert "sub = sub_steps[t]" in backward  # each step's residual (1 - tanh**2), read back


def test_ir_types_stacks_as_lists():
    text = str(pb.differentiate(rnn).ir(RNG.standard_normal(3), np.int64(3), stage="vjp"))
    assert "list[f64[3]]" in text and "num_ys=2" in text and "length=None" in text


# --- nested loops -------------------------------------------------------------------------------


def test_while_loop_inside_a_scan():
    def f(x, xs):
        def step(c, xi):
            inner = pb.while_loop(lambda v: np.sum(v ** 2) > 0.5, lambda v: np.sin(v) * xi, c)
            return inner + 0.1, np.sum(inner)

        c, ys = pb.scan(step, x, xs)
        return np.sum(c) + np.sum(ys * np.arange(1.0, 4.0))

    def numpy(x, xs):
        c, total = x, 0.0
        for t, xi in enumerate(xs):
            v = c
            while np.sum(v ** 2) > 0.5:
                v = np.sin(v) * xi
            c, total = v + 0.1, total + np.sum(v) * (t + 1)
        return np.sum(c) + total

    x, xs = np.array([1.0, 1.5]), np.array([0.9, 0.8, 0.95])
    np.testing.assert_allclose(pb.grad(f)(x, xs), _fd(lambda x: numpy(x, xs), x), rtol=1e-7)
    np.testing.assert_allclose(pb.grad(f, argnums=1)(x, xs), _fd(lambda xs: numpy(x, xs), xs), rtol=1e-7)


def test_scan_and_while_loops_inside_a_while_loop():
    def f(x):
        def body(c):
            v, k = c
            v, _ = pb.scan(lambda h, _: (np.sin(h) * 0.95, None), v, length=2)
            v = pb.while_loop(lambda u: np.sum(u ** 2) > 1.0 / (k + 1.0), lambda u: np.sin(u) * 0.9, v)
            return v * 1.01, k + 1

        return np.sum(pb.while_loop(lambda c: c[1] < 3, body, (x, 0))[0])

    def numpy(x):
        v = x
        for k in range(3):
            v = np.sin(np.sin(v) * 0.95) * 0.95
            while np.sum(v ** 2) > 1.0 / (k + 1.0):
                v = np.sin(v) * 0.9
            v = v * 1.01
        return np.sum(v)

    x = np.array([1.0, 1.5])
    np.testing.assert_allclose(pb.grad(f)(x), _fd(numpy, x), rtol=1e-7)
    src = pb.differentiate(f).source(x)
    assert src.count("while ") == 2 and src.count(", -1, -1):") == 3  # backward: the outer loop, the inner two


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_while_loop_in_a_branch(sign):
    def f(x):
        return np.sum(pb.cond(np.sum(x) > 0, lambda v: pb.while_loop(lambda u: np.sum(u ** 2) > 0.5,
                                                                         lambda u: np.sin(u) * 0.9, v),
                              lambda v: v * 2.0, x))

    def numpy(x):
        v = x * 2.0
        if np.sum(x) > 0:
            v = x
            while np.sum(v ** 2) > 0.5:
                v = np.sin(v) * 0.9
        return np.sum(v)

    x = sign * np.array([1.0, 1.5])
    np.testing.assert_allclose(pb.grad(f)(x), _fd(numpy, x), rtol=1e-7)


# --- checkpointing ------------------------------------------------------------------------------


def _damped(x, checkpoint):
    def body(c):
        h, k = c
        return np.tanh(W @ np.sin(h) + x) * 0.9, k + 1

    return np.sum(pb.while_loop(lambda c: (np.sum(c[0] ** 2) > 0.01) & (c[1] < 50), body, (x, 0),
                                checkpoint=checkpoint)[0])


def test_checkpointed_while_loop_records_the_carry_alone():
    x = np.array([1.0, -0.5, 2.0])
    g = pb.grad(lambda x: _damped(x, True))(x)
    np.testing.assert_allclose(g, pb.grad(lambda x: _damped(x, False))(x), rtol=1e-13)
    np.testing.assert_allclose(g, _fd(lambda x: _damped(x, False), x), rtol=1e-6)
    src = pb.differentiate(lambda x: _damped(x, True)).source(x)
    plain = pb.differentiate(lambda x: _damped(x, False)).source(x)
    assert src.count(" = []") == 1 and plain.count(" = []") > 1  # one list: the carry h
    backward = src.split("for t in range(")[1]
    assert "= np.tanh(" in backward and "= np.tanh(" not in plain.split("for t in range(")[1]  # recomputed


# --- other derivatives: forward over reverse, Jacobians, vmap, the function forms ---------------------


def test_hessian_and_jacobians():
    def f(x, n):
        return pb.fori_loop(0, n, lambda i, c: np.sin(c) * x + 0.1 * np.sum(c), x)

    def unrolled(x, n):
        c = x
        for _ in range(n):
            c = np.sin(c) * x + 0.1 * np.sum(c)
        return c

    x, n = np.array([0.3, 0.5, -0.2]), 3
    np.testing.assert_allclose(pb.hessian(lambda x, n: np.sum(f(x, n) ** 2))(x, np.int64(n)),
                               pb.hessian(lambda x: np.sum(unrolled(x, n) ** 2))(x), rtol=1e-12)
    np.testing.assert_allclose(pb.jacrev(f)(x, np.int64(n)), pb.jacrev(lambda x: unrolled(x, n))(x), rtol=1e-12)
    check_grads(lambda x: f(x, np.int64(n)), (x,), order=2)
    out, vjp_fn = pb.vjp(lambda x: f(x, np.int64(n)), x)  # residuals (lists) pass between two programs
    ct = RNG.standard_normal(3)
    np.testing.assert_allclose(vjp_fn(ct)[0], pb.jacrev(lambda x: unrolled(x, n))(x).T @ ct, rtol=1e-12)


XS = np.array([0.9, 0.8, 0.95])


def _while_in_scan(x):
    def step(c, xi):
        inner = pb.while_loop(lambda v: np.sum(v ** 2) > 0.5, lambda v: np.sin(v) * xi, c)
        return inner + 0.1, np.sum(inner)

    c, ys = pb.scan(step, x, XS)
    return np.sum(c ** 2) + np.sum(ys)


def _while_in_while(x):
    def body(c):
        v, k = c
        v = pb.while_loop(lambda u: np.sum(u ** 2) > 1.0 / (k + 1.0), lambda u: np.sin(u) * 0.9, v)
        return v * 1.01, k + 1

    return np.sum(pb.while_loop(lambda c: c[1] < 3, body, (x, 0))[0] ** 2)


def _while_in_cond(x):
    return np.sum(pb.cond(np.sum(x) > 0, lambda v: pb.while_loop(lambda u: np.sum(u ** 2) > 0.5,
                                                                     lambda u: np.sin(u) * 0.9, v),
                          lambda v: v * 2.0, x) ** 2)


@pytest.mark.parametrize("f", [_while_in_scan, _while_in_while, _while_in_cond])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_hessians_of_nested_loops_against_differences_of_the_gradient(f, sign):
    """Forward over reverse: the JVP of the recording loop records tangents too; a zero tangent of
    the records is a list of zeros as long as they are, and a batch of records is a loop over them."""
    x = sign * np.array([1.0, 1.5])
    g = pb.grad(f)
    fd = np.array([(g(x + 1e-6 * e) - g(x - 1e-6 * e)) / 2e-6 for e in np.eye(2)]).T
    np.testing.assert_allclose(pb.hessian(f)(x), fd, rtol=1e-6, atol=1e-8)


def test_reverse_over_reverse():
    """The gradient's own program (a recording while loop, then a scan over its stacks) differentiated
    in reverse mode again: the scan over stacks splits and records as any scan does."""
    def f(x):
        return np.sum(pb.while_loop(lambda c: np.sum(c ** 2) > 0.5, lambda c: np.sin(c) * 0.9, x) ** 3)

    x = np.array([1.0, 1.5])
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(pb.grad(f)(x) * np.array([1.0, 2.0])))(x),
                               pb.hessian(f)(x) @ np.array([1.0, 2.0]), rtol=1e-12)


def test_vmap_of_the_gradient():
    def halve(x):  # the number of steps depends on the batch element: the batched loop runs the longest
        return np.sum(pb.while_loop(lambda c: np.sum(c ** 2) > 1.0, lambda c: np.sin(c) * 0.9, x))

    xs = np.array([[1.0, 2.0], [0.3, 0.2], [3.0, -1.0]])
    np.testing.assert_allclose(pb.vmap(pb.grad(halve))(xs), [pb.grad(halve)(x) for x in xs], rtol=1e-14)
    np.testing.assert_allclose(pb.grad(lambda xs: np.sum(pb.vmap(halve)(xs)))(xs), [pb.grad(halve)(x) for x in xs],
                               rtol=1e-14)
    n = np.int64(4)  # an unbatched bound: one loop
    np.testing.assert_allclose(pb.vmap(pb.grad(rnn), in_axes=(0, None))(xs[:, :1] * np.ones(3), n),
                               [pb.grad(rnn)(x, n) for x in xs[:, :1] * np.ones(3)], rtol=1e-14)


def test_complex_and_float32():
    def f(z):
        c = pb.while_loop(lambda c: np.sum(np.abs(c[0]) ** 2) > 0.5,
                          lambda c: (c[0] * (0.8 + 0.1j) + np.conj(c[0]) * 0.05, c[1] + 1), (z, 0))[0]
        return np.sum(np.abs(c) ** 2)

    check_grads(f, (np.array([1.0 + 0.5j, -0.3 + 0.2j]),), order=1)

    def g(x):
        return np.sum(pb.while_loop(lambda c: np.sum(c ** 2) > np.float32(0.5),
                                    lambda c: np.sin(c) * np.float32(0.9), x))

    x = np.array([1.0, 0.7], np.float32)
    out = pb.grad(g)(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, pb.grad(g)(x.astype(np.float64)), rtol=1e-5)


# --- random draws in the body ------------------------------------------------------------------


@pytest.mark.parametrize("checkpoint", [False, True])
def test_draws_in_the_body_are_made_once_per_forward_step(checkpoint):
    rs, rs_eager = np.random.RandomState(11), np.random.RandomState(11)

    def walk(a):
        def body(c):
            x, k = c
            return x * a + 0.1 * rs.standard_normal(2), k + 1

        return np.sum(pb.while_loop(lambda c: (np.sum(c[0] ** 2) < 4.0) & (c[1] < 40), body,
                                    (np.array([0.5, -0.2]), 0), checkpoint=checkpoint)[0])

    def walk_numpy(a, rs):
        """The value, and its derivative by hand: x_k = a x_{k-1} + e_k, so dx_k/da = x_{k-1} + a dx_{k-1}/da."""
        x, dx, k = np.array([0.5, -0.2]), np.zeros(2), 0
        while np.sum(x ** 2) < 4.0 and k < 40:
            x, dx, k = x * a + 0.1 * rs.standard_normal(2), x + a * dx, k + 1
        return np.sum(x), np.sum(dx)

    f = pb.differentiate(walk)
    for a in (1.3, 1.1, 0.9):
        value, g = f.value_and_grad(a)
        value_np, g_np = walk_numpy(a, rs_eager)
        assert value == value_np  # bit for bit: the same draws, in the same order, once each
        assert g == pytest.approx(g_np, rel=1e-13)
    assert rs.randint(1 << 30) == rs_eager.randint(1 << 30)  # no draw made again in the backward loop
    assert sum("= rs.standard_normal(" in line for line in f.source(1.3).splitlines()) == 1


# --- random loop bodies, and loops whose number of steps depends on the data -----------------------


@given(programs(dtypes=("float64",), smooth=True, max_ops=4), st.integers(1, 6), st.floats(0.05, 0.9))
@examples(40, sampled=8)
def test_random_bodies_of_data_dependent_loops_match_the_loop_unrolled(p, limit, shrink):
    """A while loop over a random body that runs until the carry is small or ``limit`` steps are done,
    against the same steps unrolled (a straight-line program: no loop is differentiated)."""
    inputs = [np.asarray(x) for x in p.inputs]
    rest = inputs[1:]

    def step(c, *others):
        out = p(c, *others)
        return c * shrink + 0.1 * np.tanh(np.sum(out)) * c

    def looped(c0, *others):
        c, k = pb.while_loop(lambda s: (np.sum(s[0] ** 2) > 1e-3) & (s[1] < limit),
                             lambda s: (step(s[0], *others), s[1] + 1), (c0, 0))
        return np.sum(np.sin(c)) + 0.1 * k

    def run(c0, *others):
        c, k = c0, 0
        while np.sum(c ** 2) > 1e-3 and k < limit:
            c, k = step(c, *others), k + 1
        return k

    def unrolled(c0, *others, steps):
        c = c0
        for _ in range(steps):
            c = step(c, *others)
        return np.sum(np.sin(c)) + 0.1 * steps

    args = (inputs[0], *rest)
    with np.errstate(all="ignore"):
        steps = run(*args)
        expected = unrolled(*args, steps=steps)
        if not np.all(np.isfinite(expected)):
            return
    np.testing.assert_allclose(pb.jit(looped)(*args), expected, rtol=1e-9, atol=1e-9)
    wrt = tuple(range(len(args)))
    for a, b in zip(pb.grad(looped, argnums=wrt)(*args),
                    pb.grad(lambda *xs: unrolled(*xs, steps=steps), argnums=wrt)(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9)
