"""scipy.linalg.sqrtm's result dtype depends on the values (complex for a real matrix with negative
real eigenvalues): a traced program follows the arguments it is first called with."""

import numpy as np
import pytest
import scipy.linalg as sl
from pullback.testing import check_grads

import pullback as pb

RNG = np.random.default_rng(3)


def _indefinite():
    a = RNG.standard_normal((3, 3))
    a = (a + a.T) / 2
    assert np.linalg.eigvalsh(a).min() < 0
    return a


def test_real_matrix_with_negative_eigenvalues_gives_scipys_complex_root():
    a = _indefinite()
    out = pb.jit(sl.sqrtm)(a)
    assert out.dtype == np.complex128
    np.testing.assert_allclose(out, sl.sqrtm(a), rtol=1e-10, atol=1e-12)
    check_grads(lambda a: np.sum(np.abs(sl.sqrtm(a)) ** 2), (a,), order=2)


def test_positive_definite_matrix_keeps_a_real_root():
    a = RNG.standard_normal((3, 3))
    spd = a @ a.T + np.eye(3)
    out = pb.jit(sl.sqrtm)(spd)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, sl.sqrtm(spd), rtol=1e-12)


def test_a_program_traced_for_a_real_root_refuses_a_matrix_whose_root_is_complex():
    a = RNG.standard_normal((3, 3))
    f = pb.jit(sl.sqrtm)
    f(a @ a.T + np.eye(3))
    with pytest.raises(pb.LinAlgError, match="complex"):
        f(_indefinite())
