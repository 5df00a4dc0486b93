"""N-d convolution and correlation with SciPy's semantics (``scipy.signal.convolve`` and
``correlate``): ``convolve(a, b)[n] = sum_k a[k] b[n - k]`` over the full output, of which the
mode keeps a window; ``correlate(a, b)`` is ``convolve(a, flip(conj(b)))`` in every mode.

Both are bilinear (correlation is conjugate-linear in ``b``, which is real-linear: transposable
all the same). Every transpose is one correlation or convolution in ``'valid'`` mode of the
cotangent, zero-padded back to the full output where the mode cropped it, with the other
operand (see ``_transpose``)."""

from __future__ import annotations

import enum

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType


class ConvMode(enum.Enum):
    """SciPy's ``mode``: the whole output, a window of ``a``'s shape centred on it, or the
    outputs computed without zero padding (``|len(a) - len(b)| + 1`` per axis; one operand must
    be at least as large as the other along every axis)."""

    FULL = "full"
    SAME = "same"
    VALID = "valid"


class ConvMethod(enum.Enum):
    """SciPy's ``method``: a sum per output, FFTs, or SciPy's estimate of the faster one."""

    AUTO = "auto"
    DIRECT = "direct"
    FFT = "fft"


convolve_p = Primitive("convolve")
correlate_p = Primitive("correlate")


def full_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(m + n - 1 for m, n in zip(a, b))


def window(mode: ConvMode, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Where the mode's output starts in the full one, per axis (SciPy's ``_centered`` for
    ``'same'``; ``'valid'`` starts where the shorter operand first lies inside the longer)."""
    if mode is ConvMode.FULL:
        return (0,) * len(a)
    if mode is ConvMode.SAME:
        return tuple((n - 1) // 2 for n in b)
    return tuple(min(m, n) - 1 for m, n in zip(a, b))


def _shape(a, b, *, mode: ConvMode, method: ConvMethod):
    if not isinstance(mode, ConvMode) or not isinstance(method, ConvMethod):
        raise ShapeError(f"needs a ConvMode and a ConvMethod, got {mode!r} and {method!r}")
    if a.dtype != b.dtype or a.dtype.kind not in "ifc":
        raise ShapeError(f"operands need one numeric dtype, got {a.dtype.name} and {b.dtype.name}")
    if a.type.ndim != b.type.ndim or a.type.ndim == 0:
        raise ShapeError(f"operands need the same rank (at least 1), got shapes {a.shape} and {b.shape}")
    if 0 in a.shape or 0 in b.shape:
        raise ShapeError(f"empty operand of shape {a.shape if 0 in a.shape else b.shape}")
    if mode is ConvMode.FULL:
        shape = full_shape(a.shape, b.shape)
    elif mode is ConvMode.SAME:
        shape = a.shape
    else:
        if not (all(m >= n for m, n in zip(a.shape, b.shape)) or all(m <= n for m, n in zip(a.shape, b.shape))):
            raise ShapeError(f"for 'valid' mode one operand must be at least as large as the other along every "
                             f"axis, got shapes {a.shape} and {b.shape}")
        shape = tuple(abs(m - n) + 1 for m, n in zip(a.shape, b.shape))
    return ArrayType(shape, a.dtype)


shape_rules[convolve_p] = _shape
shape_rules[correlate_p] = _shape


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import defjvp  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.primitives import lax  # noqa: E402

# bilinear: d(a * b) = da * b + a * db
defjvp(convolve_p, lambda t, a, b, ans, *, mode, method: lax.convolve(t, b, mode, method),
       lambda t, a, b, ans, *, mode, method: lax.convolve(a, t, mode, method))
defjvp(correlate_p, lambda t, a, b, ans, *, mode, method: lax.correlate(t, b, mode, method),
       lambda t, a, b, ans, *, mode, method: lax.correlate(a, t, mode, method))


def _full_cotangent(ct, a_shape, b_shape, mode: ConvMode):
    """The cotangent of the full output: ``ct`` where the mode's window kept it, zeros elsewhere."""
    if mode is ConvMode.FULL:
        return ct
    start = window(mode, a_shape, b_shape)
    return lax.pad(ct, full_shape(a_shape, b_shape), start, tuple(s + n for s, n in zip(start, ct.shape)),
                   (1,) * ct.ndim)


def _transpose(prim: Primitive):
    """The adjoints under ``<X, Y> = Re sum conj(X) Y``, with ``C`` the full output's cotangent:
    ``convolve``: ``a_bar[k] = sum_n C[n] conj(b[n - k])``, ``correlate(C, b, 'valid')``, and
    ``b_bar = correlate(C, a, 'valid')`` alike; ``correlate`` (``convolve(a, flip(conj(b)))``):
    ``a_bar = convolve(C, b, 'valid')`` and, the flip and conjugation transposing to themselves,
    ``b_bar = flip(conj(correlate(C, a, 'valid'))) = correlate(a, C, 'valid')``. In ``'valid'``
    mode with ``a`` the larger operand, ``C`` is ``ct`` zero-padded by ``len(b) - 1`` on both
    sides: ``a_bar`` is then the full correlation (convolution) of ``ct`` itself, unpadded."""
    def rule(ct, a, b, *, mode: ConvMode, method: ConvMethod):
        other = lax.correlate if prim is convolve_p else lax.convolve
        if isinstance(a, Linear) and isinstance(b, Linear):
            raise TypeError(f"{prim.name} of two values that both depend on the inputs is not linear")
        if isinstance(a, Linear):
            if mode is ConvMode.VALID and all(m >= n for m, n in zip(a.shape, b.shape)):
                return other(ct, b, ConvMode.FULL, method), None
            return other(_full_cotangent(ct, a.shape, b.shape, mode), b, ConvMode.VALID, method), None
        c = _full_cotangent(ct, a.shape, b.shape, mode)
        if prim is convolve_p:
            return None, lax.correlate(c, a, ConvMode.VALID, method)
        return None, lax.correlate(a, c, ConvMode.VALID, method)

    return rule


transpose_rules[convolve_p] = _transpose(convolve_p)
transpose_rules[correlate_p] = _transpose(correlate_p)


# --- batching: per batch element (see ``batch.per_element``) --------------------------------------

from pullback.ad.batch import per_element  # noqa: E402

for _p in (convolve_p, correlate_p):
    per_element(_p)

