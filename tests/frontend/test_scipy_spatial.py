"""``scipy.spatial.distance.cdist`` and ``pdist`` by their SciPy names (pullback/frontend/scipy/spatial.py):
SciPy's values for every metric pullback has, derivatives against finite differences, a zero derivative
at zero Euclidean distance, and the refusals."""

import numpy as np
import pytest
import scipy.spatial.distance as ssd
from pullback.testing import check_grads
from scipy.spatial.distance import cdist

import pullback as pb

RNG = np.random.default_rng(11)
A, B = RNG.standard_normal((4, 3)), RNG.standard_normal((5, 3))
METRICS = ["euclidean", "sqeuclidean", "cityblock", "chebyshev", "cosine", "minkowski", "cb", "sqe"]


def distances(a, b):
    out = []
    for m in METRICS:
        out += [cdist(a, b, m), ssd.pdist(a, metric=m)]
    return tuple(out) + (cdist(a, b, "minkowski", p=3), ssd.pdist(b, "minkowski", p=1.5),
                         cdist(a[:1], b, "minkowski", p=1))


def test_values_and_derivatives():
    for ours, want in zip(pb.jit(distances)(A, B), distances(A, B)):
        assert ours.shape == want.shape and ours.dtype == want.dtype
        np.testing.assert_allclose(ours, want, rtol=1e-12, atol=1e-14)
    check_grads(distances, [A, B])


def test_euclidean_distance_to_itself_has_zero_derivative():
    """cdist(X, X) is 0 on its diagonal: the derivative there is 0, not sqrt's NaN at 0."""
    g = pb.grad(lambda a: np.sum(cdist(a, a) ** 2))(A)
    np.testing.assert_allclose(g, 4 * (len(A) * A - A.sum(0)), rtol=1e-12)
    assert np.isfinite(pb.grad(lambda a: np.sum(cdist(a, a)))(A)).all()


def test_refusals():
    with pytest.raises(pb.TracingError, match="metric='jaccard'"):
        pb.jit(lambda a: cdist(a, a, "jaccard"))(A)
    with pytest.raises(pb.TracingError, match="same number of columns"):
        pb.jit(lambda a: cdist(a, a[:, :2]))(A)
    with pytest.raises(pb.TracingError, match="with w"):
        pb.jit(lambda a: ssd.pdist(a, "euclidean", w=np.ones(3)))(A)
