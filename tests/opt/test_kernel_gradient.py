"""The O(n^2) part of an RBF Gaussian-process gradient (lengthscale, variance, noise): the n x n
kernel cotangent is symmetric by construction, so it meets the inputs in one matrix product (not
``S @ X`` and ``S.T @ X``), its column sums are its row sums, and the 0.5 of ``X / ell`` squared
and the 2 of ``2 X X^T`` meet (no scaling by 0.5 and then by 2). Numbers against central
differences of the likelihood itself."""

from __future__ import annotations

import numpy as np

import pullback as pb
from pullback import linalg as pla
from pullback.ir.core import Literal, Var
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import reductions as red


def rbf(X1, X2, log_ell, log_sf2):
    X1, X2 = X1 / np.exp(log_ell), X2 / np.exp(log_ell)
    d2 = np.sum(X1**2, axis=1)[:, None] + np.sum(X2**2, axis=1)[None, :] - 2 * X1 @ X2.T
    return np.exp(log_sf2) * np.exp(-0.5 * d2)


def nll(theta, X, y):
    n = X.shape[0]
    K = rbf(X, X, theta[0], theta[1]) + np.exp(theta[2]) * np.eye(n)
    L = pla.cholesky(K)
    z = pla.solve_triangular(L, y, lower=True)
    return 0.5 * (z @ z) + np.sum(np.log(np.diag(L)))


def test_rbf_gradient_structure(rng):
    n, d = 40, 3
    X, y, theta = rng.standard_normal((n, d)), rng.standard_normal(n), np.array([0.3, 0.1, -1.0])
    program = pb.differentiate(nll)._stage("grad", (theta, X, y)).program
    square = [e for e in program.eqns if e.prim is con.dot_general_p
              and any(isinstance(a, Var) and a.type.shape == (n, n) for a in e.inputs)
              and e.outputs[0].type.shape == (n, d)]
    assert len(square) == 1  # S @ X once
    sums = [e for e in program.eqns if e.prim is red.reduce_sum_p and e.inputs[0].type.shape == (n, n)
            and len(e.params["axes"]) == 1]
    assert len(sums) == 1  # row sums of a symmetric matrix, not its column sums too
    halves = [e for e in program.eqns if e.prim is ew.mul_p and e.outputs[0].type.shape in ((n, d), (d, n))
              and any(isinstance(a, Literal) and a.value == 0.5 for a in e.inputs)]
    assert not halves  # the 0.5 met the 2 of 2 X X^T
    g = pb.grad(nll)(theta, X, y)
    eps = 1e-6
    fd = [(nll(theta + eps * e, X, y) - nll(theta - eps * e, X, y)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_rbf_gradient_two_square_buffers(rng):
    """At most 2 n x n buffers live at once (the hand-written GPML recipe keeps 3): the kernel
    exp(-d2 / 2), computed in place over d2, and one buffer that is K, then potrf's factor, potri's
    inverse, the rank-1 update K_bar and, scaled in place by the kernel, the cotangent of d2. The
    traced scalars (the variance, the -1/2) land on the small results, not on passes over S. Peak
    memory is tracemalloc's; beside the 2 buffers, potri's blocked mirror takes a 256 x 256 block."""
    import tracemalloc

    n, d = 512, 3
    X, y, theta = rng.standard_normal((n, d)), rng.standard_normal(n), np.array([0.3, 0.1, -1.0])
    g = pb.value_and_grad(nll)
    g(theta, X, y)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        value, grad = g(theta, X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    square = n * n * 8
    assert peak <= 2 * square + 256 * 256 * 8 + 0.1 * square, peak / square
    program = pb.differentiate(nll)._stage("grad", (theta, X, y)).program
    scaled = [e for e in program.eqns if e.prim is ew.mul_p and e.outputs[0].type.shape == (n, n)]
    # -0.5 d2, s E, 0.5 potri(L), K_bar E: none for the cotangent's scalars (its 1/2 and the variance)
    assert len(scaled) == 4, [str(e) for e in scaled]
    np.testing.assert_allclose(value, nll(theta, X, y), rtol=1e-12)
    eps = 1e-6
    fd = [(nll(theta + eps * e, X, y) - nll(theta - eps * e, X, y)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)
