"""Dense linear algebra beyond the factorisations of ``linalg``: the determinant as a
polynomial (exact derivative at singular matrices) and the general eigenproblem.

Rules are written in ``pullback.lax`` over the factorisation primitives of
``pullback.primitives.linalg``.
"""

from __future__ import annotations

import numpy as np

from pullback import lax
from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.tracer import bind
from pullback.ir.types import ArrayType
from pullback.primitives import linalg as la
from pullback.primitives import structural as st
from pullback.transforms.jvp import jvp_rules

det_p = Primitive("det")


def _det(a):
    """det A of a square (..., n, n) matrix: a polynomial in A's entries."""
    batch, _, _ = la._matrix(a, "det", square=True)
    return ArrayType(batch, a.dtype)


shape_rules[det_p] = _det


def lu_det(a):
    """det A from partially pivoted LU (P A = L U): det P prod(diag U). For the
    well-conditioned matrices it is used on (unitary ones), its derivative, through
    getrf's, is exact."""
    lu, piv, _, _ = bind(la.getrf_p, a, check=False)
    index = bind(st.iota_p, dtype=piv.dtype, shape=piv.shape, dimension=piv.ndim - 1)
    swaps = lax.select(lax.ne(piv, index), lax.full(piv.shape, -1.0, lu.dtype), lax.full(piv.shape, 1.0, lu.dtype))
    axis = (lu.ndim - 2,)
    return lax.mul(lax.reduce_prod(swaps, axis), lax.reduce_prod(lax.diagonal(lu), axis))


def exclusive_products(s):
    """c_i = prod_{j != i} s_j along the last axis, exact (and exactly differentiable) when
    some s_j are zero, unlike prod(s) / s_i."""
    k = s.shape[-1]
    nb = s.ndim - 1
    rows = lax.broadcast_in_dim(s, (*s.shape, k), (*range(nb), nb + 1))  # rows[..., i, j] = s_j
    eye = lax.broadcast_in_dim(bind(st.eye_p, dtype=s.dtype, shape=(k, k), k=0), rows.shape, (nb, nb + 1))
    ones = lax.full(rows.shape, 1.0, s.dtype)
    return lax.reduce_prod(lax.select(lax.eq(eye, 1.0), ones, rows), (nb + 1,))


def adjugate(a):
    """adj A = det(U V^H) V diag(c) U^H from the SVD A = U S V^H, c_i = prod_{j != i} s_j
    (adj is multiplicative and adj(Q) = det(Q) Q^H for unitary Q). Finite and exact at
    any rank: rank n - 1 keeps one nonzero c_i, lower ranks give zero. As in JAX's
    ``_cofactor_solve`` the point is the singular case; the SVD keeps it rank-agnostic
    where LU with partial pivoting may meet the zero pivot anywhere."""
    u, s, vh = bind(la.gesvd_p, a)
    c = lax.convert(exclusive_products(s), a.dtype)
    nb = s.ndim - 1
    scaled = lax.mul(lax.H(vh), lax.broadcast_in_dim(c, vh.shape, (*range(nb), nb + 1)))  # V diag(c)
    phase = lu_det(lax.matmul(u, vh))
    adj = lax.matmul(scaled, lax.H(u))
    return lax.mul(adj, lax.broadcast_in_dim(phase, adj.shape, tuple(range(nb))))


def _det_jvp(primals, tangents):
    """d det A = tr(adj(A) dA) (Jacobi's formula), finite at singular A."""
    (a,), (da,) = primals, tangents
    d = bind(det_p, a)
    nb = a.ndim - 2
    return d, lax.reduce_sum(lax.mul(lax.mT(adjugate(a)), da), (nb, nb + 1))


jvp_rules[det_p] = la.empty_aware(det_p, _det_jvp)



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
