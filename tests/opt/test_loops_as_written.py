"""Issue 29, items 2 and 4, on spellings the goldens do not use: a Python ``while`` loop calling a helper
with tuple unpacking, a loop over a dict of parameters, a step with two factorisations, an explicit Euler
loop calling a helper that unpacks its arguments. Each is rolled into one loop forward and one backward,
printed with the user's names and no step before the loop, and its gradient is the central differences'
of the same NumPy function; carries take the user's names in every spelling here (a tuple assignment that
passes a value on, steps alternating a conditional's branches, a fori_loop body's parameter), and each error
check prints once, after what it checks."""

import re

import numpy as np
import pytest
import scipy.linalg as sla

import pullback as pb
from tests.oracles import central_differences

RNG = np.random.default_rng(29)


def loops(src: str) -> list[str]:
    return [line.strip() for line in src.splitlines() if line.lstrip().startswith("for ")]


def damp(h, w):
    return np.tanh(w * h)


def while_helper(w, x0):
    a, b = x0[0], x0[1]
    i = 0
    while i < 200:
        a, b = damp(b, w) + 0.1 * a, 0.5 * a - 0.1 * np.sin(b)
        i += 1
    return a * a + b


def test_a_while_loop_calling_a_helper_prints_one_loop_with_the_unpacked_names():
    """``a, b = x0[0], x0[1]`` and a ``while`` loop: the names ``a`` and ``b`` before the loop and on its
    carries, the helper's line in the body's comments, one loop each way, ``x0``'s cotangent as one array."""
    x0 = np.array([0.3, -0.2])
    d = pb.differentiate(while_helper, argnums=(0, 1))
    src = d.source(0.7, x0)
    assert loops(src) == ["for t in range(200):", "for t in range(199, -1, -1):"]
    assert "a = x0[0]" in src and "b = x0[1]" in src and "picked" not in src
    assert re.search(r"^        a(_\d+)? = tanh \+ ", src, re.M) and "return np.tanh(w * h)" in src
    assert "x0_bar = np.array((" in src
    g_w, g_x0 = d.grad(0.7, x0)
    np.testing.assert_allclose(g_w, central_differences(while_helper, (0.7, x0), 0), rtol=1e-7)
    np.testing.assert_allclose(g_x0, central_differences(while_helper, (0.7, x0), 1), rtol=1e-7)


def rnn(params, X):
    h = np.zeros(3)
    for t in range(X.shape[0]):
        h = np.tanh(params["W"] @ h + params["U"] @ X[t] + params["b"])
    return np.sum(h ** 2)


def test_a_loop_over_a_dict_of_parameters_sums_each_gradient_under_its_name():
    """400 steps of an RNN reading ``params["W"]``, ``params["U"]``, ``params["b"]``: rerolled (no step of
    the loop before it), each parameter's cotangent summed in one accumulator named after it, ``X[t]``
    read by the step; the gradient is a dict, the central differences' of the NumPy loop."""
    params = {"W": 0.3 * RNG.standard_normal((3, 3)), "U": 0.3 * RNG.standard_normal((3, 2)), "b": 0.1 * np.ones(3)}
    X = RNG.standard_normal((400, 2))
    d = pb.differentiate(rnn)
    src = d.source(params, X)
    assert loops(src) == ["for t in range(400):", "for t in range(399, -1, -1):"]
    assert "def rnn_grad(params_W, params_U, params_b, X):" in src
    assert {"params_W_bar_sum", "params_U_bar_sum", "params_b_bar_sum"} <= set(re.findall(r"(\w+_bar_sum) = ", src))
    assert "= X[t]" in src and "picked" not in src and "carry" not in src
    assert "np.tanh" not in src.split("for t in range(400):")[0]
    grads = d.grad(params, X)
    assert isinstance(grads, dict) and set(grads) == set(params)
    for k in params:
        keys = list(params)

        def along(x, k=k, keys=keys):
            return rnn({kk: (x if kk == k else params[kk]) for kk in keys}, X)

        np.testing.assert_allclose(grads[k], central_differences(along, (params[k],), 0), rtol=1e-6, atol=1e-9)


def two_factorisations(A, b):
    x = b
    for _ in range(100):
        M = np.eye(3) + 0.1 * np.cos(x[0]) * A
        y = np.linalg.solve(M, x)
        L = np.linalg.cholesky(M @ M.T)
        x = 0.5 * np.tanh(y) + 0.5 * sla.solve_triangular(L, x, lower=True)
    return np.sum(x ** 2)


def test_a_step_with_two_factorisations_checks_each_once_and_peels_no_step():
    """An LU solve and a Cholesky factorisation a step: in the rolled loop each factorisation prints once
    and is checked once (``if info`` twice in all), none before the loop; the gradient is the unrolled
    program's and the central differences'."""
    A, b = RNG.standard_normal((3, 3)), 0.5 * RNG.standard_normal(3)
    d = pb.differentiate(two_factorisations, argnums=(0, 1))
    src = d.source(A, b)
    assert loops(src) == ["for t in range(100):", "for t in range(99, -1, -1):"]
    assert src.count("dgetrf(") == 1 and src.count("dpotrf(") == 1
    assert src.count("if info") == 2 and "raise" not in src.split("for t in range(100):")[0]
    g_A, g_b = d.grad(A, b)
    flat_A, flat_b = pb.differentiate(two_factorisations, argnums=(0, 1), reroll=False).grad(A, b)
    np.testing.assert_allclose(g_A, flat_A, rtol=1e-12)
    np.testing.assert_allclose(g_b, flat_b, rtol=1e-12, atol=1e-20)
    np.testing.assert_allclose(g_A, central_differences(two_factorisations, (A, b), 0), rtol=1e-6)
    np.testing.assert_allclose(g_b, central_differences(two_factorisations, (A, b), 1), rtol=1e-5, atol=1e-9)


def invariant_factorisations(A, b):
    x = b
    for _ in range(100):
        M = np.eye(3) + 0.1 * A  # the same M at every step: factorised once, before the loop
        y = np.linalg.solve(M, x)
        L = np.linalg.cholesky(M @ M.T)
        x = 0.5 * np.tanh(y) + 0.5 * sla.solve_triangular(L, x, lower=True)
    return np.sum(x ** 2)


def test_factorisations_of_a_loop_invariant_are_hoisted_and_right():
    A, b = RNG.standard_normal((3, 3)), RNG.standard_normal(3)
    d = pb.differentiate(invariant_factorisations, argnums=(0, 1))
    src = d.source(A, b)
    before = src.split("for t in range(100):")[0]
    assert "dgetrf(" in before and "dpotrf(" in before and src.count("dgetrf(") == 1 and src.count("dpotrf(") == 1
    g_A, _ = d.grad(A, b)
    np.testing.assert_allclose(g_A, central_differences(invariant_factorisations, (A, b), 0), rtol=1e-6)


def test_the_checks_of_hoisted_factorisations_are_made_once_before_the_loop():
    A, b = RNG.standard_normal((3, 3)), RNG.standard_normal(3)
    src = pb.differentiate(invariant_factorisations, argnums=(0, 1)).source(A, b)
    assert "raise" not in src.split("for t in range(100):")[1]


def two_solves(A, x):
    y = np.linalg.solve(A, x)
    return np.sum(y ** 2) + np.sum(np.linalg.solve(A, 2 * x))


def test_one_factorisation_serving_two_solves_is_checked_once():
    A = np.eye(3) * 2 + 0.1
    src = pb.differentiate(two_solves).source(A, np.ones(3))
    assert src.count("dgetrf(") == 1
    assert src.count("if info") == 1


def lotka_volterra(u, theta):
    x, y = u
    a, b, c, d = theta
    return np.array([a * x - b * x * y, d * x * y - c * y])


def euler(theta, u0):
    u = u0
    for _ in range(300):
        u = u + 0.01 * lotka_volterra(u, theta)
    return u[0]


def test_an_unrolled_loop_calling_a_helper_that_unpacks_keeps_its_names():
    """A Python loop over a helper that unpacks ``x, y = u`` and ``a, b, c, d = theta``: rolled, the step
    reads ``x = u[0]``, theta's entries are read once before the loop under their names, theta's gradient
    is the vector of the four accumulators; the central differences' of the NumPy loop."""
    theta, u0 = np.array([1.5, 1.0, 3.0, 1.0]), np.array([1.0, 0.5])
    d = pb.differentiate(euler, argnums=(0, 1))
    src = d.source(theta, u0)
    assert loops(src) == ["for t in range(300):", "for t in range(299, -1, -1):"]
    before = src.split("for t in range(300):")[0]
    assert "a = theta[0]" in before and "d = theta[3]" in before and "u = u0" in before
    assert "x = u[0]" in src and "y = u[1]" in src and "picked" not in src and "carry" not in src
    assert "theta_bar = np.array((a_bar_sum, b_bar_sum, c_bar_sum, d_bar_sum))" in src
    g_theta, g_u0 = d.grad(theta, u0)
    np.testing.assert_allclose(g_theta, central_differences(euler, (theta, u0), 0), rtol=1e-7)
    np.testing.assert_allclose(g_u0, central_differences(euler, (theta, u0), 1), rtol=1e-7)


def swap(x):
    a, b = x, np.sin(x)
    for _ in range(400):
        a, b = b, 0.5 * a + 0.5 * np.sin(b)
    return np.sum(b)


def alternating(x):
    for t in range(800):
        x = x + 0.001 * np.sin(x) if t % 2 else x - 0.001 * np.cos(x)
    return np.sum(x)


def fori(k, q0):
    def body(i, q):
        return np.sin(k * q) + 0.1 * q

    return np.sum(pb.fori_loop(0, 50, body, q0))


def fori_numpy(k, q0):
    q = q0
    for _ in range(50):
        q = np.sin(k * q) + 0.1 * q
    return np.sum(q)


@pytest.mark.parametrize("f, oracle, args", [
    (swap, swap, (np.array([0.2, -0.4, 0.9]),)),
    (alternating, alternating, (np.array([0.2, -0.4, 0.9]),)),
    (fori, fori_numpy, (0.7, np.array([1.0, -0.5]))),
])
def test_the_gradients_of_loops_whose_carries_are_not_yet_named_are_right(f, oracle, args):
    d = pb.differentiate(f, argnums=tuple(range(len(args))) if len(args) > 1 else 0)
    grads = d.grad(*args)
    for i, g in enumerate(grads if len(args) > 1 else (grads,)):
        np.testing.assert_allclose(g, central_differences(oracle, args, i), rtol=1e-6, atol=1e-10)


def test_a_swapping_tuple_assignment_carries_the_users_names():
    src = pb.differentiate(swap).source(np.ones(3))
    assert "carry" not in src


def test_a_loop_of_alternating_steps_carries_the_users_name():
    src = pb.differentiate(alternating).source(np.ones(3))
    assert "carry" not in src


def test_a_fori_loop_carries_the_bodys_parameter_name():
    src = pb.differentiate(fori, argnums=(0, 1)).source(0.7, np.array([1.0, -0.5]))
    assert "val" not in src and re.search(r"\bq_bar\b", src)


def strided(x, v):
    for t in range(300):
        x = np.tanh(x + v[2 * t])  # every other row: a window moving two places a step
    return np.sum(x)


def halves(x):
    seen = [x]
    for t in range(300):
        x = np.tanh(0.5 * x + 0.1 * seen[t // 2])  # a value from t/2 steps back
        seen.append(x)
    return np.sum(x)


@pytest.mark.parametrize("f, args", [(strided, (np.array([0.1, -0.2, 0.3]), np.linspace(-1, 1, 1800).reshape(600, 3))),
                                     (halves, (np.array([0.1, -0.2, 0.3]),))])
def test_a_long_run_is_rolled_or_reported_with_its_reason(f, args, pullback_log):
    """300 steps of a repeating body: either one loop, or a log line saying which step reads otherwise
    and why, at the user's line; the gradient is the central differences' either way."""
    d = pb.differentiate(f)
    primal = d.ir(*args, stage="primal")
    rolled = [e for e in primal.eqns if e.prim.name == "scan"]
    reported = [m for m in pullback_log if "was seen but not rolled" in m]
    assert rolled or (len(reported) == 1 and "test_loops_as_written.py:" in reported[0] and ": " in reported[0])
    np.testing.assert_allclose(d.grad(*args), central_differences(f, args, 0), rtol=1e-6, atol=1e-10)


def comment_above(src: str, statement: str) -> str:
    """The comment nearest above the first line that starts with ``statement``."""
    lines = src.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(statement))
    return next(line.strip() for line in reversed(lines[:at]) if line.strip().startswith("# "))


def test_the_rerolled_kalman_filters_carries_start_under_the_users_lines():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    import kalman_filter as kf

    A, B, v = kf.simulate(T=30)
    src = kf.nll_unrolled.source(A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    assert comment_above(src, "nll = np.float64(0.0)").endswith("nll = 0.0")
