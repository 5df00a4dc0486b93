"""LU with partial pivoting, after the LU AD notes: reconstruction, the notes' reverse
formulas (square, wide, tall) as oracles, fixed-pivot finite differences of the notes'
scalar observables, and bad input."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.linalg

import pullback as pb
from pullback import linalg as pla

rng = np.random.default_rng(5)
SHAPES = [(4, 4), (3, 5), (5, 3)]


def rand(shape, dtype=np.float64):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.complex64])
@pytest.mark.parametrize("shape", SHAPES)
def test_reconstruction(shape, dtype):
    A = rand(shape, dtype)
    p, l, u = pla.lu(A)
    k = min(shape)
    tol = 1e-5 if dtype in (np.float32, np.complex64) else 1e-13
    assert np.linalg.norm(p.T @ A - l @ u) <= tol * np.linalg.norm(A)  # the notes' P A = L U, P = p^T
    assert l.shape == (shape[0], k) and u.shape == (k, shape[1])
    np.testing.assert_array_equal(np.triu(l, 1), 0)
    np.testing.assert_allclose(np.diagonal(l), 1)
    np.testing.assert_array_equal(np.tril(u, -1), 0)


def tril_(x):
    return np.tril(x, -1)


def notes_reverse(A, Lbar, Ubar, factors=None):
    """The notes' reverse rule, in NumPy: A_bar from (L_bar, U_bar), at SciPy's factors of A
    or at given ones (P, L, U) with A = P L U."""
    P, L, U = scipy.linalg.lu(A) if factors is None else factors  # A = P L U: the notes' P is P^T
    m, n = A.shape
    H = lambda x: x.conj().T  # noqa: E731
    if m == n:
        Fbar = tril_(H(L) @ Lbar) + np.triu(Ubar @ H(U))
        B = scipy.linalg.solve_triangular(H(L), Fbar, lower=False, unit_diagonal=True)
        B = H(scipy.linalg.solve_triangular(U, H(B), lower=False))  # B U^{-H}
        return P @ B
    if m < n:
        U1, U2, Ubar1, Ubar2 = U[:, :m], U[:, m:], Ubar[:, :m], Ubar[:, m:]
        inner = tril_(H(L) @ Lbar - Ubar2 @ H(U2)) + np.triu(Ubar1 @ H(U1))
        H1 = H(scipy.linalg.solve_triangular(U1, H(inner), lower=False))  # inner U1^{-H}
        Hm = np.concatenate([H1, Ubar2], axis=1)
        return P @ scipy.linalg.solve_triangular(H(L), Hm, lower=False, unit_diagonal=True)
    L1, L2, Lbar1, Lbar2 = L[:n], L[n:], Lbar[:n], Lbar[n:]
    inner = tril_(H(L1) @ Lbar1) + np.triu(Ubar @ H(U) - H(L2) @ Lbar2)
    H1 = scipy.linalg.solve_triangular(H(L1), inner, lower=False, unit_diagonal=True)
    Hm = np.concatenate([H1, Lbar2], axis=0)
    return P @ H(scipy.linalg.solve_triangular(U, H(Hm), lower=False))  # [H1; H2] U^{-H}


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("shape", SHAPES)
def test_vjp_matches_the_notes(shape, dtype):
    A = rand(shape, dtype)
    p, l, u = pla.lu(A)
    Lbar, Ubar = rand(l.shape, dtype), rand(u.shape, dtype)
    (Abar,) = pb.vjp(pla.lu, A)[1]((np.zeros_like(p), Lbar, Ubar))
    np.testing.assert_allclose(Abar, notes_reverse(A, Lbar, Ubar), rtol=1e-9, atol=1e-11)


def _hermitian(n, dtype=np.float64):
    x = rand((n, n), dtype)
    return x + x.conj().T


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("observable", ["dL", "dU", "mixed"])
def test_notes_observables_against_fixed_pivot_differences(shape, observable, dtype):
    A = rand(shape, dtype)
    m, n = shape
    op_l, op_u = _hermitian(m, dtype), _hermitian(n, dtype)

    def f(A):
        _, l, u = pla.lu(A)
        if observable == "dL":
            v = l[:, 1] if m > 1 else l[:, 0]  # L[:, 0] has a unit entry; column 1 varies in every shape
            return np.real(np.conj(v) @ op_l @ v)
        if observable == "dU":
            v = u[0, :]
            return np.real(np.conj(v) @ op_u @ v)
        return np.real(np.conj(l[1, 0]) * u[0, 0]) + np.real(np.conj(l[-1, 0]) * u[0, -1])

    g = pb.grad(f)(A)
    eps = 1e-6
    piv = scipy.linalg.lu_factor(A)[1]
    # dL = Re tr(G^H dA): probe the real and (for complex A) imaginary directions
    directions = [1.0] if A.dtype.kind == "f" else [1.0, 1j]
    for idx in np.ndindex(A.shape):
        for d in directions:
            e = np.zeros_like(A)
            e[idx] = eps * d
            for probe in (A + e, A - e):  # finite differences only where the pivots stay fixed
                np.testing.assert_array_equal(scipy.linalg.lu_factor(probe)[1], piv)
            fd = (f(A + e) - f(A - e)) / (2 * eps)
            np.testing.assert_allclose(np.real(np.conj(g[idx]) * d), fd, rtol=1e-6, atol=1e-8)


def test_gradients_of_solve_inv_det_slogdet():
    A, b = rand((4, 4)), rand(4)
    Ainv = np.linalg.inv(A)
    np.testing.assert_allclose(pb.grad(lambda A: np.linalg.slogdet(A)[1])(A), Ainv.T, rtol=1e-10)
    np.testing.assert_allclose(pb.grad(lambda A: np.linalg.det(A))(A), np.linalg.det(A) * Ainv.T, rtol=1e-9)
    x = np.linalg.solve(A, b)
    gA, gb = pb.grad(lambda A, b: np.sum(np.linalg.solve(A, b)), (0, 1))(A, b)
    wbar = np.linalg.solve(A.T, np.ones(4))
    np.testing.assert_allclose(gb, wbar, rtol=1e-10)
    np.testing.assert_allclose(gA, -np.outer(wbar, x), rtol=1e-9)
    np.testing.assert_allclose(pb.grad(lambda A: np.trace(np.linalg.inv(A)))(A), -(Ainv @ Ainv).T, rtol=1e-9)


def test_singular_matrices():
    S = np.array([[1.0, 2.0], [2.0, 4.0]])
    p, l, u = pla.lu(S)  # factors, as LAPACK does
    np.testing.assert_allclose(p @ l @ u, S)
    _, _, info = pla.lu_factor_ex(S)
    assert info == 2

    def f(S, b):
        return np.linalg.solve(S, b)

    with pytest.raises(pb.LinAlgError, match=r"singular matrix: U\[1, 1\] is exactly zero") as e:
        pb.jit(f)(S, np.ones(2))
    line = inspect.getsourcelines(f)[1] + 1
    assert f"test_lu.py:{line}" in str(e.value)
    with pytest.raises(pb.LinAlgError, match="singular"):
        pla.inv(S)
    with np.errstate(divide="ignore"):
        sign, logabsdet = pla.slogdet(S)
    assert sign == 0 and logabsdet == -np.inf


def test_nan_input_gives_nan_output():
    A = np.full((3, 3), np.nan)
    p, l, u = pla.lu(A)
    assert np.isnan(u).any()
    lu, piv, info = pla.lu_factor_ex(A)
    assert np.isnan(lu).all()


# --- complete pivoting ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("shape", SHAPES)
def test_full_pivot_reconstruction(shape, dtype):
    A = rand(shape, dtype)
    p, q, l, u, sign, info = pla.lu_full_pivot_ex(A)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    assert np.linalg.norm(p.T @ A @ q.T - l @ u) <= tol * np.linalg.norm(A)  # the notes' P A Q = L U
    assert info == 0 and sign == round(np.linalg.det(p) * np.linalg.det(q))
    np.testing.assert_array_equal(np.triu(l, 1), 0)
    np.testing.assert_array_equal(np.tril(u, -1), 0)
    # complete pivoting: each pivot dominates the rest of its row of U and its column of L
    d = np.abs(np.diagonal(u))
    assert np.all(np.abs(u) <= d[:, None] * (1 + 1e-6))
    assert np.all(np.abs(l) <= 1 + 1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("shape", SHAPES)
def test_full_pivot_vjp_matches_the_notes(shape, dtype):
    A = rand(shape, dtype)
    p, q, l, u = pla.lu_full_pivot(A)
    Lbar, Ubar = rand(l.shape, dtype), rand(u.shape, dtype)
    (Abar,) = pb.vjp(pla.lu_full_pivot, A)[1]((np.zeros_like(p), np.zeros_like(q), Lbar, Ubar))
    B = p.T @ A @ q.T  # = l u, unpivoted (LAPACK might still pivot it: for complex numbers its
    # partial pivoting compares |Re| + |Im|, complete pivoting the modulus)
    Bbar = notes_reverse(B, Lbar, Ubar, (np.eye(shape[0]), l, u))
    np.testing.assert_allclose(Abar, p @ Bbar @ q, rtol=1e-9, atol=1e-11)  # A_bar = P^T B_bar Q^T (notes' P, Q)


@pytest.mark.parametrize("shape", SHAPES)
def test_full_pivot_against_fixed_pivot_differences(shape):
    A = rand(shape)
    m, n = shape
    op = _hermitian(n)

    def f(A):
        _, _, l, u = pla.lu_full_pivot(A)
        v = u[0, :]
        return v @ op @ v + np.sum(l[:, 0] ** 3)

    g = pb.grad(f)(A)
    _, _, _, _, *meta = pla.lu_full_pivot_ex(A)
    perms = pla.lu_full_pivot_ex(A)[:2]
    eps = 1e-6
    for idx in np.ndindex(A.shape):
        e = np.zeros_like(A)
        e[idx] = eps
        for probe in (A + e, A - e):
            for a, b in zip(pla.lu_full_pivot_ex(probe)[:2], perms):
                np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(g[idx], (f(A + e) - f(A - e)) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_full_pivot_rank_deficiency_is_reported():
    A = np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 0.5, 2.0])  # rank 1
    p, q, l, u, sign, info = pla.lu_full_pivot_ex(A)
    assert info == 2
    np.testing.assert_allclose(p @ l @ u @ q, A, atol=1e-14)
