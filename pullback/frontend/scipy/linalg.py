"""``scipy.linalg`` functions by their SciPy names on traced arrays: SciPy converts its arguments
with ``np.asarray``, so while a trace runs these names stand in for SciPy's
(``construct.implements_attribute``), with SciPy's signatures and defaults (``cholesky`` is upper
by default, ``svd`` and ``qr`` full), over pullback.linalg. Arguments about SciPy's memory
(``overwrite_*``, ``check_finite``, ``lwork``, drivers) do not change values and are accepted. The
other scipy.linalg functions still refuse, naming the pullback.linalg function to use."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pullback.errors import ArgumentError, TracingError
from pullback.frontend.construct import implements_attribute
from pullback.frontend.numpy import unsupported
from pullback.ir.tracer import eye, located


@implements_attribute(scipy.linalg, "expm", "scipy.linalg.expm")
def expm(A):
    from pullback.frontend import linalg

    return linalg.expm(A)


@implements_attribute(scipy.linalg, "sqrtm", "scipy.linalg.sqrtm")
def sqrtm(A, disp=True, blocksize=64):
    from pullback.frontend import linalg

    if not disp:
        unsupported("scipy.linalg.sqrtm with disp=False")
    return linalg.sqrtm(A)


@implements_attribute(scipy.linalg, "solve_sylvester", "scipy.linalg.solve_sylvester")
def solve_sylvester(a, b, q):
    from pullback.frontend import linalg

    return linalg.solve_sylvester(a, b, q)


@implements_attribute(scipy.linalg, "solve_banded", "scipy.linalg.solve_banded")
def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    from pullback.frontend import linalg

    return linalg.solve_banded(l_and_u, ab, b)


def _linalg():
    from pullback.frontend import linalg

    return linalg


@implements_attribute(scipy.linalg, "cholesky", "scipy.linalg.cholesky")
def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    return _linalg().cholesky(a, lower=lower)


@implements_attribute(scipy.linalg, "cho_factor", "scipy.linalg.cho_factor")
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    return _linalg().cho_factor(a, lower=lower)


@implements_attribute(scipy.linalg, "cho_solve", "scipy.linalg.cho_solve")
def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    return _linalg().cho_solve(c_and_lower, b)


cho_solve.takes_tuples = True  # type: ignore[attr-defined]


@implements_attribute(scipy.linalg, "solve_triangular", "scipy.linalg.solve_triangular")
def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    return _linalg().solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)


_GENERAL = {None, "gen", "general", "tridiagonal", "banded"}
_SYMMETRIC = {"sym": False, "symmetric": False, "her": True, "hermitian": True}


def _from_triangle(a, lower: bool, conjugate: bool):
    """The symmetric (Hermitian) matrix that a solver reading one triangle of ``a`` sees (a
    Hermitian one reads the real part of the diagonal only)."""
    strict = np.tril(a, -1) if lower else np.triu(a, 1)
    if not conjugate:
        return strict + np.swapaxes(strict, -1, -2) + np.diagonal(a, 0, -2, -1)[..., None] * eye(a.shape[-1])
    diagonal = np.real(np.diagonal(a, 0, -2, -1))[..., None] * eye(a.shape[-1])
    return strict + np.swapaxes(np.conj(strict), -1, -2) + diagonal


@implements_attribute(scipy.linalg, "solve", "scipy.linalg.solve")
def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True, assume_a=None,
          transposed=False):
    """SciPy's ``solve``. ``assume_a=None`` (SciPy detects the structure from the values) and the
    tridiagonal and banded kinds solve by LU, which gives the same X; the symmetric kinds read the
    triangle ``lower`` names, as SciPy does."""
    linalg = _linalg()
    if assume_a in ("pos", "positive definite"):
        return linalg.solve(a, b, assume_a="pos", lower=lower)
    if assume_a in _SYMMETRIC:
        return linalg.solve(_from_triangle(a, lower, _SYMMETRIC[assume_a]), b)
    if transposed:
        a = np.swapaxes(a, -1, -2)
    if assume_a in ("lower triangular", "upper triangular"):
        return linalg.solve_triangular(a, b, lower=assume_a == "lower triangular")
    if assume_a in ("diagonal",):
        d = np.diagonal(a, 0, -2, -1)
        return b / (d if np.ndim(b) == np.ndim(a) - 1 else d[..., None])
    if assume_a not in _GENERAL:
        raise ArgumentError(located(f"{assume_a} is not a recognized matrix structure"))
    return linalg.solve(a, b)


@implements_attribute(scipy.linalg, "inv", "scipy.linalg.inv")
def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """SciPy's ``inv``: a structured ``assume_a`` reads only the part of ``a`` it names (one triangle,
    the diagonal), as ``solve`` with that ``assume_a`` does, so the inverse is that solve's of I."""
    if assume_a in (None, "general", "gen"):
        return _linalg().inv(a)
    if assume_a not in ("diagonal", "upper triangular", "lower triangular", "pos", "sym", "her"):
        raise ArgumentError(located(f"scipy.linalg.inv: unknown assume_a {assume_a!r}"))
    dtype = a.dtype if a.dtype.kind in "fc" else np.float64
    return solve(a, np.eye(a.shape[-1], dtype=dtype), lower=lower, assume_a=assume_a)


@implements_attribute(scipy.linalg, "det", "scipy.linalg.det")
def det(a, overwrite_a=False, check_finite=True):
    return _linalg().det(a)


@implements_attribute(scipy.linalg, "lu_factor", "scipy.linalg.lu_factor")
def lu_factor(a, overwrite_a=False, check_finite=True):
    return _linalg().lu_factor(a)


@implements_attribute(scipy.linalg, "lu_solve", "scipy.linalg.lu_solve")
def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    return _linalg().lu_solve(lu_and_piv, b, trans=trans)


lu_solve.takes_tuples = True  # type: ignore[attr-defined]


@implements_attribute(scipy.linalg, "lu", "scipy.linalg.lu")
def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    if p_indices:
        unsupported("scipy.linalg.lu with p_indices=True")
    p, l, u = _linalg().lu(a)
    return (p @ l, u) if permute_l else (p, l, u)


_EIGH_DRIVERS = (None, "ev", "evd", "evr", "evx", "gv", "gvd", "gvx")


def _eigh_args(name: str, b, subset_by_index, subset_by_value, driver):
    """Refuse what SciPy refuses (its messages), then what pullback does not do. The driver changes
    how, not what, SciPy computes: a valid one is taken and ignored."""
    if driver not in _EIGH_DRIVERS:
        names = '", "'.join(map(str, _EIGH_DRIVERS))
        raise ArgumentError(located(f'"{driver}" is unknown. Possible values are "{names}".'))
    if b is None and driver in ("gv", "gvd", "gvx"):
        raise ArgumentError(located(f'{driver} requires input b array to be supplied for generalized eigenvalue '
                                    'problems.'))
    if b is not None:
        unsupported(f"scipy.linalg.{name} of a generalised problem (b given)")
    if subset_by_index is not None or subset_by_value is not None:
        unsupported(f"scipy.linalg.{name} with subset_by_index/subset_by_value (take a slice of all eigenvalues)")


@implements_attribute(scipy.linalg, "eigh", "scipy.linalg.eigh")
def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, type=1,
         check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    _eigh_args("eigh", b, subset_by_index, subset_by_value, driver)
    w, v = _linalg().eigh(a, UPLO="L" if lower else "U")
    return w if eigvals_only else (w, v)


@implements_attribute(scipy.linalg, "eigvalsh", "scipy.linalg.eigvalsh")
def eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1, check_finite=True,
             subset_by_index=None, subset_by_value=None, driver=None):
    _eigh_args("eigvalsh", b, subset_by_index, subset_by_value, driver)
    return _linalg().eigvalsh(a, UPLO="L" if lower else "U")


@implements_attribute(scipy.linalg, "svd", "scipy.linalg.svd")
def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    if lapack_driver not in ("gesdd", "gesvd"):  # either computes the same factors
        raise ArgumentError(located(f'lapack_driver must be "gesdd" or "gesvd", not "{lapack_driver}"'))
    return _linalg().svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


@implements_attribute(scipy.linalg, "svdvals", "scipy.linalg.svdvals")
def svdvals(a, overwrite_a=False, check_finite=True):
    return _linalg().svd(a, compute_uv=False)


@implements_attribute(scipy.linalg, "qr", "scipy.linalg.qr")
def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """SciPy's ``qr``: ``mode='full'`` is the reduced factorisation when A is square or wide (the
    same matrices); a tall A needs ``mode='economic'``, the differentiable one."""
    if mode not in ("full", "r", "economic", "raw"):
        raise ArgumentError(located("Mode argument should be one of ['full', 'r', 'economic', 'raw']"))
    if pivoting:
        unsupported("scipy.linalg.qr with pivoting=True")
    m, n = np.shape(a)[-2:]
    if mode == "full" and m > n:
        raise TracingError(located(f"scipy.linalg.qr of a tall {m}x{n} matrix with mode='full' (SciPy's default) "
                                   "is not differentiable: Q's last columns are not unique; pass mode='economic'"))
    if mode not in ("full", "economic", "r"):
        unsupported(f"scipy.linalg.qr with mode={mode!r}")
    if mode == "r":  # SciPy returns a 1-tuple, and R of shape (m, n): zero rows below a tall A's
        r = _linalg().qr(a, mode="r")
        if m > n:
            r = np.concatenate([r, np.zeros((*np.shape(r)[:-2], m - n, n), r.dtype)], axis=-2)
        return (r,)
    return _linalg().qr(a)


@implements_attribute(scipy.linalg, "norm", "scipy.linalg.norm")
def norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    return _linalg().norm(a, ord=ord, axis=axis, keepdims=keepdims)


@implements_attribute(scipy.linalg, "lstsq", "scipy.linalg.lstsq")
def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True, lapack_driver=None):
    if lapack_driver not in (None, "gelsd", "gelsy", "gelss"):
        raise ArgumentError(located(f'LAPACK driver "{lapack_driver}" is not found'))
    return _linalg().lstsq(a, b, rcond=cond)


@implements_attribute(scipy.linalg, "pinv", "scipy.linalg.pinv")
def pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    if atol is not None or return_rank:
        unsupported("scipy.linalg.pinv with atol or return_rank")
    return _linalg().pinv(a) if rtol is None else _linalg().pinv(a, rtol=rtol)
