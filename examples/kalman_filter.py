"""The negative log likelihood of a linear Gaussian state-space model by Kalman
filtering (Seeger et al. 3.4), with gradients with respect to the transition and
observation matrices and the noise. ``kalman_nll`` is a ``pb.scan`` over the
observations: it compiles once, whatever the number of steps, and the gradient
prints as two loops. ``kalman_nll_unrolled`` writes the same filter as a Python
loop: tracing makes one copy of the step per observation, and pullback rolls the
copies back into a scan (``reroll=False`` keeps them unrolled).

    python examples/kalman_filter.py
"""

import numpy as np

import pullback as pb
from pullback import linalg as pla


def kalman_nll(A, B, log_qh, log_qv, v, mu0, S0, checkpoint=None):
    """h_t ~ N(A h_{t-1}, qh I), v_t ~ N(B h_t, qv I), h_0 ~ N(mu0, S0). ``checkpoint=True`` keeps
    about sqrt(T) states for the backward pass instead of every step's (see ``pb.scan``)."""
    dh, dv = A.shape[0], B.shape[0]
    S_h, S_v = np.exp(log_qh) * np.eye(dh), np.exp(log_qv) * np.eye(dv)

    def step(carry, v_t):
        mu_h, S_hh, nll = carry  # the prediction of h_t given v_1 .. v_{t-1}
        mu_v = B @ mu_h
        S_hh_Bt = S_hh @ B.T
        S_vv = B @ S_hh_Bt + S_v
        L = pla.cholesky(S_vv)
        # K = S_hh B^T S_vv^{-1} = (S_hh B^T) L^{-T} L^{-1}: two triangular solves, no inverse
        K = pla.solve_triangular(L, pla.solve_triangular(L, S_hh_Bt, lower=True, trans="T", side="right"),
                                 lower=True, side="right")
        delta = v_t - mu_v
        w = pla.solve_triangular(L, delta, lower=True)
        nll = nll + 0.5 * (w @ w) + np.sum(np.log(np.diag(L))) + 0.5 * dv * np.log(2 * np.pi)
        f = mu_h + K @ delta
        ImKB = np.eye(dh) - K @ B
        F = ImKB @ S_hh @ ImKB.T + K @ S_v @ K.T
        return (A @ f, A @ F @ A.T + S_h, nll), None

    (_, _, nll), _ = pb.scan(step, (mu0, S0, 0.0), v, checkpoint=checkpoint)
    return nll


def kalman_nll_unrolled(A, B, log_qh, log_qv, v, mu0, S0):
    """The same likelihood, the Python loop unrolled by tracing."""
    dh, dv = A.shape[0], B.shape[0]
    S_h, S_v = np.exp(log_qh) * np.eye(dh), np.exp(log_qv) * np.eye(dv)
    f, F = mu0, S0
    nll = 0.0
    for t in range(v.shape[0]):
        mu_h = A @ f if t else f
        S_hh = A @ F @ A.T + S_h if t else F
        mu_v = B @ mu_h
        S_hh_Bt = S_hh @ B.T
        S_vv = B @ S_hh_Bt + S_v
        L = pla.cholesky(S_vv)
        # K = S_hh B^T S_vv^{-1} = (S_hh B^T) L^{-T} L^{-1}: two triangular solves, no inverse
        K = pla.solve_triangular(L, pla.solve_triangular(L, S_hh_Bt, lower=True, trans="T", side="right"),
                                 lower=True, side="right")
        delta = v[t] - mu_v
        w = pla.solve_triangular(L, delta, lower=True)
        nll = nll + 0.5 * (w @ w) + np.sum(np.log(np.diag(L))) + 0.5 * dv * np.log(2 * np.pi)
        f = mu_h + K @ delta
        ImKB = np.eye(dh) - K @ B
        F = ImKB @ S_hh @ ImKB.T + K @ S_v @ K.T
    return nll


nll = pb.differentiate(kalman_nll, argnums=(0, 1, 2, 3))
nll_unrolled = pb.differentiate(kalman_nll_unrolled, argnums=(0, 1, 2, 3))


def simulate(T=30, seed=0):
    rng = np.random.default_rng(seed)
    A = np.array([[0.9, 0.2], [-0.2, 0.9]])
    B = np.array([[1.0, 0.0], [0.5, 1.0], [0.0, 0.3]])
    h, vs = np.zeros(2), []
    for _ in range(T):
        h = A @ h + 0.3 * rng.standard_normal(2)
        vs.append(B @ h + 0.1 * rng.standard_normal(3))
    return A, B, np.array(vs)


def main():
    A, B, v = simulate()
    value, (gA, gB, g_qh, g_qv) = nll.value_and_grad(A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    print(f"negative log likelihood over {v.shape[0]} steps: {value:.4f}")
    print(f"dA =\n{gA}\ndB =\n{gB}\nd log_qh = {g_qh:.4f}, d log_qv = {g_qv:.4f}")


if __name__ == "__main__":
    main()
