"""Captured state is read at run time: work computed from arrays the function reads from its scope
is the program's, re-run at every call after in-place changes, as eager NumPy would."""

import numpy as np
import pytest
import scipy.special

import pullback as pb

S = np.array([[2.0, 0.5], [0.5, 1.0]])
W = np.array([1.0, 2.0, 3.0])


def _loss(x):
    return (np.sum(np.linalg.inv(S) @ x[:2]) + np.sum(np.exp(W) * x) + np.sum(W / W.sum() * x)
            + np.sum(W[[2, 1, 0]] * x) + scipy.special.logsumexp(W) * x[0] + np.sum((W * 2 - W ** 2) * x)
            + (-W.T[:2]) @ x[:2])


def _eager_grad(x):
    return (np.r_[np.linalg.inv(S).sum(0), 0.0] + np.exp(W) + W / W.sum() + W[[2, 1, 0]]
            + np.r_[scipy.special.logsumexp(W), 0.0, 0.0] + W * 2 - W ** 2 + np.r_[-W[:2], 0.0])


@pytest.mark.parametrize("form", ["function form", "held object"])
def test_work_on_captured_arrays_is_rerun_after_in_place_changes(form):
    """The issue's repro: ``np.linalg.inv(S)``, ``np.exp(W)``, ``W / W.sum()``, ``W[[2, 1, 0]]`` were
    computed once while tracing and kept; so were ``W * 2`` and ``-W.T[:2]``."""
    x = np.array([1.0, 2.0, 3.0])
    saved = S.copy(), W.copy()
    grad = pb.grad(_loss) if form == "held object" else None
    try:
        for step in range(4):
            g = grad(x) if grad is not None else pb.grad(_loss)(x)
            np.testing.assert_allclose(g, _eager_grad(x), rtol=1e-12)
            S[0, 0] += 1.0
            W[step % 3] *= 1.5
    finally:
        S[...], W[...] = saved


def test_an_identity_made_lazily_and_kept_is_the_users_array():
    """``if self.W is None: self.W = np.eye(3)`` inside the traced method: the identity is the
    model's from then on, and changes to it are seen; one made and dropped prints as ``np.eye``."""
    class Model:
        def __init__(self):
            self.W = None

        def loss(self, x):
            if self.W is None:
                self.W = np.eye(3)
            return np.sum(self.W @ x) + np.sum(np.eye(3) @ x)

    m, x = Model(), np.array([1.0, 2.0, 3.0])
    grad = pb.grad(m.loss)
    np.testing.assert_allclose(grad(x), [2.0, 2.0, 2.0])
    m.W[0, 1] = 3.0
    np.testing.assert_allclose(grad(x), m.W.sum(0) + 1.0)
    src = pb.differentiate(m.loss).source(x)
    assert "np.eye(3)" in src


def test_captured_arrays_in_helpers_and_methods():
    """A helper the traced function calls, and a bound method's ``self.W``, read their arrays anew too."""
    class Layer:
        def __init__(self):
            self.W = np.array([[1.0, 2.0], [3.0, 4.0]])

        def __call__(self, x):
            return np.tanh(np.linalg.solve(self.W, x))

    layer = Layer()

    def helper(x):
        return np.sum(layer(x) * np.exp(W[:2]))

    f = pb.jit(helper)
    x = np.array([0.3, -0.2])
    saved = W.copy()
    try:
        for _ in range(3):
            np.testing.assert_allclose(f(x), np.sum(np.tanh(np.linalg.solve(layer.W, x)) * np.exp(W[:2])),
                                       rtol=1e-12)
            layer.W[0, 0] += 1.0
            W[0] += 0.5
    finally:
        W[...] = saved


def test_python_numbers_taken_from_captured_arrays_still_drive_python():
    """Basic indexing of a captured array is NumPy's (a view, or a number Python may branch on)."""
    sizes = np.array([2, 3])

    def f(x):
        n = sizes[0]
        return np.sum(x[:n]) if n > 1 else np.sum(x)

    assert pb.jit(f)(np.arange(4.0)) == 1.0


def test_closures_of_one_code_each_read_their_own_arrays():
    """Two closures made by one ``def`` capture different arrays: each one's are read at every call
    (the scope is noted per function, not per code object)."""
    def make(a):
        return lambda x: np.sum(np.exp(a) * x)

    A, B = np.array([0.0, 1.0]), np.array([2.0, 3.0])
    f, g = make(A), make(B)
    h = pb.jit(lambda x: f(x) + g(x))
    x = np.ones(2)
    assert h(x) == pytest.approx(np.sum(np.exp(A)) + np.sum(np.exp(B)), rel=1e-14)
    B[0] = -1.0
    assert h(x) == pytest.approx(np.sum(np.exp(A)) + np.sum(np.exp(B)), rel=1e-14)
