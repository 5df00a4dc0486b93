"""Differentiable dense linear algebra with NumPy/SciPy names and conventions.

Each function traces to LAPACK/BLAS-named primitives (``potrf``, ``trsm``, ``trmm``,
``syrk``, ``potri``, ``gelqf``, ``geqrf``, ``syevd``, ``gesvd``, ``getrf``, ``geev``,
``trsyl``; ``det``, ``pinv``, ``expm``, ``sqrtm`` print as NumPy/SciPy's own) and accepts
leading batch axes ``(..., m, n)``, empty matrices included. Outside a trace they run the
same compiled code.

Conventions: ``cholesky`` returns the lower factor by default (SciPy's default is
upper: pass ``lower=False`` for it); ``solve_triangular`` follows SciPy
(``lower=False``, ``trans=0|1|2`` or ``'N'|'T'|'C'``) and adds ``side``; ``eigh``
returns ascending eigenvalues and eigenvectors in columns; ``svd`` returns
``u, s, vh`` with descending ``s``. Eigen- and singular vectors get a deterministic
phase: the largest-magnitude entry of each (left) vector is real positive.

Derivatives of ``eigh`` and ``svd`` divide by eigenvalue (singular value) gaps; values
closer than ``GAP_EPS * max|lambda|`` (1000 ulps: about 2.2e-13 relative in float64)
count as tied and their pair's coefficient is zero, which is exact for losses that see a
cluster of tied values only through its eigenspace and symmetric functions of its values
(projectors, ``tr f(A)``, sums over whole clusters of singular values): see the README.

>>> from pullback import linalg as pla
>>> A = np.array([[4.0, 2.0], [2.0, 3.0]])
>>> logdet = lambda A: 2 * np.sum(np.log(np.diag(pla.cholesky(A))))
>>> np.allclose(pb.grad(logdet)(A), np.linalg.inv(A))  # d log|A| / dA
True
>>> "potrf" in str(pb.make_ir(pla.cholesky)(A))
True
"""

from __future__ import annotations

import numpy as np

from pullback.errors import ArgumentError, ArgumentTypeError, LinAlgArgumentError, LinAlgError, TracingError
from pullback.frontend import numpy as pnp
from pullback.frontend.eyes import eye
from pullback.ir.tracer import Tracer, bind, current_builder, located, tracing
from pullback.ir.types import ArrayType
from pullback.primitives import lax
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import matrix_functions as lx
from pullback.primitives.linalg import rank_update as rk
from pullback.primitives.linalg.factorizations import GAP_EPS, Trans

__all__ = [
    "GAP_EPS", "cho_factor", "cho_solve", "cholesky", "cholesky_ex", "cholesky_inverse", "det", "eigh", "gemm", "inv",
    "logdet", "lq", "lu", "lu_factor", "lu_factor_ex", "lu_full_pivot", "lu_full_pivot_ex", "lu_solve", "qr",
    "slogdet", "solve", "solve_triangular", "svd", "syrk", "trmm", "eigvalsh", "lstsq", "matrix_power",
    "matrix_rank", "norm", "pinv", "eig", "eigvals", "expm", "expm_frechet", "sqrtm", "solve_sylvester",
    "solve_banded", "ger",
]


def _traced(fn):
    """Trace ``fn`` while a trace runs, whatever its operands: a constant one (an array made in the
    traced function, an integer one read from its scope) is the program's too, so a composition that
    mixes it with traced ones sees tracers only (an eager result would be NumPy values of another
    kind: ``info`` a Python int). Outside a trace, run it through a compiled program."""
    import functools

    from pullback.api.transforms import jit

    compiled: dict = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for a in args:  # (a loop, not ``any`` of a generator: this runs at every call traced)
            if isinstance(a, list):  # a nested list is an array (stacked, if it holds tracers)
                args = tuple(pnp._lift(a) if isinstance(a, list) else a for a in args)
                break
        if tracing():
            return fn(*args, **kwargs)
        static = tuple(i for i, a in enumerate(args) if not isinstance(a, np.ndarray | np.generic))
        arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray | np.generic)}  # alpha=np.float64(2)
        options = {k: v for k, v in kwargs.items() if k not in arrays}
        key = (static, tuple(sorted(arrays)), tuple(sorted(options.items())))
        if key not in compiled:
            compiled[key] = jit(functools.partial(fn, **options), static_argnums=static)
        return compiled[key](*args, **arrays)

    return wrapper


# --- argument checks: NumPy's (SciPy's) error types, naming the user's call and file:line -----------


def _caller(name: str) -> str:
    """The function the user called: the NumPy function being lowered, else ``pullback.linalg.name``."""
    try:
        lowering = current_builder().lowering
    except TracingError:  # no trace: a direct call on concrete arrays
        lowering = None
    return lowering or f"pullback.linalg.{name}"


def _check_matrix(a, name: str, square: bool = True, what: str = "array") -> None:
    """NumPy's LinAlgError (a ValueError, as SciPy raises, and a TracingError) for fewer than two
    axes or a non-square matrix; NumPy's TypeError for float16. Integers are computed in float64."""
    _check_half(a, name)
    shape = pnp._shape_of(a)  # (``np.shape`` of a tracer dispatches through ``__array_function__``)
    if len(shape) < 2:
        raise LinAlgArgumentError(located(f"{_caller(name)}: {len(shape)}-dimensional {what} given. "
                                  f"Array must be at least two-dimensional, got shape {shape}"))
    if square and shape[-1] != shape[-2]:
        raise LinAlgArgumentError(located(f"{_caller(name)}: Last 2 dimensions of the {what} must be square, "
                                  f"got shape {shape}"))


def _check_rhs(a, b, name: str, left: bool = True, a_name: str = "a") -> None:
    """NumPy's ValueError for a right-hand side ``b`` that does not fit the square ``a``: ``b`` is
    a vector (n,) or a stack of matrices (..., n, k) (``(..., k, n)`` on the right), batch axes broadcasting."""
    _check_half(b, name)
    a_shape, b_shape = pnp._shape_of(a), pnp._shape_of(b)
    n = a_shape[-1]
    if len(b_shape) == 1:
        fits = b_shape[0] == n
    else:
        fits = len(b_shape) >= 2 and b_shape[-2 if left else -1] == n
    if fits and len(b_shape) > 2:
        try:
            np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
        except ValueError:
            fits = False
    if not fits:
        want = f"({n},) or (..., {n}, k)" if left else f"({n},) or (..., k, {n})"
        raise ArgumentError(located(f"{_caller(name)}: incompatible shapes: {a_name} {a_shape} does not fit "
                                    f"b {b_shape} (b must have shape {want}: b is a vector only when b.ndim == 1; "
                                    f"batch axes broadcast with {a_name}'s)"))


_HALF, _DOUBLE = np.dtype(np.float16), np.dtype(np.float64)


def _check_half(x, name: str) -> None:
    if getattr(x, "dtype", None) == _HALF:  # (a dtype, not ``np.float16``: compared without converting it)
        raise ArgumentTypeError(located(f"{_caller(name)}: array type float16 is unsupported in linalg"))


def _float(a):
    """``a`` as a float/complex array value (integer matrices are promoted like NumPy does;
    half precision is refused, as NumPy does: LAPACK has no float16)."""

    _no_half(a.dtype)
    if a.dtype.kind not in "fc":
        return pnp.astype(a, np.float64)
    return a


def _no_half(dtype) -> None:
    if dtype is not _DOUBLE and np.dtype(dtype) == _HALF:
        raise TypeError(located("array type float16 is unsupported in linalg"))


def _trans(trans) -> Trans:
    if isinstance(trans, str):
        try:
            return Trans[trans.upper()]
        except KeyError:
            raise ValueError(located(f"trans must be 0, 1, 2 or 'N', 'T', 'C'; got {trans!r}")) from None
    if trans not in (0, 1, 2):
        raise ValueError(located(f"trans must be 0, 1, 2 or 'N', 'T', 'C'; got {trans!r}"))
    return Trans(trans)


def _side(side: str) -> bool:
    if side not in ("left", "right"):
        raise ValueError(located(f"side must be 'left' or 'right'; got {side!r}"))
    return side == "left"


def _mT(x):

    return pnp.matrix_transpose(x)


def _H(x):

    return pnp.conj(_mT(x))


def _potrf(a, lower: bool, check: bool):
    """``(L, info)``, L L^H the Hermitian matrix of ``a``'s lower (upper) triangle: the one factorisation
    that cholesky, solve(assume_a='pos') and logdet share (CSE) when they read the same triangle."""
    return bind(la.potrf_p, a if lower else _H(a), check=check)


@_traced
def cholesky(a, lower: bool = True):
    """The Cholesky factor of a symmetric (Hermitian) positive definite matrix: lower L
    with A = L L^H, or upper U = L^H, from A's lower (upper) triangle, as LAPACK and SciPy read it.
    Raises ``pullback.LinAlgError`` if A is not positive definite (LAPACK's info: the order of
    the failing leading minor)."""
    _check_matrix(a, "cholesky")
    l, _ = _potrf(_float(a), lower, check=True)
    return l if lower else _H(l)


@_traced
def cholesky_ex(a, lower: bool = True):
    """``(factor, info)``: like ``cholesky`` but reports failure in ``info`` (0 on success,
    else the order of the failing leading minor) instead of raising, for retry-with-jitter."""
    _check_matrix(a, "cholesky_ex")
    l, info = _potrf(_float(a), lower, check=False)
    return (l if lower else _H(l)), info


def _matrix_rhs(b, side_left: bool):
    """A vector right-hand side as a one-column (one-row) matrix, and how to undo it."""

    if b.ndim == 1:  # NumPy 2: b is a vector only when b.ndim == 1; batch axes come from A
        shape = (b.shape[0], 1) if side_left else (1, b.shape[0])
        if side_left:
            return pnp.reshape(b, shape), lambda x: pnp.reshape(x, x.shape[:-1])
        return pnp.reshape(b, shape), lambda x: pnp.reshape(x, x.shape[:-2] + x.shape[-1:])
    return b, lambda x: x


def _common(a, b):

    dt = pnp.result_dtype(a, b)
    _no_half(dt)
    dt = dt if dt.kind in "fc" else np.dtype(np.float64)
    return pnp.astype(a, dt), pnp.astype(b, dt)


def _batch(a, b, side_left: bool):
    """Broadcast the batch axes of a triangular matrix and a right-hand side."""

    if a.ndim == 2 and b.ndim == 2:  # no batch axes (nearly every call): nothing to broadcast
        return a, b
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return pnp.broadcast_to(a, batch + a.shape[-2:]), pnp.broadcast_to(b, batch + b.shape[-2:])


def _triangular(prim, a, b, lower, trans, side, unit_diagonal, **params):
    left = _side(side)
    a, b = _common(a, b)
    if a.ndim < 2:
        raise TracingError(located(f"the triangular matrix must have at least 2 axes, got shape {a.shape}"))
    b, undo = _matrix_rhs(b, left)
    a, b = _batch(a, b, left)
    return undo(bind(prim, a, b, left=left, lower=bool(lower), trans=_trans(trans),
                     unit_diagonal=bool(unit_diagonal), **params))


@_traced
def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False, side: str = "left"):
    """X with op(A) X = B (``side='left'``) or X op(A) = B (``side='right'``), op(A) = A, A^T
    or A^H for ``trans`` 0/'N', 1/'T', 2/'C'; only A's lower or upper triangle is read.
    ``b`` may be a vector. Raises ``pullback.LinAlgError`` on a zero diagonal entry."""
    _check_matrix(a, "solve_triangular")
    _check_rhs(a, b, "solve_triangular", _side(side))
    return _triangular(la.trsm_p, a, b, lower, trans, side, unit_diagonal, check=True)


@_traced
def trmm(a, b, lower: bool = True, trans=0, side: str = "left", unit_diagonal: bool = False, alpha=1.0):
    """``alpha op(T) B`` (left) or ``alpha B op(T)``, T the lower/upper triangle of A."""
    _check_matrix(a, "trmm")
    _check_rhs(a, b, "trmm", _side(side))
    if isinstance(alpha, int | float) and not isinstance(alpha, bool):  # a real scale is BLAS's alpha
        return _triangular(la.trmm_p, a, b, lower, trans, side, unit_diagonal,
                           **({} if alpha == 1.0 else {"alpha": float(alpha)}))
    return _triangular(la.trmm_p, a, b, lower, trans, side, unit_diagonal) * alpha


@_traced
def ger(a, x, y, alpha=1.0):
    """``a + alpha outer(x, y)`` (BLAS ger, geru for complex: no conjugate), a rank-1 update."""
    _check_matrix(a, "ger", square=False)
    a = _float(a)
    x, y = (np.asarray(v, a.dtype) if not isinstance(v, Tracer) else v.astype(a.dtype) for v in (x, y))
    if isinstance(alpha, int | float) and not isinstance(alpha, bool):  # a real scale is BLAS's alpha
        return bind(rk.ger_p, a, x, y, **({} if alpha == 1.0 else {"alpha": float(alpha)}))
    return bind(rk.ger_p, a, x * alpha, y)


@_traced
def syrk(a, trans: bool = False, alpha=1.0):
    """``alpha A A^T`` (or ``alpha A^T A`` with ``trans``) as a full symmetric matrix;
    A A^H for complex A (herk)."""
    _check_matrix(a, "syrk", square=False)
    return _scaled(bind(la.syrk_p, _float(a), trans=bool(trans)), alpha)


@_traced
def gemm(a, b, alpha=1.0, trans_a: bool = False, trans_b: bool = False):
    """``alpha op(A) op(B)`` with op the transpose where asked (dot_general underneath)."""
    a, b = _common(a, b)
    return _scaled((_mT(a) if trans_a else a) @ (_mT(b) if trans_b else b), alpha)


def _scaled(out, alpha):
    """``alpha * out``, skipped for a Python 1 (a traced or array ``alpha`` is never compared)."""
    return out if isinstance(alpha, int | float) and alpha == 1.0 else out * alpha


@_traced
def cholesky_inverse(l, lower: bool = True):
    """(L L^H)^{-1} from a Cholesky factor (lower L, or upper U = L^H), full matrix."""
    _check_matrix(l, "cholesky_inverse", what="factor")
    l = _float(l)
    return bind(la.potri_p, l if lower else _H(l))


@_traced
def lq(a):
    """``(l, q)`` with A = L Q for m <= n: L (m, m) lower triangular, Q (m, n) with orthonormal rows."""
    _check_matrix(a, "lq", square=False)
    return bind(la.gelqf_p, _float(a))


@_traced
def qr(a, mode: str = "reduced"):
    """``(q, r)`` with A = Q R, k = min(m, n): Q (m, k) with orthonormal columns, R (k, n)
    upper triangular (trapezoidal for a wide A), as NumPy's ``mode='reduced'``."""
    _check_matrix(a, "qr", square=False)
    if mode not in ("reduced", "complete", "r", "raw", "full", "f", "economic", "e"):  # NumPy's, some deprecated
        raise ValueError(f"Unrecognized mode '{mode}'")
    if mode == "complete" and a.shape[-2] <= a.shape[-1]:
        mode = "reduced"  # a square or wide A: Q is m x m either way
    if mode not in ("reduced", "r"):
        raise TracingError(located(f"np.linalg.qr with mode={mode!r} is not supported on traced values by pullback: "
                                   "only mode='reduced' (and 'complete' of a square or wide matrix; 'r', R alone) is "
                                   "differentiable"))
    q, r = bind(la.geqrf_p, _float(a))
    return r if mode == "r" else (q, r)


@_traced
def eigh(a, UPLO: str = "L"):
    """``(w, v)``: eigenvalues ascending, eigenvectors in columns, of a symmetric (Hermitian)
    matrix; the lower triangle is read (the upper with ``UPLO='U'``), as NumPy does.

    What is computed, and differentiated, is the decomposition of ``tril(A) + tril(A, -1)^H``
    (``triu(A) + triu(A, 1)^H`` for 'U'): for a non-symmetric ``A`` the value is NumPy's and the
    derivative is that value's (as in autograd); the gradient with respect to ``A`` lies in the
    triangle read, the diagonal once and the off-diagonal part twice, since the other triangle
    is never read. (JAX symmetrises ``(A + A^H) / 2`` instead, which changes the value for a
    non-symmetric ``A``.)"""
    _check_matrix(a, "eigh")
    UPLO = UPLO.upper() if isinstance(UPLO, str) else UPLO
    if UPLO not in ("L", "U"):
        raise ValueError(located(f"UPLO must be 'L' or 'U'; got {UPLO!r}"))
    a = _float(a)
    if UPLO == "U":
        return bind(la.syevd_p, lax.add(lax.triu(a), lax.H(lax.triu(a, 1))), lower=False)
    return bind(la.syevd_p, lax.add(lax.tril(a), lax.H(lax.tril(a, -1))), lower=True)


def eigvalsh(a, UPLO: str = "L"):
    """The eigenvalues of ``eigh``, ascending."""
    return eigh(a, UPLO)[0]


@_traced
def svd(a, full_matrices: bool = False, compute_uv: bool = True):
    """``(u, s, vh)`` with A = U diag(s) V^H, thin (k = min(m, n)), ``s`` descending;
    just ``s`` with ``compute_uv=False``. Full matrices are not differentiable for m != n."""
    _check_matrix(a, "svd", square=False)
    a = _float(a)
    if compute_uv and full_matrices and a.shape[-1] != a.shape[-2]:
        raise TracingError(located(
            f"svd of a non-square {a.shape[-2]}x{a.shape[-1]} matrix with full_matrices=True is not supported "
            "(NumPy's default); pass full_matrices=False"))
    u, s, vh = bind(la.gesvd_p, a)
    return (u, s, vh) if compute_uv else s


@_traced
def logdet(a, lower: bool = False):
    """log det A of a symmetric positive definite A, as 2 sum(log(diag(cholesky(A)))), from the
    triangle ``lower`` names: the upper one by default, as ``solve(..., assume_a='pos')`` and
    SciPy's Cholesky routines read it, so that both share one factorisation."""
    _check_matrix(a, "logdet")
    a = _float(a)
    l, _ = _potrf(a, lower, check=True)
    return bind(fa.po_logdet_p, a, l)


def cho_factor(a, lower: bool = False):
    """``(c, lower)`` as in SciPy, with c the triangular factor (the other triangle zero)."""
    _check_matrix(a, "cho_factor")
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b):
    """X with A X = B from ``cho_factor``'s output: two triangular solves, no inverse."""
    c, lower = c_and_lower
    _check_matrix(c, "cho_solve", what="factored matrix c")
    _check_rhs(c, b, "cho_solve", a_name="c")
    return _cho_solve(c, b, bool(lower))


@_traced
def _cho_solve(c, b, lower: bool):
    if lower:
        y = solve_triangular(c, b, lower=True)
        return solve_triangular(c, y, lower=True, trans=2)
    y = solve_triangular(c, b, lower=False, trans=2)
    return solve_triangular(c, y, lower=False)


@_traced
def solve(a, b, assume_a: str = "gen", lower: bool = False):
    """X with A X = B: LU with partial pivoting (``assume_a='gen'``) or, for a symmetric
    positive definite A (``assume_a='pos'``), Cholesky; then triangular solves, never an
    inverse. Raises ``pullback.LinAlgError`` on a singular (not positive definite) A."""
    _check_matrix(a, "solve")
    _check_rhs(a, b, "solve")
    if assume_a not in ("gen", "general", "pos", "positive definite"):
        raise ValueError(located(f"assume_a must be 'gen' or 'pos'; got {assume_a!r}"))

    a, b = _common(a, b)
    left_b, undo = _matrix_rhs(b, True)
    batch = np.broadcast_shapes(a.shape[:-2], left_b.shape[:-2])

    def wide(*xs):  # A is factored once per matrix it holds, then broadcast with its factors
        return [pnp.broadcast_to(x, batch + x.shape[a.ndim - 2:]) for x in xs]

    rhs = pnp.broadcast_to(left_b, batch + left_b.shape[-2:])
    if assume_a in ("pos", "positive definite"):  # the triangle ``lower`` names is read, as SciPy's
        # differentiated at the solve: potrs with potrf's lower factor L, A = L L^H (shared by CSE)
        l, _ = _potrf(a, lower, check=True)
        return undo(bind(fa.posv_p, *wide(a, l), rhs))
    lu, piv, _, info = _getrf(a)  # unchecked, so that slogdet of the same matrix shares it: gesv checks info
    return undo(bind(fa.gesv_p, *wide(a, lu, piv, info), rhs))


# --- LU -------------------------------------------------------------------------------------


@_traced
def _getrf(a, check: bool = False):
    """(lu, piv, perm, info) of the partially pivoted LU factorisation P A = L U."""
    return bind(la.getrf_p, _float(a), check=check)


def _lu_solve(lu, perm, b, trans: int = 0):
    """A X = B from P A = L U: X = U^{-1} L^{-1} (P B); with ``trans`` the transposed system."""

    a_like, b = _common(lu, b)
    left_b, undo = _matrix_rhs(b, True)
    if left_b.shape[-2] != lu.shape[-1]:
        raise TracingError(located(f"numpy.linalg.solve: a {lu.shape[-2]}x{lu.shape[-1]} system does not fit a "
                                   "right-hand side "
                                   f"of shape {b.shape} (b is a vector only when b.ndim == 1)"))
    lu, left_b = _batch(a_like, left_b, True)
    perm = pnp.broadcast_to(perm, lu.shape[:-1])
    t = _trans(trans)
    if t == Trans.N:
        y = bind(la.trsm_p, lu, _permute(left_b, perm), left=True, lower=True, trans=t, unit_diagonal=True,
                 check=False)
        return undo(bind(la.trsm_p, lu, y, left=True, lower=False, trans=t, unit_diagonal=False, check=False))
    y = bind(la.trsm_p, lu, left_b, left=True, lower=False, trans=t, unit_diagonal=False, check=False)
    y = bind(la.trsm_p, lu, y, left=True, lower=True, trans=t, unit_diagonal=True, check=False)
    return undo(bind(la.unpermute_p, y, perm))


def _permute(x, perm):
    return bind(la.permute_p, x, perm)


@_traced
def lu(a):
    """``(p, l, u)`` with A = P L U (SciPy's convention; the LU notes write P^T A = L U):
    P (M, M) a permutation matrix, L (M, K) unit lower triangular, U (K, N) upper, K = min(M, N).
    A singular A factors without error (LAPACK semantics)."""
    _check_matrix(a, "lu", square=False)
    packed, _, perm, _ = _getrf(a)
    m, n = packed.shape[-2:]
    k = min(m, n)
    l = np.tril(packed[..., :, :k], -1) + eye(m, k, dtype=packed.dtype)
    u = np.triu(packed[..., :k, :])
    p = (lax.iota(perm.dtype, (m, 1), 0) == perm[..., None, :]).astype(np.finfo(packed.dtype).dtype)
    return p, l, u


@_traced
def lu_factor(a):
    """``(lu, piv)`` as in SciPy: the packed factors (differentiable) and LAPACK's 0-based
    pivots (metadata)."""
    _check_matrix(a, "lu_factor", square=False)
    packed, piv, _, _ = _getrf(a)
    return packed, piv


@_traced
def lu_factor_ex(a):
    """``(lu, piv, info)``: ``info`` > 0 reports an exactly singular U (U[info-1, info-1] = 0)."""
    _check_matrix(a, "lu_factor_ex", square=False)
    packed, piv, _, info = _getrf(a)
    return packed, piv, info


def lu_solve(lu_and_piv, b, trans: int = 0):
    """X with A X = B (``trans``: A^T X = B, A^H X = B) from ``lu_factor``'s output."""
    packed, piv = lu_and_piv
    _check_matrix(packed, "lu_solve", what="factored matrix lu")
    _check_rhs(packed, b, "lu_solve", a_name="lu")
    return _lu_solve_traced(packed, _perm_of(piv, packed), b, int(_trans(trans)))


@_traced
def _lu_solve_traced(packed, perm, b, trans: int):
    return _lu_solve(packed, perm, b, trans)


def _perm_of(piv, packed):
    """The row permutation of the factorisation that produced ``piv``."""
    if isinstance(piv, Tracer):  # it came from getrf in this trace: take its sibling output
        for eqn in reversed(piv.builder.eqns):
            if eqn.prim is la.getrf_p and eqn.outputs[1] is piv.ssa:
                return Tracer(eqn.outputs[2], piv.builder)
        raise TracingError(located("lu_solve needs the pivots returned by lu_factor in the same function"))
    piv = np.asarray(piv)
    perm = np.broadcast_to(np.arange(packed.shape[-2], dtype=np.int32), piv.shape[:-1] + packed.shape[-2:-1]).copy()
    for idx in np.ndindex(piv.shape[:-1]):
        for i, j in enumerate(piv[idx]):
            perm[idx + (i,)], perm[idx + (j,)] = perm[idx + (j,)], perm[idx + (i,)]
    return perm


@_traced
def lu_full_pivot(a):
    """``(p, q, l, u)`` with A = P L U Q by complete pivoting (the notes' P A Q = L U with
    their P, Q the transposes of these), for square, wide and tall A. Rank deficiency does
    not raise: see ``lu_full_pivot_ex``."""
    _check_matrix(a, "lu_full_pivot", square=False)
    return lu_full_pivot_ex(a)[:4]


@_traced
def lu_full_pivot_ex(a):
    """``(p, q, l, u, sign, info)``: also det(P Q) = +-1 and info (k > 0: the k-th pivot is
    exactly zero, so rank(A) = k - 1). Permutations, sign and info are metadata."""
    _check_matrix(a, "lu_full_pivot_ex", square=False)
    packed, rperm, cperm, sign, info = bind(la.getc2_p, _float(a))
    m, n = packed.shape[-2:]
    k = min(m, n)
    real = np.finfo(packed.dtype).dtype
    l = np.tril(packed[..., :, :k], -1) + eye(m, k, dtype=packed.dtype)
    u = np.triu(packed[..., :k, :])
    p = (lax.iota(rperm.dtype, (m, 1), 0) == rperm[..., None, :]).astype(real)
    q = (cperm[..., :, None] == lax.iota(cperm.dtype, (1, n), 1)).astype(real)
    return p, q, l, u, sign, info


@_traced
def inv(a):
    """A^{-1} by LU and triangular solves against the identity (prefer ``solve``)."""
    a = _float(_square(a, "inv"))
    lu, piv, _, info = _getrf(a)
    return bind(fa.getri_at_p, a, lu, piv, info)  # getri; differentiated as dX = -X dA X


def _square(a, name: str):
    """NumPy's check: the last two axes of a square-matrix operator's argument."""
    _check_matrix(a, name)
    return a


@_traced
def slogdet(a):
    """``(sign, logabsdet)`` from the LU factors: sign is +-1 (a unit complex number for
    complex A; 0 when A is singular), logabsdet = sum log |U_ii|."""
    a = _float(_square(a, "slogdet"))
    packed, piv, _, _ = _getrf(a)
    k = packed.shape[-1]
    d = np.diagonal(packed, 0, -2, -1)
    logabsdet = bind(fa.lu_logabsdet_p, a, packed, piv)  # differentiated at the solve: A^{-T} by getri
    swaps = np.sum(piv != lax.iota(piv.dtype, (k,), 0), axis=-1)
    if d.dtype.kind == "c":
        sign = np.exp(np.sum(np.log(d / np.abs(d)), axis=-1)) * (-1.0) ** swaps
    else:
        sign = (-1.0) ** (swaps + np.sum(d < 0, axis=-1))
    singular = np.sum(d == 0, axis=-1) > 0
    return np.where(singular, 0.0, sign), logabsdet


@_traced
def det(a):
    """det A (LU underneath). Its derivative is the adjugate, tr(adj(A) dA), exact and
    finite at singular A too (``pullback.primitives.linalg.matrix_functions.adjugate``)."""
    a = _float(_square(a, "det"))
    lu, piv, _, _ = _getrf(a)  # shared with solve, inv, slogdet of the same matrix
    return bind(lx.det_p, a, lu, piv)


# --- NumPy's matrix functions: powers, rank, norms ----------------------------------------------


@_traced
def matrix_power(a, n: int):
    """A^n for an integer n by repeated squaring (NumPy's order of products); n < 0 inverts
    first, n = 0 gives the identity."""
    import operator

    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(located("exponent must be an integer")) from None
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise LinAlgError(located(f"matrix_power: last 2 dimensions of the array must be square, got {a.shape}"))
    if n == 0:  # pullback's broadcast: the identity stays an ``eye`` equation, not a constant

        return pnp.broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape) + np.zeros_like(a)
    if n < 0:
        a, n = inv(a), -n
    result, z = None, a
    while n:  # NumPy's binary decomposition: z = a^(2^k), result picks the set bits
        if n & 1:
            result = z if result is None else result @ z
        n >>= 1
        if n:
            z = z @ z
    return result


@_traced
def matrix_rank(a, tol=None, hermitian: bool = False, *, rtol=None):
    """The number of singular values above ``tol`` (default ``max(m, n) eps max(s)``, or
    ``rtol max(s)``), as NumPy; an integer, with no derivative."""

    if rtol is not None and tol is not None:
        raise ValueError(located("`tol` and `rtol` can't be both set."))
    if a.ndim < 2:
        return pnp.astype(np.sum(pnp.astype(a != 0, np.int64)) > 0, np.int64)
    if 0 in a.shape[-2:]:
        return pnp.zeros_like(a, dtype=np.int64, shape=a.shape[:-2])
    a = _float(a)
    s = np.abs(eigh(a)[0]) if hermitian else svd(a, compute_uv=False)
    if tol is None:
        rtol = max(a.shape[-2:]) * np.finfo(s.dtype).eps if rtol is None else np.asarray(rtol)[..., None]
        tol = np.max(s, axis=-1, keepdims=True) * rtol
    else:
        tol = np.asarray(tol)[..., None] if not isinstance(tol, Tracer) else tol[..., None]
    return np.sum(pnp.astype(s > tol, np.int64), axis=-1)


@_traced
def norm(x, ord=None, axis=None, keepdims: bool = False):
    """NumPy's ``linalg.norm``: vector norms (any p, 0 counts nonzeros, +-inf) along one
    axis, matrix norms ('fro', 'nuc', +-1, +-2, +-inf) over two; the 2 and nuclear norms
    through the singular values."""

    if x.dtype.kind not in "fc":
        x = pnp.astype(x, np.float64)
    nd = x.ndim
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            out = _sqrt_sum_squares(x.reshape(-1), 0)
            return pnp.reshape(out, (1,) * nd) if keepdims else out
        if nd not in (1, 2):
            raise ValueError(located("Improper number of dimensions to norm."))
        axis = tuple(range(nd))
    axis = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    axis = tuple(int(a) % nd if -nd <= a < nd else _bad_axis(a, nd) for a in axis)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis[0], keepdims)
    if len(axis) == 2:
        if axis[0] == axis[1]:
            raise ValueError(located("Duplicate axes given."))
        return _matrix_norm(x, ord, axis, keepdims)
    raise ValueError(located("Improper number of dimensions to norm."))


def _bad_axis(a, nd):
    raise np.exceptions.AxisError(a, nd)


def _sqrt_sum_squares(x, axis, keepdims=False):

    sq = np.real(x * np.conj(x)) if x.dtype.kind == "c" else x * x
    return np.sqrt(pnp.sum(sq, axis=axis, keepdims=keepdims))


def _vector_norm(x, ord, axis: int, keepdims: bool):

    if isinstance(ord, str):
        raise ValueError(located(f"Invalid norm order '{ord}' for vectors"))
    if ord is None or ord == 2:
        return _sqrt_sum_squares(x, axis, keepdims)
    a = np.abs(x)
    if ord == np.inf:  # NumPy's initial=0: zero over an empty axis
        return np.max(a, axis=axis, keepdims=keepdims, initial=0)
    if ord == -np.inf:
        return np.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return pnp.sum(pnp.astype(x != 0, a.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return pnp.sum(a, axis=axis, keepdims=keepdims)
    if not isinstance(ord, int | float | np.integer | np.floating):
        raise TypeError(f"Invalid norm order {ord!r} for vectors")
    p = float(ord)
    return pnp.sum(a ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


def _matrix_norm(x, ord, axis: tuple[int, int], keepdims: bool):

    row, col = axis
    if ord in (2, -2, "nuc"):
        s = svd(pnp.moveaxis(x, (row, col), (-2, -1)), compute_uv=False)
        out = np.max(s, axis=-1, initial=0) if ord == 2 else (np.min(s, axis=-1) if ord == -2 else pnp.sum(s, axis=-1))
    elif ord in (1, -1, np.inf, -np.inf):
        summed, reduced = (row, col) if ord in (1, -1) else (col, row)
        reduced -= reduced > summed
        sums = pnp.sum(np.abs(x), axis=summed)
        out = np.max(sums, axis=reduced, initial=0) if ord > 0 else np.min(sums, axis=reduced)  # as NumPy's
    elif ord in (None, "fro", "f"):
        out = _sqrt_sum_squares(x, axis)
    else:
        raise ValueError(located("Invalid norm order for matrices."))
    if keepdims:
        shape = list(x.shape)
        shape[row] = shape[col] = 1
        out = pnp.reshape(out, tuple(shape))
    return out


# --- pseudo-inverse and least squares --------------------------------------------------------------

_NO_VALUE = object()


@_traced
def pinv(a, rcond=None, hermitian: bool = False, *, rtol=_NO_VALUE):
    """The Moore-Penrose pseudo-inverse by the SVD, NumPy's cutoff: singular values at or
    below ``rcond * max(s)`` are dropped (``rcond`` 1e-15 by default; ``rtol=None`` means
    ``max(m, n) eps``). ``hermitian=True`` reads the lower triangle, as NumPy's eigh-based
    path. The derivative (Golub-Pereyra) is exact where the rank is locally constant."""
    if rcond is None:
        rcond = 1e-15 if rtol is _NO_VALUE else (max(a.shape[-2:]) * np.finfo(_float(a).dtype).eps
                                                   if rtol is None else rtol)
    elif rtol is not _NO_VALUE:
        raise ValueError(located("`rtol` and `rcond` can't be both set."))
    if np.ndim(rcond) != 0 or isinstance(rcond, Tracer):
        raise TracingError(located("pinv: rcond must be a Python number (one cutoff for every matrix)"))
    a = _float(a)
    if hermitian:
        a = np.tril(a) + _H(np.tril(a, -1))
    return bind(lx.pinv_p, a, rcond=float(rcond))


@_traced
def lstsq(a, b, rcond=None):
    """NumPy's ``(x, residuals, rank, s)`` for a full-rank A (M, N): x minimises |b - A x|
    (through QR for M >= N, the minimum-norm solution through LQ for M < N; differentiable),
    residuals the squared column norms of b - A x when M > N (shape (K,), (1,) for a vector
    b; else empty), rank and s as NumPy computes them (``rcond`` default ``eps max(M, N)``).
    Unlike NumPy, whose residuals are empty when rank < N, the residuals keep their shape:
    use ``pinv(a) @ b`` for rank-deficient A."""

    a, b = _common(_float(a), b)
    if a.ndim != 2 or b.ndim not in (1, 2):
        raise LinAlgError(located(f"lstsq: a must be 2-dimensional and b 1- or 2-dimensional, got {a.shape}, "
                                  f"{b.shape}"))
    m, n = a.shape
    if b.shape[0] != m:
        raise LinAlgError(located(f"lstsq: incompatible dimensions {a.shape} and {b.shape}"))
    b2 = b if b.ndim == 2 else pnp.reshape(b, (m, 1))
    if 0 in (m, n):
        x = pnp.zeros_like(b2, shape=(n, b2.shape[1]))
    elif m >= n:
        q, r = qr(a)
        x = solve_triangular(r, _H(q) @ b2)
    else:
        l, q = lq(a)
        x = _H(q) @ solve_triangular(l, b2, lower=True)
    if m > n:
        res = b2 - a @ x
        residuals = np.sum(np.real(res * np.conj(res)) if res.dtype.kind == "c" else res * res, axis=0)
    else:
        residuals = pnp.zeros_like(np.real(b2), shape=(0,))
    s = svd(a, compute_uv=False)
    if rcond is None:
        rcond = np.finfo(s.dtype).eps * max(m, n)
    elif rcond < 0:  # LAPACK gelsd: machine precision
        rcond = np.finfo(s.dtype).eps
    if 0 in (m, n):
        rank = pnp.zeros_like(s, dtype=np.int32, shape=())
    else:
        rank = pnp.astype(np.sum(pnp.astype(s > rcond * np.max(s), np.int32)), np.int32)
    return (x if b.ndim == 2 else pnp.reshape(x, (n,))), residuals, rank, s


# --- the general eigenproblem -------------------------------------------------------------------


@_traced
def eig(a):
    """``(w, v)`` with A v_j = w_j v_j for a general square A (LAPACK geev, NumPy's order),
    always complex (NumPy returns real arrays when every eigenvalue is real, a dtype that
    depends on values). Eigenvectors: unit 2-norm columns, as NumPy, with pullback's phase
    (largest-magnitude entry real positive). Differentiable for distinct eigenvalues."""
    return bind(lx.geev_p, _float(_square(a, "eig")))


def eigvals(a):
    """The eigenvalues of ``eig`` (complex, LAPACK's order)."""
    return eig(a)[0]


# --- matrix functions (scipy.linalg) ------------------------------------------------------------


@_traced
def expm(a):
    """The matrix exponential (SciPy's expm). Its derivative is the Frechet derivative
    L(A, E), the upper right block of expm([[A, E], [0, A]]), computed by SciPy's
    expm_frechet; the adjoint is L(A^H, .)."""
    return bind(lx.expm_p, _float(_square(a, "expm")))


@_traced
def sqrtm(a):
    """The principal square root X (X X = A, eigenvalues in the right half plane), SciPy's
    sqrtm. dX solves the Sylvester equation X dX + dX X = dA.

    SciPy returns a complex root for a real A with negative real eigenvalues, a real one otherwise:
    the dtype depends on the values. A traced program has one dtype, so it follows the arguments it
    is first called with (``example_value``): complex if SciPy's root is complex there. A later call
    whose real matrix needs the other case raises a LinAlgError that says to pass a complex matrix."""
    from pullback.frontend.examples import example_value

    a = _float(_square(a, "sqrtm"))
    if a.dtype.kind == "f" and isinstance(a, Tracer):
        value = example_value(a)
        if value is not None and _complex_root(value):
            a = pnp.astype(a, np.result_type(a.dtype, np.complex64))
    return bind(lx.sqrtm_p, a)


def _complex_root(value: np.ndarray) -> bool:
    """Whether SciPy's sqrtm of this real matrix (or batch) is complex."""
    import warnings

    import scipy.linalg

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return bool(np.iscomplexobj(scipy.linalg.sqrtm(value)))
        except Exception:
            return False


@_traced
def solve_sylvester(a, b, q):
    """X with A X + X B = Q (SciPy's solve_sylvester: Bartels-Stewart through Schur forms and
    LAPACK trsyl). Differentiable in A, B and Q."""

    dt = pnp.result_dtype(a, b, q)
    dt = dt if dt.kind in "fc" else np.dtype(np.float64)
    a, b, q = (pnp.astype(x, dt) for x in (a, b, q))
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2], q.shape[:-2])
    a, b, q = (pnp.broadcast_to(x, batch + x.shape[-2:]) for x in (a, b, q))
    return bind(lx.trsyl_p, a, b, q)


@_traced
def expm_frechet(a, e, compute_expm: bool = True):
    """SciPy's ``expm_frechet``: ``(expm(A), L(A, E))``, or L(A, E) alone with
    ``compute_expm=False``; L is linear in E (its transpose is L(A^H, .))."""

    a, e = _common(_float(_square(a, "expm_frechet")), e)
    e = pnp.broadcast_to(e, a.shape)
    frechet = bind(lx.expm_frechet_p, a, e)
    return (bind(lx.expm_p, a), frechet) if compute_expm else frechet


@_traced
def solve_banded(l_and_u, ab, b, overwrite_ab: bool = False, overwrite_b: bool = False, check_finite: bool = True):
    """SciPy's ``solve_banded((l, u), ab, b)``: x with A x = b for the banded A stored as
    ``ab[u + i - j, j] = A[i, j]``, ``b`` a vector or a matrix (no batch axes). Differentiable in
    ``ab`` and ``b``: dx = A^{-1} (db - dA x), with ``dA x`` the banded product of the tangent's
    storage; the gradient of ``ab`` is the band of ``-(A^{-H} g) x^H`` in the same storage (its
    corners outside the band get zero). The overwrite and check flags are SciPy's business."""

    lower, upper = (int(v) for v in l_and_u)
    ab, b = _common(pnp._lift(ab), pnp._lift(b))
    if ab.ndim != 2 or b.ndim not in (1, 2):
        raise TracingError(located(f"solve_banded of a band of shape {ab.shape} and a right-hand side of shape "
                                   f"{b.shape}: batch axes are not supported on traced values"))
    if lower < 0 or upper < 0 or lower + upper + 1 != ab.shape[0]:
        raise TracingError(located(f"solve_banded: invalid values for the number of lower and upper diagonals: "
                                   f"l+u+1 ({lower + upper + 1}) does not equal ab.shape[0] ({ab.shape[0]})"))
    if ab.shape[1] != b.shape[0]:
        raise TracingError(located(f"solve_banded: shapes of ab {ab.shape} and b {b.shape} are not compatible"))
    if b.size == 0:
        return lax.zeros(ArrayType(b.shape, b.dtype))
    return lax.gbsv(ab, b, lower, upper)
