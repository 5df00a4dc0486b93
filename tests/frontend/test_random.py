"""Random draws are effects of the program: every call draws what the eager call would, from the
same generator, bit for bit; a traced parameter is differentiable by reparameterisation."""

import copy

import numpy as np
import pytest
import scipy.stats

import pullback as pb
from pullback.ir.core import effectful


def _fresh(seed=0):
    return np.random.RandomState(seed), np.random.default_rng(seed + 1)


def test_every_call_draws_anew_as_eager_numpy_does():
    rs, gen = _fresh()
    rs_eager, gen_eager = _fresh()

    def f(x, rs, gen):
        return np.sum(x * rs.standard_normal(3)) + np.sum(gen.standard_normal((2, 3)) @ x) + rs.rand()

    traced = pb.jit(lambda x: f(x, rs, gen))
    x = np.array([0.5, -1.0, 2.0])
    for _ in range(20):
        assert traced(x) == f(x, rs_eager, gen_eager)  # bit for bit
    assert rs.randint(1 << 30) == rs_eager.randint(1 << 30)  # the streams stay in step


def test_numpys_global_generator_is_drawn_from_at_run_time():
    def f(x):
        return np.sum(x * np.random.randn(3)) + np.random.random_sample()

    x = np.ones(3)
    np.random.seed(3)
    got = [pb.jit(f)(x) for _ in range(5)]
    np.random.seed(3)
    want = [f(x) for _ in range(5)]
    assert got == want
    assert "np.random.randn(3)" in pb.differentiate(f).source(x)


@pytest.mark.parametrize("kind", ["legacy", "generator"])
def test_reparameterised_draws_are_numpys_numbers_and_their_gradients(kind):
    """``normal(mu, sigma)``, ``uniform(a, b)``, ``exponential(s)`` with traced parameters: the same
    numbers as NumPy's, and the gradient of the loss at the draw (finite differences with the
    generator's state restored)."""
    def make():
        return np.random.RandomState(7) if kind == "legacy" else np.random.default_rng(7)

    def loss(p, g):
        mu, sigma, a, b, s = p[0], p[1], p[2], p[3], p[4]
        z = g.normal(mu, sigma, size=4)
        u = g.uniform(a, b, size=(2, 2))
        e = g.exponential(s)
        return np.sum(z ** 2) + np.sum(np.sin(u)) + e * mu

    g = make()
    vg = pb.value_and_grad(lambda p: loss(p, g))
    g_eager = make()
    p = np.array([0.3, 1.5, -1.0, 2.0, 0.7])
    for _ in range(3):
        state = copy.deepcopy(g)
        value, grad = vg(p)
        assert value == loss(p, g_eager)
        h = 1e-6
        fd = []
        for i in range(len(p)):
            e = np.zeros_like(p)
            e[i] = h
            fd.append((loss(p + e, copy.deepcopy(state)) - loss(p - e, copy.deepcopy(state))) / (2 * h))
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_scipy_stats_rvs_is_a_draw_with_a_reparameterised_loc_and_scale():
    rs, rs_eager = np.random.RandomState(2), np.random.RandomState(2)

    def f(theta, rs):
        w = scipy.stats.norm.rvs(theta[0], theta[1], size=3, random_state=rs)
        v = scipy.stats.norm(theta[0], 2.0).rvs(size=2, random_state=rs)
        return np.sum(w ** 2) + np.sum(v)

    theta = np.array([0.2, 0.9])
    vg = pb.value_and_grad(lambda t: f(t, rs))
    for _ in range(4):
        before = copy.deepcopy(rs_eager)
        value, grad = vg(theta)
        assert value == f(theta, rs_eager)
        w = scipy.stats.norm.rvs(size=3, random_state=before)  # the standard draws of this call
        np.testing.assert_allclose(grad, [np.sum(2 * (theta[0] + theta[1] * w)) + 2,
                                          np.sum(2 * (theta[0] + theta[1] * w) * w)], rtol=1e-12)


def test_an_unused_draw_still_consumes_and_equal_draws_are_not_merged():
    rs, rs_eager = _fresh()[0], _fresh()[0]

    def f(x, rs):
        rs.standard_normal(5)  # unused: eager NumPy still draws it
        a = rs.standard_normal(2)
        b = rs.standard_normal(2)  # the same call again: other numbers
        return np.sum(x * a) - np.sum(x * b)

    x = np.array([1.0, 2.0])
    for _ in range(3):
        assert pb.jit(lambda x: f(x, rs))(x) == f(x, rs_eager)
    program = pb.make_ir(lambda x: f(x, rs))(x)
    assert sum(map(effectful, program.eqns)) == 3


def test_draws_in_scan_bodies_and_python_loops_draw_at_every_step():
    rs, rs_eager = _fresh(4)[0], _fresh(4)[0]

    def step(c, _):
        return c * 0.9 + rs.standard_normal(), None

    def with_scan(x):
        c, _ = pb.scan(step, x, None, length=30)
        return c

    def with_loop(x, rs):
        for _ in range(30):
            x = x * 0.9 + rs.standard_normal()
        return x

    for _ in range(3):
        assert pb.jit(with_scan)(1.0) == with_loop(1.0, rs_eager)
    # the rerolled Python loop (30 steps of one draw each) keeps one draw per step
    rs2, rs2_eager = _fresh(5)[0], _fresh(5)[0]
    for _ in range(3):
        assert pb.jit(lambda x: with_loop(x, rs2))(1.0) == with_loop(1.0, rs2_eager)
    # gradients: d/dx of the loop is 0.9 ** 30 whatever was drawn
    assert pb.grad(with_scan)(1.0) == pytest.approx(0.9 ** 30, rel=1e-12)


def test_jvp_vjp_hessian_draw_once_per_call():
    rs, rs_eager = _fresh(6)[0], _fresh(6)[0]

    def f(x):
        return np.sum(np.sin(x * rs.standard_normal(3)))

    x = np.array([0.1, 0.2, 0.3])
    for _ in range(2):
        eps = rs_eager.standard_normal(3)
        out, tangent = pb.jvp(f, (x,), (np.ones(3),))
        np.testing.assert_allclose(tangent, np.sum(np.cos(x * eps) * eps), rtol=1e-12)
        eps = rs_eager.standard_normal(3)
        value, pullback_fn = pb.vjp(f, x)
        np.testing.assert_allclose(pullback_fn(1.0)[0], np.cos(x * eps) * eps, rtol=1e-12)
        eps = rs_eager.standard_normal(3)
        np.testing.assert_allclose(pb.hessian(f)(x), np.diag(-np.sin(x * eps) * eps ** 2), rtol=1e-12, atol=1e-15)


def test_vmap_draws_once_for_the_whole_batch():
    """vmap maps ``f`` over its batched arguments; a draw reads no batched value, so it is made once
    per call of the mapped function, shared by every member of the batch (as the draw of one call of
    ``f``), not once per member."""
    rs, rs_eager = _fresh(8)[0], _fresh(8)[0]
    xs = np.arange(12.0).reshape(4, 3)
    for _ in range(3):
        got = pb.vmap(lambda x: x * rs.standard_normal(3))(xs)
        np.testing.assert_array_equal(got, xs * rs_eager.standard_normal(3))


def test_a_generator_made_inside_the_function():
    """Made with a seed, it draws the same numbers at every eager call: constants. Made without one,
    it would draw others at every call: refused, naming the spelling that works."""
    def seeded(x):
        return np.sum(x * np.random.default_rng(0).standard_normal(3))

    x = np.ones(3)
    assert pb.jit(seeded)(x) == seeded(x) == pb.jit(seeded)(x)

    def unseeded(x):
        return np.sum(x * np.random.default_rng().standard_normal(3))

    with pytest.raises(pb.TracingError, match="without a seed"):
        pb.jit(unseeded)(x)


def test_methods_that_are_not_draws_are_refused():
    rs = np.random.RandomState(0)
    with pytest.raises(pb.TracingError, match="shuffle is not supported"):
        pb.jit(lambda x: (rs.shuffle(np.arange(3)), x)[1])(1.0)
    with pytest.raises(pb.TracingError, match=r"np.random.seed is not supported"):
        pb.jit(lambda x: (np.random.seed(0), x)[1])(1.0)
    with pytest.raises(pb.TracingError, match="reparameterisation|not differentiable"):
        pb.grad(lambda a: rs.gamma(a))(2.0)


def test_the_printed_program_calls_the_users_generator_and_runs_without_pullback():
    rs = np.random.RandomState(9)

    def f(x):
        return np.sum(x * rs.standard_normal((3,)))

    x = np.ones(3)
    src = pb.differentiate(f).source(x)
    assert "rs.standard_normal((3,))" in src and "*, rs" in src
    ns: dict = {}
    exec(compile(src, "<saved>", "exec"), ns)
    fn = next(v for k, v in ns.items() if k.endswith("_grad"))
    mine, eager = np.random.RandomState(1), np.random.RandomState(1)
    value, grad = fn(x, rs=mine)
    eps = eager.standard_normal(3)
    assert value == np.sum(x * eps)
    np.testing.assert_array_equal(grad, eps)


def test_draws_in_a_checkpoint_are_made_once_not_again_when_recomputed():
    rs, rs_eager = _fresh(10)[0], _fresh(10)[0]

    @pb.checkpoint
    def step(h):
        return np.tanh(h * rs.standard_normal(3))

    def f(h):
        return np.sum(step(step(h)))

    h = np.array([0.5, 1.0, -0.3])
    for _ in range(3):
        value, grad = pb.value_and_grad(f)(h)
        e1, e2 = rs_eager.standard_normal(3), rs_eager.standard_normal(3)
        inner = np.tanh(h * e1)
        assert value == np.sum(np.tanh(inner * e2))
        np.testing.assert_allclose(grad, (1 - np.tanh(inner * e2) ** 2) * e2 * (1 - inner ** 2) * e1, rtol=1e-12)
    assert rs.randint(1 << 30) == rs_eager.randint(1 << 30)
