"""scipy.special on traced arrays beyond the per-primitive cases: second derivatives, the points
where a naive rule fails (I1' at 0, log_ndtr far in the tail, logsumexp of large inputs), the
clear errors for derivatives without a closed form, printing, and that SciPy's module holds its
own functions again after a trace. Oracles: SciPy, central finite differences, closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc

import pullback as pb
from pullback.errors import TracingError
from pullback.testing import check_grads

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
