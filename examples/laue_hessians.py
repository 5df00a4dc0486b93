"""Laue et al.'s Hessian examples (``../shared/seeds/laue-tensor-calculus.txt``), each with the
Hessian written by hand: logistic regression, a ReLU net with a softmax cross-entropy (the
Hessian of its first layer) and per-example gradients of the logistic loss.

    python examples/laue_hessians.py
"""

import numpy as np

import pullback as pb


def logistic(w, X, y):
    """sum_i log(1 + exp(-y_i x_i^T w))."""
    return np.sum(np.logaddexp(0.0, -y * (X @ w)))


def logistic_hessian_by_hand(w, X, y):
    """X^T diag(s (1 - s)) X with s the sigmoid of the margins: one scaling, one product."""
    s = 1.0 / (1.0 + np.exp(-y * (X @ w)))
    return X.T @ ((s * (1.0 - s))[:, None] * X)


def logistic_example_gradients_by_hand(w, X, y):
    """Row i: the gradient of example i's loss, -y_i sigmoid(-y_i x_i^T w) x_i."""
    return (-y / (1.0 + np.exp(y * (X @ w))))[:, None] * X


def relu_net(W1, x, Ws, t):
    """A fully connected net (first layer W1, then the layers in Ws), ReLU activations between
    layers and a softmax cross-entropy against the target distribution t."""
    h = x
    for W in (W1, *Ws):
        if h is not x:
            h = np.maximum(h, 0)
        h = W @ h
    z = h - h.max()
    p = np.exp(z) / np.sum(np.exp(z))
    return -np.sum(t * np.log(p))


def relu_net_first_layer_hessian_by_hand(W1, x, Ws, t):
    """H[i, j, k, l] = A[i, k] x[j] x[l] (Laue's compressed form A * I), A = J^T (diag(p) - p p^T) J
    with J = d logits / d (W1 x) = W_L D_{L-1} ... W_2 D_1 (D_k the ReLU slopes; ReLU is
    piecewise linear, so only the softmax contributes curvature; valid for sum(t) = 1)."""
    J = np.eye(W1.shape[0])
    h = W1 @ x
    for W in Ws:
        d = (h > 0).astype(h.dtype)
        J = W @ (d[:, None] * J)
        h = W @ np.maximum(h, 0)
    p = np.exp(h - h.max())
    p /= p.sum()
    A = J.T @ ((p[:, None] * J) - np.outer(p, p @ J))
    return A[:, None, :, None] * np.multiply.outer(x, x)[None, :, None, :]


def main() -> None:
    rng = np.random.default_rng(0)
    n = 50
    X, y, w = rng.standard_normal((n, n)) / np.sqrt(n), np.sign(rng.standard_normal(n)), rng.standard_normal(n)
    H = pb.hessian(logistic)(w, X, y)
    print("logistic Hessian matches X^T diag(s(1-s)) X:", np.allclose(H, logistic_hessian_by_hand(w, X, y)))
    G = pb.vmap(pb.grad(logistic), in_axes=(None, 0, 0))(w, X[:, None], y[:, None])
    print("per-example gradients match:", np.allclose(G, logistic_example_gradients_by_hand(w, X, y)))
    W1, Ws, x = rng.standard_normal((8, 6)), [rng.standard_normal((8, 8)) for _ in range(2)], rng.standard_normal(6)
    t = np.eye(8)[3]
    Hnet = pb.hessian(relu_net)(W1, x, Ws, t)
    print("ReLU-net first-layer Hessian matches A[i,k] x[j] x[l]:",
          np.allclose(Hnet, relu_net_first_layer_hessian_by_hand(W1, x, Ws, t)))
    print(pb.differentiate(relu_net).source(W1, x, Ws, t, program="hessian"))


if __name__ == "__main__":
    main()
