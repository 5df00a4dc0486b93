"""scipy.special on traced arrays beyond the per-primitive cases: second derivatives, the points
where a naive rule fails (I1' at 0, log_ndtr far in the tail, logsumexp of large inputs), the
clear errors for derivatives without a closed form, printing, and that SciPy's module holds its
own functions again after a trace. Oracles: SciPy, central finite differences, closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
from pullback.testing import check_grads

import pullback as pb
from pullback.errors import TracingError

RNG = np.random.default_rng(0)
X = np.abs(RNG.standard_normal(5)) + 0.5  # in every function's domain below
P = 0.5 + 0.4 * np.tanh(RNG.standard_normal(5))  # in (0.1, 0.9)

SMOOTH = {
    "gammaln": lambda x: sc.gammaln(x), "gamma": lambda x: sc.gamma(x), "digamma": lambda x: sc.digamma(x),
    "polygamma": lambda x: sc.polygamma(2, x), "erf-erfc": lambda x: sc.erf(x) * sc.erfc(x - 1),
    "erfcx": lambda x: sc.erfcx(x - 1), "erfinv": lambda x: sc.erfinv(x / 4), "erfcinv": lambda x: sc.erfcinv(x / 4),
    "ndtr": lambda x: sc.ndtr(x - 1), "ndtri": lambda x: sc.ndtri(x / 4), "log_ndtr": lambda x: sc.log_ndtr(1 - 3 * x),
    "bessel": lambda x: sc.i0(x) + sc.i1(x - 1) + sc.i0e(1 - x) + sc.i1e(x - 1), "entr": lambda x: sc.entr(x),
    "logit": lambda x: sc.logit(x / 4), "log_expit": lambda x: sc.log_expit(x - 1),
    "xlogy": lambda x: sc.xlogy(x, x + 1) + sc.xlog1py(x * x, x), "beta": lambda x: sc.beta(x, 2 * x) + sc.betaln(x, 3),
    "betainc": lambda x: sc.betainc(2.5, 1.5, x / 4), "logsumexp": lambda x: sc.logsumexp(x * x),
    "softmax": lambda x: sc.softmax(x * x) + sc.log_softmax(x), "multigammaln": lambda x: sc.multigammaln(x + 2, 3),
    "bessel-jy": lambda x: sc.jv(1.5, x) + sc.yn(2, x) * sc.j0(x - 1) + sc.j1(x - 1) + sc.y0(x) + sc.y1(x),
    "bessel-yv": lambda x: sc.yv(0.5, x) * sc.jv(-1, x - 1),
    "bessel-ik": lambda x: sc.iv(0.5, x) + sc.ive(2, x - 1) + sc.kv(1.5, x) * sc.kve(0, x) + sc.k0(x) + sc.k1(x),
    "bessel-k-scaled": lambda x: sc.k0e(x) * sc.k1e(x),
    "rgamma": lambda x: sc.rgamma(x - 2) * sc.gammasgn(x - 0.3),
}


@pytest.mark.parametrize("name", list(SMOOTH))
def test_second_derivatives(name):
    check_grads(SMOOTH[name], [X], order=2)


def test_second_derivatives_of_incomplete_functions_in_x():
    check_grads(lambda x: sc.gammainc(2.5, x) + sc.gammaincc(0.7, 2 * x), [X], order=2)
    check_grads(lambda p: sc.betainc(np.array([0.5, 1.0, 2.0, 3.0, 4.5]), 2.0, p), [P], order=2)


def test_values_with_traced_shape_parameters_match_scipy():
    a, b = X + 0.2, 2 * X
    f = pb.jit(lambda a, b, x: (sc.gammainc(a, x), sc.gammaincc(a, x), sc.betainc(a, b, P)))
    for ours, want in zip(f(a, b, X), (sc.gammainc(a, X), sc.gammaincc(a, X), sc.betainc(a, b, P))):
        np.testing.assert_allclose(ours, want, rtol=1e-12)


def test_bessel_i1_derivative_at_zero():
    x = np.array([0.0, 1e-300, 2.0])
    g = pb.grad(lambda x: np.sum(sc.i1(x)))(x)
    np.testing.assert_allclose(g, [0.5, 0.5, sc.i0(2.0) - sc.i1(2.0) / 2], rtol=1e-12)
    ge = pb.grad(lambda x: np.sum(sc.i1e(x)))(x)
    np.testing.assert_allclose(ge[:2], [0.5, 0.5], rtol=1e-12)


def test_log_ndtr_derivative_far_in_the_tail():
    """ndtr(-40) underflows to 0, so density/ndtr would be 0/0; the rule stays ~ -x (Mills' ratio)."""
    x = np.array([-40.0, -10.0, 5.0])
    g = pb.grad(lambda x: np.sum(sc.log_ndtr(x)))(x)
    mills = np.exp(-x**2 / 2 - sc.log_ndtr(x)) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(g, mills, rtol=1e-12)
    assert 40 < g[0] < 40.1


def test_logsumexp_of_large_inputs_has_the_softmax_gradient():
    a = 800 + 50 * RNG.standard_normal(10_000)
    value, g = pb.value_and_grad(lambda a: sc.logsumexp(a))(a)
    np.testing.assert_allclose(value, sc.logsumexp(a), rtol=1e-14)
    np.testing.assert_allclose(g, sc.softmax(a), rtol=1e-12, atol=1e-300)
    assert np.all(np.isfinite(g)) and abs(g.sum() - 1) < 1e-12
    rows = a.reshape(100, 100)
    g2 = pb.grad(lambda a, w: np.sum(w * sc.logsumexp(a, axis=1)))(rows, np.arange(100.0))
    np.testing.assert_allclose(g2, np.arange(100.0)[:, None] * sc.softmax(rows, axis=1), rtol=1e-12, atol=1e-300)


def test_logsumexp_gradient_holds_the_shift_constant():
    """The gradient program is the softmax alone: no derivative through the max (no tie mask ``==``)."""
    source = pb.differentiate(lambda a: sc.logsumexp(a) + np.sum(sc.log_softmax(a))).source(X)
    assert " == " not in source and "stop_gradient" not in source and ".copy()" not in source
    np.testing.assert_allclose(pb.grad(lambda a: sc.logsumexp(a) + np.sum(sc.log_softmax(a)))(X),
                               sc.softmax(X) + 1 - X.size * sc.softmax(X), rtol=1e-12)


def test_logsumexp_with_weights_and_sign():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    out, sign = pb.jit(lambda a, b: sc.logsumexp(a, axis=1, b=b, return_sign=True))(a, b)
    want, want_sign = sc.logsumexp(a, axis=1, b=b, return_sign=True)
    np.testing.assert_allclose(out, want, rtol=1e-12)
    np.testing.assert_array_equal(sign, want_sign)
    check_grads(lambda a, b: sc.logsumexp(a, axis=1, b=b, return_sign=True)[0], [a, b], order=2)
    ninf = np.array([-np.inf, -np.inf])
    assert pb.jit(lambda a: sc.logsumexp(a))(ninf) == -np.inf


@pytest.mark.parametrize("call, argument", [
    (lambda a, x: sc.gammainc(a, x), "gammainc has no derivative with respect to a"),
    (lambda a, x: sc.gammaincc(a, x), "gammaincc has no derivative with respect to a"),
    (lambda a, x: sc.betainc(a, 2.0, x / 4), "betainc has no derivative with respect to a"),
    (lambda b, x: sc.betainc(2.0, b, x / 4), "betainc has no derivative with respect to b"),
    (lambda n, x: sc.polygamma(n, x), "polygamma has no derivative with respect to n"),
    (lambda v, x: sc.jv(v, x), "jv has no derivative with respect to v"),
    (lambda v, x: sc.yv(v, x), "yv has no derivative with respect to v"),
    (lambda n, x: sc.yn(n, x), "yn has no derivative with respect to n"),
    (lambda v, x: sc.iv(v, x), "iv has no derivative with respect to v"),
    (lambda v, x: sc.ive(v, x), "ive has no derivative with respect to v"),
    (lambda v, x: sc.kv(v, x), "kv has no derivative with respect to v"),
    (lambda v, x: sc.kve(v, x), "kve has no derivative with respect to v"),
])
def test_missing_derivatives_raise_naming_the_function_and_argument(call, argument):
    first = np.array([1.0, 2.0, 1.0, 3.0, 2.0])
    with pytest.raises(TracingError, match=argument) as info:
        pb.grad(lambda a, x: np.sum(call(a, x)))(first, X)
    assert "test_special.py" in str(info.value)
    # the other argument differentiates
    g = pb.grad(lambda a, x: np.sum(call(a, x)), argnums=1)(first, X)
    assert np.all(np.isfinite(g))


def test_printed_calls_are_scipys():
    source = pb.source(lambda x, y: sc.xlogy(x, y) + sc.polygamma(1, y) + sc.log_expit(x), X, X)
    for call in ("scipy.special.xlogy(x, y)", "scipy.special.polygamma(1, y)", "scipy.special.log_expit(x)"):
        assert call in source
    cuda = pb.jit(lambda x: sc.gammaln(x) + sc.betainc(1.5, 2.0, x / 4)).source(X, device="cuda")
    assert "cupyx.scipy.special.gammaln(x)" in cuda and "cupyx.scipy.special.betainc" in cuda
    assert "scipy.special" not in cuda.replace("cupyx.scipy.special", "")
    assert "cupyx.scipy.special.polygamma(cp.asarray(1), x)" in pb.jit(lambda x: sc.polygamma(1, x)).source(
        X, device="cuda")


def test_dtypes_follow_scipy():
    f32 = X.astype(np.float32)
    out = pb.jit(lambda x: (sc.gammaln(x), sc.logsumexp(x), sc.polygamma(1, x), sc.xlogy(2, x),
                            sc.gammaln((4 * x).astype(np.int32))))(f32)
    want = (sc.gammaln(f32), sc.logsumexp(f32), sc.polygamma(1, f32), sc.xlogy(2, f32),
            sc.gammaln((4 * f32).astype(np.int32)))
    assert [o.dtype for o in out] == [np.asarray(w).dtype for w in want]
    with pytest.raises(TracingError, match="scipy.special.gamma of complex128"):
        pb.jit(lambda z: sc.gamma(z))(X + 1j)


def test_scipy_special_holds_its_own_functions_after_a_trace():
    originals = {n: getattr(sc, n) for n in ("logsumexp", "softmax", "log_softmax", "polygamma", "multigammaln")}
    pb.grad(lambda x: sc.logsumexp(x) + np.sum(sc.softmax(x)))(X)
    with pytest.raises(TracingError):
        pb.grad(lambda a, x: np.sum(sc.gammainc(a, x)))(X, X)
    assert {n: getattr(sc, n) for n in originals} == originals
    assert all(getattr(sc, n) is f for n, f in originals.items())
    np.testing.assert_allclose(sc.logsumexp(X), np.log(np.sum(np.exp(X))), rtol=1e-14)


def test_bessel_j1_derivative_at_zero():
    x = np.array([0.0, 1e-300, 2.0])
    g = pb.grad(lambda x: np.sum(sc.j1(x)))(x)
    np.testing.assert_allclose(g, [0.5, 0.5, sc.j0(2.0) - sc.j1(2.0) / 2], rtol=1e-12)


def test_bessel_derivatives_match_scipys_own():
    """SciPy's jvp/yvp/ivp/kvp (derivatives by their own recurrences) as the oracle, at integral and real orders."""
    v = np.array([0.0, 0.5, 1.0, 2.0, 3.7])
    pairs = [(sc.jv, sc.jvp), (sc.yv, sc.yvp), (sc.iv, sc.ivp), (sc.kv, sc.kvp)]
    for f, fp in pairs:
        np.testing.assert_allclose(pb.grad(lambda x, f=f: np.sum(f(v, x)))(X), fp(v, X), rtol=1e-10)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(sc.yn(2, x)))(X), sc.yvp(2, X), rtol=1e-10)
    # the scaled forms: ive = exp(-|x|) iv (on both sides of 0, at integral orders), kve = exp(x) kv
    n, xs = np.array([0.0, 1.0, 2.0, 3.0, 1.0]), X * np.array([1, -1, 1, -1, -1])
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(sc.ive(n, x)))(xs),
                               np.exp(-np.abs(xs)) * (sc.ivp(n, xs) - np.sign(xs) * sc.iv(n, xs)), rtol=1e-10)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(sc.kve(v, x)))(X), np.exp(X) * (sc.kvp(v, X) + sc.kv(v, X)),
                               rtol=1e-10)
    for f, fp in [(sc.j0, lambda x: sc.jvp(0, x)), (sc.j1, lambda x: sc.jvp(1, x)), (sc.y0, lambda x: sc.yvp(0, x)),
                  (sc.y1, lambda x: sc.yvp(1, x)), (sc.k0, lambda x: sc.kvp(0, x)), (sc.k1, lambda x: sc.kvp(1, x)),
                  (sc.k0e, lambda x: np.exp(x) * (sc.kvp(0, x) + sc.k0(x))),
                  (sc.k1e, lambda x: np.exp(x) * (sc.kvp(1, x) + sc.k1(x)))]:
        np.testing.assert_allclose(pb.grad(lambda x, f=f: np.sum(f(x)))(X), fp(X), rtol=1e-10)


def test_traced_orders_compute_and_differentiate_in_x():
    """An order computed in the trace (here an integer array, which has no tangent) is an operand like any other."""
    n = np.array([0, 1, 2, 3, 1])
    f = pb.jit(lambda n, x: (sc.jv(n, x), sc.yn(n, x), sc.kve(n, x)))
    for ours, want in zip(f(n, X), (sc.jv(n, X), sc.yn(n, X), sc.kve(n, X))):
        np.testing.assert_allclose(ours, want, rtol=1e-12)
    g = pb.grad(lambda x, n: np.sum(sc.jv(n, x) + sc.iv(n + 0.5, x)))(X, n)
    np.testing.assert_allclose(g, sc.jvp(n, X) + sc.ivp(n + 0.5, X), rtol=1e-10)


def test_complex_erf_is_holomorphic():
    """dL = Re(G^H dZ) for a real loss L: for L = sum(Re erf(z)), G = conj(erf'(z)) = conj(2/sqrt(pi) exp(-z^2))."""
    z = X - 0.7j * X[::-1]
    g = pb.grad(lambda z: np.sum(np.real(sc.erf(z))))(z)
    np.testing.assert_allclose(g, np.conj(2 / np.sqrt(np.pi) * np.exp(-z**2)), rtol=1e-12)
    g = pb.grad(lambda z: np.sum(np.imag(sc.erfc(z))))(z)  # L = Im f = Re(-i f): G = conj(-i f') = i conj(f')
    np.testing.assert_allclose(g, 1j * np.conj(-2 / np.sqrt(np.pi) * np.exp(-z**2)), rtol=1e-12)
    check_grads(lambda z: sc.erf(z) * sc.erfc(0.5 * z), [z], order=2)
    out = pb.jit(lambda z: (sc.erf(z), sc.erfc(z)))(z.astype(np.complex64))
    assert [o.dtype for o in out] == [np.complex64] * 2
    np.testing.assert_allclose(out[0], sc.erf(z.astype(np.complex64)), rtol=1e-6)


def test_rgamma_and_gammasgn_derivatives():
    x = np.array([-2.5, -0.5, 0.7, 3.0])
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(sc.rgamma(x)))(x), -sc.digamma(x) / sc.gamma(x), rtol=1e-12)
    np.testing.assert_array_equal(pb.grad(lambda x: np.sum(sc.gammasgn(x) * x))(x), sc.gammasgn(x))


def test_printed_bessel_calls():
    source = pb.source(lambda x: sc.jv(2, x) + sc.yn(1, x) + sc.kve(0.5, x) + sc.j0(x), X)
    for call in ("scipy.special.jv(2, x)", "scipy.special.yn(1, x)", "scipy.special.kve(0.5, x)",
                 "scipy.special.j0(x)"):
        assert call in source
    # yn's int-order loop computes in float64, so a float32 computation keeps a float order
    f32 = X.astype(np.float32)
    assert "scipy.special.yn(2.0, x)" in pb.source(lambda x: sc.yn(np.float32(2), x), f32)
    assert pb.jit(lambda x: sc.yn(np.float32(2), x))(f32).dtype == np.float32
    assert pb.jit(lambda x: sc.yn(2, x))(f32).dtype == sc.yn(2, f32).dtype == np.float64
    cuda = pb.jit(lambda x: sc.j1(x) + sc.yn(2, x) + sc.k1e(x) + sc.rgamma(x) + sc.erf(x)).source(X, device="cuda")
    for call in ("cupyx.scipy.special.j1(x)", "cupyx.scipy.special.yn(2, x)", "cupyx.scipy.special.k1e(x)",
                 "cupyx.scipy.special.rgamma(x)", "cupyx.scipy.special.erf(x)"):
        assert call in cuda


@pytest.mark.parametrize("call, name", [
    (lambda x: sc.jv(1.5, x), "jv"), (lambda x: sc.iv(2, x), "iv"), (lambda x: sc.kve(0, x), "kve"),
    (lambda x: sc.erf(x + 1j), "erf of complex values"),
])
def test_cupy_refuses_what_cupyx_lacks(call, name):
    with pytest.raises(NotImplementedError, match=f"scipy.special.{name} .*no CuPy emitter"):
        pb.jit(call).source(X, device="cuda")
