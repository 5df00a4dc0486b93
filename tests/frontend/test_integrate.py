"""ODE solves (``pullback.integrate``; ``scipy.integrate.solve_ivp`` and ``odeint`` by their SciPy names in
traced code): values against SciPy's own solvers (the same steps, so to rounding, and the same ``nfev``),
gradients with respect to the initial state, the parameters in ``args`` or a closure and the times
against closed-form solutions and central differences of SciPy's solver, the adjoint method against
both, and against ``jax.experimental.ode.odeint`` where JAX is installed."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.integrate
from scipy.integrate import odeint, solve_ivp

import pullback as pb

METHODS = ["RK45", "DOP853", "RK23"]


def decay(t, y, k):
    return -k * y


def oscillator(t, y, w):
    return np.array([y[1], -w ** 2 * y[0]])


def lotka_volterra(t, y, p):
    return np.array([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])


def forced(t, y, k):
    """Stiff-ish for an explicit method: relaxes fast (rate k) onto a slow forcing."""
    return -k * (y - np.cos(t))


P_LV = np.array([1.5, 1.0, 3.0, 1.0])
PROBLEMS = {  # fun, t_span, y0, args, t_eval
    "decay": (decay, (0.0, 2.0), np.array([1.0, 3.0]), (0.7,), np.linspace(0.0, 2.0, 5)),
    "oscillator": (oscillator, (0.0, 6.0), np.array([1.0, 0.5]), (2.0,), np.linspace(0.5, 6.0, 7)),
    "lotka_volterra": (lotka_volterra, (0.0, 10.0), np.array([10.0, 5.0]), (P_LV,), np.linspace(0.0, 10.0, 11)),
    "forced": (forced, (0.0, 3.0), np.array([2.0]), (50.0,), np.array([0.1, 0.2, 1.5, 3.0])),
    "backwards": (oscillator, (4.0, 0.0), np.array([0.0, 1.0]), (1.5,), np.array([4.0, 2.5, 1.0, 0.0])),
}


def _fd(f, x, eps):
    x = np.asarray(x, float)
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps)
                     for e in np.eye(x.size).reshape(-1, *x.shape)]).reshape(x.shape)


# --- values: SciPy's steps -----------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_values_are_scipys(name, method):
    fun, t_span, y0, args, t_eval = PROBLEMS[name]
    ref = solve_ivp(fun, t_span, y0, method=method, t_eval=t_eval, args=args, rtol=1e-6, atol=1e-9)

    def run(y0, args):
        sol = solve_ivp(fun, t_span, y0, method=method, t_eval=t_eval, args=args, rtol=1e-6, atol=1e-9)
        return sol.y, sol.nfev, sol.status, sol.success

    y, nfev, status, success = pb.jit(run)(y0, args)
    scale = np.abs(ref.y).max()
    np.testing.assert_allclose(y, ref.y, rtol=0, atol=1e-12 * scale)
    assert (nfev, status, success) == (ref.nfev, 0, True)
    eager = pb.integrate.solve_ivp(fun, t_span, y0, method=method, t_eval=t_eval, args=args, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(eager.y, ref.y, rtol=0, atol=1e-12 * scale)
    assert (eager.nfev, eager.status, eager.message) == (ref.nfev, ref.status, ref.message)


@pytest.mark.parametrize("method", ["RK45", "DOP853"])
def test_options_outputs_in_one_step_and_an_interval_of_length_zero(method):
    fun, y0 = oscillator, np.array([1.0, 0.0])
    t_eval = np.array([0.3, 0.30001, 0.30002, 2.0])  # several outputs in one step: one interpolant (DOP853: 3 fevs)
    for options in ({}, {"max_step": 0.1}, {"first_step": 0.01}, {"atol": np.array([1e-8, 1e-4])}):
        ref = solve_ivp(fun, (0.0, 3.0), y0, method=method, t_eval=t_eval, args=(1.0,), **options)
        sol = pb.jit(lambda y0, options=options: solve_ivp(fun, (0.0, 3.0), y0, method=method, t_eval=t_eval,
                                                           args=(1.0,), **options))(y0)
        np.testing.assert_allclose(sol.y, ref.y, rtol=0, atol=1e-13)
        assert sol.nfev == ref.nfev
    ref = solve_ivp(fun, (1.0, 1.0), y0, method=method, t_eval=[1.0], args=(1.0,))  # SciPy: t and y empty
    sol = pb.jit(lambda y0: solve_ivp(fun, (1.0, 1.0), y0, method=method, t_eval=[1.0], args=(1.0,)))(y0)
    np.testing.assert_array_equal(sol.y, y0[:, None])  # pullback: the solution at t_span[0]
    assert sol.nfev == ref.nfev == 1


def test_a_step_too_small_fails_as_scipys():
    """y' = y^2 from 1 blows up at t = 1: SciPy stops with status -1; the outputs past it are nan."""
    fun = lambda t, y: y ** 2  # noqa: E731
    t_eval = np.array([0.5, 0.9, 1.5, 2.0])
    ref = solve_ivp(fun, (0.0, 2.0), [1.0], t_eval=t_eval)
    sol = pb.jit(lambda y0: solve_ivp(fun, (0.0, 2.0), y0, t_eval=t_eval))
    out = sol(np.array([1.0]))
    assert ref.status == -1 and out.status == -1 and not out.success
    np.testing.assert_allclose(out.y[:, :ref.y.shape[1]], ref.y, rtol=1e-13)
    assert np.isnan(out.y[:, ref.y.shape[1]:]).all()
    assert out.nfev == ref.nfev


def test_odeint_agrees_with_scipys_lsoda_to_the_tolerance():
    """SciPy's odeint is LSODA, pullback's Dormand-Prince: both as close to a tight solution as the tolerance
    makes them."""
    t = np.linspace(0.0, 10.0, 21)
    lsoda = odeint(lotka_volterra, [10.0, 5.0], t, args=(P_LV,), tfirst=True)
    ys = pb.jit(lambda y0, p: odeint(lotka_volterra, y0, t, args=(p,), tfirst=True))(np.array([10.0, 5.0]), P_LV)
    assert ys.shape == (21, 2)
    exact = _lv_scipy(np.array([10.0, 5.0]), P_LV, t).T
    assert np.abs(ys - exact).max() < 1e-6 * np.abs(exact).max()
    np.testing.assert_allclose(ys, lsoda, rtol=1e-4)

    def pendulum(y, t, b, c):  # SciPy's own odeint example
        theta, omega = y
        return [omega, -b * omega - c * np.sin(theta)]

    t = np.linspace(0, 10, 101)
    ref = odeint(pendulum, [np.pi - 0.1, 0.0], t, args=(0.25, 5.0))
    ys = pb.jit(lambda y0: odeint(pendulum, y0, t, args=(0.25, 5.0)))(np.array([np.pi - 0.1, 0.0]))
    np.testing.assert_allclose(ys, ref, rtol=1e-6, atol=1e-6)


# --- gradients ---------------------------------------------------------------------------------


def _decay_loss(y0, k, t0, t_eval, t1, adjoint=False):
    sol = pb.integrate.solve_ivp(decay, (t0, t1), y0, t_eval=t_eval, args=(k,), rtol=1e-10, atol=1e-12,
                                 adjoint=adjoint)
    return np.sum(np.array([1.0, -2.0])[:, None] * np.sin(sol.y))


@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("backwards", [False, True])
def test_decay_gradients_are_the_closed_forms(adjoint, backwards):
    y0, k, t0, t_eval, t1 = np.array([1.0, 3.0]), 0.7, 0.2, np.array([0.5, 1.0, 2.0]), 2.0
    if backwards:
        t0, t_eval, t1 = 2.2, np.array([1.5, 1.0, 0.2]), 0.2
    tau = t_eval - t0
    y = y0[:, None] * np.exp(-k * tau)
    w = np.array([1.0, -2.0])[:, None] * np.cos(y)  # dL/dy
    expected = (np.sum(w * np.exp(-k * tau), axis=1), np.sum(w * -tau * y), np.sum(w * k * y),
                np.sum(w * -k * y, axis=0))
    got = pb.grad(_decay_loss, argnums=(0, 1, 2, 3), static_argnums=5)(y0, k, t0, t_eval, t1, adjoint)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_oscillator_gradients_are_the_closed_forms(method):
    """x'' = -w^2 x: x = x0 cos(w t) + v0 / w sin(w t); the frequency closed over, not passed."""
    t_eval = np.linspace(0.5, 3.0, 4)

    def loss(y0, w):
        sol = solve_ivp(lambda t, y: np.array([y[1], -w ** 2 * y[0]]), (0.0, 3.0), y0, method=method, t_eval=t_eval,
                        rtol=1e-10, atol=1e-12)
        return np.sum(sol.y[0] ** 2)

    def exact(y0, w):
        return np.sum((y0[0] * np.cos(w * t_eval) + y0[1] / w * np.sin(w * t_eval)) ** 2)

    y0, w = np.array([1.0, 0.5]), 2.0
    g_y0, g_w = pb.grad(loss, argnums=(0, 1))(y0, w)
    np.testing.assert_allclose(g_y0, _fd(lambda v: exact(v, w), y0, 1e-6), rtol=1e-6)
    np.testing.assert_allclose(g_w, _fd(lambda v: exact(y0, float(v)), w, 1e-6), rtol=1e-6)


def _lv_scipy(y0, p, t_eval, t0=0.0):
    return solve_ivp(lotka_volterra, (t0, 10.5), y0, method="DOP853", t_eval=t_eval, args=(p,), rtol=1e-13,
                     atol=1e-13).y


def _lv_loss(y, weights):
    return np.sum(weights * np.log(y))


@pytest.mark.parametrize("adjoint", [False, True])
def test_lotka_volterra_gradients_against_differences_of_scipys_solver(adjoint):
    y0, t_eval = np.array([10.0, 5.0]), np.array([0.5, 3.0, 7.5, 10.0])
    weights = np.array([[1.0, -1.0, 0.5, 2.0], [0.3, 1.0, -2.0, 1.0]])

    def loss(y0, p, t_eval, t0):
        sol = solve_ivp(lotka_volterra, (t0, 10.0), y0, t_eval=t_eval, args=(p,), rtol=1e-10, atol=1e-10)
        return _lv_loss(sol.y, weights)

    def loss_adjoint(y0, p, t_eval, t0):
        sol = pb.integrate.solve_ivp(lotka_volterra, (t0, 10.0), y0, t_eval=t_eval, args=(p,), rtol=1e-10,
                                     atol=1e-10, adjoint=True)
        return _lv_loss(sol.y, weights)

    value, grads = pb.value_and_grad(loss_adjoint if adjoint else loss, argnums=(0, 1, 2, 3))(y0, P_LV, t_eval, 0.0)
    np.testing.assert_allclose(value, _lv_loss(_lv_scipy(y0, P_LV, t_eval), weights), rtol=1e-7)
    expected = [_fd(lambda v: _lv_loss(_lv_scipy(v, P_LV, t_eval), weights), y0, 1e-5),
                _fd(lambda v: _lv_loss(_lv_scipy(y0, v, t_eval), weights), P_LV, 1e-6),
                _fd(lambda v: _lv_loss(_lv_scipy(y0, P_LV, v), weights), t_eval, 1e-6),
                _fd(lambda v: _lv_loss(_lv_scipy(y0, P_LV, t_eval, float(v)), weights), 0.0, 1e-6)]
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-6)


def test_the_end_of_the_interval_moves_the_last_step():
    """Outputs at t_span[1] depend on it (the last step ends there); with the adjoint its derivative is 0,
    as the continuous solution's is, and the output time carries it."""
    def end(y0, k, t1, adjoint=False):
        return pb.integrate.solve_ivp(decay, (0.0, t1), y0, t_eval=[0.0, 1.0], args=(k,), rtol=1e-10,
                                      atol=1e-12, adjoint=adjoint).y[0, -1]

    g = pb.grad(end, argnums=2, static_argnums=3)(np.array([1.0]), 0.5, 1.0, False)
    assert abs(g) < 1e-8  # 1.0 is an output time: only the step sizes, held fixed, see t_span[1]
    assert pb.grad(end, argnums=2, static_argnums=3)(np.array([1.0]), 0.5, 1.0, True) == 0.0


def test_forward_mode_and_jacobians_through_the_loop():
    t_eval = np.array([1.0, 2.0])

    def final(y0, k):
        return solve_ivp(decay, (0.0, 2.0), y0, t_eval=t_eval, args=(k,), rtol=1e-10, atol=1e-12).y[:, -1]

    y0 = np.array([1.0, 2.0])
    _, out_dot = pb.jvp(final, (y0, 0.5), (np.array([1.0, 0.0]), 0.0))
    np.testing.assert_allclose(out_dot, [np.exp(-1.0), 0.0], rtol=1e-8)
    np.testing.assert_allclose(pb.jacfwd(final)(y0, 0.5), np.exp(-1.0) * np.eye(2), rtol=1e-8)
    np.testing.assert_allclose(pb.jacrev(final, argnums=1)(y0, 0.5), -2.0 * y0 * np.exp(-1.0), rtol=1e-7)


def test_vmap_and_second_derivatives_through_the_loop():
    def final(y0, k):
        return solve_ivp(lambda t, y: -k * y * y, (0.0, 1.0), y0, t_eval=[1.0], rtol=1e-10, atol=1e-12).y[:, 0]

    Y = np.array([[1.0, 2.0], [0.5, 0.1], [3.0, 1.0]])  # each row takes its own steps
    np.testing.assert_allclose(pb.vmap(final, in_axes=(0, None))(Y, 0.5), Y / (1 + 0.5 * Y), rtol=1e-9)
    y0 = np.array([1.0, 2.0])
    hessian = pb.hessian(lambda k: np.sum(final(y0, k)))(0.5)
    np.testing.assert_allclose(hessian, np.sum(2 * y0 ** 3 / (1 + 0.5 * y0) ** 3), rtol=1e-7)


def test_adjoint_keeps_no_record_per_step_and_agrees_with_the_direct_gradient():
    t_eval = np.linspace(0.0, 10.0, 6)

    def loss(y0, p, adjoint):
        sol = pb.integrate.solve_ivp(lotka_volterra, (0.0, 10.0), y0, t_eval=t_eval, args=(p,), rtol=1e-8,
                                     atol=1e-8, adjoint=adjoint)
        return np.sum(sol.y ** 2)

    y0 = np.array([10.0, 5.0])
    direct = pb.differentiate(lambda y0, p: loss(y0, p, False), argnums=(0, 1))
    adjoint = pb.differentiate(lambda y0, p: loss(y0, p, True), argnums=(0, 1))
    for a, b in zip(direct.grad(y0, P_LV), adjoint.grad(y0, P_LV)):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert ".append(" in direct.source(y0, P_LV)  # the loop's residuals, attempt by attempt
    src = adjoint.source(y0, P_LV)
    assert ".append(" not in src and "for t in range(" in src  # the backward solve: a loop over the outputs


def test_odeint_gradients_direct_and_adjoint_with_tfirst_and_repeated_times():
    t = np.array([0.0, 0.0, 0.5, 0.5, 1.0])  # odeint allows repeated times, and t[0] is the initial time

    def loss(y0, k, t, adjoint):
        return np.sum(pb.integrate.odeint(lambda y, t, k: -k * y * (1 + t), y0, t, args=(k,), rtol=1e-10,
                                          atol=1e-12, adjoint=adjoint) ** 2)

    def exact(y0, k, t):
        return np.sum((y0[None] * np.exp(-k * ((t - t[0]) + (t ** 2 - t[0] ** 2) / 2))[:, None]) ** 2)

    y0, k = np.array([1.0, -0.5]), 0.8
    for adjoint in (False, True):
        g = pb.grad(loss, argnums=(0, 1, 2), static_argnums=3)(y0, k, t, adjoint)
        np.testing.assert_allclose(g[0], _fd(lambda v: exact(v, k, t), y0, 1e-6), rtol=1e-6)
        np.testing.assert_allclose(g[1], _fd(lambda v: exact(y0, float(v), t), k, 1e-6), rtol=1e-6)
        np.testing.assert_allclose(g[2], _fd(lambda v: exact(y0, k, v), t, 1e-6), rtol=1e-6, atol=1e-8)


# --- the SciPy names in traced code, and what is refused ---------------------------------------


def test_scipy_names_however_bound_and_a_closure_alone():
    import scipy.integrate as si

    def f(k):  # nothing but the closure holds a traced value
        a = si.solve_ivp(lambda t, y: -k * y, (0.0, 1.0), [1.0], t_eval=[1.0], rtol=1e-10, atol=1e-12).y[0, 0]
        b = scipy.integrate.odeint(lambda y, t: -k * y, 1.0, [0.0, 1.0], rtol=1e-10, atol=1e-12)[1, 0]
        return a + b

    np.testing.assert_allclose(pb.jit(f)(0.5), 2 * np.exp(-0.5), rtol=1e-9)
    np.testing.assert_allclose(pb.grad(f)(0.5), -2 * np.exp(-0.5), rtol=1e-8)


def test_result_fields():
    def run(y0):
        sol = solve_ivp(decay, (0.0, 1.0), y0, t_eval=np.array([0.0, 0.5, 1.0]), args=(1.0,))
        assert sol.y.shape == (2, 3) and sol.t.shape == (3,) and sol.sol is None and "status" in sol.message
        return sol.nfev, sol.status, sol.success

    ref = solve_ivp(decay, (0.0, 1.0), [1.0, 2.0], t_eval=np.array([0.0, 0.5, 1.0]), args=(1.0,))
    assert pb.jit(run)(np.array([1.0, 2.0])) == (ref.nfev, 0, True)


@pytest.mark.parametrize("call, message", [
    (lambda y0: solve_ivp(decay, (0, 1), y0, t_eval=[1.0], args=(1.0,), dense_output=True), "t_eval"),
    (lambda y0: solve_ivp(decay, (0, 1), y0, t_eval=[1.0], args=(1.0,), events=lambda t, y: y[0]), "events"),
    (lambda y0: solve_ivp(decay, (0, 1), y0, t_eval=[1.0], args=(1.0,), method="Radau"), "method='RK45'"),
    (lambda y0: solve_ivp(decay, (0, 1), y0, t_eval=[1.0], args=(1.0,), method="LSODA"), "method='RK45'"),
    (lambda y0: solve_ivp(decay, (0, 1), y0, args=(1.0,)), r"t_eval=\[t_span\[1\]\]"),
    (lambda y0: odeint(decay, y0, [0.0, 1.0], args=(1.0,), full_output=True, tfirst=True), "solve_ivp"),
    (lambda y0: solve_ivp(decay, (0, 1), y0, t_eval=[2.0], args=(1.0,)), "within `t_span`"),
    (lambda y0: solve_ivp(decay, (0, 1), y0, t_eval=[0.5, 0.2], args=(1.0,)), "sorted"),
    (lambda y0: solve_ivp(decay, (0, 1), y0 * 1j, t_eval=[1.0], args=(1.0,)), "complex states"),
    (lambda y0: solve_ivp(lambda t, y: y[:1], (0, 1), y0, t_eval=[1.0]), None),
])
def test_refusals_name_what_works(call, message):
    if message is None:  # a right-hand side of the wrong shape
        y0 = np.ones(3)
        with pytest.raises(ValueError, match="right-hand side returned shape"):
            pb.jit(lambda y0: solve_ivp(lambda t, y: y[:2], (0, 1), y0, t_eval=[1.0]).y)(y0)
        return
    with pytest.raises((TypeError, ValueError, NotImplementedError), match=message) as info:
        pb.jit(lambda y0: call(y0).y if hasattr(call(y0), "y") else call(y0))(np.ones(2))
    assert "test_integrate.py" in str(info.value)


def test_the_tableaus_are_scipys():
    for name in METHODS:
        m = pb.integrate.tableau(name)
        cls = getattr(scipy.integrate, name)
        np.testing.assert_array_equal(m.A, cls.A)
        np.testing.assert_array_equal(m.B, cls.B)
        assert (m.order, m.error_order, m.n_stages) == (cls.order, cls.error_estimator_order, cls.n_stages)


# --- JAX, where installed ------------------------------------------------------------------------
# JAX runs in a child process: imported here it would start threads, and the suite's tests that fork
# (test_isolation, test_pickle) would then risk a deadlock.

_JAX_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp
from jax.experimental.ode import odeint
jax.config.update("jax_enable_x64", True)
def f(y, t, p):
    return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])
t = jnp.linspace(0.0, 5.0, 6)
def loss(y0, p):
    return jnp.sum(odeint(f, y0, t, p, rtol=1e-10, atol=1e-10) ** 2)
p = jnp.array(json.loads(sys.argv[1]))
value, (g_y0, g_p) = jax.value_and_grad(loss, argnums=(0, 1))(jnp.array([10.0, 5.0]), p)
print(json.dumps([float(value), [float(v) for v in g_y0], [float(v) for v in g_p]]))
"""


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")
@pytest.mark.parametrize("adjoint", [False, True])
def test_against_jax_odeint(adjoint):
    """jax.experimental.ode.odeint (Dormand-Prince, its own step control, gradients by the adjoint)."""
    out = subprocess.run([sys.executable, "-c", _JAX_SCRIPT, json.dumps(P_LV.tolist())], capture_output=True,
                         text=True, check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    jax_value, jax_g_y0, jax_g_p = json.loads(out.stdout.strip().splitlines()[-1])

    def loss(y0, p):
        f = lambda y, t, p: np.array([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])  # noqa: E731
        return np.sum(pb.integrate.odeint(f, y0, np.linspace(0.0, 5.0, 6), args=(p,), rtol=1e-10, atol=1e-10,
                                          adjoint=adjoint) ** 2)

    value, (g_y0, g_p) = pb.value_and_grad(loss, argnums=(0, 1))(np.array([10.0, 5.0]), P_LV)
    np.testing.assert_allclose(value, jax_value, rtol=1e-8)
    np.testing.assert_allclose(g_y0, jax_g_y0, rtol=1e-6)
    np.testing.assert_allclose(g_p, jax_g_p, rtol=1e-6)
