"""The applications of Seeger et al. section 3, as runnable examples: gradients match
finite differences, and each criterion matches an independent dense computation."""

import sys
from pathlib import Path

import numpy as np
import pytest

import pullback as pb

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

import bayesian_linear_regression as blr  # noqa: E402
import gp_regression as gpr  # noqa: E402
import kalman_filter as kf  # noqa: E402
import sequence_models as seq  # noqa: E402
import sparse_gp as sgp  # noqa: E402


def fd(f, args, i, eps=1e-6):
    """Central finite differences of scalar f in argument i."""
    args = [np.asarray(a, float) for a in args]
    g = np.zeros_like(args[i])
    for idx in np.ndindex(g.shape):
        e = np.zeros_like(args[i])
        e[idx] = eps
        g[idx] = (f(*[a + e if j == i else a for j, a in enumerate(args)])
                  - f(*[a - e if j == i else a for j, a in enumerate(args)])) / (2 * eps)
    return g


def test_gp_gradient_and_fit():
    X, y = gpr.synthetic_data(n=15)
    theta = np.array([0.1, 0.2, -1.0])
    value, g = gpr.neg_log_marginal_likelihood.value_and_grad(theta, X, y)
    K = gpr.rbf(X, X, 0.1, 0.2) + np.exp(-1.0) * np.eye(15)
    dense = 0.5 * y @ np.linalg.solve(K, y) + 0.5 * np.linalg.slogdet(2 * np.pi * K)[1]
    np.testing.assert_allclose(value, dense, rtol=1e-10)
    np.testing.assert_allclose(g, fd(gpr.neg_log_marginal_likelihood.fn, (theta, X, y), 0), rtol=1e-6)
    result = gpr.fit(X, y)
    assert result.success and np.linalg.norm(result.jac) < 1e-3


def test_sparse_gp_bound_and_gradients():
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (30, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(30)
    Z = X[:6].copy()
    args = (Z, 0.1, 0.3, -1.5, X, y)
    value, grads = sgp.bound.value_and_grad(*args)
    Kuu = gpr.rbf(Z, Z, 0.1, 0.3) + sgp.JITTER * np.eye(6)
    Kuf = gpr.rbf(Z, X, 0.1, 0.3)
    Q = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    C = Q + np.exp(-1.5) * np.eye(30)
    dense = (0.5 * y @ np.linalg.solve(C, y) + 0.5 * np.linalg.slogdet(2 * np.pi * C)[1]
             + (30 * np.exp(0.3) - np.trace(Q)) / (2 * np.exp(-1.5)))
    np.testing.assert_allclose(value, dense, rtol=1e-8)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, fd(sgp.sgp_bound, args, i), rtol=2e-5, atol=1e-6)


def test_bayesian_linear_regression_lq_equals_cholesky():
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, 20)
    y = 1 - 2 * x + 0.1 * rng.standard_normal(20)
    X = blr.features(x, degree=3)
    args = (X, y, -2.0, 0.5)
    v_lq, g_lq = pb.value_and_grad(blr.blr_lq, argnums=(0, 2, 3))(*args)
    v_ch, g_ch = pb.value_and_grad(blr.blr_cholesky, argnums=(0, 2, 3))(*args)
    np.testing.assert_allclose(v_lq, v_ch, rtol=1e-12)
    for a, b in zip(g_lq, g_ch):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    S = np.exp(0.5) * X.T @ X + np.exp(-2.0) * np.eye(20)  # Sigma_y = lambda_w X^T X + lambda_y I
    dense = 0.5 * (np.linalg.slogdet(2 * np.pi * S)[1] + y @ np.linalg.solve(S, y))
    np.testing.assert_allclose(v_lq, dense, rtol=1e-10)
    for j, i in enumerate((0, 2, 3)):
        np.testing.assert_allclose(g_lq[j], fd(blr.blr_lq, args, i), rtol=1e-6, atol=1e-8)


def test_kalman_filter_gradients():
    A, B, v = kf.simulate(T=8)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    value, grads = kf.nll.value_and_grad(*args)
    np.testing.assert_allclose(value, kf.kalman_nll(*args), rtol=1e-12)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, fd(kf.kalman_nll, args, i), rtol=1e-6, atol=1e-7)


def test_kalman_filter_scan_and_unrolled_agree():
    A, B, v = kf.simulate(T=12)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    value, grads = kf.nll.value_and_grad(*args)
    value_u, grads_u = kf.nll_unrolled.value_and_grad(*args)
    np.testing.assert_allclose(value, value_u, rtol=1e-13)
    for g, g_u in zip(grads, grads_u):
        np.testing.assert_allclose(g, g_u, rtol=1e-11, atol=1e-13)
    _, grads_ck = pb.differentiate(lambda *a: kf.kalman_nll(*a, checkpoint=True), argnums=(0, 1, 2, 3)
                                   ).value_and_grad(*args)
    for g, g_ck in zip(grads, grads_ck):
        np.testing.assert_allclose(g, g_ck, rtol=1e-12, atol=1e-13)


def test_gru_sequence_loss_against_unrolled_and_finite_differences():
    params, h0, xs, targets = seq.gru_data(T=6, n=4, m=2)
    value, grads = pb.value_and_grad(seq.gru_loss)(params, h0, xs, targets)
    value_u, grads_u = pb.value_and_grad(seq.gru_loss_unrolled)(params, h0, xs, targets)
    np.testing.assert_allclose(value, value_u, rtol=1e-13)
    for g, g_u in zip(grads, grads_u):
        np.testing.assert_allclose(g, g_u, rtol=1e-11, atol=1e-13)
    for i in (0, 5, 6):  # a gate's input weights, the candidate's recurrent weights, the read-out
        def loss_i(p, i=i):
            return seq.gru_loss_unrolled(params[:i] + (p,) + params[i + 1:], h0, xs, targets)
        np.testing.assert_allclose(grads[i], fd(loss_i, (params[i],), 0), rtol=1e-6, atol=1e-7)


def test_rk4_sensitivity_checkpointed_against_unrolled_and_finite_differences():
    theta, u0 = np.array([1.1, 0.4, 0.4, 0.1]), np.array([10.0, 10.0])

    def prey(theta, checkpoint):
        return seq.rk4_final_state(theta, u0, 1e-2, 40, checkpoint=checkpoint)[0]

    g = pb.grad(lambda th: prey(th, True))(theta)
    g_plain = pb.grad(lambda th: prey(th, None))(theta)
    g_unrolled = pb.grad(lambda th: seq.rk4_final_state_unrolled(th, u0, 1e-2, 40)[0])(theta)
    np.testing.assert_allclose(g, g_plain, rtol=1e-12)
    np.testing.assert_allclose(g, g_unrolled, rtol=1e-11)
    np.testing.assert_allclose(g, fd(lambda th: seq.rk4_final_state_unrolled(th, u0, 1e-2, 40)[0], (theta,), 0),
                               rtol=1e-6)


@pytest.mark.parametrize("module", [gpr, sgp, blr, kf])
def test_examples_run(module, capsys):
    module.main()
    assert capsys.readouterr().out
