"""``scipy.signal.convolve`` and ``correlate`` on traced arrays, by their SciPy names (SciPy
converts its arguments with ``np.asarray``, so while a trace runs these stand in for SciPy's:
``construct.implements_attribute``), lowered to the ``convolve``/``correlate`` primitives, which
print as SciPy's own calls with the same ``mode`` and ``method``.

As SciPy: 0-d operands multiply; operands of other ranks must have equal ranks; the result has
the operands' common dtype (Python scalars are arrays here, as ``np.asarray`` makes them).
Unlike SciPy, which raises for most empty operands, an empty operand gives zeros (of ``in1``'s
shape for ``'same'``, else empty along the operands' empty axes): no primitive sees one.

NumPy's 1-d ``np.convolve`` and ``np.correlate`` are the same primitives (NumPy's modes are SciPy's
once the operands are ordered as below)."""

from __future__ import annotations

import numpy as np
import scipy.signal

from pullback.errors import ArgumentError
from pullback.frontend import numpy as core
from pullback.frontend.construct import implements_attribute
from pullback.ir.tracer import bind, located
from pullback.ir.types import canonical_dtype
from pullback.primitives import lax
from pullback.primitives.signal import ConvMethod, ConvMode, convolve_p, correlate_p, full_shape


def _lowered(name: str, in1, in2, mode, method):
    public = f"scipy.signal.{name}"
    try:
        mode, method = ConvMode(mode), ConvMethod(method)
    except ValueError:
        raise ArgumentError(located(f"{public}: mode must be 'full', 'valid' or 'same' and method 'auto', 'direct' "
                                   f"or 'fft', got {mode!r} and {method!r}")) from None
    a, b = core._lift(in1), core._lift(in2)
    dtype = canonical_dtype(np.result_type(a.dtype, b.dtype))
    a, b = core.astype(a, dtype), core.astype(b, dtype)
    if a.ndim == b.ndim == 0:
        return a * (np.conj(b) if name == "correlate" else b)
    if a.ndim != b.ndim:
        raise ArgumentError(located(f"{public}: in1 and in2 should have the same dimensionality, got shapes "
                                   f"{a.shape} and {b.shape}"))
    if a.size == 0 or b.size == 0:
        if mode is ConvMode.SAME:
            shape = a.shape
        else:  # empty along the operands' empty axes
            lengths = full_shape(a.shape, b.shape) if mode is ConvMode.FULL else [abs(m - n) + 1 for m, n in
                                                                                   zip(a.shape, b.shape)]
            shape = tuple(k if m and n else 0 for k, m, n in zip(lengths, a.shape, b.shape))
        return lax.full(shape, 0, dtype)
    return bind(convolve_p if name == "convolve" else correlate_p, a, b, mode=mode, method=method)


@implements_attribute(scipy.signal, "convolve", "scipy.signal.convolve")
def convolve(in1, in2, mode="full", method="auto"):
    """``sum_k in1[k] in2[n - k]`` over every axis; the mode keeps a window of the full output."""
    return _lowered("convolve", in1, in2, mode, method)


@implements_attribute(scipy.signal, "correlate", "scipy.signal.correlate")
def correlate(in1, in2, mode="full", method="auto"):
    """``convolve(in1, flip(conj(in2)), mode)``, SciPy's correlation in every mode."""
    return _lowered("correlate", in1, in2, mode, method)


def _vectors(name: str, a, v):
    a, v = (core.reshape(core._lift(x), (-1,)) if np.ndim(x) == 0 else core._lift(x) for x in (a, v))
    if a.ndim != 1 or v.ndim != 1:
        raise ArgumentError(located(f"np.{name}: object too deep for desired array (1-d operands only)"))
    if a.shape[0] == 0 or v.shape[0] == 0:
        raise ArgumentError(located(f"np.{name}: {'a' if a.shape[0] == 0 else 'v'} cannot be empty"))
    return a, v


@core.implements(np.convolve)
def np_convolve(a, v, mode="full"):
    """NumPy's 1-d convolution: SciPy's of the longer operand by the shorter, the same in every mode."""
    a, v = _vectors("convolve", a, v)
    if v.shape[0] > a.shape[0]:
        a, v = v, a
    return _lowered("convolve", a, v, mode, "auto")


@core.implements(np.correlate)
def np_correlate(a, v, mode="valid"):
    """NumPy's 1-d correlation ``sum_n a[n + k] conj(v[n])``: SciPy's, which is NumPy's but for a shorter
    ``a`` in ``'same'`` mode, where NumPy correlates the other way round, reversed and conjugated."""
    a, v = _vectors("correlate", a, v)
    if a.shape[0] >= v.shape[0]:
        return _lowered("correlate", a, v, mode, "auto")
    return core.conj(core.getitem(_lowered("correlate", v, a, mode, "auto"), slice(None, None, -1)))
