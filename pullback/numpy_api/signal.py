"""``scipy.signal.convolve`` and ``correlate`` on traced arrays, by their SciPy names (SciPy
converts its arguments with ``np.asarray``, so while a trace runs these stand in for SciPy's:
``construct.implements_attribute``), lowered to the ``convolve``/``correlate`` primitives, which
print as SciPy's own calls with the same ``mode`` and ``method``.

As SciPy: 0-d operands multiply; operands of other ranks must have equal ranks; the result has
the operands' common dtype (Python scalars are arrays here, as ``np.asarray`` makes them).
Unlike SciPy, which raises for most empty operands, an empty operand gives zeros (of ``in1``'s
shape for ``'same'``, else empty along the operands' empty axes): no primitive sees one."""

from __future__ import annotations

import numpy as np
import scipy.signal

from pullback import lax
from pullback import numpy_api as core
from pullback.errors import ArgumentError
from pullback.ir.tracer import bind, located
from pullback.ir.types import canonical_dtype
from pullback.numpy_api.construct import implements_attribute
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
