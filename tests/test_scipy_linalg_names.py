"""SciPy's linear-algebra functions held by a name bound before the trace (``from scipy.linalg
import solve_sylvester``: the decorated closure SciPy's ``_apply_over_batch`` returns), and
``scipy.linalg.solve_banded``: values against SciPy, gradients against finite differences."""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.linalg import solve_sylvester

import pullback as pb
from pullback.testing import check_grads

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
