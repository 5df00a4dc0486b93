"""LU and Cholesky composites differentiate at the solve (issue 16): the printed gradients make the
expert's LAPACK calls (one factorisation; getrs/getri, potrs/potri; no triangular products through
the factors), and their values meet the closed forms of Giles (2008) and Seeger et al. (2018) and
central finite differences."""

from __future__ import annotations

import re

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb
from pullback import linalg as pla

RNG = np.random.default_rng(16)


def general(n, dtype="float64", batch=()):
    a = RNG.standard_normal((*batch, n, n)) + n * np.eye(n)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal((*batch, n, n))
    return a.astype(dtype)


def spd(n):
    x = RNG.standard_normal((n, n))
    return x @ x.T / n + np.eye(n)


def calls(source: str) -> dict[str, int]:
    """How many times each LAPACK/BLAS routine is called (dtype prefix dropped)."""
    found: dict[str, int] = {}
    for name in re.findall(r"scipy\.linalg\.(?:lapack|blas)\.[sdcz](\w+)\(", source):
        found[name] = found.get(name, 0) + 1
    return found


def grad_calls(f, *args) -> dict[str, int]:
    return calls(pb.differentiate(f).source(*args, program="grad"))


def gp_lu(K, y):
    return 0.5 * y @ np.linalg.solve(K, y) + 0.5 * np.linalg.slogdet(K)[1]


def gp_pos(K, y):
    return 0.5 * y @ pla.solve(K, y, assume_a="pos") + 0.5 * pla.logdet(K)  # both read the upper triangle


# --- the call sequences -------------------------------------------------------------------------

N = 6
W = RNG.standard_normal((N, N))


@pytest.mark.parametrize("name, f, expected", [
    # gemm: the cotangent's product, its sign in alpha (``-(A^{-T} W) X^T``, ``-X^T W X^T``)
    ("solve", lambda A: np.sum(W * np.linalg.solve(A, W)), {"getrf": 1, "getrs": 2, "gemm": 1}),
    ("inv", lambda A: np.sum(W * np.linalg.inv(A)), {"getrf": 1, "getri": 1, "gemm": 1}),
    ("slogdet", lambda A: np.linalg.slogdet(A)[1], {"getrf": 1, "getri": 1}),
    ("gp-lu", lambda A: gp_lu(A, W[0]), {"getrf": 1, "getrs": 2, "getri": 1, "ger": 1}),  # ger: rank-1 into getri's
])
def test_lu_gradients_make_the_experts_calls(name, f, expected):
    """One getrf serves every use; reverse mode is getrs(trans) or getri with its factors."""
    assert grad_calls(f, general(N)) == expected


def test_det_gradient_is_det_times_getri_off_the_singular_branch():
    """det A^{-T} by getri, one getrf; the exact adjugate (a factorisation of its own, two triangular
    solves) runs only where a pivot is exactly zero, in a branch of its own, which takes A (so that
    the regular path's factors are A^T's: ``opt.transposed_lu``)."""
    source = pb.differentiate(np.linalg.det).source(general(N), program="grad")
    helper = source.index("\ndef singular_adjugate(")  # the exact branch: a function of its own, after
    found = calls(source[:helper])
    assert found == {"getrf": 1, "getri": 1}
    assert calls(source[helper:])["getrf"] == 1 and "getri" not in calls(source[helper:])
    assert "singular_adjugate(a)" in source[:helper] and "for " not in source[:helper]  # no loop on pivots


def test_gp_with_solve_pos_and_logdet_prints_potrf_potrs_potri():
    """The GP likelihood 0.5 y^T K^{-1} y + 0.5 log det K: potrf, one potrs (the cotangent's solve
    of 0.5 y is half the value's), potri, and rank-1 updates of potri's buffer (ger), nothing
    else of O(n^3) and no n x n outer product made and then added."""
    source = pb.differentiate(gp_pos).source(spd(N), W[0], program="grad")
    found = calls(source)
    assert found.pop("ger") in (1, 2)
    assert found == {"potrf": 1, "potrs": 1, "potri": 1}
    products = [line for line in source.splitlines() if " @ " in line and not line.strip().startswith("#")]
    assert len(products) == 1  # y @ x


def test_solve_and_slogdet_share_one_factorisation():
    """CSE before linearising: the gradient factors K once, for the value and the derivative."""
    K, y = general(N), W[0]
    assert grad_calls(gp_lu, K, y)["getrf"] == 1
    assert calls(pb.differentiate(gp_lu).source(K, y, program="vjp"))["getrf"] == 1


# --- values against the closed forms -------------------------------------------------------------


def test_solve_gradient_is_minus_solve_transposed_times_x():
    A, B = general(5), RNG.standard_normal((5, 3))
    Wb = RNG.standard_normal((5, 3))
    value, (gA, gB) = pb.value_and_grad(lambda A, B: np.sum(Wb * np.linalg.solve(A, B)), (0, 1))(A, B)
    X = np.linalg.solve(A, B)
    Bbar = np.linalg.solve(A.T, Wb)
    np.testing.assert_allclose(value, np.sum(Wb * X), rtol=1e-12)
    np.testing.assert_allclose(gB, Bbar, rtol=1e-10)
    np.testing.assert_allclose(gA, -Bbar @ X.T, rtol=1e-9, atol=1e-12)


def test_inv_gradient_is_minus_inv_t_w_inv_t():
    A = general(5)
    X = np.linalg.inv(A)
    np.testing.assert_allclose(pb.grad(lambda A: np.sum(W[:5, :5] * np.linalg.inv(A)))(A),
                               -X.T @ W[:5, :5] @ X.T, rtol=1e-9, atol=1e-12)


def test_det_and_slogdet_gradients():
    A = general(5)
    X = np.linalg.inv(A)
    np.testing.assert_allclose(pb.grad(np.linalg.det)(A), np.linalg.det(A) * X.T, rtol=1e-9)
    np.testing.assert_allclose(pb.grad(lambda A: np.linalg.slogdet(A)[1])(A), X.T, rtol=1e-10)
    np.testing.assert_allclose(pb.jit(np.linalg.det)(A), np.linalg.det(A), rtol=1e-12)


def test_complex_gradients_follow_the_conjugate_convention():
    """dL = Re tr(G^H dA): log|det A| has G = A^{-H}; Re sum(W X) of X = A^{-1} B has
    G_B = A^{-H} conj(W)^... checked against finite differences."""
    A = general(4, "complex128")
    np.testing.assert_allclose(pb.grad(lambda A: np.linalg.slogdet(A)[1])(A), np.linalg.inv(A).conj().T,
                               rtol=1e-10)
    B = RNG.standard_normal((4, 2)) + 1j * RNG.standard_normal((4, 2))
    check_grads(lambda A, B: np.real(np.sum(np.linalg.solve(A, B) * (1 + 2j))), [A, B])
    check_grads(lambda A: np.real(np.sum(np.linalg.inv(A) * (2 - 1j))), [A])
    check_grads(lambda A: np.real(np.linalg.det(A) * (1 + 1j)), [A])


def test_batched_gradients_match_each_matrix():
    A, b = general(3, batch=(2,)), RNG.standard_normal((2, 3, 2))
    gA = pb.grad(lambda A: np.sum(np.linalg.solve(A, b) ** 2))(A)
    for k in range(2):
        x = np.linalg.solve(A[k], b[k])
        np.testing.assert_allclose(gA[k], -np.linalg.solve(A[k].T, 2 * x) @ x.T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pb.grad(lambda A: np.sum(np.linalg.slogdet(A)[1]))(A),
                               np.linalg.inv(A).transpose(0, 2, 1), rtol=1e-10)
    np.testing.assert_allclose(pb.grad(lambda A: np.sum(np.linalg.det(A)))(A),
                               np.linalg.det(A)[:, None, None] * np.linalg.inv(A).transpose(0, 2, 1), rtol=1e-9)


def test_float32_keeps_its_dtype():
    A = general(4, "float32")
    for f, expected in [(lambda A: np.linalg.slogdet(A)[1], np.linalg.inv(A.astype(np.float64)).T),
                        (np.linalg.det, np.linalg.det(A.astype(np.float64)) * np.linalg.inv(A.astype(np.float64)).T),
                        (lambda A: np.sum(np.linalg.inv(A)), -(np.linalg.inv(A.astype(np.float64)).T
                                                               @ np.ones((4, 4)) @ np.linalg.inv(A.astype(
                                                                   np.float64)).T))]:
        g = pb.grad(f)(A)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, expected, rtol=2e-4, atol=1e-5)


def test_one_by_one():
    a = np.array([[2.5]])
    for f, expected in [(np.linalg.det, 1.0), (lambda a: np.linalg.slogdet(a)[1], 0.4),
                        (lambda a: np.sum(np.linalg.inv(a)), -0.16),
                        (lambda a: np.sum(np.linalg.solve(a, np.array([5.0]))), -0.8)]:
        g = pb.grad(f)(a)
        assert g.shape == (1, 1) and g[0, 0] == pytest.approx(expected)


def _adjugate(A):
    """The cofactor matrix, transposed (an oracle independent of LU)."""
    n = A.shape[0]
    C = np.empty_like(A)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(A, i, 0), j, 1)
            C[i, j] = (-1) ** (i + j) * np.linalg.det(minor)
    return C.T


@pytest.mark.parametrize("A", [
    np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]),  # rank 2: a zero pivot
    np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),  # rank 2 with two zero pivots
    np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 2.0]),  # rank 1: adj A = 0
], ids=["rank2", "rank2-two-zero-pivots", "rank1"])
def test_det_gradient_is_the_adjugate_at_singular_matrices(A):
    np.testing.assert_allclose(pb.grad(np.linalg.det)(A), _adjugate(A).T, atol=1e-12)


def test_gp_gradients_are_the_experts_formula():
    """K_bar = 0.5 (K^{-1} - a a^T), a = K^{-1} y, whichever factorisation is asked for."""
    K, y = spd(5), RNG.standard_normal(5)
    a = np.linalg.solve(K, y)
    expected = 0.5 * (np.linalg.inv(K) - np.outer(a, a))
    value, gK = pb.value_and_grad(gp_pos)(K, y)
    np.testing.assert_allclose(value, 0.5 * y @ a + 0.5 * np.linalg.slogdet(K)[1], rtol=1e-12)
    np.testing.assert_allclose(gK, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pb.grad(gp_lu)(K, y), expected, rtol=1e-9, atol=1e-12)


def test_second_order_through_the_factors():
    """Gradients of gradients differentiate getrs/getri/potrs in their factors too."""
    A, b = general(3), RNG.standard_normal(3)
    check_grads(lambda A, b: np.sum(np.linalg.solve(A, b) ** 2), [A, b], order=2)
    check_grads(lambda A: np.linalg.slogdet(A)[1], [A], order=2)
    check_grads(lambda A: np.sum(np.linalg.inv(A)), [A], order=2)
    check_grads(lambda X, y: gp_pos(X @ X.T + 3 * np.eye(3), y), [A, b], order=2)  # a symmetric K in every direction
    check_grads(np.linalg.det, [A], order=2)


def test_singular_solve_still_raises_at_the_users_line():
    S = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(pb.LinAlgError, match=r"singular matrix: U\[1, 1\] is exactly zero"):
        pb.grad(lambda S: np.sum(np.linalg.solve(S, np.ones(2))))(S)
    with pytest.raises(pb.LinAlgError, match="singular"):
        pb.grad(lambda S: np.sum(np.linalg.inv(S)))(S)
