"""Cumulative sums and products along one axis, and the product reduction.

``cumsum`` is linear: its transpose is the cumulative sum running the other way.
``cumprod`` and ``reduce_prod`` have derivatives that stay exact where entries are
zero: they never divide by ``x``, but multiply exclusive cumulative products (the
product of everything before an entry, times the product of everything after it)."""

from __future__ import annotations

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType

cumsum_p = Primitive("cumsum")
cumprod_p = Primitive("cumprod")
reduce_prod_p = Primitive("reduce_prod")


def _cumulative(x, *, axis: int, reverse: bool):
    """Same type as ``x``; ``reverse`` accumulates from the end of the axis."""
    if not isinstance(axis, int) or not 0 <= axis < x.type.ndim:
        raise ShapeError(f"cumulative axis {axis!r} is not an axis of a rank-{x.type.ndim} operand")
    if not isinstance(reverse, bool):
        raise ShapeError(f"reverse must be a bool, got {reverse!r}")
    if x.dtype.kind not in "ifc":
        raise ShapeError(f"cumulative operation does not accept dtype {x.dtype.name}")
    return x.type


def _reduce_prod(x, *, axes: tuple[int, ...]):
    ndim = x.type.ndim
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < ndim for a in axes):
        raise ShapeError(f"reduction axes {axes} must be increasing axes of a rank-{ndim} operand")
    if x.dtype.kind not in "ifc":
        raise ShapeError(f"reduce_prod does not accept dtype {x.dtype.name}")
    return ArrayType(tuple(n for i, n in enumerate(x.shape) if i not in axes), x.dtype)


shape_rules[cumsum_p] = shape_rules[cumprod_p] = _cumulative
shape_rules[reduce_prod_p] = _reduce_prod


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import defjvp, deflinear  # noqa: E402
from pullback.ad.transpose import transpose_rules  # noqa: E402
from pullback.primitives import lax  # noqa: E402
from pullback.primitives.contractions import DotDims  # noqa: E402

deflinear(cumsum_p)
transpose_rules[cumsum_p] = lambda ct, x, *, axis, reverse: (lax.cumsum(ct, axis, not reverse),)


def exclusive_cumprod(x, axis: int, reverse: bool = False):
    """``prod(x[:i])`` at ``i`` (``prod(x[i + 1:])`` if ``reverse``): the cumulative product
    of ``x`` shifted by one along ``axis``, starting from 1."""
    n = x.shape[axis]
    one = lax.full(x.shape[:axis] + (1,) + x.shape[axis + 1:], 1, x.dtype)
    if n <= 1:
        return lax.broadcast_in_dim(one, x.shape, range(x.ndim))
    inner = lax.slice_axis(x, axis, 1, n) if reverse else lax.slice_axis(x, axis, 0, n - 1)
    shifted = lax.concatenate([inner, one] if reverse else [one, inner], axis)
    return lax.cumprod(shifted, axis, reverse)


def _product_except_self(x, axis: int):
    """``prod(x[j] for j != i)`` at each ``i``, exact where entries are zero."""
    return lax.mul(exclusive_cumprod(x, axis), exclusive_cumprod(x, axis, reverse=True))


def _reduce_prod_jvp(t, x, *, ans, axes):
    """d prod(x) = sum_i t_i prod_{j != i} x_j: the reduced axes are moved last and merged
    into one, along which the product of the other entries comes from exclusive products."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    perm = kept + tuple(axes)
    shape = tuple(x.shape[i] for i in kept) + (-1,)
    size = 1
    for a in axes:
        size *= x.shape[a]
    shape = shape[:-1] + (size,)
    flat_x = lax.reshape(lax.transpose(x, perm), shape)
    flat_t = lax.reshape(lax.transpose(t, perm), shape)
    others = _product_except_self(flat_x, len(kept))
    return lax.reduce_sum(lax.mul(flat_t, others), (len(kept),))


def _cumprod_jvp(t, x, *, ans, axis, reverse):
    """y_i = prod_{j <= i} x_j, so dy_i = sum_{k <= i} t_k prod_{j <= i, j != k} x_j.

    With x moved to the last axis, row i of ``m[..., i, k] = x_k if k <= i else 1`` has
    product y_i; the product of row i without entry k (exclusive forward times exclusive
    reverse cumulative products, no division) is dy_i/dx_k for k <= i. Its lower triangle
    times t is the tangent. Exact where x has zeros, at O(n^2) cost in the axis length n
    (a division-free O(n) form needs a scan). ``reverse`` swaps lower and upper triangles."""
    n = x.shape[axis]
    last = x.ndim - 1
    perm = tuple(i for i in range(x.ndim) if i != axis) + (axis,)
    xs, ts = lax.transpose(x, perm), lax.transpose(t, perm)
    square = xs.shape + (n,)
    rows = lax.broadcast_in_dim(xs, square, tuple(range(last)) + (last + 1,))  # rows[..., i, k] = x_k
    ones = lax.full(square, 1, x.dtype)
    inside, outside = (lax.triu, lax.tril) if reverse else (lax.tril, lax.triu)
    m = lax.add(inside(rows), outside(ones, -1 if reverse else 1))
    d = inside(_product_except_self(m, last + 1))
    nb = tuple(range(last))
    out = lax.dot_general(d, ts, DotDims((last + 1,), (last,), nb, nb))
    return lax.transpose(out, tuple(perm.index(i) for i in range(x.ndim)))


defjvp(reduce_prod_p, _reduce_prod_jvp)
defjvp(cumprod_p, _cumprod_jvp)


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import unary_axes  # noqa: E402

unary_axes(cumsum_p, "axis", removed=False)
unary_axes(cumprod_p, "axis", removed=False)
unary_axes(reduce_prod_p, "axes", removed=True)
