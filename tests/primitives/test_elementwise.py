"""The elementwise math vocabulary beyond its per-primitive cases: regressions (the
derivative of 0**y, ``%`` on a tracer), the points where a naive rule gives NaN (sinc at 0,
logaddexp of large values, nan_to_num of infinities), NumPy's complex order for extrema,
and float16. Oracles: NumPy, central finite differences, closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb

RNG = np.random.default_rng(0)


def test_derivative_of_zero_to_a_power_is_zero():
    assert pb.grad(lambda y: np.power(0.0, y))(0.5) == 0.0
    x = np.array([0.0, 0.5, 2.0])
    y = np.array([1.5, 0.7, 1.2])
    gx, gy = pb.grad(lambda x, y: np.sum(x**y), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gy, [0.0, np.log(0.5) * 0.5**0.7, np.log(2.0) * 2.0**1.2], rtol=1e-12)
    np.testing.assert_allclose(gx, y * x ** (y - 1), rtol=1e-12)


def test_remainder_and_floor_division_on_tracers():
    x, y = RNG.standard_normal(6) * 3, np.array([0.7, -0.7, 1.3, -2.0, 0.4, 3.0])

    def f(x, y):
        q, r = divmod(x, y)
        return x % y, x // y, 2.5 % y, 2 // y, q, r

    for ours, want in zip(pb.jit(f)(x, y), f(x, y)):
        np.testing.assert_allclose(ours, want, rtol=1e-12)
    source = pb.source(lambda x, y: x % y + x // y, x, y)
    assert "x % y" in source and "x // y" in source
    # d(x % y) = dx - floor(x / y) dy
    gx, gy = pb.grad(lambda x, y: np.sum(x % y), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, np.ones(6))
    np.testing.assert_allclose(gy, -np.floor_divide(x, y))
    check_grads(lambda x, y: (x % y, np.fmod(x, y)), [x, y], order=2)


def test_sinc_derivatives_at_zero_are_exact_and_finite():
    sinc_grad = pb.grad(lambda x: np.sinc(x))
    assert sinc_grad(0.0) == 0.0
    np.testing.assert_allclose(pb.grad(sinc_grad)(0.0), -np.pi**2 / 3, rtol=1e-14)
    x = np.array([0.0, 0.3, -1.2, 0.0])
    g = pb.grad(lambda x: np.sum(np.sinc(x) ** 2))(x)
    assert np.all(np.isfinite(g))
    h = 1e-6
    np.testing.assert_allclose(g, (np.sinc(x + h) ** 2 - np.sinc(x - h) ** 2) / (2 * h), atol=1e-8)
    _, vjp_fn = pb.vjp(lambda x: pb.grad(lambda x: np.sum(np.sinc(x)))(x), x)
    assert np.all(np.isfinite(vjp_fn(np.ones(4))[0]))
    check_grads(np.sinc, [x], order=2)


def test_logaddexp_derivatives_do_not_overflow():
    x, y = np.array([1000.0, -1000.0, 3.0]), np.array([1000.0, -999.0, 700.0])
    gx, gy = pb.grad(lambda x, y: np.sum(np.logaddexp(x, y)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 1 / (1 + np.exp(y - x)), rtol=1e-12)
    np.testing.assert_allclose(gy, 1 / (1 + np.exp(x - y)), rtol=1e-12)
    gx2 = pb.grad(lambda x, y: np.sum(np.logaddexp2(x, y)))(x, y)
    np.testing.assert_allclose(gx2, 1 / (1 + 2.0 ** (y - x)), rtol=1e-12)


def test_nan_to_num_replaces_and_stops_the_derivative():
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0])
    for kw in ({}, {"nan": 1.0, "posinf": 7.0, "neginf": -7.0}, {"posinf": 3.0}):
        np.testing.assert_array_equal(pb.jit(lambda x, kw=kw: np.nan_to_num(x, **kw))(x), np.nan_to_num(x, **kw))
    t = np.arange(1.0, 6.0)
    _, x_dot = pb.jvp(lambda x: np.nan_to_num(x, nan=2.0), (x,), (t,))
    np.testing.assert_array_equal(x_dot, [0, 0, 0, 4.0, 5.0])
    np.testing.assert_array_equal(pb.grad(lambda x: np.sum(3 * np.nan_to_num(x)))(x), [0, 0, 0, 3.0, 3.0])
    z = np.array([complex(np.nan, 1.0), complex(2.0, np.inf), 1 - 1j])
    np.testing.assert_array_equal(pb.jit(lambda z: np.nan_to_num(z, nan=-1.0))(z), np.nan_to_num(z, nan=-1.0))
    _, z_dot = pb.jvp(np.nan_to_num, (z,), (np.array([1 + 2j, 3 + 4j, 5 + 6j]),))
    np.testing.assert_array_equal(z_dot, [2j, 3, 5 + 6j])


def test_fmax_fmin_ignore_nan_in_value_and_derivative():
    x = np.array([1.0, np.nan, 3.0, np.nan])
    y = np.array([2.0, 5.0, np.nan, np.nan])
    for f in (np.fmax, np.fmin):
        np.testing.assert_array_equal(pb.jit(f)(x, y), f(x, y))
    gx, gy = pb.grad(lambda x, y: np.sum(np.nan_to_num(np.fmax(x, y))), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [0, 0, 1, 0])
    np.testing.assert_array_equal(gy, [1, 1, 0, 0])


def test_complex_fmax_fmin_ignore_nan_in_numpy_order():
    z = np.array([1 + 2j, complex(np.nan, 1), 3 + 0j, 1 + 5j, complex(1, np.nan)])
    w = np.array([1 + 3j, 2 + 2j, complex(0, np.nan), 0 + 9j, complex(np.nan, 0)])
    for f in (np.fmax, np.fmin):
        np.testing.assert_array_equal(pb.jit(f)(z, w), f(z, w))
    check_grads(np.fmax, [RNG.standard_normal(4) + 1j * RNG.standard_normal(4),
                          RNG.standard_normal(4) + 1j * RNG.standard_normal(4)], order=2)


def _lexicographic_ties():
    """Complex values whose real parts tie, so the imaginary part decides."""
    return np.array([[1 + 2j, 1 - 3j, -2 + 5j], [1 + 4j, 0.5 + 9j, -2 - 1j]])


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_complex_extrema_follow_numpy_order(dtype):
    z = _lexicographic_ties().astype(dtype)
    w = np.array([1 + 3j, 1 + 3j, -2 + 5j], dtype)

    def f(z, w):
        return (np.max(z), np.min(z), z.max(axis=0), np.min(z, axis=1, keepdims=True), np.maximum(z, w),
                np.minimum(z, w), np.clip(z, -1 + 0j, 1 + 3j))

    for ours, want in zip(pb.jit(f)(z, w), f(z, w)):
        assert ours.dtype == want.dtype
        np.testing.assert_array_equal(ours, want)


def test_complex_extrema_gradients_against_finite_differences():
    z = RNG.standard_normal((3, 4)) + 1j * RNG.standard_normal((3, 4))
    w = RNG.standard_normal(4) + 1j * RNG.standard_normal(4)
    check_grads(lambda z: (np.max(z), z.min(axis=0), np.max(z, axis=1, keepdims=True)), [z], order=2)
    check_grads(lambda z, w: (np.maximum(z, w), np.minimum(z, w)), [z, w], order=2)
    # the gradient of |max z|^2 is 2 max z at the maximal entry (dL = Re(conj(G) dz))
    g = pb.grad(lambda z: np.abs(np.max(z)) ** 2)(z)
    k = np.unravel_index(np.argmax(z.real), z.shape)
    want = np.zeros_like(z)
    want[k] = 2 * z[k]
    np.testing.assert_allclose(g, want, atol=1e-14)


def test_second_order_of_the_new_rules():
    x = RNG.standard_normal(5)
    y = RNG.standard_normal(5)
    z = RNG.standard_normal(5) + 1j * RNG.standard_normal(5)
    u = 0.9 * np.tanh(x)
    check_grads(lambda u: (np.arcsin(u), np.arccos(u), np.arctanh(u), np.arctan(u), np.arcsinh(u)), [u], order=2)
    check_grads(lambda x: (np.arccosh(x * x + 1.5), np.log10(x * x + 1), np.log2(x * x + 1), np.exp2(x),
                           np.cbrt(x)), [x], order=2)
    check_grads(lambda x, y: (np.arctan2(y, x), np.hypot(x, y), np.logaddexp(x, y), np.logaddexp2(x, y),
                              np.copysign(x, y), np.clip(x, -0.5, y)), [x, y], order=2)
    check_grads(lambda z: (np.arcsin(z), np.arccos(z), np.arccosh(z), np.arctanh(z), np.arcsinh(z), np.arctan(z),
                           np.log10(z), np.log2(z), np.exp2(z), np.sinc(z), np.angle(z), np.angle(z, deg=True)),
                [z], order=2)
    check_grads(lambda x: (np.deg2rad(x), np.rad2deg(x), np.angle(x), np.floor(x), np.round(x, 1)), [x], order=2)


def test_clip_derivative_goes_to_the_operand_chosen():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, 0.3])
    lo, hi = np.array([-1.0, -0.5, -1.0, -1.0, -1.0, 0.4]), np.array([1.0, 1.0, 1.0, 0.5, 1.0, 0.35])
    gx, glo, ghi = pb.grad(lambda x, lo, hi: np.sum(np.clip(x, lo, hi) * np.arange(1, 7)), argnums=(0, 1, 2))(x, lo, hi)
    # ties (x = lo, x = hi) go to x; where lo > hi NumPy returns hi
    np.testing.assert_array_equal(gx, [0, 2, 3, 4, 0, 0])
    np.testing.assert_array_equal(glo, [1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(ghi, [0, 0, 0, 0, 5, 6])
    assert "x_bar = np.where(clipped == x, " in pb.differentiate(lambda x: np.sum(np.clip(x, -1.0, 1.0))).source(x)
    assert pb.grad(lambda x: np.sum(np.clip(x, -1, 1)))(x).tolist() == [0, 1, 1, 1, 0, 1]


def test_printed_as_the_numpy_calls():
    source = pb.source(lambda x, y: np.arcsin(x) + np.arctan2(x, y) + np.logaddexp(x, y) + np.round(x, 2)
                       + np.nan_to_num(y, posinf=1.0) + np.clip(x, -1.0, y), np.zeros(3), np.ones(3))
    for call in ("np.clip(x, -1.0, y)", "np.arcsin(x)", "np.arctan2(x, y)", "np.logaddexp(x, y)", "np.round(x, 2)",
                 "np.nan_to_num(y, posinf=1.0)"):
        assert call in source


def test_fabs_rejects_complex_like_numpy():
    with pytest.raises(TypeError):
        np.fabs(np.ones(2, complex))
    with pytest.raises(pb.TracingError, match="np.fabs does not accept complex"):
        pb.jit(np.fabs)(np.ones(2, complex))


F16_FUNCTIONS = [np.exp, np.log, np.sqrt, np.sin, np.tanh, np.arcsin, np.arctan, np.log10, np.exp2, np.cbrt, np.sinc,
                 np.floor, lambda x: np.round(x, 1), lambda x: x % 0.3, lambda x: np.clip(x, 0.2, 0.6),
                 lambda x: 2.0 * x + 1, lambda x: x * x, lambda x: np.hypot(x, x), lambda x: x.sum(axis=0),
                 lambda x: np.maximum(x, 0.5), lambda x: np.logaddexp(x, -x)]


@pytest.mark.parametrize("i", range(len(F16_FUNCTIONS)))
def test_float16_computes_in_float16_as_numpy_does(i):
    f = F16_FUNCTIONS[i]
    x = np.linspace(0.1, 0.9, 12).reshape(3, 4).astype(np.float16)
    ours, want = pb.jit(f)(x), f(x)
    assert ours.dtype == want.dtype == np.float16
    np.testing.assert_allclose(ours.astype(float), want.astype(float), rtol=2e-3, atol=2e-3)


def test_float16_mean_accumulates_in_float32_as_numpy_does():
    x = np.full((70000,), 1.0, np.float16)
    ours = pb.jit(lambda x: (np.mean(x), x.mean(axis=0, keepdims=True)))(x)
    for o, w in zip(ours, (np.mean(x), x.mean(axis=0, keepdims=True))):
        assert o.dtype == w.dtype == np.float16
        np.testing.assert_array_equal(o, w)


def test_float16_gradient_matches_float64():
    def f(x):
        return np.sum(np.sin(x) * np.arctan(x) + np.sqrt(x))

    x = np.linspace(0.1, 0.9, 7)
    g16 = pb.grad(f)(x.astype(np.float16))
    assert g16.dtype == np.float16
    np.testing.assert_allclose(g16.astype(float), pb.grad(f)(x), rtol=5e-3, atol=5e-3)
    assert "f16[7]" in str(pb.make_ir(f)(x.astype(np.float16)))


def test_float16_linear_algebra_is_refused_as_numpy_does():
    a = np.eye(3, dtype=np.float16)
    with pytest.raises(TypeError, match="array type float16 is unsupported in linalg"):
        np.linalg.cholesky(a)
    for f in (np.linalg.cholesky, np.linalg.inv, lambda a: np.linalg.solve(a, a), np.linalg.eigh):
        with pytest.raises(TypeError, match="array type float16 is unsupported in linalg"):
            pb.jit(f)(a)


def test_float16_products_beside_linear_algebra_stay_numpy_products():
    """A program that calls LAPACK prints large products with SciPy's BLAS, which has no float16."""
    a, h = np.eye(4) * 2, np.full((128, 128), 0.01, np.float16)  # 2M multiply-adds: over ONE_BLAS_MIN_WORK

    def f(a, h):
        return np.linalg.cholesky(a).sum() + (h @ h).sum()

    np.testing.assert_allclose(pb.jit(f)(a, h), f(a, h), rtol=1e-2)


def test_logic_prints_as_operators_and_dtype_objects_stay_python_bools():
    x = np.linspace(-1.0, 1.0, 5)
    src = pb.source(lambda x: np.where((x > 0) & ~(x < 0.5) | (x == 0), x, 0.0), x)
    assert "inverted = ~lt" in src and "both = gt & inverted" in src and "either = both | eq" in src
    assert pb.jit(lambda x: np.iscomplexobj(x) + 0.0 * x)(x).dtype == np.float64
    with pytest.raises(pb.TracingError, match="only defined for booleans and integers"):
        pb.jit(lambda x: x & 1)(x)
