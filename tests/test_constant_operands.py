"""Every rule with any operand constant (issue 26): a rule may see, for each operand, a tracer of an
input, a tracer of a constant (a float array the function reads from its scope, ``Builder.read``), a
NumPy array made inside the function, or a Python scalar. Each test is named for what it checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import pullback as pb
from pullback import linalg as pla
from pullback.testing import check_jvp, check_vjp

A_INT = np.array([[3, 1], [1, 2]])  # an integer array read from the scope stays NumPy's while tracing


@pytest.mark.parametrize("solve", [np.linalg.solve, scipy.linalg.solve, pla.solve], ids=["numpy", "scipy", "pullback"])
@pytest.mark.parametrize("make", ["captured-int", "made"])
def test_solve_with_a_constant_matrix(solve, make):
    """pullback.linalg's compositions trace their helpers even where every operand is constant (the LU
    of a constant matrix was computed eagerly, its ``info`` a Python int that broadcasting refused)."""
    def loss(b):
        a = A_INT if make == "captured-int" else np.array([[3.0, 1.0], [1.0, 2.0]])
        return np.sum(solve(a, b) ** 2)

    b = np.array([1.0, -2.0])
    x = np.linalg.solve(A_INT, b)
    np.testing.assert_allclose(pb.jit(loss)(b), np.sum(x ** 2))
    np.testing.assert_allclose(pb.grad(loss)(b), np.linalg.solve(A_INT.T, 2 * x))  # A^{-T} (2 x)


def test_an_integer_matrix_changed_in_place_is_seen():
    """The constant matrix is the program's, read at every call, not factorised once while tracing."""
    a = np.array([[3, 1], [1, 2]])
    solve = pb.jit(lambda b: np.linalg.solve(a, b))
    b = np.array([1.0, -2.0])
    solve(b)
    a[0, 0] = 5
    np.testing.assert_allclose(solve(b), np.linalg.solve(a, b))


def test_a_traced_value_reaches_pullback_wherever_numpy_does_not_look():
    """``np.full_like(a, v)`` dispatches on ``a`` alone: a constant ``a`` with a traced fill value is still
    pullback's (NumPy's own full_like copied the tracer into an array)."""
    def f(v):
        return np.sum(np.full_like(np.ones(3), v) * np.arange(3.0))

    assert pb.jit(f)(2.0) == 6.0
    assert pb.grad(f)(2.0) == 3.0


def test_constant_arrays_where_numpy_takes_scalars():
    """A 0-d (or broadcastable) array made in the function fills like a scalar (``full_like``) and is
    prepended like one (``diff``), as a traced one is."""
    def f(x):
        return np.full_like(x, np.array([1.0, 2.0])) * x + np.diff(x, prepend=np.array(0.5))[:, None]

    x = np.array([[1.0, 3.0], [2.0, 0.5]])
    np.testing.assert_allclose(pb.jit(f)(x), f(x))
    check_jvp(f, [x])


def test_blas_scales_traced_or_arrays():
    """``alpha`` of gemm and syrk may be traced (never compared with 1 in Python) or an array, outside a
    trace too (arrays passed by keyword are the compiled program's arguments, not its cache key)."""
    a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    np.testing.assert_allclose(pla.gemm(a, b, alpha=np.float64(0.5)), 0.5 * a @ b)
    np.testing.assert_allclose(pla.syrk(a, alpha=np.array(2.0)), 2 * a @ a.T)
    check_jvp(lambda s: pla.gemm(a, b, alpha=s) + pla.syrk(a, alpha=s), [np.float64(0.5)])
    check_vjp(lambda s: pla.gemm(a, b, alpha=s) + pla.syrk(a, alpha=s), [np.float64(0.5)])


W = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("index", [
    lambda x: np.arange(5.0)[np.argsort(x)],
    lambda x: np.ones((3, 5))[:, np.argmax(x)],
    lambda x: W[:, np.argmax(x[:4])],
    lambda x: W[np.argmax(x[:3]), 1:],
], ids=["made", "made-sliced", "captured-sliced", "captured-row"])
def test_constants_at_traced_positions(index):
    """A constant indexed by traced positions, a slice in the key or not, is pullback's gather of the
    constant (NumPy asked the tracer for an integer)."""
    x = np.array([0.3, 2.0, 1.0, 0.5, 0.1])
    np.testing.assert_array_equal(pb.jit(lambda x: index(x) * x[0])(x), index(x) * x[0])
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(index(x) * x[0]))(x)[0], np.sum(index(x)))


def test_captured_array_advanced_indexed_beside_a_slice_is_read_at_every_call():
    """``W[:, [1, 2]]`` is advanced indexing, the program's (as ``W[[1, 2]]`` is), not frozen when traced."""
    w = np.arange(6.0).reshape(2, 3)
    f = pb.jit(lambda x: w[:, [2, 0]] * x)
    np.testing.assert_array_equal(f(1.0), w[:, [2, 0]])
    w[0, 2] = 10.0
    np.testing.assert_array_equal(f(1.0), w[:, [2, 0]])
