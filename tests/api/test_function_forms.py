"""The function forms (pb.grad(f)(x), pb.jvp, pb.vjp, ...) reuse compiled programs across calls,
and are not served stale when the function, its closure or the globals it names change."""

from typing import NamedTuple

import numpy as np
import pytest

import pullback as pb
from pullback.api import transforms as api

W = np.array([1.0, 2.0])


def loss(x):
    return np.sum(W * x ** 2)


def test_function_forms_compile_once():
    x = np.array([0.5, -1.0])
    f = lambda x: np.sum(np.sin(x) * x)  # noqa: E731
    pb.grad(f)(x)
    held = api.held(f)
    runners = dict(held._runners)
    for _ in range(5):
        np.testing.assert_allclose(pb.grad(f)(x), np.sin(x) + x * np.cos(x), rtol=1e-15)
    assert api.held(f)._programs is held._programs and held._runners == runners  # no new program was built


def test_rebound_global_and_closure_are_not_stale():
    global W
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(pb.grad(loss)(x), 2 * W * x)
    saved = W
    try:
        W = np.array([3.0, 4.0])
        np.testing.assert_allclose(pb.grad(loss)(x), 2 * W * x)
    finally:
        W = saved

    def make(a):
        return lambda x: a * np.sum(x ** 2)

    f = make(2.0)
    np.testing.assert_allclose(pb.grad(f)(x), 4.0 * x)

    scale = 1.0

    def g(x):
        return scale * np.sum(x ** 2)

    np.testing.assert_allclose(pb.grad(g)(x), 2.0 * x)
    scale = 5.0
    np.testing.assert_allclose(pb.grad(g)(x), 10.0 * x)


class Params(NamedTuple):
    w: np.ndarray
    b: float


def test_namedtuple_and_none_arguments():
    def loss(p, x, unused):
        return np.sum((x @ p.w + p.b) ** 2)

    x = np.ones((3, 2))
    value, g = pb.value_and_grad(loss)(Params(np.ones(2), 0.5), x, None)
    assert value == 18.75 and isinstance(g, Params)
    np.testing.assert_allclose(g.w, [15.0, 15.0])
    assert g.b == 15.0


def test_has_aux_returns_the_auxiliary_values_beside_the_gradient():
    def loss(w, x):
        pred = x @ w
        return np.sum(pred ** 2), {"pred": pred, "norm": np.linalg.norm(w)}

    w, x = np.array([1.0, 2.0]), np.arange(6.0).reshape(3, 2)
    g, aux = pb.grad(loss, has_aux=True)(w, x)
    np.testing.assert_allclose(g, 2 * x.T @ (x @ w))
    np.testing.assert_allclose(aux["pred"], x @ w)
    assert aux["norm"] == np.linalg.norm(w)
    (value, aux2), g2 = pb.value_and_grad(loss, has_aux=True)(w, x)
    assert value == np.sum((x @ w) ** 2)
    np.testing.assert_allclose(g2, g)
    np.testing.assert_allclose(aux2["pred"], x @ w)
    with pytest.raises(TypeError, match="real scalar"):
        pb.grad(loss)(w, x)  # without has_aux the pair is not a scalar
    with pytest.raises(TypeError, match="pair"):
        pb.grad(lambda w: np.sum(w), has_aux=True)(w)


def test_traces_and_compiles_are_logged(caplog):
    import logging

    f = lambda x: np.sum(np.cos(x) * x)  # noqa: E731
    with caplog.at_level(logging.INFO, logger="pullback"):
        pb.grad(f)(np.ones(3))
        pb.grad(f)(np.ones(3))  # compiled already: nothing more
        pb.grad(f)(np.ones(5))
    messages = [r.getMessage() for r in caplog.records if r.name == "pullback"]
    assert sum("stage grad, for (f64[3])" in m for m in messages) == 1
    assert sum("stage grad, for (f64[5])" in m for m in messages) == 1
    assert sum(m.startswith("compiled f_grad") for m in messages) == 2


def test_vjp_has_aux():
    def f(x):
        y = np.sin(x)
        return y * 2.0, {"y": y}

    x = np.array([0.1, 0.2])
    out, vjp_fn, aux = pb.vjp(f, x, has_aux=True)
    np.testing.assert_allclose(out, 2 * np.sin(x))
    np.testing.assert_allclose(aux["y"], np.sin(x))
    (x_bar,) = vjp_fn(np.array([1.0, -1.0]))
    np.testing.assert_allclose(x_bar, 2 * np.cos(x) * [1.0, -1.0])
    with pytest.raises(ValueError, match="structure"):
        vjp_fn((np.ones(2), np.ones(2)))


def test_large_compiles_are_announced_with_logging_off(caplog, monkeypatch):
    """A compile of ``log.LARGE`` equations or more is announced before it starts, as a warning
    (seen without configuring logging); smaller ones are not."""
    import logging

    from pullback import log

    monkeypatch.setattr(log, "LARGE", 30)

    def chain(x, n):
        for _ in range(n):
            x = np.sin(x) * 0.9
        return np.sum(x)

    with caplog.at_level(logging.WARNING, logger="pullback"):
        pb.grad(chain, static_argnums=1)(np.ones(2), 2)
        assert not caplog.records
        pb.grad(chain, static_argnums=1)(np.ones(2), 40)
    (record,) = [r for r in caplog.records if r.name == "pullback"]
    assert record.levelno == logging.WARNING and "chain_grad" in record.getMessage()


def test_jvp_vjp_linearize_take_static_argnums():
    """A loop bound among the primals: ``static_argnums`` keeps it a Python value; the other
    primals are differentiated (against central differences of the elementwise map)."""
    def f(x, n, y):
        for _ in range(n):
            x = np.sin(x) * y
        return x

    x, y, h = np.array([0.3, 0.7]), np.array([1.1, 0.9]), 1e-6
    dfdx = (f(x + h, 2, y) - f(x - h, 2, y)) / (2 * h)  # diagonal Jacobians: one difference each
    dfdy = (f(x, 2, y + h) - f(x, 2, y - h)) / (2 * h)
    out, vjp_fn = pb.vjp(f, x, 2, y, static_argnums=1)
    x_bar, y_bar = vjp_fn(np.ones(2))
    np.testing.assert_allclose(out, f(x, 2, y))
    np.testing.assert_allclose(x_bar, dfdx, rtol=1e-7)
    np.testing.assert_allclose(y_bar, dfdy, rtol=1e-7)
    _, out_dot = pb.jvp(f, (x, 2, y), (np.ones(2), None, np.zeros(2)), static_argnums=1)
    np.testing.assert_allclose(out_dot, dfdx, rtol=1e-7)
    _, jvp_fn = pb.linearize(f, x, 3, y, static_argnums=(1,))
    np.testing.assert_allclose(jvp_fn(np.zeros(2), np.ones(2)),
                               (f(x, 3, y + h) - f(x, 3, y - h)) / (2 * h), rtol=1e-7)
