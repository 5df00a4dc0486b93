"""Structured Hessians printed in their structure: the masked matrix-factorisation Hessian is
block-diagonal (never an (n, k, n, m) tensor, materialised as zeros and one diagonal write,
``compressed=True`` gives its blocks), the logistic and weighted least-squares Hessians scale the
n x d matrix once and add a ridge's identity in place. Numbers against hand-written Hessians and
finite differences of pullback's gradient."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb
from pullback.api.kronecker import KroneckerOperator


def masked(U, V, Y, M):
    return np.sum(M * (U @ V.T - Y) ** 2)


def masked_ridge(U, V, Y, M):
    return np.sum(M * (U @ V.T - Y) ** 2) + 0.1 * np.sum(U ** 2)


def masked_blocks(V, M):
    """``B[i] = 2 V^T diag(M[i]) V``, by a loop over rows (the oracle, independent of einsum paths)."""
    return np.stack([2.0 * V.T @ (M[i][:, None] * V) for i in range(M.shape[0])])


def block_dense(B):
    n, k, _ = B.shape
    H = np.zeros((n, k, n, k))
    for i in range(n):
        H[i, :, i, :] = B[i]
    return H


def numerical_hessian(f, args, eps=1e-5):
    x, grad = args[0], pb.grad(f)
    cols = []
    for i in range(x.size):
        d = np.zeros(x.size)
        d[i] = eps
        d = d.reshape(x.shape)
        cols.append(((grad(x + d, *args[1:]) - grad(x - d, *args[1:])) / (2 * eps)).reshape(-1))
    return np.stack(cols, axis=1)


def mf_data(rng, n, k, m):
    U, V, Y = rng.standard_normal((n, k)), rng.standard_normal((m, k)), rng.standard_normal((n, m))
    return U, V, Y, (rng.random((n, m)) < 0.5).astype(float)


def hessian_program(f, args):
    return pb.differentiate(f)._stage("hessian", args).program


@pytest.mark.parametrize("n,k,m", [(6, 3, 5), (1, 3, 4), (5, 1, 4), (4, 2, 1), (7, 4, 9)])
def test_masked_factorisation_hessian(n, k, m, rng):
    args = mf_data(rng, n, k, m)
    want = block_dense(masked_blocks(args[1], args[3]))
    H = pb.hessian(masked)(*args)
    assert H.shape == (n, k, n, k)
    np.testing.assert_allclose(H, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H.reshape(n * k, n * k), numerical_hessian(masked, args), rtol=1e-6, atol=1e-6)


def test_masked_factorisation_has_no_dense_intermediate(rng):
    """No value of the Hessian program has n k n m entries or is a 4-d tensor but the result's
    zeros, written once in place (np.zeros and one diagonal store ``H[i, :, i] = B``): the result is
    C-ordered, not a transposed view."""
    n, k, m = 7, 3, 5
    args = mf_data(rng, n, k, m)
    program = hessian_program(masked, args)
    big = [e for e in program.eqns for v in e.outputs if v.type.ndim >= 4 or v.type.size >= n * k * m * n]
    assert [e.prim.name for e in big] == ["broadcast_in_dim", "scatter"]
    assert all(v.type.size <= n * k * n * k for e in program.eqns for v in e.outputs)
    src = pb.differentiate(masked).source(*args, program="hessian")
    assert "np.eye" not in src and src.count("np.zeros") == 1 and "broadcast_to" not in src
    assert ".copy()" not in src and ".transpose(" not in src, src
    assert pb.hessian(masked)(*args).flags.c_contiguous


@pytest.mark.parametrize("f", [masked, masked_ridge])
def test_masked_factorisation_compressed_is_blocks(f, rng):
    n, k, m = 6, 3, 8
    args = mf_data(rng, n, k, m)
    B = masked_blocks(args[1], args[3]) + (0.2 * np.eye(k) if f is masked_ridge else 0)
    dense = block_dense(B).reshape(n * k, n * k)
    H = pb.hessian(f, compressed=True)(*args)
    assert isinstance(H, KroneckerOperator) and H.structured
    assert [(t.coef, [(g.kind, g.axes) for g in t.factors]) for t in H.terms] == [(1, [("blocks", (0, 1))])]
    np.testing.assert_allclose(H.terms[0].factors[0].value, B, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H.todense(), dense, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(n * k)
    np.testing.assert_allclose(H @ g, dense @ g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(dense, g), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(pb.hessian(f)(*args).reshape(n * k, n * k), dense, rtol=1e-12, atol=1e-12)
    factors = pb.differentiate(f).source(*args, program="hessian", compressed=True)
    assert "np.zeros" not in factors and "np.eye(6" not in factors  # the blocks, not their embedding


def test_masked_ridge_is_one_write(rng):
    """The ridge's ``0.2 I (x) I`` joins the blocks before the one diagonal write."""
    args = mf_data(rng, 5, 3, 4)
    src = pb.differentiate(masked_ridge).source(*args, program="hessian")
    assert src.count("np.zeros") == 1 and "broadcast_to" not in src and "np.eye(5" not in src


def logistic_ridge(w, X, y):
    return np.sum(np.logaddexp(0.0, -y * (X @ w))) + 0.5 * np.sum(w ** 2)


def weighted_least_squares(x, A, b, wt):
    return np.sum(wt * (A @ x - b) ** 2)


def _matrix_passes(program, n, d) -> list[str]:
    """Equations that make a new n x d (or d x n) array: views (transposes, reshapes, broadcasts) are free."""
    return [e.prim.name for e in program.eqns for v in e.outputs
            if v.type.size == n * d and e.prim.name not in ("transpose", "reshape", "broadcast_in_dim")]


def test_logistic_ridge_hessian(rng):
    n, d = 9, 4
    X, y, w = rng.standard_normal((n, d)), np.sign(rng.standard_normal(n)), rng.standard_normal(d)
    s = 1 / (1 + np.exp(-y * (X @ w)))
    want = X.T @ ((s * (1 - s))[:, None] * X) + np.eye(d)
    np.testing.assert_allclose(pb.hessian(logistic_ridge)(w, X, y), want, rtol=1e-10, atol=1e-12)
    program = hessian_program(logistic_ridge, (w, X, y))
    assert _matrix_passes(program, n, d) == ["mul"]  # one scaling of X, no second one
    src = pb.differentiate(logistic_ridge).source(w, X, y, program="hessian")
    assert "np.eye" not in src and "+= 1.0" in src  # the identity added on the diagonal, in place


def test_weighted_least_squares_hessian(rng):
    n, d = 8, 3
    A, b, wt, x = rng.standard_normal((n, d)), rng.standard_normal(n), rng.random(n), rng.standard_normal(d)
    want = 2 * A.T @ (wt[:, None] * A)
    np.testing.assert_allclose(pb.hessian(weighted_least_squares)(x, A, b, wt), want, rtol=1e-12)
    program = hessian_program(weighted_least_squares, (x, A, b, wt))
    assert _matrix_passes(program, n, d) == ["mul"]  # the 2 joins the weights, not A


def test_stop_gradient_holds_at_second_order(rng):
    """``stop_gradient`` stays in the gradient a Hessian differentiates again (and in a ``grad``
    traced inside another): the Hessian of ``sum(x**2 * c)``, c = x held constant, is ``diag(2 c)``."""
    from pullback.primitives import lax

    def f(x):
        return np.sum(x ** 2 * lax.stop_gradient(x))

    x = rng.standard_normal(4)
    np.testing.assert_allclose(pb.hessian(f)(x), np.diag(2 * x), rtol=1e-12)
    np.testing.assert_allclose(pb.jacfwd(pb.grad(f))(x), np.diag(2 * x), rtol=1e-12)
    np.testing.assert_allclose(pb.grad(lambda x: pb.grad(f)(x)[1])(x), 2 * x[1] * np.eye(4)[1], rtol=1e-12)


def softmax_regression(W, X, Y):
    import scipy.special

    Z = X @ W
    return -np.sum(Y * (Z - scipy.special.logsumexp(Z, axis=1, keepdims=True)))


def test_softmax_regression_hessian(rng):
    """``H[a, b, c, e] = sum_i X_ia X_ic (delta_be p_ib - p_ib p_ie)``; logsumexp's shift is held
    constant at second order too, so no comparison with the row maxima is differentiated."""
    import scipy.special

    n, d, c = 7, 4, 3
    X, W = rng.standard_normal((n, d)), rng.standard_normal((d, c))
    Y = np.eye(c)[rng.integers(0, c, n)]
    P = scipy.special.softmax(X @ W, axis=1)
    want = np.einsum("ia,ic,ib,be->abce", X, X, P, np.eye(c)) - np.einsum("ia,ic,ib,ie->abce", X, X, P, P)
    np.testing.assert_allclose(pb.hessian(softmax_regression)(W, X, Y), want, rtol=1e-10, atol=1e-12)
    program = hessian_program(softmax_regression, (W, X, Y))
    assert not [e for e in program.eqns if e.prim.name in ("eq", "convert_element_type")]


def log_sum_exp(z):
    import scipy.special

    return scipy.special.logsumexp(z)


def test_logsumexp_hessian(rng):
    """``diag(p) - p p^T``: the row sums of ``diag(e)`` are e itself, not a pass over n x n."""
    import scipy.special

    z = rng.standard_normal(6)
    p = scipy.special.softmax(z)
    np.testing.assert_allclose(pb.hessian(log_sum_exp)(z), np.diag(p) - np.outer(p, p), rtol=1e-12, atol=1e-14)
    program = hessian_program(log_sum_exp, (z,))
    assert not [e for e in program.eqns if e.prim.name == "reduce_sum" and e.inputs[0].type.ndim == 2]
