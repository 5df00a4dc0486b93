"""The variational sparse GP bound of Titsias (Seeger et al. 3.2), with gradients with
respect to the inducing inputs Z, the kernel parameters and the noise.

    python examples/sparse_gp.py
"""

import numpy as np

import pullback as pb
from pullback import linalg as pla

try:
    from gp_regression import rbf
except ImportError:  # imported as examples.sparse_gp
    from examples.gp_regression import rbf

JITTER = 1e-6


def sgp_bound(Z, log_ell, log_sf2, log_sn2, X, y):
    """phi = -log N(y | 0, Q + sn2 I) + tr(Kff - Q) / (2 sn2), Q = Kfu Kuu^{-1} Kuf,
    via Kuu = Lu Lu^T, B = Lu^{-1} Kuf and A = I + B B^T / sn2 = La La^T."""
    n, u = X.shape[0], Z.shape[0]
    sn2 = np.exp(log_sn2)
    Kuu = rbf(Z, Z, log_ell, log_sf2) + JITTER * np.eye(u)
    Kuf = rbf(Z, X, log_ell, log_sf2)
    Lu = pla.cholesky(Kuu)
    B = pla.solve_triangular(Lu, Kuf, lower=True)
    A = pla.syrk(B) / sn2 + np.eye(u)
    La = pla.cholesky(A)
    c = pla.solve_triangular(La, B @ y, lower=True)
    kff_trace = n * np.exp(log_sf2)
    return (0.5 * n * (np.log(2 * np.pi) + log_sn2) + np.sum(np.log(np.diag(La))) + (y @ y) / (2 * sn2)
            - (c @ c) / (2 * sn2**2) - (np.sum(B**2) - kff_trace) / (2 * sn2))


bound = pb.differentiate(sgp_bound, argnums=(0, 1, 2, 3))


def main(n=500, u=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(n)
    Z = X[rng.choice(n, u, replace=False)]
    value, (gZ, g_ell, g_sf2, g_sn2) = bound.value_and_grad(Z, 0.0, 0.0, -2.0, X, y)
    print(f"bound {value:.4f}; |dZ| {np.linalg.norm(gZ):.4f}, d log_ell {g_ell:.4f}, "
          f"d log_sf2 {g_sf2:.4f}, d log_sn2 {g_sn2:.4f}")


if __name__ == "__main__":
    main()
