"""Kronecker-structured Hessians: the matrix-factorisation Hessian ``2 I_n (x) V^T V`` dense and
compressed, against the hand formula, ``jacfwd(jacrev(f))`` and NumPy's dense solve; the dense
fallback of ``compressed=True`` where there is no structure, against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse.linalg import LinearOperator

import pullback as pb
from pullback.api.kronecker import KroneckerOperator


def factorisation(U, V, T):
    return np.sum((T - U @ V.T) ** 2)


def regularised(U, V, T):
    return np.sum((T - U @ V.T) ** 2) + 0.5 * np.sum(U ** 2)


def mf_data(rng, n, k, dtype=np.float64):
    U, V = rng.standard_normal((n, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    T = (U @ V.T + 0.1 * rng.standard_normal((n, n))).astype(dtype)
    return U, V, T


def mf_hand(V, n):
    """``H[i, a, j, b] = 2 delta_ij (V^T V)_ab`` as the (n k, n k) matrix."""
    return np.kron(np.eye(n), 2.0 * V.T @ V)


def numerical_hessian(f, args, eps=1e-5):
    """Central differences of pullback's gradient (with respect to the first argument)."""
    x = args[0]
    grad = pb.grad(f)
    cols = []
    for i in range(x.size):
        d = np.zeros(x.size)
        d[i] = eps
        d = d.reshape(x.shape)
        cols.append(((grad(x + d, *args[1:]) - grad(x - d, *args[1:])) / (2 * eps)).reshape(-1))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("n,k", [(6, 3), (1, 3), (5, 1), (1, 1)])
def test_factorisation_hessian_dense(n, k, rng):
    U, V, T = mf_data(rng, n, k)
    h = pb.hessian(factorisation)(U, V, T)
    assert h.shape == (n, k, n, k)
    np.testing.assert_allclose(h.reshape(n * k, n * k), mf_hand(V, n), rtol=1e-12, atol=1e-12)
    twice = pb.jacfwd(pb.jacrev(factorisation))(U, V, T)
    np.testing.assert_allclose(h, twice, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n,k", [(6, 3), (1, 3), (5, 1)])
def test_factorisation_hessian_compressed(n, k, rng):
    U, V, T = mf_data(rng, n, k)
    H = pb.hessian(factorisation, compressed=True)(U, V, T)
    assert isinstance(H, KroneckerOperator) and isinstance(H, LinearOperator)
    assert H.shape == (n * k, n * k) and H.structured
    assert [f.kind for f in H.terms[0].factors] == ["identity", "dense"]
    dense = mf_hand(V, n)
    np.testing.assert_allclose(H.todense(), dense, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(n * k)
    np.testing.assert_allclose(H @ g, dense @ g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H.matvec(g), dense @ g, rtol=1e-12, atol=1e-12)
    G = rng.standard_normal((n, k))  # an array of the input's shape gives one of that shape
    np.testing.assert_allclose(H @ G, (dense @ G.reshape(-1)).reshape(n, k), rtol=1e-12, atol=1e-12)
    M = rng.standard_normal((n * k, 2))
    np.testing.assert_allclose(H @ M, dense @ M, rtol=1e-12, atol=1e-12)
    if n < k:  # V^T V has rank n
        with pytest.raises(pb.LinAlgError, match="singular"):
            H.solve(g)
        return
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(dense, g), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(H.solve(G), np.linalg.solve(dense, G.reshape(-1)).reshape(n, k), rtol=1e-9)


def test_factorisation_hessian_float32(rng):
    U, V, T = mf_data(rng, 5, 3, np.float32)
    h = pb.hessian(factorisation)(U, V, T)
    assert h.dtype == np.float32
    np.testing.assert_allclose(h.reshape(15, 15), mf_hand(V.astype(np.float64), 5), rtol=1e-5, atol=1e-5)
    H = pb.hessian(factorisation, compressed=True)(U, V, T)
    assert H.dtype == np.float32 and H.structured
    g = rng.standard_normal(15).astype(np.float32)
    dense = mf_hand(V.astype(np.float64), 5)
    np.testing.assert_allclose(H @ g, dense @ g, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(dense, g), rtol=1e-3, atol=1e-4)


def test_regularised_factorisation_is_one_term(rng):
    """``2 I (x) V^T V + I (x) I`` is ``I (x) (2 V^T V + I)``: still one Kronecker term, solved per block."""
    U, V, T = mf_data(rng, 4, 3)
    H = pb.hessian(regularised, compressed=True)(U, V, T)
    dense = np.kron(np.eye(4), 2.0 * V.T @ V + np.eye(3))
    assert len(H.terms) == 1 and H.structured
    np.testing.assert_allclose(H.todense(), dense, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(12)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(dense, g), rtol=1e-9)
    np.testing.assert_allclose(pb.hessian(regularised)(U, V, T).reshape(12, 12), dense, rtol=1e-12, atol=1e-12)


def test_identity_hessian(rng):
    """``sum(x**2)`` of a matrix: ``2 I (x) I``, no factor to compute."""
    X = rng.standard_normal((3, 4))
    H = pb.hessian(lambda x: np.sum(x ** 2), compressed=True)(X)
    assert H.structured and all(f.kind == "identity" for f in H.terms[0].factors)
    np.testing.assert_allclose(H.todense(), 2 * np.eye(12))
    np.testing.assert_allclose(H.solve(X), X / 2)


def _tanh_layer(W, X):
    return np.sum(np.tanh(X @ W) ** 2)


def _tanh_quadratic(W, X):
    return np.sum(np.tanh(X @ W @ W.T))


def test_tanh_layer_is_block_diagonal(rng):
    """``sum(tanh(X W)**2)``: column b of ``X W`` reads column b of W only, so the Hessian is
    block-diagonal over W's second axis (``H[a, b, c, d] = delta_bd B[b, a, c]``), found, not dense."""
    W, X = rng.standard_normal((3, 2)), rng.standard_normal((5, 3))
    H = pb.hessian(_tanh_layer, compressed=True)(W, X)
    assert H.structured and [(f.kind, f.axes) for f in H.terms[0].factors] == [("blocks", (1, 0))]
    want = numerical_hessian(_tanh_layer, (W, X))
    np.testing.assert_allclose(H.todense(), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pb.hessian(_tanh_layer)(W, X).reshape(6, 6), want, rtol=1e-6, atol=1e-7)
    g = rng.standard_normal(6)
    np.testing.assert_allclose(H @ g, want @ g, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(want, g), rtol=1e-5)


def test_no_kronecker_structure_is_dense(rng):
    """A Hessian that is not a Kronecker product: a dense factor over all axes, still correct."""
    W, X = rng.standard_normal((3, 2)), rng.standard_normal((5, 3))
    H = pb.hessian(_tanh_quadratic, compressed=True)(W, X)
    assert not H.structured and any(f.axes == (0, 1) and f.kind == "dense" for t in H.terms for f in t.factors)
    want = numerical_hessian(_tanh_quadratic, (W, X))
    np.testing.assert_allclose(H.todense(), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pb.hessian(_tanh_quadratic)(W, X).reshape(6, 6), want, rtol=1e-6, atol=1e-7)
    g = rng.standard_normal(6)
    np.testing.assert_allclose(H @ g, want @ g, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(H.todense(), g), rtol=1e-9)


def test_vector_input_dense_factor(rng):
    """The logistic-regression Hessian of a vector: one dense factor, solved by Cholesky."""
    X, y, w = rng.standard_normal((8, 4)), np.sign(rng.standard_normal(8)), rng.standard_normal(4)

    def logistic(w, X, y):
        return np.sum(np.logaddexp(0.0, -y * (X @ w)))

    H = pb.hessian(logistic, compressed=True)(w, X, y)
    s = 1 / (1 + np.exp(-y * (X @ w)))
    want = X.T @ ((s * (1 - s))[:, None] * X)
    np.testing.assert_allclose(H.todense(), want, rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(4)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(want, g), rtol=1e-8)


def test_printed_factorisation_hessian_is_factored(rng):
    """No (n k x n k) identity and no contraction of an n k-sized seed: the identity seed stays per axis,
    and the result is V^T V written on the block diagonal of zeros (``deltas.materialise``)."""
    n, k = 7, 3
    U, V, T = mf_data(rng, n, k)
    f = pb.differentiate(factorisation)
    code = lambda src: "\n".join(line for line in src.splitlines() if not line.strip().startswith("#"))  # noqa: E731
    src = code(f.source(U, V, T, program="hessian"))
    assert f"np.eye({n * k}" not in src and "tensordot" not in src and f"reshape({n * k}" not in src
    # V^T V and its scaling; the result is zeros with the blocks written on the diagonal (no eye, no
    # product over the n k x n k entries)
    assert "np.eye" not in src and src.count("@") == 1 and src.count(" * ") == 1
    assert src.count("np.zeros") == 1 and src.count("np.arange") == 1  # one index, used for both axes
    assert f.hessian(U, V, T).flags.c_contiguous
    compressed = code(f.source(U, V, T, program="hessian", compressed=True))
    assert "def factorisation_hessian_factors(U, V, T):" in compressed
    assert f"({n}, {k}, {n}, {k})" not in compressed and "np.eye" not in compressed and compressed.count("@") == 1


def test_compressed_needs_one_argument(rng):
    U, V, T = mf_data(rng, 3, 2)
    with pytest.raises(TypeError, match="compressed=True"):
        pb.hessian(factorisation, argnums=(0, 1), compressed=True)(U, V, T)


def test_diagonal_hessian(rng):
    """``sum(x**4)``: ``diag(12 x^2)``, a diagonal factor (the factors' program returns a vector)."""
    x = rng.standard_normal(5)
    f = pb.differentiate(lambda x: np.sum(x ** 4))
    H = f.hessian(x, compressed=True)
    assert H.structured and H.terms[0].factors[0].kind == "diagonal"
    np.testing.assert_allclose(H.todense(), np.diag(12 * x ** 2), rtol=1e-12)
    np.testing.assert_allclose(H @ x, 12 * x ** 3, rtol=1e-12)
    np.testing.assert_allclose(H.solve(x), 1 / (12 * x), rtol=1e-12)
    np.testing.assert_allclose(H.T @ x, 12 * x ** 3, rtol=1e-12)
    assert "np.diag" not in f.source(x, program="hessian", compressed=True)
