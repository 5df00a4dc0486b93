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
