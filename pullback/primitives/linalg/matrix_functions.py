"""Dense linear algebra beyond the factorisations of ``linalg``: the determinant as a
polynomial (exact derivative at singular matrices) and the general eigenproblem.

Rules are written in ``pullback.primitives.lax`` over the factorisation primitives of
``pullback.primitives.linalg.factorizations``.
"""

from __future__ import annotations

import numpy as np

from pullback.ad.jvp import Zero, defzero, jvp_rules
from pullback.ad.transpose import Linear, transpose_rules
from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.tracer import bind, trace_closed
from pullback.ir.types import ArrayType
from pullback.primitives import lax
from pullback.primitives import structural as st
from pullback.primitives.control import make_cond
from pullback.primitives.linalg import factorizations as la

det_p = Primitive("det")
pivots_to_permutation_p = Primitive("pivots_to_permutation")


def _det(a, lu, piv):
    """det A of a square (..., n, n) matrix, a polynomial in A's entries, from getrf's factors of A
    (det(P) prod U_ii; the factors' tangents are A's, as for ``primitives.factored``)."""
    batch, n, _ = la._matrix(a, "det", square=True)
    if lu.type != a.type or piv.shape != (*batch, n):
        raise ShapeError(f"det: factors {lu.type}, {piv.type} do not fit the matrix {a.type}")
    return ArrayType(batch, a.dtype)


def _pivots_to_permutation(piv):
    """The row permutation (int32) that LAPACK's 0-based pivots ``piv`` (their swaps applied in order)
    make: getrf's third result, computed where only a rare branch needs it (det's singular one)."""
    if piv.dtype.kind != "i" or piv.type.ndim < 1:
        raise ShapeError(f"pivots_to_permutation: pivots must be integers of at least one axis, got {piv.type}")
    return ArrayType(piv.shape, np.dtype(np.int32))


shape_rules[det_p] = _det
shape_rules[pivots_to_permutation_p] = _pivots_to_permutation


def adjugate(lu, piv, perm):
    """adj A from P A = L U (partial pivoting, LAPACK getrf): adj A = det(P) adj(U) L^{-1} P.
    For U with exact-zero pivots at positions z_1 < ... < z_r, let U~ be U with them set to
    one and W = U~^{-1}; adj(U) = det(U~) W when r = 0, else
        adj(U) = det(U~) (prod_k W[z_k, z_{k+1}]) (W e_{z_1}) (e_{z_r}^T W),
    the Woodbury identity adj(M - E E^T) = det M (det(S) M^{-1} + M^{-1} E adj(S) E^T M^{-1})
    with S = I - E^T W E strictly upper triangular (w_zz = 1), whose adjugate holds one entry.
    Exact at any rank (rank n - 1 keeps the rank-one term, lower ranks a zero product) and
    about the cost of an inverse: where JAX's cofactor solve assumes the zero pivot last."""
    a = lu  # (its type)
    n, nb = a.shape[-1], a.ndim - 2
    real = np.dtype(np.finfo(a.dtype).dtype)
    mat = (*a.shape[:-2], n, n)
    d = lax.diagonal(lu)
    zero = lax.eq(d, 0.0)
    d1 = lax.select(zero, lax.full(d.shape, 1.0, d.dtype), d)
    eye = lax.broadcast_in_dim(bind(st.eye_p, dtype=a.dtype, shape=(n, n), k=0), mat, (nb, nb + 1))
    w = lax.trsm(lax.add(lax.triu(lu, 1), lax.diag_embed(d1, (n, n))), eye, left=True, lower=False)
    z = lax.convert(zero, real)
    rank = lax.cumsum(z, d.ndim - 1)  # k at the k-th zero pivot
    count = lax.reduce_sum(z, (d.ndim - 1,))
    rows = lambda x: lax.broadcast_in_dim(x, mat, (*range(nb), nb))  # noqa: E731  x_i
    cols = lambda x: lax.broadcast_in_dim(x, mat, (*range(nb), nb + 1))  # noqa: E731  x_j
    pair = lax.mul(lax.mul(rows(z), cols(z)), lax.convert(lax.eq(cols(rank), lax.add(rows(rank), 1.0)), real))
    c = lax.reduce_prod(lax.select(lax.eq(pair, 1.0), w, lax.full(mat, 1.0, a.dtype)), (nb, nb + 1))
    first = lax.mul(z, lax.convert(lax.eq(rank, 1.0), real))
    last = lax.mul(z, lax.convert(lax.eq(rank, lax.broadcast_in_dim(count, rank.shape, tuple(range(nb)))), real))
    w_first = lax.matmul(w, lax.reshape(lax.convert(first, a.dtype), (*d.shape, 1)))  # W e_{z_1}
    last_w = lax.matmul(lax.reshape(lax.convert(last, a.dtype), (*d.shape[:-1], 1, n)), w)  # e_{z_r}^T W
    scale = lambda x: lax.broadcast_in_dim(x, mat, tuple(range(nb)))  # noqa: E731
    singular = lax.mul(scale(c), lax.matmul(w_first, last_w))
    adj_u = lax.select(scale(lax.eq(count, 0.0)), w, singular)
    index = bind(st.iota_p, dtype=piv.dtype, shape=piv.shape, dimension=piv.ndim - 1)
    sign = lax.reduce_prod(lax.select(lax.ne(piv, index), lax.full(piv.shape, -1.0, a.dtype),
                                      lax.full(piv.shape, 1.0, a.dtype)), (nb,))
    factor = scale(lax.mul(sign, lax.reduce_prod(d1, (nb,))))
    x = lax.trsm(lu, lax.mul(factor, adj_u), left=False, lower=True, unit_diagonal=True)  # adj(U) L^{-1}
    return lax.mT(lax.unpermute(lax.mT(x), perm))  # X P: column perm[i] of the result is column i of X


def _det_jvp(primals, tangents):
    """d det A = tr(adj(A) dA) (Jacobi's formula), finite at singular A. adj A = det A A^{-1} (getri:
    the expert's det A^{-T} gradient) unless a determinant of the batch is zero (a pivot is exactly
    zero, or their product underflows), when the exact rank-aware ``adjugate`` runs instead (a branch
    taken at run time). That branch factorises A again rather than take the factors: so getrf's
    factors are read only by det and getri, whose forms for A^T's factors exist (``opt.transposed_lu``:
    the expert's getrf of A's F-view), and the rare branch pays for a second factorisation."""
    (a, lu, piv), (da, *_) = primals, tangents
    d = bind(det_p, a, lu, piv)
    if isinstance(da, Zero):
        return d, Zero(d.ssa.type)
    nb = a.ndim - 2
    # det A = 0 at every zero pivot (and where the product underflows: the exact branch serves any A)
    singular = lax.eq(d, 0.0) if nb == 0 else lax.gt(lax.reduce_sum(lax.convert(lax.eq(d, 0.0), np.dtype(np.int32)),
                                                                    tuple(range(nb))), 0)

    def singular_adjugate(a, inverse, d):  # printed as a function of its own, called only at a zero pivot
        lu, piv, perm, _ = bind(la.getrf_p, a, check=False)
        return adjugate(lu, piv, perm), lax.full(d.shape, 1.0, d.dtype)

    def regular(a, inverse, d):
        return inverse, d

    # adj A = scale * m: the scaling stays outside the branch, so that it may run in place on m; getri's
    # inverse (unchecked: LAPACK stops at a zero pivot, and the other branch replaces its result) comes in
    operands = [a, lax.getri(lu, piv), d]
    branches = [regular, singular_adjugate]  # the cond's order: false, true
    traced = [trace_closed(branch, operands, branch.__name__) for branch in branches]
    m, scale = make_cond(singular, [p for p, _, _ in traced], operands, own=[captures for _, captures, _ in traced])
    return d, lax.mul(scale, lax.reduce_sum(lax.mul(lax.mT(m), da), (nb, nb + 1)))


jvp_rules[det_p] = la.empty_aware(det_p, _det_jvp)
defzero(pivots_to_permutation_p)



# --- the pseudo-inverse ----------------------------------------------------------------------------

pinv_p = Primitive("pinv")


def _pinv(a, *, rcond: float):
    """A^+ (..., n, m) by the SVD, singular values at or below ``rcond * max s`` dropped."""
    batch, m, n = la._matrix(a, "pinv")
    if not isinstance(rcond, float):
        raise ShapeError(f"pinv: rcond must be a float, got {rcond!r}")
    return ArrayType((*batch, n, m), a.dtype)


shape_rules[pinv_p] = _pinv


def _pinv_jvp(primals, tangents, *, rcond):
    """dX = -X dA X + X X^H dA^H (I - A X) + (I - X A) dA^H X^H X (Golub & Pereyra 1973):
    exact where the rank is locally constant, with no singular-value gaps in it (the SVD's
    would clamp at repeated singular values)."""
    (a,), (da,) = primals, tangents
    x = bind(pinv_p, a, rcond=rcond)
    dah, xh = lax.H(da), lax.H(x)
    first = lax.neg(lax.matmul(x, lax.matmul(da, x)))
    left = lax.matmul(lax.matmul(x, xh), dah)  # n x m
    left = lax.sub(left, lax.matmul(left, lax.matmul(a, x)))  # ... (I - A X)
    right = lax.matmul(dah, lax.matmul(xh, x))  # n x m
    right = lax.sub(right, lax.matmul(x, lax.matmul(a, right)))  # (I - X A) ...
    return x, lax.add(first, lax.add(left, right))


jvp_rules[pinv_p] = la.empty_aware(pinv_p, _pinv_jvp)


# --- the general eigenproblem ----------------------------------------------------------------------

geev_p = Primitive("geev", multiple_results=True)


def complex_dtype(dtype):
    return np.result_type(dtype, np.complex64)


def _geev(a):
    """Eigenvalues w (..., n) and right eigenvectors V (..., n, n) of a general square
    matrix, A V = V diag(w), complex whatever A's dtype (NumPy's eig returns real arrays
    when every eigenvalue is real: a value-dependent dtype no trace can have). LAPACK's
    order; columns of unit 2-norm with their largest-magnitude entry real positive."""
    batch, n, _ = la._matrix(a, "eig", square=True)
    c = complex_dtype(a.dtype)
    return ArrayType((*batch, n), c), ArrayType((*batch, n, n), c)


shape_rules[geev_p] = _geev


def lu_solve(a, b):
    """A^{-1} B through getrf and two triangular solves (the rule's V^{-1}, never an inverse)."""
    lu, _, perm, _ = bind(la.getrf_p, a, check=False)
    y = lax.trsm(lu, lax.permute(b, perm), left=True, lower=True, unit_diagonal=True)
    return lax.trsm(lu, y, left=True, lower=False)


def _geev_jvp(primals, tangents):
    """With P = V^{-1} dA V: dw = diag(P), dV = V (F o P) + V diag(c), F_ij = 1/(w_j - w_i)
    off the diagonal (distinct eigenvalues; Seeger et al. 4.4 for the symmetric case, Giles
    2008 for the general one). c keeps pullback's normalisation: Re c_j = -Re(v_j^H dv_j)
    holds |v_j| = 1, Im c_j the largest entry's phase."""
    (a,), (da,) = primals, tangents
    w, v = bind(geev_p, a)
    da = lax.convert(da, v.dtype)
    p = lu_solve(v, lax.matmul(da, v))
    dw = lax.diagonal(p)
    n = a.shape[-1]
    diff = la._outer_difference(w)  # w_j - w_i
    eye = lax.broadcast_in_dim(bind(st.eye_p, dtype=diff.dtype, shape=(n, n), k=0), diff.shape,
                               (diff.ndim - 2, diff.ndim - 1))
    f = lax.sub(lax.div(1.0, lax.add(diff, eye)), eye)  # zero diagonal
    dv = lax.matmul(v, lax.mul(f, p))
    nb = v.ndim - 2
    stretch = lax.real(lax.reduce_sum(lax.mul(lax.conj(v), dv), (nb,)))  # Re(v_j^H dv_j)
    dv = lax.sub(dv, lax.mul(v, lax.broadcast_in_dim(lax.convert(stretch, v.dtype), v.shape, (*range(nb), nb + 1))))
    dv = lax.add(dv, la._rotate_columns(v, la._phase_rate(v, dv)))
    return (w, v), (dw, dv)


jvp_rules[geev_p] = la.empty_aware(geev_p, _geev_jvp)


# --- matrix functions: the exponential, the square root, and the Sylvester equation -----------------

expm_p = Primitive("expm")
expm_frechet_p = Primitive("expm_frechet")
sqrtm_p = Primitive("sqrtm")
trsyl_p = Primitive("trsyl")


def _square_like(a, name: str) -> ArrayType:
    la._matrix(a, name, square=True)
    return a.type


shape_rules[expm_p] = lambda a: _square_like(a, "expm")
shape_rules[sqrtm_p] = lambda a: _square_like(a, "sqrtm")


def _expm_frechet(a, e):
    """L(A, E), the Frechet derivative of expm at A in the direction E: linear in E."""
    _square_like(a, "expm_frechet")
    if e.type != a.type:
        raise ShapeError(f"expm_frechet: A {a.type} and E {e.type} differ")
    return e.type


shape_rules[expm_frechet_p] = _expm_frechet


def _trsyl(a, b, q):
    """X with A X + X B = Q (Bartels-Stewart: Schur forms, then LAPACK trsyl): A (m, m),
    B (n, n), Q (m, n); linear in Q."""
    batch, m, _ = la._matrix(a, "solve_sylvester", square=True)
    bbatch, n, _ = la._matrix(b, "solve_sylvester", square=True)
    if q.type != ArrayType((*batch, m, n), a.dtype) or bbatch != batch or b.dtype != a.dtype:
        raise ShapeError(f"solve_sylvester: A {a.type}, B {b.type} and Q {q.type} do not fit")
    return q.type


shape_rules[trsyl_p] = _trsyl


def _block(a, e):
    """[[A, E], [0, A]], whose exponential holds L(A, E) in its upper right block."""
    nb = a.ndim - 2
    zero = lax.full(a.shape, 0.0, a.dtype)
    return lax.concatenate([lax.concatenate([a, e], nb + 1), lax.concatenate([zero, a], nb + 1)], nb)


def _expm_jvp(primals, tangents):
    """d expm(A) = L(A, dA) (Al-Mohy & Higham 2009 compute it; the adjoint is L(A^H, .))."""
    (a,), (da,) = primals, tangents
    return bind(expm_p, a), bind(expm_frechet_p, a, da)


def _expm_frechet_jvp(primals, tangents):
    """L(A, E) = [expm(M)]_12 with M = [[A, E], [0, A]]: a change dA of A is the change
    diag(dA, dA) of M, so dL = L(A, dE) + [L(M, diag(dA, dA))]_12."""
    (a, e), (da, de) = primals, tangents
    out = bind(expm_frechet_p, a, e)
    dout = None if isinstance(de, Zero) else bind(expm_frechet_p, a, de)
    if not isinstance(da, Zero):
        n = a.shape[-1]
        nb = a.ndim - 2
        zero = lax.full(a.shape, 0.0, a.dtype)
        dm = lax.concatenate([lax.concatenate([da, zero], nb + 1), lax.concatenate([zero, da], nb + 1)], nb)
        term = lax.slice_last2(bind(expm_frechet_p, _block(a, e), dm), (0, n), (n, 2 * n))
        dout = term if dout is None else lax.add(dout, term)
    return out, dout


def _expm_frechet_t(ct, a, e):
    """<L(A, E), C> = <E, L(A^H, C)> under Re tr(X^H Y)."""
    if isinstance(a, Linear):
        raise TypeError("expm_frechet is not linear in A")
    return None, bind(expm_frechet_p, lax.H(a), ct)


def _sqrtm_jvp(primals, tangents):
    """X = sqrtm(A): X dX + dX X = dA, a Sylvester equation in dX."""
    (a,), (da,) = primals, tangents
    x = bind(sqrtm_p, a)
    return x, bind(trsyl_p, x, x, da)


def _trsyl_jvp(primals, tangents):
    """A X + X B = Q: A dX + dX B = dQ - dA X - X dB, the same operator."""
    (a, b, q), (da, db, dq) = primals, tangents
    x = bind(trsyl_p, a, b, q)
    rhs = None if isinstance(dq, Zero) else dq
    for term in ([] if isinstance(da, Zero) else [lax.matmul(da, x)]) + (
            [] if isinstance(db, Zero) else [lax.matmul(x, db)]):
        rhs = lax.neg(term) if rhs is None else lax.sub(rhs, term)
    return x, bind(trsyl_p, a, b, rhs)


def _trsyl_t(ct, a, b, q):
    """Q -> X transposes to C -> Y with A^H Y + Y B^H = C."""
    if isinstance(a, Linear) or isinstance(b, Linear):
        raise TypeError("solve_sylvester is linear in Q only")
    return None, None, bind(trsyl_p, lax.H(a), lax.H(b), ct)


jvp_rules[expm_p] = la.empty_aware(expm_p, _expm_jvp)
jvp_rules[expm_frechet_p] = la.empty_aware(expm_frechet_p, _expm_frechet_jvp)
jvp_rules[sqrtm_p] = la.empty_aware(sqrtm_p, _sqrtm_jvp)
jvp_rules[trsyl_p] = la.empty_aware(trsyl_p, _trsyl_jvp)
transpose_rules[expm_frechet_p] = _expm_frechet_t
transpose_rules[trsyl_p] = _trsyl_t


# --- batching rules ---------------------------------------------------------------------
# Every primitive here takes leading batch axes (equal in all operands).

from pullback.ad.batch import leading_batch  # noqa: E402

for _p in (det_p, pivots_to_permutation_p, pinv_p, geev_p, expm_p, expm_frechet_p, sqrtm_p, trsyl_p):
    leading_batch(_p)
