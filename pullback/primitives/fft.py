"""Discrete Fourier transforms: one primitive, ``fft``, for the four kinds NumPy has
(complex forward and inverse, real-input forward, real-output inverse), over one or more
distinct axes, with NumPy's ``n``/``s`` (the operand is zero-padded or truncated to the
transform length along each axis first) and ``norm``.

Every kind is linear (the real kinds real-linear), so the JVP applies the transform to the
tangent, and the transpose is the transform in the conjugate direction with the swapped
normalisation, plus the Hermitian weighting of the half spectrum for the real kinds and
truncation where the forward map padded (padding where it truncated)."""

from __future__ import annotations

import enum

import numpy as np

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType, canonical_dtype


class FftKind(enum.Enum):
    """``FORWARD``/``INVERSE``: complex to complex (``np.fft.fft``/``ifft``); ``REAL_FORWARD``:
    real to the half spectrum (``rfft``), ``REAL_INVERSE``: half spectrum to real (``irfft``).
    A real kind's last axis is the one whose spectrum is halved."""

    FORWARD = "fft"
    INVERSE = "ifft"
    REAL_FORWARD = "rfft"
    REAL_INVERSE = "irfft"

    @property
    def real(self) -> bool:
        return self in (FftKind.REAL_FORWARD, FftKind.REAL_INVERSE)

    @property
    def conjugate(self) -> FftKind:
        """The transform in the other direction."""
        return _CONJUGATE[self]


_CONJUGATE = {FftKind.FORWARD: FftKind.INVERSE, FftKind.INVERSE: FftKind.FORWARD,
              FftKind.REAL_FORWARD: FftKind.REAL_INVERSE, FftKind.REAL_INVERSE: FftKind.REAL_FORWARD}


class FftNorm(enum.Enum):
    """NumPy's ``norm``: which direction is scaled by ``1/N`` (``ortho``: both by ``1/sqrt(N)``)."""

    BACKWARD = "backward"
    ORTHO = "ortho"
    FORWARD = "forward"

    @property
    def swapped(self) -> FftNorm:
        """The normalisation of the adjoint: the unscaled direction's adjoint is unscaled."""
        return {FftNorm.BACKWARD: FftNorm.FORWARD, FftNorm.FORWARD: FftNorm.BACKWARD}.get(self, self)


fft_p = Primitive("fft")


def half_spectrum(n: int) -> int:
    """Bins a real signal of length ``n`` keeps: ``n // 2 + 1``."""
    return n // 2 + 1


def _fft(x, *, kind: FftKind, axes: tuple[int, ...], lengths: tuple[int, ...], norm: FftNorm):
    """The transform over ``axes`` of lengths ``lengths`` (``s``); the operand's axes are first
    padded with zeros or truncated to ``lengths`` (to the half spectrum ``lengths[-1] // 2 + 1``
    on the last axis for ``REAL_INVERSE``), as NumPy does."""
    if not isinstance(kind, FftKind) or not isinstance(norm, FftNorm):
        raise ShapeError(f"fft needs an FftKind and an FftNorm, got {kind!r} and {norm!r}")
    ndim = x.type.ndim
    if not axes or len(set(axes)) != len(axes) or any(not isinstance(a, int) or not 0 <= a < ndim for a in axes):
        raise ShapeError(f"fft axes {axes} must be distinct axes of a rank-{ndim} operand")
    if len(lengths) != len(axes) or any(not isinstance(n, int) or n < 1 for n in lengths):
        raise ShapeError(f"fft lengths {lengths} must be one positive int per axis {axes}")
    want = (np.float32, np.float64) if kind is FftKind.REAL_FORWARD else (np.complex64, np.complex128)
    if x.dtype not in want:
        raise ShapeError(f"{kind.value} needs a {' or '.join(np.dtype(d).name for d in want)} operand, "
                         f"got {x.dtype.name}")
    shape = list(x.shape)
    for a, n in zip(axes, lengths):
        shape[a] = n
    if kind is FftKind.REAL_FORWARD:
        shape[axes[-1]] = half_spectrum(lengths[-1])
        dtype = canonical_dtype(np.result_type(x.dtype, 1j))
    elif kind is FftKind.REAL_INVERSE:
        dtype = canonical_dtype(np.finfo(x.dtype).dtype)
    else:
        dtype = x.dtype
    return ArrayType(tuple(shape), dtype)


shape_rules[fft_p] = _fft


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import deflinear  # noqa: E402
from pullback.ad.transpose import transpose_rules  # noqa: E402
from pullback.primitives import lax  # noqa: E402

deflinear(fft_p)  # every kind is (real-)linear: the tangent's transform is the transform's tangent


def _scale_interior(x, axis: int, n: int, factor: float):
    """The half spectrum of a length-``n`` real signal along ``axis`` with its interior bins
    ``1 .. (n - 1) // 2`` scaled by ``factor``: the bins whose mirror images ``n - k`` it
    leaves out (bin 0, and bin ``n / 2`` for even ``n``, are their own mirror images). One
    product with a vector of weights: a pass over ``x`` that can run in place, where slicing
    out the interior and concatenating it back would copy ``x`` twice."""
    k = (n - 1) // 2
    if k == 0:
        return x
    m = x.shape[axis]
    weights = [lax.full((1,), 1, x.dtype), lax.full((k,), factor, x.dtype)]
    if 1 + k < m:
        weights.append(lax.full((m - 1 - k,), 1, x.dtype))
    return lax.mul(x, lax.broadcast_in_dim(lax.concatenate(weights, 0), x.shape, (axis,)))


def _fit(x, shape: tuple[int, ...]):
    """``x`` truncated (where longer) and zero-padded (where shorter) to ``shape``, axis by axis:
    the transpose of a transform's padding/truncation to its lengths."""
    if any(a > b for a, b in zip(x.shape, shape)):
        x = lax.slice(x, (0,) * x.ndim, tuple(min(a, b) for a, b in zip(x.shape, shape)), (1,) * x.ndim)
    if x.shape != tuple(shape):
        x = lax.pad(x, shape, (0,) * x.ndim, x.shape, (1,) * x.ndim)
    return x


def _fft_t(ct, x, *, kind: FftKind, axes, lengths, norm: FftNorm):
    """The adjoint under ``<X, Y> = Re tr(X^H Y)``, as one transform in the conjugate direction.

    - Complex kinds: the DFT matrix ``F`` (entries ``exp(-2 pi i jk / n)``) has adjoint
      ``F^H = conj(F) = n ifft``, the *unscaled* inverse transform. So ``fft`` with
      ``norm="backward"`` (unscaled) transposes to ``ifft`` with ``norm="forward"`` (unscaled
      inverse), ``"forward"`` (``F / n``) to ``"backward"`` (``conj(F) / n``), and ``"ortho"``
      (unitary) to ``"ortho"``; over several axes ``F`` is a tensor product, the same holds.
    - ``rfft`` (``R F`` on real ``x``, ``R`` keeping bins ``0 .. n // 2``) is real-linear:
      ``<R F x, c> = x^T Re(F^H R^T c)``, the real part of the inverse transform of ``c``
      zero-padded to the full spectrum. ``irfft`` computes exactly that real part from a half
      spectrum, but counts each interior bin twice (once for its missing mirror image), so the
      adjoint is ``irfft`` (swapped norm) of ``c`` with its interior bins halved.
    - ``irfft(z) = (1/n) Re sum_k w_k z_k exp(2 pi i jk / n)`` with ``w_k = 2`` on interior
      bins and 1 on bin 0 (and ``n / 2``), so ``<irfft(z), y> = Re sum_k conj(w_k rfft(y)_k / n) z_k``:
      the adjoint is ``rfft`` (swapped norm) of ``y`` with its interior bins doubled. On one
      axis the imaginary parts of bins 0 and ``n / 2``, which ``irfft`` ignores, get the zero
      gradient they should: ``rfft`` of a real signal is real there. Over several axes the
      other axes are complex transforms, which commute with the weighting along the last axis
      (``irfftn`` is ``irfft`` of ``ifftn`` over the others; its adjoint composes the two).
    - The forward map first pads (truncates) ``x`` to the transform lengths; its transpose
      truncates (pads) the cotangent back to ``x``'s shape.
    """
    last, n = axes[-1], lengths[-1]
    if kind is FftKind.REAL_FORWARD:
        ct = _scale_interior(ct, last, n, 0.5)
    out = lax.fft(ct, kind.conjugate, axes, lengths, norm.swapped)
    if kind is FftKind.REAL_INVERSE:
        out = _scale_interior(out, last, n, 2.0)
    return (_fit(out, x.shape),)


transpose_rules[fft_p] = _fft_t


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import unary_axes  # noqa: E402

unary_axes(fft_p, "axes", removed=False)
