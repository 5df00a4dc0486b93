"""eigh of a non-symmetric matrix: NumPy reads the lower triangle; pullback's value and its
derivative are both those of that function."""

import numpy as np
import pullback.linalg as pla
import pytest
from pullback.testing import check_grads

import pullback as pb

rng = np.random.default_rng(3)


def nonsymmetric(n, complex_=False, batch=()):
    a = rng.standard_normal((*batch, n, n))
    if complex_:
        a = a + 1j * rng.standard_normal((*batch, n, n))
    return a + 3 * np.triu(np.ones((n, n)), 1)  # an upper triangle far from the lower one


@pytest.mark.parametrize("complex_", [False, True])
def test_value_is_numpys(complex_):
    A = nonsymmetric(4, complex_)
    w, v = pb.jit(np.linalg.eigh)(A)
    w_np, v_np = np.linalg.eigh(A)
    np.testing.assert_allclose(w, w_np, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.abs(v.conj().T @ v_np), np.eye(4), atol=1e-10)  # same vectors up to phase


@pytest.mark.parametrize("complex_, batch", [(False, ()), (True, ()), (False, (2,))])
def test_derivatives_match_finite_differences(complex_, batch):
    A = nonsymmetric(3, complex_, batch)
    check_grads(pla.eigh, (A,), order=2)  # pullback.linalg runs concrete calls with its sign convention
    check_grads(lambda A: np.linalg.eigh(A)[0], (A,), order=1)  # against NumPy itself


def test_gradient_lies_in_the_lower_triangle():
    A = nonsymmetric(4)
    c = rng.standard_normal(4)
    g = pb.grad(lambda A: np.sum(np.linalg.eigh(A)[0] * c))(A)
    assert np.all(np.triu(g, 1) == 0)
    # dw_k = v_k^T dM v_k with M = tril(A) + tril(A, -1)^T
    _, v = np.linalg.eigh(A)
    s = (v * c) @ v.T
    np.testing.assert_allclose(g, np.tril(s) + np.tril(s.T, -1), rtol=1e-10, atol=1e-12)
