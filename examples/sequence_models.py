"""Loops over long sequences with ``pb.scan``: a GRU sequence loss, and the parameter
sensitivity of an ODE solved by fourth-order Runge-Kutta over 10,000 steps, checkpointed so
that reverse mode stores about 2 sqrt(T) states instead of every stage of every step.

    python examples/sequence_models.py
"""

import time

import numpy as np

import pullback as pb


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gru_step(params, h, x):
    """One step of a gated recurrent unit (Cho et al. 2014)."""
    Wz, Uz, Wr, Ur, Wh, Uh = params
    z = sigmoid(Wz @ x + Uz @ h)
    r = sigmoid(Wr @ x + Ur @ h)
    h_new = np.tanh(Wh @ x + Uh @ (r * h))
    return (1.0 - z) * h + z * h_new


def gru_loss(params, h0, xs, targets):
    """Squared error of a linear read-out of the hidden state against targets, summed over time."""
    readout = params[-1]

    def step(h, inputs):
        x, target = inputs
        h = gru_step(params[:-1], h, x)
        return h, np.sum((readout @ h - target) ** 2)

    _, errors = pb.scan(step, h0, (xs, targets))
    return np.sum(errors)


def gru_loss_unrolled(params, h0, xs, targets):
    h, total = h0, 0.0
    for x, target in zip(xs, targets):
        h = gru_step(params[:-1], h, x)
        total = total + np.sum((params[-1] @ h - target) ** 2)
    return total


def lotka_volterra(u, theta):
    """Predator and prey: du/dt = (a u0 - b u0 u1, d u0 u1 - c u1)."""
    a, b, c, d = theta[0], theta[1], theta[2], theta[3]
    return np.stack([a * u[0] - b * u[0] * u[1], d * u[0] * u[1] - c * u[1]])


def rk4_final_state(theta, u0, dt, steps, checkpoint=None):
    """The state after ``steps`` RK4 steps of size ``dt``."""

    def step(u, _):
        k1 = lotka_volterra(u, theta)
        k2 = lotka_volterra(u + 0.5 * dt * k1, theta)
        k3 = lotka_volterra(u + 0.5 * dt * k2, theta)
        k4 = lotka_volterra(u + dt * k3, theta)
        return u + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4), None

    u, _ = pb.scan(step, u0, None, length=steps, checkpoint=checkpoint)
    return u


def rk4_final_state_unrolled(theta, u0, dt, steps):
    u = u0
    for _ in range(steps):
        k1 = lotka_volterra(u, theta)
        k2 = lotka_volterra(u + 0.5 * dt * k1, theta)
        k3 = lotka_volterra(u + 0.5 * dt * k2, theta)
        k4 = lotka_volterra(u + dt * k3, theta)
        u = u + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return u


def prey_at_end(theta, u0, dt=1e-3, steps=10_000):
    return rk4_final_state(theta, u0, dt, steps, checkpoint=True)[0]


def gru_data(T=50, n=8, m=3, seed=0):
    rng = np.random.default_rng(seed)
    params = tuple(0.4 * rng.standard_normal(shape) for shape in [(n, m), (n, n)] * 3) + (
        0.4 * rng.standard_normal((2, n)),)
    return params, np.zeros(n), rng.standard_normal((T, m)), rng.standard_normal((T, 2))


def main():
    params, h0, xs, targets = gru_data(T=1000)
    start = time.perf_counter()
    value, grads = pb.value_and_grad(gru_loss)(params, h0, xs, targets)
    print(f"GRU loss over 1,000 steps: {value:.4f} (first call {time.perf_counter() - start:.2f} s), "
          f"|d readout| = {np.linalg.norm(grads[-1]):.4f}")
    theta, u0 = np.array([1.1, 0.4, 0.4, 0.1]), np.array([10.0, 10.0])
    start = time.perf_counter()
    sensitivity = pb.grad(prey_at_end)(theta, u0)
    print(f"d prey(t=10) / d (a, b, c, d) over 10,000 RK4 steps: {sensitivity} "
          f"(first call {time.perf_counter() - start:.2f} s)")


if __name__ == "__main__":
    main()
