"""np.fft on traced arrays: gradients of real losses against finite differences (to second
order) and closed forms, round trips, shifts, empty and size-1 axes, NumPy's errors, and how
the transforms print."""

from __future__ import annotations

import re

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb
from pullback.errors import TracingError
from pullback.ir.core import ShapeError, Var, shape_rules
from pullback.ir.types import ArrayType
from pullback.primitives.fft import FftKind, FftNorm, fft_p

fft = np.fft


def _real(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _complex(rng, *shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


LOSSES = [
    ("power-spectrum", lambda x: np.sum(np.abs(fft.rfft(x, n=9, axis=0)) ** 2 * np.arange(1.0, 6.0)[:, None]), "f"),
    ("fft-window", lambda x: np.sum(np.real(fft.fft(x, n=6, norm="ortho")) * np.cos(x).sum()), "f"),
    ("ifft2-complex", lambda z: np.sum(np.abs(fft.ifft2(z * z, s=(5, 3))) ** 2), "c"),
    ("irfft-complex", lambda z: np.sum(np.sin(fft.irfft(z, n=7, norm="forward"))), "c"),
    ("rfftn-irfftn", lambda x: np.sum(fft.irfftn(fft.rfftn(x, axes=(1, 0)) ** 2, s=(4, 6), axes=(0, 1)) ** 2), "f"),
    ("hfft-ihfft", lambda z: np.sum(fft.hfft(z, n=5) ** 2) + np.sum(np.abs(fft.ihfft(z.real, norm="ortho")) ** 2), "c"),
    ("fftn-repeated-axes", lambda z: np.sum(np.abs(fft.fftn(z, s=(3, 6), axes=(0, 0), norm="forward")) ** 2), "c"),
]


@pytest.mark.parametrize("name, loss, kind", LOSSES, ids=[c[0] for c in LOSSES])
def test_gradients_of_real_losses_against_finite_differences(name, loss, kind, rng):
    x = _real(rng, 4, 5) if kind == "f" else _complex(rng, 4, 5)
    check_grads(loss, [x], order=2)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_parseval_gradient_is_the_closed_form(norm, rng):
    """sum |fft(z)|^2 = c sum |z|^2 with c = n, 1, 1/n: the gradient is 2 c z (dL = Re <G, dz>)."""
    z = _complex(rng, 3, 6)
    c = {None: 6.0, "ortho": 1.0, "forward": 1 / 6}[norm]
    grad = pb.grad(lambda z: np.sum(np.abs(fft.fft(z, norm=norm)) ** 2))(z)
    np.testing.assert_allclose(grad, 2 * c * z, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [5, 6])
def test_irfft_of_rfft_is_the_identity_and_so_is_its_gradient(n, rng):
    x, c = _real(rng, 3, n), _real(rng, 3, n)
    round_trip = pb.jit(lambda x: fft.irfft(fft.rfft(x), n=x.shape[-1]))
    np.testing.assert_allclose(round_trip(x), x, atol=1e-12)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(c * fft.irfft(fft.rfft(x), n=n)))(x), c, atol=1e-12)


def test_rfft_gradient_counts_each_interior_bin_twice(rng):
    """L = sum Re(rfft(x)) = sum_k sum_j x_j cos(2 pi jk / n) over the half spectrum: dL/dx_j is
    that sum of cosines (bins 0 and n/2 once each, not doubled)."""
    n = 6
    x = _real(rng, n)
    j, k = np.arange(n)[:, None], np.arange(n // 2 + 1)[None, :]
    want = np.cos(2 * np.pi * j * k / n).sum(axis=1)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(np.real(fft.rfft(x))))(x), want, atol=1e-12)


def test_single_precision_is_kept(rng):
    x = _real(rng, 4, 6, dtype=np.float32)
    f = pb.jit(lambda x: (fft.fft(x), fft.rfft(x, n=5), fft.irfft(fft.rfft(x)), fft.fftshift(x)))
    assert [o.dtype for o in f(x)] == [np.complex64, np.complex64, np.float32, np.float32]
    mirrored = np.array([1, 2, 2, 1], np.float32)  # Parseval over a half spectrum: interior bins count twice
    grad = pb.grad(lambda x: np.sum(np.abs(fft.rfft2(x, norm="ortho")) ** 2 * mirrored))(x)
    assert grad.dtype == np.float32
    np.testing.assert_allclose(grad, 2 * x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [fft.fftshift, fft.ifftshift])
@pytest.mark.parametrize("shape, axes", [((4, 5), None), ((4, 5), 1), ((3, 6, 2), (0, 1)), ((5,), (0, 0))])
def test_shifts_values_and_gradients(fn, shape, axes, rng):
    x, c = _real(rng, *shape), _real(rng, *shape)
    np.testing.assert_array_equal(pb.jit(lambda x: fn(x, axes=axes))(x), fn(x, axes=axes))
    inverse = fft.ifftshift if fn is fft.fftshift else fft.fftshift
    grad = pb.grad(lambda x: np.sum(c * fn(x, axes=axes)))(x)
    np.testing.assert_array_equal(grad, inverse(c, axes=axes))  # a permutation's adjoint is its inverse


@pytest.mark.parametrize("f", [
    lambda x: fft.fft(x, axis=1),  # empty batch axis
    lambda x: fft.rfft(x, n=4, axis=0),  # an empty transformed axis, padded
    lambda x: fft.irfftn(fft.fftn(x, s=(2, 3), axes=(0, 1))),
    lambda x: fft.fftshift(x),
], ids=["batch", "padded", "n-d", "shift"])
def test_empty_axes(f, rng):
    x = np.zeros((0, 3))
    out = pb.jit(f)(x)
    want = f(x)
    assert out.shape == want.shape and out.dtype == want.dtype
    np.testing.assert_allclose(out, want)
    grad = pb.grad(lambda x: np.sum(np.abs(f(x)) ** 2))(x)
    assert grad.shape == x.shape


def test_size_one_axes(rng):
    z = _complex(rng, 1, 3)
    f = lambda z: (fft.fft(z, axis=0), fft.irfft(z, n=1, axis=0), fft.rfft(z.real, axis=0), fft.fftshift(z, axes=0))  # noqa: E731
    for o, w in zip(pb.jit(f)(z), f(z)):
        np.testing.assert_allclose(o, w, atol=1e-14)
    check_grads(lambda z: np.sum(np.abs(fft.fft2(z, s=(1, 4))) ** 2) + np.sum(fft.irfft(z, n=1, axis=0)), [z], order=2)


def test_empty_axes_tuple_returns_the_operand(rng):
    x = _real(rng, 2, 3)
    out = pb.jit(lambda x: fft.fftn(x, axes=()) + 1)(x)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, x + 1)


def test_fftfreq_builds_constants(rng):
    x = _real(rng, 8)
    f = lambda x, d: np.sum(x * fft.fftfreq(8, d=d)) + np.sum(x[:5] * fft.rfftfreq(8, d=d))  # noqa: E731
    np.testing.assert_allclose(pb.jit(f, static_argnums=1)(x, 0.25), f(x, 0.25))
    np.testing.assert_allclose(pb.grad(lambda x: f(x, 0.25))(x),
                               fft.fftfreq(8, 0.25) + np.r_[fft.rfftfreq(8, 0.25)[:5], np.zeros(3)])


@pytest.mark.parametrize("f, message", [
    (lambda x: fft.fft(x, n=0), r"np.fft.fft: Invalid number of FFT data points \(0\)"),
    (lambda x: fft.rfft(x, n=-2), r"np.fft.rfft: Invalid number of FFT data points \(-2\)"),
    (lambda x: fft.irfft(x[:, :1]), r"np.fft.irfft: Invalid number of FFT data points \(0\)"),
    (lambda x: fft.fftn(x, s=(0, 3), axes=(0, 1)), r"np.fft.fftn: Invalid number of FFT data points \(0\)"),
    (lambda x: fft.ifft(x[:0], axis=0), r"Invalid number of FFT data points \(0\)"),
    (lambda x: fft.fft(x, n=2.0), "cannot be interpreted as an integer"),
    (lambda x: fft.fft(x, norm="unitary"), "Invalid norm value unitary"),
    (lambda x: fft.fftn(x, s=(2, 2), axes=(0,)), "Shape and axes have different lengths"),
    (lambda x: fft.rfft(x * 1j), "real input expected"),
    (lambda x: fft.fft(x, axis=2), "axis 2 is out of bounds"),
    (lambda x: fft.fft(x, out=np.empty((2, 3), complex)), "out= is not supported"),
], ids=["n=0", "n<0", "irfft-one-bin", "s=0", "empty-axis", "float-n", "norm", "s-axes", "rfft-complex", "axis",
        "out"])
def test_numpy_errors(f, message):
    x = np.ones((2, 3))
    with pytest.raises(TracingError, match=message):
        pb.jit(f)(x)


def test_errors_name_the_callers_line():
    def f(x):
        return fft.fft(x, n=0)

    with pytest.raises(TracingError, match=r"test_fft\.py:\d+"):
        pb.jit(f)(np.ones(3))


def test_deprecated_s_without_axes_warns_as_numpy(rng):
    x = _real(rng, 3, 4)
    with pytest.warns(DeprecationWarning):
        out = pb.jit(lambda x: fft.fftn(x, s=(2, 5)))(x)
    with pytest.warns(DeprecationWarning):
        np.testing.assert_allclose(out, fft.fftn(x, s=(2, 5)))


def test_printed_calls_are_numpys(rng):
    x = _real(rng, 4, 6)

    def f(x):
        a = fft.fft(x, n=8, axis=0, norm="ortho")
        b = fft.rfft2(x)
        c = fft.ifftn(a, axes=(1, 0))
        return b, c, fft.irfft(b, n=6)

    src = pb.jit(f).source(x)
    assert re.search(r"np\.fft\.fft\(\w+, n=8, axis=0, norm='ortho'\)", src)
    assert "np.fft.rfft2(x)" in src
    assert re.search(r"np\.fft\.ifftn\(\w+, axes=\(1, 0\)\)", src) and re.search(r"np\.fft\.irfft\(\w+\)", src)
    grad_src = pb.differentiate(lambda x: np.sum(np.abs(fft.rfft(x, n=5)) ** 2)).source(x)
    assert "np.fft.irfft(" in grad_src and "n=5" in grad_src
    assert "cp.fft.rfft2(x)" in pb.jit(f).source(x, device="cuda")


@pytest.mark.parametrize("kind, axes, lengths, dtype, message", [
    ("FORWARD", (1,), (4,), np.float64, "needs a complex64 or complex128 operand"),
    ("REAL_FORWARD", (1,), (4,), np.complex128, "needs a float32 or float64 operand"),
    ("FORWARD", (1, 1), (4, 4), np.complex128, "distinct axes"),
    ("FORWARD", (2,), (4,), np.complex128, "distinct axes"),
    ("INVERSE", (), (), np.complex128, "distinct axes"),
    ("REAL_INVERSE", (0,), (0,), np.complex128, "positive int"),
    ("REAL_INVERSE", (0, 1), (3,), np.complex128, "positive int"),
])
def test_shape_rule_rejects_bad_params(kind, axes, lengths, dtype, message):
    x = Var(ArrayType((3, 4), np.dtype(dtype)))
    with pytest.raises(ShapeError, match=message):
        shape_rules[fft_p](x, kind=FftKind[kind], axes=axes, lengths=lengths, norm=FftNorm.ORTHO)


@pytest.mark.parametrize("kind, dtype, want", [
    ("FORWARD", np.complex64, ((5, 7), np.complex64)), ("INVERSE", np.complex128, ((5, 7), np.complex128)),
    ("REAL_FORWARD", np.float32, ((5, 4), np.complex64)), ("REAL_INVERSE", np.complex64, ((5, 7), np.float32)),
])
def test_shape_rule_types(kind, dtype, want):
    out = shape_rules[fft_p](Var(ArrayType((3, 4), np.dtype(dtype))), kind=FftKind[kind], axes=(0, 1),
                             lengths=(5, 7), norm=FftNorm.BACKWARD)
    assert (out.shape, out.dtype) == want


def smoothed_energy(x, h):
    spectrum = np.fft.rfft(x, n=8, axis=0)
    smooth = np.fft.irfft(spectrum * h, n=8, axis=0, norm="ortho")
    return np.sum(smooth**2)


def test_gradient_source_golden():
    """How a transform's transpose prints: the conjugate-direction call with the swapped norm,
    the Hermitian weights as one product, and the padding undone by a slice."""
    from tests.conftest import check_golden

    src = pb.differentiate(smoothed_energy).source(np.ones((6, 3)), np.ones((5, 1)))
    check_golden("grad_fft.py.txt", src)
