"""The demo's user function: ordinary NumPy, traced as user code (see ``ir.tracer``)."""

import numpy as np


def softplus_regression(w, X, y):
    """Mean softplus loss of a linear model, plus a small ridge penalty."""
    margin = (X @ w) * y
    loss = np.log1p(np.exp(-margin))
    penalty = 0.5 * np.sum(w**2)
    return loss.mean() + 1e-3 * penalty


def rnn_loss(W, U, h0, xs):
    """A tanh recurrent network over a sequence, written with ``pb.scan``: one step, traced once."""
    import pullback as pb

    def step(h, x):
        h = np.tanh(W @ h + U @ x)
        return h, np.sum(h**2)

    h, energies = pb.scan(step, h0, xs)
    return np.sum(h) + np.sum(energies)
