"""Dense linear algebra, named as in LAPACK/BLAS (Seeger et al., "Auto-Differentiating
Linear Algebra", section 4). Matrices are the last two axes; leading axes are a batch.

JVP rules are written over linear primitives (``trsm``, ``trmm``, matmul, triangle
masks), so transposition yields triangular solves, never explicit inverses. The
paper's backward formulas are the oracles of the tests.
"""

from __future__ import annotations

import enum

import numpy as np

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType, real_dtype


class Trans(enum.IntEnum):
    """``op(A)``: A, A^T or A^H (SciPy's ``trans=0|1|2``)."""

    N = 0
    T = 1
    C = 2


INFO = np.dtype(np.int32)


def _matrix(x, name: str, square: bool = False) -> tuple[tuple[int, ...], int, int]:
    if x.type.ndim < 2:
        raise ShapeError(f"{name} needs a matrix (..., m, n), got shape {x.shape}")
    if x.dtype.kind not in "fc" or x.dtype == np.float16:
        raise ShapeError(f"{name} needs a float or complex matrix (not float16: LAPACK has none), got {x.dtype.name}")
    *batch, m, n = x.shape
    if square and m != n:
        raise ShapeError(f"{name} needs a square matrix, got shape {x.shape}")
    return tuple(batch), m, n


def _rule(prim):
    def register(fn):
        shape_rules[prim] = fn
        return fn

    return register


potrf_p = Primitive("potrf", multiple_results=True)


@_rule(potrf_p)
def _potrf(a, *, check: bool):
    """Lower Cholesky factor L (A = L L^H) and LAPACK's info; ``check`` raises when info > 0."""
    batch, _, _ = _matrix(a, "cholesky", square=True)
    return a.type, ArrayType(batch, INFO)


def _triangular(a, b, name: str, left: bool, alpha: float = 1.0) -> ArrayType:
    if not isinstance(alpha, int | float) or isinstance(alpha, bool):
        raise ShapeError(f"{name}'s alpha must be a real Python number, got {alpha!r}")
    batch, n, _ = _matrix(a, name, square=True)
    bbatch, m, k = _matrix(b, name)
    if a.dtype != b.dtype:
        raise ShapeError(f"{name}: operands have different dtypes {a.dtype.name} and {b.dtype.name}")
    if bbatch != batch:
        raise ShapeError(f"{name}: batch shapes differ: {a.shape} and {b.shape}")
    if (m if left else k) != n:
        side = "rows" if left else "columns"
        raise ShapeError(f"{name}: a triangular matrix of shape {a.shape} does not fit the {side} of {b.shape}")
    return b.type


trsm_p = Primitive("trsm")
trmm_p = Primitive("trmm")


@_rule(trsm_p)
def _trsm(a, b, *, left: bool, lower: bool, trans: Trans, unit_diagonal: bool, check: bool, alpha: float = 1.0):
    """X with op(A) X = alpha B (left) or X op(A) = alpha B; only A's ``lower``/upper triangle is read.
    ``check`` raises on a zero diagonal (solves that rules create reuse a checked factor). The real
    scalar ``alpha`` (absent: 1) is BLAS's, so that a scaling of the solve's operand or result folds
    into the call (``opt/readers.py``)."""
    return _triangular(a, b, "solve_triangular", left, alpha)


@_rule(trmm_p)
def _trmm(a, b, *, left: bool, lower: bool, trans: Trans, unit_diagonal: bool, alpha: float = 1.0):
    """alpha op(T) B (left) or alpha B op(T), T the ``lower``/upper triangle of A (``alpha`` as trsm's)."""
    return _triangular(a, b, "trmm", left, alpha)


syrk_p = Primitive("syrk")


@_rule(syrk_p)
def _syrk(a, *, trans: bool):
    """A A^H, or A^H A with ``trans`` (``herk`` for complex)."""
    batch, m, n = _matrix(a, "syrk")
    k = n if trans else m
    return ArrayType((*batch, k, k), a.dtype)


potri_p = Primitive("potri")


@_rule(potri_p)
def _potri(l):
    """(L L^H)^{-1} from the lower Cholesky factor L, as a full matrix."""
    _matrix(l, "cholesky_inverse", square=True)
    return l.type


gelqf_p = Primitive("gelqf", multiple_results=True)


@_rule(gelqf_p)
def _gelqf(a):
    """A = L Q with L (m, m) lower triangular and Q (m, n) with orthonormal rows, m <= n."""
    batch, m, n = _matrix(a, "lq")
    if m > n:
        raise ShapeError(f"lq needs m <= n, got shape {a.shape} (use qr)")
    return ArrayType((*batch, m, m), a.dtype), a.type


geqrf_p = Primitive("geqrf", multiple_results=True)


@_rule(geqrf_p)
def _geqrf(a):
    """Reduced A = Q R, k = min(m, n): Q (m, k) with orthonormal columns, R (k, n) upper
    triangular (upper trapezoidal for a wide A)."""
    batch, m, n = _matrix(a, "qr")
    k = min(m, n)
    return ArrayType((*batch, m, k), a.dtype), ArrayType((*batch, k, n), a.dtype)


syevd_p = Primitive("syevd", multiple_results=True)


@_rule(syevd_p)
def _syevd(a, *, lower: bool = True):
    """Eigenvalues (ascending) and eigenvectors (columns) of a symmetric/Hermitian matrix, from
    the triangle ``lower`` names (the input is Hermitian already: the triangle only decides how
    LAPACK reduces it, hence real eigenvectors' signs, which follow NumPy's ``UPLO``)."""
    batch, n, _ = _matrix(a, "eigh", square=True)
    return ArrayType((*batch, n), real_dtype(a.dtype)), a.type


gesvd_p = Primitive("gesvd", multiple_results=True)


@_rule(gesvd_p)
def _gesvd(a):
    """Thin SVD: U (m, k), singular values (k,) descending, V^H (k, n), k = min(m, n)."""
    batch, m, n = _matrix(a, "svd")
    k = min(m, n)
    return (ArrayType((*batch, m, k), a.dtype), ArrayType((*batch, k), real_dtype(a.dtype)),
            ArrayType((*batch, k, n), a.dtype))


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import Zero, jvp_rules  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.ir.tracer import bind  # noqa: E402
from pullback.primitives import lax  # noqa: E402

# Eigen/singular values closer than GAP_ULPS units in the last place of the largest one (in
# the dtype computed in) count as tied: their eigenvectors are not determined by the matrix in
# that precision, only their common eigenspace is. GAP_EPS is the float64 threshold (relative).
GAP_ULPS = 1e3
GAP_EPS = float(GAP_ULPS * np.finfo(np.float64).eps)


def _sym(x):
    """The Hermitian part (X + X^H) / 2: the tangent a symmetric input really sees."""
    return lax.mul(lax.add(x, lax.H(x)), 0.5)


def _triangle(x, lower: bool, unit_diagonal: bool):
    """The part of ``x`` a triangular operator reads."""
    k = -1 if unit_diagonal else 0
    return lax.tril(x, k) if lower else lax.triu(x, -k)


def _op(x, trans: Trans):
    return x if trans == Trans.N else (lax.mT(x) if trans == Trans.T else lax.H(x))


def _potrf_jvp(primals, tangents, *, check):
    """dL = L Phi(L^{-1} sym(dA) L^{-H}), Phi = lower triangle with half the diagonal
    (Murray 2016; Seeger et al. 4.2). Two triangular solves and a triangular product."""
    (a,), (da,) = primals, tangents
    l, info = bind(potrf_p, a, check=check)
    n = a.shape[-1]
    x = lax.trsm(l, _sym(da), left=True, lower=True)
    x = lax.trsm(l, x, left=False, lower=True, trans=Trans.C)
    phi = lax.add(lax.tril(x), lax.diag_embed(lax.mul(lax.diagonal(x), -0.5), (n, n)))  # no n x n mask to keep
    return (l, info), (lax.trmm(l, phi, left=True, lower=True), Zero(info.ssa.type))


def _trsm_jvp(primals, tangents, *, left, lower, trans, unit_diagonal, check, **alpha):
    """op(A) X = alpha B  =>  op(A) dX = alpha dB - op(dT) X, one more solve with the same factor
    (alpha's solve of dB alone, when A's tangent is zero)."""
    (a, b), (da, db) = primals, tangents
    params = dict(left=left, lower=lower, trans=trans, unit_diagonal=unit_diagonal)
    x = bind(trsm_p, a, b, **params, check=check, **alpha)
    if isinstance(da, Zero):
        return x, bind(trsm_p, a, db, **params, check=False, **alpha)
    scale = alpha.get("alpha", 1.0)
    rhs = None if isinstance(db, Zero) else db if scale == 1.0 else lax.mul(db, scale)
    dop = _op(_triangle(da, lower, unit_diagonal), trans)
    term = lax.matmul(dop, x) if left else lax.matmul(x, dop)
    rhs = lax.neg(term) if rhs is None else lax.sub(rhs, term)
    return x, bind(trsm_p, a, rhs, **params, check=False)


def _trmm_jvp(primals, tangents, *, left, lower, trans, unit_diagonal, **alpha):
    """d(alpha op(T) B) = alpha op(T) dB + alpha op(dT) B."""
    (a, b), (da, db) = primals, tangents
    params = dict(left=left, lower=lower, trans=trans, unit_diagonal=unit_diagonal, **alpha)
    out = bind(trmm_p, a, b, **params)
    dout = None if isinstance(db, Zero) else bind(trmm_p, a, db, **params)
    if not isinstance(da, Zero):
        dop = _op(_triangle(da, lower, unit_diagonal), trans)
        term = lax.matmul(dop, b) if left else lax.matmul(b, dop)
        scale = alpha.get("alpha", 1.0)
        term = term if scale == 1.0 else lax.mul(term, scale)
        dout = term if dout is None else lax.add(dout, term)
    return out, dout


def _adjoint(a, trans: Trans):
    """(A', trans') with op'(A') = op(A)^H."""
    if trans == Trans.N:
        return a, Trans.C if a.dtype.kind == "c" else Trans.T
    if trans == Trans.T:
        return lax.conj(a), Trans.N
    return a, Trans.N


def _triangular_t(prim):
    def rule(ct, a, b, *, left, lower, trans, unit_diagonal, alpha: float = 1.0, **check):
        """In B: alpha op(A)^{-1} (or alpha op(A)) transposes to alpha op(A)^{-H} (alpha op(A)^H), same
        side (alpha real)."""
        if isinstance(a, Linear):
            raise TypeError(f"{prim.name} is not linear in its triangular operand")
        a2, trans2 = _adjoint(a, trans)
        check = {"check": False} if check else {}
        scale = {} if alpha == 1.0 else {"alpha": alpha}
        return None, bind(prim, a2, ct, left=left, lower=lower, trans=trans2, unit_diagonal=unit_diagonal, **check,
                          **scale)

    return rule


def _syrk_jvp(primals, tangents, *, trans):
    """d(A A^H) = Y + Y^H with Y = dA A^H (Y = A^H dA for A^H A)."""
    (a,), (da,) = primals, tangents
    out = bind(syrk_p, a, trans=trans)
    y = lax.matmul(lax.H(a), da) if trans else lax.matmul(da, lax.H(a))
    return out, lax.add(y, lax.H(y))


def _potri_jvp(primals, tangents):
    """B = (L L^H)^{-1}: dB = -(Y + Y^H) with Y = B dL L^{-1}; potri reads L's lower triangle."""
    (l,), (dl,) = primals, tangents
    b = bind(potri_p, l)
    y = lax.matmul(b, lax.trsm(l, lax.tril(dl), left=False, lower=True))
    return b, lax.neg(lax.add(y, lax.H(y)))


def _lq_tangents(l, q, da):
    """A = L Q: with Y = L^{-1} dA and C = Y Q^H, L^{-1} dL = G is the lower part of C
    and dQ Q^H = C - G is skew: G = tril(C) + triu(C, 1)^H; dL = L G, dQ = Y - G Q."""
    y = lax.trsm(l, da, left=True, lower=True)
    c = lax.matmul(y, lax.H(q))
    if c.dtype.kind == "c":  # LAPACK's L has a real diagonal: Im diag(C) belongs to the skew part
        diag = lax.convert(lax.real(lax.diagonal(c)), c.dtype)
        g = lax.add(lax.add(lax.tril(c, -1), lax.H(lax.triu(c, 1))), lax.diag_embed(diag, c.shape[-2:]))
    else:
        g = lax.add(lax.tril(c), lax.H(lax.triu(c, 1)))
    return lax.trmm(l, g, left=True, lower=True), lax.sub(y, lax.matmul(g, q))


def _gelqf_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    l, q = bind(gelqf_p, a)
    return (l, q), _lq_tangents(l, q, da)


def _geqrf_jvp(primals, tangents):
    """QR of A is the conjugate transpose of the LQ of A^H. A wide A = [X | Y] (m < n) is
    Q [R_X | Q^H Y] with X = Q R_X square: dR_Y = dQ^H Y + Q^H dY (as PyTorch and JAX)."""
    (a,), (da,) = primals, tangents
    q, r = bind(geqrf_p, a)
    m, n = a.shape[-2:]
    if m >= n:
        dl, dq = _lq_tangents(lax.H(r), lax.H(q), lax.H(da))
        return (q, r), (lax.H(dq), lax.H(dl))
    nb = a.ndim - 2
    r_x, y = lax.slice_last2(r, (0, m), (0, m)), lax.slice_last2(a, (0, m), (m, n))
    dx, dy = lax.slice_last2(da, (0, m), (0, m)), lax.slice_last2(da, (0, m), (m, n))
    dl, dq = _lq_tangents(lax.H(r_x), lax.H(q), lax.H(dx))
    dq = lax.H(dq)
    dr_y = lax.add(lax.matmul(lax.H(dq), y), lax.matmul(lax.H(q), dy))
    return (q, r), (dq, lax.concatenate([lax.H(dl), dr_y], nb + 1))


def _inverse_gaps(d, scale):
    """1 / d where |d| > eps = GAP_ULPS * ulp(1) * scale, else 0 (ties; a difference's diagonal).

    Odd in d, so F_ij = -F_ji always: values closer than eps are one cluster whose vectors
    the matrix does not determine in this precision, and the term that would turn them among
    themselves is dropped, which is exact for losses that see the cluster only through its
    eigenspace (projectors, tr f(A)). Clamping the gap instead, 1 / (sgn(d) max(|d|, eps))
    with sgn(0) = +1, made F_ij = F_ji ~ 1/eps at exact ties: terms that cancel added up."""
    info = np.finfo(d.dtype)
    eps = lax.add(lax.mul(scale, float(GAP_ULPS * info.eps)), float(info.tiny))
    eps = lax.broadcast_in_dim(eps, d.shape, tuple(range(scale.ndim)))  # scale: one per matrix
    apart = lax.gt(lax.abs(d), eps)
    return lax.select(apart, lax.div(1.0, lax.select(apart, d, 1.0)), 0.0)  # no 1/0 to differentiate


def _outer_difference(w):
    """D[..., i, j] = w_j - w_i."""
    n = w.shape[-1]
    shape = (*w.shape, n)
    nb = w.ndim - 1
    rows = lax.broadcast_in_dim(w, shape, (*range(nb), nb))
    cols = lax.broadcast_in_dim(w, shape, (*range(nb), nb + 1))
    return lax.sub(cols, rows)


def _largest(x):
    return lax.reduce_max(lax.abs(x), (x.ndim - 1,))


def _as(x, dtype):
    return lax.convert(x, dtype)


def _syevd_jvp(primals, tangents, lower=True):
    """dw = diag(V^H dA V); dV = V (F o V^H dA V), F_ij = 1/h(w_j - w_i) (Seeger et al. 4.4)."""
    (a,), (da,) = primals, tangents
    w, v = bind(syevd_p, a, lower=lower)
    p = lax.matmul(lax.H(v), lax.matmul(_sym(da), v))
    dw = lax.real(lax.diagonal(p))
    f = _inverse_gaps(_outer_difference(w), _largest(w))
    dv = lax.matmul(v, lax.mul(_as(f, p.dtype), p))
    if v.dtype.kind == "c":
        dtheta = _phase_rate(v, dv)
        dv = lax.add(dv, _rotate_columns(v, dtheta))
    return (w, v), (dw, dv)


def _phase_rate(v, dv):
    """d theta_j keeping column j's largest-magnitude entry real, as pullback normalises it:
    Im(dv[k_j, j] e^{i d theta_j}...) = 0 gives d theta_j = -Im(dv[k_j, j]) / v[k_j, j]."""
    magnitude = lax.abs(v)
    nb = v.ndim - 2
    top = lax.broadcast_in_dim(lax.reduce_max(magnitude, (v.ndim - 2,)), v.shape, (*range(nb), nb + 1))
    at = lax.convert(lax.eq(magnitude, top), v.dtype)
    pivot = lax.real(lax.reduce_sum(lax.mul(v, at), (v.ndim - 2,)))
    return lax.neg(lax.div(lax.imag(lax.reduce_sum(lax.mul(dv, at), (v.ndim - 2,))), pivot))


def _rotate_columns(x, dtheta):
    """x diag(i d theta)."""
    nb = x.ndim - 2
    rate = lax.mul(lax.convert(dtheta, x.dtype), 1j)
    return lax.mul(x, lax.broadcast_in_dim(rate, x.shape, (*range(nb), nb + 1)))


def _gesvd_jvp(primals, tangents):
    """A = U S V^H (thin). With dP = U^H dA V split into its Hermitian and skew parts H, K:
    ds = diag(dP); dU = U (J o H + L o K) + (I - U U^H) dA V S^{-1},
    dV = V (J o H - L o K) + (I - V V^H) dA^H U S^{-1},
    J_ij = 1/(s_j - s_i), L_ij = 1/(s_j + s_i) (Seeger et al. 4.5 and Townsend 2016, whose
    E o (dP S + S dP^H) with E = J o L is the same sum). Written so, only J is undefined at
    tied singular values: it is zero there (``_inverse_gaps``), while L o K, which turns U and V
    together (the part of dA that rotates a cluster's u_i v_i^H), is kept. L's diagonal gives
    complex singular vectors the opposite phase rates i Im(dP_jj) / (2 s_j). S^{-1} is the
    clamped pseudo-inverse (1/s above the tie threshold, else 0): a zero singular value's
    vectors are arbitrary, and they are kept still."""
    (a,), (da,) = primals, tangents
    u, s, vh = bind(gesvd_p, a)
    v = lax.H(vh)
    m, n = a.shape[-2:]
    k = min(m, n)
    dp = lax.matmul(lax.H(u), lax.matmul(da, v))
    ds = lax.real(lax.diagonal(dp))
    scale = _largest(s)
    symmetric = lax.mul(_as(_inverse_gaps(_outer_difference(s), scale), dp.dtype), _sym(dp))
    skew = lax.mul(_as(_inverse_gaps(_sum_outer(s), scale), dp.dtype), lax.mul(lax.sub(dp, lax.H(dp)), 0.5))
    du = lax.matmul(u, lax.add(symmetric, skew))
    dv = lax.matmul(v, lax.sub(symmetric, skew))
    s_inv = _clamped_inverse(s, scale) if m != n else None
    if m > k:  # the part of dA V outside the range of U
        z = lax.matmul(da, v)
        du = lax.add(du, _scale_columns(lax.sub(z, lax.matmul(u, lax.matmul(lax.H(u), z))), s_inv))
    if n > k:
        z = lax.matmul(lax.H(da), u)
        dv = lax.add(dv, _scale_columns(lax.sub(z, lax.matmul(v, lax.matmul(vh, z))), s_inv))
    if a.dtype.kind == "c":  # u_j and v_j turn together by the rate that keeps u's largest entry real
        dtheta = _phase_rate(u, du)
        du = lax.add(du, _rotate_columns(u, dtheta))
        dv = lax.add(dv, _rotate_columns(v, dtheta))
    return (u, s, vh), (du, ds, lax.H(dv))


def _sum_outer(w):
    """S[..., i, j] = w_i + w_j."""
    n = w.shape[-1]
    shape = (*w.shape, n)
    nb = w.ndim - 1
    return lax.add(lax.broadcast_in_dim(w, shape, (*range(nb), nb)),
                   lax.broadcast_in_dim(w, shape, (*range(nb), nb + 1)))


def _clamped_inverse(s, scale):
    """1/s where s is above the tie threshold (``_inverse_gaps``), else 0."""
    return _inverse_gaps(s, scale)


def _scale_columns(x, c):
    nb = c.ndim - 1
    return lax.mul(x, _as(lax.broadcast_in_dim(c, x.shape, (*range(nb), nb + 1)), x.dtype))


def empty_aware(prim, rule):
    """A function of an empty matrix is constant: its tangents are symbolic zeros (the
    rules' spectral scales, max |lambda|, have no value there)."""

    def jvp(primals, tangents, **params):
        if primals[0].ndim >= 2 and 0 in primals[0].shape[-2:]:
            outs = bind(prim, *primals, **params)
            many = isinstance(outs, tuple | list)
            zeros = tuple(Zero(ArrayType(o.shape, o.dtype)) for o in (outs if many else (outs,)))
            return outs, (zeros if many else zeros[0])
        return rule(primals, tangents, **params)

    return jvp


for _prim, _rule_fn in [(potrf_p, _potrf_jvp), (trsm_p, _trsm_jvp), (trmm_p, _trmm_jvp), (syrk_p, _syrk_jvp),
                        (potri_p, _potri_jvp), (gelqf_p, _gelqf_jvp), (geqrf_p, _geqrf_jvp), (syevd_p, _syevd_jvp),
                        (gesvd_p, _gesvd_jvp)]:
    jvp_rules[_prim] = empty_aware(_prim, _rule_fn)
transpose_rules[trsm_p] = _triangular_t(trsm_p)
transpose_rules[trmm_p] = _triangular_t(trmm_p)


# --- LU (partial pivoting) ------------------------------------------------------------------
# The notes write P A = L U; SciPy's lu returns p with A = p L U, i.e. p = P^T.

getrf_p = Primitive("getrf", multiple_results=True)


@_rule(getrf_p)
def _getrf(a, *, check: bool):
    """Packed factors (L strictly below the diagonal, unit diagonal implied; U on and above),
    LAPACK's pivots (K,), the row permutation perm (M,) with (P A) = A[perm], and info
    (> 0: U[info-1, info-1] is exactly zero). ``check`` raises on a singular U."""
    batch, m, n = _matrix(a, "lu")
    k = min(m, n)
    return a.type, ArrayType((*batch, k), INFO), ArrayType((*batch, m), INFO), ArrayType(batch, INFO)


permute_p = Primitive("permute")
unpermute_p = Primitive("unpermute")


def _permute_rule(x, perm):
    """Rows of x (..., m, n) reordered: ``permute`` gives x[perm], ``unpermute`` the inverse
    (its transpose): out[perm] = x. perm (..., m) must be a permutation."""
    if x.type.ndim < 2 or perm.type.ndim != x.type.ndim - 1 or perm.shape != x.shape[:-1]:
        raise ShapeError(f"cannot permute rows of {x.shape} by indices of shape {perm.shape}")
    if perm.dtype.kind != "i":
        raise ShapeError(f"permutation indices must be integers, got {perm.dtype.name}")
    return x.type


shape_rules[permute_p] = shape_rules[unpermute_p] = _permute_rule


getc2_p = Primitive("getc2", multiple_results=True)


@_rule(getc2_p)
def _getc2(a):
    """LU with complete pivoting, any shape: B = A[rperm][:, cperm] = L U (packed as for
    getrf), the row and column permutations, the sign of det(P Q) (+-1) and info
    (k > 0: the pivot of step k is exactly zero, rank k - 1)."""
    batch, m, n = _matrix(a, "lu_full_pivot")
    return (a.type, ArrayType((*batch, m), INFO), ArrayType((*batch, n), INFO), ArrayType(batch, INFO),
            ArrayType(batch, INFO))


def _lu_tangent(lu, perm, da):
    """The notes' forward rule on the packed factor. With K = min(M, N), L1 / U1 the
    leading K x K blocks (read straight from the packed lu by unit-lower / upper
    triangular solves) and F = L1^{-1} (P dA)_11 U1^{-1}:
      dL1 = L1 tril_-(F), dU1 = triu(F) U1,
      wide:  dU2 = L1^{-1} (P dA)_12 - tril_-(F) U2,
      tall:  dL2 = (P dA)_21 U1^{-1} - L2 triu(F)."""
    return _lu_tangent_permuted(lu, lax.permute(da, perm))


def _lu_tangent_permuted(lu, pda):
    m, n = lu.shape[-2:]
    k = min(m, n)
    lu1 = lu if m == n else lax.slice_last2(lu, (0, k), (0, k))
    pda1 = pda if m == n else lax.slice_last2(pda, (0, k), (0, k))
    f = lax.trsm(lu1, lax.trsm(lu1, pda1, left=True, lower=True, unit_diagonal=True), left=False, lower=False)
    f_lower, f_upper = lax.tril(f, -1), lax.triu(f)
    d11 = lax.add(lax.trmm(lu1, f_lower, left=True, lower=True, unit_diagonal=True),
                  lax.trmm(lu1, f_upper, left=False, lower=False))
    if m == n:
        return d11
    nb = lu.ndim - 2
    if m < n:
        u2 = lax.slice_last2(lu, (0, m), (m, n))
        du2 = lax.sub(lax.trsm(lu1, lax.slice_last2(pda, (0, m), (m, n)), left=True, lower=True, unit_diagonal=True),
                      lax.matmul(f_lower, u2))
        return lax.concatenate([d11, du2], nb + 1)
    l2 = lax.slice_last2(lu, (n, m), (0, n))
    dl2 = lax.sub(lax.trsm(lu1, lax.slice_last2(pda, (n, m), (0, n)), left=False, lower=False),
                  lax.matmul(l2, f_upper))
    return lax.concatenate([d11, dl2], nb)


def _getrf_jvp(primals, tangents, *, check):
    (a,), (da,) = primals, tangents
    lu, piv, perm, info = bind(getrf_p, a, check=check)
    return (lu, piv, perm, info), (_lu_tangent(lu, perm, da), Zero(piv.ssa.type), Zero(perm.ssa.type),
                                    Zero(info.ssa.type))


jvp_rules[getrf_p] = empty_aware(getrf_p, _getrf_jvp)


def _getc2_jvp(primals, tangents):
    """The partial-pivot rule for B = P A Q = L U with dB = P dA Q (the notes' full-pivot extension)."""
    (a,), (da,) = primals, tangents
    outs = bind(getc2_p, a)
    lu, rperm, cperm = outs[:3]
    db = lax.mT(lax.permute(lax.mT(lax.permute(da, rperm)), cperm))
    return outs, (_lu_tangent_permuted(lu, db), *(Zero(o.ssa.type) for o in outs[1:]))


jvp_rules[getc2_p] = _getc2_jvp
jvp_rules[permute_p] = lambda p, t: (bind(permute_p, *p), bind(permute_p, t[0], p[1]))
jvp_rules[unpermute_p] = lambda p, t: (bind(unpermute_p, *p), bind(unpermute_p, t[0], p[1]))
transpose_rules[permute_p] = lambda ct, x, perm: (bind(unpermute_p, ct, perm), None)
transpose_rules[unpermute_p] = lambda ct, x, perm: (bind(permute_p, ct, perm), None)


# --- batching rules ---------------------------------------------------------------------
# Every primitive here takes leading batch axes (equal in all operands).

from pullback.ad.batch import batch_rules, leading_batch, moveaxis  # noqa: E402

for _p in (potrf_p, trsm_p, trmm_p, syrk_p, potri_p, gelqf_p, geqrf_p, syevd_p, gesvd_p, getrf_p, permute_p,
           unpermute_p, getc2_p):
    leading_batch(_p)


def _folded(prim, rows_of, shared: int = 0):
    """A matrix operand A shared by the batch and a batched right-hand side B: the batch is
    folded into B's columns (``A X = B``, row permutations) or rows (``X A = B``), so one call
    on a wider B serves it, not one call per batch element with copies of A."""
    batched = batch_rules[prim]

    def rule(args, dims, **params):
        a, b, da, db = args[shared], args[1 - shared], dims[shared], dims[1 - shared]
        if da is not None:
            return batched(args, dims, **params)
        nb = b.ndim - 3  # B's own batch axes
        rows = rows_of(params)
        at = nb + 1 if rows else nb  # the batch axis goes next to the axis it is folded into
        moved = moveaxis(b, db, at)
        shape = moved.shape
        folded = (*shape[:nb], shape[nb], shape[nb + 1] * shape[nb + 2]) if rows else \
            (*shape[:nb], shape[nb] * shape[nb + 1], shape[nb + 2])
        operands = [a, lax.reshape(moved, folded)]
        out = bind(prim, *(operands if shared == 0 else operands[::-1]), **params)
        return lax.reshape(out, shape), at

    batch_rules[prim] = rule


_folded(trsm_p, lambda p: p["left"])
_folded(trmm_p, lambda p: p["left"])
_folded(permute_p, lambda p: True, shared=1)
_folded(unpermute_p, lambda p: True, shared=1)

# registers det and the general eigenproblem; getrs, getri, potrs and the solves at the factors
from pullback.primitives.linalg import factor_solves as factored  # noqa: E402,F401
from pullback.primitives.linalg import matrix_functions as linalg_extra  # noqa: E402,F401
