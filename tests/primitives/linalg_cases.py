"""Linear-algebra cases shared by the forward, JVP and transpose suites. Each takes
unconstrained random inputs and builds the structure it needs (SPD, triangular,
symmetric) itself, so finite differences may probe any direction."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pullback import linalg as pla
from pullback.primitives import lax
from tests.primitives.cases import Case


def H(x):
    return np.conj(np.swapaxes(x, -1, -2))


def spd(x):
    """Symmetric (Hermitian) positive definite."""
    n = x.shape[-1]
    return x @ H(x) / n + np.eye(n)


def sym(x):
    return (x + H(x)) / 2


def tri(x, lower=True):
    n = x.shape[-1]
    return (np.tril(x) if lower else np.triu(x)) + 3 * np.eye(n)


def phase(vectors, others=()):
    """Reference vectors as pullback returns them: NumPy's own for real input; for complex
    input, pullback's deterministic phase (largest-magnitude entry real positive)."""
    if not np.iscomplexobj(vectors):
        return (vectors, *others)
    idx = np.argmax(np.abs(vectors), axis=-2)
    big = np.take_along_axis(vectors, idx[..., None, :], axis=-2)
    phase = np.abs(big) / big
    return (vectors * phase, *(np.conj(np.swapaxes(phase, -1, -2)) * o for o in others))


def np_eigh(a):
    w, v = np.linalg.eigh(a)
    return w, phase(v)[0]


def np_svd(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    u, vh = phase(u, (vh,))
    return u, s, vh


def sp_trsm(a, b, lower, trans, left):
    if left:
        return scipy.linalg.solve_triangular(a, b, trans=trans, lower=lower)
    # X op(A) = B  <=>  op(A)^T X^T = B^T
    return scipy.linalg.solve_triangular(a, b.T, trans=1 - trans, lower=lower).T


def np_trmm(a, b, lower, trans, left):
    t = np.tril(a) if lower else np.triu(a)
    t = t.T if trans else t
    return t @ b if left else b @ t


LINALG_CASES: list[Case] = [
    Case("cholesky", lambda x: pla.cholesky(spd(x)), ((4, 4),), reference=lambda x: np.linalg.cholesky(spd(x))),
    Case("cholesky-upper-f32", lambda x: pla.cholesky(spd(x), lower=False), ((3, 3),), "float32",
         reference=lambda x: scipy.linalg.cholesky(spd(x), lower=False)),
    Case("cholesky-batched", lambda x: np.linalg.cholesky(spd(x)), ((2, 3, 3),)),
    Case("cholesky_ex", lambda x: pla.cholesky_ex(spd(x))[0], ((3, 3),),
         reference=lambda x: np.linalg.cholesky(spd(x))),
    Case("cho_solve", lambda x, b: pla.cho_solve(pla.cho_factor(spd(x)), b), ((4, 4), (4, 2)),
         reference=lambda x, b: np.linalg.solve(spd(x), b)),
    Case("solve-pos", lambda x, b: pla.solve(spd(x), b), ((4, 4), (4,)),
         reference=lambda x, b: np.linalg.solve(spd(x), b)),
    Case("logdet", lambda x: pla.logdet(spd(x)), ((4, 4),), reference=lambda x: np.linalg.slogdet(spd(x))[1]),
    Case("syrk", lambda x: (pla.syrk(x), pla.syrk(x, trans=True, alpha=0.5)), ((3, 5),),
         reference=lambda x: (x @ x.T, 0.5 * x.T @ x)),
    Case("gemm", lambda a, b: pla.gemm(a, b, alpha=2.0, trans_a=True), ((4, 3), (4, 2)),
         reference=lambda a, b: 2.0 * a.T @ b),
    Case("cholesky_inverse", lambda x: pla.cholesky_inverse(pla.cholesky(spd(x))), ((4, 4),),
         reference=lambda x: np.linalg.inv(spd(x))),
    Case("cholesky_inverse-upper", lambda x: pla.cholesky_inverse(pla.cholesky(spd(x), lower=False), lower=False),
         ((3, 3),), reference=lambda x: np.linalg.inv(spd(x))),
    Case("lq", lambda x: pla.lq(x), ((3, 5),),
         reference=lambda x: tuple(m.T for m in reversed(np.linalg.qr(x.T)))),
    Case("lq-batched", lambda x: pla.lq(x), ((2, 3, 4),),
         reference=lambda x: tuple(np.swapaxes(m, -1, -2) for m in reversed(np.linalg.qr(np.swapaxes(x, -1, -2))))),
    Case("qr", lambda x: np.linalg.qr(x), ((5, 3),), reference=lambda x: tuple(np.linalg.qr(x))),
    Case("qr-square-f32", lambda x: pla.qr(x), ((3, 3),), "float32", reference=lambda x: tuple(np.linalg.qr(x))),
    Case("eigh", lambda x: np.linalg.eigh(sym(x)), ((4, 4),), reference=lambda x: np_eigh(sym(x))),
    Case("eigh-batched", lambda x: pla.eigh(sym(x)), ((2, 3, 3),), reference=lambda x: np_eigh(sym(x))),
    Case("svd-wide", lambda x: pla.svd(x), ((3, 5),), reference=np_svd),
    Case("svd-tall", lambda x: np.linalg.svd(x, full_matrices=False), ((5, 3),), reference=np_svd),
    Case("svd-square-batched", lambda x: pla.svd(x), ((2, 3, 3),), reference=np_svd),
    Case("svd-values", lambda x: np.linalg.svd(x, compute_uv=False), ((4, 3),),
         reference=lambda x: np.linalg.svd(x, compute_uv=False)),
]

LINALG_CASES += [
    Case("lu-square", lambda x: pla.lu(x), ((4, 4),), reference=lambda x: tuple(scipy.linalg.lu(x))),
    Case("lu-wide", lambda x: pla.lu(x), ((3, 5),), reference=lambda x: tuple(scipy.linalg.lu(x))),
    Case("lu-tall-f32", lambda x: pla.lu(x), ((5, 3),), "float32", reference=lambda x: tuple(scipy.linalg.lu(x))),
    Case("lu-batched", lambda x: pla.lu(x), ((2, 3, 3),), reference=lambda x: tuple(np.stack(m) for m in zip(
        *[scipy.linalg.lu(xi) for xi in x]))),
    Case("lu_factor", lambda x: pla.lu_factor(x)[0], ((4, 4),), reference=lambda x: scipy.linalg.lu_factor(x)[0]),
    Case("lu_solve", lambda x, b: pla.lu_solve(pla.lu_factor(x), b), ((4, 4), (4, 2)),
         reference=lambda x, b: np.linalg.solve(x, b)),
    Case("lu_full_pivot", lambda x: (lambda p, q, l, u: p @ l @ u @ q)(*pla.lu_full_pivot(x)), ((4, 3),),
         reference=lambda x: x),
    Case("lu_full_pivot-complex", lambda x: (lambda p, q, l, u: p @ l @ u @ q)(*pla.lu_full_pivot(x)), ((3, 4),),
         "complex128", reference=lambda x: x),
    Case("lu_solve-trans", lambda x, b: pla.lu_solve(pla.lu_factor(x), b, trans=1), ((4, 4), (4,)),
         reference=lambda x, b: np.linalg.solve(x.T, b)),
    Case("solve-gen", lambda x, b: np.linalg.solve(x, b), ((4, 4), (4,)), reference=np.linalg.solve),
    Case("inv", lambda x: np.linalg.inv(x), ((3, 3),), reference=np.linalg.inv),
    Case("det-slogdet", lambda x: (np.linalg.det(x), np.linalg.slogdet(x)[1]), ((4, 4),),
         reference=lambda x: (np.linalg.det(x), np.linalg.slogdet(x)[1])),
]

C, C64 = "complex128", "complex64"
LINALG_CASES += [
    Case("cholesky-complex", lambda x: pla.cholesky(spd(x)), ((4, 4),), C,
         reference=lambda x: np.linalg.cholesky(spd(x))),
    Case("cholesky-upper-c64", lambda x: pla.cholesky(spd(x), lower=False), ((3, 3),), C64,
         reference=lambda x: scipy.linalg.cholesky(spd(x), lower=False)),  # the upper triangle read, as SciPy
    Case("trsm-complex", lambda a, b: (pla.solve_triangular(tri(a), b, lower=True, trans="C"),
                                       pla.solve_triangular(tri(a, False), b, trans="T"),
                                       pla.solve_triangular(tri(a), b.T, lower=True, side="right", trans=2)),
         ((3, 3), (3, 2)), C, reference=lambda a, b: (
             scipy.linalg.solve_triangular(tri(a), b, lower=True, trans="C"),
             scipy.linalg.solve_triangular(tri(a, False), b, trans="T"),
             b.T @ np.linalg.inv(H(np.tril(tri(a)))))),
    Case("trmm-complex", lambda a, b: pla.trmm(a, b, trans=2), ((3, 3), (3, 2)), C,
         reference=lambda a, b: H(np.tril(a)) @ b),
    Case("herk", lambda x: (pla.syrk(x), pla.syrk(x, trans=True)), ((3, 4),), C,
         reference=lambda x: (x @ H(x), H(x) @ x)),
    Case("cholesky_inverse-complex", lambda x: pla.cholesky_inverse(pla.cholesky(spd(x))), ((3, 3),), C,
         reference=lambda x: np.linalg.inv(spd(x))),
    Case("lq-complex", lambda x: pla.lq(x), ((3, 5),), C,
         reference=lambda x: tuple(np.swapaxes(m, -1, -2) for m in reversed(np.linalg.qr(np.swapaxes(x, -1, -2))))),
    Case("qr-complex", lambda x: pla.qr(x), ((5, 3),), C, reference=lambda x: tuple(np.linalg.qr(x))),
    Case("eigh-complex", lambda x: pla.eigh(sym(x)), ((4, 4),), C, reference=lambda x: np_eigh(sym(x))),
    Case("svd-complex", lambda x: pla.svd(x), ((3, 4),), C, reference=np_svd),
    Case("svd-complex-tall", lambda x: pla.svd(x), ((4, 3),), C, reference=np_svd),
    Case("lu-complex", lambda x: pla.lu(x), ((3, 4),), C, reference=lambda x: tuple(scipy.linalg.lu(x))),
    Case("solve-complex", lambda x, b: np.linalg.solve(x, b), ((3, 3), (3,)), C, reference=np.linalg.solve),
    Case("slogdet-complex", lambda x: np.linalg.slogdet(x), ((3, 3),), C,
         reference=lambda x: tuple(np.linalg.slogdet(x))),
]

for _left in (True, False):
    for _lower in (True, False):
        for _trans in (0, 1):
            _tag = f"{'left' if _left else 'right'}-{'lower' if _lower else 'upper'}-{'NT'[_trans]}"
            _shapes = ((3, 3), (3, 2) if _left else (2, 3))
            LINALG_CASES.append(Case(
                f"trsm-{_tag}",
                lambda a, b, lo=_lower, t=_trans, le=_left: pla.solve_triangular(
                    tri(a, lo), b, trans=t, lower=lo, side="left" if le else "right"),
                _shapes, reference=lambda a, b, lo=_lower, t=_trans, le=_left: sp_trsm(tri(a, lo), b, lo, t, le)))
            LINALG_CASES.append(Case(
                f"trmm-{_tag}",
                lambda a, b, lo=_lower, t=_trans, le=_left: pla.trmm(
                    a, b, trans=t, lower=lo, side="left" if le else "right"),
                _shapes, reference=lambda a, b, lo=_lower, t=_trans, le=_left: np_trmm(a, b, lo, t, le)))
LINALG_CASES += [
    Case("trsm-vector-unit", lambda a, b: pla.solve_triangular(tri(a), b, lower=True, unit_diagonal=True, trans="T"),
         ((4, 4), (4,)), reference=lambda a, b: scipy.linalg.solve_triangular(
             tri(a), b, lower=True, unit_diagonal=True, trans="T")),
    Case("trsm-batched-f32", lambda a, b: pla.solve_triangular(tri(a), b, lower=True), ((2, 3, 3), (2, 3, 2)),
         "float32", reference=lambda a, b: np.linalg.solve(np.tril(tri(a)), b)),
]

# BLAS's alpha (the fold of a scaling into the call, ``transforms/readers.py``): both operands, the
# triangular one alone (trsm's tangent is then a solve of -op(dT) X), both sides, complex
_B = np.random.default_rng(12).standard_normal((3, 2))
LINALG_CASES += [
    Case("trsm-alpha", lambda a, b: (lax.trsm(tri(a), b, lower=True, alpha=-0.5),
                                     lax.trsm(tri(a, False), b.T, left=False, lower=False, trans=1, alpha=2.0)),
         ((3, 3), (3, 2)), reference=lambda a, b: (-0.5 * sp_trsm(tri(a), b, True, 0, True),
                                                   2.0 * sp_trsm(tri(a, False), b.T, False, 1, False))),
    Case("trsm-alpha-factor", lambda a: lax.trsm(tri(a), _B, lower=True, trans=1, alpha=-3.0), ((3, 3),),
         reference=lambda a: -3.0 * sp_trsm(tri(a), _B, True, 1, True)),
    Case("trmm-alpha", lambda a, b: (pla.trmm(a, b, alpha=-0.5), pla.trmm(a, b.T, lower=False, trans=1, side="right",
                                                                           alpha=3.0)),
         ((3, 3), (3, 2)), reference=lambda a, b: (-0.5 * np_trmm(a, b, True, 0, True),
                                                   3.0 * np_trmm(a, b.T, False, 1, False))),
    Case("trsm-alpha-complex", lambda a, b: lax.trsm(tri(a), b, lower=True, trans=2, alpha=-0.5), ((3, 3), (3, 2)), C,
         reference=lambda a, b: -0.5 * scipy.linalg.solve_triangular(tri(a), b, lower=True, trans="C")),
    Case("trmm-alpha-complex", lambda a, b: pla.trmm(a, b.T, trans=2, side="right", alpha=0.25), ((3, 3), (3, 2)), C,
         reference=lambda a, b: 0.25 * b.T @ H(np.tril(a))),
]

CASES = LINALG_CASES  # collected by the forward, JVP and transpose suites
