"""A neural ODE (Chen et al. 2018) fitted with ``scipy.integrate.solve_ivp``: the vector field is a
one-hidden-layer net, ``dy/dt = W2 tanh(W1 y^3 + b1)``, and its parameters are fitted by gradient
steps (Adam) to a trajectory of the spiral ``dy/dt = A y^3`` of torchdiffeq's ``ode_demo.py``.
pullback traces the SciPy call (its RK45 steps, in pullback's loops) and differentiates through the
solver; ``--adjoint`` takes the gradient by solving the adjoint ODE backwards instead, as
torchdiffeq's ``odeint_adjoint`` and ``jax.experimental.ode`` do (memory independent of the steps).

    python examples/ode_net.py [--adjoint] [--steps 200]
"""

import argparse
import functools
import time

import numpy as np
import scipy.integrate

import pullback as pb

A_TRUE = np.array([[-0.1, 2.0], [-2.0, -0.1]])
T_EVAL = np.linspace(0.0, 5.0, 21)
Y0 = np.array([1.0, 0.0])
RTOL, ATOL = 1e-5, 1e-7  # the solver's tolerances while fitting


def spiral(t, y):
    return A_TRUE @ y ** 3


def observations() -> np.ndarray:
    """The true trajectory at ``T_EVAL``, shape (len(T_EVAL), 2)."""
    return scipy.integrate.solve_ivp(spiral, (T_EVAL[0], T_EVAL[-1]), Y0, t_eval=T_EVAL, rtol=1e-10, atol=1e-10).y.T


def field(t, y, W1, b1, W2):
    return W2 @ np.tanh(W1 @ y ** 3 + b1)


def loss(params, y0, ys, adjoint=False):
    """Mean squared distance between the net's trajectory from ``y0`` and the observations ``ys``."""
    W1, b1, W2 = params
    if adjoint:
        sol = pb.integrate.solve_ivp(field, (T_EVAL[0], T_EVAL[-1]), y0, t_eval=T_EVAL, args=(W1, b1, W2),
                                     rtol=RTOL, atol=ATOL, adjoint=True)
    else:
        sol = scipy.integrate.solve_ivp(field, (T_EVAL[0], T_EVAL[-1]), y0, t_eval=T_EVAL, args=(W1, b1, W2),
                                        rtol=RTOL, atol=ATOL)
    return np.mean((sol.y.T - ys) ** 2)


def init(hidden: int = 16, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal((hidden, 2)), np.zeros(hidden), 0.3 * rng.standard_normal((2, hidden)))


def fit(steps: int = 200, adjoint: bool = False, lr: float = 0.01, hidden: int = 16):
    """Adam on the parameters; returns them and the loss at each step."""
    ys = observations()
    params = init(hidden)
    value_and_grad = pb.value_and_grad(functools.partial(loss, adjoint=adjoint))
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    history = []
    for k in range(1, steps + 1):
        value, grads = value_and_grad(params, Y0, ys)
        history.append(value)
        m = [0.9 * a + 0.1 * g for a, g in zip(m, grads)]
        v = [0.999 * a + 0.001 * g ** 2 for a, g in zip(v, grads)]
        params = tuple(p - lr * (a / (1 - 0.9 ** k)) / (np.sqrt(b / (1 - 0.999 ** k)) + 1e-8)
                       for p, a, b in zip(params, m, v))
    return params, np.array(history)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--adjoint", action="store_true", help="gradients by the adjoint ODE")
    parser.add_argument("--steps", type=int, default=200)
    options = parser.parse_args()
    start = time.perf_counter()
    params, history = fit(options.steps, options.adjoint)
    seconds = time.perf_counter() - start
    for k in range(0, len(history), max(len(history) // 10, 1)):
        print(f"step {k:4d}  loss {history[k]:.5f}")
    print(f"final loss {history[-1]:.5f} after {len(history)} steps ({seconds / len(history) * 1e3:.1f} ms per "
          f"value and gradient{', adjoint' if options.adjoint else ''})")


if __name__ == "__main__":
    main()
