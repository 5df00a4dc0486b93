"""Printed gradients free of the redundancies issue 16's review counted (``tests/redundancy.py`` parses
the source and counts them): needless copies before diagonal updates, broadcasts NumPy makes itself,
negations a subtraction absorbs, transposes of transposes, one-entry slices reshaped, ``x + x``.
Each gradient is also checked against central finite differences of the plain NumPy function."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb
from examples import bayesian_linear_regression as blr
from examples import gp_regression as gp
from examples import kalman_filter as kf
from examples import sparse_gp as sgp
from pullback import linalg as pla
from tests.redundancy import PATTERNS, count


def _numeric_directional(f, args, argnums, rng, eps=1e-6):
    """(the directions, central differences of f along each argument's direction)."""
    directions, slopes = [], []
    for i in argnums:
        d = rng.standard_normal(np.shape(args[i]))
        plus, minus = list(args), list(args)
        plus[i], minus[i] = args[i] + eps * d, args[i] - eps * d
        directions.append(d)
        slopes.append((f(*plus) - f(*minus)) / (2 * eps))
    return directions, slopes


def _check_gradient(fn, args, argnums, rng, rtol=1e-6):
    grads = pb.grad(fn, argnums=argnums)(*args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    directions, slopes = _numeric_directional(fn, args, argnums, rng)
    for g, d, slope in zip(grads, directions, slopes):
        np.testing.assert_allclose(np.sum(g * d), slope, rtol=rtol, atol=1e-8 * max(1.0, abs(slope)))


def _kalman_args(T):
    A, B, v = kf.simulate(T)
    return A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2)


def _only(found, **bounds):
    """Every pattern absent but those bounded (each bound has its reason where it is given)."""
    for pattern in PATTERNS:
        assert found[pattern] <= bounds.get(pattern, 0), (pattern, dict(found))


def test_counter_finds_each_pattern():
    """The counter is not blind: each pattern, written out, is counted once."""
    source = """
def f(v, w, x, K, s):
    d = K @ w
    S = d.copy()
    del d
    S.reshape(-1)[::4] += s
    b = np.broadcast_to(s, (2, 3))
    m = K * b
    n = -x
    a = w + K.T @ n
    t = w.T
    u = t.T @ x
    q = (w @ x).T
    p = v[3:4]
    r = p.reshape(3)
    z = x * 0.5
    y = z + x
    g = K @ K.T
    h = g + g.T
    e = g @ x + g.T @ x
    o = scipy.linalg.blas.dtrsm(1.0, K.T, w.T, side=1).T
    k = 0.5 * o
    j = x * 2.0
    i = scipy.linalg.blas.dtrmm(1.0, K.T, j.T, side=1).T
    g2 = -w
    l2 = scipy.linalg.blas.dtrmm(1.0, K.T, g2.T, side=1).T
    return S, m, a, u, q, r, y, h, e, k, i, l2
"""
    assert count(source) == {"copy": 1, "broadcast": 1, "negation": 1, "transpose": 2, "unit_slice": 1,
                             "doubled": 2, "symmetrised": 1, "alpha": 3}


def test_kalman_unrolled_at_50_steps(rng):
    """The unrolled filter's gradient at 50 steps (837 redundancies at 9b3aa07: 197 copies, 245
    negations, 343 transposes, 49 slices, 3 broadcasts). One sign per step but the last stays (49):
    the cotangent of ``w = L^{-1} delta`` contributes ``-(L^{-T} w) w^T`` to L's, an outer product of
    two vectors whose sign sits on the smaller side, a 3-vector, before the diagonal update that reads
    it (the last step's goes into the rank-1 update's alpha). Rerolled (the default), the loop's
    body holds that sign once, and the unrolled first step once more."""
    args = _kalman_args(50)
    unrolled = pb.differentiate(kf.kalman_nll_unrolled, argnums=(0, 1, 2, 3), reroll=False)
    _only(count(unrolled.source(*args, program="grad")), negation=49)
    _only(count(kf.nll_unrolled.source(*args, program="grad")), negation=2)
    _check_gradient(kf.kalman_nll_unrolled, _kalman_args(8), (0, 1, 2, 3), rng)


def test_kalman_scan_gradient(rng):
    """The loop form's gradient: the same single sign, once in the loop's body."""
    args = _kalman_args(50)
    _only(count(kf.nll.source(*args, program="grad")), negation=1)
    _check_gradient(kf.kalman_nll, _kalman_args(8), (0, 1, 2, 3), rng)


def test_gp_gradient(rng):
    X, y = gp.synthetic_data()
    theta = np.array([0.1, -0.2, -1.0])
    source = gp.neg_log_marginal_likelihood.source(theta, X, y, program="grad")
    _only(count(source))
    assert "dger(-0.5, " in source  # (potri(L) - a a^T) / 2: the rank-1 term's scale is BLAS's alpha
    _check_gradient(gp.neg_log_marginal_likelihood.fn, (theta, X, y), (0,), rng)


def test_scalings_fold_into_alpha(rng):
    """A scalar times a triangular solve or product read nowhere else, or such a call on a scaled
    operand read nowhere else, is one call with the scalar in BLAS's alpha: the half of each Cholesky
    transpose's ``sym`` (``dtrsm(0.5, ...)``) and the sign of a cotangent before a triangular product
    (``dtrmm(-1.0, ...)``). 63 such scalings in the gradients of the examples and benchmarks at
    74e61cd (49 of them in the unrolled Kalman filter's above), none since."""
    Z, X = rng.standard_normal((6, 1)), rng.standard_normal((30, 1))
    args = (Z, 0.1, -0.2, -1.0, X, rng.standard_normal(30))
    source = pb.differentiate(sgp.sgp_bound, argnums=(0, 1, 2, 3)).source(*args, program="grad")
    assert count(source)["alpha"] == 0
    assert "dtrsm(0.5, " in source and "dtrmm(-1.0, " in source
    _check_gradient(sgp.sgp_bound, args, (0, 1, 2, 3), rng, rtol=1e-5)  # (Kuu's jitter: differences lose digits)
    args = (rng.standard_normal((5, 40)), rng.standard_normal(40), -1.0, 0.5)
    source = pb.differentiate(blr.blr_cholesky, argnums=(0, 2, 3)).source(*args, program="grad")
    assert count(source)["alpha"] == 0 and "dtrsm(0.5, " in source
    _check_gradient(blr.blr_cholesky, args, (0, 2, 3), rng)


def _shifted_logdet(A, s):
    K = A @ A.T + np.exp(s) * np.eye(A.shape[0])
    L = pla.cholesky(K)
    return np.sum(np.log(np.diag(L)))


def _subtracted_products(A, B, x):
    r = x - A @ (B @ x)
    return np.sum(np.tanh(A - B @ A)) + r @ r


def _transposed_products(A, B):
    C = A @ B
    return np.sum(np.sin(C.T @ A) * B.T)


def _scalar_scales(x, s):
    return np.sum(np.exp(s) * x**2) + np.sum(x / np.exp(s))


def _unit_slices(v, w):
    return np.sum(v[1] * w + v[2] * v[0]) + 0.5 * (w @ w)


def _symmetrised(A, W):
    S = A @ A.T
    T = 0.5 * (S + S.T)
    return np.sum(np.sin(T) * W)


def _gram_likelihood(A, y):
    L = pla.cholesky(A @ A.T + np.eye(A.shape[0]))
    z = pla.solve_triangular(L, y, lower=True)
    return 0.5 * (z @ z) + np.sum(np.log(np.diag(L)))


SMALL = [
    (_shifted_logdet, lambda r: (r.standard_normal((4, 4)), 0.3), (0, 1)),
    (_subtracted_products, lambda r: (r.standard_normal((3, 3)), r.standard_normal((3, 3)), r.standard_normal(3)),
     (0, 1, 2)),
    (_transposed_products, lambda r: (r.standard_normal((3, 4)), r.standard_normal((4, 3))), (0, 1)),
    (_scalar_scales, lambda r: (r.standard_normal((2, 3)), 0.2), (0, 1)),
    (_unit_slices, lambda r: (r.standard_normal((3, 4)), r.standard_normal(4)), (0, 1)),
    (_symmetrised, lambda r: (r.standard_normal((3, 3)), r.standard_normal((3, 3))), (0, 1)),
    (_gram_likelihood, lambda r: (r.standard_normal((4, 4)), r.standard_normal(4)), (0, 1)),
]


@pytest.mark.parametrize("fn, draw, argnums", SMALL, ids=[f.__name__ for f, _, _ in SMALL])
def test_small_programs(fn, draw, argnums, rng):
    args = draw(rng)
    source = pb.differentiate(fn, argnums=argnums).source(*args, program="grad")
    _only(count(source))
    _check_gradient(fn, args, argnums, rng)
