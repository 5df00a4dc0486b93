"""Arrays read from scope and changed in place between calls, where the code that reads them is a function
the traced one hands to pullback (a loop's body, a branch, a checkpointed or mapped function, an inner
gradient), as sharp-bits promises for any function of the user's: arithmetic on them (``0.1 * a``) is the
program's, re-run at every call, so values and gradients follow the array's new contents. Before the fix a
body defined inside the traced function (``lambda c, _: (np.sin(c) + 0.1 * a, c)``), and any
``fori_loop`` body, computed ``0.1 * a`` once, when tracing, and kept it as a constant: stale."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb

X = np.linspace(1.0, 2.0, 3)


def _fori_outer(a):
    def body(i, c):
        return np.sin(c) + 0.1 * a

    return lambda x: np.sum(pb.fori_loop(0, 3, body, x) ** 2)


def _fori_traced_bound(a):
    def f(x):
        n = np.sum(x > 0)  # a traced integer: the loop is a while_loop
        return np.sum(pb.fori_loop(0, n, lambda i, c: np.sin(c) + 0.1 * a, x) ** 2)

    return f


def _nested_def_to_cond(a):
    def f(x):
        def branch(y):
            return y + 0.1 * a

        return np.sum(pb.cond(np.sum(x) > 0, branch, branch, x) ** 2)

    return f


def _custom_jvp_rule(a):
    @pb.custom_jvp
    def h(y):
        return np.sin(y)

    @h.defjvp
    def h_jvp(primals, tangents):
        (y,), (t,) = primals, tangents
        return h(y), np.cos(y) * t + 0 * (0.1 * a)  # (the rule reads the array: still the program's work)

    return lambda x: np.sum(h(x) * (0.1 * a))


CASES = {
    "scan": lambda a: lambda x: np.sum(pb.scan(lambda c, _: (np.sin(c) + 0.1 * a, c), x, None, length=4)[1] ** 2),
    "fori_loop": lambda a: lambda x: np.sum(pb.fori_loop(0, 3, lambda i, c: np.sin(c) + 0.1 * a, x) ** 2),
    "fori_loop, body defined outside": _fori_outer,
    "fori_loop, traced bound": _fori_traced_bound,
    "while_loop": lambda a: lambda x: np.sum(
        pb.while_loop(lambda c: c[1] < 3, lambda c: (np.sin(c[0]) + 0.1 * a, c[1] + 1), (x, 0))[0] ** 2),
    "cond": lambda a: lambda x: np.sum(pb.cond(np.sum(x) > 0, lambda y: y + 0.1 * a, lambda y: y - a, x) ** 2),
    "cond, nested def": _nested_def_to_cond,
    "switch": lambda a: lambda x: np.sum(pb.switch(1, [lambda y: y - a, lambda y: y * (0.1 * a)], x) ** 2),
    "checkpoint": lambda a: lambda x: np.sum(pb.checkpoint(lambda y: np.sin(y) + 0.1 * a)(x) ** 2),
    "vmap": lambda a: lambda x: np.sum(pb.vmap(lambda y: np.sin(y) + 0.1 * a)(x[None]) ** 2),
    "inner grad": lambda a: lambda x: np.sum(pb.grad(lambda y: np.sum(np.sin(y) * (0.1 * a)))(x) * x),
    "custom_jvp": _custom_jvp_rule,
}


def _central(f, x, eps=1e-6):
    return np.array([(f(x + e) - f(x - e)) / (2 * eps) for e in np.eye(x.size) * eps])


@pytest.mark.parametrize("case", list(CASES))
def test_in_place_changes_reach_the_bodies_pullback_traces(case):
    a = np.arange(3.0)
    f = CASES[case](a)
    value, grad = pb.jit(f), pb.grad(f)
    np.testing.assert_allclose(value(X), f(X), rtol=1e-12)
    np.testing.assert_allclose(grad(X), _central(f, X), rtol=1e-6, atol=1e-8)
    a[0] = 5.0  # in place, between calls
    np.testing.assert_allclose(value(X), f(X), rtol=1e-12)
    np.testing.assert_allclose(grad(X), _central(f, X), rtol=1e-6, atol=1e-8)
