"""Diagonal-plus-low-rank Hessians (issue 28): ``compressed=True`` returns ``diag(d) + U V^T`` where the
structure pass reads one (softmax's ``diag(p) - p p^T``, a weighted, ridge-regularised logistic
regression with fewer examples than features), whose product, dense matrix and Woodbury solve agree
with NumPy on the dense Hessian; and the dense Hessian of such a function prints from that form (one
outer product written once, then its diagonal). Oracles: the closed-form Hessians, central differences
of pullback's gradient, ``np.linalg.solve``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

import pullback as pb
from pullback.api.kronecker import KroneckerOperator
from pullback.api.lowrank import DiagonalPlusLowRank


def softmax_ridge(z, t):
    """Cross-entropy of softmax(z) against t (sum(t) = 1), plus a ridge: Hessian diag(p) - p p^T + 0.3 I."""
    return logsumexp(z) - t @ z + 0.15 * np.sum(z ** 2)


def softmax_hessian(z, t):
    p = np.exp(z - logsumexp(z))
    return np.diag(p) - np.outer(p, p) + 0.3 * np.eye(z.size)


def weighted_logistic_ridge(w, X, y, c):
    """sum_i c_i log(1 + exp(-y_i x_i^T w)) + |w|^2 / 2: Hessian I + X^T diag(c s (1 - s)) X."""
    return np.sum(c * np.logaddexp(0.0, -y * (X @ w))) + 0.5 * np.sum(w ** 2)


def logistic_hessian(w, X, y, c):
    s = 1.0 / (1.0 + np.exp(-y * (X @ w)))
    return np.eye(w.size) + X.T @ ((c * s * (1.0 - s))[:, None] * X)


def numerical_hessian(f, args, eps=1e-5):
    g = pb.grad(f)
    x = args[0]
    cols = []
    for e in np.eye(x.size):
        cols.append((g(x + eps * e, *args[1:]) - g(x - eps * e, *args[1:])) / (2 * eps))
    return np.array(cols)


def _check(H, dense, rng):
    n = dense.shape[0]
    np.testing.assert_allclose(H.todense(), dense, rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(n)
    np.testing.assert_allclose(H @ g, dense @ g, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H.matmat(np.stack([g, 2 * g], 1)), dense @ np.stack([g, 2 * g], 1), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(H.solve(g), np.linalg.solve(dense, g), rtol=1e-9, atol=1e-12)


def test_softmax_hessian_is_diagonal_plus_rank_one(rng):
    n = 9
    z, t = rng.standard_normal(n), rng.dirichlet(np.ones(n))
    H = pb.hessian(softmax_ridge, compressed=True)(z, t)
    assert isinstance(H, DiagonalPlusLowRank) and H.rank == 1, H
    dense = softmax_hessian(z, t)
    _check(H, dense, rng)
    np.testing.assert_allclose(dense, numerical_hessian(softmax_ridge, (z, t)), rtol=1e-6, atol=1e-8)
    # the factors' program makes vectors only, never an n x n array
    program = pb.differentiate(softmax_ridge)._stage("hessian_factors", (z, t)).program
    assert [o.type.shape for o in program.outputs] == [(n,), (n, 1), (n, 1)]
    assert all(v.type.size < n * n for e in program.eqns for v in e.outputs)


def test_softmax_dense_hessian_prints_from_its_form(rng):
    """The dense Hessian: one outer product written once, then its diagonal updated; no np.diag, no n x n
    product of broadcasts, no sum of two n x n arrays."""
    n = 9
    z, t = rng.standard_normal(n), rng.dirichlet(np.ones(n))
    src = pb.differentiate(softmax_ridge).source(z, t, program="hessian")
    src = "\n".join(line for line in src.splitlines() if not line.strip().startswith("#"))
    assert "np.diag(" not in src and "broadcast_to" not in src and src.count("flat[::") == 1, src
    assert src.count(" @ ") == 1, src
    np.testing.assert_allclose(pb.hessian(softmax_ridge)(z, t), softmax_hessian(z, t), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_examples, d", [(4, 12), (1, 6)])
def test_weighted_logistic_ridge_is_diagonal_plus_low_rank(n_examples, d, rng):
    X, y = rng.standard_normal((n_examples, d)), np.sign(rng.standard_normal(n_examples))
    w, c = rng.standard_normal(d), rng.random(n_examples) + 0.5
    H = pb.hessian(weighted_logistic_ridge, compressed=True)(w, X, y, c)
    assert isinstance(H, DiagonalPlusLowRank) and H.rank == n_examples, H
    dense = logistic_hessian(w, X, y, c)
    _check(H, dense, rng)
    np.testing.assert_allclose(dense, numerical_hessian(weighted_logistic_ridge, (w, X, y, c)), rtol=1e-6,
                               atol=1e-8)


def test_full_rank_stays_dense(rng):
    """More examples than features: the product is not thinner than the Hessian, so no low-rank form."""
    X, y = rng.standard_normal((10, 4)), np.sign(rng.standard_normal(10))
    w, c = rng.standard_normal(4), np.ones(10)
    H = pb.hessian(weighted_logistic_ridge, compressed=True)(w, X, y, c)
    assert isinstance(H, KroneckerOperator) and not H.structured
    np.testing.assert_allclose(H.todense(), logistic_hessian(w, X, y, c), rtol=1e-12, atol=1e-12)


def test_softmax_alone(rng):
    """softmax's own Hessian diag(p) - p p^T (singular: it annihilates the ones vector)."""
    z = rng.standard_normal(5)
    H = pb.hessian(logsumexp, compressed=True)(z)
    assert isinstance(H, DiagonalPlusLowRank) and H.rank == 1
    p = np.exp(z - logsumexp(z))
    np.testing.assert_allclose(H @ np.ones(5), 0, atol=1e-14)
    np.testing.assert_allclose(H.todense(), np.diag(p) - np.outer(p, p), rtol=1e-12, atol=1e-14)


def lse_spelled(z):
    m = z.max()
    return np.log(np.sum(np.exp(z - m))) + m + 0.5 * z @ z


def softmax_spelled(z, t):
    p = np.exp(z) / np.sum(np.exp(z))
    return -np.sum(t * np.log(p)) + np.sum(z ** 2)


def weighted_least_squares_ridge(x, A, b, wt):
    return np.sum(wt * (A @ x - b) ** 2) + 0.1 * np.sum(x ** 2)


@pytest.mark.parametrize("f", [lse_spelled, softmax_spelled, weighted_least_squares_ridge])
def test_spellings_reach_the_form(f, rng):
    """Other spellings (the max-shift written out, softmax as a quotient, least squares with weights):
    the reader goes through broadcasts, row and column scalings and divisions by broadcasts, not one
    pattern per example. Oracles: pullback's dense Hessian and central differences of its gradient."""
    n = 12
    if f is weighted_least_squares_ridge:
        args = (rng.standard_normal(n), rng.standard_normal((3, n)), rng.standard_normal(3), rng.random(3) + 0.5)
    else:
        args = (rng.standard_normal(n),) + ((rng.dirichlet(np.ones(n)),) if f is softmax_spelled else ())
    H = pb.hessian(f, compressed=True)(*args)
    assert isinstance(H, DiagonalPlusLowRank) and H.rank < n, H
    dense = pb.hessian(f)(*args)
    np.testing.assert_allclose(dense, numerical_hessian(f, args), rtol=1e-6, atol=1e-7)
    _check(H, dense, rng)
