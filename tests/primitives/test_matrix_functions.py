"""Dense linear algebra beyond the factorisations: zero-size and broadcast inputs as NumPy 2
takes them, det at singular matrices, and the functions added on top (values against
NumPy/SciPy, derivatives against finite differences)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from pullback.testing import check_grads

import pullback as pb
from pullback import linalg as pla
from tests import sample

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
def test_zero_size_rectangular_svd_lu(shape, capfd):
    a = np.zeros(shape)
    assert_tree_close(pla.svd(a), tuple(np.linalg.svd(a, full_matrices=False)))
    p, l, u = pla.lu(a)
    assert capfd.readouterr().out == ""  # LAPACK's "illegal value" line (Fortran's stdout) is not printed
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
    src = pb.source(pla.svd, rand(3, 2) + 1j * rand(3, 2))  # real input calls np.linalg.svd
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
    shift = np.eye(4, k=1) * np.array([2.0, 3.0, 5.0, 1.0])  # rank 3, every pivot exactly zero
    for a in [np.array([[0.0, 1.0], [0.0, 0.0]]), shift, shift + np.diag([0.0, 7.0, 0.0, 0.0]),
              np.diag([0.0, 2.0, 0.0, 3.0]), shift.T @ np.diag([1.0, 2.0, 0.0, 4.0])]:
        np.testing.assert_allclose(pb.grad(pla.det)(a), cofactors(a), atol=1e-12)
    z = rand(3, 2, dtype="complex128") @ rand(2, 3, dtype="complex128")
    _, tangent = pb.jvp(pla.det, (z,), (np.ones((3, 3), complex),))
    np.testing.assert_allclose(tangent, np.sum(cofactors(z)), atol=1e-10)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_det_second_order(dtype):
    """At regular matrices (at singular ones the second derivative goes through LU's tangent)."""
    check_grads(pla.det, (rand(2, 3, 3, dtype=dtype),), order=2)


@sample.grid("shape")
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


# --- eigh(UPLO='U'), wide QR, matrix_power, matrix_rank, norm ----------------------------------


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_eigh_upper_reads_and_differentiates_the_upper_triangle(dtype):
    a = rand(4, 4, dtype=dtype)  # not Hermitian: the lower triangle must not matter
    w, v = pla.eigh(a, UPLO="U")
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a, UPLO="U"), rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.conj(v).T @ np.linalg.eigh(a, UPLO="U")[1]), np.eye(4), atol=1e-10)
    check_grads(lambda a: pla.eigh(a, UPLO="U"), (a,), order=1)
    check_grads(lambda a: np.linalg.eigvalsh(a, UPLO="U"), (a,), order=2)
    with pytest.raises(ValueError, match="UPLO"):
        pla.eigh(a, UPLO="X")
    np.testing.assert_allclose(pb.jit(lambda a: np.linalg.eigvalsh(a, UPLO="u"))(a), w, rtol=1e-12)


@sample.grid("shape")
@pytest.mark.parametrize("shape", [(3, 5), (2, 2, 4), (1, 3)])
@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
def test_qr_of_a_wide_matrix(shape, dtype):
    a = rand(*shape, dtype=dtype)
    q, r = pla.qr(a)
    qn, rn = np.linalg.qr(a)
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(q, qn, atol=tol)
    np.testing.assert_allclose(r, rn, atol=tol)
    np.testing.assert_allclose(pb.jit(lambda a: np.linalg.qr(a, mode="r"))(a), rn, atol=tol)
    if dtype != "float32":
        check_grads(pla.qr, (a,), order=2 if shape == (3, 5) and dtype == "float64" else 1)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 6, -1, -3])
def test_matrix_power(n):
    a = rand(2, 3, 3) + 2 * np.eye(3)
    want = np.linalg.matrix_power(a, n)
    np.testing.assert_allclose(pb.jit(lambda a: np.linalg.matrix_power(a, n))(a), want, rtol=1e-10, atol=1e-12)
    check_grads(lambda a: pla.matrix_power(a, n), (a,), order=2 if n != -3 else 1)
    ints = np.arange(4).reshape(2, 2)
    if n >= 0:
        got = pla.matrix_power(ints, n)
        assert got.dtype == np.linalg.matrix_power(ints, n).dtype
        np.testing.assert_array_equal(got, np.linalg.matrix_power(ints, n))
    with pytest.raises(TypeError):
        pla.matrix_power(a, 1.5)


def test_matrix_rank_like_numpy():
    low = rand(5, 2) @ rand(2, 4)
    for x in [low, rand(2, 3, 3), np.zeros((0, 0)), np.zeros((2, 0, 3)), np.ones(3), np.zeros(3)]:
        got = pla.matrix_rank(x)
        np.testing.assert_array_equal(got, np.linalg.matrix_rank(x))
        assert np.asarray(got).dtype == np.int64
    h = low[:4] @ low[:4].T
    assert pla.matrix_rank(h, hermitian=True) == np.linalg.matrix_rank(h, hermitian=True) == 2
    assert pla.matrix_rank(low, tol=1e-3) == 2
    assert pla.matrix_rank(low, rtol=0.9) == np.linalg.matrix_rank(low, rtol=0.9)
    assert pb.jit(np.linalg.matrix_rank)(low) == 2


MATRIX_ORDS = [None, "fro", "nuc", np.inf, -np.inf, 1, -1, 2, -2]
VECTOR_ORDS = [None, 0, 1, 2, 3, 0.5, -1, -2, np.inf, -np.inf]


def _same(got, want):
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_norm_values_match_numpy_for_every_order(dtype):
    m, t, v = rand(3, 4, dtype=dtype), rand(2, 3, 4, dtype=dtype), rand(5, dtype=dtype)
    for ord in MATRIX_ORDS:
        for axis in [None, (1, 0), (-1, -2)] if ord is not None else [None, (0, 1)]:
            for keepdims in (False, True):
                _same(pla.norm(m, ord, axis, keepdims), np.linalg.norm(m, ord, axis, keepdims))
        _same(pla.norm(t, ord, (0, 2), True), np.linalg.norm(t, ord, (0, 2), True))
    for ord in VECTOR_ORDS:
        for keepdims in (False, True):
            _same(pla.norm(v, ord, None, keepdims), np.linalg.norm(v, ord, None, keepdims))
            _same(pla.norm(t, ord, 1, keepdims), np.linalg.norm(t, ord, 1, keepdims))
    _same(pla.norm(t), np.linalg.norm(t))
    _same(pb.jit(lambda x: np.linalg.norm(x, "nuc"))(m), np.linalg.norm(m, "nuc"))
    _same(pla.norm(np.arange(5)), np.linalg.norm(np.arange(5)))


def test_norm_rejects_what_numpy_rejects():
    m, v, t = rand(3, 4), rand(4), rand(2, 3, 4)
    for args in [(v, "fro"), (m, 3, (0, 1)), (t, 2), (m, None, (0, 0)), (m, "nuc", 0)]:
        with pytest.raises(ValueError):
            np.linalg.norm(*args)
        with pytest.raises(ValueError):
            pla.norm(*args)
    with pytest.raises(np.exceptions.AxisError):
        pla.norm(m, None, 2)


@pytest.mark.parametrize("ord", MATRIX_ORDS)
def test_norm_matrix_gradients(ord):
    check_grads(lambda x: np.linalg.norm(x, ord), (rand(3, 4),))
    check_grads(lambda x: np.linalg.norm(x, ord, axis=(2, 1), keepdims=True), (rand(2, 3, 4, dtype="complex128"),))


@pytest.mark.parametrize("ord", [None, 1, 2, 3, 0.5, -1, np.inf, -np.inf])
def test_norm_vector_gradients(ord):
    smooth = ord not in (1, -1, np.inf, -np.inf)
    check_grads(lambda x: np.linalg.norm(x, ord, axis=-1), (rand(2, 5),), order=2 if smooth else 1)
    check_grads(lambda x: np.linalg.norm(x, ord), (rand(4, dtype="complex128"),))


# --- pinv, lstsq ----------------------------------------------------------------------------------


@sample.grid("shape")
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 4, 3), (0, 3), (2, 3, 0)])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_pinv_like_numpy(shape, dtype):
    a = rand(*shape, dtype=dtype)
    _same(pla.pinv(a), np.linalg.pinv(a))
    _same(pb.jit(np.linalg.pinv)(a), np.linalg.pinv(a))
    if a.size:
        check_grads(pla.pinv, (a,), order=2 if dtype == "float64" else 1)


def test_pinv_cutoffs_and_hermitian_like_numpy():
    low = rand(5, 2) @ rand(2, 4) + 1e-9 * rand(5, 4)
    for kwargs in [{}, {"rcond": 1e-6}, {"rtol": None}, {"rtol": 1e-3}]:
        np.testing.assert_allclose(pla.pinv(low, **kwargs), np.linalg.pinv(low, **kwargs), rtol=1e-8, atol=1e-8)
    h = rand(4, 4)
    np.testing.assert_allclose(pla.pinv(h, hermitian=True), np.linalg.pinv(h, hermitian=True), rtol=1e-10)
    with pytest.raises(ValueError):
        pla.pinv(h, rcond=1e-3, rtol=1e-3)


def test_pinv_derivative_at_constant_low_rank_and_repeated_singular_values():
    """Golub-Pereyra needs no singular-value gaps: exact at an orthogonal matrix (all s = 1)."""
    b, c = rand(5, 2), rand(2, 4)
    check_grads(lambda b, c: pla.pinv(b @ c, rtol=None), (b, c))
    q = np.linalg.qr(rand(4, 4))[0]
    check_grads(pla.pinv, (q,), order=2)


@sample.grid("a_shape")
@pytest.mark.parametrize("a_shape, b_shape", [((5, 3), (5, 2)), ((5, 3), (5,)), ((2, 4), (2,)), ((3, 3), (3, 2)),
                                              ((3, 0), (3,)), ((0, 3), (0, 2))])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_lstsq_like_numpy(a_shape, b_shape, dtype):
    a, b = rand(*a_shape, dtype=dtype), rand(*b_shape, dtype=dtype)
    for got, want in zip(pla.lstsq(a, b), np.linalg.lstsq(a, b)):
        assert np.asarray(got).dtype == np.asarray(want).dtype
        _same(got, want) if np.size(want) else (np.shape(got) == np.shape(want) or pytest.fail("shape"))
    assert pb.jit(lambda a, b: np.linalg.lstsq(a, b)[2])(a, b) == np.linalg.lstsq(a, b)[2]
    if a.size:
        second = dtype == "float64" and a_shape in ((5, 3), (2, 4)) and len(b_shape) == 1
        check_grads(lambda a, b: pla.lstsq(a, b)[:2], (a, b), order=2 if second else 1)


def test_lstsq_rank_and_singular_values():
    low = rand(5, 2) @ rand(2, 3) + 1e-8 * rand(5, 3)
    b = rand(5)
    got, want = pla.lstsq(low, b, rcond=1e-6), np.linalg.lstsq(low, b, rcond=1e-6)
    assert got[2] == want[2] == 2
    assert pla.lstsq(low, b, rcond=-1)[2] == np.linalg.lstsq(low, b, rcond=-1)[2] == 3
    np.testing.assert_allclose(got[3], want[3], rtol=1e-10, atol=1e-12)
    check_grads(lambda a: pla.lstsq(a, b)[3], (rand(5, 3),), order=2)


def test_cupy_sources():
    a = rand(3, 3)
    assert "cusolver.dgetrf(" in pb.source(pla.det, a, device="cuda")
    assert "cp.linalg.pinv(" in pb.source(pla.pinv, a, device="cuda")
    assert "cp.linalg.qr(" in pb.source(pla.qr, rand(2, 4), device="cuda")
    grad_src = pb.source(pb.grad(pla.det), a, device="cuda")
    assert "scipy.linalg.lapack" not in grad_src and "cusolver.dgetrf(" in grad_src and "lu_solve(" in grad_src


# --- eig ------------------------------------------------------------------------------------------

ROTATION = 3 * np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


@pytest.mark.parametrize("make", [lambda: rand(4, 4), lambda: rand(3, 3) + ROTATION, lambda: rand(2, 4, 4),
                                  lambda: rand(3, 3, dtype="complex128"), lambda: rand(3, 3, dtype="float32")])
def test_eig_like_numpy(make):
    from tests.primitives.linalg2_cases import np_eig

    a = make()
    w, v = pla.eig(a)
    wn, vn = np_eig(a)
    tol = 1e-5 if a.dtype == np.float32 else 1e-10
    assert w.dtype == wn.dtype and v.dtype == vn.dtype
    np.testing.assert_allclose(w, wn, atol=tol)
    np.testing.assert_allclose(v, vn, atol=tol)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, atol=tol)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=10 * tol)
    np.testing.assert_allclose(pb.jit(np.linalg.eigvals)(a), wn, atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_eig_derivatives(dtype):
    a = rand(3, 3, dtype=dtype) + ROTATION
    check_grads(pla.eig, (a,), order=2)
    # the eigenvalue derivative against the classical formula dw_j = u_j^H dA v_j / (u_j^H v_j)
    w, v = np.linalg.eig(a)
    u = np.linalg.inv(v).conj().T  # left eigenvectors
    da = rand(3, 3, dtype=dtype)
    _, (dw, _) = pb.jvp(pla.eig, (a,), (da,))
    want = np.einsum("ij,ik,kj->j", u.conj(), da, v) / np.einsum("ij,ij->j", u.conj(), v)
    np.testing.assert_allclose(dw, want, atol=1e-10)


def test_eig_empty_and_cuda():
    w, v = pla.eig(np.zeros((0, 0)))
    assert w.shape == (0,) and v.shape == (0, 0) and w.dtype == np.complex128
    assert "cp.linalg.eig(" in pb.source(pla.eig, rand(3, 3), device="cuda")
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        pla.eig(rand(3, 2))


# --- expm, sqrtm, solve_sylvester ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_expm_and_its_frechet_derivative_match_scipy(dtype):
    import scipy.linalg

    a, e = rand(3, 3, dtype=dtype), rand(3, 3, dtype=dtype)
    np.testing.assert_allclose(pla.expm(a), scipy.linalg.expm(a), rtol=1e-12)
    _, tangent = pb.jvp(pla.expm, (a,), (e,))
    np.testing.assert_allclose(tangent, scipy.linalg.expm_frechet(a, e, compute_expm=False), rtol=1e-10)
    block = scipy.linalg.expm(np.block([[a, e], [np.zeros_like(a), a]]))
    np.testing.assert_allclose(tangent, block[:3, 3:], rtol=1e-10)
    check_grads(pla.expm, (a,), order=2 if dtype == "float64" else 1)  # the cases check expm_frechet's rules


def test_expm_batched_and_empty():
    import scipy.linalg

    a = rand(2, 3, 3)
    np.testing.assert_allclose(pla.expm(a), scipy.linalg.expm(a), rtol=1e-12)
    assert pla.expm(np.zeros((0, 0))).shape == (0, 0)
    src = pb.source(pla.expm, rand(3, 3), device="cuda")
    assert "cupyx.scipy.linalg.expm(" in src
    assert "cupyx.scipy.linalg.expm(" in pb.source(pb.grad(lambda a: pla.expm(a).sum()), rand(3, 3), device="cuda")


def test_sqrtm():
    import scipy.linalg

    s = rand(3, 3)
    s = s @ s.T + np.eye(3)
    x = pla.sqrtm(s)
    np.testing.assert_allclose(x, scipy.linalg.sqrtm(s), rtol=1e-10)
    np.testing.assert_allclose(x @ x, s, rtol=1e-10)
    check_grads(pla.sqrtm, (s,), order=2)
    z = rand(3, 3, dtype="complex128") + 3 * np.eye(3)
    np.testing.assert_allclose(pla.sqrtm(z), scipy.linalg.sqrtm(z), rtol=1e-10)
    check_grads(pla.sqrtm, (z,))
    neg = np.diag([-1.0, 2.0])  # SciPy's root is complex: so is the program traced at it
    np.testing.assert_allclose(pla.sqrtm(neg), scipy.linalg.sqrtm(neg), rtol=1e-12)
    assert pla.sqrtm(neg).dtype == np.complex128
    with pytest.raises(NotImplementedError, match="no CuPy emitter"):
        pb.source(pla.sqrtm, s, device="cuda")


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_solve_sylvester(dtype):
    import scipy.linalg

    a, b, q = rand(3, 3, dtype=dtype), rand(2, 2, dtype=dtype), rand(3, 2, dtype=dtype)
    x = pla.solve_sylvester(a, b, q)
    np.testing.assert_allclose(x, scipy.linalg.solve_sylvester(a, b, q), rtol=1e-10)
    np.testing.assert_allclose(a @ x + x @ b, q, atol=1e-10)
    check_grads(pla.solve_sylvester, (a, b, q), order=2 if dtype == "float64" else 1)
    with pytest.raises(NotImplementedError, match="no CuPy emitter"):
        pb.source(pla.solve_sylvester, a, b, q, device="cuda")


def test_scipy_linalg_names_trace():
    """scipy.linalg.expm, sqrtm and solve_sylvester on traced arrays, by their SciPy names, give
    SciPy's values and pullback's derivatives."""
    a, b, q = rand(3, 3) / 3, rand(3, 3) / 3 + 2 * np.eye(3), rand(3, 3)
    spd_a = a @ a.T + np.eye(3)

    def f(a, b, q, s):
        return scipy.linalg.expm(a), scipy.linalg.sqrtm(s), scipy.linalg.solve_sylvester(a, b, q)

    for got, want in zip(pb.jit(f)(a, b, q, spd_a), f(a, b, q, spd_a)):
        np.testing.assert_allclose(got, want, rtol=1e-10)
    check_grads(lambda a, b, q, s: sum(np.sum(o) for o in f(a, b, q, s)), [a, b, q, spd_a])
