"""JAX's Autodiff Cookbook, ported to pullback (examples/autodiff_cookbook.py): each result
against its closed form or finite differences."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import autodiff_cookbook as cb  # noqa: E402


def fd(f, x, eps=1e-6):
    x = np.asarray(x, float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_grad_and_value_and_grad():
    assert abs(cb.grad_tanh(2.0) - (1 - np.tanh(2.0) ** 2)) < 1e-15
    np.testing.assert_allclose(cb.W_grad, fd(lambda W: cb.loss(W, cb.b), cb.W), rtol=1e-7)
    np.testing.assert_allclose(cb.b_grad, fd(lambda b: cb.loss(cb.W, b), cb.b), rtol=1e-7)
    np.testing.assert_allclose(cb.W_grad_2, cb.W_grad, rtol=1e-15)
    assert cb.loss_value == cb.loss(cb.W, cb.b)
    np.testing.assert_allclose(cb.Wb_grad[0], cb.W_grad, rtol=1e-15)


def test_has_aux():
    np.testing.assert_allclose(cb.W_grad_aux, cb.W_grad, rtol=1e-15)
    np.testing.assert_allclose(cb.preds_aux, cb.predict(cb.W, cb.b, cb.inputs), rtol=1e-15)


def test_jvp_vjp_jacobians_hessians():
    J = np.stack([fd(lambda W, i=i: cb.predict(W, cb.b, cb.inputs)[i], cb.W) for i in range(4)])
    np.testing.assert_allclose(cb.J_fwd, J, rtol=1e-6)
    np.testing.assert_allclose(cb.J_rev, J, rtol=1e-6)
    np.testing.assert_allclose(cb.jvp_out, J @ cb.u, rtol=1e-6)
    np.testing.assert_allclose(cb.W_cotangent, J.T @ np.ones(4), rtol=1e-6)
    H = np.stack([fd(lambda W, i=i: cb.pb.grad(cb.loss)(W, cb.b)[i], cb.W) for i in range(3)])
    np.testing.assert_allclose(cb.H, H, rtol=1e-6)
    np.testing.assert_allclose(cb.hvp(lambda W: cb.loss(W, cb.b), cb.W, cb.u), H @ cb.u, rtol=1e-6)
    assert cb.per_example_grads.shape == (4, 3)
    np.testing.assert_allclose(cb.per_example_grads.sum(axis=0), cb.W_grad, rtol=1e-12)


def test_custom_rules_and_stop_gradient():
    assert cb.pb.grad(cb.log1pexp)(100.0) == 1.0  # the formula's autodiff gives nan
    assert cb.pb.grad(cb.f)(0.0) == 1.0
    g = cb.pb.grad(lambda x: cb.clip_gradient(-0.75, 0.75, np.sin(x)))(2.0)
    assert abs(g - 0.75 * np.cos(2.0)) < 1e-15
    np.testing.assert_allclose(cb.delta_theta, [1.2, 2.4, -1.2], rtol=1e-15)


def test_runs(capsys):
    cb.main()
    assert "agree: True" in capsys.readouterr().out
