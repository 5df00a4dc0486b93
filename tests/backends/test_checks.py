"""Error checks printed once, after what they check (``backends.checks``, issue 29 item 4): an LU hoisted
out of a loop is checked before the loop, one LU serving two solves once, a Cholesky factor's diagonal
not again by the triangular solves of it; the gradients are the central differences', and a singular
matrix still raises NumPy's error."""

import re

import numpy as np
import pytest
import scipy.linalg as sla

import pullback as pb
from tests.oracles import central_differences


def invariant(A, b):
    x = b
    for _ in range(100):
        M = np.eye(3) + 0.1 * A
        y = np.linalg.solve(M, x)
        L = np.linalg.cholesky(M @ M.T)
        x = 0.5 * np.tanh(y) + 0.5 * sla.solve_triangular(L, x, lower=True)
    return np.sum(x ** 2)


def test_a_hoisted_lu_and_cholesky_are_checked_once_before_the_loop():
    rng = np.random.default_rng(4)
    A, b = rng.standard_normal((3, 3)), rng.standard_normal(3)
    d = pb.differentiate(invariant, argnums=(0, 1))
    src = d.source(A, b)
    before, loop = src.split("for t in range(100):", 1)
    assert before.count("dgetrf(") == 1 and before.count("if info > 0:") == 1 and before.count("if info_1:") == 1
    assert "raise" not in loop and "np.diagonal" not in src  # (potrf's check passed: L's diagonal is positive)
    g_A, g_b = d.grad(A, b)
    np.testing.assert_allclose(g_A, central_differences(invariant, (A, b), 0), rtol=1e-6)
    np.testing.assert_allclose(g_b, central_differences(invariant, (A, b), 1), rtol=1e-5, atol=1e-9)


def two_solves(A, x):
    y = np.linalg.solve(A, x)
    return np.sum(y ** 2) + np.sum(np.linalg.solve(A, 2 * x))


def test_one_lu_serving_two_solves_is_checked_once_right_after_it_and_still_raises():
    A, x = np.array([[2.0, 0.3, 0.1], [0.2, 1.5, 0.4], [0.1, 0.2, 3.0]]), np.array([0.5, -1.0, 2.0])
    d = pb.differentiate(two_solves)
    src = d.source(A, x)
    assert src.count("dgetrf(") == 1 and src.count("if info") == 1
    assert re.search(r"dgetrf\(.*\)\n\s+if info > 0:", src)
    np.testing.assert_allclose(d.grad(A, x), central_differences(two_solves, (A, x), 0), rtol=1e-6)
    with pytest.raises(np.linalg.LinAlgError, match="singular matrix"):
        d.grad(np.ones((3, 3)), x)


def triangles(L, b):
    return np.sum(sla.solve_triangular(L, b, lower=True) ** 2) + np.sum(sla.solve_triangular(L, 3 * b, lower=True))


def test_a_triangle_solved_twice_is_checked_once():
    L, b = np.tril(np.ones((3, 3))) + np.eye(3), np.array([1.0, -2.0, 0.5])
    d = pb.differentiate(triangles)
    src = d.source(L, b)
    assert src.count("if not np.diagonal(L).all():") == 1
    np.testing.assert_allclose(d.grad(L, b), central_differences(triangles, (L, b), 0), rtol=1e-6)
    with pytest.raises(np.linalg.LinAlgError, match="diagonal element 2 is zero"):
        d.grad(L - np.diag([0.0, 2.0, 0.0]), b)


def solve_in_branch(A, b, flag):
    _, logdet = np.linalg.slogdet(A)
    return pb.cond(flag, lambda: np.sum(np.linalg.solve(A, b)), lambda: logdet)


def test_a_solve_in_a_branch_keeps_its_check_there():
    """A branch not taken checks nothing: the shared LU of a singular matrix gives slogdet's -inf."""
    A, b = np.array([[2.0, 1.0], [1.0, 3.0]]), np.array([1.0, 2.0])
    f = pb.jit(solve_in_branch)
    src = pb.source(pb.jit(solve_in_branch), A, b, True)
    assert re.search(r"^\s{8}if info", src, re.M)  # in the branch, not after the getrf
    np.testing.assert_allclose(f(A, b, True), np.sum(np.linalg.solve(A, b)))
    assert f(np.ones((2, 2)), b, False) == -np.inf
