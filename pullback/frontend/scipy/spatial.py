"""``scipy.spatial.distance.cdist`` and ``pdist`` on traced arrays, by their SciPy names (SciPy converts
its arguments with ``np.asarray``: ``construct.implements_attribute``), for the metrics ``euclidean``,
``sqeuclidean``, ``cityblock``, ``chebyshev``, ``minkowski`` (``p``) and ``cosine``, in float64 as
SciPy computes them.

Each distance is the metric of the differences (or products) of the pairs of rows, reduced along
the last axis: ``cdist`` pairs every row of ``XA`` with every row of ``XB`` by broadcasting, ``pdist``
takes the pairs ``i < j`` by constant index arrays, in SciPy's condensed order. The Euclidean
distance of two equal rows has derivative 0 (the subgradient of ``|u - v|`` there), not the NaN that
``sqrt`` at 0 would give: ``cdist(X, X)`` has zeros on its diagonal."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.spatial.distance

from pullback.errors import TracingError
from pullback.frontend import numpy as core
from pullback.frontend.construct import implements_attribute
from pullback.ir.tracer import located


def _safe_sqrt(s):
    """``sqrt(s)`` for ``s >= 0`` whose derivative at 0 is 0: the square root of 1 where s is 0, masked."""
    positive = core.greater(s, 0.0)
    return core.where(positive, core.UFUNCS[np.sqrt](core.where(positive, s, 1.0)), 0.0)


def _sum(x):
    return core.sum(x, axis=-1)


def _minkowski(u, v, p: float = 2.0):
    if p <= 0:
        raise TracingError(located(f"minkowski: p must be greater than 0, got {p}"))
    if p == 2:
        return _METRICS["euclidean"](u, v)
    a = core.absolute(core.subtract(u, v))
    if p == 1:
        return _sum(a)
    if p == np.inf:
        return core.max(a, axis=-1)
    return core.power(_sum(core.power(a, float(p))), 1.0 / p)


def _cosine(u, v):
    uv, uu, vv = _sum(core.multiply(u, v)), _sum(core.multiply(u, u)), _sum(core.multiply(v, v))
    return core.subtract(1.0, core.divide(uv, core.UFUNCS[np.sqrt](core.multiply(uu, vv))))


_METRICS: dict[str, Callable] = {
    "euclidean": lambda u, v: _safe_sqrt(_sum(core.square(core.subtract(u, v)))),
    "sqeuclidean": lambda u, v: _sum(core.square(core.subtract(u, v))),
    "cityblock": lambda u, v: _sum(core.absolute(core.subtract(u, v))),
    "chebyshev": lambda u, v: core.max(core.absolute(core.subtract(u, v)), axis=-1),
    "minkowski": _minkowski,
    "cosine": _cosine,
}
_ALIASES = {"euclid": "euclidean", "eu": "euclidean", "e": "euclidean", "sqe": "sqeuclidean", "sqeuclid": "sqeuclidean",
            "cityblock": "cityblock", "cblock": "cityblock", "cb": "cityblock", "c": "cityblock",
            "chebychev": "chebyshev", "cheby": "chebyshev", "cheb": "chebyshev",
            "ch": "chebyshev", "mi": "minkowski", "m": "minkowski", "pnorm": "minkowski", "cos": "cosine"}


def _metric(name: str, metric, out, kwargs) -> Callable:
    if out is not None:
        core.unsupported(f"scipy.spatial.distance.{name} with out=")
    key = _ALIASES.get(metric, metric) if isinstance(metric, str) else None
    if key not in _METRICS:
        core.unsupported(f"scipy.spatial.distance.{name} with metric={metric!r} (pullback has "
                         f"{', '.join(_METRICS)})")
    if set(kwargs) - ({"p"} if key == "minkowski" else set()):
        core.unsupported(f"scipy.spatial.distance.{name} with {', '.join(sorted(kwargs))} for {key}")
    f = _METRICS[key]
    return (lambda u, v: f(u, v, float(kwargs["p"]))) if "p" in kwargs else f


def _rows(name: str, what: str, x):
    x = core._lift(x)
    if x.ndim != 2:
        raise TracingError(located(f"scipy.spatial.distance.{name}: {what} must be a 2-dimensional array, got shape "
                                   f"{x.shape}"))
    if x.dtype.kind == "c":
        core.unsupported(f"scipy.spatial.distance.{name} of complex values")
    return core.astype(x, np.float64)


@implements_attribute(scipy.spatial.distance, "cdist", "scipy.spatial.distance.cdist")
def cdist(XA, XB, metric="euclidean", *, out=None, **kwargs):
    """The distance of every row of ``XA`` to every row of ``XB``: an (mA, mB) array."""
    f = _metric("cdist", metric, out, kwargs)
    xa, xb = _rows("cdist", "XA", XA), _rows("cdist", "XB", XB)
    if xa.shape[1] != xb.shape[1]:
        raise TracingError(located("scipy.spatial.distance.cdist: XA and XB must have the same number of columns "
                                   f"(i.e. feature dimension), got {xa.shape} and {xb.shape}"))
    return f(core.expand_dims(xa, 1), core.expand_dims(xb, 0))


@implements_attribute(scipy.spatial.distance, "pdist", "scipy.spatial.distance.pdist")
def pdist(X, metric="euclidean", *, out=None, **kwargs):
    """The distances of the pairs of rows ``i < j`` of ``X``, condensed as SciPy orders them."""
    f = _metric("pdist", metric, out, kwargs)
    x = _rows("pdist", "X", X)
    i, j = np.triu_indices(x.shape[0], 1)
    return f(core.getitem(x, i), core.getitem(x, j))
