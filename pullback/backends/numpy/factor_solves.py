"""How the solves at the factors print (``pullback.primitives.linalg.factor_solves``): LAPACK getrs, getri and
potrs on the factors getrf and potrf left. getrf's ``lu`` is LAPACK's column-major array already;
potrf's lower factor ``l`` is the C-view of LAPACK's upper factor ``u`` of A^T, so potrs reads
``l.T`` (for complex A, A^T = conj(A): the solve runs on conjugated right-hand sides)."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pullback.backends import layout
from pullback.backends import syntax as s
from pullback.backends.numpy.backend import EMITTERS, FORTRAN
from pullback.backends.numpy.linalg import PREFIX, assign, emits, lapack, overwrite, raise_if
from pullback.ir.core import Literal
from pullback.primitives.linalg import factor_solves as fa


def _singular(ctx, info):
    return raise_if(s.binop(info, ">", s.number(0)), ctx,
                    "singular matrix: U[{}, {}] is exactly zero (LAPACK getrf info={})",
                    s.binop(info, "-", s.number(1)), s.binop(info, "-", s.number(1)), info)


def _getrs(ctx, eqn, lu, piv, b, x, trans: int, position: int):
    info = s.name(ctx.fresh("info"))
    opts = {"trans": s.number(trans)} if trans else {}
    return assign([x, info], s.call(lapack(ctx, "getrs", eqn.inputs[0].dtype), lu, piv, b, **opts,
                                    **overwrite(ctx, position, "overwrite_b")))


def _getri(ctx, eqn, lu, piv, x, position: int):
    dt, n = eqn.inputs[0].dtype, eqn.inputs[0].shape[-1]
    work, status = getattr(scipy.linalg.lapack, f"{PREFIX[np.dtype(dt)]}getri_lwork")(n)
    opts = {"lwork": s.number(int(np.real(work)))} if status == 0 else {}
    info = s.name(ctx.fresh("info"))
    return assign([x, info], s.call(lapack(ctx, "getri", dt), lu, piv, **opts,
                                    **overwrite(ctx, position, "overwrite_lu")))


def _potrs(ctx, eqn, l, b, x, position: int, fortran: bool):
    """``fortran``: L is F-ordered, LAPACK's own lower factor of A = L L^H, read as itself."""
    dt = eqn.inputs[0].dtype
    info = s.name(ctx.fresh("info"))
    if fortran:
        return [assign([x, info], s.call(lapack(ctx, "potrs", dt), l, b, lower=s.number(1),
                                         **overwrite(ctx, position, "overwrite_b")))]
    if dt.kind != "c":
        return [assign([x, info], s.call(lapack(ctx, "potrs", dt), s.attribute(l, "T"), b,
                                         **overwrite(ctx, position, "overwrite_b")))]
    return [assign([x, info], s.call(lapack(ctx, "potrs", dt), s.attribute(l, "T"), s.call("np.conj", b),
                                     overwrite_b=s.number(1))),
            assign([x], s.call("np.conj", x, out=x))]


@emits(fa.getrs_p)
def _getrs_emit(ctx, eqn, ins, outs):
    (lu, piv, b), (x,) = ins, outs
    return [_getrs(ctx, eqn, lu, piv, b, x, int(eqn.params["trans"]), 2)]


@emits(fa.getri_p)
def _getri_emit(ctx, eqn, ins, outs):
    (lu, piv), (x,) = ins, outs
    return [_getri(ctx, eqn, lu, piv, x, 0)]


@emits(fa.potrs_p)
def _potrs_emit(ctx, eqn, ins, outs):
    (l, b), (x,) = ins, outs
    return _potrs(ctx, eqn, l, b, x, 1, 0 in ctx.fortran)


@emits(fa.gesv_p)
def _gesv_emit(ctx, eqn, ins, outs):
    """A singular factor raises here, where NumPy's solve would (getrf itself does not check, so that
    slogdet of the same matrix shares it)."""
    (_, lu, piv, info, b), (x,) = ins, outs
    solve = _getrs(ctx, eqn, lu, piv, b, x, int(eqn.params.get("trans", 0)), 4)
    return [solve] if isinstance(eqn.inputs[3], Literal) else [_singular(ctx, info), solve]  # lu_solve's: no check


@emits(fa.getri_at_p)
def _getri_at_emit(ctx, eqn, ins, outs):
    (_, lu, piv, info), (x,) = ins, outs
    return [_singular(ctx, info), _getri(ctx, eqn, lu, piv, x, 1)]


@emits(fa.posv_p)
def _posv_emit(ctx, eqn, ins, outs):
    (_, l, b), (x,) = ins, outs
    return _potrs(ctx, eqn, l, b, x, 2, 1 in ctx.fortran)


def _diagonal(x):
    return s.call("np.diagonal", x, s.number(0), s.number(-2), s.number(-1))


def _lu_logabsdet_emit(ctx, eqn, ins, outs):
    """sum log |U_ii|, every matrix of a batch at once."""
    return s.call("np.sum", s.call("np.log", s.call("np.abs", _diagonal(ins[1]))), axis=s.number(-1))


def _po_logdet_emit(ctx, eqn, ins, outs):
    """2 sum log L_ii (real: potrf leaves a real diagonal)."""
    return s.binop(s.number(2.0), "*", s.call("np.sum", s.call("np.log", s.attribute(_diagonal(ins[1]), "real")),
                                              axis=s.number(-1)))


# LAPACK's solutions and inverses are its own column-major arrays
for _p in (fa.getrs_p, fa.getri_p, fa.potrs_p, fa.gesv_p, fa.getri_at_p, fa.posv_p):
    FORTRAN[_p] = layout.results(0)

def at_factor(ctx, eqn, ins, outs, emitters):
    """``po_inv(a, l)`` printed as ``potri(l)`` (``emitters``: the backend's), its operand positions
    (layout, buffers to reuse) shifted past ``a``."""
    from pullback.ir.core import Eqn, Params
    from pullback.primitives.linalg import factorizations as la

    inner = Eqn(la.potri_p, (eqn.inputs[1],), eqn.outputs, Params(), eqn.source)
    saved = ctx.fortran, ctx.reusable
    ctx.fortran = frozenset(k - 1 for k in ctx.fortran if k)
    ctx.reusable = frozenset(k - 1 for k in ctx.reusable if k)
    try:
        return emitters[la.potri_p](ctx, inner, ins[1:], outs)
    finally:
        ctx.fortran, ctx.reusable = saved


EMITTERS[fa.po_inv_p] = lambda ctx, eqn, ins, outs: at_factor(ctx, eqn, ins, outs, EMITTERS)
FORTRAN[fa.po_inv_p] = layout.same_as(1)
EMITTERS[fa.lu_logabsdet_p] = _lu_logabsdet_emit
EMITTERS[fa.po_logdet_p] = _po_logdet_emit
