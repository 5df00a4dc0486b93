"""NumPy's indexing as primitives: ``gather`` (``x[key]``), ``scatter`` (``out[key] = v``),
``scatter_add`` (``np.add.at``), windows of static size at traced starts (``dynamic_slice``,
``x[s:s + b]``, and ``dynamic_update_slice``, ``out[s:s + b] = v``), and the ordering functions
(``sort``, ``argsort``, ``argmax``, ``argmin``).

A key is the static param ``index``: a tuple with one entry per position of NumPy's
index tuple (``Ellipsis`` already expanded), each an ``Int``, a ``Slice``, ``NewAxis``, or
an ``Operand``, an integer index array passed as an extra operand. Shapes follow NumPy's
advanced-indexing rules: the index arrays broadcast together, and integers count as
index arrays when any array is present; the broadcast axes stand where the advanced
indices are when these are adjacent in the key, else first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pullback.ir.core import Literal, Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType


@dataclass(frozen=True, slots=True)
class Int:
    """An integer index, in ``range(n)``."""

    value: int

    def __repr__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class Slice:
    """``start:stop:step`` as ``slice.indices`` normalises it (``range`` semantics: a stop of
    -1 with a negative step runs down to index 0)."""

    start: int
    stop: int
    step: int

    def __len__(self) -> int:
        return len(range(self.start, self.stop, self.step))

    def __repr__(self) -> str:
        return f"{self.start}:{self.stop}:{self.step}"


@dataclass(frozen=True, slots=True)
class NewAxis:
    """``None`` in a key: a new axis of length 1."""

    def __repr__(self) -> str:
        return "None"


@dataclass(frozen=True, slots=True)
class Operand:
    """The integer index array passed as index operand ``k``."""

    k: int

    def __repr__(self) -> str:
        return f"#{self.k}"


Entry = Int | Slice | NewAxis | Operand


def is_advanced(index: tuple[Entry, ...]) -> bool:
    return any(isinstance(e, Operand) for e in index)


def indexed_shape(shape: tuple[int, ...], index: tuple[Entry, ...], operand_shapes) -> tuple[int, ...]:
    """The shape of ``x[key]`` for ``x`` of ``shape``: NumPy's rules."""
    if sum(not isinstance(e, NewAxis) for e in index) != len(shape):
        raise ShapeError(f"index {index} does not address every axis of shape {shape}")
    advanced = is_advanced(index)
    out: list = []  # sizes, and the marker ``None`` where the advanced group goes
    positions, group = [], []
    axis = 0
    for pos, e in enumerate(index):
        if isinstance(e, NewAxis):
            out.append(1)
            continue
        n = shape[axis]
        axis += 1
        if isinstance(e, Slice):
            r = range(e.start, e.stop, e.step)
            if e.step == 0 or (len(r) and not (0 <= r[0] < n and 0 <= r[-1] < n)):
                raise ShapeError(f"slice {e.start}:{e.stop}:{e.step} out of bounds for an axis of size {n}")
            out.append(len(r))
        elif isinstance(e, Int):
            if not 0 <= e.value < n:
                raise ShapeError(f"index {e.value} out of bounds for an axis of size {n}")
            if advanced:
                positions.append(pos)
                group.append(())
        else:
            if not 0 <= e.k < len(operand_shapes):
                raise ShapeError(f"index operand {e.k} does not exist")
            positions.append(pos)
            group.append(tuple(operand_shapes[e.k]))
        if advanced and not isinstance(e, Slice) and (len(positions) == 1):
            out.append(None)
    if not advanced:
        return tuple(out)
    try:
        broadcast = tuple(np.broadcast_shapes(*group))
    except ValueError:
        raise ShapeError(f"index arrays of shapes {group} do not broadcast together") from None
    at = out.index(None)
    out.remove(None)
    if positions != list(range(positions[0], positions[-1] + 1)):
        at = 0  # separated by a slice or a new axis: the broadcast axes go first
    return tuple(out[:at]) + broadcast + tuple(out[at:])


def _check_operands(index, idx) -> None:
    ks = [e.k for e in index if isinstance(e, Operand)]
    if ks != list(range(len(idx))):
        raise ShapeError(f"index {index} must name operands 0..{len(idx) - 1} once each, in order")
    for i in idx:
        if i.dtype.kind != "i":
            raise ShapeError(f"index arrays must be integers, got {i.dtype.name}")


gather_p = Primitive("gather")


def _gather(x, *idx, index: tuple[Entry, ...], unique_indices: bool):
    """``x[key]`` with at least one index array (keys of slices and integers alone are
    ``slice`` and ``reshape``)."""
    _check_operands(index, idx)
    if not idx:
        raise ShapeError("gather needs an index array (basic keys are slices)")
    return ArrayType(indexed_shape(x.shape, index, [i.shape for i in idx]), x.dtype)


shape_rules[gather_p] = _gather

scatter_p = Primitive("scatter")
scatter_add_p = Primitive("scatter_add")


def _scatter(x, updates, *idx, index: tuple[Entry, ...], unique_indices: bool):
    """A copy of ``x`` with ``out[key] = updates`` (``scatter``: where indices repeat, the last
    write stays) or ``np.add.at(out, key, updates)`` (``scatter_add``: repeats accumulate).
    ``updates`` has the indexed shape, or is a scalar written everywhere in it."""
    _check_operands(index, idx)
    shape = indexed_shape(x.shape, index, [i.shape for i in idx])
    if updates.shape not in (shape, ()) or updates.dtype != x.dtype:
        raise ShapeError(f"updates {updates.type} do not fit {x.dtype.name}{list(shape)} indexed in {x.type}")
    return x.type


shape_rules[scatter_p] = shape_rules[scatter_add_p] = _scatter


# --- slices at traced starts -----------------------------------------------------------------

dynamic_slice_p = Primitive("dynamic_slice")
dynamic_update_slice_p = Primitive("dynamic_update_slice")


def window_shape(x, starts, axes: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``x``'s shape with ``sizes`` along ``axes``, after checking the starts (0-d integers; a literal
    one in range) and the axes (increasing, each once)."""
    if not len(starts) == len(axes) == len(sizes) or not axes:
        raise ShapeError(f"a window needs one start and one size per axis: {len(starts)} starts, axes {axes}, "
                         f"sizes {sizes}")
    if list(axes) != sorted(set(axes)) or axes[0] < 0 or axes[-1] >= len(x.shape):
        raise ShapeError(f"window axes {axes} must increase and lie within the {len(x.shape)} axes of {x.type}")
    shape = list(x.shape)
    for s, a, size in zip(starts, axes, sizes):
        if s.shape != () or s.dtype.kind not in "iu":
            raise ShapeError(f"a window's start must be a 0-d integer, got {s.type}")
        if not 0 <= size <= shape[a]:
            raise ShapeError(f"a window of {size} does not fit axis {a} of {x.type}")
        if isinstance(s, Literal) and not 0 <= s.value <= shape[a] - size:
            raise ShapeError(f"a window of {size} at {s.value} does not fit axis {a} of {x.type}")
        shape[a] = size
    return tuple(shape)


def _dynamic_slice(x, *starts, axes: tuple[int, ...], sizes: tuple[int, ...], check: bool):
    """``x[..., s:s + size, ...]``: ``sizes[k]`` entries along ``axes[k]`` from the 0-d integer
    ``starts[k]``, known only when the program runs, the other axes whole. A window must fit: NumPy
    would return a shorter slice, which has no static shape, so with ``check`` the program raises
    IndexError for a start outside ``0..n - size``; ``check`` is False where the trace proved the
    start in range (``(it % n) * b``), or an earlier equation of the program checked it."""
    return ArrayType(window_shape(x, starts, axes, sizes), x.dtype)


def _dynamic_update_slice(x, update, *starts, axes: tuple[int, ...], sizes: tuple[int, ...], check: bool):
    """A copy of ``x`` with ``out[..., s:s + size, ...] = update``, the window of ``dynamic_slice``;
    ``update`` has the window's shape, or is a scalar written all over it."""
    shape = window_shape(x, starts, axes, sizes)
    if update.shape not in (shape, ()) or update.dtype != x.dtype:
        raise ShapeError(f"update {update.type} does not fit a {x.dtype.name}{list(shape)} window of {x.type}")
    return x.type


shape_rules[dynamic_slice_p] = _dynamic_slice
shape_rules[dynamic_update_slice_p] = _dynamic_update_slice


# --- ordering ---------------------------------------------------------------------------------

sort_p = Primitive("sort")
argsort_p = Primitive("argsort")
argmax_p = Primitive("argmax")
argmin_p = Primitive("argmin")
INDEX_DTYPE = np.dtype(np.int64)


def _check_axis(x, axis: int) -> None:
    if not 0 <= axis < x.type.ndim:
        raise ShapeError(f"axis {axis} out of range for shape {x.shape}")
    if x.dtype.kind not in "bifc":
        raise ShapeError(f"cannot order dtype {x.dtype.name}")


def _sort(x, *, axis: int):
    """Ascending along ``axis`` (complex: lexicographic, as NumPy)."""
    _check_axis(x, axis)
    return x.type


def _argsort(x, *, axis: int, stable: bool):
    """The permutation that sorts along ``axis``; ``stable`` keeps ties in order."""
    _check_axis(x, axis)
    return ArrayType(x.shape, INDEX_DTYPE)


def _argextremum(x, *, axis: int):
    """The first position of the extremum along ``axis``, which is removed."""
    _check_axis(x, axis)
    if x.shape[axis] == 0:
        raise ShapeError("attempt to get argmax/argmin of an empty sequence")
    return ArrayType(tuple(n for i, n in enumerate(x.shape) if i != axis), INDEX_DTYPE)


shape_rules[sort_p] = _sort
shape_rules[argsort_p] = _argsort
shape_rules[argmax_p] = shape_rules[argmin_p] = _argextremum


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import Zero, defzero, instantiate, jvp_rules  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.ir.tracer import bind  # noqa: E402
from pullback.primitives import lax  # noqa: E402


def _gather_jvp(primals, tangents, **params):
    x, *idx = primals
    ans = bind(gather_p, *primals, **params)
    t = tangents[0]
    return ans, Zero(ans.ssa.type) if isinstance(t, Zero) else bind(gather_p, t, *idx, **params)


def _scatter_add_jvp(primals, tangents, **params):
    x, updates, *idx = primals
    ans = bind(scatter_add_p, *primals, **params)
    tx, tu = tangents[:2]
    if isinstance(tu, Zero):
        return ans, tx
    return ans, bind(scatter_add_p, instantiate(tx), tu, *idx, **params)


def _scatter_jvp(primals, tangents, **params):
    x, updates, *idx = primals
    ans = bind(scatter_p, *primals, **params)
    tx, tu = tangents[:2]
    if isinstance(tu, Zero):
        tu = Literal.of(0, x.dtype)
    return ans, bind(scatter_p, instantiate(tx), tu, *idx, **params)


def _gather_t(ct, x, *idx, index, unique_indices):
    return (lax.scatter_add(lax.zeros(x.type), ct, idx, index, unique_indices), *(None,) * len(idx))


def _scatter_add_t(ct, x, updates, *idx, index, unique_indices):
    ct_u = None
    if isinstance(updates, Linear):
        ct_u = lax.gather(ct, idx, index, unique_indices)
        if updates.shape == () and ct_u.shape != ():
            ct_u = lax.reduce_sum(ct_u, range(ct_u.ndim))
    return (ct if isinstance(x, Linear) else None), ct_u, *(None,) * len(idx)


def _scatter_t(ct, x, updates, *idx, index, unique_indices):
    """x's cotangent is ``ct`` with the written positions zeroed; the updates' is ``ct`` at
    those positions, for the write that NumPy keeps where indices repeat (the last)."""
    zeroed = None
    if isinstance(x, Linear) or updates.shape == ():
        zeroed = lax.scatter(ct, Literal.of(0, ct.dtype), idx, index, unique_indices)
    ct_u = None
    if isinstance(updates, Linear):
        if updates.shape == ():  # each written position counts once, however often it was written
            ct_u = lax.reduce_sum(lax.sub(ct, zeroed), range(ct.ndim))
        else:
            ct_u = lax.gather(ct, idx, index, unique_indices)
            if not unique_indices:
                ct_u = lax.select(lax.scatter_winners(x.shape, idx, index), ct_u, 0)
    return (zeroed if isinstance(x, Linear) else None), ct_u, *(None,) * len(idx)


jvp_rules[gather_p] = _gather_jvp
jvp_rules[scatter_add_p] = _scatter_add_jvp
jvp_rules[scatter_p] = _scatter_jvp
transpose_rules[gather_p] = _gather_t
transpose_rules[scatter_add_p] = _scatter_add_t
transpose_rules[scatter_p] = _scatter_t



def _dynamic_slice_jvp(primals, tangents, **params):
    x, *starts = primals
    ans = bind(dynamic_slice_p, *primals, **params)
    t = tangents[0]
    return ans, Zero(ans.ssa.type) if isinstance(t, Zero) else bind(dynamic_slice_p, t, *starts, **params)


def _dynamic_update_slice_jvp(primals, tangents, **params):
    x, update, *starts = primals
    ans = bind(dynamic_update_slice_p, *primals, **params)
    tx, tu = tangents[:2]
    if isinstance(tx, Zero) and isinstance(tu, Zero):
        return ans, Zero(ans.ssa.type)
    tu = Literal.of(0, x.dtype) if isinstance(tu, Zero) else tu
    return ans, bind(dynamic_update_slice_p, instantiate(tx), tu, *starts, **params)


def _dynamic_slice_t(ct, x, *starts, axes, sizes, check):
    """The window's cotangent written into zeros (``x_bar[s:s + b] = ct``)."""
    return lax.dynamic_update_slice(lax.zeros(x.type), ct, starts, axes, sizes, check), *(None,) * len(starts)


def _dynamic_update_slice_t(ct, x, update, *starts, axes, sizes, check):
    """x's cotangent is ``ct`` with the window zeroed, the update's the window of ``ct`` (summed for a
    scalar written all over it)."""
    ct_x = lax.dynamic_update_slice(ct, Literal.of(0, ct.dtype), starts, axes, sizes, check) \
        if isinstance(x, Linear) else None
    ct_u = None
    if isinstance(update, Linear):
        ct_u = lax.dynamic_slice(ct, starts, axes, sizes, check)
        if update.shape == ():
            ct_u = lax.reduce_sum(ct_u, range(ct_u.ndim))
    return ct_x, ct_u, *(None,) * len(starts)


jvp_rules[dynamic_slice_p] = _dynamic_slice_jvp
jvp_rules[dynamic_update_slice_p] = _dynamic_update_slice_jvp
transpose_rules[dynamic_slice_p] = _dynamic_slice_t
transpose_rules[dynamic_update_slice_p] = _dynamic_update_slice_t

def _sort_jvp(primals, tangents, *, axis):
    """Each tangent entry follows its value: both are gathered with the (stable) sorting
    permutation, one sort and two gathers rather than two sorts."""
    (x,), (t,) = primals, tangents
    perm = bind(argsort_p, x, axis=axis, stable=True)
    return (lax.take_along_axis(x, perm, axis, unique_indices=True),
            lax.take_along_axis(t, perm, axis, unique_indices=True))


jvp_rules[sort_p] = _sort_jvp
for _p in (argsort_p, argmax_p, argmin_p):
    defzero(_p)


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import at_front, batch_rules, batch_size, moveaxis, unary_axes  # noqa: E402

unary_axes(sort_p, "axis", removed=False)
unary_axes(argsort_p, "axis", removed=False)
unary_axes(argmax_p, "axis", removed=True)
unary_axes(argmin_p, "axis", removed=True)


def _spread(index) -> bool:
    """Whether the advanced entries (index arrays and integers) are separated by a slice or a
    new axis: NumPy then puts their broadcast axes first in ``x[key]``."""
    positions = [p for p, e in enumerate(index) if isinstance(e, Operand | Int)]
    return bool(positions) and positions != list(range(positions[0], positions[-1] + 1))


def _group_at(index) -> int:
    """Where the first axis of the index arrays' broadcast shape lands in ``x[key]``."""
    first = next(p for p, e in enumerate(index) if isinstance(e, Operand | Int))
    return 0 if _spread(index) else sum(isinstance(e, Slice | NewAxis) for e in index[:first])


def _batched_key(x, dx, idx, didx, index, size):
    """Operand, index arrays and key of the batched indexing, and where the batch axis lands in
    its result. Index arrays unbatched: a leading ``:`` for the batch axis of ``x``. Some
    batched: every index array gets the batch axis first, and ``x`` (when batched) an
    ``arange`` index of its own."""
    shapes = [i.shape if d is None else i.shape[:d] + i.shape[d + 1:] for i, d in zip(idx, didx)]
    shape = tuple(np.broadcast_shapes(*shapes))
    if all(d is None for d in didx):
        return at_front(x, dx, size), list(idx), (Slice(0, size, 1), *index), len(shape) if _spread(index) else 0
    full = (size, *shape)
    new_idx = []
    for i, d in zip(idx, didx):
        i = at_front(i, d, size)
        new_idx.append(lax.broadcast_in_dim(i, full, (0, *range(len(full) - i.ndim + 1, len(full)))))
    if dx is None:
        return x, new_idx, index, _group_at(index)
    rows = lax.iota(INDEX_DTYPE, (size,) + (1,) * len(shape), 0)
    shifted = tuple(Operand(e.k + 1) if isinstance(e, Operand) else e for e in index)
    return at_front(x, dx, size), [rows, *new_idx], (Operand(0), *shifted), 0


def _gather_b(args, dims, *, index, unique_indices):
    (x, *idx), (dx, *didx) = args, dims
    x, idx, key, at = _batched_key(x, dx, idx, didx, index, batch_size(args, dims))
    return lax.gather(x, idx, key, unique_indices), at


def _scatter_b(prim):
    def rule(args, dims, *, index, unique_indices):
        (x, u, *idx), (dx, du, *didx) = args, dims
        size = batch_size(args, dims)
        x, idx, key, at = _batched_key(at_front(x, dx, size), 0, idx, didx, index, size)
        shape = indexed_shape(x.shape, key, [i.shape for i in idx])
        if du is None and u.shape != ():
            u = lax.broadcast_in_dim(u, shape, tuple(a for a in range(len(shape)) if a != at))
        elif du is not None and u.ndim == 1:
            u = lax.broadcast_in_dim(u, shape, (at,))
        elif du is not None:
            u = moveaxis(u, du, at)
        return bind(prim, x, u, *idx, index=key, unique_indices=unique_indices), 0

    return rule


batch_rules[gather_p] = _gather_b
batch_rules[scatter_p] = _scatter_b(scatter_p)
batch_rules[scatter_add_p] = _scatter_b(scatter_add_p)


def _windows(x, starts, dstarts, axes, sizes, check: bool, size: int):
    """Each batch member's window of ``x`` (batch axis first) as an advanced-indexing key, for
    starts that differ along the batch: ``x[rows, s[:, None] + arange(b)]``. The key's broadcast
    axes (batch, then the windows' sizes) come first in ``x[key]``; the permutation puts the
    result's axes in the window's order. With ``check``, a start out of range indexes the axis's
    end, where NumPy's indexing raises IndexError."""
    group = (size, *sizes)
    rows = lax.iota(INDEX_DTYPE, (size,) + (1,) * len(sizes), 0)
    idx, at = [rows], {}
    for k, (s, d, a, b) in enumerate(zip(starts, dstarts, axes, sizes)):
        n = x.shape[a + 1]
        s = lax.convert(s, INDEX_DTYPE) if not isinstance(s, Literal) else Literal.of(s.value, INDEX_DTYPE)
        if check and not isinstance(s, Literal):
            s = lax.select(lax.lt(s, 0), n, lax.select(lax.gt(s, n - b), n, s))
        first = lax.broadcast_in_dim(s, group, (0,) if d is not None else ())
        offsets = lax.broadcast_in_dim(lax.iota(INDEX_DTYPE, (b,), 0), group, (k + 1,))
        at[a] = len(idx)
        idx.append(lax.add(first, offsets))
    key = (Operand(0), *(Operand(at[a]) if a in at else Slice(0, n, 1) for a, n in enumerate(x.shape[1:])))
    rest = iter(range(len(group), x.ndim))
    perm = (0, *(1 + axes.index(a) if a in at else next(rest) for a in range(x.ndim - 1)))
    return idx, key, perm


def _dynamic_slice_b(args, dims, *, axes, sizes, check):
    (x, *starts), (dx, *ds) = args, dims
    size = batch_size(args, dims)
    x = at_front(x, dx, size)
    if all(d is None for d in ds):
        return bind(dynamic_slice_p, x, *starts, axes=tuple(a + 1 for a in axes), sizes=sizes, check=check), 0
    starts = [s if d is None else moveaxis(s, d, 0) for s, d in zip(starts, ds)]
    idx, key, perm = _windows(x, starts, ds, axes, sizes, check, size)
    return lax.transpose(lax.gather(x, idx, key, unique_indices=True), perm), 0


def _dynamic_update_slice_b(args, dims, *, axes, sizes, check):
    (x, u, *starts), (dx, du, *ds) = args, dims
    size = batch_size(args, dims)
    x = at_front(x, dx, size)
    window = tuple(sizes[axes.index(a - 1)] if a - 1 in axes else n for a, n in enumerate(x.shape))
    if du is not None:
        u = moveaxis(u, du, 0)
        if u.ndim == 1:  # a scalar per member
            u = lax.broadcast_in_dim(u, window, (0,))
    elif u.shape != ():
        u = at_front(u, None, size)
    if all(d is None for d in ds):
        return bind(dynamic_update_slice_p, x, u, *starts, axes=tuple(a + 1 for a in axes), sizes=sizes,
                    check=check), 0
    starts = [s if d is None else moveaxis(s, d, 0) for s, d in zip(starts, ds)]
    idx, key, perm = _windows(x, starts, ds, axes, sizes, check, size)
    if u.shape != ():
        u = lax.transpose(u, tuple(np.argsort(perm)))
    return lax.scatter(x, u, idx, key, unique_indices=True), 0


batch_rules[dynamic_slice_p] = _dynamic_slice_b
batch_rules[dynamic_update_slice_p] = _dynamic_update_slice_b
