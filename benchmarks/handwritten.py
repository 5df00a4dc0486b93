"""Expert hand-written NumPy/SciPy gradients: the floor pullback is measured against."""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.linalg import blas, lapack


def scalar_grad(x, y):
    """f = x log y + log(x y) y: df/dx = log y + y / x, df/dy = x / y + log(x y) + 1."""
    return np.log(y) + y / x, x / y + np.log(x * y) + 1.0


def mirror_lower(w: np.ndarray, block: int = 256) -> None:
    """Copy the lower triangle of the square C-ordered ``w`` onto its upper one, in place, by blocks
    (no n x n temporary). The strict upper triangle must be zero, as SciPy's potrf leaves the
    factor's other triangle (``clean=1``) and potri then keeps it."""
    n = w.shape[0]
    for i in range(0, n, block):
        j = min(i + block, n)
        d = w[i:j, i:j]
        d += np.tril(d, -1).T
        if j < n:
            w[i:j, j:] = w[j:, i:j].T


def gp_value_and_grad(theta, X, y):
    """One Cholesky, one potri for the trace terms, O(n^2) rest (the GPML recipe). LAPACK gets the
    symmetric A's Fortran-order view (``A.T``, upper triangle) and works in place: no hidden copy;
    the rank-1 term is BLAS's syr into potri's buffer; elementwise work is done in place."""
    ell, sf2, sn2 = np.exp(theta)
    n = X.shape[0]
    Xs = X / ell
    sq = np.sum(Xs**2, axis=1)
    d2 = Xs @ Xs.T  # then in place: three n x n buffers in all (d2, Kf, A), fresh memory costing page faults
    d2 *= -2.0
    d2 += sq[:, None]
    d2 += sq[None, :]
    Kf = np.multiply(d2, -0.5)
    np.exp(Kf, out=Kf)
    Kf *= sf2
    A = Kf.copy()
    A.flat[:: n + 1] += sn2
    U, info = lapack.dpotrf(A.T, lower=0, overwrite_a=1)  # A = U^T U
    if info:
        raise np.linalg.LinAlgError("not positive definite")
    alpha, _ = lapack.dpotrs(U, y, lower=0)
    value = 0.5 * (y @ alpha) + np.sum(np.log(np.diag(U))) + 0.5 * n * np.log(2 * np.pi)
    W, _ = lapack.dpotri(U, lower=0, overwrite_c=1)  # upper triangle of A^{-1}, Fortran order
    W = blas.dsyr(-1.0, alpha, a=W, lower=0, overwrite_a=1)  # A^{-1} - alpha alpha^T
    mirror_lower(W.T)  # W.T is C-ordered with the lower triangle filled
    Kf *= W
    return value, 0.5 * np.array([np.vdot(Kf, d2), np.sum(Kf), sn2 * np.trace(W)])


def _copyltu(x):
    return np.tril(x) + np.tril(x, -1).T


def _sym(x):
    return 0.5 * (x + x.T)


def cholesky_value_and_grad(A, W):
    """loss = sum(L o W); A_bar = 1/2 L^{-T} copyltu(L^T W) L^{-1} (Seeger et al. 4.2)."""
    c, info = lapack.dpotrf(A.T)
    L = c.T
    value = np.sum(L * W)
    P = _copyltu(blas.dtrmm(1.0, L, W, trans_a=1, lower=1))  # L^T W
    X = blas.dtrsm(0.5, L, P, side=1, lower=1)  # P L^{-1} / 2
    return value, blas.dtrsm(1.0, L, X, trans_a=1, lower=1)  # L^{-T} ...


def eigh_value_and_grad(A, c, W):
    """loss = sum(w c) + sum(V^2 o W); A_bar = V (sym(V^T V_bar o F) + diag(w_bar)) V^T."""
    w, V = np.linalg.eigh(A)
    value = w @ c + np.sum(V**2 * W)
    Vbar = 2 * V * W
    F = w[None, :] - w[:, None]
    np.fill_diagonal(F, np.inf)
    inner = _sym((V.T @ Vbar) / F) + np.diag(c)
    return value, V @ inner @ V.T


def svd_value_and_grad(A, c, W1, W2):
    """loss = sum(s c) + sum(U^2 o W1) + sum(Vh^2 o W2), square A; Townsend's formulas."""
    U, s, Vh = np.linalg.svd(A)
    value = s @ c + np.sum(U**2 * W1) + np.sum(Vh**2 * W2)
    Ubar, Vbar = 2 * U * W1, (2 * Vh * W2).T
    V = Vh.T
    F = s[None, :] ** 2 - s[:, None] ** 2  # F_ij = s_j^2 - s_i^2
    np.fill_diagonal(F, np.inf)
    J, K = U.T @ Ubar, V.T @ Vbar
    inner = ((J - J.T) / F) * s[None, :] + s[:, None] * ((K - K.T) / F) + np.diag(c)
    return value, U @ inner @ Vh


def qr_value_and_grad(A, W1, W2):
    """loss = sum(Q o W1) + sum(R o W2) for m >= n, through the LQ formula of A^T."""
    Q, R = np.linalg.qr(A)
    value = np.sum(Q * W1) + np.sum(R * W2)
    L, Qt, Lbar, Qtbar = R.T, Q.T, W2.T, W1.T
    M = L.T @ Lbar - Qtbar @ Qt.T
    Abar_t = scipy.linalg.solve_triangular(L.T, Qtbar + _copyltu(M) @ Qt, lower=False)
    return value, Abar_t.T


def lu_value_and_grad(A, W1, W2):
    """loss = sum(L o W1) + sum(U o W2); the LU notes' reverse rule (square, wide, tall)."""
    P, L, U = scipy.linalg.lu(A)
    value = np.sum(L * W1) + np.sum(U * W2)
    m, n = A.shape
    solve = scipy.linalg.solve_triangular
    if m == n:
        Fbar = np.tril(L.T @ W1, -1) + np.triu(W2 @ U.T)
        B = solve(L.T, Fbar, lower=False, unit_diagonal=True)
        return value, P @ solve(U, B.T, lower=False).T
    if m < n:
        U1, U2, W21, W22 = U[:, :m], U[:, m:], W2[:, :m], W2[:, m:]
        inner = np.tril(L.T @ W1 - W22 @ U2.T, -1) + np.triu(W21 @ U1.T)
        H = np.concatenate([solve(U1, inner.T, lower=False).T, W22], axis=1)
        return value, P @ solve(L.T, H, lower=False, unit_diagonal=True)
    L1, L2, W11, W12 = L[:n], L[n:], W1[:n], W1[n:]
    inner = np.tril(L1.T @ W11, -1) + np.triu(W2 @ U.T - L2.T @ W12)
    H = np.concatenate([solve(L1.T, inner, lower=False, unit_diagonal=True), W12], axis=0)
    return value, P @ solve(U, H.T, lower=False).T


def _rbf(A, B, ell, sf2):
    As, Bs = A / ell, B / ell
    d2 = np.sum(As**2, 1)[:, None] + np.sum(Bs**2, 1)[None, :] - 2 * As @ Bs.T
    return sf2 * np.exp(-0.5 * d2), d2


def _chol_backward(L, Lbar):
    """A_bar of L = chol(A): 1/2 L^{-T} copyltu(L^T L_bar) L^{-1}."""
    P = _copyltu(L.T @ Lbar)
    X = scipy.linalg.solve_triangular(L, P.T, lower=True, trans=1).T  # (L^{-T} P^T)^T = P L^{-1}
    return 0.5 * scipy.linalg.solve_triangular(L, X, lower=True, trans=1)


def sgp_value_and_grad(Z, log_ell, log_sf2, log_sn2, X, y, jitter=1e-6):
    """Titsias' bound and its gradient with respect to Z, log lengthscale, log signal and
    noise variance, by hand: adjoints of the two Cholesky factors (U x U) and of the
    kernel matrices, O(n U^2) overall."""
    ell, sf2, s = np.exp(log_ell), np.exp(log_sf2), np.exp(log_sn2)
    n, u = X.shape[0], Z.shape[0]
    Kuu, d2uu = _rbf(Z, Z, ell, sf2)
    Kuf, d2uf = _rbf(Z, X, ell, sf2)
    Lu = np.linalg.cholesky(Kuu + jitter * np.eye(u))
    B = scipy.linalg.solve_triangular(Lu, Kuf, lower=True)
    A = B @ B.T / s + np.eye(u)
    La = np.linalg.cholesky(A)
    v = B @ y
    c = scipy.linalg.solve_triangular(La, v, lower=True)
    sqB = np.sum(B**2)
    value = (0.5 * n * (np.log(2 * np.pi) + log_sn2) + np.sum(np.log(np.diag(La))) + y @ y / (2 * s)
             - c @ c / (2 * s**2) - (sqB - n * sf2) / (2 * s))
    # backward
    cbar = -c / s**2
    vbar = scipy.linalg.solve_triangular(La, cbar, lower=True, trans=1)
    Labar = np.diag(1 / np.diag(La)) - np.tril(np.outer(vbar, c))
    Abar = _chol_backward(La, Labar)
    Bbar = (Abar + Abar.T) @ B / s + np.outer(vbar, y) - B / s
    sbar = (0.5 * n / s - y @ y / (2 * s**2) + c @ c / s**3 + (sqB - n * sf2) / (2 * s**2)
            - np.sum(Abar * (B @ B.T)) / s**2)
    Kufbar = scipy.linalg.solve_triangular(Lu, Bbar, lower=True, trans=1)
    Lubar = -np.tril(Kufbar @ B.T)
    Kuubar = _chol_backward(Lu, Lubar)
    Kuubar = Kuubar + Kuubar.T  # both arguments of k(Z, Z); the diagonal counts twice here and once below
    Guf, Guu = Kufbar * Kuf, 0.5 * Kuubar * Kuu
    Zbar = (Guf @ X - Guf.sum(1)[:, None] * Z) / ell**2 + 2 * (Guu @ Z - Guu.sum(1)[:, None] * Z) / ell**2
    ellbar = np.sum(Guf * d2uf) + np.sum(Guu * d2uu)
    sf2bar = np.sum(Guf) + np.sum(Guu) + n / (2 * s)
    return value, (Zbar, ellbar, sf2bar * sf2, sbar * s)
