"""Fills (``np.zeros``, ``np.ones``) print as a person writes them: zeros that start one loop's carry are
made as that carry (``p = np.zeros(n)``); zeros that start several sums are named ``zeros``, not ``bcast``;
``dtype=`` only where it is not float64, the default of NumPy's, CuPy's and Dask's ``zeros`` and ``ones``."""

import functools
import re

import numpy as np
import pytest

import pullback as pb
import pullback.api.transforms
from pullback.opt import reroll as rr

RNG = np.random.default_rng(7)


@pytest.fixture
def short_loops(monkeypatch):
    monkeypatch.setattr(pullback.api.transforms, "reroll", functools.partial(rr.reroll, min_steps=3, min_eqns=1))


def relax(a, x):
    for _ in range(6):
        x = x * (1.0 - a) + np.sin(x) / (a + 0.5)
    return np.sum(x)


def _fd_grad(f, args, eps=1e-6):
    """Central differences of ``f`` in each entry of each argument."""
    grads = []
    for k, a in enumerate(args):
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            e = np.zeros_like(a)
            e[i] = eps
            plus = f(*args[:k], a + e, *args[k + 1:])
            minus = f(*args[:k], a - e, *args[k + 1:])
            g[i] = (plus - minus) / (2 * eps)
        grads.append(g)
    return grads


def test_zeros_shared_by_several_sums_are_named_zeros(short_loops):
    args = (RNG.uniform(0.1, 0.5, 4), RNG.standard_normal(4))
    d = pb.differentiate(relax, argnums=(0, 1))
    src = d.source(*args)
    assert "bcast" not in src and not re.search(r"np\.(zeros|ones)\(.*dtype=np\.float64", src)
    assert "\n    zeros = np.zeros((4,))\n    sub_a_bar_sum = zeros\n    add_a_bar_sum = zeros\n" in src, src
    assert "x_bar = np.ones((4,))\n" in src
    _, grads = d.value_and_grad(*args)
    for g, fd in zip(grads, _fd_grad(relax, args)):
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_a_fill_starting_one_carry_is_made_as_it_and_shared_zeros_apart(short_loops):
    """``p = np.zeros(n)`` before a loop whose backward loop sums cotangents from zeros too: one fill in
    the program (merged), printed where each loop starts from it, under the carry's name where it starts
    one carry alone."""
    def jacobi(x, w):
        p = np.zeros(5)
        for _ in range(6):
            p = (x + np.roll(p, 1) + np.roll(p, -1)) / 4.0
            p = np.tanh(w * p)
        return np.sum(p ** 2)

    args = (RNG.standard_normal(5), RNG.standard_normal(5))
    d = pb.differentiate(jacobi, argnums=(0, 1))
    src = d.source(*args)
    assert "\n    p = np.zeros((5,))\n" in src and "bcast = np.zeros" not in src and "p = bcast" not in src, src
    _, grads = d.value_and_grad(*args)
    for g, fd in zip(grads, _fd_grad(jacobi, args)):
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_dtype_is_printed_where_it_is_not_the_default(short_loops):
    args = tuple(np.asarray(a, np.float32) for a in (RNG.uniform(0.1, 0.5, 4), RNG.standard_normal(4)))
    d = pb.differentiate(relax, argnums=(0, 1))
    src = d.source(*args)
    assert "zeros = np.zeros((4,), dtype=np.float32)\n" in src and "x_bar = np.ones((4,), dtype=np.float32)" in src
    _, (ga, gx) = d.value_and_grad(*args)
    assert ga.dtype == gx.dtype == np.float32
    fd = _fd_grad(relax, tuple(a.astype(np.float64) for a in args))
    np.testing.assert_allclose(ga, fd[0], rtol=1e-3, atol=1e-4)


def test_the_dask_program_prints_its_fills_alike_and_float64_is_their_default(short_loops):
    da = pytest.importorskip("dask.array")
    args = (RNG.uniform(0.1, 0.5, 4), RNG.standard_normal(4))
    src = pb.differentiate(relax, argnums=(0, 1)).with_backend("dask").source(*args)
    assert "zeros = da.zeros((4,))\n" in src and "x_bar = da.ones((4,))\n" in src, src
    # the default the printed calls rely on, of each library that prints them
    assert np.zeros(2).dtype == np.ones(2).dtype == da.zeros(2).dtype == da.ones(2).dtype == np.float64
    try:
        import cupy as cp
    except ImportError:
        return
    assert cp.zeros(2).dtype == cp.ones(2).dtype == np.float64


def test_zeros_updated_in_place_are_made_for_each_sum():
    """Each gather's cotangent sums into zeros of its own, made where it is summed and named by it
    (``accumulated = np.zeros(n)``, ``np.add.at(accumulated, ...)``), not copies of one shared zeros
    that the last sum then updates under the name ``zeros``."""
    def f(x, i, j, k):
        return np.sum(x[i] * x[j] * np.sin(x[k]))

    x = np.linspace(0.1, 1.0, 6)
    i, j, k = np.array([0, 2, 2, 5]), np.array([1, 1, 3, 4]), np.array([5, 0, 0, 2])
    d = pb.differentiate(f)
    src = d.source(x, i, j, k)
    assert ".copy()" not in src and "bcast" not in src and "zeros" not in src.replace("np.zeros", ""), src
    sums = re.findall(r"\n    (accumulated(?:_\d)?) = np\.zeros\(\(6,\)\)\n    np\.add\.at\(\1, [ijk], ", src)
    assert len(sums) == 3, src
    np.testing.assert_allclose(d.grad(x, i, j, k), _fd_grad(lambda x: f(x, i, j, k), (x,))[0], rtol=1e-6, atol=1e-9)
