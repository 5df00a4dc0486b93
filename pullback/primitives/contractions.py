"""``dot_general``: every tensor contraction (matmul, batched matmul, tensordot,
each pairwise step of einsum) with XLA's semantics: the output's axes are the
batch axes, then the lhs free axes, then the rhs free axes."""

from __future__ import annotations

from typing import NamedTuple

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType


class DotDims(NamedTuple):
    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()

    def __repr__(self) -> str:
        return f"(({self.lhs_contract}, {self.rhs_contract}), ({self.lhs_batch}, {self.rhs_batch}))"


def free_axes(ndim: int, contract, batch) -> tuple[int, ...]:
    return tuple(i for i in range(ndim) if i not in contract and i not in batch)


dot_general_p = Primitive("dot_general")


def _dot_general(lhs, rhs, *, dims: DotDims):
    if not isinstance(dims, DotDims):
        raise ShapeError(f"dims must be a DotDims, got {dims!r}")
    if lhs.dtype != rhs.dtype:
        raise ShapeError(f"operands have different dtypes {lhs.dtype.name} and {rhs.dtype.name}")
    if lhs.dtype.kind not in "ifc":
        raise ShapeError(f"dot_general does not accept dtype {lhs.dtype.name}")
    sides = (("lhs", lhs, dims.lhs_contract, dims.lhs_batch), ("rhs", rhs, dims.rhs_contract, dims.rhs_batch))
    for name, x, c, b in sides:
        axes = c + b
        if len(set(axes)) != len(axes) or any(not 0 <= a < x.type.ndim for a in axes):
            raise ShapeError(f"{name} axes {axes} are not distinct axes of shape {x.shape}")
    if len(dims.lhs_contract) != len(dims.rhs_contract) or len(dims.lhs_batch) != len(dims.rhs_batch):
        raise ShapeError("lhs and rhs need as many contracting and batch axes")
    for a, b in zip(dims.lhs_contract + dims.lhs_batch, dims.rhs_contract + dims.rhs_batch):
        if lhs.shape[a] != rhs.shape[b]:
            raise ShapeError(
                f"size mismatch in contraction: lhs axis {a} of shape {lhs.shape} vs rhs axis {b} of shape {rhs.shape}"
            )
    shape = (
        tuple(lhs.shape[a] for a in dims.lhs_batch)
        + tuple(lhs.shape[a] for a in free_axes(lhs.type.ndim, dims.lhs_contract, dims.lhs_batch))
        + tuple(rhs.shape[a] for a in free_axes(rhs.type.ndim, dims.rhs_contract, dims.rhs_batch))
    )
    return ArrayType(shape, lhs.dtype)


shape_rules[dot_general_p] = _dot_general


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import defjvp  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.primitives import lax  # noqa: E402

defjvp(dot_general_p, lambda t, x, y, ans, dims: lax.dot_general(t, y, dims),
       lambda t, x, y, ans, dims: lax.dot_general(x, t, dims))


def _order(result_axes: list[int]) -> list[int]:
    """The permutation putting a result whose axis j is operand axis ``result_axes[j]`` in operand order."""
    return [result_axes.index(i) for i in range(len(result_axes))]


def _dot_general_t(ct, x, y, *, dims: DotDims):
    """Contract the cotangent with the conjugated other operand over the axes the
    product kept, then permute into the operand's axis order. For a matrix
    product this is ``x_bar = ct @ y^H`` and ``y_bar = x^H @ ct``."""
    x_linear = isinstance(x, Linear)
    if x_linear and isinstance(y, Linear):
        raise TypeError("dot_general of two values that both depend on the inputs is not linear")
    key = (dims, x_linear, x.ndim, y.ndim, ct.ndim)
    plan = _TRANSPOSE_PLANS.get(key)
    if plan is None:
        if len(_TRANSPOSE_PLANS) > 4096:
            _TRANSPOSE_PLANS.clear()
        plan = _TRANSPOSE_PLANS[key] = _dot_general_t_plan(dims, x_linear, x.ndim, y.ndim, ct.ndim)
    contraction, perm = plan
    if x_linear:
        return lax.transpose(lax.dot_general(ct, lax.conj(y), contraction), perm), None
    return None, lax.transpose(lax.dot_general(lax.conj(x), ct, contraction), perm)


# (dims, x linear, ndims) -> the contraction and permutation of ``_dot_general_t``: axis arithmetic that
# depends on the equation's structure alone, worked out once for the many products of one shape
_TRANSPOSE_PLANS: dict[tuple, tuple[DotDims, tuple[int, ...]]] = {}


def _dot_general_t_plan(dims: DotDims, x_linear: bool, x_ndim: int, y_ndim: int,
                        ct_ndim: int) -> tuple[DotDims, tuple[int, ...]]:
    nb = len(dims.lhs_batch)
    x_free = free_axes(x_ndim, dims.lhs_contract, dims.lhs_batch)
    y_free = free_axes(y_ndim, dims.rhs_contract, dims.rhs_batch)
    ct_batch = tuple(range(nb))
    ct_x_free = tuple(range(nb, nb + len(x_free)))
    ct_y_free = tuple(range(nb + len(x_free), ct_ndim))
    if x_linear:
        kept = [dims.lhs_contract[dims.rhs_contract.index(r)] for r in sorted(dims.rhs_contract)]
        return (DotDims(ct_y_free, y_free, ct_batch, dims.rhs_batch),
                tuple(_order([*dims.lhs_batch, *x_free, *kept])))
    kept = [dims.rhs_contract[dims.lhs_contract.index(c)] for c in sorted(dims.lhs_contract)]
    return DotDims(x_free, ct_x_free, dims.lhs_batch, ct_batch), tuple(_order([*dims.rhs_batch, *kept, *y_free]))


transpose_rules[dot_general_p] = _dot_general_t


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import at_front, batch_rules, unbatched_axis  # noqa: E402


def _dot_general_b(args, bdims, *, dims: DotDims):
    """Both operands batched: the batch axis becomes a batch axis of the contraction (a batched
    matmul). One batched: it is a free axis of that operand (``X @ V`` with the batch in V's
    columns: one matrix product, not a batch of matrix-vector products)."""
    (x, y), (dx, dy) = args, bdims
    if dx is not None and dy is not None:
        x, y = at_front(x, dx, 0), at_front(y, dy, 0)
        up = lambda axes: tuple(a + 1 for a in axes)  # noqa: E731
        new = DotDims(up(dims.lhs_contract), up(dims.rhs_contract), (0, *up(dims.lhs_batch)),
                      (0, *up(dims.rhs_batch)))
        return lax.dot_general(x, y, new), 0
    nb = len(dims.lhs_batch)
    if dx is not None:
        lc, lb = (tuple(unbatched_axis(a, dx) for a in axes) for axes in (dims.lhs_contract, dims.lhs_batch))
        new = DotDims(lc, dims.rhs_contract, lb, dims.rhs_batch)
        return lax.dot_general(x, y, new), nb + free_axes(x.ndim, lc, lb).index(dx)
    rc, rb = (tuple(unbatched_axis(a, dy) for a in axes) for axes in (dims.rhs_contract, dims.rhs_batch))
    new = DotDims(dims.lhs_contract, rc, dims.lhs_batch, rb)
    n_lhs_free = x.ndim - len(dims.lhs_contract) - nb
    return lax.dot_general(x, y, new), nb + n_lhs_free + free_axes(y.ndim, rc, rb).index(dy)


batch_rules[dot_general_p] = _dot_general_b
