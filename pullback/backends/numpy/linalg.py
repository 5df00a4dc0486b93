"""Linear-algebra primitives printed as direct SciPy LAPACK/BLAS calls.

LAPACK is column-major and NumPy arrays row-major: the F-ordered view ``A.T`` of a
C-ordered ``A`` *is* A^T in LAPACK's eyes, so calls take transposed views and flip
``lower`` and the side instead of copying. Leading batch axes become a loop.
Failures (LAPACK ``info`` > 0, a zero pivot) raise ``np.linalg.LinAlgError`` naming
the operation and the user's line; pullback re-raises it as ``pullback.LinAlgError``.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import libcst.helpers
import numpy as np
import scipy.linalg

from pullback.backends import layout
from pullback.backends import syntax as s
from pullback.backends.numpy.backend import EMITTERS, FORTRAN, ONE_BLAS_MIN_WORK, OPTIONAL_RESULTS, PREPARE, Context
from pullback.backends.syntax import Expr
from pullback.ir.core import Eqn, Primitive
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import rank_update as rk

PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d", np.dtype(np.complex64): "c",
          np.dtype(np.complex128): "z"}


def lapack(ctx: Context, name: str, dtype) -> Expr:
    """``scipy.linalg.lapack.dpotrf`` for ``name='potrf'`` and float64."""
    ctx.use("scipy.linalg")
    return s.dotted(f"scipy.linalg.lapack.{PREFIX[np.dtype(dtype)]}{name}")


def blas(ctx: Context, name: str, dtype) -> Expr:
    ctx.use("scipy.linalg")
    return s.dotted(f"scipy.linalg.blas.{PREFIX[np.dtype(dtype)]}{name}")


def raise_if(test: Expr, ctx: Context, message: str, *values: Expr) -> cst.If:
    """``if test: raise np.linalg.LinAlgError(f"...")``, with a ``{}`` in ``message`` per value; the message is ours."""
    where = f" (at {ctx.where})" if ctx.where else ""
    exc = cst.Raise(exc=s.call("np.linalg.LinAlgError", s.message(message, *values, suffix=where)))
    return cst.If(test=test, body=cst.IndentedBlock([s.statement(exc)]))


def assign(targets, value: Expr) -> cst.SimpleStatementLine:
    return s.assign(targets, value)


def kw(**kwargs) -> dict[str, Expr]:
    return {k: s.number(v) for k, v in kwargs.items()}


def overwrite(ctx: Context, position: int, flag: str = "overwrite_a") -> dict[str, Expr]:
    """``overwrite_a=1`` when the memory plan lets this call factor the operand in place."""
    return {flag: s.number(1)} if position in ctx.reusable else {}


# A matrix emitter prints one 2-d instance: (ctx, eqn, inputs, output names) -> statements.
MatrixEmitter = Callable[[Context, Eqn, list[Expr], list[cst.Name]], list[cst.BaseStatement]]


def empty_results(eqn: Eqn, outs: list[cst.Name]) -> list[cst.BaseStatement]:
    """The results of an operator on empty matrices, as NumPy gives them, without calling
    LAPACK (which rejects a zero leading dimension, printing on stdout): zeros (the only
    entries there are: A A^T of an m x 0 matrix, LAPACK info), and the identity permutation."""
    stmts = []
    for o, v in zip(outs, eqn.outputs):
        if eqn.prim is la.getrf_p and o is outs[2]:
            value = s.call("np.arange", s.number(v.shape[-1]), dtype=s.dtype(v.dtype))
            if v.type.ndim > 1:
                value = s.method(s.call("np.broadcast_to", value, s.ints(v.shape)), "copy")
        else:
            value = s.call("np.zeros", s.ints(v.shape), dtype=s.dtype(v.dtype))
        stmts.append(assign([o], value))
    return stmts


def batched(emit: MatrixEmitter, empty: bool = True) -> Callable:
    """Loop a matrix emitter over leading batch axes: outputs are allocated, each
    iteration's results stored into them. Empty matrices get ``empty_results`` unless
    ``empty`` is False (kernels that handle them)."""

    def emitter(ctx: Context, eqn: Eqn, ins: list[Expr], outs: list[cst.Name]):
        if empty and any(0 in x.shape[-2:] for x in eqn.inputs if x.type.ndim >= 2):
            return empty_results(eqn, outs)
        nb = eqn.inputs[0].type.ndim - 2
        if nb == 0:
            return emit(ctx, eqn, ins, outs)
        batch = eqn.inputs[0].shape[:nb]
        k = s.name(ctx.fresh("k"))
        item_ins = [s.subscript(x, [k]) for x in ins]
        item_outs = [s.name(ctx.fresh(f"{o.value}_k")) for o in outs]
        body = emit(ctx, eqn, item_ins, item_outs)
        kept = [j for j in range(len(outs)) if j not in ctx.unused or j not in OPTIONAL_RESULTS.get(eqn.prim, ())]
        body += [s.statement(cst.Assign([cst.AssignTarget(s.subscript(outs[j], [k]))], item_outs[j])) for j in kept]
        alloc = [assign([outs[j]], s.call("np.empty", s.ints(v.shape), dtype=s.dtype(v.dtype)))
                 for j, v in ((j, eqn.outputs[j]) for j in kept)]
        loop = cst.For(target=k, iter=s.call("np.ndindex", *map(s.number, batch)), body=cst.IndentedBlock(body))
        return [*alloc, loop]

    return emitter


LINALG: set = set()  # the primitives printed as SciPy LAPACK/BLAS calls


def uses_numpy(eqn) -> bool:
    """Real eigh and SVD print as NumPy's own np.linalg calls, on NumPy's BLAS pool."""
    return eqn.prim in (la.syevd_p, la.gesvd_p) and eqn.inputs[0].dtype.kind != "c"


def emits(prim, empty: bool = True):
    def register(fn: MatrixEmitter):
        EMITTERS[prim] = batched(fn, empty)
        LINALG.add(prim)
        return fn

    return register


@emits(la.potrf_p)
def _potrf(ctx, eqn, ins, outs):
    """LAPACK factors A^T (the F-view A.T) as U^H U; L = U^T is the C-view of that factor. An
    F-ordered A is factored as itself, A = L L^H, and L is LAPACK's (F-ordered) array."""
    (a,), (l, info) = ins, outs
    fortran = 0 in ctx.fortran
    u = l if fortran else s.name(ctx.fresh("u"))
    operand, flags = (a, kw(lower=1)) if fortran else (s.attribute(a, "T"), {})
    stmts = [assign([u, info], s.call(lapack(ctx, "potrf", eqn.inputs[0].dtype), operand, **flags,
                                      **overwrite(ctx, 0)))]
    if eqn.params["check"]:
        stmts.append(raise_if(info, ctx, "cholesky: the leading minor of order {} is not positive definite "
                                         "(LAPACK potrf info={})", info, info))
    return stmts if fortran else [*stmts, assign([l], s.attribute(u, "T"))]


FORTRAN[la.potrf_p] = layout.same_as(0)


def _triangular(ctx, eqn, ins, outs, name: str):
    """op(A) X = B (or X op(A) = B). A C-ordered B is solved as the transposed system
    X^T op(A)^T = B^T on its F-view B.T (the other side), giving the F-ordered X^T, whose ``.T`` is
    X; an F-ordered B as itself, giving an F-ordered X. A goes in as the F-ordered array it is
    held in, A itself or the view A.T of a C-ordered one (then the other triangle); BLAS's
    ``trans_a`` flag makes up for the transposition: no copy of either. The scale is BLAS's alpha
    (alpha X^T = (alpha X)^T)."""
    (a, b), (x,) = ins, outs
    p = eqn.params
    column = 1 in ctx.fortran  # B is F-ordered: the system as it stands
    a_itself = 0 in ctx.fortran
    trans = int(p["trans"])
    if a_itself == column or trans == 0 or trans == 1 or eqn.inputs[0].dtype.kind != "c":
        trans = trans if a_itself == column else 1 - min(trans, 1)  # A^H = A^T, real; (A^T)^T = A
    else:  # a conjugate transpose (complex) of the transposed array: BLAS has no op for conj(A)
        a_itself = column
    matrix = a if a_itself else s.attribute(a, "T")
    rhs = b if column else s.attribute(b, "T")
    call = s.call(blas(ctx, name, eqn.inputs[0].dtype), s.number(float(p.get("alpha", 1.0))), matrix, rhs,
                  **kw(side=int(p["left"] != column), lower=int(p["lower"] == a_itself), trans_a=trans,
                       diag=int(p["unit_diagonal"])), **overwrite(ctx, 1, "overwrite_b"))
    return [*singular_check(ctx, eqn, a), assign([x], call if column else s.attribute(call, "T"))]


def singular_check(ctx, eqn: Eqn, a: Expr) -> list[cst.If]:
    """A checked, non-unit triangular solve raises on a zero diagonal entry (1-based in the message)."""
    if not eqn.params.get("check") or eqn.params["unit_diagonal"]:
        return []
    diagonal = s.call("np.diagonal", a)
    position = s.binop(s.call("int", s.call("np.argmin", s.call("np.abs", diagonal))), "+", s.number(1))
    return [raise_if(cst.UnaryOperation(cst.Not(), s.method(diagonal, "all")), ctx,
                     "solve_triangular: singular matrix: diagonal element {} is zero", position)]


# A triangular solve of a vector, made while printing (``vector_solves``): trsm's params, a vector b.
trsv_p = Primitive("trsv", registered=False)


@emits(trsv_p)
def _trsv(ctx, eqn, ins, outs):
    """op(A) x = b for a vector b, one BLAS trsv on A as LAPACK holds it (the F-view A.T of a C-ordered A,
    the other triangle and the transposed op)."""
    (a, b), (x,) = ins, outs
    p = eqn.params
    trans, lower = min(int(p["trans"]), 1), bool(p["lower"])  # (real: A^H = A^T)
    if 0 not in ctx.fortran:
        a, trans, lower = s.attribute(a, "T"), 1 - trans, not lower
    call = s.call(blas(ctx, "trsv", eqn.inputs[0].dtype), a, b, **kw(lower=int(lower), trans=trans,
                                                                     diag=int(p["unit_diagonal"])))
    return [*singular_check(ctx, eqn, ins[0]), assign([x], call)]


def vector_solves(program, ctx: Context):
    """``program`` with each chain of left triangular solves of a vector made a column (``y.reshape(n, 1)``,
    trsm, ``.reshape(n)``) solved as the vector itself, one ``trsv`` line per solve: the columns whose
    every reader is such a solve or the reshape back to a vector go."""
    from pullback.ad.substitute import substitute
    from pullback.ir.core import Program, Var
    from pullback.ir.types import ArrayType
    from pullback.primitives import structural as st

    def column(v) -> bool:
        return (isinstance(v, Var) and v.type.ndim == 2 and v.shape[1] == 1 and v.shape[0] > 1
                and v.dtype.kind == "f")

    def solve(e) -> bool:
        return e.prim is la.trsm_p and e.params["left"] and e.params.get("alpha", 1.0) == 1.0 and e.inputs[
            0].type.ndim == 2

    returned = {id(a) for a in program.outputs}
    defs: dict[int, Eqn] = {}  # the columns that may go -> the equation making each
    for e in program.eqns:
        if e.prim is not st.reshape_p and e.prim is not la.trsm_p:  # (the trigger: most equations are neither)
            continue
        out = e.outputs[0]
        if column(out) and id(out) not in returned and (
                (e.prim is st.reshape_p and e.inputs[0].type.ndim == 1) or solve(e)):
            defs[id(out)] = e
    if not any(solve(d) for d in defs.values()):  # (no column solved: nothing to change)
        return program
    cols = set(defs)
    readers: dict[int, list[tuple[Eqn, int]]] = {}
    for e in program.eqns:
        for k, a in enumerate(e.inputs):
            if type(a) is Var and id(a) in cols:
                readers.setdefault(id(a), []).append((e, k))
    changed = True
    while changed:
        changed = False
        for c in list(cols):
            d = defs[c]
            ok = not solve(d) or id(d.inputs[1]) in cols
            ok = ok and all((r.prim is st.reshape_p and r.outputs[0].type.ndim == 1) or (
                solve(r) and k == 1 and id(r.outputs[0]) in cols) for r, k in readers.get(c, ()))
            if not ok:
                cols.discard(c)
                changed = True
    if not any(solve(defs[c]) for c in cols):
        return program
    vector: dict[int, Var] = {}
    eqns, replace = [], {}
    for e in program.eqns:
        out = e.outputs[0] if len(e.outputs) == 1 else None
        if out is not None and id(out) in cols:
            if e.prim is st.reshape_p:
                vector[id(out)] = e.inputs[0]
                continue
            named = [r.outputs[0].hint for r, _ in readers.get(id(out), ()) if r.prim is st.reshape_p]
            w = Var(ArrayType((out.shape[0],), out.dtype), next((h for h in named if h), out.hint))
            vector[id(out)] = w
            eqns.append(Eqn(trsv_p, (e.inputs[0], vector[id(e.inputs[1])]), (w,), e.params, e.source))
            continue
        if e.prim is st.reshape_p and isinstance(e.inputs[0], Var) and id(e.inputs[0]) in cols:
            replace[id(e.outputs[0])] = vector[id(e.inputs[0])]
            continue
        eqns.append(e)
    return substitute(Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals,
                              program.name), replace)


PREPARE.append(vector_solves)


@emits(la.trsm_p)
def _trsm(ctx, eqn, ins, outs):
    return _triangular(ctx, eqn, ins, outs, "trsm")


@emits(la.trmm_p)
def _trmm(ctx, eqn, ins, outs):
    return _triangular(ctx, eqn, ins, outs, "trmm")


FORTRAN[la.trsm_p] = FORTRAN[la.trmm_p] = layout.same_as(1)


@emits(la.syrk_p)
def _syrk(ctx, eqn, ins, outs):
    """NumPy hands ``a @ a.T`` to BLAS syrk and mirrors the triangle. Where the program
    calls SciPy's LAPACK (one BLAS, see numpy_backend), real ones call SciPy's syrk on the
    F-view (a a^T = M^T M for M = a.T) and mirror its upper triangle."""
    (a,), (c,) = ins, outs
    x = eqn.inputs[0]
    trans = eqn.params["trans"]
    if x.dtype.kind == "c":
        h = s.attribute(s.method(a, "conj"), "T")
        return [assign(outs, s.binop(h, "@", a) if trans else s.binop(a, "@", h))]
    k = x.shape[-2] if trans else x.shape[-1]
    if not (ctx.one_blas and eqn.outputs[0].type.size * k >= ONE_BLAS_MIN_WORK):
        return [assign(outs, s.binop(s.attribute(a, "T"), "@", a) if trans else s.binop(a, "@", s.attribute(a, "T")))]
    upper = s.name(ctx.fresh("upper"))
    return [
        assign([upper], s.call(blas(ctx, "syrk", x.dtype), s.number(1.0), s.attribute(a, "T"),
                               trans=s.number(0 if trans else 1))),
        assign([c], s.binop(s.call("np.triu", upper), "+", s.attribute(s.call("np.triu", upper, s.number(1)), "T"))),
    ]


# potri's triangle is mirrored block by block from this order on: the copy of a block row is all
# the temporary memory it takes, not a second n x n array
MIRROR_MIN_N = 512
MIRROR_BLOCK = 256


def _mirror_by_blocks(ctx, b: cst.Name, n: int, complex_: bool) -> cst.For:
    """``for j ...: b[j:j+k, j:j+k] += triu(b[j:j+k, j:j+k], 1).T; b[j+k:, j:j+k] = b[j:j+k, j+k:].T``."""
    j = s.name(ctx.fresh("j"))
    end = s.binop(j, "+", s.number(MIRROR_BLOCK))
    block, rows = cst.Slice(lower=j, upper=end), cst.Slice(lower=end, upper=None)
    below = rows
    diagonal = s.subscript(b, [block, block])
    upper = s.attribute(s.call("np.triu", diagonal, s.number(1)), "T")
    right = s.attribute(s.subscript(b, [block, rows]), "T")
    body = [s.statement(cst.AugAssign(diagonal, cst.AddAssign(), s.method(upper, "conj") if complex_ else upper)),
            s.statement(cst.Assign([cst.AssignTarget(s.subscript(b, [below, block]))],
                                   s.method(right, "conj") if complex_ else right))]
    return cst.For(target=j, iter=s.call("range", s.number(0), s.number(n), s.number(MIRROR_BLOCK)),
                   body=cst.IndentedBlock(body))


@emits(la.potri_p)
def _potri(ctx, eqn, ins, outs):
    """potri on the F-view L.T = U leaves triu((U^H U)^{-1}) in an F-ordered c; the strict upper
    part mirrors in place, and the result is c.T: the conjugate of a Hermitian c, C-ordered. An
    F-ordered L goes in as itself: c holds tril((L L^H)^{-1}), mirrored through its view c.T,
    and is the (F-ordered) result."""
    (l,), (b,) = ins, outs
    fortran = 0 in ctx.fortran
    c, info = s.name(ctx.fresh("c")), s.name(ctx.fresh("info"))
    complex_ = eqn.inputs[0].dtype.kind == "c"
    n = eqn.outputs[0].shape[-1]
    operand, flags = (l, kw(lower=1)) if fortran else (s.attribute(l, "T"), {})
    stmts = [
        assign([c, info], s.call(lapack(ctx, "potri", eqn.inputs[0].dtype), operand, **flags,
                                 **overwrite(ctx, 0, "overwrite_c"))),
        raise_if(info, ctx, "cholesky_inverse: the factor is singular (LAPACK potri info={})", info),
    ]
    upper = c  # the array whose strict upper triangle is computed and its lower one zero
    if fortran:
        upper = s.name(ctx.fresh("ct"))
        stmts.append(assign([upper], s.attribute(c, "T")))
    mirror = s.attribute(s.call("np.triu", upper, s.number(1)), "T")
    # in place: one strict triangle's copy, not a second n x n result (the other triangle is zero)
    stmts.append(s.statement(cst.AugAssign(upper, cst.AddAssign(), s.method(mirror, "conj") if complex_ else mirror))
                 if n < MIRROR_MIN_N else _mirror_by_blocks(ctx, upper, n, complex_))
    return [*stmts, assign([b], c if fortran else s.attribute(c, "T"))]


FORTRAN[la.potri_p] = layout.same_as(0)


@emits(rk.ger_p)
def _ger(ctx, eqn, ins, outs):
    """A + alpha x y^T as ger on the F-view A.T (A^T + alpha y x^T), into A's buffer when A is dead; on
    an F-ordered A, as itself (an F-ordered result)."""
    a, x, y = ins
    dtype = eqn.inputs[0].dtype
    name = "geru" if dtype.kind == "c" else "ger"
    alpha = s.number(float(eqn.params.get("alpha", 1.0)))
    if 0 in ctx.fortran:
        return s.call(blas(ctx, name, dtype), alpha, x, y, a=a, **overwrite(ctx, 0, "overwrite_a"))
    return s.attribute(s.call(blas(ctx, name, dtype), alpha, y, x, a=s.attribute(a, "T"),
                              **overwrite(ctx, 0, "overwrite_a")), "T")


FORTRAN[rk.ger_p] = layout.same_as(0)


def _qr_workspace(dtype, m: int, n: int) -> dict[str, Expr]:
    """LAPACK's optimal workspace, asked once at print time: SciPy's wrappers default to the
    minimum, which rules out the blocked algorithm."""
    query = getattr(scipy.linalg.lapack, f"{PREFIX[np.dtype(dtype)]}geqrf_lwork")
    work, info = query(m, n)
    return {"lwork": s.number(int(np.real(work)))} if info == 0 else {}


def _orthonormal(ctx, dtype) -> Expr:
    return lapack(ctx, "ungqr" if np.dtype(dtype).kind == "c" else "orgqr", dtype)


@emits(la.gelqf_p)
def _gelqf(ctx, eqn, ins, outs):
    """LQ of A is the transposed QR of A^T, which the F-view A.T presents to LAPACK."""
    (a,), (l, q) = ins, outs
    dt, (m, n) = eqn.inputs[0].dtype, eqn.inputs[0].shape[-2:]
    qr, tau, work, info = (s.name(ctx.fresh(h)) for h in ("qr", "tau", "work", "info"))
    return [
        assign([qr, tau, work, info], s.call(lapack(ctx, "geqrf", dt), s.attribute(a, "T"),
                                             **_qr_workspace(dt, n, m), **overwrite(ctx, 0))),
        assign([l], s.attribute(s.call("np.triu", s.subscript(qr, [s.slice_(None, m, None)])), "T")),
        assign([q, work, info], s.call(_orthonormal(ctx, dt), qr, tau, **_qr_workspace(dt, n, m),
                                       overwrite_a=s.number(1))),
        s.statement(cst.Del(s.tuple_([qr, tau, work, info], parens=False))),
        assign([q], s.attribute(q, "T")),
    ]


@emits(la.geqrf_p)
def _geqrf(ctx, eqn, ins, outs):
    """geqrf, then orgqr/ungqr on the first k = min(m, n) reflectors (all columns of a tall
    A; the leading m x m block of a wide one), in place: their array is ours, and dead once R
    is copied out of it."""
    (a,), (q, r) = ins, outs
    dt, (m, n) = eqn.inputs[0].dtype, eqn.inputs[0].shape[-2:]
    k = min(m, n)
    qr, tau, work, info = (s.name(ctx.fresh(h)) for h in ("qr", "tau", "work", "info"))
    reflectors = qr if k == n else s.subscript(qr, [s.slice_(None, None, None), s.slice_(None, k, None)])
    return [
        assign([qr, tau, work, info], s.call(lapack(ctx, "geqrf", dt), a, **_qr_workspace(dt, m, n),
                                             **overwrite(ctx, 0))),
        assign([r], s.call("np.triu", s.subscript(qr, [s.slice_(None, k, None)]))),
        assign([q, work, info], s.call(_orthonormal(ctx, dt), reflectors, tau, **_qr_workspace(dt, m, k),
                                       overwrite_a=s.number(1))),
        s.statement(cst.Del(s.tuple_([qr, tau, work, info], parens=False))),
    ]


FORTRAN[la.geqrf_p] = layout.results(0)


def _fix_phase(ctx, vectors: cst.Name, n: int, others: list[cst.Name], complex_: bool):
    """Make each column's largest-magnitude entry real positive (deterministic signs);
    the rows of ``others`` get the conjugate phase, so products like U S V^H are unchanged."""
    big, phase = s.name(ctx.fresh("big")), s.name(ctx.fresh("phase"))
    pivot = s.subscript(vectors, [s.call("np.argmax", s.call("np.abs", vectors), axis=s.number(0)),
                                  s.call("np.arange", s.number(n))])
    stmts = [assign([big], pivot)]
    if complex_:
        stmts.append(assign([phase], s.binop(s.call("np.abs", big), "/", big)))
    else:
        stmts.append(assign([phase], s.call("np.sign", big)))
    stmts.append(assign([vectors], s.binop(vectors, "*", phase)))
    row_phase = s.subscript(s.call("np.conj", phase) if complex_ else phase, [s.slice_(None, None, None),
                                                                              cst.Name("None")])
    for other in others:
        stmts.append(assign([other], s.binop(row_phase, "*", other)))
    return stmts


@emits(la.syevd_p)
def _syevd(ctx, eqn, ins, outs):
    """syevd/heevd of the F-view A.T (A^T = A; conj(A) for Hermitian A, whence conj(V))."""
    (a,), (w, v) = ins, outs
    dt, n = eqn.inputs[0].dtype, eqn.inputs[0].shape[-1]
    complex_ = dt.kind == "c"
    if not complex_:  # NumPy's own call, so the eigenvectors' signs are NumPy's (see _gesvd)
        upper = {} if eqn.params["lower"] else {"UPLO": cst.SimpleString('"U"')}
        return [assign([w, v], s.call("np.linalg.eigh", a, **upper))]
    info = s.name(ctx.fresh("info"))
    stmts = [
        assign([w, v, info], s.call(lapack(ctx, "heevd" if complex_ else "syevd", dt), s.attribute(a, "T"),
                                    **overwrite(ctx, 0))),
        raise_if(info, ctx, "eigh: the eigenvalue algorithm did not converge (LAPACK syevd info={})", info),
    ]
    if complex_:
        stmts.append(assign([v], s.call("np.conj", v)))
    return stmts + _fix_phase(ctx, v, n, [], complex_)


@emits(la.gesvd_p)
def _gesvd(ctx, eqn, ins, outs):
    """SVD of the F-view A.T = W S Z^H gives A = conj(Z) S W^T: U = vt.T, V^H = w.T
    (gesdd, divide and conquer, as NumPy uses)."""
    (a,), (u, sv, vh) = ins, outs
    dt = eqn.inputs[0].dtype
    k = min(eqn.inputs[0].shape[-2:])
    complex_ = dt.kind == "c"
    if not complex_:
        # Real singular and eigen-vectors are NumPy's own, signs included: the derivative needs no
        # convention there (LAPACK's sign choice is locally constant), and a user who called
        # np.linalg.svd gets exactly NumPy's answer. Complex ones get pullback's phase (below).
        return [assign([u, sv, vh], s.call("np.linalg.svd", a, full_matrices=cst.Name("False")))]
    w, z, info = s.name(ctx.fresh("w")), s.name(ctx.fresh("vt")), s.name(ctx.fresh("info"))
    stmts = [
        assign([w, sv, z, info], s.call(lapack(ctx, "gesdd", dt), s.attribute(a, "T"),
                                        full_matrices=s.number(0), **overwrite(ctx, 0))),
        raise_if(s.binop(info, ">", s.number(0)), ctx, "svd: the algorithm did not converge (LAPACK gesdd info={})",
                 info),
        raise_if(s.binop(info, "<", s.number(0)), ctx, "svd: LAPACK gesdd rejected its argument {} (info={})",
                 s.call("abs", info), info),
        assign([u], s.attribute(z, "T")),
        assign([vh], s.attribute(w, "T")),
    ]
    return stmts + _fix_phase(ctx, u, k, [vh], complex_)


@emits(la.getrf_p)
def _getrf(ctx, eqn, ins, outs):
    """getrf on the C array (LAPACK factors a column-major copy, as it must work in place
    anyway); the row permutation, where something reads it, follows from applying the pivots'
    swaps in order."""
    (a,), (lu, piv, perm, info) = ins, outs
    m = eqn.inputs[0].shape[-2]
    stmts = [assign([lu, piv, info], s.call(lapack(ctx, "getrf", eqn.inputs[0].dtype), a, **overwrite(ctx, 0)))]
    if eqn.params["check"]:
        stmts.append(raise_if(s.binop(info, ">", s.number(0)), ctx,
                              "singular matrix: U[{}, {}] is exactly zero (LAPACK getrf info={})",
                              s.binop(info, "-", s.number(1)), s.binop(info, "-", s.number(1)), info))
    if 2 in ctx.unused:
        return stmts
    i, j = s.name(ctx.fresh("i")), s.name(ctx.fresh("j"))
    swap = cst.Assign([cst.AssignTarget(s.tuple_([s.subscript(perm, [i]), s.subscript(perm, [j])], parens=False))],
                      s.tuple_([s.subscript(perm, [j]), s.subscript(perm, [i])], parens=False))
    return [
        *stmts,
        assign([perm], s.call("np.arange", s.number(m), dtype=s.dtype(np.int32))),
        cst.For(target=s.tuple_([i, j], parens=False), iter=s.call("enumerate", piv),
                body=cst.IndentedBlock([s.statement(swap)])),
    ]


FORTRAN[la.getrf_p] = layout.results(0)
OPTIONAL_RESULTS[la.getrf_p] = frozenset({2})  # the permutation


@emits(la.permute_p, empty=False)
def _permute(ctx, eqn, ins, outs):
    x, perm = ins
    return [assign(outs, s.subscript(x, [perm]))]


@emits(la.unpermute_p, empty=False)
def _unpermute(ctx, eqn, ins, outs):
    (x, perm), (out,) = ins, outs
    return [assign([out], s.call("np.empty_like", x)),
            s.statement(cst.Assign([cst.AssignTarget(s.subscript(out, [perm]))], x))]


# Complete pivoting, for any shape: a kernel of pullback's own, written out in the generated
# code (LAPACK's getc2 is square-only and replaces tiny pivots, changing the factorisation).
_FULL_PIVOT = """
{lu} = np.array({a}, dtype={dtype})
{rperm} = np.arange({m}, dtype=np.int32)
{cperm} = np.arange({n}, dtype=np.int32)
{sign} = np.int32(1)
{info} = np.int32(0)
for {k} in range({K}):
    {i}, {j} = divmod(int(np.argmax(np.abs({lu}[{k}:, {k}:]))), {n} - {k})
    {i}, {j} = {i} + {k}, {j} + {k}
    if {i} != {k}:
        {lu}[[{k}, {i}]] = {lu}[[{i}, {k}]]
        {rperm}[[{k}, {i}]] = {rperm}[[{i}, {k}]]
        {sign} = -{sign}
    if {j} != {k}:
        {lu}[:, [{k}, {j}]] = {lu}[:, [{j}, {k}]]
        {cperm}[[{k}, {j}]] = {cperm}[[{j}, {k}]]
        {sign} = -{sign}
    if {lu}[{k}, {k}] == 0:
        {info} = np.int32({k} + 1)
        break
    {lu}[{k} + 1:, {k}] /= {lu}[{k}, {k}]
    {lu}[{k} + 1:, {k} + 1:] -= np.outer({lu}[{k} + 1:, {k}], {lu}[{k}, {k} + 1:])
"""


@emits(la.getc2_p, empty=False)
def _getc2(ctx, eqn, ins, outs):
    (a,), (lu, rperm, cperm, sign, info) = ins, outs
    m, n = eqn.inputs[0].shape[-2:]
    names = {h: s.name(ctx.fresh(h)) for h in ("k", "i", "j")}
    module = cst.helpers.parse_template_module(
        _FULL_PIVOT, a=a, lu=lu, rperm=rperm, cperm=cperm, sign=sign, info=info, m=s.number(m), n=s.number(n),
        K=s.number(min(m, n)), dtype=s.dtype(eqn.inputs[0].dtype), **names)
    return list(module.body)


# --- pullback.primitives.linalg.matrix_functions ------------------------------------------------------------

from pullback.backends.codegen import OUTPUT_HINTS, TEMP_HINTS  # noqa: E402
from pullback.backends.numpy import backend as numpy_backend  # noqa: E402
from pullback.primitives.linalg import matrix_functions as lx  # noqa: E402

OUTPUT_HINTS[lx.geev_p] = ("w", "v")
TEMP_HINTS[numpy_backend.scaled_product_p] = "dot"  # a product, its scaling in alpha
TEMP_HINTS.update({lx.expm_frechet_p: "frechet", lx.trsyl_p: "sylvester", lx.sqrtm_p: "root",
                   lx.pivots_to_permutation_p: "perm"})


def _det(ctx, eqn, ins, outs):
    """det(P) prod U_ii from getrf's factors (as NumPy's det computes it), every matrix of a batch at
    once; 1 for 0 x 0."""
    (_, lu, piv), (out,) = ins, outs
    n = eqn.inputs[0].shape[-1]
    if eqn.inputs[0].type.ndim == 2:  # one matrix: the sign as the expert takes it, a branch on a count
        swapped = s.call("np.count_nonzero", s.binop(piv, "!=", s.call("np.arange", s.number(n), dtype=s.dtype(
            eqn.inputs[2].dtype))))
        return [assign([out], s.call("np.prod", s.call("np.diagonal", lu))),
                cst.If(test=s.binop(swapped, "%", s.number(2)),
                       body=cst.IndentedBlock([assign([out], cst.UnaryOperation(cst.Minus(), out))]))]
    swaps = s.name(ctx.fresh("swaps"))
    flipped = s.binop(s.binop(swaps, "%", s.number(2)), "==", s.number(1))
    return [
        assign([swaps], s.call("np.sum", s.binop(piv, "!=", s.call("np.arange", s.number(n), dtype=s.dtype(
            eqn.inputs[2].dtype))), axis=s.number(-1))),
        assign([out], s.call("np.prod", s.call("np.diagonal", lu, s.number(0), s.number(-2), s.number(-1)),
                             axis=s.number(-1))),
        assign([out], s.call("np.where", flipped, cst.UnaryOperation(cst.Minus(), out), out)),
    ]


EMITTERS[lx.det_p] = _det

_PERMUTATION = """
{perm} = np.empty({shape}, dtype=np.int32)
for {k} in np.ndindex({batch}):
    {p} = np.arange({n}, dtype=np.int32)
    for {i}, {j} in enumerate({piv}[{k}]):
        {p}[{i}], {p}[{j}] = {p}[{j}], {p}[{i}]
    {perm}[{k}] = {p}
"""


def _pivots_to_permutation(ctx, eqn, ins, outs):
    """The pivots' swaps applied in order to 0..n-1 (one matrix's as getrf prints it, a stack's per matrix)."""
    (piv,), (perm,) = ins, outs
    shape = eqn.inputs[0].shape
    if len(shape) == 1:
        i, j = s.name(ctx.fresh("i")), s.name(ctx.fresh("j"))
        swap = cst.Assign([cst.AssignTarget(s.tuple_([s.subscript(perm, [i]), s.subscript(perm, [j])], parens=False))],
                          s.tuple_([s.subscript(perm, [j]), s.subscript(perm, [i])], parens=False))
        return [assign([perm], s.call("np.arange", s.number(shape[0]), dtype=s.dtype(np.int32))),
                cst.For(target=s.tuple_([i, j], parens=False), iter=s.call("enumerate", piv),
                        body=cst.IndentedBlock([s.statement(swap)]))]
    names = {h: s.name(ctx.fresh(h)) for h in ("k", "p", "i", "j")}
    module = cst.helpers.parse_template_module(_PERMUTATION, perm=perm, piv=piv, shape=s.ints(shape),
                                               batch=s.ints(shape[:-1]), n=s.number(shape[-1]), **names)
    return list(module.body)


EMITTERS[lx.pivots_to_permutation_p] = _pivots_to_permutation
EMITTERS[lx.pinv_p] = lambda ctx, eqn, ins, outs: s.call("np.linalg.pinv", *ins, rcond=s.number(eqn.params["rcond"]))


def _geev_workspace(dtype, n: int) -> dict[str, Expr]:
    work, info = getattr(scipy.linalg.lapack, f"{PREFIX[np.dtype(dtype)]}geev_lwork")(n)
    return {"lwork": s.number(int(np.real(work)))} if info == 0 else {}


@emits(lx.geev_p)
def _geev(ctx, eqn, ins, outs):
    """geev of A (SciPy hands LAPACK a column-major copy: geev destroys its input anyway),
    right vectors only. Real A: a conjugate pair w_j, w_{j+1} = a +- bi (Im > 0 first) has
    the vectors vr_j +- i vr_{j+1}."""
    (a,), (w, v) = ins, outs
    dt, n = eqn.inputs[0].dtype, eqn.inputs[0].shape[-1]
    info, vl = s.name(ctx.fresh("info")), s.name(ctx.fresh("vl"))
    opts = dict(compute_vl=s.number(0), **_geev_workspace(dt, n))
    check = raise_if(s.binop(info, ">", s.number(0)), ctx, "eig: the QR algorithm did not converge "
                     "(LAPACK geev info={})", info)
    if dt.kind == "c":
        stmts = [assign([w, vl, v, info], s.call(lapack(ctx, "geev", dt), a, **opts)), check]
    else:
        wr, wi, vr, pair = (s.name(ctx.fresh(h)) for h in ("wr", "wi", "vr", "pair"))
        every = s.slice_(None, None, None)
        after = s.binop(pair, "+", s.number(1))
        stmts = [
            assign([wr, wi, vl, vr, info], s.call(lapack(ctx, "geev", dt), a, **opts)),
            check,
            assign([w], s.binop(wr, "+", s.binop(cst.Imaginary("1j"), "*", wi))),
            assign([v], s.method(vr, "astype", s.dtype(eqn.outputs[1].dtype))),
            assign([pair], s.call("np.flatnonzero", s.binop(wi, ">", s.number(0)))),
            s.statement(cst.AugAssign(s.subscript(v, [every, pair]), cst.AddAssign(),
                                      s.binop(cst.Imaginary("1j"), "*", s.subscript(vr, [every, after])))),
            s.statement(cst.Assign([cst.AssignTarget(s.subscript(v, [every, after]))],
                                   s.call("np.conj", s.subscript(v, [every, pair])))),
        ]
    return stmts + _fix_phase(ctx, v, n, [], True)


def _scipy(ctx: Context, name: str) -> Expr:
    ctx.use("scipy.linalg")
    return s.dotted(f"scipy.linalg.{name}")


@emits(lx.expm_p)
def _expm(ctx, eqn, ins, outs):
    """SciPy's expm (Al-Mohy & Higham's scaling and squaring)."""
    return [assign(outs, s.call(_scipy(ctx, "expm"), *ins))]


@emits(lx.expm_frechet_p)
def _expm_frechet(ctx, eqn, ins, outs):
    """SciPy's expm_frechet: L(A, E) alone, at about three times the cost of expm(A)."""
    return [assign(outs, s.call(_scipy(ctx, "expm_frechet"), *ins, compute_expm=s.number(False),
                                check_finite=s.number(False)))]


@emits(lx.sqrtm_p)
def _sqrtm(ctx, eqn, ins, outs):
    """SciPy's sqrtm (Schur form, then the triangular recurrence). A real A with negative real
    eigenvalues has a complex principal root: that is an error, as the program's types are real."""
    stmts = [assign(outs, s.call(_scipy(ctx, "sqrtm"), *ins))]
    if eqn.inputs[0].dtype.kind == "f":
        stmts.append(raise_if(s.call("np.iscomplexobj", outs[0]), ctx,
                              "sqrtm: the matrix has negative real eigenvalues, so its principal square root "
                              "is complex; pass a complex matrix"))
    return stmts


@emits(lx.trsyl_p)
def _trsyl(ctx, eqn, ins, outs):
    """SciPy's solve_sylvester: Schur forms of A and B (gees), then LAPACK trsyl."""
    return [assign(outs, s.call(_scipy(ctx, "solve_sylvester"), *ins))]

from pullback.backends.numpy import factor_solves as numpy_factored  # noqa: E402,F401  (getrs, getri, potrs)
