"""``np.fft`` on traced arrays: ``fft ifft rfft irfft hfft ihfft fft2 ifft2 rfft2 irfft2 fftn
ifftn rfftn irfftn`` with NumPy's ``n``/``s``, ``axis``/``axes`` and ``norm``, lowered to the
``fft`` primitive (one per call where the axes are distinct, one per axis where NumPy's loop
revisits an axis); ``fftshift``/``ifftshift`` as rolls (slices and a concatenation).
``fftfreq``/``rfftfreq`` need nothing here: they build constants."""

from __future__ import annotations

import operator
import warnings

import numpy as np

from pullback.errors import ArgumentError, ArgumentTypeError
from pullback.frontend import numpy as core
from pullback.ir.tracer import bind, located
from pullback.ir.types import canonical_dtype
from pullback.primitives.fft import FftKind, FftNorm, fft_p

_NORMS = {None: FftNorm.BACKWARD, "backward": FftNorm.BACKWARD, "ortho": FftNorm.ORTHO, "forward": FftNorm.FORWARD}


def _fail(name: str, message: str, error: type[Exception] = ArgumentError):
    """NumPy's ValueError (or ``error``: its TypeError, IndexError) for arguments it refuses."""
    raise error(located(f"np.fft.{name}: {message}"))


def _norm(name: str, norm) -> FftNorm:
    if not isinstance(norm, str | None) or norm not in _NORMS:
        _fail(name, f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')
    return _NORMS[norm]


def _length(name: str, n) -> int:
    if isinstance(n, bool):  # an int to Python, not to NumPy's FFT
        _fail(name, "an integer is required", ArgumentTypeError)
    try:
        n = operator.index(n)
    except TypeError:
        _fail(name, f"'{type(n).__name__}' object cannot be interpreted as an integer", ArgumentTypeError)
    if n < 1:
        _fail(name, f"Invalid number of FFT data points ({n}) specified.")
    return n


def _no_out(name: str, out) -> None:
    if out is not None:
        core.unsupported(f"np.fft.{name} with out=")


def _operand(name: str, a, kind: FftKind):
    """``a`` in the dtype the transform reads: complex for the complex kinds and ``irfft``
    (real input promoted, as NumPy's ``result_type(a, 1j)``), its real counterpart for ``rfft``."""
    a = core._lift(a)
    if kind is FftKind.REAL_FORWARD:
        if a.dtype.kind == "c":
            _fail(name, f"real input expected, got {a.dtype.name} (NumPy's rfft has no complex loop)",
                  ArgumentTypeError)
    spectrum = canonical_dtype(np.result_type(a.dtype, 1j))  # float16 and integers as NumPy: complex64, complex128
    return core.astype(a, np.finfo(spectrum).dtype if kind is FftKind.REAL_FORWARD else spectrum)


def _transform(name: str, a, kind: FftKind, axes: list[int], lengths: list[int], norm: FftNorm):
    a = core._lift(a)
    out = bind(fft_p, _operand(name, a, kind), kind=kind, axes=tuple(axes), lengths=tuple(lengths), norm=norm)
    if kind is FftKind.REAL_INVERSE and len(axes) == 1:
        # NumPy's irfft returns result_type(a.real, 1.0), so a float16 signal gives float16 (over several
        # axes its last transform reads the others' complex64, giving float32, as the primitive does)
        real = np.result_type(np.empty(0, a.dtype).real.dtype, 1.0)
        out = core.astype(out, real) if real.itemsize < out.dtype.itemsize else out
    return out


def _one(name: str, a, n, axis, norm, kind: FftKind, out=None):
    """A 1-d transform along ``axis``, NumPy's ``_raw_fft``."""
    _no_out(name, out)
    a = core._lift(a)
    norm = _norm(name, norm)
    ax = core._axis(axis, a.ndim)
    if n is None:
        n = (a.shape[ax] - 1) * 2 if kind is FftKind.REAL_INVERSE else a.shape[ax]
    return _transform(name, a, kind, [ax], [_length(name, n)], norm)


@core.implements(np.fft.fft)
def fft(a, n=None, axis=-1, norm=None, out=None):
    return _one("fft", a, n, axis, norm, FftKind.FORWARD, out)


@core.implements(np.fft.ifft)
def ifft(a, n=None, axis=-1, norm=None, out=None):
    return _one("ifft", a, n, axis, norm, FftKind.INVERSE, out)


@core.implements(np.fft.rfft)
def rfft(a, n=None, axis=-1, norm=None, out=None):
    return _one("rfft", a, n, axis, norm, FftKind.REAL_FORWARD, out)


@core.implements(np.fft.irfft)
def irfft(a, n=None, axis=-1, norm=None, out=None):
    return _one("irfft", a, n, axis, norm, FftKind.REAL_INVERSE, out)


@core.implements(np.fft.hfft)
def hfft(a, n=None, axis=-1, norm=None, out=None):
    """The real spectrum of a Hermitian-symmetric signal: ``irfft(conj(a))`` with the norm swapped."""
    _no_out("hfft", out)
    return _one("hfft", core.conj(core._lift(a)), n, axis, _norm("hfft", norm).swapped.value, FftKind.REAL_INVERSE)


@core.implements(np.fft.ihfft)
def ihfft(a, n=None, axis=-1, norm=None, out=None):
    """``conj(rfft(a))`` with the norm swapped."""
    _no_out("ihfft", out)
    return core.conj(_one("ihfft", a, n, axis, _norm("ihfft", norm).swapped.value, FftKind.REAL_FORWARD))


def _cook(name: str, a, s, axes, invreal: bool) -> tuple[list[int], list[int]]:
    """NumPy's ``_cook_nd_args``: ``s`` defaults to the operand's shape along ``axes`` (for the
    real inverse, ``2 (m - 1)`` on the last axis), ``axes`` to the last ``len(s)`` axes; -1 or
    None in ``s`` take the 1-d transform's default."""
    shapeless = s is None
    if axes is not None:
        axes = [core._axis(ax, a.ndim) for ax in axes]
    if shapeless:
        s = list(a.shape) if axes is None else [a.shape[ax] for ax in axes]
    s = list(s)
    if axes is None:
        if not shapeless:
            warnings.warn("`axes` should not be `None` if `s` is not `None` (Deprecated in NumPy 2.0)",
                          DeprecationWarning, stacklevel=4)
        axes = [core._axis(ax, a.ndim) for ax in range(-len(s), 0)]
    if len(s) != len(axes):
        _fail(name, "Shape and axes have different lengths.")
    if not axes:
        return s, axes
    if invreal and shapeless:
        s[-1] = (a.shape[axes[-1]] - 1) * 2
    if any(n is None for n in s):
        warnings.warn("Passing an array containing `None` values to `s` is deprecated in NumPy 2.0",
                      DeprecationWarning, stacklevel=4)
    last = len(s) - 1
    s = [(a.shape[ax] - 1) * 2 if n is None and invreal and i == last else a.shape[ax] if n is None or n == -1 else n
         for i, (n, ax) in enumerate(zip(s, axes))]
    return [_length(name, n) for n in s], axes


def _many(name: str, a, s, axes, norm, kind: FftKind, out=None):
    """An n-d transform: NumPy applies 1-d transforms axis by axis (the last axis first; for
    ``irfftn`` the real one last); over distinct axes that is one transform of them all."""
    _no_out(name, out)
    a = core._lift(a)
    norm = _norm(name, norm)
    s, axes = _cook(name, a, s, axes, kind is FftKind.REAL_INVERSE)
    if not axes:
        if kind.real:
            _fail(name, "a real transform needs at least one axis")
        return a
    if len(set(axes)) == len(axes):
        return _transform(name, a, kind, axes, s, norm)
    complex_kind = FftKind.INVERSE if kind is FftKind.REAL_INVERSE else (
        FftKind.FORWARD if kind is FftKind.REAL_FORWARD else kind)
    if kind is FftKind.REAL_INVERSE:  # the complex inverses in order, then the real one
        for ax, n in zip(axes[:-1], s[:-1]):
            a = _transform(name, a, complex_kind, [ax], [n], norm)
        return _transform(name, a, kind, axes[-1:], s[-1:], norm)
    a = _transform(name, a, kind, axes[-1:], s[-1:], norm)  # the real (or last) axis first
    for ax, n in zip(reversed(axes[:-1]), reversed(s[:-1])):
        a = _transform(name, a, complex_kind, [ax], [n], norm)
    return a


@core.implements(np.fft.fftn)
def fftn(a, s=None, axes=None, norm=None, out=None):
    return _many("fftn", a, s, axes, norm, FftKind.FORWARD, out)


@core.implements(np.fft.ifftn)
def ifftn(a, s=None, axes=None, norm=None, out=None):
    return _many("ifftn", a, s, axes, norm, FftKind.INVERSE, out)


@core.implements(np.fft.rfftn)
def rfftn(a, s=None, axes=None, norm=None, out=None):
    return _many("rfftn", a, s, axes, norm, FftKind.REAL_FORWARD, out)


@core.implements(np.fft.irfftn)
def irfftn(a, s=None, axes=None, norm=None, out=None):
    return _many("irfftn", a, s, axes, norm, FftKind.REAL_INVERSE, out)


@core.implements(np.fft.fft2)
def fft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return _many("fft2", a, s, axes, norm, FftKind.FORWARD, out)


@core.implements(np.fft.ifft2)
def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return _many("ifft2", a, s, axes, norm, FftKind.INVERSE, out)


@core.implements(np.fft.rfft2)
def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return _many("rfft2", a, s, axes, norm, FftKind.REAL_FORWARD, out)


@core.implements(np.fft.irfft2)
def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return _many("irfft2", a, s, axes, norm, FftKind.REAL_INVERSE, out)


def _roll(x, shift: int, axis: int):
    """``np.roll`` along one axis: the last ``shift`` entries moved to the front."""
    n = x.shape[axis]
    k = shift % n if n else 0
    if k == 0:
        return x
    head = (slice(None),) * axis
    tail, rest = core.getitem(x, head + (slice(n - k, None),)), core.getitem(x, head + (slice(None, n - k),))
    return core.concatenate([tail, rest], axis=axis)


def _shift(x, axes, sign: int):
    axes = range(x.ndim) if axes is None else (axes,) if isinstance(axes, int | np.integer) else axes
    for ax in axes:
        ax = core._axis(ax, x.ndim)
        x = _roll(x, sign * (x.shape[ax] // 2), ax)
    return x


@core.implements(np.fft.fftshift)
def fftshift(x, axes=None):
    """The zero frequency moved to the centre: a roll by ``n // 2`` along each axis."""
    return _shift(x, axes, 1)


@core.implements(np.fft.ifftshift)
def ifftshift(x, axes=None):
    """The inverse of ``fftshift``: a roll by ``-(n // 2)``."""
    return _shift(x, axes, -1)
