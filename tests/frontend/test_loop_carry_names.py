"""A loop's carry prints under the name the user's body gives it: ``pb.fori_loop(0, 50, body, q0)`` with
``def body(i, q)`` carries ``q`` and ``q_bar`` (not ``val``, ``fori_loop``'s own parameter), with
Python bounds (a ``for`` loop) and traced ones (a ``while`` loop); a body that unpacks a tuple carry
names its leaves. Gradients against central differences of the same NumPy loop."""

import re

import numpy as np
import pytest

import pullback as pb
from tests.oracles import central_differences

Q0 = np.array([1.0, -0.5])


def fori(k, q0):
    def body(i, q):
        return np.sin(k * q) + 0.1 * q

    return np.sum(pb.fori_loop(0, 50, body, q0))


def fori_to(k, q0, n):
    def body(i, q):
        return np.sin(k * q) + 0.1 * q

    return np.sum(pb.fori_loop(0, n, body, q0))


def fori_pair(k, q0):
    def body(i, state):
        pos, vel = state
        return pos + 0.1 * vel, vel - 0.1 * np.sin(k * pos)

    pos, vel = pb.fori_loop(0, 40, body, (q0, 0.5 * q0))
    return np.sum(pos ** 2) + np.sum(vel)


def numpy_loop(k, q0, n=50):
    q = q0
    for _ in range(n):
        q = np.sin(k * q) + 0.1 * q
    return np.sum(q)


def numpy_pair(k, q0):
    pos, vel = q0, 0.5 * q0
    for _ in range(40):
        pos, vel = pos + 0.1 * vel, vel - 0.1 * np.sin(k * pos)
    return np.sum(pos ** 2) + np.sum(vel)


@pytest.mark.parametrize("f, args, loop", [
    (fori, (0.7, Q0), "for t in range(50):"),
    (fori_to, (0.7, Q0, 50), "while lt:"),
])
def test_a_fori_loop_carries_the_bodys_parameter_name(f, args, loop):
    d = pb.differentiate(f, argnums=(0, 1))
    src = d.source(*args)
    assert loop in src
    assert not re.search(r"\bval", src)
    assert re.search(r"^    q = q0$", src, re.M) and re.search(r"\bq_bar\b", src) and "q_steps" in src
    g_k, g_q0 = d.grad(*args)
    np.testing.assert_allclose(g_k, central_differences(numpy_loop, (0.7, Q0), 0), rtol=1e-6)
    np.testing.assert_allclose(g_q0, central_differences(numpy_loop, (0.7, Q0), 1), rtol=1e-6)


def test_a_fori_loop_whose_body_unpacks_its_carry_names_each_leaf():
    d = pb.differentiate(fori_pair, argnums=(0, 1))
    src = d.source(0.7, Q0)
    assert not re.search(r"\bval|\bstate_\d", src)
    assert re.search(r"\bpos_bar\b", src) and re.search(r"\bvel_bar\b", src)
    g_k, g_q0 = d.grad(0.7, Q0)
    np.testing.assert_allclose(g_k, central_differences(numpy_pair, (0.7, Q0), 0), rtol=1e-6)
    np.testing.assert_allclose(g_q0, central_differences(numpy_pair, (0.7, Q0), 1), rtol=1e-6)
