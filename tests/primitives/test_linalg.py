"""Linear algebra: VJPs against the backward formulas of Seeger et al. (section 4),
computed independently in NumPy; bad input; what the generated code calls."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.linalg
from pullback.testing import check_grads

import pullback as pb
from pullback import linalg as pla
from tests.primitives.linalg_cases import phase, spd, sym

rng = np.random.default_rng(42)


def rand(*shape):
    return rng.standard_normal(shape)


def copyltu(x):
    return np.tril(x) + np.tril(x, -1).T


def h(t, eps):
    return np.where(t >= 0, 1.0, -1.0) * np.maximum(np.abs(t), eps)


def vjp(f, *args, ct):
    return pb.vjp(f, *args)[1](ct)


def test_potrf_vjp_matches_paper():
    A = spd(rand(5, 5))
    L = np.linalg.cholesky(A)
    Lbar = rand(5, 5)
    (Abar,) = vjp(pla.cholesky, A, ct=Lbar)
    Linv = np.linalg.inv(L)
    want = 0.5 * Linv.T @ copyltu(L.T @ Lbar) @ Linv
    np.testing.assert_allclose(Abar, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("left", [True, False])
def test_trsm_vjp_matches_paper(trans, left):
    L = np.tril(rand(4, 4)) + 3 * np.eye(4)
    A = rand(4, 3) if left else rand(3, 4)
    B = pla.solve_triangular(L, A, lower=True, trans=trans, side="left" if left else "right")
    Bbar = rand(*B.shape)
    Lbar, Abar_ = vjp(lambda L, A: pla.solve_triangular(L, A, lower=True, trans=trans,
                                                         side="left" if left else "right"), L, A, ct=Bbar)
    Li = np.linalg.inv(L)
    if left and not trans:  # B = L^{-1} A
        Abar = Li.T @ Bbar
        want_L = -np.tril(Abar @ B.T)
    elif left:  # B = L^{-T} A
        Abar = Li @ Bbar
        want_L = -np.tril(B @ Abar.T)
    elif not trans:  # B = A L^{-1}
        Abar = Bbar @ Li.T
        want_L = -np.tril(B.T @ Abar)
    else:  # B = A L^{-T}
        Abar = Bbar @ Li
        want_L = -np.tril(Abar.T @ B)
    np.testing.assert_allclose(Abar_, Abar, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(Lbar, want_L, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("left", [True, False])
def test_trmm_vjp_matches_paper(trans, left):
    L = np.tril(rand(4, 4))
    A = rand(4, 3) if left else rand(3, 4)
    f = lambda L, A: pla.trmm(L, A, lower=True, trans=trans, side="left" if left else "right")  # noqa: E731
    Bbar = rand(*f(L, A).shape)
    Lbar, Abar = vjp(f, L, A, ct=Bbar)
    if left and not trans:
        want_A, want_L = L.T @ Bbar, np.tril(Bbar @ A.T)
    elif left:
        want_A, want_L = L @ Bbar, np.tril(A @ Bbar.T)
    elif not trans:
        want_A, want_L = Bbar @ L.T, np.tril(A.T @ Bbar)
    else:
        want_A, want_L = Bbar @ L, np.tril(Bbar.T @ A)
    np.testing.assert_allclose(Abar, want_A, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(Lbar, want_L, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("trans", [False, True])
def test_syrk_vjp_matches_paper(trans):
    A, alpha = rand(3, 5), 0.7
    B = pla.syrk(A, trans=trans, alpha=alpha)
    Bbar = rand(*B.shape)
    (Abar,) = vjp(lambda A: pla.syrk(A, trans=trans, alpha=alpha), A, ct=Bbar)
    want = 2 * alpha * A @ sym(Bbar) if trans else 2 * alpha * sym(Bbar) @ A
    np.testing.assert_allclose(Abar, want, rtol=1e-10)


def test_potri_vjp_matches_paper():
    L = np.linalg.cholesky(spd(rand(4, 4)))
    B = np.linalg.inv(L @ L.T)
    Bbar = rand(4, 4)
    (Lbar,) = vjp(pla.cholesky_inverse, L, ct=Bbar)
    want = -2 * np.tril(B @ sym(Bbar) @ np.linalg.inv(L).T)
    np.testing.assert_allclose(Lbar, want, rtol=1e-9, atol=1e-11)


def test_gelqf_vjp_matches_paper():
    A = rand(3, 5)
    L, Q = pla.lq(A)
    Lbar, Qbar = rand(3, 3), rand(3, 5)
    (Abar,) = vjp(pla.lq, A, ct=(Lbar, Qbar))
    M = L.T @ Lbar - Qbar @ Q.T
    want = np.linalg.solve(L.T, Qbar + copyltu(M) @ Q)
    np.testing.assert_allclose(Abar, want, rtol=1e-9, atol=1e-11)


def test_syevd_vjp_matches_paper():
    A = sym(rand(5, 5))
    w, V = pla.eigh(A)
    wbar, Vbar = rand(5), rand(5, 5)
    (Abar,) = vjp(pla.eigh, A, ct=(wbar, Vbar))
    # the paper writes A = U^T diag(lambda) U with eigenvectors in the rows of U = V^T
    U, Ubar = V.T, Vbar.T
    eps = pla.GAP_EPS * np.max(np.abs(w))
    F = 1 / h(w[:, None] - w[None, :], eps)
    np.fill_diagonal(F, 0)
    want = U.T @ (sym(Ubar @ U.T * F) + np.diag(wbar)) @ U
    # eigh reads the lower triangle, M = tril(A) + tril(A, -1)^T: the cotangent of A is L^T(want)
    want = np.tril(want) + np.tril(want.T, -1)
    np.testing.assert_allclose(Abar, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("shape", [(3, 5), (4, 4), (5, 3)])
def test_gesvd_vjp_matches_paper(shape):
    A = rand(*shape)
    u, s, vh = pla.svd(A)
    ubar, sbar, vhbar = rand(*u.shape), rand(*s.shape), rand(*vh.shape)
    (Abar,) = vjp(pla.svd, A, ct=(ubar, sbar, vhbar))
    # the paper's m <= n form A = U^T diag(lambda) V; for a tall A apply it to A^T
    if shape[0] <= shape[1]:
        Up, Vp, Upbar, Vpbar = u.T, vh, ubar.T, vhbar
    else:
        Up, Vp, Upbar, Vpbar = vh, u.T, vhbar, ubar.T
    lam, Lam, Lambar = s, np.diag(s), np.diag(sbar)
    eps = pla.GAP_EPS * np.max(s)
    E = 1 / (h(lam[:, None] - lam[None, :], eps) * h(lam[:, None] + lam[None, :], eps))
    np.fill_diagonal(E, 0)
    Linv = np.diag(1 / lam)
    G1 = Upbar @ Up.T + Linv @ Vpbar @ Vp.T @ Lam
    G2 = Lambar + 2 * sym(G1 * E) @ Lam - (Linv @ Vpbar @ Vp.T) * np.eye(len(s))
    want = Up.T @ (G2 @ Vp + Linv @ Vpbar)
    want = want if shape[0] <= shape[1] else want.T
    np.testing.assert_allclose(Abar, want, rtol=1e-8, atol=1e-10)


def test_batched_and_float32_gradients():
    A = spd(rand(3, 4, 4)).astype(np.float32)
    g = pb.grad(lambda A: np.sum(pla.logdet(A)))(A)
    assert g.dtype == np.float32 and g.shape == (3, 4, 4)
    np.testing.assert_allclose(g, np.linalg.inv(A.astype(np.float64)), rtol=1e-4, atol=1e-5)


# --- bad input ---------------------------------------------------------------------------------


def _line(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return f"{start + next(i for i, line in enumerate(lines) if text in line)}"


def test_cholesky_of_non_pd_matrix_raises_with_info_and_line():
    def f(A):
        L = pla.cholesky(A)
        return L.sum()

    A = np.diag([1.0, 2.0, -1.0, 4.0])
    with pytest.raises(pb.LinAlgError, match=r"cholesky: the leading minor of order 3 .*info=3") as e:
        pb.jit(f)(A)
    assert f"test_linalg.py:{_line(f, 'pla.cholesky(A)')}" in str(e.value)
    assert isinstance(e.value, np.linalg.LinAlgError)
    with pytest.raises(pb.LinAlgError):
        pb.grad(f)(A)
    with pytest.raises(pb.LinAlgError, match="order 3"):
        pla.cholesky(A)


def test_cholesky_ex_reports_instead_of_raising():
    L, info = pla.cholesky_ex(np.diag([1.0, 2.0, -1.0]))
    assert info == 3
    _, info = pla.cholesky_ex(np.eye(3))
    assert info == 0
    _, infos = pla.cholesky_ex(np.stack([np.eye(2), -np.eye(2)]))
    np.testing.assert_array_equal(infos, [0, 1])


def test_singular_triangular_solve_raises():
    def f(L, b):
        return pla.solve_triangular(L, b, lower=True).sum()

    L = np.tril(np.ones((3, 3)))
    L[1, 1] = 0.0
    with pytest.raises(pb.LinAlgError, match="solve_triangular: singular matrix: diagonal element 2 is zero") as e:
        pb.jit(f)(L, np.ones(3))
    assert f"test_linalg.py:{_line(f, 'solve_triangular(L, b')}" in str(e.value)


def test_shape_errors_at_trace_time():
    with pytest.raises(pb.TracingError, match="square"):
        pb.make_ir(lambda a: pla.cholesky(a))(np.ones((3, 4)))
    with pytest.raises(pb.TracingError, match="does not fit"):
        pb.make_ir(lambda a, b: pla.solve_triangular(a, b))(np.eye(3), np.ones((4, 2)))
    with pytest.raises(pb.TracingError, match="full_matrices=False"):
        pb.make_ir(lambda a: np.linalg.svd(a))(np.ones((3, 4)))
    with pytest.raises(pb.TracingError, match="m <= n"):
        pb.make_ir(lambda a: pla.lq(a))(np.ones((4, 3)))
    with pytest.raises(ValueError, match="trans"):
        pb.make_ir(lambda a, b: pla.solve_triangular(a, b, trans="X"))(np.eye(3), np.ones(3))


def test_scipy_functions_name_their_pullback_equivalent():
    """SciPy functions that do not trace by their own names (tests/frontend/test_scipy_linalg_names.py has
    those that do) say what to use instead."""
    with pytest.raises(TypeError, match="use pullback.linalg.eig instead"):
        pb.make_ir(lambda a: scipy.linalg.eig(a))(np.eye(3))
    with pytest.raises(TypeError, match="pullback.linalg has no equivalent of it yet"):
        pb.make_ir(lambda a: scipy.linalg.schur(a))(np.eye(3))


def test_repeated_eigenvalues_give_finite_gradients():
    A = np.diag([1.0, 1.0, 2.0, 2.0])  # repeated by design
    g = pb.grad(lambda A: np.sum(pla.eigh(A)[1][:, 0] ** 3))(A)
    assert np.all(np.isfinite(g))
    g = pb.grad(lambda A: np.sum(pla.svd(A)[0] ** 3))(np.eye(3))
    assert np.all(np.isfinite(g))


def test_real_vectors_are_numpys_and_complex_ones_get_a_deterministic_phase():
    """Real eigen- and singular vectors are NumPy's own, signs included (a user of np.linalg gets
    NumPy's answer); complex ones have their largest-magnitude entry real positive."""
    A = sym(rand(4, 4))
    np.testing.assert_array_equal(pla.eigh(A)[1], np.linalg.eigh(A)[1])
    X = rand(3, 5)
    for ours, numpys in zip(pla.svd(X), np.linalg.svd(X, full_matrices=False)):
        np.testing.assert_array_equal(ours, numpys)
    Z = rand(4, 4) + 1j * rand(4, 4)
    _, V = pla.eigh(Z + Z.conj().T)
    big = V[np.argmax(np.abs(V), axis=0), np.arange(4)]
    np.testing.assert_allclose(big.imag, 0, atol=1e-15)
    assert np.all(big.real > 0)
    u, s, vh = pla.svd(rand(3, 5) + 1j * rand(3, 5))
    np.testing.assert_allclose(phase(u, (vh,))[0], u)


# --- the generated code ------------------------------------------------------------------------


def gp_nll(X, y, log_ell, log_sf2, log_sn2):
    d2 = np.sum(X**2, 1)[:, None] + np.sum(X**2, 1)[None, :] - 2 * X @ X.T
    K = np.exp(log_sf2) * np.exp(-0.5 * d2 / np.exp(2 * log_ell)) + np.exp(log_sn2) * np.eye(X.shape[0], dtype=X.dtype)
    L = pla.cholesky(K)
    alpha = pla.solve_triangular(L, y, lower=True)
    return 0.5 * alpha @ alpha + np.sum(np.log(np.diag(L)))


def test_generated_code_calls_lapack_on_transposed_views_without_inverses():
    X, y = rand(6, 2), rand(6)
    src = pb.differentiate(gp_nll, argnums=(2, 3, 4)).source(X, y, 0.1, 0.2, -1.0)
    assert "scipy.linalg.lapack.dpotrf(K.T, overwrite_a=1)" in src  # the F-view, in place: K is dead after
    assert "scipy.linalg.blas.dtrsv(" in src  # the solves of the vector y
    assert "inv(" not in src and "np.linalg" not in src.replace("np.linalg.LinAlgError", "")
    src32 = pb.source(gp_nll, X.astype(np.float32), y.astype(np.float32), np.float32(0.1), np.float32(0.2),
                      np.float32(-1.0))
    assert "scipy.linalg.lapack.spotrf" in src32 and "scipy.linalg.blas.strsv" in src32


def test_batched_operators_loop_in_generated_code():
    src = pb.source(lambda A: pla.cholesky(A), spd(rand(2, 3, 3)))
    assert "for k in np.ndindex(2):" in src


@pytest.mark.parametrize("trans", [False, True])
def test_large_products_in_lapack_programs_use_scipy_blas(trans):
    """Past ONE_BLAS_MIN_WORK multiply-adds, syrk and matmul print as SciPy's dsyrk/dgemm
    (one OpenBLAS thread pool per program); results and gradients are unchanged."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((300, 64) if trans else (64, 300)) / 10
    W = rng.standard_normal((64, 64))

    def f(a, W):
        S = pla.syrk(a, trans=trans) + np.eye(64)
        return np.sum(pla.cholesky(S) * W) + np.sum((S @ W) * W)

    src = pb.differentiate(f).source(a, W)
    assert "scipy.linalg.blas.dsyrk(" in src and "scipy.linalg.blas.dgemm(" in src
    S = (a.T @ a if trans else a @ a.T) + np.eye(64)
    np.testing.assert_allclose(pb.jit(f)(a, W), np.sum(np.linalg.cholesky(S) * W) + np.sum((S @ W) * W), rtol=1e-12)
    check_grads(f, (a, W))
