"""custom_jvp, custom_vjp and stop_gradient, on the examples of JAX's documentation: values and
derivatives against finite differences and closed forms, and the rules seen in the printed code."""

import sys
from pathlib import Path

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb

RNG = np.random.default_rng(0)


sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from autodiff_cookbook import log1pexp  # noqa: E402  (JAX's example, as the cookbook port defines it)


def test_custom_jvp_is_stable_where_autodiff_of_the_formula_is_not():
    x = np.array([0.0, 2.0, 800.0])
    with np.errstate(over="ignore", invalid="ignore"):
        plain = pb.grad(lambda x: np.sum(np.log(1.0 + np.exp(x))))(x)
        g = pb.grad(lambda x: np.sum(log1pexp(x)))(x)
    assert np.isnan(plain[2])
    np.testing.assert_allclose(g, 1 / (1 + np.exp(-x)), rtol=1e-15)


def test_custom_jvp_forward_reverse_and_second_order():
    x = RNG.standard_normal(4)
    check_grads(lambda x: np.sum(log1pexp(x) ** 2), (x,), order=2)
    _, t = pb.jvp(log1pexp, (x,), (np.ones(4),))
    np.testing.assert_allclose(t, 1 / (1 + np.exp(-x)), rtol=1e-14)
    assert log1pexp(0.0) == np.log(2.0)  # outside a trace it simply runs


def test_custom_jvp_rule_is_what_the_gradient_prints():
    src = pb.differentiate(lambda x: np.sum(log1pexp(x))).source(np.ones(3))
    assert "1.0 / add" in src or "/ add" in src  # the rule's 1 / (1 + exp(x)), not the chain rule through log


def test_custom_jvp_with_nondiff_argnums():
    @pb.custom_jvp
    def app(f, x):
        return f(x)

    app.nondiff_argnums = (0,)

    @app.defjvp
    def app_jvp(f, primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 2.0 * t  # a deliberately different rule: it must be the one used

    assert pb.grad(lambda x: app(np.sin, x))(0.3) == 2.0


@pb.custom_vjp
def clip_gradient(lo, hi, x):
    return x


def _clip_fwd(lo, hi, x):
    return x, (lo, hi)


def _clip_bwd(res, g):
    lo, hi = res
    return None, None, np.clip(g, lo, hi)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def test_custom_vjp_clips_the_gradient():
    x = np.array([0.1, 1.0, -2.0])
    g = pb.grad(lambda x: np.sum(clip_gradient(-0.5, 0.5, np.sin(x)) * 3.0))(x)
    np.testing.assert_allclose(g, 0.5 * np.cos(x), rtol=1e-15)
    np.testing.assert_array_equal(clip_gradient(-0.5, 0.5, x), x)


def test_custom_vjp_refuses_forward_mode_as_jax_does():
    with pytest.raises(pb.TracingError, match="forward-mode"):
        pb.jvp(lambda x: clip_gradient(-0.5, 0.5, x), (np.ones(2),), (np.ones(2),))


@pb.custom_vjp
def f_sin_y(x, y):
    return np.sin(x) * y


f_sin_y.defvjp(lambda x, y: (np.sin(x) * y, (np.cos(x), np.sin(x), y)),
               lambda res, g: (res[0] * g * res[2], res[1] * g))


def test_custom_vjp_against_finite_differences():
    x, y = RNG.standard_normal(3), RNG.standard_normal(3)
    gx, gy = pb.grad(lambda x, y: np.sum(f_sin_y(x, y) ** 2), argnums=(0, 1))(x, y)
    eps = 1e-6
    for i in range(3):
        e = np.eye(3)[i] * eps
        fd_x = (np.sum((np.sin(x + e) * y) ** 2) - np.sum((np.sin(x - e) * y) ** 2)) / (2 * eps)
        fd_y = (np.sum((np.sin(x) * (y + e)) ** 2) - np.sum((np.sin(x) * (y - e)) ** 2)) / (2 * eps)
        np.testing.assert_allclose(gx[i], fd_x, rtol=1e-7)
        np.testing.assert_allclose(gy[i], fd_y, rtol=1e-7)


def test_custom_vjp_inside_a_scan():
    def f(x):
        c, _ = pb.scan(lambda c, _: (f_sin_y(c, np.full(2, 0.9)), None), x, length=4)
        return np.sum(c)

    def plain(x):
        for _ in range(4):
            x = np.sin(x) * 0.9
        return np.sum(x)

    x = RNG.standard_normal(2)
    np.testing.assert_allclose(pb.grad(f)(x), pb.grad(plain)(x), rtol=1e-14)


def test_stop_gradient():
    x = np.array([2.0, 3.0])
    np.testing.assert_array_equal(pb.grad(lambda x: np.sum(pb.stop_gradient(x) * x))(x), x)
    tree = pb.stop_gradient({"a": 1.0, "b": (x,)})
    assert tree["a"] == 1.0 and tree["b"][0] is x
    t = np.array([0.5, -1.0])
    np.testing.assert_array_equal(pb.jvp(lambda x: pb.stop_gradient(x ** 2) + x, (x,), (t,))[1], t)


def test_custom_rules_under_vmap_and_jacobians():
    x = RNG.standard_normal((4, 3))
    batched = pb.vmap(log1pexp)(x)
    np.testing.assert_allclose(batched, np.log1p(np.exp(x)), rtol=1e-14)
    per_example = pb.vmap(pb.grad(lambda v: np.sum(log1pexp(v) ** 2)))(x)
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(per_example, 2 * np.log1p(np.exp(x)) * s, rtol=1e-13)
    grads = pb.grad(lambda x: np.sum(pb.vmap(log1pexp)(x)))(np.array([[0.0, 800.0]]))
    np.testing.assert_allclose(grads, [[0.5, 1.0]], rtol=1e-15)  # the custom rule survives vmap
    y = RNG.standard_normal(3)
    J = pb.jacrev(lambda x: f_sin_y(x, y))(x[0])
    np.testing.assert_allclose(J, np.diag(np.cos(x[0]) * y), rtol=1e-14, atol=1e-15)
    gv = pb.grad(lambda x: np.sum(pb.vmap(lambda r: f_sin_y(r, y))(x) ** 2))(x)
    np.testing.assert_allclose(gv, 2 * np.sin(x) * y ** 2 * np.cos(x), rtol=1e-13)
    with pytest.raises(pb.TracingError, match="forward-mode"):
        pb.jacfwd(lambda x: f_sin_y(x, y))(x[0])


def test_pullback_testing_checks_users_rules():
    from pullback.testing import check_vjp_numerically

    x, y = RNG.standard_normal(3), RNG.standard_normal(3)
    check_grads(lambda x, y: f_sin_y(x, y) ** 2, (x, y), modes=("rev",))
    check_grads(log1pexp, (x,), order=2)

    @pb.custom_vjp
    def wrong(x):
        return np.sin(x)

    wrong.defvjp(lambda x: (np.sin(x), x), lambda x, g: (g * np.sin(x),))  # should be cos
    with pytest.raises(AssertionError, match="finite differences"):
        check_vjp_numerically(wrong, (x,))
