"""The demo's user function: ordinary NumPy, traced as user code (see ``ir.tracer``)."""

import numpy as np


def softplus_regression(w, X, y):
    """Mean softplus loss of a linear model, plus a small ridge penalty."""
    margin = (X @ w) * y
    loss = np.log1p(np.exp(-margin))
    penalty = 0.5 * np.sum(w**2)
    return loss.mean() + 1e-3 * penalty
