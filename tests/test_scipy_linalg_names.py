"""SciPy's linear-algebra functions held by a name bound before the trace (``from scipy.linalg
import solve_sylvester``: the decorated closure SciPy's ``_apply_over_batch`` returns), and
``scipy.linalg.solve_banded``: values against SciPy, gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from scipy.linalg import solve_banded, solve_sylvester

import pullback as pb
from pullback import linalg as pla
from pullback.errors import TracingError
from pullback.testing import check_grads
from tests.primitives.banded_cases import banded, dense

RNG = np.random.default_rng(5)


def test_decorated_scipy_function_bound_before_the_trace():
    a, b, q = RNG.standard_normal((3, 3)), RNG.standard_normal((2, 2)), RNG.standard_normal((3, 2))
    code = solve_sylvester.__code__
    assert code.co_freevars  # a closure: its code is swapped for one with the same free variables
    np.testing.assert_allclose(pb.jit(lambda a, b, q: solve_sylvester(a, b, q))(a, b, q),
                               scipy.linalg.solve_sylvester(a, b, q), rtol=1e-10)
    check_grads(lambda a, b, q: solve_sylvester(a, b, q), [a, b, q], order=2)
    assert solve_sylvester.__code__ is code  # put back when the trace ends
    x = solve_sylvester(a, b, q)  # and SciPy's own again
    np.testing.assert_allclose(a @ x + x @ b, q, atol=1e-12)


def _band(lower: int, upper: int, n: int, dtype="float64"):
    ab = RNG.standard_normal((lower + upper + 1, n))
    if np.dtype(dtype).kind == "c":
        ab = ab + 1j * RNG.standard_normal(ab.shape)
    ab[upper] += 6.0  # a dominant diagonal
    return ab.astype(dtype)


@pytest.mark.parametrize("l_and_u", [(1, 1), (1, 2), (0, 0), (2, 0), (0, 3)])
def test_solve_banded(l_and_u):
    ab = _band(*l_and_u, 5)
    for b in (RNG.standard_normal(5), RNG.standard_normal((5, 3))):
        np.testing.assert_allclose(pb.jit(lambda ab, b: scipy.linalg.solve_banded(l_and_u, ab, b))(ab, b),
                                   scipy.linalg.solve_banded(l_and_u, ab, b), rtol=1e-12)
        check_grads(lambda ab, b: solve_banded(l_and_u, ab, b), [ab, b], order=2)  # the name bound before the trace


def test_solve_banded_gradient_is_the_band_of_the_outer_product():
    ab, b, g = _band(1, 2, 6), RNG.standard_normal(6), RNG.standard_normal(6)
    ab_bar, b_bar = pb.grad(lambda ab, b: solve_banded((1, 2), ab, b) @ g, argnums=(0, 1))(ab, b)
    a = dense(ab, 1, 2)
    z, x = np.linalg.solve(a.T, g), np.linalg.solve(a, b)
    np.testing.assert_allclose(b_bar, z, rtol=1e-12)
    np.testing.assert_allclose(ab_bar, banded(-np.outer(z, x), 1, 2), rtol=1e-12, atol=1e-15)  # zero corners


def test_solve_banded_dtypes_and_sizes():
    for dtype in ("float32", "complex128", "complex64"):
        ab, b = _band(1, 1, 4, dtype), RNG.standard_normal(4).astype(dtype)
        got, want = pb.jit(lambda ab, b: scipy.linalg.solve_banded((1, 1), ab, b))(ab, b), solve_banded((1, 1), ab, b)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5 if got.dtype.itemsize <= 8 else 1e-12)
    check_grads(lambda ab, b: solve_banded((2, 1), ab, b), [_band(2, 1, 4, "complex128"), RNG.standard_normal(4) + 0j])
    one = np.array([[0.5], [2.0], [0.25]])  # n = 1: SciPy divides by ab[u, 0]
    np.testing.assert_allclose(pb.jit(lambda ab, b: solve_banded((1, 1), ab, b))(one, np.array([3.0])), [1.5])
    check_grads(lambda ab, b: solve_banded((1, 1), ab, b), [one, np.array([3.0])])
    assert pb.jit(lambda ab, b: solve_banded((1, 1), ab, b))(np.ones((3, 0)), np.ones((0, 2))).shape == (0, 2)
    ab3 = _band(1, 1, 3)  # concrete arrays: pullback.linalg runs a compiled program
    np.testing.assert_allclose(pla.solve_banded((1, 1), ab3, np.ones(3)), solve_banded((1, 1), ab3, np.ones(3)),
                               rtol=1e-12)


def test_solve_banded_refusals():
    with pytest.raises(TracingError, match=r"l\+u\+1 \(3\) does not equal ab.shape\[0\] \(4\)"):
        pb.jit(lambda ab, b: solve_banded((1, 1), ab, b))(np.ones((4, 3)), np.ones(3))
    with pytest.raises(TracingError, match="batch axes are not supported"):
        pb.jit(lambda ab, b: solve_banded((1, 1), ab, b))(np.ones((2, 3, 3)), np.ones((2, 3)))
    with pytest.raises(NotImplementedError, match="no CuPy emitter"):
        pb.source(lambda ab, b: solve_banded((1, 1), ab, b), _band(1, 1, 3), np.ones(3), device="cuda")
