"""``python -m benchmarks.ode [--quick]``: the value and gradient of a loss of an ODE solution.

For each problem, the gradient with respect to the initial state and every parameter of the right-hand
side, by: pullback through the solver's loops (``scipy.integrate.solve_ivp`` traced, RK45), pullback by
the adjoint ODE (``pb.integrate.solve_ivp(..., adjoint=True)``), central finite differences of SciPy's
own ``solve_ivp`` (2 (n + p) + 1 solves; estimated from one solve where that is thousands), and
``jax.experimental.ode.odeint`` under ``jit`` (Dormand-Prince with its own step control, gradients by
its adjoint; float64) when JAX is installed. SciPy's solve alone (no gradient) is the floor. Columns:
the first call (trace, transform, print, compile, run), the compile overhead (the first call less one
steady call), the steady time (the fastest of the repeats: the machine may be shared, and
interference only adds time), the right-hand side's evaluations per value (``nfev``: forward solve),
and the peak of the NumPy arrays and Python objects one call allocates (tracemalloc; n/a for JAX).
Every gradient is checked against pullback's direct one.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc

import numpy as np
import scipy.integrate

import pullback as pb

RTOL, ATOL = 1e-8, 1e-8


def lotka_volterra(t, y, p):
    return np.array([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])


def node(t, y, W1, b1, W2):
    """A neural ODE's vector field: one hidden tanh layer."""
    return W2 @ np.tanh(W1 @ y + b1)


class Problem:
    def __init__(self, name, fun, y0, params, t_end, outputs, jax_fun, fd_estimate=False):
        self.name, self.fun, self.y0, self.params = name, fun, y0, params
        self.t_eval = np.linspace(0.0, t_end, outputs)
        self.jax_fun, self.fd_estimate = jax_fun, fd_estimate
        self.size = y0.size + sum(np.size(p) for p in params)


def problems(quick: bool) -> list[Problem]:
    rng = np.random.default_rng(0)
    out = [Problem("Lotka-Volterra, n = 2, p = 4, t in [0, 10], 21 outputs", lotka_volterra, np.array([10.0, 5.0]),
                   (np.array([1.5, 1.0, 3.0, 1.0]),), 10.0, 21, "lotka_volterra"),
           Problem("Lotka-Volterra, long: t in [0, 100], 2 outputs", lotka_volterra, np.array([10.0, 5.0]),
                   (np.array([1.5, 1.0, 3.0, 1.0]),), 100.0, 2, "lotka_volterra")]
    for n, hidden in ([(2, 16)] if quick else [(2, 16), (32, 128)]):
        params = (rng.standard_normal((hidden, n)) / np.sqrt(n), 0.1 * rng.standard_normal(hidden),
                  rng.standard_normal((n, hidden)) / np.sqrt(hidden))
        p = sum(x.size for x in params)
        y0 = rng.standard_normal(n)
        out.append(Problem(f"neural ODE, n = {n}, hidden {hidden} (p = {p}), t in [0, 5], 11 outputs", node,
                           y0, params, 5.0, 11, "node", fd_estimate=p > 200))
        if n > 2:
            out.append(Problem(f"neural ODE, n = {n}, hidden {hidden}, long: t in [0, 100], 2 outputs", node,
                               y0, params, 100.0, 2, "node", fd_estimate=True))
    return out


def loss_of(ys):
    return np.sum(ys ** 2) / ys.size


def pullback_direct(pr: Problem):
    def loss(y0, params):
        sol = scipy.integrate.solve_ivp(pr.fun, (0.0, pr.t_eval[-1]), y0, t_eval=pr.t_eval, args=params,
                                        rtol=RTOL, atol=ATOL)
        return loss_of(sol.y)

    f = pb.differentiate(loss, argnums=(0, 1)).value_and_grad
    return lambda: f(pr.y0, pr.params)


def pullback_adjoint(pr: Problem):
    def loss(y0, params):
        sol = pb.integrate.solve_ivp(pr.fun, (0.0, pr.t_eval[-1]), y0, t_eval=pr.t_eval, args=params,
                                     rtol=RTOL, atol=ATOL, adjoint=True)
        return loss_of(sol.y)

    f = pb.differentiate(loss, argnums=(0, 1)).value_and_grad
    return lambda: f(pr.y0, pr.params)


def scipy_value(pr: Problem, y0=None, params=None):
    sol = scipy.integrate.solve_ivp(pr.fun, (0.0, pr.t_eval[-1]), pr.y0 if y0 is None else y0, t_eval=pr.t_eval,
                                    args=pr.params if params is None else params, rtol=RTOL, atol=ATOL)
    return loss_of(sol.y), sol.nfev


def finite_differences(pr: Problem, eps: float = 1e-6):
    """Central differences of SciPy's solve, entry by entry of y0 and of each parameter."""
    def run():
        value = scipy_value(pr)[0]
        g_y0 = np.array([(scipy_value(pr, y0=pr.y0 + eps * e)[0] - scipy_value(pr, y0=pr.y0 - eps * e)[0]) / (2 * eps)
                         for e in np.eye(pr.y0.size)])
        grads = []
        for i, p in enumerate(pr.params):
            g = np.zeros_like(p)
            for idx in np.ndindex(p.shape):
                shifted = [list(pr.params), list(pr.params)]
                for sign, ps in zip((1, -1), shifted):
                    q = p.copy()
                    q[idx] += sign * eps
                    ps[i] = q
                g[idx] = (scipy_value(pr, params=tuple(shifted[0]))[0]
                          - scipy_value(pr, params=tuple(shifted[1]))[0]) / (2 * eps)
            grads.append(g)
        return value, (g_y0, tuple(grads))

    return run


def jax_odeint(pr: Problem):
    try:
        import jax
        import jax.numpy as jnp
        from jax.experimental.ode import odeint
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    if pr.jax_fun == "lotka_volterra":
        def fun(y, t, p):
            return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])
    else:
        def fun(y, t, W1, b1, W2):
            return W2 @ jnp.tanh(W1 @ y + b1)

    t = jnp.asarray(pr.t_eval)

    def loss(y0, params):
        return loss_of(odeint(fun, y0, t, *params, rtol=RTOL, atol=ATOL))

    f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    args = (jnp.asarray(pr.y0), tuple(jnp.asarray(p) for p in pr.params))

    def run():
        value, grads = f(*args)
        jax.block_until_ready(grads)
        return value, grads

    return run


def measure(make, repeats: int, traced: bool):
    """(first call s, fastest steady call s, peak MB or None, the first call's result)."""
    start = time.perf_counter()
    fn = make()
    out = fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    peak = None
    if traced:
        tracemalloc.start()
        fn()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return first, min(times), peak, out


def _flat(grads) -> np.ndarray:
    g_y0, g_params = grads
    return np.concatenate([np.ravel(np.asarray(g_y0))] + [np.ravel(np.asarray(g)) for g in g_params])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    repeats = 3 if opts.quick else 5
    print(f"rtol = atol = {RTOL:g}; steady: the fastest of {repeats} calls\n")
    print("| problem | implementation | first call, s | compile overhead, s | steady, ms | nfev | peak MB | "
          "max rel. difference from pullback direct |")
    print("|---|---|---|---|---|---|---|---|")
    for pr in problems(opts.quick):
        value_only = lambda pr=pr: (lambda: scipy_value(pr))  # noqa: E731
        first, steady, peak, (_, nfev) = measure(value_only, repeats, True)
        print(f"| {pr.name} | SciPy solve_ivp, value alone | | | {steady * 1e3:.2f} | {nfev} | {peak:.2f} | |")
        impls = {"pullback, through the loop": (lambda pr=pr: pullback_direct(pr), True),
                 "pullback, adjoint=True": (lambda pr=pr: pullback_adjoint(pr), True)}
        make_jax = jax_odeint(pr)
        if make_jax is not None:
            impls["JAX odeint (adjoint), jit"] = (lambda make_jax=make_jax: make_jax, False)
        reference = None
        for name, (make, traced) in impls.items():
            first, steady, peak, (value, grads) = measure(make, repeats, traced)
            flat = _flat(grads)
            if reference is None:
                reference = flat
            diff = np.max(np.abs(flat - reference)) / np.max(np.abs(reference))
            print(f"| {pr.name} | {name} | {first:.2f} | {first - steady:.2f} | {steady * 1e3:.2f} | "
                  f"{nfev if name.startswith('pullback') else ''} | "
                  f"{'n/a' if peak is None else f'{peak:.2f}'} | {diff:.1e} |")
            sys.stdout.flush()
        solves = 2 * pr.size + 1
        if pr.fd_estimate:
            t = time.perf_counter()
            scipy_value(pr)
            one = time.perf_counter() - t
            print(f"| {pr.name} | central differences of SciPy ({solves} solves, estimated from one) | | | "
                  f"{one * solves * 1e3:.0f} | | | |")
        else:
            first, steady, peak, (value, grads) = measure(lambda pr=pr: finite_differences(pr), 1, False)
            diff = np.max(np.abs(_flat(grads) - reference)) / np.max(np.abs(reference))
            print(f"| {pr.name} | central differences of SciPy ({solves} solves) | | | {steady * 1e3:.1f} | | | "
                  f"{diff:.1e} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
