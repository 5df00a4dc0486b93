"""Bayesian linear regression (Seeger et al. 3.3): the negative log marginal likelihood
through the LQ factorisation of B = [I, sqrt(alpha) X] and through the Cholesky factor
of M = I + alpha X X^T (syrk + cholesky). Both give the same value and gradients.

    python examples/bayesian_linear_regression.py
"""

import numpy as np

import pullback as pb
from pullback import linalg as pla


def _criterion(L, X, y, log_noise, alpha):
    n = y.shape[0]
    z = pla.solve_triangular(L, X @ y, lower=True)
    fit = (y @ y - alpha * (z @ z)) / np.exp(log_noise)
    return 0.5 * (fit + n * (np.log(2 * np.pi) + log_noise)) + np.sum(np.log(np.abs(np.diag(L))))


def blr_lq(X, y, log_noise, log_prior):
    """X holds the d features of the n cases in its columns (d x n)."""
    alpha = np.exp(log_prior - log_noise)
    B = np.concatenate([np.eye(X.shape[0]), np.sqrt(alpha) * X], axis=1)
    L, _ = pla.lq(B)
    return _criterion(L, X, y, log_noise, alpha)


def blr_cholesky(X, y, log_noise, log_prior):
    alpha = np.exp(log_prior - log_noise)
    L = pla.cholesky(alpha * pla.syrk(X) + np.eye(X.shape[0]))
    return _criterion(L, X, y, log_noise, alpha)


def features(x, degree=5):
    return np.stack([x**k for k in range(degree + 1)])


def main(n=50, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n)
    y = 1 - 2 * x + 3 * x**3 + 0.1 * rng.standard_normal(n)
    X = features(x)
    for name, f in (("LQ", blr_lq), ("Cholesky", blr_cholesky)):
        value, grads = pb.value_and_grad(f, argnums=(0, 2, 3))(X, y, -2.0, 0.5)
        print(f"{name:9s} criterion {value:.10f}; d log_noise {grads[1]:.8f}, d log_prior {grads[2]:.8f}")


if __name__ == "__main__":
    main()
