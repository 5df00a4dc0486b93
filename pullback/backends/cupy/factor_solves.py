"""The solves at the factors (``pullback.primitives.linalg.factor_solves``) for CuPy: getrs through
``cupyx.scipy.linalg.lu_solve`` (cuSOLVER getrs on getrf's column-major factors), the inverse as
getrs against the identity (cuSOLVER has no getri), potrs as two triangular solves with the lower
factor (as ``potri`` prints here). A singular factor raises where NumPy's solve would: ``info`` is
read back once."""

from __future__ import annotations

from pullback.backends import syntax as s
from pullback.backends.cupy.backend import EMITTERS, _cupyx, emits
from pullback.backends.numpy import linalg as npl
from pullback.backends.numpy.factor_solves import at_factor
from pullback.ir.core import Literal
from pullback.primitives.linalg import factor_solves as fa


def _lu_solve(ctx, lu, piv, b, trans: int, overwrite: bool):
    opts = {"trans": s.number(trans)} if trans else {}
    if overwrite:
        opts["overwrite_b"] = s.number(True)
    return s.call(_cupyx(ctx, "lu_solve"), s.tuple_([lu, piv]), b, **opts, check_finite=s.number(False))


def _eye(eqn):
    n = eqn.inputs[0].shape[-1]
    return s.call("cp.eye", s.number(n), dtype=s.dtype(eqn.inputs[0].dtype))


def _potrs(ctx, l, b, overwrite: bool):
    solve = _cupyx(ctx, "solve_triangular")
    first = s.call(solve, l, b, lower=s.number(True), overwrite_b=s.number(overwrite), check_finite=s.number(False))
    return s.call(solve, l, first, trans=s.number(2), lower=s.number(True), overwrite_b=s.number(True),
                  check_finite=s.number(False))


def _singular(ctx, info):
    n = s.call("int", info)
    return npl.raise_if(s.binop(n, ">", s.number(0)), ctx,
                        "singular matrix: U[{}, {}] is exactly zero (cuSOLVER getrf info={})",
                        s.binop(n, "-", s.number(1)), s.binop(n, "-", s.number(1)), n)


@emits(fa.getrs_p)
def _getrs(ctx, eqn, ins, outs):
    (lu, piv, b), (x,) = ins, outs
    return [s.assign([x], _lu_solve(ctx, lu, piv, b, int(eqn.params["trans"]), 2 in ctx.reusable))]


@emits(fa.getri_p)
def _getri(ctx, eqn, ins, outs):
    (lu, piv), (x,) = ins, outs
    return [s.assign([x], _lu_solve(ctx, lu, piv, _eye(eqn), 0, True))]


@emits(fa.potrs_p)
def _potrs_emit(ctx, eqn, ins, outs):
    (l, b), (x,) = ins, outs
    return [s.assign([x], _potrs(ctx, l, b, 1 in ctx.reusable))]


@emits(fa.gesv_p)
def _gesv(ctx, eqn, ins, outs):
    (_, lu, piv, info, b), (x,) = ins, outs
    solve = s.assign([x], _lu_solve(ctx, lu, piv, b, int(eqn.params.get("trans", 0)), 4 in ctx.reusable))
    return [solve] if isinstance(eqn.inputs[3], Literal) else [_singular(ctx, info), solve]  # lu_solve's: no check


@emits(fa.getri_at_p)
def _getri_at(ctx, eqn, ins, outs):
    (_, lu, piv, info), (x,) = ins, outs
    return [_singular(ctx, info), s.assign([x], _lu_solve(ctx, lu, piv, _eye(eqn), 0, True))]


@emits(fa.posv_p)
def _posv(ctx, eqn, ins, outs):
    (_, l, b), (x,) = ins, outs
    return [s.assign([x], _potrs(ctx, l, b, 2 in ctx.reusable))]



def _po_inv(ctx, eqn, ins, outs):
    """``inv`` at a Cholesky factor: potri as it prints here (two triangular solves in an identity)."""
    return at_factor(ctx, eqn, ins, outs, EMITTERS)


EMITTERS[fa.po_inv_p] = _po_inv
