"""Gradients of eigh and svd at exactly repeated eigen/singular values (issue 13, item 5).

Eigenvectors inside a repeated eigenvalue are not determined by the matrix, only their
eigenspace is; a loss that depends on the eigenspace alone (a projector, a spectral function
tr f(A), a sum over a whole cluster of singular values) is differentiable there. pullback's
derivative coefficients F_ij = 1/(w_j - w_i) are zero inside a cluster (gap within
GAP_ULPS units in the last place), so these gradients are exact. The oracles are the
analytic formulas (the projector's reduced resolvent, d tr f(A) = f'(A), d ||A||_* = U V^H)
and finite differences of NumPy itself where the loss is smooth.
"""

import numpy as np
import pytest
import scipy.linalg
from pullback.testing import check_grads

import pullback as pb
from tests import sample

rng = np.random.default_rng(13)


def unitary(n, complex_):
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    q, r = np.linalg.qr(z)
    return q * (np.diagonal(r) / np.abs(np.diagonal(r)))


def hermitian(w, complex_=False, rotate=True, dtype=None):
    """Q diag(w) Q^H, or diag(w) exactly (``rotate=False``); LAPACK returns the rotated
    matrix's repeated eigenvalues equal or a few ulps apart."""
    w = np.asarray(w, float)
    if not rotate:
        return np.diag(w).astype(complex if complex_ else float)
    q = unitary(len(w), complex_)
    a = (q * w) @ q.conj().T
    a = (a + a.conj().T) / 2
    return a if dtype is None else a.astype(dtype)


def weights(n, complex_):
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    return z + z.conj().T


def lower(g):
    """np.linalg.eigh reads the lower triangle of A, the Hermitian matrix M = tril(A) + tril(A, -1)^H:
    the gradient with respect to A of a loss whose gradient with respect to M is g."""
    return np.tril(g) + np.tril(g.conj().T, -1)


def cluster_projector_gradient(a, cluster, weight):
    """d <W, P>/dM for P the projector onto the eigenspace of the eigenvalues ``cluster``:
    dP = sum_i (P_i dM R_i + R_i dM P_i) over the cluster, P_i = v_i v_i^H and
    R_i = sum_{k outside} v_k v_k^H / (lambda_i - lambda_k)."""
    w, v = np.linalg.eigh(a)
    inside = np.zeros(len(w), bool)
    inside[cluster] = True
    g = np.zeros_like(weight, dtype=np.result_type(weight, v))
    for i in np.flatnonzero(inside):
        p = np.outer(v[:, i], v[:, i].conj())
        r = (v[:, ~inside] / (w[i] - w[~inside])) @ v[:, ~inside].conj().T
        g += p @ weight @ r + r @ weight @ p
    return g


def projector_loss(cluster, weight):
    def loss(a):
        w, v = np.linalg.eigh(a)
        vs = v[..., cluster]
        p = vs @ np.conj(np.swapaxes(vs, -1, -2))
        return np.real(np.sum(np.conj(weight) * p))

    return loss


SPECTRA = [([1.0, 1.0, 3.0], slice(0, 2)), ([1.0, 1.0, 3.0], slice(2, 3)),
           ([-2.0, 0.5, 0.5, 0.5, 4.0, 4.0], slice(1, 4)), ([-2.0, 0.5, 0.5, 0.5, 4.0, 4.0], slice(4, 6))]


@sample.grid("spectrum")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("rotate", [False, True], ids=["diagonal", "rotated"])
@pytest.mark.parametrize("spectrum, cluster", SPECTRA)
def test_eigenspace_projector_gradient_is_the_resolvent_formula(spectrum, cluster, rotate, complex_):
    a = hermitian(spectrum, complex_, rotate)
    weight = weights(len(spectrum), complex_)
    g = pb.grad(projector_loss(cluster, weight))(a)
    np.testing.assert_allclose(g, lower(cluster_projector_gradient(a, cluster, weight)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("gap, atol", [(1e-14, 1e-13), (2e-13, 1e-13), (1e-6, 1e-8), (1e-3, 1e-11)])
def test_projector_gradient_near_ties(gap, atol):
    """Gaps within 1000 ulps count as ties (exact); above, rounding in the loss's cotangent is
    amplified by 1/gap (about ulp * max|lambda| / gap), as for any gap formula."""
    a = hermitian([1.0, 1.0 + gap, 3.0])
    weight = weights(3, False)
    g = pb.grad(projector_loss(slice(0, 2), weight))(a)
    np.testing.assert_allclose(g, lower(cluster_projector_gradient(a, slice(0, 2), weight)), rtol=0, atol=atol)


def test_diag_1_1_3_projector_gradient_is_order_one():
    """The issue's case: V[:, :2] V[:, :2]^T at diag(1, 1, 3) had gradient entries of 6e12."""
    a = np.diag([1.0, 1.0, 3.0])
    weight = weights(3, False)
    g = pb.grad(projector_loss(slice(0, 2), weight))(a)
    want = np.zeros((3, 3))
    want[2, :2] = -(weight[2, :2] + weight[:2, 2]) / 2  # dP = -(E_i3 + E_3i) dA_3i / 2 for i = 1, 2
    np.testing.assert_allclose(g, want, rtol=0, atol=1e-14)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_projector_gradient_at_ties_matches_finite_differences(complex_):
    """The projector is smooth while its cluster stays apart from the rest of the spectrum."""
    a = hermitian([1.0, 1.0, 3.0, 3.0], complex_)
    check_grads(projector_loss(slice(0, 2), weights(4, complex_)), (a,), order=1)


def test_batched_projectors_at_ties():
    spectra = [[1.0, 1.0, 3.0], [-1.0, -1.0, 2.0]]
    a = np.stack([hermitian(s) for s in spectra])
    weight = weights(3, False)
    g = pb.grad(projector_loss(slice(0, 2), weight))(a)
    for i in range(2):
        want = lower(cluster_projector_gradient(a[i], slice(0, 2), weight))
        np.testing.assert_allclose(g[i], want, rtol=0, atol=1e-12)


def test_float32_projector_at_ties():
    """In float32 LAPACK's repeated eigenvalues are ~1e-7 apart: ties are judged in float32 ulps."""
    a = hermitian([1.0, 1.0, 3.0])
    weight = weights(3, False)
    g = pb.grad(projector_loss(slice(0, 2), weight.astype(np.float32)))(a.astype(np.float32))
    assert g.dtype == np.float32
    want = lower(cluster_projector_gradient(a, slice(0, 2), weight))
    np.testing.assert_allclose(g, want, rtol=0, atol=2e-5)


# --- spectral functions: d tr f(A) = f'(A) ----------------------------------------------------


def trace_of(f):
    """tr f(A) = tr(V f(Lambda) V^H) through the eigenvectors, not as sum f(w)."""
    def loss(a):
        w, v = np.linalg.eigh(a)
        return np.real(np.trace((v * f(w)) @ np.conj(v.T)))

    return loss


@sample.grid("name")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("rotate", [False, True], ids=["diagonal", "rotated"])
@pytest.mark.parametrize("name, f, f_prime", [
    ("exp", np.exp, scipy.linalg.expm),
    ("log", np.log, np.linalg.inv),
    ("square", np.square, lambda a: 2 * a),
])
def test_trace_of_matrix_function_gradient_is_derivative(name, f, f_prime, rotate, complex_):
    a = hermitian([0.5, 0.5, 0.5, 2.0, 2.0], complex_, rotate)
    g = pb.grad(trace_of(f))(a)
    np.testing.assert_allclose(g, lower(f_prime(a)), rtol=1e-12, atol=1e-12)


def test_trace_of_matrix_function_matches_finite_differences():
    check_grads(trace_of(np.exp), (hermitian([0.5, 0.5, 2.0, 2.0]),), order=1)


# --- singular values -----------------------------------------------------------------------------


def with_singular_values(s, shape, complex_, rotate=True):
    m, n = shape
    k = len(s)
    if not rotate:
        a = np.zeros(shape, complex if complex_ else float)
        a[range(k), range(k)] = s
        return a
    return (unitary(m, complex_)[:, :k] * s) @ unitary(n, complex_)[:k, :]


SHAPES = [(4, 4), (5, 4), (4, 6)]


def top_k_sum(k):
    return lambda a: np.sum(np.linalg.svd(a, compute_uv=False)[:k])


def top_k_factors(a, k):
    u, _, vh = np.linalg.svd(a, full_matrices=False)
    return u[:, :k] @ vh[:k]


@sample.grid("shape")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_spectral_norm_with_ties_below(shape, complex_):
    """||A||_2 = s_1, simple, with s_2 = s_3: the gradient is u_1 v_1^H."""
    a = with_singular_values([5.0, 2.0, 2.0, 1.0], shape, complex_)
    for loss in (top_k_sum(1), lambda a: np.linalg.norm(a, 2)):
        np.testing.assert_allclose(pb.grad(loss)(a), top_k_factors(a, 1), rtol=0, atol=1e-12)


@sample.grid("shape", "k")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("k", [2, 3])
def test_top_k_sum_with_ties_inside(shape, complex_, k):
    """s = (3, 3, 3, 1): the sum of the top 3 is smooth (ties inside, a gap after the third)."""
    s = [3.0, 3.0, 3.0, 1.0] if k == 3 else [3.0, 3.0, 1.0, 1.0]
    a = with_singular_values(s, shape, complex_)
    g = pb.grad(top_k_sum(k))(a)
    np.testing.assert_allclose(g, top_k_factors(a, k), rtol=0, atol=1e-12)
    check_grads(top_k_sum(k), (a,), order=1)


@sample.grid("shape")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("rotate", [False, True], ids=["diagonal", "rotated"])
def test_nuclear_norm_with_all_singular_values_equal(shape, rotate, complex_):
    """A = 2 Q (all singular values 2): ||A||_* = sum s, gradient U V^H, here A / 2."""
    a = with_singular_values([2.0] * min(shape), shape, complex_, rotate)
    for loss in (lambda a: np.sum(np.linalg.svd(a, compute_uv=False)), lambda a: np.linalg.norm(a, "nuc")):
        np.testing.assert_allclose(pb.grad(loss)(a), a / 2, rtol=0, atol=1e-12)


def polar_loss(k, weight):
    """<W, U_k V_k^H>: turning a cluster's u_i and v_i together leaves it unchanged, and it is
    smooth while s_k > s_{k+1} > 0 (the skew part of U^H dA V enters, over s_i + s_j)."""
    def loss(a):
        u, _, vh = np.linalg.svd(a, full_matrices=False)
        return np.real(np.sum(np.conj(weight) * (u[:, :k] @ vh[:k])))

    return loss


def left_projector_loss(k, weight):
    def loss(a):
        u, _, _ = np.linalg.svd(a, full_matrices=False)
        return np.real(np.sum(np.conj(weight) * (u[:, :k] @ np.conj(u[:, :k].T))))

    return loss


@sample.grid("shape")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("rotate", [False, True], ids=["diagonal", "rotated"])
def test_singular_subspace_projector_at_ties(shape, rotate, complex_):
    """U_2 U_2^H with s = (3, 3, 1, 0.5) is the eigenprojector of M = A A^H onto (9, 9):
    the gradient is 2 G_M A with G_M the projector gradient of M."""
    a = with_singular_values([3.0, 3.0, 1.0, 0.5], shape, complex_, rotate)
    m = shape[0]
    weight = weights(m, complex_)
    g = pb.grad(left_projector_loss(2, weight))(a)
    mm = a @ a.conj().T
    cluster = slice(m - 2, m)  # the two largest eigenvalues of A A^H, ascending order
    np.testing.assert_allclose(g, 2 * cluster_projector_gradient(mm, cluster, weight) @ a, rtol=0, atol=1e-11)


@sample.grid("shape")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("rotate", [False, True], ids=["diagonal", "rotated"])
def test_polar_factor_with_all_singular_values_equal(shape, rotate, complex_):
    """A = 2 Q: d(U V^H) = U (dP - dP^H) V^H / 4 + (I - U U^H) dA / 2 (tall; wide alike), so
    the gradient of <W, U V^H> is (U U^H W V V^H - Q W^H Q) / 4 + (I - Q Q^H) W / 2 (or W (I - Q^H Q) / 2)."""
    a = with_singular_values([2.0] * min(shape), shape, complex_, rotate)
    q = a / 2
    weight = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if complex_ else 0)
    g = pb.grad(polar_loss(min(shape), weight))(a)
    want = (q @ q.conj().T @ weight @ q.conj().T @ q - q @ weight.conj().T @ q) / 4
    if shape[0] > shape[1]:
        want += (np.eye(shape[0]) - q @ q.conj().T) @ weight / 2
    elif shape[0] < shape[1]:
        want += weight @ (np.eye(shape[1]) - q.conj().T @ q) / 2
    np.testing.assert_allclose(g, want, rtol=0, atol=1e-12)


@sample.grid("shape")
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_partial_polar_factor_at_ties_matches_finite_differences(shape, complex_):
    a = with_singular_values([3.0, 3.0, 1.0, 1.0], shape, complex_)
    weight = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if complex_ else 0)
    check_grads(polar_loss(2, weight), (a,), order=1)


def test_svd_of_diagonal_with_ties_is_order_one():
    """diag(3, 3, 1): the tie made E_ij = E_ji ~ 1/eps, as for eigh."""
    a = with_singular_values([3.0, 3.0, 1.0], (3, 3), False, rotate=False)
    weight = weights(3, False)
    g = pb.grad(left_projector_loss(2, weight))(a)
    want = 2 * cluster_projector_gradient(a @ a.T, slice(1, 3), weight) @ a
    np.testing.assert_allclose(g, want, rtol=0, atol=1e-13)
    assert np.max(np.abs(g)) < 10


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_single_precision_singular_subspace_at_ties(dtype):
    """float32 singular values of a matrix with s = (3, 3, 1) come out ~1e-7 apart: tied in float32 ulps."""
    complex_ = dtype == np.complex64
    a = with_singular_values([3.0, 3.0, 1.0, 0.5], (5, 4), complex_)
    weight = weights(5, complex_)
    g = pb.grad(left_projector_loss(2, weight.astype(dtype)))(a.astype(dtype))
    assert g.dtype == dtype
    want = 2 * cluster_projector_gradient(a @ a.conj().T, slice(3, 5), weight) @ a
    np.testing.assert_allclose(g, want, rtol=0, atol=2e-5)
