"""``scipy.special`` on traced arrays, called by SciPy's own names.

The ufuncs (``gammaln``, ``erf``, ``xlogy``, ``betainc``, ``jv``, ...) reach pullback through
``__array_ufunc__`` and lower to the primitive of the same name (pullback.primitives.special),
in the dtype SciPy's own loop would compute in (``gammaln`` of integers is float64, of float32
float32; ``polygamma`` is always float64). The Python functions (``polygamma``, ``logsumexp``,
``softmax``, ``log_softmax``, ``multigammaln``) call ``np.asarray`` on their arguments, so they
are wrapped while a trace runs (``construct.implements_attribute``) and composed here from
NumPy's vocabulary, printing as a person would write them: ``logsumexp`` is the max-shifted sum,
whose gradient is the softmax ``exp(a - m) / s`` (no overflow at any scale)."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import scipy.special

from pullback.errors import TracingError
from pullback.frontend.construct import implements_attribute
from pullback.frontend.numpy import astype, elementwise, implements_ufunc, result_dtype, unsupported
from pullback.ir.tracer import PYTHON_SCALARS, Tracer, located
from pullback.primitives import elementwise as ew
from pullback.primitives import lax
from pullback.primitives import special as sp

_SAMPLE = {"b": True, "i": 1, "u": 1, "f": 0.5, "c": 0.5j}


def _key(x) -> tuple[str, str]:
    """What SciPy's dtype resolution sees of ``x``: a weak Python scalar of a kind, or an array dtype."""
    if isinstance(x, PYTHON_SCALARS):
        return "weak", np.asarray(x).dtype.kind
    if isinstance(x, Tracer) and x.weak:
        return "weak", x.dtype.kind
    return "array", np.asarray(x).dtype.str if not isinstance(x, Tracer) else x.dtype.str


@functools.cache
def _dtype_for(func, keys: tuple[tuple[str, str], ...]) -> np.dtype:
    samples = [_SAMPLE[k] if kind == "weak" else np.full((), 0.5, np.dtype(k)) for kind, k in keys]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # yn of the sample order 0.5 warns that it truncates it
        return np.asarray(func(*samples)).dtype


def scipy_dtype(func, *xs) -> np.dtype:
    """The dtype SciPy's ``func`` returns for arguments like ``xs`` (found by asking it, once per
    combination of dtypes): the dtype pullback computes in, so results match SciPy's."""
    return _dtype_for(func, tuple(_key(x) for x in xs))


# holomorphic, and SciPy has complex loops for them: erf' = 2/sqrt(pi) exp(-z^2) holds for complex z
_COMPLEX = frozenset({scipy.special.erf, scipy.special.erfc})


def _special_ufunc(func, prim):
    name = f"scipy.special.{func.__name__}"
    kinds = "fc" if func in _COMPLEX else "f"

    def call(*xs):
        dtype = scipy_dtype(func, *xs)
        if dtype.kind not in kinds:
            unsupported(f"{name} of {dtype.name} values")
        return elementwise(prim, *xs, dtype=dtype)

    return call


_UFUNCS = {
    scipy.special.gammaln: sp.gammaln_p, scipy.special.gamma: sp.gamma_p, scipy.special.digamma: sp.digamma_p,
    scipy.special.erf: sp.erf_p, scipy.special.erfc: sp.erfc_p, scipy.special.erfinv: sp.erfinv_p,
    scipy.special.erfcinv: sp.erfcinv_p, scipy.special.erfcx: sp.erfcx_p, scipy.special.ndtr: sp.ndtr_p,
    scipy.special.ndtri: sp.ndtri_p, scipy.special.log_ndtr: sp.log_ndtr_p, scipy.special.i0: sp.i0_p,
    scipy.special.i1: sp.i1_p, scipy.special.i0e: sp.i0e_p, scipy.special.i1e: sp.i1e_p,
    scipy.special.entr: sp.entr_p, scipy.special.logit: sp.logit_p, scipy.special.log_expit: sp.log_expit_p,
    scipy.special.expit: ew.logistic_p, scipy.special.xlogy: sp.xlogy_p, scipy.special.xlog1py: sp.xlog1py_p,
    scipy.special.beta: sp.beta_p, scipy.special.betaln: sp.betaln_p, scipy.special.gammainc: sp.gammainc_p,
    scipy.special.gammaincc: sp.gammaincc_p, scipy.special.betainc: sp.betainc_p,
    scipy.special.gammasgn: sp.gammasgn_p, scipy.special.rgamma: sp.rgamma_p,
    scipy.special.j0: sp.j0_p, scipy.special.j1: sp.j1_p, scipy.special.y0: sp.y0_p, scipy.special.y1: sp.y1_p,
    scipy.special.k0: sp.k0_p, scipy.special.k1: sp.k1_p, scipy.special.k0e: sp.k0e_p, scipy.special.k1e: sp.k1e_p,
    scipy.special.jv: sp.jv_p, scipy.special.yv: sp.yv_p, scipy.special.yn: sp.yn_p, scipy.special.iv: sp.iv_p,
    scipy.special.ive: sp.ive_p, scipy.special.kv: sp.kv_p, scipy.special.kve: sp.kve_p,
}
for _u, _p in _UFUNCS.items():  # scipy.special.psi is digamma itself, jn is jv
    implements_ufunc(_u)(_special_ufunc(_u, _p))


# --- Python functions of scipy.special ----------------------------------------------------------


def _float(x):
    """``x`` as an array of its inexact dtype (integers become float64), as SciPy computes."""
    x = np.asarray(x) if isinstance(x, PYTHON_SCALARS) else x
    dtype = result_dtype(x)
    if dtype.kind == "c":
        unsupported("complex values in scipy.special's reductions")
    return astype(x, dtype if dtype.kind == "f" else np.float64)


@implements_attribute(scipy.special, "polygamma")
def polygamma(n, x):
    """``psi^(n)(x)`` in float64, as SciPy computes it whatever x's dtype; ``n`` is the order."""
    if scipy_dtype(scipy.special.polygamma, n, x).kind != "f":
        unsupported("scipy.special.polygamma of complex values")
    return elementwise(sp.polygamma_p, n, x, dtype=np.dtype(np.float64))


def _constant(x):
    """``x`` with a zero derivative (a traced value; a NumPy one has none anyway)."""
    return lax.stop_gradient(x) if isinstance(x, Tracer) else x


def _shift(m):
    """The shift of a max-shifted sum: the largest value (0 where it is not finite, as SciPy does),
    held constant: the result does not depend on it, so its derivative terms would cancel exactly."""
    return _constant(np.where(np.isfinite(m), m, 0))


@implements_attribute(scipy.special, "logsumexp")
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log(sum(b * exp(a)))`` as ``m + log(sum(b * exp(a - m)))`` with ``m`` the largest ``a``
    (where ``b`` is not 0; 0 where that is not finite, as SciPy does), so nothing overflows. The
    result does not depend on ``m`` (its derivative terms ``dm - dm * sum(w) / s`` cancel), so ``m``
    is held constant and the gradient is the softmax ``b * exp(a - m) / s`` alone."""
    a = _float(a)
    if b is not None:
        b = _float(b)
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
        a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        a = astype(a, result_dtype(a, b))
    m = _shift(np.max(a if b is None else np.where(b != 0, a, -np.inf), axis=axis, keepdims=True, initial=-np.inf))
    e = np.exp(a - m)
    s = np.sum(e if b is None else b * e, axis=axis, keepdims=keepdims)
    m = np.reshape(m, np.shape(s))
    if return_sign:
        return np.log(np.abs(s)) + m, np.sign(s)
    return np.log(s) + m


@implements_attribute(scipy.special, "softmax")
def softmax(x, axis=None):
    """``exp(x - m) / sum(exp(x - m))`` with ``m`` the largest entry."""
    x = _float(x)
    e = np.exp(x - _constant(np.max(x, axis=axis, keepdims=True)))
    return e / np.sum(e, axis=axis, keepdims=True)


@implements_attribute(scipy.special, "log_softmax")
def log_softmax(x, axis=None):
    """``(x - m) - log(sum(exp(x - m)))``: exact where the softmax itself would underflow."""
    x = _float(x)
    shifted = x - _shift(np.max(x, axis=axis, keepdims=True))
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@implements_attribute(scipy.special, "multigammaln")
def multigammaln(a, d):
    """``log Gamma_d(a) = d (d - 1) / 4 log(pi) + sum_j gammaln(a - j / 2)`` (DLMF §35.3).
    SciPy's check ``a > (d - 1) / 2`` needs values, so it is not made on traced ``a``."""
    if not isinstance(d, int | np.integer) or isinstance(d, bool) or d < 1:
        raise TracingError(located(f"scipy.special.multigammaln needs a positive integer d, got {d!r}"))
    a = _float(a)
    terms = scipy.special.gammaln(np.expand_dims(a, -1) - np.arange(int(d), dtype=a.dtype) / 2)
    return np.sum(terms, axis=-1) + d * (d - 1) / 4 * np.log(np.pi)
