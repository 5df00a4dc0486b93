"""``scipy.signal.convolve``/``correlate`` by their SciPy names on traced arrays
(pullback/frontend/scipy/signal.py): SciPy's values for ranks, dtypes and modes, gradients against
finite differences, the printed SciPy (and CuPy) calls, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
from pullback.testing import check_grads
from scipy.signal import correlate

import pullback as pb
from pullback.errors import TracingError

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("mode", ("full", "same", "valid"))
def test_values_and_gradients(mode):
    a, b = RNG.standard_normal((6, 7)), RNG.standard_normal((4, 2))
    for f in (scipy.signal.convolve, correlate):  # correlate: a name bound before the trace
        def forward(a, b, f=f):
            return f(a, b, mode)

        def backward(a, b, f=f):  # in2 longer: 'same' keeps in1's shape, 'valid' swaps
            return f(b, a, mode=mode)

        np.testing.assert_allclose(pb.jit(forward)(a, b), f(a, b, mode), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(pb.jit(backward)(a, b), f(b, a, mode), rtol=1e-12, atol=1e-14)
        check_grads(forward, [a, b], order=2)
        check_grads(backward, [a, b])


def test_dtypes_and_methods():
    a, b = RNG.standard_normal(9), RNG.standard_normal(4)
    z = a + 1j * RNG.standard_normal(9)
    for args in ((a.astype(np.float32), b.astype(np.float32)), (z, b), (z.astype(np.complex64), b.astype(np.float32))):
        for f in (scipy.signal.convolve, scipy.signal.correlate):
            for method in ("auto", "direct", "fft"):
                got = pb.jit(lambda a, b, f=f, method=method: f(a, b, "same", method))(*args)
                want = f(*args, "same", method)
                assert got.dtype == want.dtype
                np.testing.assert_allclose(got, want, rtol=1e-5 if want.dtype.itemsize <= 8 else 1e-12)
    check_grads(lambda z, b: scipy.signal.correlate(z, b), [z, b], order=2)
    check_grads(lambda z: scipy.signal.correlate(a, z, "valid"), [z[:4]])


def test_scalars_size_one_and_empty():
    f = scipy.signal.convolve
    np.testing.assert_allclose(pb.jit(lambda x: f(x, 3.0))(np.float64(2.0)), 6.0)
    np.testing.assert_allclose(pb.jit(lambda x: scipy.signal.correlate(x, 1j))(np.complex128(2.0)), -2j)
    x1 = np.array([2.5])
    for mode in ("full", "same", "valid"):
        np.testing.assert_allclose(pb.jit(lambda x, mode=mode: f(x, x1, mode))(x1), f(x1, x1, mode))
    assert pb.jit(lambda x: f(x, np.ones((2, 2))))(np.zeros((0, 3))).shape == (0, 4)  # SciPy's shape too
    assert pb.jit(lambda x: f(x, np.ones(2), "same"))(np.zeros(0)).shape == (0,)
    np.testing.assert_array_equal(pb.grad(lambda x: np.sum(f(x, np.ones((2, 2)))))(np.zeros((0, 3))), np.zeros((0, 3)))


def test_printed_calls():
    a, b = RNG.standard_normal(5), RNG.standard_normal(3)
    src = pb.source(pb.grad(lambda a, b: np.sum(scipy.signal.convolve(a, b, "valid", "fft") ** 2)), a, b)
    assert "scipy.signal.convolve(a, b, mode='valid', method='fft')" in src.replace("arg0", "a").replace("arg1", "b")
    assert "scipy.signal.correlate(" in src and "method='fft'" in src
    cuda = pb.source(pb.grad(lambda a, b: np.sum(scipy.signal.correlate(a, b) ** 2)), a, b, device="cuda")
    code = [line for line in cuda.splitlines() if not line.lstrip().startswith("#")]
    assert "cupyx.scipy.signal.correlate(" in cuda and "cupyx.scipy.signal.convolve(" in cuda
    assert not any("scipy.signal." in line.replace("cupyx.scipy.signal.", "") for line in code)


def test_refusals():
    with pytest.raises(TracingError, match="same dimensionality"):
        pb.jit(lambda a: scipy.signal.convolve(a, np.ones(2)))(np.ones((2, 2)))
    with pytest.raises(TracingError, match="at least as large as the other along every axis"):
        pb.jit(lambda a: scipy.signal.convolve(a, np.ones((2, 4)), "valid"))(np.ones((3, 3)))
    with pytest.raises(TracingError, match="mode must be"):
        pb.jit(lambda a: scipy.signal.convolve(a, np.ones(2), "circular"))(np.ones(3))


def _numpy_1d(a, v, c):
    out = []
    for mode in ("full", "same", "valid"):
        out += [np.convolve(a, v, mode), np.convolve(v, a, mode), np.correlate(a, v, mode), np.correlate(v, a, mode),
                np.correlate(c, a, mode), np.convolve(c, 2.0, mode)]
    return tuple(out) + (np.convolve(a, v), np.correlate(a, v))


def test_numpys_convolve_and_correlate():
    """NumPy's 1-d functions, every mode, either operand longer, complex: NumPy's values, and the
    derivatives of the primitives they lower to."""
    a, v = RNG.standard_normal(5), RNG.standard_normal(3)
    c = RNG.standard_normal(4) + 1j * RNG.standard_normal(4)
    for ours, want in zip(pb.jit(_numpy_1d)(a, v, c), _numpy_1d(a, v, c)):
        assert ours.shape == want.shape and ours.dtype == want.dtype
        np.testing.assert_allclose(ours, want, rtol=1e-12, atol=1e-14)
    check_grads(_numpy_1d, [a, v, c])
    with pytest.raises(TracingError, match="v cannot be empty"):
        pb.jit(lambda a: np.convolve(a, np.ones(0)))(a)
