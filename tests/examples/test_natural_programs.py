"""examples/natural_programs.py: programs as written (a while loop on a tolerance, a series summed
until small, a minibatch picked by the iteration number, noise drawn at every call), their
gradients against the implicit-function derivative, closed forms and finite differences."""

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

import pullback as pb

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

import natural_programs as nat  # noqa: E402


def test_fixed_point_gradient_is_the_implicit_functions():
    for a in (0.3, 0.5, 0.9):
        x = nat.fixed_point(a)
        s = np.sin(a * x)
        assert pb.grad(nat.fixed_point)(a) == pytest.approx(-x * s / (1 + a * s), rel=1e-8)
        fd = (nat.fixed_point(a + 1e-6) - nat.fixed_point(a - 1e-6)) / 2e-6
        assert pb.grad(nat.fixed_point)(a) == pytest.approx(fd, rel=1e-5)


def test_series_summed_to_a_tolerance():
    for x in (-3.0, 0.2, 1.3, 4.0):
        value, grad = pb.value_and_grad(nat.exp_series)(x)
        assert value == pytest.approx(np.exp(x), rel=1e-14) and grad == pytest.approx(np.exp(x), rel=1e-13)


def test_minibatch_objective_indexed_by_the_iteration():
    w = np.array([0.1, 0.2, 0.3])
    d = pb.differentiate(nat.minibatch_loss)
    for it in (0, 3, 5, 17):
        g = d.grad(w, it)
        fd = np.array([(nat.minibatch_loss(w + e, it) - nat.minibatch_loss(w - e, it)) / 2e-6
                       for e in np.eye(3) * 1e-6])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    assert len(d.ir(w, 0, stage="grad").inputs) == 2  # one program, `it` an input of it
    w = nat.sgd(steps=100)
    full = np.mean(np.logaddexp(0.0, nat.X @ w) - nat.Y * (nat.X @ w))
    assert full < np.log(2.0) * 0.6  # well below the loss at w = 0


def test_stochastic_objective_draws_anew_each_call():
    params = np.array([0.3, -0.4])
    eager = copy.deepcopy(nat.RNG)
    grads = []
    for _ in range(3):
        value, grad = pb.value_and_grad(nat.elbo_estimate)(params)
        state = copy.deepcopy(eager)
        assert value == _elbo(params, eager)  # bit for bit: the very draws eager NumPy makes
        eps = state.standard_normal(8)
        sigma = np.exp(params[1])
        z = params[0] + sigma * eps
        np.testing.assert_allclose(grad, [np.mean((z - 1.0) / 0.25), np.mean((z - 1.0) / 0.25 * sigma * eps) - 1.0],
                                   rtol=1e-12)
        grads.append(grad)
    assert not np.allclose(grads[0], grads[1])


def _elbo(params, rng):
    mu, log_sigma = params
    z = rng.normal(mu, np.exp(log_sigma), size=8)
    return -np.mean(-0.5 * ((z - 1.0) / 0.5) ** 2 - np.log(0.5)) - log_sigma


def test_against_jax_where_jax_runs_them():
    """JAX (when installed) runs the minibatch objective with a dynamic slice in reverse mode, and the
    fixed point and the series in forward mode only (its while_loop refuses reverse mode)."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp, lax = jax.numpy, jax.lax

    def jax_minibatch(w, it):
        start = (it % (len(nat.X) // nat.BATCH)) * nat.BATCH
        Xb = lax.dynamic_slice_in_dim(jnp.asarray(nat.X), start, nat.BATCH)
        yb = lax.dynamic_slice_in_dim(jnp.asarray(nat.Y), start, nat.BATCH)
        z = Xb @ w
        return jnp.mean(jnp.logaddexp(0.0, z) - yb * z)

    w = np.array([0.1, 0.2, 0.3])
    for it in (0, 5, 17):
        np.testing.assert_allclose(pb.grad(nat.minibatch_loss)(w, it), jax.grad(jax_minibatch)(w, it), rtol=1e-12)

    def jax_fixed_point(a):
        return lax.while_loop(lambda x: jnp.abs(jnp.cos(a * x) - x) > 1e-12, lambda x: jnp.cos(a * x), 1.0)

    _, want = jax.jvp(jax_fixed_point, (0.5,), (1.0,))
    assert pb.grad(nat.fixed_point)(0.5) == pytest.approx(float(want), rel=1e-9)
