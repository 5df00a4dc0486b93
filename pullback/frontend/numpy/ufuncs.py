"""NumPy's elementwise math beyond the core: rounding, remainders, inverse trigonometric
and hyperbolic functions, logarithms in other bases, NaN-aware extrema, ``clip``, and
NumPy's lexicographic order on complex numbers for ``maximum``/``minimum``/``max``/``min``.

Each function a person calls by name lowers to the primitive of that name, so it prints
as the same call; those that read the same as a composition (``deg2rad`` is a product,
``clip`` with one bound a ``maximum`` or ``minimum``) are compositions."""

from __future__ import annotations

import math
import operator

import numpy as np

from pullback.errors import TracingError
from pullback.frontend.numpy import (
    UFUNCS,
    _float_unary,
    _inexact,
    _keep,
    add,
    astype,
    elementwise,
    equal,
    greater,
    greater_equal,
    imag,
    implements,
    implements_ufunc,
    less,
    less_equal,
    multiply,
    numpy_checks,
    ones_like,
    real,
    result_dtype,
    standin,
    ufunc_options,
    unsupported,
    where,
    zeros_like,
)
from pullback.frontend.numpy import maximum as _real_maximum
from pullback.frontend.numpy import minimum as _real_minimum
from pullback.ir.tracer import PYTHON_SCALARS, bind, located
from pullback.ir.types import is_complex, is_inexact
from pullback.primitives import elementwise as ew
from pullback.primitives import reductions as red


def _float(x):
    """``x`` in its inexact dtype (integers become float64, float16 stays float16)."""
    return astype(x, _inexact(x)) if type(x) not in PYTHON_SCALARS else float(x)


def _float_binary(prim):
    def call(a, b):
        d = result_dtype(a, b)
        return elementwise(prim, a, b, dtype=d if is_inexact(d) else np.dtype(np.float64))

    return call


for _u, _p in [
    (np.log10, ew.log10_p), (np.log2, ew.log2_p), (np.exp2, ew.exp2_p), (np.arcsin, ew.arcsin_p),
    (np.arccos, ew.arccos_p), (np.arctan, ew.arctan_p), (np.arcsinh, ew.arcsinh_p), (np.arccosh, ew.arccosh_p),
    (np.arctanh, ew.arctanh_p), (np.cbrt, ew.cbrt_p), (np.rint, ew.rint_p),
]:
    implements_ufunc(_u)(_float_unary(_p))

for _u, _p in [
    (np.arctan2, ew.arctan2_p), (np.hypot, ew.hypot_p), (np.logaddexp, ew.logaddexp_p),
    (np.logaddexp2, ew.logaddexp2_p), (np.copysign, ew.copysign_p),
]:
    implements_ufunc(_u)(_float_binary(_p))


# --- rounding and remainders ----------------------------------------------------------------


def _integral_identity(prim):
    """floor, ceil and trunc leave integers as they are (NumPy 2 keeps their dtype)."""
    def call(x):
        return x if result_dtype(x).kind in "iu" else elementwise(prim, x)

    return call


implements_ufunc(np.floor)(_integral_identity(ew.floor_p))
implements_ufunc(np.ceil)(_integral_identity(ew.ceil_p))
implements_ufunc(np.trunc)(_integral_identity(ew.trunc_p))


@implements(np.round, np.around)
def round_(a, decimals=0, out=None):
    if out is not None:
        unsupported("np.round with out=")
    decimals = operator.index(decimals)  # a TypeError for a non-integer, as NumPy's
    if result_dtype(a).kind in "iu" and decimals >= 0:
        return a
    return bind(ew.round_p, a, decimals=int(decimals))


@implements_ufunc(np.fabs)
def fabs(x):
    return elementwise(ew.abs_p, _real_float(x, "fabs"))


@implements_ufunc(np.floor_divide)
def floor_divide(a, b):
    return elementwise(ew.floor_divide_p, a, b)


@implements_ufunc(np.remainder)
def remainder(a, b):
    """NumPy's ``%``: the sign of the divisor (np.mod is the same ufunc)."""
    return elementwise(ew.rem_p, a, b)


@implements_ufunc(np.fmod)
def fmod(a, b):
    return elementwise(ew.fmod_p, a, b)


@implements_ufunc(np.divmod)
def divmod_(a, b):
    return floor_divide(a, b), remainder(a, b)


# --- angles, special values --------------------------------------------------------------------


@implements(np.angle)
def angle(z, deg=False):
    out = elementwise(ew.angle_p, z if is_complex(result_dtype(z)) else _float(z))
    return multiply(out, 180 / math.pi) if deg else out


def _real_float(x, name: str):
    if is_complex(result_dtype(x)):
        raise TracingError(located(f"np.{name} does not accept complex input (NumPy raises TypeError)"))
    return _float(x)


@implements_ufunc(np.deg2rad, np.radians)
def deg2rad(x):
    return multiply(_real_float(x, "deg2rad"), math.pi / 180)


@implements_ufunc(np.rad2deg, np.degrees)
def rad2deg(x):
    return multiply(_real_float(x, "rad2deg"), 180 / math.pi)


@implements(np.sinc)
def sinc(x):
    return elementwise(ew.sinc_p, _float(x))


@implements(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    numpy_checks(np.nan_to_num, standin(x), nan=nan, posinf=posinf, neginf=neginf)
    if not is_inexact(result_dtype(x)):
        return x
    return bind(ew.nan_to_num_p, x, nan=float(nan), posinf=None if posinf is None else float(posinf),
                neginf=None if neginf is None else float(neginf))


def _classify(prim, for_integers):
    def call(x):
        if is_inexact(result_dtype(x)):
            return elementwise(prim, x)
        return for_integers(x, dtype=bool)

    return call


implements_ufunc(np.isnan)(_classify(ew.isnan_p, zeros_like))
implements_ufunc(np.isinf)(_classify(ew.isinf_p, zeros_like))
implements_ufunc(np.isfinite)(_classify(ew.isfinite_p, ones_like))


# --- extrema: NaN-ignoring, clipping, complex order ------------------------------------------



def _re(x):
    return x.real if isinstance(x, PYTHON_SCALARS) else real(x)


def _im(x):
    return x.imag if isinstance(x, PYTHON_SCALARS) else imag(x)


def _lexicographic(a, b, greater_than: bool):
    """``a`` where it comes first in NumPy's complex order (real part, then imaginary part), else ``b``."""
    ra, rb = _re(a), _re(b)
    strict, loose = (greater, greater_equal) if greater_than else (less, less_equal)
    return where(where(equal(ra, rb), loose(_im(a), _im(b)), strict(ra, rb)), a, b)


@implements_ufunc(np.maximum)
def maximum(a, b):
    return _lexicographic(a, b, True) if is_complex(result_dtype(a, b)) else _real_maximum(a, b)


@implements_ufunc(np.minimum)
def minimum(a, b):
    return _lexicographic(a, b, False) if is_complex(result_dtype(a, b)) else _real_minimum(a, b)


def _nan_ignoring(prim, greater_than: bool):
    """fmax/fmin; on complex values NumPy's order, and the other operand where one has a NaN part."""
    def call(a, b):
        if not is_complex(result_dtype(a, b)):
            return elementwise(prim, a, b)
        isnan = UFUNCS[np.isnan]
        return where(isnan(b), a, where(isnan(a), b, _lexicographic(a, b, greater_than)))

    return call


implements_ufunc(np.fmax)(_nan_ignoring(ew.fmax_p, True))
implements_ufunc(np.fmin)(_nan_ignoring(ew.fmin_p, False))


def complex_extremum(a, axes: tuple[int, ...], keepdims: bool, largest: bool):
    """max/min of complex values over ``axes`` in NumPy's order: the extreme real part, then,
    among the entries that have it, the extreme imaginary part. Derivatives follow the real and
    imaginary reductions (ties share the tangent)."""
    prim = red.reduce_max_p if largest else red.reduce_min_p
    kept = tuple(1 if i in axes else n for i, n in enumerate(a.shape))
    re, im = real(a), imag(a)
    best_re = bind(prim, re, axes=axes)
    contenders = where(equal(re, best_re.reshape(kept)), im, -np.inf if largest else np.inf)
    best_im = bind(prim, contenders, axes=axes)
    return _keep(add(astype(best_re, a.dtype), multiply(astype(best_im, a.dtype), 1j)), a, axes, keepdims)


@implements(np.clip)
def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    """``np.clip`` itself with both bounds; with one, ``maximum`` or ``minimum`` (NumPy's definition
    is ``minimum(maximum(a, a_min), a_max)``), and so in NumPy's order for complex values."""
    numpy_checks(np.clip, standin(a), None, None, **ufunc_options(kwargs))
    if out is not None or kwargs:
        unsupported("np.clip with out= or ufunc keyword arguments")
    lo = a_min if min is None else min
    hi = a_max if max is None else max
    if lo is not None and hi is not None and not is_complex(result_dtype(a, lo, hi)):
        return elementwise(ew.clip_p, a, lo, hi)
    out = a
    if lo is not None:
        out = maximum(out, lo)
    if hi is not None:
        out = minimum(out, hi)
    return out


# --- logic: ``&``, ``|``, ``^``, ``~`` and np.logical_* ---------------------------------------


def _integral(name: str, x):
    if result_dtype(x).kind not in "bi":
        raise TracingError(located(f"{name} is only defined for booleans and integers, not {result_dtype(x).name}"))
    return x


def _bitwise(prim, name: str):
    def call(a, b):
        return elementwise(prim, _integral(name, a), _integral(name, b))

    return call


bitwise_and = implements_ufunc(np.bitwise_and)(_bitwise(ew.and_p, "&"))
bitwise_or = implements_ufunc(np.bitwise_or)(_bitwise(ew.or_p, "|"))
bitwise_xor = implements_ufunc(np.bitwise_xor)(_bitwise(ew.xor_p, "^"))


@implements_ufunc(np.invert)
def invert(x):
    return elementwise(ew.not_p, _integral("~", x))


def _truth(x):
    """``x != 0`` unless ``x`` is boolean already (NumPy's logical functions)."""
    return x if result_dtype(x) == np.bool_ else elementwise(ew.ne_p, x, 0)


def _logical(prim):
    return lambda a, b: elementwise(prim, _truth(a), _truth(b))


implements_ufunc(np.logical_and)(_logical(ew.and_p))
implements_ufunc(np.logical_or)(_logical(ew.or_p))
implements_ufunc(np.logical_xor)(_logical(ew.xor_p))


@implements_ufunc(np.logical_not)
def logical_not(x):
    return elementwise(ew.not_p, _truth(x))


@implements(np.iscomplex)
def iscomplex(x):
    """``imag(x) != 0``: False everywhere for real input."""
    return elementwise(ew.ne_p, imag(x), 0) if is_complex(result_dtype(x)) else elementwise(ew.ne_p, zeros_like(x), 0)


@implements(np.isreal)
def isreal(x):
    return elementwise(ew.eq_p, imag(x), 0) if is_complex(result_dtype(x)) else elementwise(ew.eq_p, zeros_like(x), 0)


@implements(np.iscomplexobj)
def iscomplexobj(x):
    """A property of the dtype, known when tracing: a Python bool, as NumPy returns."""
    return bool(is_complex(result_dtype(x)))


@implements(np.isrealobj)
def isrealobj(x):
    return not is_complex(result_dtype(x))
