"""Primitives that move, select or create data without arithmetic."""

from __future__ import annotations

import numpy as np

from pullback.ir.core import VIEWS, Literal, Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType, canonical_dtype


def _rule(prim: Primitive):
    def register(fn):
        shape_rules[prim] = fn
        return fn

    return register


def _axes_perm(perm, ndim: int) -> None:
    if sorted(perm) != list(range(ndim)):
        raise ShapeError(f"{perm} is not a permutation of {ndim} axes")


broadcast_in_dim_p = Primitive("broadcast_in_dim")


@_rule(broadcast_in_dim_p)
def _broadcast_in_dim(x, *, shape: tuple[int, ...], broadcast_dimensions: tuple[int, ...]):
    """Operand axis i becomes output axis ``broadcast_dimensions[i]``; a size-1 axis
    may stretch. A scalar Literal operand is a fill value (``np.full``)."""
    if len(broadcast_dimensions) != x.type.ndim:
        raise ShapeError(f"broadcast_dimensions {broadcast_dimensions} do not match operand rank {x.type.ndim}")
    if list(broadcast_dimensions) != sorted(set(broadcast_dimensions)) or any(
        not 0 <= d < len(shape) for d in broadcast_dimensions
    ):
        raise ShapeError(f"broadcast_dimensions {broadcast_dimensions} must be increasing axes of {shape}")
    for size, d in zip(x.shape, broadcast_dimensions):
        if size not in (1, shape[d]):
            raise ShapeError(f"cannot broadcast operand of shape {x.shape} to {shape}")
    return ArrayType(shape, x.dtype)


reshape_p = Primitive("reshape")


@_rule(reshape_p)
def _reshape(x, *, new_sizes: tuple[int, ...]):
    if isinstance(x, Literal):
        raise ShapeError("reshape of a literal")
    if int(np.prod(new_sizes, dtype=np.int64)) != x.type.size:
        raise ShapeError(f"cannot reshape {x.shape} to {new_sizes}")
    return ArrayType(new_sizes, x.dtype)


transpose_p = Primitive("transpose")


@_rule(transpose_p)
def _transpose(x, *, permutation: tuple[int, ...]):
    _axes_perm(permutation, x.type.ndim)
    return ArrayType(tuple(x.shape[p] for p in permutation), x.dtype)


slice_p = Primitive("slice")


@_rule(slice_p)
def _slice(x, *, start_indices: tuple[int, ...], limit_indices: tuple[int, ...], strides: tuple[int, ...]):
    """``x[start:limit:stride, ...]`` in ``range`` semantics: a limit of -1 with a
    negative stride runs down to index 0."""
    if not len(start_indices) == len(limit_indices) == len(strides) == len(x.shape):
        raise ShapeError("slice needs a start, limit and stride per axis")
    out = []
    for n, start, limit, stride in zip(x.shape, start_indices, limit_indices, strides):
        if stride == 0:
            raise ShapeError("slice stride cannot be zero")
        r = range(start, limit, stride)
        if len(r) and not (0 <= r[0] < n and 0 <= r[-1] < n):
            raise ShapeError(f"slice {start}:{limit}:{stride} out of bounds for axis of size {n}")
        out.append(len(r))
    return ArrayType(tuple(out), x.dtype)


pad_p = Primitive("pad")


@_rule(pad_p)
def _pad(x, *, shape, start_indices, limit_indices, strides):
    """The transpose of ``slice``: zeros of ``shape`` with ``x`` at ``[start:limit:stride, ...]``."""
    if len(shape) != x.type.ndim:
        raise ShapeError(f"pad to {shape} of an operand of rank {x.type.ndim}")
    inner = _slice(ArrayType(shape, x.dtype), start_indices=start_indices, limit_indices=limit_indices,
                   strides=strides)
    if inner.shape != x.shape:
        raise ShapeError(f"pad: operand of shape {x.shape} does not fill a slice of shape {inner.shape}")
    return ArrayType(shape, x.dtype)


concatenate_p = Primitive("concatenate")


@_rule(concatenate_p)
def _concatenate(*xs, dimension: int):
    if not xs:
        raise ShapeError("concatenate needs at least one operand")
    first = xs[0]
    if not 0 <= dimension < first.type.ndim:
        raise ShapeError(f"axis {dimension} out of range for rank {first.type.ndim}")
    for x in xs:
        if x.dtype != first.dtype or x.type.ndim != first.type.ndim:
            raise ShapeError("concatenate operands differ in dtype or rank")
        if any(a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != dimension):
            raise ShapeError(f"cannot concatenate shapes {first.shape} and {x.shape} along axis {dimension}")
    shape = list(first.shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return ArrayType(tuple(shape), first.dtype)


def diagonal_length(m: int, n: int, offset: int) -> int:
    return max(0, min(m, n - offset) if offset >= 0 else min(m + offset, n))


diagonal_p = Primitive("diagonal")
VIEWS.update(dict.fromkeys((reshape_p, transpose_p, slice_p, broadcast_in_dim_p, diagonal_p)))  # views of the operand


@_rule(diagonal_p)
def _diagonal(x, *, offset: int):
    """The ``offset`` diagonal of the last two axes, as the last axis."""
    if x.type.ndim < 2:
        raise ShapeError(f"diagonal needs at least 2 axes, got shape {x.shape}")
    *batch, m, n = x.shape
    return ArrayType((*batch, diagonal_length(m, n, offset)), x.dtype)


diag_embed_p = Primitive("diag_embed")


@_rule(diag_embed_p)
def _diag_embed(x, *, shape: tuple[int, int], offset: int):
    """The transpose of ``diagonal``: (..., L) -> (..., m, n), zeros with ``x`` on
    the ``offset`` diagonal."""
    if x.type.ndim < 1 or len(shape) != 2:
        raise ShapeError("diag_embed needs an operand with at least 1 axis and a 2-d shape")
    if diagonal_length(*shape, offset) != x.shape[-1]:
        raise ShapeError(f"a diagonal of length {x.shape[-1]} does not fit offset {offset} of shape {shape}")
    return ArrayType((*x.shape[:-1], *shape), x.dtype)


add_diagonal_p = Primitive("add_diagonal")


@_rule(add_diagonal_p)
def _add_diagonal(x, v):
    """``x + diag_embed(v)`` for a square matrix: n additions, not n^2 (``K + s I``); a
    scalar ``v`` is added to every diagonal entry."""
    if x.type.ndim != 2 or x.shape[0] != x.shape[1] or v.shape not in (x.shape[:1], ()) or v.dtype != x.dtype:
        raise ShapeError(f"add_diagonal needs an (n, n) matrix and an (n,) or scalar diagonal of its dtype, got "
                         f"{x.type} and {v.type}")
    return x.type


add_transpose_p = Primitive("add_transpose")


@_rule(add_transpose_p)
def _add_transpose(x):
    """``x + x.T`` for a square matrix (symmetrising), a primitive so that large ones can be
    printed cache-blocked: the transposed operand is read across rows otherwise."""
    if x.type.ndim != 2 or x.shape[0] != x.shape[1]:
        raise ShapeError(f"add_transpose needs a square matrix, got {x.type}")
    return x.type


tril_p = Primitive("tril")
triu_p = Primitive("triu")


def _triangle(x, *, k: int):
    if x.type.ndim < 2:
        raise ShapeError(f"tril/triu need at least 2 axes, got shape {x.shape}")
    return x.type


shape_rules[tril_p] = shape_rules[triu_p] = _triangle

convert_element_type_p = Primitive("convert_element_type")


@_rule(convert_element_type_p)
def _convert(x, *, new_dtype: np.dtype):
    return ArrayType(x.shape, canonical_dtype(new_dtype))


iota_p = Primitive("iota")


@_rule(iota_p)
def _iota(*, dtype: np.dtype, shape: tuple[int, ...], dimension: int):
    """0, 1, 2, ... along ``dimension``, constant along the other axes."""
    if not 0 <= dimension < len(shape):
        raise ShapeError(f"iota dimension {dimension} out of range for shape {shape}")
    return ArrayType(shape, dtype)


linspace_p = Primitive("linspace")


@_rule(linspace_p)
def _linspace(*, start: float, stop: float, num: int, dtype: np.dtype):
    """``np.linspace(start, stop, num)``: NumPy's own samples, the last ``stop`` itself (which
    ``start + step * iota`` may miss by an ulp)."""
    if num < 2:
        raise ShapeError(f"linspace of {num} samples: a fill or a range")
    return ArrayType((num,), dtype)


eye_p = Primitive("eye")


@_rule(eye_p)
def _eye(*, dtype: np.dtype, shape: tuple[int, int], k: int):
    """Ones on the ``k`` diagonal of an (n, m) matrix."""
    if len(shape) != 2:
        raise ShapeError(f"eye needs a 2-d shape, got {shape}")
    return ArrayType(shape, dtype)


# NumPy's functions that make an array from shapes and numbers alone, as CuPy's of the same name do: an
# array one of them made while tracing is made again by the program, the same call (``np.tri(3)``)
SHAPED_FUNCTIONS = frozenset({"tri", "indices", "hanning", "hamming", "blackman", "bartlett", "kaiser"})
shaped_p = Primitive("shaped")


@_rule(shaped_p)
def _shaped(*, function: str, args: tuple, kwargs: tuple, shape: tuple[int, ...], dtype: np.dtype):
    """``np.<function>(*args, **dict(kwargs))``: an array of ``shape`` and ``dtype`` from numbers alone."""
    if function not in SHAPED_FUNCTIONS:
        raise ShapeError(f"np.{function} is not a function of shapes alone")
    return ArrayType(shape, dtype)


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import defjvp, deflinear, defzero  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.primitives import lax  # noqa: E402

for _p in (broadcast_in_dim_p, reshape_p, transpose_p, slice_p, pad_p, concatenate_p, diagonal_p, diag_embed_p,
           add_diagonal_p, add_transpose_p, tril_p, triu_p):
    deflinear(_p)
defjvp(convert_element_type_p, lambda t, x, ans, new_dtype: lax.convert(t, new_dtype))
defzero(iota_p)
defzero(linspace_p)
defzero(eye_p)
defzero(shaped_p)


def _broadcast_in_dim_t(ct, x, *, shape, broadcast_dimensions):
    summed = tuple(i for i in range(len(shape)) if i not in broadcast_dimensions)
    stretched = tuple(i for i, d in enumerate(broadcast_dimensions) if x.shape[i] == 1 and shape[d] != 1)
    out = lax.reduce_sum(ct, summed)
    if stretched:
        out = lax.reshape(lax.reduce_sum(out, stretched), x.shape)
    return (out,)


def _concatenate_t(ct, *xs, dimension):
    cts, start = [], 0
    for x in xs:
        n = x.shape[dimension]
        if isinstance(x, Linear):
            starts = [0] * ct.ndim
            limits = list(ct.shape)
            starts[dimension], limits[dimension] = start, start + n
            cts.append(lax.slice(ct, starts, limits, [1] * ct.ndim))
        else:
            cts.append(None)
        start += n
    return tuple(cts)


def _convert_t(ct, x, *, new_dtype):
    """Adjoint of a dtype change: complex -> real keeps the real part, real -> complex embeds."""
    if ct.dtype.kind == "c" and x.dtype.kind != "c":
        ct = lax.real(ct)
    return (lax.convert(ct, x.dtype),)


transpose_rules[broadcast_in_dim_p] = _broadcast_in_dim_t
transpose_rules[reshape_p] = lambda ct, x, *, new_sizes: (lax.reshape(ct, x.shape),)
transpose_rules[transpose_p] = lambda ct, x, *, permutation: (
    lax.transpose(ct, [permutation.index(i) for i in range(len(permutation))]),)
transpose_rules[slice_p] = lambda ct, x, *, start_indices, limit_indices, strides: (
    lax.pad(ct, x.shape, start_indices, limit_indices, strides),)
transpose_rules[pad_p] = lambda ct, x, *, shape, start_indices, limit_indices, strides: (
    lax.slice(ct, start_indices, limit_indices, strides),)
transpose_rules[concatenate_p] = _concatenate_t
transpose_rules[diagonal_p] = lambda ct, x, *, offset: (lax.diag_embed(ct, x.shape[-2:], offset),)
transpose_rules[diag_embed_p] = lambda ct, x, *, shape, offset: (lax.diagonal(ct, offset),)


def _add_diagonal_t(ct, x, v):
    if not isinstance(v, Linear):
        return ct, None
    v_ct = lax.diagonal(ct, 0)
    return (ct if isinstance(x, Linear) else None), (lax.reduce_sum(v_ct, (0,)) if v.shape == () else v_ct)


transpose_rules[add_diagonal_p] = _add_diagonal_t
transpose_rules[add_transpose_p] = lambda ct, x: (lax.add_transpose(ct),)  # self-adjoint
transpose_rules[tril_p] = lambda ct, x, *, k: (lax.tril(ct, k),)
transpose_rules[triu_p] = lambda ct, x, *, k: (lax.triu(ct, k),)
transpose_rules[convert_element_type_p] = _convert_t


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import (  # noqa: E402
    at_front,
    batch_rules,
    batch_size,
    elementwise,
    leading_batch,
    unbatched_axis,
)

elementwise(convert_element_type_p)
for _p in (diagonal_p, diag_embed_p, tril_p, triu_p):  # act on the last two axes
    leading_batch(_p)


def _broadcast_in_dim_b(args, dims, *, shape, broadcast_dimensions):
    (x,), (d,) = args, dims
    return lax.broadcast_in_dim(at_front(x, d, 0), (x.shape[d], *shape),
                                (0, *(b + 1 for b in broadcast_dimensions))), 0


def _reshape_b(args, dims, *, new_sizes):
    (x,), (d,) = args, dims
    return lax.reshape(at_front(x, d, 0), (x.shape[d], *new_sizes)), 0


def _transpose_b(args, dims, *, permutation):
    (x,), (d,) = args, dims
    return lax.transpose(x, (d, *(unbatched_axis(p, d) for p in permutation))), 0


def _slice_b(args, dims, *, start_indices, limit_indices, strides):
    (x,), (d,) = args, dims
    return lax.slice(at_front(x, d, 0), (0, *start_indices), (x.shape[d], *limit_indices), (1, *strides)), 0


def _pad_b(args, dims, *, shape, start_indices, limit_indices, strides):
    (x,), (d,) = args, dims
    n = x.shape[d]
    return lax.pad(at_front(x, d, 0), (n, *shape), (0, *start_indices), (n, *limit_indices), (1, *strides)), 0


def _concatenate_b(args, dims, *, dimension):
    size = batch_size(args, dims)
    return lax.concatenate([at_front(x, d, size) for x, d in zip(args, dims)], dimension + 1), 0


def _add_diagonal_b(args, dims):
    """``x + diag_embed(v)``, batched: the primitive itself takes one matrix."""
    (x, v), (dx, dv) = args, dims
    size = batch_size(args, dims)
    n = x.shape[-1]
    v = at_front(v, dv, size)
    if v.ndim == 1:  # a scalar per batch element: on every diagonal entry
        v = lax.broadcast_in_dim(v, (size, n), (0,))
    return lax.add(at_front(x, dx, size), lax.diag_embed(v, (n, n))), 0


def _add_transpose_b(args, dims):
    (x,), (d,) = args, dims
    x = at_front(x, d, 0)
    return lax.add(x, lax.mT(x)), 0


batch_rules[broadcast_in_dim_p] = _broadcast_in_dim_b
batch_rules[reshape_p] = _reshape_b
batch_rules[transpose_p] = _transpose_b
batch_rules[slice_p] = _slice_b
batch_rules[pad_p] = _pad_b
batch_rules[concatenate_p] = _concatenate_b
batch_rules[add_diagonal_p] = _add_diagonal_b
batch_rules[add_transpose_p] = _add_transpose_b
