"""Integer arguments that pick positions (issue 26, point 4): a slice of fixed length at a traced start
(``X[it * b:(it + 1) * b]``) is one program for every ``it``; a slice whose length depends on a traced
value names the argument and its ``static_argnums``; compiling a program per value of a static argument
is announced by the log. Oracles: NumPy run eagerly, and central finite differences."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import pullback as pb

X = np.random.default_rng(0).standard_normal((12, 3))
B = 4


def _fd_grad(f, params, *rest, eps=1e-6):
    """Central finite differences of ``f`` in its first argument, by NumPy."""
    g = np.zeros_like(params)
    for i in range(params.size):
        e = np.zeros_like(params)
        e.flat[i] = eps
        g.flat[i] = (f(params + e, *rest) - f(params - e, *rest)) / (2 * eps)
    return g


def test_minibatch_objective_is_one_program_for_every_batch():
    traces = []

    def objective(params, it):
        traces.append(it)
        batch = X[it * B:(it + 1) * B]
        return np.sum(np.tanh(batch @ params) ** 2)

    d = pb.differentiate(objective)
    params = np.array([0.3, -0.2, 0.5])
    for it in range(3):
        np.testing.assert_allclose(d.grad(params, it), _fd_grad(objective, params, it), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(d(params, it), objective(params, it), rtol=1e-12)
    assert sum(not isinstance(it, int) for it in traces) == 1  # one trace (the oracle calls it eagerly)
    source = d.source(params, 0)
    assert re.search(r"batch = X\[(\w+):\1 \+ 4\]", source), source
    assert "np.zeros" not in source  # the window's cotangent is never scattered: params' gradient needs none


def test_batch_indices_from_a_helper():
    def batch_indices(it):
        return slice(it * B, (it + 1) * B)

    def objective(params, it):
        return np.sum((X[batch_indices(it)] @ params) ** 2)

    params = np.ones(3)
    for it in range(3):
        np.testing.assert_allclose(pb.grad(objective)(params, it), _fd_grad(objective, params, it), rtol=1e-6)


def test_a_start_past_the_end_raises_when_the_program_runs():
    def objective(params, it):
        return np.sum(X[it * B:(it + 1) * B] @ params)

    f = pb.jit(objective)
    assert f(np.ones(3), 2) == pytest.approx(X[8:].sum())
    for it in (3, -1):  # NumPy would return a shorter slice (or count from the end): no static shape
        with pytest.raises(IndexError, match=r"slice of 4 at a traced start .* axis 0 of length 12.*test_integer"):
            f(np.ones(3), it)


def test_wrap_around_is_in_range_and_unchecked():
    def objective(params, it):
        k = it % 3
        return np.sum((X[k * B:(k + 1) * B] @ params) ** 2)

    params = np.array([1.0, -1.0, 0.5])
    d = pb.differentiate(objective)
    for it in (0, 4, 8, 11, -2):
        np.testing.assert_allclose(d.grad(params, it), _fd_grad(objective, params, it), rtol=1e-6)
    assert "IndexError" not in d.source(params, 5)


def test_windows_along_axis_one_and_assigned():
    def columns(W, j):
        return np.sum(np.sin(W[:, 2 * j:2 * j + 2]) * W[:, :2])

    def assigned(W, j):
        V = W * 1.0
        V[:, 2 * j:2 * (j + 1)] = W[:, :2] ** 2
        V[1, j:j + 3] += 1.0
        return np.sum(V ** 3)

    W = np.random.default_rng(1).standard_normal((3, 6))
    for f in (columns, assigned):
        for j in (0, 1, 2):
            np.testing.assert_allclose(pb.grad(f)(W, j), _fd_grad(f, W, j), rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(pb.jit(f)(W, j), f(W, j), rtol=1e-12)


def test_fancy_indices_built_from_an_integer_argument():
    def taken(params, it):
        return np.sum((np.take(X, np.arange(B) + it * B, axis=0) @ params) ** 2)

    def ranged(params, it):
        return np.sum((X[np.arange(it * B, (it + 1) * B)] @ params) ** 2)

    def strided(params, it):
        return np.sum(X[np.arange(it, it + 6, 2)] @ params)

    params = np.array([0.5, 1.0, -1.5])
    for f in (taken, ranged, strided):
        d = pb.differentiate(f)
        for it in (0, 2):
            np.testing.assert_allclose(d.grad(params, it), _fd_grad(f, params, it), rtol=1e-6)
        assert len(d._stages) == 2  # primal and gradient, for every it
    with pytest.raises(IndexError, match="out of bounds"):  # NumPy's own indexing refuses positions 12 to 15
        pb.jit(taken)(params, 3)


def test_a_length_that_depends_on_an_argument_names_it():
    def head(x, it):
        return np.sum(x[:it])

    with pytest.raises(pb.ConcretizationError, match=r"length depends on a traced value.*argument it.*"
                                                     r"static_argnums=\(1,\)"):
        pb.grad(head)(np.ones(5), 2)
    assert pb.grad(head, static_argnums=1)(np.ones(5), 2).tolist() == [1, 1, 0, 0, 0]

    def tail(x, *, start):
        return np.sum(x[2 * start:])

    with pytest.raises(pb.ConcretizationError, match=r"argument start.*static_argnames=\('start',\)"):
        pb.jit(tail)(np.ones(5), start=1)


def test_conversions_of_values_computed_from_an_argument_name_it():
    def as_int(x, flag, n):
        return x * int(n * 2)

    with pytest.raises(pb.ConcretizationError, match=r"int\(\).*computed from the traced argument n: .*"
                                                     r"static_argnums=\(2,\)"):
        pb.jit(as_int)(np.ones(2), True, 3)

    lookup = [1.0, 2.0, 3.0]
    with pytest.raises(pb.ConcretizationError, match=r"use as an index.*argument i\b.*static_argnums=\(1,\)"):
        pb.jit(lambda x, i: x * lookup[i + 1])(np.ones(2), 0)
    with pytest.raises(pb.ConcretizationError, match=r"static_argnums=\(1,\)"):  # the static one is not counted
        pb.jit(lambda x, i, n: x * lookup[i], static_argnums=2)(np.ones(2), 0, 3)


def test_a_loop_counter_picks_windows_in_range():
    def objective(params):
        return pb.fori_loop(0, 3, lambda i, total: total + np.sum((X[i * B:(i + 1) * B] @ params) ** 2), 0.0)

    params = np.array([0.2, 0.1, -0.3])
    np.testing.assert_allclose(pb.grad(objective)(params), 2 * X.T @ (X @ params), rtol=1e-12)
    assert "IndexError" not in pb.differentiate(objective).source(params)


def test_vmap_and_hessian_over_windows():
    def loss(params, it):
        return np.sum((X[it * B:(it + 1) * B] @ params) ** 2)

    params = np.array([1.0, 2.0, -1.0])
    np.testing.assert_allclose(pb.vmap(loss, in_axes=(None, 0))(params, np.arange(3)),
                               [loss(params, it) for it in range(3)], rtol=1e-12)
    np.testing.assert_allclose(pb.vmap(pb.grad(loss), in_axes=(None, 0))(params, np.array([2, 0])),
                               [2 * X[k:k + 4].T @ (X[k:k + 4] @ params) for k in (8, 0)], rtol=1e-12)
    np.testing.assert_allclose(pb.hessian(loss)(params, 1), 2 * X[4:8].T @ X[4:8], rtol=1e-12)
    with pytest.raises(IndexError):  # a batched start out of range: NumPy's indexing refuses it
        pb.vmap(loss, in_axes=(None, 0))(params, np.array([0, 3]))


def test_compiling_per_value_of_a_static_argument_is_announced_once(caplog):
    def objective(params, it):
        return np.sum(X[it:it + 2] @ params)

    g = pb.grad(objective, static_argnums=1)
    with caplog.at_level(logging.WARNING, logger="pullback"):
        for it in range(4):
            g(np.ones(3), it)
        assert not caplog.records
        for it in (4, 5, 6, 4):
            g(np.ones(3), it)
    assert len(caplog.records) == 1, caplog.records
    message = caplog.records[0].getMessage()
    assert "objective" in message and "5 values of its static argument it (static_argnums=1)" in message
    assert "leave it out of static_argnums" in message


def minibatch_residuals(w, X, y, it):
    batch = X[it * B:(it + 1) * B]
    residual = batch @ w - y[it * B:(it + 1) * B]
    return np.sum(residual ** 2)


def test_gradient_source_golden():
    """How windows print: the slices as written, one range check for the start they share (the
    cotangent's window is not checked again), the data's cotangent written into zeros."""
    from tests.conftest import check_golden

    d = pb.differentiate(minibatch_residuals, argnums=(0, 1))
    y = np.arange(12.0)
    check_golden("grad_minibatch.py.txt", d.source(np.ones(3), X, y, 1))
    w_bar, X_bar = d.grad(np.ones(3), X, y, 1)
    r = X[4:8] @ np.ones(3) - y[4:8]
    np.testing.assert_allclose(w_bar, 2 * X[4:8].T @ r, rtol=1e-12)
    np.testing.assert_allclose(X_bar, np.pad(2 * np.outer(r, np.ones(3)), ((4, 4), (0, 0))), rtol=1e-12)
