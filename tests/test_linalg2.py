"""Dense linear algebra beyond the factorisations: zero-size and broadcast inputs as NumPy 2
takes them, det at singular matrices, and the functions added on top (values against
NumPy/SciPy, derivatives against finite differences)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import pullback as pb
from pullback import linalg as pla
from pullback.testing import check_grads

rng = np.random.default_rng(7)


def rand(*shape, dtype="float64"):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def assert_tree_close(got, want, **tol):
    got = got if isinstance(got, tuple | list) else (got,)
    want = want if isinstance(want, tuple | list) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, **tol)


# --- zero-size and broadcast inputs ------------------------------------------------------------

EMPTY = [(0, 0), (2, 0, 0), (0, 3, 3)]


@pytest.mark.parametrize("shape", EMPTY)
@pytest.mark.parametrize("name", ["eigh", "svd", "qr", "det", "slogdet", "inv", "cholesky"])
def test_zero_size_square_like_numpy(name, shape):
    a = np.zeros(shape)
    if name == "eigh":
        got, want = pla.eigh(a), tuple(np.linalg.eigh(a))
    elif name == "svd":
        got, want = pla.svd(a), tuple(np.linalg.svd(a, full_matrices=False))
    elif name == "qr":
        got, want = pla.qr(a), tuple(np.linalg.qr(a))
    elif name == "slogdet":
        got, want = pla.slogdet(a), tuple(np.linalg.slogdet(a))
    else:
        got, want = getattr(pla, name)(a), getattr(np.linalg, name)(a)
    assert_tree_close(got, want)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 4)])
def test_zero_size_rectangular_svd_lu(shape):
    a = np.zeros(shape)
    assert_tree_close(pla.svd(a), tuple(np.linalg.svd(a, full_matrices=False)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        p, l, u = pla.lu(a)
    assert out.getvalue() == ""  # LAPACK's "illegal value" line is not printed
    m, n = shape[-2:]
    k = min(m, n)
    assert p.shape == shape[:-2] + (m, m) and l.shape == shape[:-2] + (m, k) and u.shape == shape[:-2] + (k, n)
    np.testing.assert_array_equal(p, np.broadcast_to(np.eye(m), p.shape))


def test_zero_size_lq_cholesky_inverse_and_solve():
    assert_tree_close(pla.lq(np.zeros((0, 0))), (np.zeros((0, 0)), np.zeros((0, 0))))
    assert_tree_close(pla.cholesky_inverse(np.zeros((0, 0))), np.zeros((0, 0)))
    assert_tree_close(pla.solve(np.zeros((0, 0)), np.zeros(0)), np.linalg.solve(np.zeros((0, 0)), np.zeros(0)))
    assert_tree_close(pla.solve(np.eye(3), np.zeros((3, 0))), np.zeros((3, 0)))


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0)])
def test_zero_size_gradients_are_empty(shape):
    a = np.zeros(shape)

    def f(a):
        w, v = pla.eigh(a)
        u, s, vh = pla.svd(a)
        return w.sum() + v.sum() + u.sum() + s.sum() + vh.sum() + pla.det(a).sum() + pla.inv(a).sum()

    g = pb.grad(f)(a)
    assert g.shape == shape


def test_gesdd_argument_error_is_not_reported_as_nonconvergence():
    src = pb.source(pla.svd, rand(3, 2))
    assert "did not converge" in src and "rejected its argument" in src


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 3), (2, 3, 4)), ((2, 3, 3), (3,)), ((2, 3, 3), (3, 2)), ((1, 3, 3), (4, 3, 1)), ((3, 3), (3,))])
def test_solve_broadcasts_like_numpy(a_shape, b_shape):
    a, b = rand(*a_shape) + 3 * np.eye(3), rand(*b_shape)
    assert_tree_close(pla.solve(a, b), np.linalg.solve(a, b), rtol=1e-10)
    assert_tree_close(pb.jit(np.linalg.solve)(a, b), np.linalg.solve(a, b), rtol=1e-10)
    check_grads(pla.solve, (a, b))


def test_solve_rejects_what_numpy_rejects():
    with pytest.raises(pb.TracingError, match="b is a vector only when b.ndim == 1"):
        pla.solve(np.eye(3) + np.zeros((2, 3, 3)), np.ones((2, 3)))


def test_solve_triangular_broadcasts_a_vector():
    a, b = np.triu(rand(2, 3, 3)) + 3 * np.eye(3), rand(3)
    want = np.stack([np.linalg.solve(np.triu(ai), b) for ai in a])
    assert_tree_close(pla.solve_triangular(a, b), want, rtol=1e-10)
    check_grads(lambda a, b: pla.solve_triangular(a, b), (a, b))


@pytest.mark.parametrize("name", ["det", "slogdet", "inv"])
def test_non_square_raises_like_numpy(name):
    with pytest.raises(np.linalg.LinAlgError):
        getattr(np.linalg, name)(np.ones((3, 2)))
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        getattr(pla, name)(np.ones((3, 2)))
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        pb.jit(getattr(np.linalg, name))(np.ones((3, 2)))


# --- det at singular matrices; svd at the zero matrix -----------------------------------------


def central_differences(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def cofactors(a):
    """The cofactor matrix, entry by entry from minors: the exact gradient of det."""
    n = a.shape[-1]
    c = np.empty_like(a)
    for i, j in np.ndindex(n, n):
        minor = np.delete(np.delete(a, i, 0), j, 1)
        c[i, j] = (-1) ** (i + j) * np.linalg.det(minor)
    return c


@pytest.mark.parametrize("rank", [3, 2, 1, 0])
def test_det_gradient_is_the_cofactor_matrix_at_any_rank(rank):
    a = rand(4, rank) @ rand(rank, 4)
    g = pb.grad(pla.det)(a)
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, cofactors(a), atol=1e-10)
    np.testing.assert_allclose(g, central_differences(np.linalg.det, a), atol=1e-7)


def test_det_gradient_at_a_singular_matrix_with_the_zero_pivot_first():
    """Partial pivoting meets the zero pivot in the middle here ([[0, 1], [0, 0]] blocks)."""
    a = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0], [0.0, 4.0, 5.0]])
    np.testing.assert_allclose(pb.grad(pla.det)(a), cofactors(a), atol=1e-12)
    z = rand(3, 2, dtype="complex128") @ rand(2, 3, dtype="complex128")
    _, tangent = pb.jvp(pla.det, (z,), (np.ones((3, 3), complex),))
    np.testing.assert_allclose(tangent, np.sum(cofactors(z)), atol=1e-10)


def test_det_second_order_at_a_singular_matrix():
    a = rand(3, 2) @ rand(2, 3)
    check_grads(pla.det, (a,), order=2)


@pytest.mark.parametrize("shape", [(3, 3), (3, 2), (2, 3)])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_svd_gradients_at_the_zero_matrix_are_finite(shape, dtype):
    a = np.zeros(shape, dtype)

    def f(a):
        u, s, vh = pla.svd(a)
        return np.real(u.sum() + vh.sum()) + s.sum() + np.real((u * s) @ vh).sum()

    g = pb.grad(f)(a)
    assert np.isfinite(g).all()
    # the nuclear norm's gradient there is U V^H, a subgradient of norm at most 1
    g = pb.grad(lambda a: pla.svd(a)[1].sum())(a)
    assert np.linalg.norm(g, 2) <= 1 + 1e-12
