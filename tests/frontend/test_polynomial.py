"""Polynomials and interpolation (pullback/frontend/numpy/polynomial.py): ``np.polyval``, ``np.polyfit``,
``np.vander``, ``np.polynomial.polynomial.polyval``, ``np.polynomial.Polynomial`` and ``np.interp``:
NumPy's values and dtypes, derivatives against finite differences (away from ``interp``'s knots)."""

import numpy as np
import pytest
from numpy.polynomial import Polynomial
from pullback.testing import check_grads

import pullback as pb

RNG = np.random.default_rng(7)
X = np.array([0.3, -1.2, 2.1, 0.7])
C = RNG.standard_normal(3)
XS = np.linspace(0, 3, 7)
YS = np.sin(XS)


def _same(ours, want):
    for o, w in zip(ours, want):
        w = np.asarray(w)
        assert np.shape(o) == w.shape and np.asarray(o).dtype == w.dtype, (np.shape(o), w.shape, o.dtype, w.dtype)
        np.testing.assert_allclose(o, w, rtol=1e-12, atol=1e-13)


def polynomials(x, c, xs, ys):
    return (np.polyval(c, x), np.polyval([1.0, 2.0], x), np.polyval(c, 2.0), np.polyval(np.stack([c, c]).T, x[:2]),
            np.polynomial.polynomial.polyval(x, c), np.polynomial.polynomial.polyval(x, np.stack([c, 2 * c], 1)),
            np.polynomial.polynomial.polyval(x[:2], np.stack([c, 2 * c], 1), tensor=False),
            np.polynomial.polynomial.polyval(0.5, c), Polynomial(c)(x), Polynomial([1.0, 2.0, 3.0])(x),
            Polynomial(c, domain=[0, 2])(x), np.vander(x), np.vander(x, 3, increasing=True),
            np.polyfit(xs, ys, 2), np.polyfit(xs, np.stack([ys, ys ** 2], 1), 3),
            np.polyfit(xs, ys, 1, w=np.linspace(1, 2, 7)))


def interpolations(x, xs, ys):
    return (np.interp(x, xs, ys), np.interp(x, [0.0, 1.0, 2.0], [1.0, 3.0, 2.0]),
            np.interp(x, xs, ys, left=-1.0, right=5.0), np.interp(2.4, xs, ys + 1j * xs),
            np.interp(np.array([0.1, 2.9, -1, 4]), xs, ys), np.interp(x, [1.0], [2.0]))


def test_polynomials():
    _same(pb.jit(polynomials)(X, C, XS, YS), polynomials(X, C, XS, YS))
    check_grads(polynomials, [X, C, XS, YS])


def test_interp():
    _same(pb.jit(interpolations)(X, XS, YS), interpolations(X, XS, YS))
    check_grads(interpolations, [X, XS, YS])
    at_knots = np.array([0.0, 0.5, 3.0, 1.5, -2.0, 3.5])  # the knots' own values, ends included
    _same(pb.jit(lambda x: (np.interp(x, XS, YS),))(at_knots), (np.interp(at_knots, XS, YS),))


def test_a_polynomial_made_from_traced_coefficients_evaluates():
    p = pb.jit(lambda c, x: Polynomial(c)(x))
    np.testing.assert_allclose(p(C, X), Polynomial(C)(X), rtol=1e-14)
    np.testing.assert_allclose(pb.grad(lambda c: np.sum(Polynomial(c)(X)))(C), [len(X), X.sum(), (X ** 2).sum()])


def test_refusals():
    with pytest.raises(pb.TracingError, match="period"):
        pb.jit(lambda x: np.interp(x, XS, YS, period=1.0))(X)
    with pytest.raises(pb.TracingError, match="full=True"):
        pb.jit(lambda y: np.polyfit(XS, y, 2, full=True))(YS)
