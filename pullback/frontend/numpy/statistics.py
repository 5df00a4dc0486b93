"""Statistics, products, cumulative operations, differences and ranges on traced arrays:
``np.var``, ``np.std``, ``np.average``, ``np.prod``, ``np.cumsum``, ``np.cumprod``,
``np.diff``, ``np.ediff1d``, ``np.linspace``, ``np.gradient``, the order statistics
``np.median``, ``np.quantile`` and ``np.percentile`` (a sort, then NumPy's interpolation between
neighbours at positions known when tracing), ``np.cov`` and ``np.corrcoef``, with NumPy's dtypes
and shapes."""

from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from pullback.errors import ArgumentError, TracingError
from pullback.frontend import numpy as core
from pullback.frontend.numpy import indexing
from pullback.ir.tracer import Tracer, bind, located
from pullback.ir.types import canonical_dtype, is_complex, is_inexact
from pullback.primitives import cumulative as cum
from pullback.primitives import structural as st

_NO = np._NoValue


def _accumulation_dtype(a, dtype) -> np.dtype:
    """NumPy's dtype for sums and products: bools and integers accumulate in the default int."""
    if dtype is not None:
        return canonical_dtype(dtype)
    return np.dtype(np.int64) if a.dtype.kind in "bi" else a.dtype


def _flag(keepdims) -> bool:
    return False if keepdims is _NO else bool(keepdims)


def _no_out(name: str, out, *others) -> None:
    if out is not None or any(o is not _NO for o in others):
        core.unsupported(f"np.{name} with out=, initial=, where= or mean=")


@core.implements(np.prod)
def prod(a, axis=None, dtype=None, out=None, keepdims=_NO, initial=_NO, where=_NO):
    _no_out("prod", out, initial, where)
    a = core._lift(a)
    a = core.astype(a, _accumulation_dtype(a, dtype))
    axes = core._axes(axis, a.ndim)
    res = bind(cum.reduce_prod_p, a, axes=axes) if axes else a
    return core._keep(res, a, axes, _flag(keepdims))


def _cumulative(prim, name):
    def accumulate(a, axis=None, dtype=None, out=None):
        _no_out(name, out)
        a = core._lift(a)
        if axis is None:
            a, axis = core.reshape(a, (-1,)), 0
        elif a.ndim == 0:
            raise TracingError(located(f"np.{name}: axis {axis} is out of bounds for a 0-d array"))
        a = core.astype(a, _accumulation_dtype(a, dtype))
        return bind(prim, a, axis=core._axis(axis, a.ndim), reverse=False)

    return accumulate


cumsum = core.implements(np.cumsum)(_cumulative(cum.cumsum_p, "cumsum"))
cumprod = core.implements(np.cumprod)(_cumulative(cum.cumprod_p, "cumprod"))


def _moment_dtype(a, dtype) -> np.dtype:
    if dtype is not None:
        return canonical_dtype(dtype)
    return a.dtype if is_inexact(a.dtype) else np.dtype(np.float64)


@core.implements(np.var)
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    """``sum(|a - mean(a)|^2) / (n - ddof)``; complex input gives a real result, as in NumPy."""
    _no_out("var", out, where, mean)
    if correction is not _NO:
        if ddof != 0:
            raise ArgumentError(located("np.var: ddof and correction can't be provided simultaneously"))
        ddof = correction
    a = core._lift(a)
    a = core.astype(a, _moment_dtype(a, dtype))
    axes = core._axes(axis, a.ndim)
    n = math.prod(a.shape[i] for i in axes)
    centred = core.subtract(a, core.divide(core.sum(a, axes, keepdims=True), n))
    if is_complex(a.dtype):
        re, im = core.real(centred), core.imag(centred)
        squares = core.add(core.multiply(re, re), core.multiply(im, im))
    else:
        squares = core.multiply(centred, centred)
    total = core.sum(squares, axes, dtype, keepdims=_flag(keepdims))  # in ``dtype`` if given, as NumPy
    return core.divide(total, builtins.max(n - ddof, 0))


@core.implements(np.std)
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO, *, where=_NO, mean=_NO, correction=_NO):
    """``sqrt(var)``; over a single element, ``(x - x) * 0``: zero (NaN for a non-finite x, as
    NumPy), with derivatives zero where ``sqrt`` at 0 would make them NaN (the function is constant)."""
    a = core._lift(a)
    n = math.prod(a.shape[i] for i in core._axes(axis, a.ndim))
    if n == 1 and ddof == 0 and correction is _NO:
        _no_out("std", out, where, mean)
        one = core.sum(core.astype(a, _moment_dtype(a, dtype)), axis, keepdims=_flag(keepdims))
        zero = core.subtract(one, one)  # 0, or NaN where x is not finite; derivatives 0 to every order
        if is_complex(zero.dtype):
            zero = core.add(core.real(zero), core.imag(zero))
        return core.multiply(zero, 0.0)
    return core.UFUNCS[np.sqrt](var(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction))


@core.implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=_NO):
    """``sum(a * w) / sum(w)``; 1-d weights lie along ``axis``, as in NumPy."""
    from pullback.frontend.numpy import mean as mean_

    a = core._lift(a)
    keep = _flag(keepdims)
    if weights is None:
        avg = mean_(a, axis, keepdims=keep)
        scale = a.size // builtins.max(avg.size, 1) if a.size else 0
        return (avg, core.full_like(avg, scale)) if returned else avg
    w = core._lift(weights)
    if w.shape != a.shape:
        if axis is None:
            raise TracingError(located("np.average: axis must be specified when shapes of a and weights differ"))
        if w.ndim != 1:
            raise TracingError(located("np.average: 1D weights expected when shapes of a and weights differ"))
        ax = core._axis(axis, a.ndim)
        if w.shape[0] != a.shape[ax]:
            raise TracingError(located("np.average: length of weights not compatible with specified axis"))
        w = core.broadcast_to(core.reshape(w, tuple(-1 if i == ax else 1 for i in range(a.ndim))), a.shape)
    d = core.result_dtype(a, w)
    d = np.result_type(d, np.float64) if a.dtype.kind in "bi" else d
    a, w = core.astype(a, d), core.astype(w, d)
    scale = core.sum(w, axis, keepdims=keep)
    avg = core.divide(core.sum(core.multiply(a, w), axis, keepdims=keep), scale)
    return (avg, core.broadcast_to(scale, avg.shape)) if returned else avg


def _along(a, axis: int, index) -> tuple:
    return (slice(None),) * axis + (index,)


@core.implements(np.diff)
def diff(a, n=1, axis=-1, prepend=_NO, append=_NO):
    """``a[1:] - a[:-1]`` along ``axis``, ``n`` times (``!=`` for booleans, as NumPy)."""
    if operator.index(n) < 0:  # a TypeError for a non-integer, as NumPy's
        raise ArgumentError(located(f"np.diff: order must be non-negative but got {n!r}"))
    if n == 0:
        return a
    a = core._lift(a)
    if a.ndim == 0:
        raise TracingError(located("np.diff requires input that is at least one dimensional"))
    ax = core._axis(axis, a.ndim)
    ends = []
    for end in (prepend, append):
        if end is _NO:
            ends.append(None)
            continue
        shape = tuple(1 if i == ax else s for i, s in enumerate(a.shape))
        if np.ndim(end) == 0:  # a scalar of any kind, a constant 0-d array included
            dtype = end.dtype if isinstance(end, Tracer) else np.asarray(end).dtype  # strong, as NumPy's asanyarray
            end = core.full_like(a, end, dtype=dtype, shape=shape)
        ends.append(end)
    if ends[0] is not None or ends[1] is not None:
        a = core.concatenate([x for x in (ends[0], a, ends[1]) if x is not None], axis=ax)
    op = core.not_equal if a.dtype == np.bool_ else core.subtract
    for _ in range(n):
        a = op(getitem_(a, _along(a, ax, slice(1, None))), getitem_(a, _along(a, ax, slice(None, -1))))
    return a


def getitem_(a, key):
    return core.getitem(a, key) if isinstance(a, Tracer) else a[key]


@core.implements(np.ediff1d)
def ediff1d(ary, to_end=None, to_begin=None):
    ary = core.reshape(core._lift(ary), (-1,))
    pieces = [diff(ary)]
    for end, first in ((to_begin, True), (to_end, False)):
        if end is not None:
            end = core.astype(core.reshape(core._lift(end), (-1,)), ary.dtype)
            pieces.insert(0, end) if first else pieces.append(end)
    return core.concatenate(pieces) if len(pieces) > 1 else pieces[0]


@core.implements(np.linspace)
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """``start + arange(num) * step`` with ``stop`` itself as the last sample (``endpoint``);
    array bounds give a new axis of samples at ``axis``, as in NumPy."""
    if operator.index(num) < 0:  # a TypeError for a non-integer, as NumPy's
        raise ArgumentError(located(f"np.linspace: number of samples, {num!r}, must be non-negative"))
    num = int(num)
    dt = core.result_dtype(start, stop, 0.0)
    if dtype is not None and not is_inexact(canonical_dtype(dtype)):
        core.unsupported("np.linspace with an integer dtype")
    start, stop = (core.astype(x, dt) if isinstance(x, Tracer) else np.asarray(x, dt) for x in (start, stop))
    div = num - 1 if endpoint else num
    delta = core.subtract(stop, start)
    shape = np.broadcast_shapes(start.shape, stop.shape)
    steps = core.reshape(bind(st.iota_p, dtype=dt, shape=(num,), dimension=0), (num,) + (1,) * len(shape))
    step = core.divide(delta, div) if div > 0 else np.nan  # undefined, a float NaN as in NumPy
    samples = core.add(core.multiply(steps, step if div > 0 else delta), start)
    if endpoint and num > 1:
        last = core.broadcast_to(core.astype(stop, samples.dtype), (1,) + shape)
        samples = core.concatenate([getitem_(samples, slice(None, -1)), last], axis=0)
    if dtype is not None:
        samples = core.astype(samples, dtype)
    samples = core.moveaxis(samples, 0, axis) if axis != 0 else samples
    return (samples, step) if retstep else samples



@core.implements(np.gradient)
def gradient(f, *varargs, axis=None, edge_order=1):
    """NumPy's second-order accurate differences: central in the interior, one-sided of order
    ``edge_order`` at the ends; spacings are scalars or coordinate arrays (uniform or not), as
    in NumPy. One array per axis, a tuple when there are several."""
    f = core._lift(f)
    if axis is None:
        axes = tuple(range(f.ndim))
    else:  # in the order given, as NumPy returns them
        axes = tuple(core._axis(a, f.ndim) for a in (axis if isinstance(axis, tuple | list) else (axis,)))
    if edge_order > 2:
        raise ArgumentError(located("np.gradient: 'edge_order' greater than 2 not supported"))
    edge_order = 1 if edge_order == 1 else 2  # as NumPy reads it
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TracingError(located("np.gradient: invalid number of arguments"))
    dtype = f.dtype if is_inexact(f.dtype) else np.dtype(np.float64)
    f = core.astype(f, dtype)
    out = [_gradient_along(f, ax, h, edge_order) for ax, h in zip(axes, spacings)]
    return out[0] if len(out) == 1 else tuple(out)


def _gradient_along(f, ax: int, h, edge_order: int):
    n = f.shape[ax]
    if n < edge_order + 1:
        raise ArgumentError(located("np.gradient: shape of the array too small to calculate a numerical gradient, "
                                   "at least (edge_order + 1) elements are required"))

    def part(start, stop):
        return getitem_(f, _along(f, ax, slice(start, stop)))

    def along(x):  # a 1-d array of per-position coefficients, laid along ``ax``
        shape = tuple(-1 if i == ax else 1 for i in range(f.ndim))
        return core.reshape(x, shape)

    if np.ndim(h) == 0:  # uniform spacing
        interior = core.divide(core.subtract(part(2, None), part(None, -2)), core.multiply(2.0, h))
        if edge_order == 1:
            first = core.divide(core.subtract(part(1, 2), part(0, 1)), h)
            last = core.divide(core.subtract(part(n - 1, n), part(n - 2, n - 1)), h)
        else:
            first = core.divide(core.add(core.add(core.multiply(-1.5, part(0, 1)), core.multiply(2.0, part(1, 2))),
                                         core.multiply(-0.5, part(2, 3))), h)
            last = core.divide(core.add(core.add(core.multiply(0.5, part(n - 3, n - 2)),
                                                 core.multiply(-2.0, part(n - 2, n - 1))),
                                        core.multiply(1.5, part(n - 1, n))), h)
        return core.concatenate([first, interior, last], axis=ax)
    x = core.astype(core._lift(h), np.result_type(core.result_dtype(h), np.float64))
    if x.ndim != 1 or x.shape[0] != n:
        raise TracingError(located("np.gradient: when 1d, distances must match the length of the corresponding "
                                   "dimension"))
    dx = diff(x)
    dx1, dx2 = getitem_(dx, slice(None, -1)), getitem_(dx, slice(1, None))
    a = core.negative(core.divide(dx2, core.multiply(dx1, core.add(dx1, dx2))))
    b = core.divide(core.subtract(dx2, dx1), core.multiply(dx1, dx2))
    c = core.divide(dx1, core.multiply(dx2, core.add(dx1, dx2)))
    interior = core.add(core.add(core.multiply(along(a), part(None, -2)), core.multiply(along(b), part(1, -1))),
                        core.multiply(along(c), part(2, None)))
    d0, dl = getitem_(dx, 0), getitem_(dx, -1)
    if edge_order == 1:
        first = core.divide(core.subtract(part(1, 2), part(0, 1)), d0)
        last = core.divide(core.subtract(part(n - 1, n), part(n - 2, n - 1)), dl)
    else:
        d1, dm = getitem_(dx, 1), getitem_(dx, -2)
        a0 = core.negative(core.divide(core.add(core.multiply(2.0, d0), d1), core.multiply(d0, core.add(d0, d1))))
        b0 = core.divide(core.add(d0, d1), core.multiply(d0, d1))
        c0 = core.negative(core.divide(d0, core.multiply(d1, core.add(d0, d1))))
        first = core.add(core.add(core.multiply(a0, part(0, 1)), core.multiply(b0, part(1, 2))),
                         core.multiply(c0, part(2, 3)))
        an = core.divide(dl, core.multiply(dm, core.add(dm, dl)))
        bn = core.negative(core.divide(core.add(dl, dm), core.multiply(dm, dl)))
        cn = core.divide(core.add(core.multiply(2.0, dl), dm), core.multiply(dl, core.add(dm, dl)))
        last = core.add(core.add(core.multiply(an, part(n - 3, n - 2)), core.multiply(bn, part(n - 2, n - 1))),
                        core.multiply(cn, part(n - 1, n)))
    return core.concatenate([first, interior, last], axis=ax)


# --- order statistics ---------------------------------------------------------------------------------
# A quantile of n values is, for the methods below, NumPy's interpolation between two neighbours of the
# sorted values, at positions and with a weight that q and n alone fix: known when tracing. So it is a
# sort and a gather at constant positions, and its derivative the sort's (the values' own positions).


def _h_f(alpha: float, beta: float):
    """Hyndman and Fan's continuous methods: the virtual index ``n q + alpha + q (1 - alpha - beta) - 1``."""
    return lambda n, q: n * q + (alpha + q * (1 - alpha - beta)) - 1


_VIRTUAL_INDEX = {
    "linear": lambda n, q: (n - 1) * q, "lower": lambda n, q: np.floor((n - 1) * q).astype(np.intp),
    "higher": lambda n, q: np.ceil((n - 1) * q).astype(np.intp),
    "nearest": lambda n, q: np.around((n - 1) * q).astype(np.intp),
    "midpoint": lambda n, q: 0.5 * (np.floor((n - 1) * q) + np.ceil((n - 1) * q)),
    "interpolated_inverted_cdf": _h_f(0, 1), "hazen": _h_f(0.5, 0.5), "weibull": _h_f(0, 0),
    "median_unbiased": _h_f(1 / 3, 1 / 3), "normal_unbiased": _h_f(3 / 8, 3 / 8),
}


def _sorted_last(name: str, a, axis):
    """``a`` with the reduced axes gathered into one last axis, sorted along it; and those axes."""
    a = core._lift(a)
    if is_complex(a.dtype):
        raise TracingError(located(f"np.{name}: a must be an array of real numbers"))
    axes = core._axes(axis, a.ndim)
    rest = [i for i in range(a.ndim) if i not in axes]
    a = core.reshape(core.transpose(a, rest + list(axes)), tuple(a.shape[i] for i in rest) + (-1,))
    if a.shape[-1] == 0:
        raise TracingError(located(f"np.{name} of an empty array (or axis) is NaN: not traced by pullback"))
    return indexing.sort(a, axis=-1), axes


def _keepdims(out, a_shape, axes, lead: tuple[int, ...]):
    return core.reshape(out, lead + tuple(1 if i in axes else n for i, n in enumerate(a_shape)))


def _quantile(name: str, a, q, axis, method: str, keepdims, weak: bool):
    """``np.quantile`` for a ``q`` known when tracing (checked to lie in [0, 1])."""
    if method not in _VIRTUAL_INDEX:
        core.unsupported(f"np.{name} with method={method!r}")
    if isinstance(q, Tracer):
        core.unsupported(f"np.{name} of a traced q")
    a_shape = np.shape(a)
    s, axes = _sorted_last(name, a, axis)
    n = s.shape[-1]
    virtual = np.asanyarray(_VIRTUAL_INDEX[method](n, q))
    last = (slice(None),) * (s.ndim - 1)
    if virtual.dtype.kind in "iu" and method in ("linear", "lower", "higher", "nearest"):  # the value there
        out = core.getitem(s, last + (np.clip(virtual, 0, n - 1),))
    else:  # NumPy's _get_indexes, _get_gamma and _lerp
        below = np.floor(virtual)
        gamma = virtual - below
        if method == "midpoint":
            gamma = np.where(virtual % 1 == 0, 0.0, 0.5)
        low = np.clip(below, 0, n - 1).astype(np.intp)
        high = np.clip(below + 1, 0, n - 1).astype(np.intp)
        low, high = np.where(virtual >= n - 1, n - 1, low), np.where(virtual >= n - 1, n - 1, high)
        a_low, a_high = core.getitem(s, last + (low,)), core.getitem(s, last + (high,))
        gamma = float(gamma) if weak else gamma
        diff_ = core.subtract(a_high, a_low)
        up = core.add(a_low, core.multiply(diff_, gamma))
        down = core.subtract(a_high, core.multiply(diff_, 1 - gamma))
        out = core.astype(core.where(np.asarray(gamma) >= 0.5, down, up), up.dtype)
    q_axes = virtual.ndim  # NumPy's result: q's axes first, then the kept ones
    out = core.moveaxis(out, tuple(range(s.ndim - 1, out.ndim)), tuple(range(q_axes))) if q_axes else out
    return _keepdims(out, a_shape, axes, virtual.shape) if _flag(keepdims) else out


def _q_array(name: str, q, scale: float):
    """``q / scale`` (NumPy's own division) and whether q was a Python scalar (weakly typed)."""
    if isinstance(q, Tracer):
        core.unsupported(f"np.{name} of a traced q")
    weak = type(q) in (int, float)
    q = np.true_divide(q, scale) if scale != 1 else np.asanyarray(q)
    if q.size and (q.min() < 0 or q.max() > 1):
        raise TracingError(located(f"np.{name}: {'Percentiles' if scale == 100 else 'Quantiles'} must be in the range "
                                   f"[0, {int(scale)}]"))
    return q, weak


@core.implements(np.quantile)
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
             interpolation=None):
    _no_out("quantile", out)
    if weights is not None or interpolation is not None:
        core.unsupported("np.quantile with weights= or interpolation=")
    q, weak = _q_array("quantile", q, 1)
    return _quantile("quantile", a, q, axis, method, keepdims, weak)


@core.implements(np.percentile)
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
               interpolation=None):
    _no_out("percentile", out)
    if weights is not None or interpolation is not None:
        core.unsupported("np.percentile with weights= or interpolation=")
    q, weak = _q_array("percentile", q, 100)
    return _quantile("percentile", a, q, axis, method, keepdims, weak)


@core.implements(np.median)
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The mean of the one or two middle values of the sorted values, as NumPy takes it."""
    _no_out("median", out)
    a_shape = np.shape(a)
    s, axes = _sorted_last("median", a, axis)
    n = s.shape[-1]
    middle = core.getitem(s, (slice(None),) * (s.ndim - 1) + (slice((n - 1) // 2, n // 2 + 1),))
    out = core.mean(middle, axis=-1)
    return _keepdims(out, a_shape, axes, ()) if _flag(keepdims) else out


# --- covariance ------------------------------------------------------------------------------------------


@core.implements(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """NumPy's ``X Xᴴ / (N - ddof)`` of the centred rows (variables) of ``m`` (and ``y``), with frequency
    and analytic weights; a single variable gives a 0-d array, as NumPy's ``squeeze``."""
    if ddof is not None and ddof != int(ddof):
        raise TracingError(located("np.cov: ddof must be integer"))
    x = core._lift(m)
    if x.ndim > 2:
        raise TracingError(located("np.cov: m has more than 2 dimensions"))
    y = None if y is None else core._lift(y)
    dt = canonical_dtype(np.result_type(x.dtype, *([] if y is None else [y.dtype]), np.float64) if dtype is None
                         else dtype)
    x = core.astype(core.reshape(x, (1, -1)) if x.ndim < 2 else x, dt)
    if not rowvar and x.shape[0] != 1:
        x = core.transpose(x)
    if y is not None:
        if y.ndim > 2:
            raise TracingError(located("np.cov: y has more than 2 dimensions"))
        y = core.astype(core.reshape(y, (1, -1)) if y.ndim < 2 else y, dt)
        if not rowvar and y.shape[0] != 1:
            y = core.transpose(y)
        x = core.concatenate([x, y], axis=0)
    ddof = (0 if bias else 1) if ddof is None else int(ddof)
    w = None
    for weights, name in ((fweights, "fweights"), (aweights, "aweights")):
        if weights is None:
            continue
        weights = core.astype(core._lift(weights), np.float64)
        if weights.ndim > 1 or weights.shape[0] != x.shape[1]:
            raise TracingError(located(f"np.cov: incompatible numbers of samples and {name}"))
        w = weights if w is None else core.multiply(w, weights)
    if w is None:
        avg = core.mean(x, axis=1)
        fact = x.shape[1] - ddof
    else:
        avg = average(x, axis=1, weights=w)
        w_sum = core.sum(w)
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = core.subtract(w_sum, ddof)
        else:
            a = core.astype(core._lift(aweights), np.float64)
            fact = core.subtract(w_sum, core.divide(core.multiply(ddof, core.sum(core.multiply(w, a))), w_sum))
    x = core.subtract(x, core.reshape(avg, (-1, 1)))
    x_t = core.transpose(x if w is None else core.multiply(x, w))
    c = core.multiply(core.matmul(x, core.conj(x_t)), core.divide(1, fact))
    return core.squeeze(c)


@core.implements(np.corrcoef)
def corrcoef(x, y=None, rowvar=True, bias=_NO, ddof=_NO, *, dtype=None):
    """``cov`` scaled by the standard deviations on its diagonal; real parts clipped to [-1, 1], as NumPy."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return core.divide(c, c)
    d = core.real(core.diagonal(c))
    stddev = core.UFUNCS[np.sqrt](d)
    c = core.divide(core.divide(c, core.reshape(stddev, (-1, 1))), core.reshape(stddev, (1, -1)))
    from pullback.frontend.numpy.ufuncs import clip

    if is_complex(c.dtype):  # each part clipped, as NumPy does
        return core.add(clip(core.real(c), -1, 1), core.multiply(clip(core.imag(c), -1, 1), 1j))
    return clip(c, -1, 1)
