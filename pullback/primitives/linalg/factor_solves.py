"""Operators of a matrix given its factorisation, differentiated at the solve.

``solve``, ``inv``, ``slogdet`` and their Cholesky spellings factor A once (``getrf`` or
``potrf``, shared by every use through CSE) and then apply A^{-1}. Differentiating through the
factors (the LU notes' tangent map: four triangular solves, two triangular products and two
masks per use) costs about twice what an expert spends, who differentiates the solve itself
(Giles 2008; Seeger et al. 2018, section 3):

    x = A^{-1} b:        dx = A^{-1} (db - dA x)            A_bar = -(A^{-H} x_bar) x^H
    X = A^{-1}:          dX = -X dA X                       A_bar = -X^H X_bar X^H
    log |det A|:         d = Re tr(A^{-1} dA)               A_bar = l_bar A^{-H}

So the composites here take A itself, for its tangent, beside its factors, whose tangents they
ignore: the factors are a function of A, so the value is a function of A alone (the factors are
how it is computed, not what it means). Their JVPs call the LAPACK-level primitives below, which
are ordinary primitives with complete rules (the factor's tangent included, for second order):

- ``getrs(lu, piv, b, trans)``: op(A)^{-1} B from getrf's factors; linear in B, whose transpose is
  getrs with op(A)^H;
- ``getri(lu, piv)``: A^{-1} from getrf's factors;
- ``potrs(l, b)``: A^{-1} B from the lower Cholesky factor, A = L L^H; linear in B and self-adjoint.

Composites: ``gesv(a, lu, piv, info, b, trans)`` (op(A)^{-1} B, raising on a singular factor: info > 0;
a literal info 0 is ``lu_solve``'s, which does not check; ``trans`` is N but where the program
factorises A^T for A, ``opt.transposed_lu``),
``getri_at(a, lu, piv, info)`` (A^{-1}, raising likewise), ``lu_logabsdet(a, lu, piv)``
(log |det A|), ``posv(a, l, b)`` (A^{-1} B for Hermitian positive definite A; like ``potrf``, its
tangent sees the Hermitian part of dA), ``po_logdet(a, l)`` (log det A = 2 sum log L_ii) and
``po_inv(a, l)`` (``inv(A)`` of a matrix the program also Cholesky-factorises: A^{-1} by potri, its
tangent ``inv``'s, -X dA X for all of dA, as NumPy's ``inv`` reads all of A).
Reverse mode of each is then transposition of a getrs/potrs (or nothing) plus one rank-k product,
with getri/potri computed once in the forward pass where an inverse is the cotangent.
"""

from __future__ import annotations

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType, real_dtype
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg.factorizations import Trans

getrs_p = Primitive("getrs")
getri_p = Primitive("getri")
potrs_p = Primitive("potrs")
gesv_p = Primitive("gesv")
getri_at_p = Primitive("getri_at")
lu_logabsdet_p = Primitive("lu_logabsdet")
posv_p = Primitive("posv")
po_logdet_p = Primitive("po_logdet")
po_inv_p = Primitive("po_inv")


def _square(x, name: str):
    batch, n, _ = la._matrix(x, name, square=True)
    return batch, n


def _same(a, f, name: str) -> None:
    if a.type != f.type:
        raise ShapeError(f"{name}: the matrix {a.type} and its factor {f.type} differ")


def _pivots(piv, batch, n, name: str) -> None:
    if piv.dtype.kind != "i" or piv.shape != (*batch, n):
        raise ShapeError(f"{name}: pivots must be integers of shape {(*batch, n)}, got {piv.type}")


def _info(info, batch, name: str) -> None:
    """getrf's info per matrix, or one 0-d value for all (``lu_solve``'s literal 0: nothing to check)."""
    if info.dtype.kind != "i" or info.shape not in (tuple(batch), ()):
        raise ShapeError(f"{name}: info must be integers of shape {tuple(batch)}, got {info.type}")


def _rhs(f, b, batch, n, name: str) -> ArrayType:
    bbatch, m, _ = la._matrix(b, name)
    if tuple(bbatch) != tuple(batch) or m != n or b.dtype != f.dtype:
        raise ShapeError(f"{name}: a right-hand side {b.type} does not fit a factor {f.type}")
    return b.type


def _getrs(lu, piv, b, *, trans: Trans):
    """op(A)^{-1} B with P A = L U packed in ``lu`` and LAPACK's pivots ``piv``."""
    if not isinstance(trans, Trans):
        raise ShapeError(f"getrs: trans must be a Trans, got {trans!r}")
    batch, n = _square(lu, "getrs")
    _pivots(piv, batch, n, "getrs")
    return _rhs(lu, b, batch, n, "getrs")


def _getri(lu, piv):
    """A^{-1} from getrf's factors."""
    batch, n = _square(lu, "getri")
    _pivots(piv, batch, n, "getri")
    return lu.type


def _potrs(l, b):
    """A^{-1} B with A = L L^H, L the lower Cholesky factor."""
    batch, n = _square(l, "potrs")
    return _rhs(l, b, batch, n, "potrs")


def _gesv(a, lu, piv, info, b, *, trans: Trans = Trans.N):
    if not isinstance(trans, Trans):
        raise ShapeError(f"solve: trans must be a Trans, got {trans!r}")
    batch, n = _square(a, "solve")
    _same(a, lu, "solve")
    _pivots(piv, batch, n, "solve")
    _info(info, batch, "solve")
    return _rhs(a, b, batch, n, "solve")


def _getri_at(a, lu, piv, info):
    batch, n = _square(a, "inv")
    _same(a, lu, "inv")
    _pivots(piv, batch, n, "inv")
    _info(info, batch, "inv")
    return a.type


def _lu_logabsdet(a, lu, piv):
    batch, n = _square(a, "slogdet")
    _same(a, lu, "slogdet")
    _pivots(piv, batch, n, "slogdet")
    return ArrayType(tuple(batch), real_dtype(a.dtype))


def _posv(a, l, b):
    batch, n = _square(a, "solve")
    _same(a, l, "solve")
    return _rhs(a, b, batch, n, "solve")


def _po_logdet(a, l):
    batch, _ = _square(a, "logdet")
    _same(a, l, "logdet")
    return ArrayType(tuple(batch), real_dtype(a.dtype))


def _po_inv(a, l):
    _square(a, "inv")
    _same(a, l, "inv")
    return a.type


for _p, _r in [(getrs_p, _getrs), (getri_p, _getri), (potrs_p, _potrs), (gesv_p, _gesv), (getri_at_p, _getri_at),
               (lu_logabsdet_p, _lu_logabsdet), (posv_p, _posv), (po_logdet_p, _po_logdet), (po_inv_p, _po_inv)]:
    shape_rules[_p] = _r


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import Zero, jvp_rules  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.ir.tracer import bind  # noqa: E402
from pullback.primitives import lax  # noqa: E402


def _op(x, trans: Trans):
    return x if trans == Trans.N else (lax.mT(x) if trans == Trans.T else lax.H(x))


def _lu_factor_term(lu, piv, dlu, x, b, trans: Trans):
    """The part of d(op(A)^{-1} B) that the factors' tangent dlu makes (second order only: first-order
    programs pass factors as residuals). With A = P^T L U, dL = tril(dlu, -1), dU = triu(dlu):
    N: dX = -U^{-1} (L^{-1} dL (U X) + dU X), no permutation needed;
    T, C: with V = U^{-op} B and W = L^{-op} V (= P X), dX = -op(A)^{-1} (op(dU) V + op(U) op(dL) W)."""
    dl, du = lax.tril(dlu, -1), lax.triu(dlu)
    if trans == Trans.N:
        inner = lax.trsm(lu, lax.matmul(dl, lax.trmm(lu, x, left=True, lower=False)), left=True, lower=True,
                         unit_diagonal=True)
        return lax.neg(lax.trsm(lu, lax.add(inner, lax.matmul(du, x)), left=True, lower=False))
    v = lax.trsm(lu, b, left=True, lower=False, trans=trans)
    w = lax.trsm(lu, v, left=True, lower=True, trans=trans, unit_diagonal=True)
    rhs = lax.add(lax.matmul(_op(du, trans), v), lax.trmm(lu, lax.matmul(_op(dl, trans), w), left=True, lower=False,
                                                          trans=trans))
    return lax.neg(lax.getrs(lu, piv, rhs, trans))


def _add(a, b):
    return b if a is None else (a if b is None else lax.add(a, b))


def _getrs_jvp(primals, tangents, *, trans):
    (lu, piv, b), (dlu, _, db) = primals, tangents
    x = lax.getrs(lu, piv, b, trans)
    dx = None if isinstance(db, Zero) else lax.getrs(lu, piv, db, trans)
    if not isinstance(dlu, Zero):
        dx = _add(dx, _lu_factor_term(lu, piv, dlu, x, b, trans))
    return x, (Zero(x.ssa.type) if dx is None else dx)


def _getrs_t(ct, lu, piv, b, *, trans):
    """B -> op(A)^{-1} B transposes to C -> op(A)^{-H} C (the real inner product's adjoint)."""
    if isinstance(lu, Linear):
        raise TypeError("getrs is linear in its right-hand side only")
    if trans == Trans.T and ct.dtype.kind == "c":  # A^{-T} transposes to conj(A^{-1}) = conj . A^{-1} . conj
        return None, None, lax.conj(lax.getrs(lu, piv, lax.conj(ct), Trans.N))
    adjoint = Trans.N if trans != Trans.N else (Trans.C if ct.dtype.kind == "c" else Trans.T)
    return None, None, lax.getrs(lu, piv, ct, adjoint)


def _getri_jvp(primals, tangents):
    (lu, piv), (dlu, _) = primals, tangents
    x = lax.getri(lu, piv)
    return x, (Zero(x.ssa.type) if isinstance(dlu, Zero) else _lu_factor_term(lu, piv, dlu, x, None, Trans.N))


def _potrs_jvp(primals, tangents):
    """A = L L^H: dX = -A^{-1} (dL (L^H X) + L (dL^H X)), dL the lower triangle of dl."""
    (l, b), (dl, db) = primals, tangents
    x = lax.potrs(l, b)
    dx = None if isinstance(db, Zero) else lax.potrs(l, db)
    if not isinstance(dl, Zero):
        dl = lax.tril(dl)
        da_x = lax.add(lax.matmul(dl, lax.trmm(l, x, left=True, lower=True, trans=Trans.C)),
                       lax.trmm(l, lax.matmul(lax.H(dl), x), left=True, lower=True))
        dx = _add(dx, lax.neg(lax.potrs(l, da_x)))
    return x, (Zero(x.ssa.type) if dx is None else dx)


def _potrs_t(ct, l, b):
    """(L L^H)^{-1} is Hermitian: its own adjoint."""
    if isinstance(l, Linear):
        raise TypeError("potrs is linear in its right-hand side only")
    return None, lax.potrs(l, ct)


def _minus_dA_x(da, x):
    return lax.neg(lax.matmul(da, x))


def _gesv_jvp(primals, tangents, trans: Trans = Trans.N):
    """dx = op(A)^{-1} (db - op(dA) x): one getrs with the same factors (the factors' own tangent is A's)."""
    (a, lu, piv, info, b), (da, _, _, _, db) = primals, tangents
    x = bind(gesv_p, a, lu, piv, info, b, **({"trans": trans} if trans != Trans.N else {}))
    rhs = None if isinstance(db, Zero) else db
    if not isinstance(da, Zero):
        rhs = _add(rhs, _minus_dA_x(_op(da, trans), x))
    return x, (Zero(x.ssa.type) if rhs is None else lax.getrs(lu, piv, rhs, trans))


def _getri_at_jvp(primals, tangents):
    """dX = -X dA X: two products with the inverse the forward pass holds."""
    (a, lu, piv, info), (da, _, _, _) = primals, tangents
    x = bind(getri_at_p, a, lu, piv, info)
    if isinstance(da, Zero):
        return x, Zero(x.ssa.type)
    return x, lax.neg(lax.matmul(x, lax.matmul(da, x)))


def _po_inv_jvp(primals, tangents):
    """dX = -X dA X, as ``getri_at``'s (the factor's own tangent is A's Hermitian part's: not used)."""
    (a, l), (da, _) = primals, tangents
    x = bind(po_inv_p, a, l)
    if isinstance(da, Zero):
        return x, Zero(x.ssa.type)
    return x, lax.neg(lax.matmul(x, lax.matmul(da, x)))


def _trace_with(inverse, da):
    """Re tr(A^{-1} dA) = Re sum(A^{-T} o dA), per matrix."""
    nb = da.ndim - 2
    t = lax.reduce_sum(lax.mul(lax.mT(inverse), da), (nb, nb + 1))
    return lax.real(t) if t.dtype.kind == "c" else t


def _lu_logabsdet_jvp(primals, tangents):
    """d log|det A| = Re tr(A^{-1} dA): getri once, then an elementwise product (whose transpose,
    l_bar A^{-T}, is the expert's gradient)."""
    (a, lu, piv), (da, _, _) = primals, tangents
    out = bind(lu_logabsdet_p, a, lu, piv)
    if isinstance(da, Zero):
        return out, Zero(out.ssa.type)
    return out, _trace_with(lax.getri(lu, piv), da)


def _posv_jvp(primals, tangents):
    """dx = A^{-1} (db - sym(dA) x), sym(dA) = (dA + dA^H) / 2: the part of dA a Hermitian A sees
    (as ``potrf``'s rule); one potrs with the same factor."""
    (_, l, b), (da, _, db) = primals, tangents
    x = lax.potrs(l, b)  # the same call as posv's; the cotangent's potrs can then share it (CSE)
    rhs = None if isinstance(db, Zero) else db
    if not isinstance(da, Zero):
        rhs = _add(rhs, _minus_dA_x(la._sym(da), x))
    return x, (Zero(x.ssa.type) if rhs is None else lax.potrs(l, rhs))


def _po_logdet_jvp(primals, tangents):
    """d log det A = Re tr(A^{-1} dA) = tr(A^{-1} sym(dA)) for Hermitian A^{-1}: potri once."""
    (a, l), (da, _) = primals, tangents
    out = bind(po_logdet_p, a, l)
    if isinstance(da, Zero):
        return out, Zero(out.ssa.type)
    inverse = bind(la.potri_p, l)  # Hermitian: its transpose is its conjugate (no transposing pass)
    nb = da.ndim - 2
    t = lax.reduce_sum(lax.mul(lax.conj(inverse) if inverse.dtype.kind == "c" else inverse, da), (nb, nb + 1))
    return out, (lax.real(t) if t.dtype.kind == "c" else t)


jvp_rules[getrs_p] = _getrs_jvp
jvp_rules[getri_p] = _getri_jvp
jvp_rules[potrs_p] = _potrs_jvp
jvp_rules[gesv_p] = _gesv_jvp
jvp_rules[getri_at_p] = _getri_at_jvp
jvp_rules[lu_logabsdet_p] = _lu_logabsdet_jvp
jvp_rules[posv_p] = _posv_jvp
jvp_rules[po_logdet_p] = _po_logdet_jvp
jvp_rules[po_inv_p] = _po_inv_jvp
transpose_rules[getrs_p] = _getrs_t
transpose_rules[potrs_p] = _potrs_t


# --- batching ------------------------------------------------------------------------------

from pullback.ad.batch import batch_rules, leading_batch, moveaxis  # noqa: E402

for _p in (getrs_p, getri_p, potrs_p, gesv_p, getri_at_p, lu_logabsdet_p, posv_p, po_logdet_p, po_inv_p):
    leading_batch(_p)


def _fold_columns(prim):
    """Factors shared by the batch and a batched right-hand side B (a Jacobian's tangents): the batch
    is folded into B's columns, so that one solve serves it (as ``trsm``'s batching rule does)."""
    batched = batch_rules[prim]

    def rule(args, dims, **params):
        *factors, b = args
        if any(d is not None for d in dims[:-1]):
            return batched(args, dims, **params)
        nb = b.ndim - 3  # B's own batch axes
        moved = moveaxis(b, dims[-1], nb + 1)  # (..., n, batch, k)
        shape = moved.shape
        out = bind(prim, *factors, lax.reshape(moved, (*shape[:nb], shape[nb], shape[nb + 1] * shape[nb + 2])),
                   **params)
        return lax.reshape(out, shape), nb + 1

    batch_rules[prim] = rule


_fold_columns(getrs_p)
_fold_columns(potrs_p)
