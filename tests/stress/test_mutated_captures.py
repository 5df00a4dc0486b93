"""Arrays made from shapes alone (``np.arange``, ``np.zeros``, ``np.ones``, ``np.full``, ``np.linspace``,
``np.eye``), which ``frontend/eyes.py`` may recreate in the program rather than read, held by the user (a
closure, a global dict, an object's attribute, a default argument, a cache the traced code fills at its
first trace) and changed in place between calls: the compiled value, the compiled gradient and the eager
walk's gradient follow the new values (the program reads the user's array at every call, never a copy made
when tracing). Open (xfail, tests/regressions/test_stale_reductions.py): an array the first trace makes
and the user keeps, whose ``np.sum`` is folded when tracing. The Dask backend's documented
exception: it persists the constants at the first call."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb

X = np.linspace(0.5, 1.5, 4)

MAKERS = {
    "arange": lambda: np.arange(4.0),
    "zeros": lambda: np.zeros(4),
    "ones": lambda: np.ones(4),
    "full": lambda: np.full(4, 2.0),
    "linspace": lambda: np.linspace(0.0, 1.0, 4),
    "eye": lambda: np.eye(4),
}


def _use(x, w):
    """A loss reading ``w`` as a vector or (an identity) as a matrix."""
    v = w @ x if w.ndim == 2 else w * x
    return np.sum(np.sin(v) * x) + np.sum(w) * 0.5


class _Holder:
    pass


def _closure(make):
    w = make()
    return (lambda x: _use(x, w)), (lambda: w)


GLOBAL: dict = {}


def _global(make):
    GLOBAL["w"] = make()

    def f(x):
        return _use(x, GLOBAL["w"])

    return f, lambda: GLOBAL["w"]


def _attribute(make):
    h = _Holder()
    h.w = make()
    return (lambda x: _use(x, h.w)), (lambda: h.w)


def _default(make):
    def f(x, w=make()):  # noqa: B008  (the holder itself)
        return _use(x, w)

    return f, lambda: f.__defaults__[0]


def _filled_when_traced(make):
    cache: dict = {}

    def f(x):
        if "w" not in cache:  # made during the first trace, kept: the user's array from then on
            cache["w"] = make()
        return _use(x, cache["w"])

    return f, lambda: cache["w"]


HOLDERS = {"closure": _closure, "global dict": _global, "attribute": _attribute, "default argument": _default,
           "filled when traced": _filled_when_traced}


def _central(f, x, eps=1e-6):
    return np.array([(f(x + e) - f(x - e)) / (2 * eps) for e in np.eye(x.size) * eps])


def _check(f, value, grad, walk):
    np.testing.assert_allclose(value(X), f(X), rtol=1e-12)
    want = _central(f, X)
    np.testing.assert_allclose(grad(X), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(walk(X), want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("holder", list(HOLDERS))
@pytest.mark.parametrize("maker", list(MAKERS))
def test_in_place_changes_between_calls_are_seen(maker, holder):
    f, held = HOLDERS[holder](MAKERS[maker])
    value = pb.jit(f)
    grad = pb.differentiate(f, first_call="compiled").grad
    walk = pb.differentiate(f, first_call="eager").grad
    _check(f, value, grad, walk)
    w = held()
    w[0] = 5.0  # `a[0] = 5`
    w[..., -1] += 0.25
    _check(f, value, grad, walk)
    w[:] = 0.0 if maker != "zeros" else 1.0  # all one value, another than made: no fill recreates it
    _check(f, value, grad, walk)


def test_dask_persists_its_constants_at_the_first_call():
    pytest.importorskip("dask.array")
    w = np.arange(4.0)
    f = lambda x: _use(x, w)  # noqa: E731
    g = pb.differentiate(f, backend="dask")
    before = np.asarray(g.grad(X))
    np.testing.assert_allclose(before, _central(f, X), rtol=1e-6, atol=1e-8)
    w[0] = 5.0
    np.testing.assert_allclose(np.asarray(g.grad(X)), before, rtol=1e-12)  # the snapshot (README, Dask)
    fresh = pb.differentiate(f, backend="dask")
    np.testing.assert_allclose(np.asarray(fresh.grad(X)), _central(f, X), rtol=1e-6, atol=1e-8)


class _Model:
    def __init__(self):
        self.w = np.ones(4)

    def loss(self, x):
        return np.sum(self.w * x)


def test_rebinding_as_the_readme_says():
    """A rebound name the function reads (a closure variable, ``self.w`` of a method) is traced again; a
    rebound dict item or another object's attribute is not seen (README, "What traces")."""
    m = _Model()
    by_self = pb.grad(m.loss)
    w = np.ones(4)
    by_closure = pb.grad(lambda x: np.sum(w * x))
    params, holder = {"w": np.ones(4)}, _Holder()
    holder.w = np.ones(4)
    by_item = pb.grad(lambda x: np.sum(params["w"] * x))
    by_attribute = pb.grad(lambda x: np.sum(holder.w * x))
    for g in (by_self, by_closure, by_item, by_attribute):
        np.testing.assert_array_equal(g(X), np.ones(4))
    m.w, w, params["w"], holder.w = (np.full(4, 2.0) for _ in range(4))
    np.testing.assert_array_equal(by_self(X), np.full(4, 2.0))
    np.testing.assert_array_equal(by_closure(X), np.full(4, 2.0))
    np.testing.assert_array_equal(by_item(X), np.ones(4))  # the object it traced
    np.testing.assert_array_equal(by_attribute(X), np.ones(4))
