"""NumPy's indexing on traced arrays: reads (``x[key]``), index assignment (``x[key] = v``,
``x[key] += v``), JAX's ``x.at[key].set(v)`` / ``.add(v)`` / ``.get()``, ``np.add.at``,
``np.take``, ``np.take_along_axis`` and the ordering functions.

Keys of integers, slices, ``None`` and ``...`` alone are basic indexing (``slice`` and
``reshape``); integer arrays and lists anywhere in a key, and boolean masks known when
tracing (turned into index arrays by ``np.nonzero``), are advanced indexing (``gather``).
A slice of fixed length at a traced start (``x[it * b:(it + 1) * b]``: its bounds' forms differ
by a constant, see ``integers``) is a window, read by ``dynamic_slice`` before the rest of the
key and written back by ``dynamic_update_slice``.
A boolean mask computed from traced values has a data-dependent number of entries, so it
cannot be read with; assigning a scalar through it is ``np.where``. Index arrays and masks
known before tracing are read when tracing: the program keeps copies of them (unlike other
closed-over arrays, captured by reference).

Assignment follows NumPy's semantics on the traced value, with one difference: pullback
never mutates arrays. ``x[key] = v`` rebinds the tracer ``x`` (and every name bound to the
same object) to an updated copy; an argument of the traced function is updated in the
trace only, never in the caller's array. Views (slices, reshapes, transposes, ...) are
not updated: assigning through a view is an error, and so is using a view made before
an assignment into its base.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from pullback.errors import ArgumentError, ArgumentIndexError, TracingError
from pullback.frontend import eyes
from pullback.frontend.numpy import (
    UFUNC_METHODS,
    _axis,
    astype,
    broadcast_to,
    implements,
    integers,
    maximum,
    minimum,
    negative,
    numpy_checks,
    refuse_masked_operands,
    reshape,
    result_dtype,
    standin,
    unsupported,
    where,
    zeros_like,
)
from pullback.ir.core import Literal, ShapeError
from pullback.ir.tracer import PYTHON_SCALARS, Tracer, bind, current_builder, located
from pullback.primitives import indexing as ix
from pullback.primitives import lax


class _Key:
    """A parsed key: the ``index`` param, its index operands (tracers or constant arrays), whether
    the addressed positions are known to be distinct, and the windows at traced starts that come
    first (``(axis, start, size, check)``: ``x[it * b:(it + 1) * b]``), ``index`` then addressing
    the windowed array."""

    def __init__(self, index: tuple, operands: list, unique: bool, windows: list | None = None):
        self.index, self.operands, self.unique = index, operands, unique
        self.windows: list[tuple[int, Tracer, int, bool]] = windows or []

    def windowed(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` with the windows' sizes."""
        sizes = {axis: size for axis, _, size, _ in self.windows}
        return tuple(sizes.get(a, n) for a, n in enumerate(shape))

    def shape(self, x) -> tuple[int, ...]:
        return ix.indexed_shape(self.windowed(x.shape), self.index, [np.shape(o) for o in self.operands])


class _TracedMask:
    def __init__(self, mask: Tracer):
        self.mask = mask


class _TracedSlice:
    """A slice with traced bounds, resolved once its axis's length is known (``integers.window``)."""

    def __init__(self, bounds: slice):
        self.bounds = bounds


def _entries(key) -> list:
    """The key's entries, with arrays and lists as NumPy arrays (or tracers)."""
    out = []
    for k in key if isinstance(key, tuple) else (key,):
        if k is None or k is Ellipsis:
            out.append(k)
        elif isinstance(k, bool | np.bool_):
            unsupported("indexing with a scalar boolean")
        elif isinstance(k, int | np.integer):
            out.append(int(k))
        elif isinstance(k, slice) and (isinstance(k.start, Tracer) or isinstance(k.stop, Tracer)):
            out.append(_TracedSlice(k))
        elif isinstance(k, slice):
            if not all(v is None or (isinstance(v, int | np.integer) and not isinstance(v, bool))
                       for v in (k.start, k.stop, k.step)):
                raise TracingError(located("slice bounds must be Python integers or None (static), "
                                           f"got {k}; use an integer index array for traced positions"))
            if k.step == 0:
                raise TracingError(located("slice step cannot be zero"))
            out.append(k)
        elif isinstance(k, Tracer):
            if k.dtype == np.bool_:
                out.append(_TracedMask(k))
            elif k.dtype.kind in "iu":
                out.append(k)
            else:
                raise TracingError(located(f"arrays used as indices must be of integer or boolean type, got "
                                           f"{k.dtype.name}"))
        else:
            a = np.asarray(k)
            if a.size == 0 and a.dtype.kind == "f":  # [] indexes nothing
                a = a.astype(np.intp)
            if a.dtype.kind not in "iub":
                raise TracingError(located(f"arrays used as indices must be of integer or boolean type, got "
                                           f"{a.dtype.name}"))
            if a.dtype == np.bool_ and a.ndim == 0:
                unsupported("indexing with a 0-d boolean array")
            out.append(a)
    return out


def _consumed(k) -> int:
    if k is None or k is Ellipsis:
        return 0
    if isinstance(k, _TracedMask):
        return k.mask.ndim
    if isinstance(k, np.ndarray) and k.dtype == np.bool_:
        return k.ndim
    return 1


def _expand(x, entries: list) -> list:
    """Entries with ``...`` replaced by full slices (one is implied at the end)."""
    if sum(k is Ellipsis for k in entries) > 1:
        raise ArgumentIndexError(located("an index can only have a single ellipsis ('...')"))
    used = sum(_consumed(k) for k in entries)
    if used > x.ndim:
        raise ArgumentIndexError(located(f"too many indices for array: array is {x.ndim}-dimensional, but {used} were "
                                   "indexed"))
    if not any(k is Ellipsis for k in entries):
        entries = entries + [Ellipsis]
    i = next(i for i, k in enumerate(entries) if k is Ellipsis)
    return entries[:i] + [slice(None)] * (x.ndim - used) + entries[i + 1:]


def _out_of_bounds(index, axis: int, n: int):
    raise ArgumentIndexError(located(f"index {index} is out of bounds for axis {axis} with size {n}"))


def parse(x, key, traced_mask_ok: bool = False) -> _Key | _TracedMask:
    """``key`` for an array of ``x``'s shape, as NumPy reads it."""
    refuse_masked_operands(key if type(key) is tuple else (key,))
    entries = _expand(x, _entries(key))
    masks = [k for k in entries if isinstance(k, _TracedMask)]
    if masks:
        if traced_mask_ok and len(masks) == 1 and all(
                isinstance(k, _TracedMask) or (isinstance(k, slice) and k == slice(None)) for k in entries) \
                and entries[0] is masks[0]:
            return masks[0]
        raise TracingError(located(
            "indexing with a boolean mask computed from traced values gives a data-dependent shape, which "
            "pullback cannot trace: use np.where(mask, x, 0) (or a mask known before tracing)"))
    index, operands, constant, windows = [], [], True, []
    axis = 0
    for k in entries:
        if k is None:
            index.append(ix.NewAxis())
            continue
        n = x.shape[axis] if axis < x.ndim else 0
        if isinstance(k, _TracedSlice):
            found = integers.window(k.bounds, n, axis)
            if not isinstance(found, slice):
                windows.append((axis, *found))
                index.append(ix.Slice(0, found[1], 1))
                axis += 1
                continue
            k = found
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            index.append(ix.Slice(start, stop, step) if len(range(start, stop, step)) else ix.Slice(0, 0, 1))
        elif isinstance(k, int) or (isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype != np.bool_):
            if not -n <= int(k) < n:
                _out_of_bounds(int(k), axis, n)
            index.append(ix.Int(int(k) % n))
        elif isinstance(k, Tracer):
            index.append(ix.Operand(len(operands)))
            operands.append(k)
            constant = False
        elif k.dtype == np.bool_:
            if k.shape != x.shape[axis:axis + k.ndim]:
                raise ArgumentIndexError(located(f"boolean index of shape {k.shape} does not match the "
                                           f"indexed array's axes {x.shape[axis:axis + k.ndim]}"))
            for nz in np.nonzero(k):
                index.append(ix.Operand(len(operands)))
                operands.append(_snapshot(k, nz.astype(np.int64)))
            axis += k.ndim
            continue
        else:
            if k.size and (k.min() < -n or k.max() >= n):
                bad = k[(k < -n) | (k >= n)].flat[0]
                _out_of_bounds(int(bad), axis, n)
            index.append(ix.Operand(len(operands)))
            operands.append(_snapshot(k, np.where(k < 0, k + n, k).astype(np.int64)))
        axis += 1
    index = tuple(index)
    key = _Key(index, operands, True, windows)
    shape = key.windowed(x.shape)
    try:
        ix.indexed_shape(shape, index, [np.shape(o) for o in operands])
    except ShapeError as e:
        raise ArgumentIndexError(located(str(e))) from None
    single = math.prod(np.broadcast_shapes(*(np.shape(o) for o in operands))) <= 1 if operands else True
    key.unique = single or (constant and _distinct(shape, index, operands))
    return key


def _snapshot(user, value: np.ndarray) -> np.ndarray:
    """Constant index arrays are read when tracing (whether they repeat decides how gradients
    print), so the program keeps its own copy, named after the user's array (or makes it, ``eyes.snapshot``)."""
    eyes.snapshot(current_builder(), user, value)
    return value


def _distinct(shape, index, operands) -> bool:
    """Whether a key of constant arrays addresses each position at most once: slices and integers
    never repeat, so only the broadcast index arrays' tuples of positions need to be distinct."""
    axes = [n for n, e in _axis_sizes(shape, index) if isinstance(e, ix.Operand)]
    arrays = np.broadcast_arrays(*operands)
    if not arrays[0].size:
        return True
    flat = np.ravel_multi_index(tuple(a.ravel() for a in arrays), axes)
    return np.unique(flat).size == flat.size


def _axis_sizes(shape, index):
    """(size of the axis an entry addresses, entry); 1 for new axes."""
    sizes = iter(shape)
    return [(1 if isinstance(e, ix.NewAxis) else next(sizes), e) for e in index]


def _gather(x, key: _Key):
    return lax.gather(_window(x, key), key.operands, key.index, key.unique)


def _window(x, key: _Key):
    """``x``'s windows at traced starts (``x`` itself where the key has none)."""
    if not key.windows:
        return x
    if isinstance(x, np.ndarray):  # a NumPy array sliced at a traced start: the program's constant
        x = current_builder().read(x)
    axes, starts, sizes, checks = zip(*key.windows)
    return lax.dynamic_slice(x, starts, axes, sizes, any(checks))


def _into_window(x, key: _Key, updates, scatter):
    """``x`` with its windows at traced starts replaced by ``scatter(window, updates, ...)`` (by the
    updates themselves where the key is the windows alone and they are written, not added)."""
    axes, starts, sizes, checks = zip(*key.windows)
    shape = key.windowed(x.shape)
    whole = len(key.index) == len(shape) and all(e == ix.Slice(0, n, 1) for e, n in zip(key.index, shape))
    if whole and scatter is lax.scatter:
        return lax.dynamic_update_slice(x, updates, starts, axes, sizes, any(checks))
    window = _window(x, key)  # checked here, so not again when written back
    if whole:
        inner = lax.add(window, updates)
    else:
        inner = scatter(window, updates, key.operands, key.index, key.unique)
    return lax.dynamic_update_slice(x, inner, starts, axes, sizes, False)


def getitem(x, key):
    """``x[key]``, NumPy's basic and advanced indexing; a slice of fixed length at a traced start
    (``x[it * b:(it + 1) * b]``) is a window (``dynamic_slice``)."""
    if type(key) is int and type(x) is Tracer:  # ``v[t]`` of an unrolled loop: what ``parse`` would find, directly
        shape = x.ssa.type.shape
        if shape and -shape[0] <= key < shape[0]:
            index = (ix.Int(key % shape[0]), *[ix.Slice(0, n, 1) for n in shape[1:]])
            return lax.gather(x, [], index, True)
    parsed = parse(x, key)
    if isinstance(x, np.ndarray) and not parsed.windows and not any(isinstance(o, Tracer) for o in parsed.operands):
        return x[key]
    return _gather(x, parsed)


def _updates(x, key: _Key, value):
    """``value`` cast to ``x``'s dtype, broadcast to the indexed shape (a scalar stays one)."""
    if isinstance(value, np.ndarray | np.generic) and value.ndim == 0:
        value = value.item()
    if not isinstance(value, PYTHON_SCALARS + (Tracer, np.ndarray)):
        value = np.asarray(value)
    if result_dtype(value).kind == "c" and x.dtype.kind != "c":
        raise TracingError(located(f"cannot assign a complex value into a real array of dtype {x.dtype.name} "
                                   "(take .real, or make the array complex)"))
    if isinstance(value, PYTHON_SCALARS):
        return Literal.of(value, x.dtype)
    if isinstance(value, np.ndarray):
        value = value.astype(x.dtype)
    else:
        value = astype(value, x.dtype)
    shape = key.shape(x)
    vshape = value.shape
    while len(vshape) > len(shape) and vshape[0] == 1:
        vshape = vshape[1:]
    try:
        fits = np.broadcast_shapes(vshape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise TracingError(located(f"could not broadcast input array from shape {value.shape} into shape {shape}"))
    if vshape == ():
        return reshape(value, ())
    return broadcast_to(reshape(value, vshape), shape)


def rebind(x: Tracer, new) -> None:
    """Make ``x`` stand for ``new``: how traced code 'mutates' an array."""
    _not_a_view(x)
    if x.builder is not new.builder:
        raise TracingError(located(
            "assignment into an array of an enclosing trace from inside a pb.scan, fori_loop, while_loop or cond "
            "body, or a nested transform: the body cannot change what is outside it; return the value instead"))
    x.ssa = new.ssa
    x.version += 1


def _not_a_view(x: Tracer) -> None:
    if x.view is not None:
        raise TracingError(located(
            "assignment into a view (a slice, reshape, transpose, ...) of another array: NumPy would change the "
            "base array, which pullback does not track; assign into the base array with a combined index, or "
            "make a copy first (.copy())"))


def setitem(x: Tracer, key, value) -> None:
    """``x[key] = value`` rebinds the tracer ``x`` to an updated copy: NumPy's semantics on the
    traced value (``value`` broadcast to the indexed shape and cast to ``x``'s dtype; where
    indices repeat, the last write stays). The caller's arrays are never mutated: an argument
    assigned into changes in the trace only."""
    _not_a_view(x)
    rebind(x, _set(x, key, value))


def _set(x, key, value):
    parsed = parse(x, key, traced_mask_ok=True)
    if isinstance(parsed, _TracedMask):
        return _masked(x, parsed.mask, value, lambda v: v)
    if parsed.windows:
        return _into_window(x, parsed, _updates(x, parsed, value), lax.scatter)
    return lax.scatter(x, _updates(x, parsed, value), parsed.operands, parsed.index, parsed.unique)


def _masked(x, mask: Tracer, value, combine):
    """``x[mask] = combine(value)`` for a traced mask and a scalar value: ``np.where``."""
    if np.size(value) != 1:
        raise TracingError(located("assigning through a boolean mask computed from traced values needs a scalar "
                                   "value (the number of entries it selects is data-dependent)"))
    if mask.shape != x.shape[:mask.ndim]:
        raise ArgumentIndexError(located(f"boolean index of shape {mask.shape} does not match the indexed "
                                   f"array's axes {x.shape[:mask.ndim]}"))
    if result_dtype(value).kind == "c" and x.dtype.kind != "c":
        raise TracingError(located(f"cannot assign a complex value into a real array of dtype {x.dtype.name}"))
    if isinstance(value, Tracer):
        value = reshape(astype(value, x.dtype), ())
    else:
        value = np.asarray(value).astype(x.dtype).item()
    cond = reshape(mask, mask.shape + (1,) * (x.ndim - mask.ndim))
    return astype(where(cond, combine(value), x), x.dtype)


def _add(x, key, value):
    parsed = parse(x, key, traced_mask_ok=True)
    if isinstance(parsed, _TracedMask):
        return _masked(x, parsed.mask, value, lambda v: x + v)
    if parsed.windows:
        return _into_window(x, parsed, _updates(x, parsed, value), lax.scatter_add)
    return lax.scatter_add(x, _updates(x, parsed, value), parsed.operands, parsed.index, parsed.unique)


class IndexUpdate:
    """``x.at[key]``: functional updates that return new arrays and never change ``x``."""

    def __init__(self, x: Tracer, key):
        self.x, self.key = x, key

    def get(self):
        return getitem(self.x, self.key)

    def set(self, value):
        """A copy of ``x`` with ``out[key] = value``."""
        return _set(self.x, self.key, value)

    def add(self, value):
        """A copy of ``x`` with ``np.add.at(out, key, value)``: repeated indices accumulate."""
        return _add(self.x, self.key, value)


class IndexUpdates:
    """``x.at``, as in JAX: ``x.at[key].set(v)``, ``.add(v)``, ``.get()``."""

    def __init__(self, x: Tracer):
        self.x = x

    def __getitem__(self, key) -> IndexUpdate:
        return IndexUpdate(self.x, key)


def add_at(a, indices, b=None):
    """``np.add.at(a, indices, b)`` on a traced ``a``: rebinds ``a``."""
    if not isinstance(a, Tracer):
        unsupported("np.add.at into an untraced array")
    if b is None:
        unsupported("np.add.at without a value")
    _not_a_view(a)
    rebind(a, _add(a, indices, b))


def subtract_at(a, indices, b=None):
    """``np.subtract.at(a, indices, b)``: ``np.add.at`` of ``-b``."""
    add_at(a, indices, None if b is None else negative(b))


UFUNC_METHODS[np.add, "at"] = add_at
UFUNC_METHODS[np.subtract, "at"] = subtract_at


# --- take -------------------------------------------------------------------------------------------


@implements(np.take)
def take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None:
        unsupported("np.take with out=")
    mode = _clip_mode(a, mode)
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    axis = _axis(axis, np.ndim(a))
    n = a.shape[axis]
    shape = a.shape[:axis] + np.shape(indices) + a.shape[axis + 1:]
    if mode == "clip" and not n and not math.prod(shape):  # NumPy reads nothing, so clips into nothing
        return zeros_like(a, shape=shape)
    if isinstance(indices, Tracer):
        if mode == "clip":
            indices = minimum(maximum(indices, 0), n - 1)
        elif mode == "wrap":
            unsupported("np.take with mode='wrap' and traced indices")
    else:
        indices = np.asarray(indices)
        if mode == "wrap" and n:
            indices = indices % n
        elif mode == "clip":
            indices = np.clip(indices, 0, n - 1)
    return getitem(a, (slice(None),) * axis + (indices,))


def _clip_mode(a, mode) -> str:
    """NumPy's ``mode`` of ``take``: 'clip', 'wrap' or 'raise', also spelled 0, 1 or 2; NumPy's error
    for anything else."""
    numpy_checks(np.take, standin(a), [], mode=mode)
    if mode is None or isinstance(mode, str):
        return mode or "raise"
    return ("clip", "wrap", "raise")[operator.index(mode)]


@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    if axis is None:
        arr, axis = reshape(arr, (-1,)), 0
    if np.ndim(indices) != np.ndim(arr):
        raise TracingError(located("np.take_along_axis: indices and arr must have the same number of dimensions"))
    axis = _axis(axis, np.ndim(arr))
    n = arr.shape[axis]
    other = np.broadcast_shapes(*(tuple(1 if i == axis else s for i, s in enumerate(y.shape)) for y in (arr, indices)))
    ishape = tuple(indices.shape[axis] if i == axis else s for i, s in enumerate(other))
    if isinstance(indices, Tracer):
        if indices.dtype.kind not in "iu":
            raise TracingError(located("np.take_along_axis needs integer indices"))
        indices = broadcast_to(indices, ishape)
    else:
        indices = np.asarray(indices)
        if indices.size and (indices.min() < -n or indices.max() >= n):
            _out_of_bounds(int(indices[(indices < -n) | (indices >= n)].flat[0]), axis, n)
        indices = np.broadcast_to(np.where(indices < 0, indices + n, indices).astype(np.int64), ishape)
    arr = broadcast_to(arr, tuple(n if i == axis else s for i, s in enumerate(other)))
    return lax.take_along_axis(arr, indices, axis)


# --- ordering ----------------------------------------------------------------------------------------


def _flat_axis(a, axis):
    if axis is None:
        return reshape(a, (-1,)), 0
    return a, _axis(axis, np.ndim(a))


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    numpy_checks(np.sort, standin(a), kind=kind, order=order, stable=stable)  # any kind sorts to the same values
    a, axis = _flat_axis(a, axis)
    return bind(ix.sort_p, a, axis=axis)


@implements(np.argsort)
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    numpy_checks(np.argsort, standin(a), kind=kind, order=order, stable=stable)
    a, axis = _flat_axis(a, axis)
    stable = bool(stable) or (isinstance(kind, str) and kind[0] in "msMS")  # NumPy reads 'm...', 's...' as stable
    return bind(ix.argsort_p, a, axis=axis, stable=stable)


def _argextremum(prim):
    def arg(a, axis=None, out=None, keepdims=False):
        if out is not None:
            unsupported(f"np.{prim.name} with out=")
        flat, ax = _flat_axis(a, axis)
        if flat.shape[ax] == 0:
            raise ArgumentError(located(f"attempt to get {prim.name} of an empty sequence"))
        res = bind(prim, flat, axis=ax)
        if keepdims:
            res = reshape(res, tuple(1 if axis is None or i == ax else s for i, s in enumerate(a.shape)))
        return res

    return arg


argmax = implements(np.argmax)(_argextremum(ix.argmax_p))
argmin = implements(np.argmin)(_argextremum(ix.argmin_p))


@implements(np.copy)
def copy(a, order="K", subok=False):
    numpy_checks(np.copy, standin(a), order=order)  # any layout holds the same values
    return a.copy()
