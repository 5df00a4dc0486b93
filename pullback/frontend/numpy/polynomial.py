"""Polynomials and interpolation on traced arrays: ``np.polyval``, ``np.polyfit``, ``np.vander``,
``np.polynomial.polynomial.polyval``, ``np.polynomial.Polynomial`` (made from traced coefficients, or
called on traced values), and ``np.interp``, with NumPy's arithmetic and dtypes.

Evaluation is Horner's rule, as NumPy's; ``polyfit`` is NumPy's least-squares fit (the Vandermonde
matrix with its columns scaled to unit norm, ``lstsq``, the scale undone), so its derivative is
``lstsq``'s. ``interp`` finds each point's interval by counting the knots at or below it (a comparison,
of zero derivative), then interpolates between the two knots gathered there: its derivative in ``x``
is the slope, in ``xp`` and ``fp`` the interpolation's own."""

from __future__ import annotations

import numpy as np
from numpy.polynomial import polyutils

from pullback.errors import TracingError
from pullback.frontend import numpy as core
from pullback.frontend.construct import implements_attribute
from pullback.ir.tracer import Tracer, located


@core.implements(np.polyval)
def polyval(p, x):
    """``y = y * x + c`` from ``y = zeros_like(x)``, over the coefficients from the highest power."""
    p = core._lift(p)
    y = core.zeros_like(x) if isinstance(x, Tracer) else np.zeros_like(np.asanyarray(x))
    for i in range(p.shape[0]):
        y = core.add(core.multiply(y, x), core.getitem(p, i))
    return y


@core.implements(np.vander)
def vander(x, N=None, increasing=False):
    """The columns ``x ** (N - 1), ..., x, 1`` (increasing: the other way round), in ``x``'s dtype."""
    x = core._lift(x)
    if x.ndim != 1:
        raise TracingError(located("np.vander: x must be a one-dimensional array or sequence"))
    n = x.shape[0] if N is None else int(N)
    powers = [core.ones_like(x) if k == 0 else core.power(x, k) for k in range(n)]
    return core.stack(powers if increasing else powers[::-1], axis=1)


@core.implements(np.polyfit)
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """NumPy's least-squares fit of a polynomial of degree ``deg``: the coefficients, highest power first."""
    from pullback.frontend import linalg

    if full or cov:
        core.unsupported("np.polyfit with full=True or cov=True")
    order = int(deg) + 1
    x, y = core.add(core._lift(x), 0.0), core.add(core._lift(y), 0.0)
    if deg < 0:
        raise TracingError(located("np.polyfit: expected deg >= 0"))
    if x.ndim != 1 or x.shape[0] == 0:
        raise TracingError(located("np.polyfit: expected a non-empty 1-d x"))
    if y.ndim < 1 or y.ndim > 2 or x.shape[0] != y.shape[0]:
        raise TracingError(located("np.polyfit: expected y of 1 or 2 dimensions and as long as x"))
    if rcond is None:
        rcond = x.shape[0] * np.finfo(x.dtype).eps
    lhs, rhs = vander(x, order), y
    if w is not None:
        w = core.add(core._lift(w), 0.0)
        if w.ndim != 1 or w.shape[0] != y.shape[0]:
            raise TracingError(located("np.polyfit: expected a 1-d w as long as y"))
        lhs = core.multiply(lhs, core.reshape(w, (-1, 1)))
        rhs = core.multiply(rhs, core.reshape(w, (-1, 1)) if rhs.ndim == 2 else w)
    scale = core.UFUNCS[np.sqrt](core.sum(core.multiply(lhs, lhs), axis=0))
    c = linalg.lstsq(core.divide(lhs, scale), rhs, rcond)[0]
    return core.transpose(core.divide(core.transpose(c), scale))


@implements_attribute(np.polynomial.polynomial, "polyval", "numpy.polynomial.polynomial.polyval")
def polynomial_polyval(x, c, tensor=True):
    """Horner's rule from the highest coefficient ``c[-1]``; with ``tensor``, each coefficient's own axes
    come before ``x``'s, as NumPy's."""
    c = core._lift(c)
    if c.ndim == 0:
        c = core.reshape(c, (1,))
    if c.dtype.kind in "biu":
        c = core.add(c, 0.0)
    if isinstance(x, tuple | list):
        x = core._lift(x)
    if isinstance(x, np.ndarray | Tracer) and tensor:
        c = core.reshape(c, c.shape + (1,) * x.ndim)
    c0 = core.add(core.getitem(c, -1), core.multiply(x, 0))
    for i in range(2, c.shape[0] + 1):
        c0 = core.add(core.getitem(c, -i), core.multiply(c0, x))
    return c0


def _evaluate(coef, domain, window, arg):
    """``Polynomial.__call__``: ``arg`` mapped from the domain to the window, then the power series."""
    off, scl = polyutils.mapparms(domain, window)
    return polynomial_polyval(core.add(off, core.multiply(scl, arg)), coef)


class TracedPolynomial:
    """``np.polynomial.Polynomial`` of traced coefficients, made while tracing: it evaluates (``p(x)``)
    and keeps its ``coef``, ``domain`` and ``window``; its other methods are NumPy's to add."""

    def __init__(self, coef, domain, window):
        self.coef = coef
        self.domain = np.asarray(domain if domain is not None else np.polynomial.Polynomial.domain, np.float64)
        self.window = np.asarray(window if window is not None else np.polynomial.Polynomial.window, np.float64)

    def __call__(self, arg):
        return _evaluate(self.coef, self.domain, self.window, arg)


@implements_attribute(np.polynomial, "Polynomial", "numpy.polynomial.Polynomial")
def polynomial(coef, domain=None, window=None, symbol="x"):
    coef = core._lift(coef)
    if coef.ndim != 1:
        raise TracingError(located("numpy.polynomial.Polynomial: coefficients must be 1-d"))
    return TracedPolynomial(coef if coef.dtype.kind in "fc" else core.add(coef, 0.0), domain, window)


@implements_attribute(np.polynomial.Polynomial, "__call__", "numpy.polynomial.Polynomial.__call__")
def polynomial_call(self, arg):
    return _evaluate(self.coef, self.domain, self.window, arg)


polynomial_call.takes_self = True  # type: ignore[attr-defined]


@core.implements(np.interp)
def interp(x, xp, fp, left=None, right=None, period=None):
    """NumPy's piecewise-linear interpolant of the knots ``(xp, fp)`` (``xp`` increasing) at ``x``;
    ``left``/``right`` (default ``fp[0]``/``fp[-1]``) outside."""
    if period is not None:
        core.unsupported("np.interp with period=")
    xp, fp = core._lift(xp), core._lift(fp)
    if xp.ndim != 1 or fp.ndim != 1 or xp.shape != fp.shape:
        raise TracingError(located("np.interp: fp and xp are not of the same length"))
    n = xp.shape[0]
    if n == 0:
        raise TracingError(located("np.interp: array of sample points is empty"))
    dtype = np.complex128 if core.result_dtype(fp).kind == "c" else np.float64
    x, xp, fp = core.astype(core._lift(x), np.float64), core.astype(xp, np.float64), core.astype(fp, dtype)
    first, last = core.getitem(fp, 0), core.getitem(fp, -1)
    left = first if left is None else core.astype(left if isinstance(left, Tracer) else np.asarray(left), dtype)
    right = last if right is None else core.astype(right if isinstance(right, Tracer) else np.asarray(right), dtype)
    if n == 1:
        inside = core.multiply(core.ones_like(x, dtype=dtype), first)
    else:
        below = core.less_equal(core.expand_dims(xp, tuple(range(x.ndim))), core.expand_dims(x, -1))
        j = core.minimum(core.maximum(core.subtract(core.sum(below, axis=-1), 1), 0), n - 2)
        x0, x1 = core.getitem(xp, j), core.getitem(xp, core.add(j, 1))
        f0, f1 = core.getitem(fp, j), core.getitem(fp, core.add(j, 1))
        slope = core.divide(core.subtract(f1, f0), core.subtract(x1, x0))
        inside = core.add(core.multiply(slope, core.subtract(x, x0)), f0)
        inside = core.where(core.equal(x, core.getitem(xp, -1)), last, inside)  # exactly fp[-1], as NumPy
    out = core.where(core.less(x, core.getitem(xp, 0)), left,
                     core.where(core.greater(x, core.getitem(xp, -1)), right, inside))
    return core.astype(out, dtype)

