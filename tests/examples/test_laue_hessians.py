"""examples/laue_hessians.py: the hand-written Hessians and per-example gradients are checked
against finite differences, then pullback's against them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pullback as pb

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

import laue_hessians as laue  # noqa: E402


def _net(rng, n=5, m=4, layers=3):
    W1 = rng.standard_normal((n, m))
    Ws = [rng.standard_normal((n, n)) for _ in range(layers - 1)]
    return W1, rng.standard_normal(m), Ws, np.eye(n)[2]


def test_hand_written_relu_hessian_is_the_derivative_of_the_gradient(rng):
    W1, x, Ws, t = _net(rng)
    g = pb.grad(laue.relu_net)
    eps = 1e-6
    H = np.zeros(W1.shape * 2)
    for i, j in np.ndindex(*W1.shape):
        d = np.zeros_like(W1)
        d[i, j] = eps
        H[:, :, i, j] = (g(W1 + d, x, Ws, t) - g(W1 - d, x, Ws, t)) / (2 * eps)
    want = laue.relu_net_first_layer_hessian_by_hand(W1, x, Ws, t)
    np.testing.assert_allclose(want, H, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(pb.hessian(laue.relu_net)(W1, x, Ws, t), want, rtol=1e-9, atol=1e-12)


def test_logistic_hessian_and_per_example_gradients(rng):
    X, y, w = rng.standard_normal((7, 3)), np.sign(rng.standard_normal(7)), rng.standard_normal(3)
    H = laue.logistic_hessian_by_hand(w, X, y)
    np.testing.assert_allclose(pb.hessian(laue.logistic)(w, X, y), H, rtol=1e-12)
    rows = [pb.grad(laue.logistic)(w, X[i:i + 1], y[i:i + 1]) for i in range(7)]  # an example's loss alone
    np.testing.assert_allclose(laue.logistic_example_gradients_by_hand(w, X, y), rows, rtol=1e-12)
    G = pb.vmap(pb.grad(laue.logistic), in_axes=(None, 0, 0))(w, X[:, None], y[:, None])
    np.testing.assert_allclose(G, rows, rtol=1e-12)


def test_example_runs(capsys):
    laue.main()
    out = capsys.readouterr().out
    assert out.count("True") == 3 and "False" not in out
