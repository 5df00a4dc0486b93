"""Whole functions: gradients against finite differences, second order, and the
printed gradient source (golden)."""

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb
from tests.api.test_transforms import fd_grad
from tests.conftest import check_golden


def scalar_fn(x, y):
    return x * np.log(y) + np.log(x * y) * y


def logistic_loss(w, X, y):
    z = X @ w
    return np.mean(np.log1p(np.exp(-y * z))) + 1e-2 * np.sum(w * w)


def mlp_loss(W1, b1, W2, b2, W3, b3, X, labels):
    """A 3-layer tanh MLP with a softmax cross-entropy loss; labels are one-hot."""
    h1 = np.tanh(X @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    logits = h2 @ W3 + b3
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.sum(labels * log_probs) / X.shape[0]


def complex_loss(z, A):
    """A real loss of a complex input: |A z|^2 + Re(sum z^2)."""
    w = A @ z
    return np.sum(np.real(w * np.conj(w))) + np.real(np.sum(z * z))


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 5))
    y = np.sign(rng.standard_normal(20))
    labels = np.eye(3)[rng.integers(0, 3, 20)]
    params = [rng.standard_normal(s) * 0.5 for s in [(5, 8), (8,), (8, 6), (6,), (6, 3), (3,)]]
    return X, y, labels, params


def test_scalar_function_first_and_second_order():
    check_grads(scalar_fn, [1.5, 2.5], order=2)
    gx = pb.grad(scalar_fn)
    np.testing.assert_allclose(pb.grad(gx)(1.5, 2.5), fd_grad(gx, (1.5, 2.5), 0), rtol=1e-6)
    np.testing.assert_allclose(pb.grad(gx, 1)(1.5, 2.5), fd_grad(gx, (1.5, 2.5), 1), rtol=1e-6)


def test_logistic_regression(data):
    X, y, _, _ = data
    w = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(pb.grad(logistic_loss)(w, X, y), fd_grad(logistic_loss, (w, X, y), 0), rtol=1e-6)
    check_grads(logistic_loss, [w, X, y], order=2)


def test_mlp_softmax_cross_entropy(data):
    X, _, labels, params = data
    argnums = tuple(range(6))
    grads = pb.grad(mlp_loss, argnums)(*params, X, labels)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, fd_grad(mlp_loss, (*params, X, labels), i), rtol=1e-5, atol=1e-8)
    check_grads(mlp_loss, [*params, X, labels])


def test_complex_input_real_loss_follows_the_documented_convention():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    z = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    G = pb.grad(complex_loss)(z, A)
    # dL = Re(G^H dz): the closed form is G = 2 A^H A z + 2 conj(z)
    np.testing.assert_allclose(G, 2 * A.conj().T @ (A @ z) + 2 * np.conj(z), rtol=1e-12)
    dz = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    eps = 1e-6
    fd = (complex_loss(z + eps * dz, A) - complex_loss(z - eps * dz, A)) / (2 * eps)
    np.testing.assert_allclose(np.real(np.vdot(G, dz)), fd, rtol=1e-7)
    check_grads(complex_loss, [z, A], order=2)


def test_float32_gradients(data):
    X, y, _, _ = data
    w = np.linspace(-1, 1, 5).astype(np.float32)
    g = pb.grad(logistic_loss)(w, X.astype(np.float32), y.astype(np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, fd_grad(logistic_loss, (w, X, y), 0), rtol=1e-4, atol=1e-5)


def loss(x, y):
    t = x * y
    z = np.log(t)
    return np.sum(z * y)


def test_gradient_source_golden():
    src = pb.differentiate(loss, argnums=(0, 1)).source(np.ones(3), np.ones(3))
    check_golden("grad_loss.py.txt", src)
