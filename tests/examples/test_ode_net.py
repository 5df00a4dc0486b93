"""The neural-ODE example: its gradient (through the solver, and by the adjoint ODE) against central
differences of SciPy's own ``solve_ivp`` (the loss run eagerly is SciPy's call), and a short fit."""

import sys
from pathlib import Path

import numpy as np
import pytest

import pullback as pb

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

import ode_net  # noqa: E402


@pytest.mark.parametrize("adjoint", [False, True])
def test_gradient_against_differences_of_scipys_solver(monkeypatch, adjoint):
    monkeypatch.setattr(ode_net, "RTOL", 1e-10)
    monkeypatch.setattr(ode_net, "ATOL", 1e-10)
    ys = ode_net.observations()
    params = ode_net.init(hidden=4)
    value, grads = pb.value_and_grad(ode_net.loss, static_argnums=3)(params, ode_net.Y0, ys, adjoint)
    np.testing.assert_allclose(value, ode_net.loss(params, ode_net.Y0, ys), rtol=1e-8)
    eps = 1e-6
    for i, index in [(0, (1, 0)), (0, (3, 1)), (1, (2,)), (2, (0, 1)), (2, (1, 3))]:
        def at(delta, i=i, index=index):
            p = [x.copy() for x in params]
            p[i][index] += delta
            return ode_net.loss(tuple(p), ode_net.Y0, ys)

        np.testing.assert_allclose(grads[i][index], (at(eps) - at(-eps)) / (2 * eps), rtol=1e-5, atol=1e-8)


def test_a_short_fit_lowers_the_loss():
    _, history = ode_net.fit(steps=40)
    assert history[-1] < 0.3 * history[0]
