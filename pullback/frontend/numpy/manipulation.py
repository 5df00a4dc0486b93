"""NumPy's array-manipulation functions (stacking, splitting, tiling, rolling, flipping,
padding, ...) on traced arrays, as compositions of the structural primitives: slices,
concatenations, reshapes, transposes and broadcasts. Every index they use is static, so a
permutation of elements along an axis becomes a concatenation of (possibly reversed or
broadcast) slices, which prints as a person would write it and transposes to pads."""

from __future__ import annotations

import builtins
import functools
import operator
import warnings

import numpy as np

from pullback.errors import ArgumentError, ArgumentTypeError
from pullback.frontend.numpy import (
    _axes,
    _axis,
    _lift,
    _shape,
    add,
    astype,
    broadcast_to,
    concatenate,
    divide,
    expand_dims,
    full_like,
    getitem,
    implements,
    moveaxis,
    multiply,
    negative,
    numpy_checks,
    reshape,
    result_dtype,
    standin,
    subtract,
    sum,
    transpose,
    unsupported,
    where,
)
from pullback.ir.tracer import Tracer, located
from pullback.primitives import lax

# --- helpers ------------------------------------------------------------------------------


def _take(a, axis: int, start: int, stop: int, step: int = 1):
    """``a[..., start:stop:step, ...]`` along ``axis`` (Python slice semantics). A traced array's
    window in bounds is the slice itself (``np.roll`` takes two per axis: no index to parse)."""
    if isinstance(a, Tracer) and step == 1 and 0 <= start <= stop <= a.shape[axis]:
        return a if (start, stop) == (0, a.shape[axis]) else lax.slice_axis(a, axis, start, stop)
    return getitem(a, (slice(None),) * axis + (slice(start, stop, step),))


def _stretch(a, axis: int, n: int):
    """A size-1 ``axis`` of ``a`` broadcast to size ``n``."""
    return broadcast_to(a, a.shape[:axis] + (n,) + a.shape[axis + 1:])


def _pieces(a, axis: int, index: list[int]) -> list:
    """``a`` at the static positions ``index`` along ``axis``, as slices to concatenate: one
    per run of consecutive (step 1 or -1) or repeated (step 0, broadcast) positions; a run
    that recurs is sliced once."""
    pieces, seen, i = [], {}, 0
    while i < len(index):
        j = i + 1
        step = index[j] - index[i] if j < len(index) and abs(index[j] - index[i]) <= 1 else 1
        while j < len(index) and index[j] - index[j - 1] == step:
            j += 1
        key = (index[i], index[j - 1], step, j - i)
        if key not in seen:
            first, last = index[i], index[j - 1]
            if step == 0:
                seen[key] = _stretch(_take(a, axis, first, first + 1), axis, j - i)
            else:
                seen[key] = _take(a, axis, first, last + step if last + step >= 0 else None, step)
        pieces.append(seen[key])
        i = j
    return pieces


def _as_arrays(arrays) -> list:
    if isinstance(arrays, Tracer | np.ndarray):
        arrays = list(arrays)  # NumPy iterates an array passed as the sequence of arrays
    return [_lift(a) for a in arrays]


def _int(x, what: str) -> int:
    try:
        return operator.index(x)
    except TypeError:
        raise ArgumentTypeError(located(f"{what} must be an integer, got {type(x).__name__}")) from None


# --- dimensions ---------------------------------------------------------------------------


def _at_least(arys, shape_of):
    res = tuple(reshape(a, shape_of(a.shape)) for a in map(_lift, arys))
    return res[0] if len(res) == 1 else res


@implements(np.atleast_1d)
def atleast_1d(*arys):
    return _at_least(arys, lambda s: s or (1,))


@implements(np.atleast_2d)
def atleast_2d(*arys):
    return _at_least(arys, lambda s: ((1,) * (2 - len(s)) + s) if len(s) < 2 else s)


@implements(np.atleast_3d)
def atleast_3d(*arys):
    def shape(s):
        return {0: (1, 1, 1), 1: (1, *s, 1), 2: (*s, 1)}.get(len(s), s)

    return _at_least(arys, shape)


@implements(np.ravel)
def ravel(a, order="C"):
    a = _lift(a)
    if order not in ("C", "F"):
        numpy_checks(np.ravel, standin(a), order=order)
        order = "C" if order is None else order.upper()
    if order == "F":
        return reshape(transpose(a), (-1,))
    if order != "C":
        unsupported(f"np.ravel with order={order!r} (it depends on the memory layout)")
    return reshape(a, (-1,))


@implements(np.broadcast_arrays)
def broadcast_arrays(*args, subok=False):
    args = [_lift(a) for a in args]
    shape = _shape(*args)
    return tuple(broadcast_to(a, shape) for a in args)


# --- stacking -----------------------------------------------------------------------------


def _each(at_least, tup) -> list:
    return [at_least(a) for a in _as_arrays(tup)]


@implements(np.vstack, *([np.row_stack] if hasattr(np, "row_stack") else []))
def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate(_each(atleast_2d, tup), 0, dtype=dtype, casting=casting)


@implements(np.hstack)
def hstack(tup, *, dtype=None, casting="same_kind"):
    arrs = _each(atleast_1d, tup)
    axis = 0 if arrs and arrs[0].ndim == 1 else 1
    return concatenate(arrs, axis, dtype=dtype, casting=casting)


@implements(np.dstack)
def dstack(tup):
    return concatenate(_each(atleast_3d, tup), 2)


@implements(np.column_stack)
def column_stack(tup):
    return concatenate([reshape(a, (-1, 1)) if a.ndim < 2 else a for a in _as_arrays(tup)], 1)


@implements(np.append)
def append(arr, values, axis=None):
    arr, values = _lift(arr), _lift(values)
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], 0)
    return concatenate([arr, values], axis)


# --- repeating ----------------------------------------------------------------------------


def _repeat_block(a, axis: int, r: int):
    """Each element of ``a`` along ``axis`` ``r`` times in a row: broadcast a new axis, merge it."""
    if r == 1:
        return a
    if a.shape[axis] == 1:
        return _stretch(a, axis, r)
    shape = a.shape[:axis + 1] + (r,) + a.shape[axis + 1:]
    merged = a.shape[:axis] + (a.shape[axis] * r,) + a.shape[axis + 1:]
    return reshape(broadcast_to(expand_dims(a, axis + 1), shape), merged)


@implements(np.repeat)
def repeat(a, repeats, axis=None):
    a = _lift(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = _axis(axis, a.ndim)
    if isinstance(repeats, Tracer):
        unsupported("np.repeat with traced repeats (the output shape would depend on traced values)")
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iub":
        raise ArgumentTypeError(located(f"repeats must be integers, got dtype {counts.dtype}"))
    if (counts < 0).any():
        raise ArgumentError(located("negative dimensions are not allowed"))
    n = a.shape[axis]
    if counts.ndim == 0 or counts.size == 1:
        return _repeat_block(a, axis, int(counts.reshape(-1)[0]))
    if counts.ndim > 1 or counts.size != n:
        raise ArgumentError(located(
            f"operands could not be broadcast together with shape ({n},) {counts.shape}"))
    pieces, i = [], 0
    while i < n:  # one broadcast block per run of equal counts
        j = i + 1
        while j < n and counts[j] == counts[i]:
            j += 1
        if counts[i]:
            pieces.append(_repeat_block(_take(a, axis, i, j), axis, int(counts[i])))
        i = j
    return concatenate(pieces, axis) if pieces else _take(a, axis, 0, 0)


@implements(np.tile)
def tile(A, reps):
    A = _lift(A)
    reps = (reps,) if np.ndim(reps) == 0 else tuple(reps)
    reps = tuple(_int(r, "np.tile reps") for r in reps)
    if builtins.any(r < 0 for r in reps):
        raise ArgumentError(located("negative dimensions are not allowed"))
    d = builtins.max(len(reps), A.ndim)
    reps = (1,) * (d - len(reps)) + reps
    A = reshape(A, (1,) * (d - A.ndim) + A.shape)
    if builtins.all(r == 1 for r in reps):
        return A
    interleaved = tuple(x for r, n in zip(reps, A.shape) for x in (1, n))
    stretched = tuple(x for r, n in zip(reps, A.shape) for x in (r, n))
    return reshape(broadcast_to(reshape(A, interleaved), stretched), tuple(r * n for r, n in zip(reps, A.shape)))


@implements(np.kron)
def kron(a, b):
    a, b = _lift(a), _lift(b)
    d = builtins.max(a.ndim, b.ndim)
    sa, sb = (1,) * (d - a.ndim) + a.shape, (1,) * (d - b.ndim) + b.shape
    prod = multiply(reshape(a, tuple(x for n in sa for x in (n, 1))), reshape(b, tuple(x for n in sb for x in (1, n))))
    return reshape(prod, tuple(m * n for m, n in zip(sa, sb)))


# --- moving elements ----------------------------------------------------------------------


@implements(np.roll)
def roll(a, shift, axis=None):
    a = _lift(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    try:
        pairs = np.broadcast(np.asarray(shift), np.asarray(axis))
    except ValueError:
        raise ArgumentError(located("'shift' and 'axis' should be scalars or 1D sequences")) from None
    shifts = {}
    for s, ax in pairs:
        ax = _axis(int(ax), a.ndim)
        shifts[ax] = shifts.get(ax, 0) + int(s)
    for ax, s in shifts.items():
        n = a.shape[ax]
        if n and s % n:
            k = n - s % n
            a = concatenate([_take(a, ax, k, n), _take(a, ax, 0, k)], ax)
    return a


@implements(np.flip)
def flip(m, axis=None):
    m = _lift(m)
    axes = _axes(axis, m.ndim)
    return getitem(m, tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(m.ndim)))


@implements(np.flipud)
def flipud(m):
    if np.ndim(m) < 1:
        raise ArgumentError(located("Input must be >= 1-d."))
    return flip(m, 0)


@implements(np.fliplr)
def fliplr(m):
    if np.ndim(m) < 2:
        raise ArgumentError(located("Input must be >= 2-d."))
    return flip(m, 1)


@implements(np.rot90)
def rot90(m, k=1, axes=(0, 1)):
    m = _lift(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ArgumentError(located("len(axes) must be 2."))
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == m.ndim:
        raise ArgumentError(located("Axes must be different."))
    if not builtins.all(-m.ndim <= ax < m.ndim for ax in axes):
        raise ArgumentError(located(f"Axes={axes} out of range for array of ndim={m.ndim}."))
    k = _int(k, "np.rot90 k") % 4
    if k == 0:
        return m
    if k == 2:
        return flip(m, axes)
    perm = list(range(m.ndim))
    i, j = axes[0] % m.ndim, axes[1] % m.ndim
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(flip(m, axes[1]), perm) if k == 1 else flip(transpose(m, perm), axes[1])


# --- splitting ----------------------------------------------------------------------------


@implements(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    ary = _lift(ary)
    axis = _axis(axis, ary.ndim)
    total = ary.shape[axis]
    if np.ndim(indices_or_sections) == 0:
        sections = _int(indices_or_sections, "the number of sections")
        if sections <= 0:
            raise ArgumentError(located("number sections must be larger than 0."))
        each, extras = divmod(total, sections)
        points = np.cumsum([0] + extras * [each + 1] + (sections - extras) * [each]).tolist()
    else:
        points = [0] + [_int(i, "a split index") for i in indices_or_sections] + [total]
    return [_take(ary, axis, points[i], points[i + 1]) for i in range(len(points) - 1)]


@implements(np.split)
def split(ary, indices_or_sections, axis=0):
    ary = _lift(ary)
    if np.ndim(indices_or_sections) == 0:
        sections = _int(indices_or_sections, "the number of sections")
        if sections > 0 and ary.shape[_axis(axis, ary.ndim)] % sections:
            raise ArgumentError(located("array split does not result in an equal division"))
    return array_split(ary, indices_or_sections, axis)


def _split_on(name: str, min_ndim: int, axis_of):
    def split_along(ary, indices_or_sections):
        ary = _lift(ary)
        if ary.ndim < min_ndim:
            raise ArgumentError(located(f"{name} only works on arrays of {min_ndim} or more dimensions"))
        return split(ary, indices_or_sections, axis_of(ary.ndim))

    return split_along


implements(np.hsplit)(_split_on("hsplit", 1, lambda nd: 1 if nd > 1 else 0))
implements(np.vsplit)(_split_on("vsplit", 2, lambda nd: 0))
implements(np.dsplit)(_split_on("dsplit", 3, lambda nd: 2))


# --- padding ------------------------------------------------------------------------------


def _pairs(x, ndim: int, what: str, integral: bool) -> list[tuple]:
    """NumPy's forms of per-axis (before, after) pairs: ``n``, ``(n,)``, ``(before, after)``,
    ``((before, after),) * ndim``, ``((b0, a0), (b1, a1), ...)``."""
    if isinstance(x, Tracer):
        unsupported(f"a traced {what} in np.pad")
    arr = np.asarray(x)
    if integral:
        if arr.dtype.kind != "i":
            raise ArgumentTypeError(located("`pad_width` must be of integral type."))
        if (arr < 0).any():
            raise ArgumentError(located("index can't contain negative values"))
    try:
        pairs = np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ArgumentError(located(
            f"operands could not be broadcast together with remapped shapes [original->remapped]: "
            f"{arr.shape} and requested shape ({ndim},2)")) from None
    return [tuple(p.tolist()) for p in pairs]


def _pad_index(mode: str, n: int, before: int, after: int) -> list[int]:
    """Positions along an axis of length ``n`` that fill it padded by ``before`` and ``after``."""
    def position(p: int) -> int:
        if mode == "edge" or (mode == "reflect" and n == 1):
            return builtins.min(builtins.max(p, 0), n - 1)
        if mode == "wrap":
            return p % n
        if mode == "reflect":  # period 2(n-1), the edge not repeated
            q = p % (2 * n - 2)
            return q if q < n else 2 * n - 2 - q
        q = p % (2 * n)  # symmetric: period 2n, the edge repeated
        return q if q < n else 2 * n - 1 - q

    return [position(p) for p in range(-before, n + after)]


_PAD_OPTIONS = {"constant": {"constant_values"}, "empty": set(), "edge": set(), "wrap": set(),
                "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    array = _lift(array)
    if not isinstance(mode, str) or mode not in _PAD_OPTIONS:
        if callable(mode) or mode in ("linear_ramp", "maximum", "mean", "median", "minimum"):
            unsupported(f"np.pad with mode={mode!r}")
        raise ArgumentError(located(f"mode '{mode}' is not supported"))
    extra = set(kwargs) - _PAD_OPTIONS[mode]
    if extra:
        raise ArgumentError(located(f"unsupported keyword arguments for mode {mode!r}: {extra}"))
    if kwargs.get("reflect_type", "even") != "even":
        unsupported("np.pad with reflect_type='odd'")
    if isinstance(pad_width, dict):  # {axis: width or (before, after)}, other axes unpadded
        seq = [(0, 0)] * array.ndim
        for axis, width in pad_width.items():
            seq[_axis(axis, array.ndim)] = (width, width) if np.ndim(width) == 0 else tuple(width)
        pad_width = seq
    widths = _pairs(pad_width, array.ndim, "pad_width", integral=True)
    if mode in ("constant", "empty"):  # 'empty' leaves the border undefined: zeros are as good as any
        return _pad_constant(array, widths, kwargs.get("constant_values", 0))
    for axis, (before, after) in enumerate(widths):
        n = array.shape[axis]
        if n == 0 and (before or after):
            raise ArgumentError(located(
                f"can't extend empty axis {axis} using modes other than 'constant' or 'empty'"))
        if before or after:  # the borders, each a few slices, around the array itself
            index = _pad_index(mode, n, before, after)
            pieces = _pieces(array, axis, index[:before]) + [array] + _pieces(array, axis, index[before + n:])
            array = concatenate(pieces, axis)
    return array


def _pad_constant(array, widths, constant_values):
    values = _pairs(constant_values, array.ndim, "constant_values", integral=False)
    dtype = array.dtype
    values = [tuple(np.asarray(v).astype(dtype).item() for v in pair) for pair in values]
    if builtins.all(w == (0, 0) for w in widths):
        return array
    if builtins.all(v == 0 for pair in values for v in pair):  # one zero-filled array, written into
        shape = tuple(b + n + a for n, (b, a) in zip(array.shape, widths))
        starts = tuple(b for b, _ in widths)
        return lax.pad(array, shape, starts, tuple(b + n for n, (b, _) in zip(array.shape, widths)),
                       (1,) * array.ndim)
    for axis, ((before, after), (v0, v1)) in enumerate(zip(widths, values)):
        # axis by axis, as NumPy does: a later axis's values fill the corners
        pieces = [full_like(array, v, shape=array.shape[:axis] + (w,) + array.shape[axis + 1:])
                  for w, v in ((before, v0), (after, v1))]
        array = concatenate([p for p in (pieces[0], array, pieces[1]) if p.shape[axis]], axis)
    return array


# --- arithmetic built from slices ------------------------------------------------------


@implements(np.select)
def select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ArgumentError(located("list of cases must be same length as list of conditions"))
    if len(condlist) == 0:
        raise ArgumentError(located("select with an empty condition list is not possible"))
    conds = [_lift(c) for c in condlist]
    for i, c in enumerate(conds):
        if result_dtype(c) != np.bool_:
            raise ArgumentTypeError(located(f"invalid entry {i} in condlist: should be boolean ndarray"))
    choices = [_lift(c) for c in choicelist]
    default = _lift(default) if isinstance(default, list | tuple) else default
    dtype = result_dtype(*choices, default)
    out = default if np.ndim(default) == 0 and not isinstance(default, Tracer) else astype(default, dtype)
    for c, x in zip(reversed(conds), reversed(choices)):  # the first true condition wins
        out = where(c, astype(x, dtype), out)
    return broadcast_to(out, _shape(*conds, *choices, default))


@functools.cache
def _cross_refuses_2_vectors() -> str:
    """The installed NumPy's error for 2-vectors in ``cross`` (NumPy 2.5 on), or "" where it only warns."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            np.cross(np.ones(2), np.ones(2))
        except ValueError as e:
            return str(e)
    return ""


@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    a, b = _lift(a), _lift(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(a, _axis(axisa, a.ndim), -1)
    b = moveaxis(b, _axis(axisb, b.ndim), -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ArgumentError(located("incompatible dimensions for cross product\n(dimension must be 2 or 3)"))
    if a.shape[-1] == 2 or b.shape[-1] == 2:
        refusal = _cross_refuses_2_vectors()
        if refusal:
            raise ArgumentError(located(refusal.replace("2 and 2", f"{a.shape[-1]} and {b.shape[-1]}")))
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional vectors "
                      "instead. (deprecated in NumPy 2.0)", DeprecationWarning, stacklevel=3)
    dtype = result_dtype(a, b)
    a, b = astype(a, dtype), astype(b, dtype)
    # components as width-1 slices (the vector axis kept), so nothing is reshaped until the end
    ai = [_take(a, a.ndim - 1, i, i + 1) for i in range(a.shape[-1])]
    bi = [_take(b, b.ndim - 1, i, i + 1) for i in range(b.shape[-1])]
    z = subtract(multiply(ai[0], bi[1]), multiply(ai[1], bi[0]))
    if len(ai) == 2 and len(bi) == 2:
        return reshape(z, z.shape[:-1])
    if len(ai) == 2:
        c = [multiply(ai[1], bi[2]), negative(multiply(ai[0], bi[2]))]
    elif len(bi) == 2:
        c = [negative(multiply(ai[2], bi[1])), multiply(ai[2], bi[0])]
    else:
        c = [subtract(multiply(ai[1], bi[2]), multiply(ai[2], bi[1])),
             subtract(multiply(ai[2], bi[0]), multiply(ai[0], bi[2]))]
    shape = _shape(*c, z)
    out = concatenate([broadcast_to(x, shape) for x in (*c, z)], -1)
    return moveaxis(out, -1, _axis(axisc, out.ndim))


def _diff(a, axis: int):
    n = a.shape[axis]
    return subtract(_take(a, axis, 1, n), _take(a, axis, 0, builtins.max(n - 1, 0)))


@implements(*[f for f in (getattr(np, "trapezoid", None), getattr(np, "trapz", None)) if f is not None])
def trapezoid(y, x=None, dx=1.0, axis=-1):
    y = _lift(y)
    axis = _axis(axis, y.ndim)
    n = y.shape[axis]
    if x is None:
        d = dx
    else:
        x = _lift(x)
        if x.ndim == 1:
            d = reshape(_diff(x, 0), tuple(builtins.max(x.shape[0] - 1, 0) if i == axis else 1
                                           for i in range(y.ndim)))
        else:
            d = _diff(x, axis)
    mid = add(_take(y, axis, 1, n), _take(y, axis, 0, builtins.max(n - 1, 0)))
    return sum(divide(multiply(d, mid), 2.0), axis=axis)


@implements(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ArgumentError(located("Valid values for `indexing` are 'xy' and 'ij'."))
    nd = len(xi)
    shapes = [[1] * nd for _ in xi]
    for i, s in enumerate(shapes):
        s[i] = -1
    if indexing == "xy" and nd > 1:
        shapes[0][:2], shapes[1][:2] = [1, -1], [-1, 1]
    out = tuple(reshape(_lift(x), tuple(s)) for x, s in zip(xi, shapes))
    return out if sparse else broadcast_arrays(*out)



@implements(np.rollaxis)
def rollaxis(a, axis, start=0):
    """NumPy's older spelling of ``moveaxis``: ``axis`` goes to before position ``start``."""
    from pullback.frontend.numpy import _axis, moveaxis

    a = _lift(a)
    n = a.ndim
    axis = _axis(axis, n)
    start = start + n if start < 0 else start  # as NumPy: a negative start counts from the end
    if not 0 <= start <= n:
        raise ArgumentError(located(f"np.rollaxis: start is out of bounds for an array of rank {n}"))
    if axis < start:
        start -= 1
    return a if axis == start else moveaxis(a, axis, start)
