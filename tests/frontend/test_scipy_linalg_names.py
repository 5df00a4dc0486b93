"""SciPy's linear-algebra functions held by a name bound before the trace (``from scipy.linalg
import solve_sylvester``: the decorated closure SciPy's ``_apply_over_batch`` returns), and
``scipy.linalg.solve_banded``: values against SciPy, gradients against finite differences."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.linalg
from pullback.testing import check_grads
from scipy.linalg import solve_banded, solve_sylvester

import pullback as pb
from pullback import linalg as pla
from pullback.errors import TracingError
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


def _spd(n, rng=RNG):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


_sl = scipy.linalg
# (name, function of the traced arguments written with SciPy's names and defaults, arguments)
SCIPY_SPELLINGS = [
    # a + a.T: finite differences then move along symmetric matrices, where Cholesky is defined
    ("cholesky upper (default)", lambda a: _sl.cholesky(a + a.T), [_spd(4)]),
    ("cholesky lower", lambda a: _sl.cholesky(a + a.T, lower=True, check_finite=False), [_spd(4)]),
    ("cho_factor + cho_solve", lambda a, b: _sl.cho_solve(_sl.cho_factor(a + a.T), b),
     [_spd(4), RNG.standard_normal(4)]),
    ("cho_solve lower", lambda a, b: _sl.cho_solve(_sl.cho_factor(a + a.T, lower=True), b),
     [_spd(3), RNG.standard_normal((3, 2))]),
    ("solve_triangular", lambda a, b: _sl.solve_triangular(a, b, lower=True, trans="T"),
     [np.tril(RNG.standard_normal((4, 4))) + 4 * np.eye(4), RNG.standard_normal(4)]),
    ("solve", lambda a, b: _sl.solve(a, b), [RNG.standard_normal((4, 4)) + 4 * np.eye(4), RNG.standard_normal(4)]),
    ("solve pos", lambda a, b: _sl.solve(a + a.T, b, assume_a="pos"), [_spd(4), RNG.standard_normal((4, 2))]),
    ("solve sym transposed", lambda a, b: _sl.solve(a, b, assume_a="sym", transposed=True),
     [RNG.standard_normal((3, 3)) + 3 * np.eye(3), RNG.standard_normal(3)]),
    ("solve her lower", lambda a, b: _sl.solve(a, b, assume_a="her", lower=True),
     [RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3)) + 3 * np.eye(3), RNG.standard_normal(3)]),
    ("solve lower triangular", lambda a, b: _sl.solve(a, b, assume_a="lower triangular"),
     [np.tril(RNG.standard_normal((3, 3))) + 3 * np.eye(3), RNG.standard_normal(3)]),
    ("solve diagonal", lambda a, b: _sl.solve(a, b, assume_a="diagonal"),
     [np.diag(RNG.uniform(1, 2, 3)), RNG.standard_normal((3, 2))]),
    ("inv", lambda a: _sl.inv(a), [RNG.standard_normal((3, 3)) + 3 * np.eye(3)]),
    ("det", lambda a: _sl.det(a), [RNG.standard_normal((3, 3))]),
    ("lu_factor + lu_solve", lambda a, b: _sl.lu_solve(_sl.lu_factor(a), b, trans=1),
     [RNG.standard_normal((4, 4)) + 4 * np.eye(4), RNG.standard_normal(4)]),
    ("lu", lambda a: _sl.lu(a)[1:], [RNG.standard_normal((4, 3))]),
    ("lu permute_l", lambda a: _sl.lu(a, permute_l=True), [RNG.standard_normal((3, 3))]),
    ("eigh values", lambda a: _sl.eigh(a, eigvals_only=True), [_spd(3)]),
    ("eigvalsh upper", lambda a: _sl.eigvalsh(a, lower=False), [_spd(3)]),
    ("svd square (full)", lambda a: _sl.svd(a)[1], [RNG.standard_normal((3, 3))]),
    ("svdvals", lambda a: _sl.svdvals(a), [RNG.standard_normal((4, 3))]),
    ("qr economic", lambda a: _sl.qr(a, mode="economic"), [RNG.standard_normal((4, 3))]),
    ("qr full of a wide matrix", lambda a: _sl.qr(a)[1], [RNG.standard_normal((3, 4))]),
    ("qr r", lambda a: _sl.qr(a, mode="r")[0], [RNG.standard_normal((4, 3))]),
    ("qr r wide", lambda a: _sl.qr(a, mode="r")[0], [RNG.standard_normal((2, 3))]),
    ("norm", lambda a: _sl.norm(a, "fro"), [RNG.standard_normal((3, 4))]),
    ("lstsq", lambda a, b: _sl.lstsq(a, b)[0], [RNG.standard_normal((5, 3)), RNG.standard_normal(5)]),
    ("pinv", lambda a: _sl.pinv(a), [RNG.standard_normal((4, 3))]),
]


@pytest.mark.parametrize("name, fn, args", SCIPY_SPELLINGS, ids=[c[0] for c in SCIPY_SPELLINGS])
def test_scipy_linalg_names_trace_with_scipys_defaults(name, fn, args):
    """Written with scipy.linalg's names and defaults, a function traces: the value is SciPy's,
    and the derivatives agree with finite differences."""
    got, want = pb.jit(fn)(*args), fn(*args)
    for g, w in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want))):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11)
    check_grads(fn, args, order=1)


def _solve_as(a, b, assume_a, lower):
    return scipy.linalg.solve(a, b, assume_a=assume_a, lower=lower)


def test_scipy_linalg_solve_reads_the_triangle_scipy_reads():
    """A non-symmetric matrix: 'pos', 'sym' and 'her' see the triangle ``lower`` names (the
    derivative takes the symmetric convention of pullback.linalg.cholesky, so only values here)."""
    a = _spd(4) + np.triu(RNG.standard_normal((4, 4)), 1)
    b = RNG.standard_normal(4)
    for kind in ("pos", "sym", "her"):
        for lower in (False, True):
            fn = functools.partial(_solve_as, assume_a=kind, lower=lower)
            np.testing.assert_allclose(pb.jit(fn)(a, b), fn(a, b), rtol=1e-10)


def test_scipy_linalg_names_refuse_what_is_not_differentiable():
    with pytest.raises(TracingError, match="mode='economic'"):
        pb.jit(lambda a: scipy.linalg.qr(a))(RNG.standard_normal((4, 3)))
    with pytest.raises(TracingError, match="generalised problem"):
        pb.jit(lambda a: scipy.linalg.eigh(a, a))(_spd(3))
    with pytest.raises(TracingError, match="full_matrices"):
        pb.jit(lambda a: scipy.linalg.svd(a))(RNG.standard_normal((4, 3)))
