"""Transforms nested inside traced functions: closing over the outer function's traced values
(closure conversion; the classic perturbation-confusion cases) and passing Python scalars."""

import numpy as np
import pytest

import pullback as pb
from pullback.errors import TracingError


@pytest.mark.parametrize("x", [1.0, -2.5])
def test_grad_of_product_with_inner_grad_closing_over_x(x):
    # d/dx [x * d/dy (x*y)] = d/dx x^2 = 2x
    assert pb.grad(lambda x: x * pb.grad(lambda y: x * y)(2.0))(x) == pytest.approx(2 * x)


def test_siskind_pearlmutter_perturbation_confusion():
    # d/dx (x * d/dy (x + y)) at y = 1 is 1, not 2
    assert pb.grad(lambda x: x * pb.grad(lambda y: x + y)(1.0))(1.0) == pytest.approx(1.0)


def test_grad_of_inner_jvp():
    # d/dy (x y^2) at y = 2 along 1 is 4x; its derivative in x is 4
    f = lambda x: pb.jvp(lambda y: x * y * y, (2.0,), (1.0,))[1]  # noqa: E731
    assert pb.grad(f)(1.5) == pytest.approx(4.0)


def test_jvp_of_inner_grad():
    # g(x) = d/dy sin(x y) at y = 1 = x cos(x); g'(x) = cos(x) - x sin(x)
    x = 0.5
    g, g_dot = pb.jvp(lambda x: pb.grad(lambda y: np.sin(x * y))(1.0), (x,), (1.0,))
    assert g == pytest.approx(x * np.cos(x))
    assert g_dot == pytest.approx(np.cos(x) - x * np.sin(x))


def test_three_levels_of_closure():
    # d/dz (x y z) = x y; d/dy = x; times x: x^2; d/dx = 2x
    f = lambda x: pb.grad(lambda y: pb.grad(lambda z: x * y * z)(1.0))(1.0) * x  # noqa: E731
    assert pb.grad(f)(2.0) == pytest.approx(4.0)


def test_closure_over_an_array_with_inner_vector_grad():
    # h(a) = sum(a * grad_w sum(a * sin(w)) at w) = sum(a^2 cos(w)); dh/da = 2 a cos(w)
    w = np.array([0.1, 0.7, -1.2])
    a = np.array([1.5, -0.5, 2.0])
    h = lambda a: np.sum(a * pb.grad(lambda w: np.sum(a * np.sin(w)))(w))  # noqa: E731
    np.testing.assert_allclose(pb.grad(h)(a), 2 * a * np.cos(w))
    np.testing.assert_allclose(pb.jit(h)(a), np.sum(a * a * np.cos(w)))


def test_inner_linearize_and_vjp_closing_over_x():
    def f(x):
        _, jvp_fn = pb.linearize(lambda y: x * np.sin(y), 0.3)
        _, vjp_fn = pb.vjp(lambda y: x * np.cos(y), 0.3)
        return jvp_fn(1.0) + vjp_fn(1.0)[0]  # x cos(0.3) - x sin(0.3)

    assert pb.grad(f)(2.0) == pytest.approx(np.cos(0.3) - np.sin(0.3))


def test_inner_program_is_traced_again_for_each_outer_trace():
    inner = pb.differentiate(lambda y: y * y)
    f = pb.differentiate(lambda x: x * inner.grad(x))  # 2 x^2 -> 4x
    assert f.grad(1.0) == pytest.approx(4.0)
    assert f.grad(3.0) == pytest.approx(12.0)
    assert pb.grad(lambda x: x * pb.grad(lambda y: x * y * y)(1.0))(3.0) == pytest.approx(12.0)


def test_python_float_argument_to_a_transform_inside_a_trace():
    # d/dx [d/da (a^2 b)](x, 0.7) = d/dx (1.4 x) = 1.4
    g = pb.grad(lambda a, b: a * a * b)
    assert pb.grad(lambda x: g(x, 0.7))(0.3) == pytest.approx(1.4)
    assert pb.grad(lambda x: x * pb.grad(lambda a, b: a * b, argnums=1)(x, 2.0))(0.5) == pytest.approx(1.0)


def test_a_tracer_kept_after_its_trace_still_escapes():
    kept = []
    pb.jit(lambda x: kept.append(x) or x)(1.0)
    with pytest.raises(TracingError, match="escaped"):
        pb.jit(lambda y: y * kept[0])(2.0)


def test_jvp_of_inner_jvp_closing_over_x():
    # d/dy (x y^3) at y = 1 along 1 is 3x; along x: 3
    f = lambda x: pb.jvp(lambda y: x * y ** 3, (1.0,), (1.0,))[1]  # noqa: E731
    out, out_dot = pb.jvp(f, (2.0,), (1.0,))
    assert (out, out_dot) == pytest.approx((6.0, 3.0))


def test_inner_transform_called_on_the_outer_value_it_closes_over():
    # d/dy sin(x y) x at y = x is x^2 cos(x^2); its derivative 2x cos(x^2) - 2x^3 sin(x^2)
    x = 0.7
    outer = lambda x: pb.grad(lambda y: np.sin(x * y) * x)(x)  # noqa: E731
    assert pb.grad(outer)(x) == pytest.approx(2 * x * np.cos(x * x) - 2 * x ** 3 * np.sin(x * x))
    assert pb.grad(lambda x: pb.grad(lambda y: x * y)(x))(3.0) == pytest.approx(1.0)


def test_inner_jit_and_value_and_grad_closing_over_x():
    assert pb.grad(lambda x: pb.jit(lambda y: x * y)(2.0))(3.0) == pytest.approx(2.0)
    assert pb.grad(lambda x: pb.value_and_grad(lambda y: x * y * y)(2.0)[0])(3.0) == pytest.approx(4.0)
