"""Gaussian-process regression (Seeger et al. 3.1): the negative log marginal likelihood
of an RBF-kernel GP, differentiated by pullback, its hyperparameters fitted with
scipy.optimize.minimize(jac=True).

    python examples/gp_regression.py
"""

import numpy as np
from scipy.optimize import minimize

import pullback as pb
from pullback import linalg as pla


def rbf(X1, X2, log_ell, log_sf2):
    """exp(log_sf2) exp(-|x - x'|^2 / (2 ell^2))."""
    X1, X2 = X1 / np.exp(log_ell), X2 / np.exp(log_ell)
    d2 = np.sum(X1**2, axis=1)[:, None] + np.sum(X2**2, axis=1)[None, :] - 2 * X1 @ X2.T
    return np.exp(log_sf2) * np.exp(-0.5 * d2)


@pb.differentiate
def neg_log_marginal_likelihood(theta, X, y):
    """phi = |z|^2 / 2 + log|L| + n log(2 pi) / 2 with L L^T = K + noise I, z = L^{-1} y."""
    log_ell, log_sf2, log_sn2 = theta[0], theta[1], theta[2]
    n = X.shape[0]
    K = rbf(X, X, log_ell, log_sf2) + np.exp(log_sn2) * np.eye(n)
    L = pla.cholesky(K)
    z = pla.solve_triangular(L, y, lower=True)
    return 0.5 * (z @ z) + np.sum(np.log(np.diag(L))) + 0.5 * n * np.log(2 * np.pi)


def synthetic_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, (n, 1)), axis=0)
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(n)
    return X, y


def fit(X, y, theta0=(0.0, 0.0, -1.0)):
    return minimize(neg_log_marginal_likelihood.value_and_grad, np.array(theta0), args=(X, y), jac=True,
                    method="L-BFGS-B")


def main():
    X, y = synthetic_data()
    result = fit(X, y)
    ell, sf2, sn2 = np.exp(result.x)
    print(f"converged: {result.success} after {result.nit} iterations")
    print(f"negative log marginal likelihood: {result.fun:.4f}")
    print(f"lengthscale {ell:.3f}, signal variance {sf2:.3f}, noise variance {sn2:.4f} (true noise 0.01)")


if __name__ == "__main__":
    main()
