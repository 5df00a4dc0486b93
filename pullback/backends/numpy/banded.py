"""How the banded primitives print: ``scipy.linalg.solve_banded((l, u), ab, b)``, and the storage
transpose as zeros and one slice assignment per diagonal (``out[0, 1:] = ab[2, :-1]``)."""

from __future__ import annotations

import libcst as cst

from pullback.backends import syntax as s
from pullback.backends.numpy.backend import emits
from pullback.primitives.linalg import banded as bd


@emits(bd.gbsv_p)
def _gbsv(ctx, eqn, ins, outs):
    ctx.use("scipy.linalg")
    p = eqn.params
    return s.call("scipy.linalg.solve_banded", s.ints((p["lower"], p["upper"])), *ins)


@emits(bd.band_transpose_p)
def _band_transpose(ctx, eqn, ins, outs):
    """Row ``r`` of the result is row ``l + u - r`` of ``ab`` moved ``r - l`` columns to the left."""
    (ab,), (out,) = ins, outs
    lower, upper = eqn.params["lower"], eqn.params["upper"]
    n = eqn.inputs[0].shape[1]
    stmts: list[cst.BaseStatement] = [s.assign([out], s.call("np.zeros_like", ab))]
    for row in range(lower + upper + 1):
        shift = bd.band_shift(row, lower)
        if abs(shift) >= n:
            continue  # a diagonal the n x n matrix does not have
        target = s.subscript(out, [s.number(row), *_cols(max(0, -shift), n - max(0, shift), n)])
        value = s.subscript(ab, [s.number(lower + upper - row), *_cols(max(0, shift), n - max(0, -shift), n)])
        stmts.append(s.statement(cst.Assign([cst.AssignTarget(target)], value)))
    return stmts


def _cols(start: int, stop: int, n: int) -> list[cst.Slice]:
    """``start:stop`` of ``n`` columns as short source (nothing for all of them: ``out[1] = ab[1]``)."""
    return [] if (start, stop) == (0, n) else [s.slice_(start or None, None if stop == n else stop - n, None)]
