"""Special functions: the ``scipy.special`` ufuncs people differentiate (gamma and its logarithm,
digamma and polygamma, the error functions and their inverses, the normal distribution function,
the Bessel functions ``J``, ``Y``, ``I`` and ``K`` (of any real order and of orders 0 and 1, with
their exponentially scaled forms), entropy-style products, the logistic family, beta, and the
regularised incomplete gamma and beta functions). Each prints as the SciPy call of its name.
Operands are real floats of one dtype, as for the other elementwise primitives; ``erf`` and
``erfc`` take complex ones too (SciPy's Faddeeva-based loops). A Bessel function's order is its
first operand, a value like polygamma's ``n`` (constant in practice, so that a rule can shift it).

Derivatives cite the DLMF (https://dlmf.nist.gov) and are written in ``lax``, so they can be
differentiated again. Where no closed form exists (the incomplete gamma function in ``a``, the
incomplete beta function in ``a`` and ``b``, polygamma and the Bessel functions in their order)
asking for that tangent raises ``TracingError`` naming the function and the argument: never a
silent zero."""

from __future__ import annotations

import math

import numpy as np

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType
from pullback.primitives.elementwise import INEXACT, REAL_FLOAT, _common, _register, _same

# SciPy's name of each primitive (printing and constant folding use it)
SCIPY_NAMES: dict[Primitive, str] = {}


def _special(name: str, arity: int, kinds: str = REAL_FLOAT) -> Primitive:
    prim = _register(name, arity, kinds, _same)
    SCIPY_NAMES[prim] = name
    return prim


gammaln_p = _special("gammaln", 1)
gamma_p = _special("gamma", 1)
digamma_p = _special("digamma", 1)
erf_p = _special("erf", 1, INEXACT)
erfc_p = _special("erfc", 1, INEXACT)
erfinv_p = _special("erfinv", 1)
erfcinv_p = _special("erfcinv", 1)
erfcx_p = _special("erfcx", 1)
ndtr_p = _special("ndtr", 1)
ndtri_p = _special("ndtri", 1)
log_ndtr_p = _special("log_ndtr", 1)
i0_p = _special("i0", 1)
i1_p = _special("i1", 1)
i0e_p = _special("i0e", 1)
i1e_p = _special("i1e", 1)
entr_p = _special("entr", 1)
logit_p = _special("logit", 1)
log_expit_p = _special("log_expit", 1)
xlogy_p = _special("xlogy", 2)
xlog1py_p = _special("xlog1py", 2)
beta_p = _special("beta", 2)
betaln_p = _special("betaln", 2)
gammainc_p = _special("gammainc", 2)
gammaincc_p = _special("gammaincc", 2)
betainc_p = _special("betainc", 3)
gammasgn_p = _special("gammasgn", 1)
rgamma_p = _special("rgamma", 1)
# Bessel functions of orders 0 and 1, and of a real order v (the first operand; yn's is integral)
j0_p, j1_p, y0_p, y1_p = (_special(name, 1) for name in ("j0", "j1", "y0", "y1"))
k0_p, k1_p, k0e_p, k1e_p = (_special(name, 1) for name in ("k0", "k1", "k0e", "k1e"))
jv_p, yv_p, yn_p = _special("jv", 2), _special("yv", 2), _special("yn", 2)
iv_p, ive_p, kv_p, kve_p = (_special(name, 2) for name in ("iv", "ive", "kv", "kve"))

polygamma_p = Primitive("polygamma")
SCIPY_NAMES[polygamma_p] = "polygamma"
# The primitives whose first operand is an order (printed as the integer a person writes, where it is one)
ORDERS = frozenset({polygamma_p, jv_p, yv_p, yn_p, iv_p, ive_p, kv_p, kve_p})


def _polygamma_rule(n, x):
    """``polygamma(n, x)``: SciPy computes it in float64 whatever the input (through ``zeta``), so
    the primitive is float64 only; ``n`` holds integral values (a float operand, as SciPy casts it)."""
    shape, dtype = _common(polygamma_p, (n, x), REAL_FLOAT)
    if dtype != np.float64:
        raise ShapeError(f"polygamma computes in float64, got {dtype.name}")
    return ArrayType(shape, dtype)


shape_rules[polygamma_p] = _polygamma_rule

# The identity with a zero derivative: the shift ``m`` of ``logsumexp``/``softmax``, whose derivative
# terms cancel exactly, is treated as the constant it may be (as in JAX). The simplifier removes it
# once derivatives are taken, so it prints nothing in optimised programs.
stop_gradient_p = Primitive("stop_gradient")
shape_rules[stop_gradient_p] = lambda x: ArrayType(x.shape, x.dtype)

# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import defjvp, defzero  # noqa: E402
from pullback.errors import TracingError  # noqa: E402
from pullback.ir.tracer import current_builder, located  # noqa: E402
from pullback.primitives import lax  # noqa: E402

defzero(stop_gradient_p)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
_HALF_SQRT_PI = math.sqrt(math.pi) / 2
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _no_derivative(function: str, argument: str):
    """The partial of an argument that has no closed-form derivative: refuse, naming it."""
    def partial(t, *primals, ans):
        raise TracingError(located(
            f"scipy.special.{function} has no derivative with respect to {argument} in pullback (no closed "
            f"form); differentiate with respect to the other arguments only", current_builder().location()))

    return partial


def _sq(x):
    return lax.integer_pow(x, 2)


def _safe_x(x):
    """``x`` with zeros replaced by 1, and where x was 0: for quotients by x that a ``select`` discards."""
    zero = lax.eq(x, 0)
    return zero, lax.select(zero, 1, x)


# DLMF 5.2.2: psi = Gamma'/Gamma, so (ln|Gamma|)' = psi and Gamma' = Gamma psi
defjvp(gammaln_p, lambda t, x, ans: lax.mul(t, lax.digamma(x)))
defjvp(gamma_p, lambda t, x, ans: lax.mul(t, lax.mul(ans, lax.digamma(x))))
# DLMF 5.15.1: psi' = sum 1/(k + x)^2 = psi^(1); DLMF 5.15: psi^(n) is the n-th derivative of psi
defjvp(digamma_p, lambda t, x, ans: lax.mul(t, lax.polygamma(1, x)))
defjvp(polygamma_p, _no_derivative("polygamma", "n (the order)"),
       lambda t, n, x, ans: lax.mul(t, lax.polygamma(lax.add(n, 1), x)))
# DLMF 7.2.1 and 7.10: erf' = 2/sqrt(pi) exp(-x^2), erfc = 1 - erf. erf is entire, so for complex z this is
# its complex derivative (as exp's rule is), and transposing the product conjugates it: dL = Re(G^H dZ)
defjvp(erf_p, lambda t, x, ans: lax.mul(t, lax.mul(lax.exp(lax.neg(_sq(x))), _TWO_OVER_SQRT_PI)))
defjvp(erfc_p, lambda t, x, ans: lax.mul(t, lax.mul(lax.exp(lax.neg(_sq(x))), -_TWO_OVER_SQRT_PI)))
# DLMF 7.17: the inverse functions, whose derivative is the reciprocal of 7.10's at the answer
defjvp(erfinv_p, lambda t, y, ans: lax.mul(t, lax.mul(lax.exp(_sq(ans)), _HALF_SQRT_PI)))
defjvp(erfcinv_p, lambda t, y, ans: lax.mul(t, lax.mul(lax.exp(_sq(ans)), -_HALF_SQRT_PI)))
# erfcx = exp(x^2) erfc(x), so by DLMF 7.10 erfcx' = 2x erfcx - 2/sqrt(pi): no exp(x^2) to overflow
defjvp(erfcx_p, lambda t, x, ans: lax.mul(t, lax.sub(lax.mul(lax.mul(x, ans), 2), _TWO_OVER_SQRT_PI)))
# ndtr(x) = erfc(-x/sqrt 2)/2 (DLMF 7.2.2), so by DLMF 7.10 its derivative is the density exp(-x^2/2)/sqrt(2 pi)
defjvp(ndtr_p, lambda t, x, ans: lax.mul(t, lax.exp(lax.sub(lax.mul(_sq(x), -0.5), _LOG_SQRT_2PI))))
# the inverse: 1 / density(ndtri(y))
defjvp(ndtri_p, lambda t, y, ans: lax.mul(t, lax.exp(lax.add(lax.mul(_sq(ans), 0.5), _LOG_SQRT_2PI))))
# log ndtr' = density / ndtr = exp(-x^2/2 - log_ndtr(x)) / sqrt(2 pi): no underflow to 0/0 for x << 0
defjvp(log_ndtr_p, lambda t, x, ans: lax.mul(t, lax.exp(lax.sub(lax.sub(lax.mul(_sq(x), -0.5), ans),
                                                                  _LOG_SQRT_2PI))))
# DLMF 10.29.3: I0' = I1
defjvp(i0_p, lambda t, x, ans: lax.mul(t, lax.i1(x)))


def _i1_slope(x):
    """DLMF 10.29.2: I1' = I0 - I1/x, which is 1/2 at x = 0 (I1(x) ~ x/2, DLMF 10.30.1)."""
    zero, safe = _safe_x(x)
    return lax.select(zero, 0.5, lax.sub(lax.i0(x), lax.div(lax.i1(safe), safe)))


defjvp(i1_p, lambda t, x, ans: lax.mul(t, _i1_slope(x)))
# i0e = exp(-|x|) I0: i0e' = i1e - sign(x) i0e
defjvp(i0e_p, lambda t, x, ans: lax.mul(t, lax.sub(lax.i1e(x), lax.mul(lax.sign(x), ans))))


def _i1e_slope(x, ans):
    """i1e = exp(-|x|) I1: i1e' = i0e - i1e/x - sign(x) i1e (DLMF 10.29.2), 1/2 at x = 0."""
    zero, safe = _safe_x(x)
    away = lax.sub(lax.sub(lax.i0e(x), lax.div(lax.i1e(safe), safe)), lax.mul(lax.sign(x), ans))
    return lax.select(zero, 0.5, away)


defjvp(i1e_p, lambda t, x, ans: lax.mul(t, _i1e_slope(x, ans)))


# --- Bessel functions J, Y, K and the last gamma functions ------------------------------------------


def _order(function: str, name: str = "v"):
    return _no_derivative(function, f"{name} (the order)")


def _half(combine, f, v, x):
    """``combine(f(v - 1, x), f(v + 1, x)) / 2``: a Bessel function's derivative from the orders beside it."""
    return lax.mul(combine(f(lax.sub(v, 1), x), f(lax.add(v, 1), x)), 0.5)


# DLMF 10.6.1: C_v' = (C_{v-1} - C_{v+1}) / 2 for C = J, Y (integral orders included)
defjvp(jv_p, _order("jv"), lambda t, v, x, ans: lax.mul(t, _half(lax.sub, lax.jv, v, x)))
defjvp(yv_p, _order("yv"), lambda t, v, x, ans: lax.mul(t, _half(lax.sub, lax.yv, v, x)))
defjvp(yn_p, _order("yn", "n"), lambda t, n, x, ans: lax.mul(t, _half(lax.sub, lax.yn, n, x)))
# DLMF 10.29.1: I_v' = (I_{v-1} + I_{v+1}) / 2 and K_v' = -(K_{v-1} + K_{v+1}) / 2; the scaled
# ive = exp(-|x|) I_v and kve = exp(x) K_v gain the terms -sign(x) ive and +kve
defjvp(iv_p, _order("iv"), lambda t, v, x, ans: lax.mul(t, _half(lax.add, lax.iv, v, x)))
defjvp(ive_p, _order("ive"),
       lambda t, v, x, ans: lax.mul(t, lax.sub(_half(lax.add, lax.ive, v, x), lax.mul(lax.sign(x), ans))))
defjvp(kv_p, _order("kv"), lambda t, v, x, ans: lax.mul(t, lax.neg(_half(lax.add, lax.kv, v, x))))
defjvp(kve_p, _order("kve"), lambda t, v, x, ans: lax.mul(t, lax.sub(ans, _half(lax.add, lax.kve, v, x))))
# DLMF 10.6.3 and 10.29.3: J0' = -J1, Y0' = -Y1, K0' = -K1; k0e = exp(x) K0: k0e' = k0e - k1e
defjvp(j0_p, lambda t, x, ans: lax.mul(t, lax.neg(lax.j1(x))))
defjvp(y0_p, lambda t, x, ans: lax.mul(t, lax.neg(lax.y1(x))))
defjvp(k0_p, lambda t, x, ans: lax.mul(t, lax.neg(lax.k1(x))))
defjvp(k0e_p, lambda t, x, ans: lax.mul(t, lax.sub(ans, lax.k1e(x))))


def _j1_slope(x):
    """DLMF 10.6.2: J1' = J0 - J1/x, which is 1/2 at x = 0 (J1(x) ~ x/2, DLMF 10.7.3)."""
    zero, safe = _safe_x(x)
    return lax.select(zero, 0.5, lax.sub(lax.j0(x), lax.div(lax.j1(safe), safe)))


defjvp(j1_p, lambda t, x, ans: lax.mul(t, _j1_slope(x)))
# DLMF 10.6.2: Y1' = Y0 - Y1/x; DLMF 10.29.2: K1' = -K0 - K1/x (both infinite at 0, where Y1 and K1 are)
defjvp(y1_p, lambda t, x, ans: lax.mul(t, lax.sub(lax.y0(x), lax.div(ans, x))))
defjvp(k1_p, lambda t, x, ans: lax.mul(t, lax.neg(lax.add(lax.k0(x), lax.div(ans, x)))))
# k1e = exp(x) K1: k1e' = k1e - k0e - k1e/x
defjvp(k1e_p, lambda t, x, ans: lax.mul(t, lax.sub(lax.sub(ans, lax.k0e(x)), lax.div(ans, x))))
# gammasgn is piecewise constant; rgamma = 1/Gamma: rgamma' = -psi rgamma (DLMF 5.2.2), nan at the poles
# of psi (x = 0, -1, -2, ...), where rgamma is 0
defzero(gammasgn_p)
defjvp(rgamma_p, lambda t, x, ans: lax.mul(t, lax.neg(lax.mul(ans, lax.digamma(x)))))


# entr = -x log x: entr' = -(log x + 1)
defjvp(entr_p, lambda t, x, ans: lax.mul(t, lax.neg(lax.add(lax.log(x), 1))))
# logit = log(p / (1 - p)): logit' = 1 / (p (1 - p))
defjvp(logit_p, lambda t, p, ans: lax.div(t, lax.mul(p, lax.sub(1, p))))
# log expit(x) = -log(1 + exp(-x)): its derivative expit(-x), which never overflows
defjvp(log_expit_p, lambda t, x, ans: lax.mul(t, lax.logistic(lax.neg(x))))
# xlogy = x log y, xlog1py = x log(1 + y) (0 where x = 0)
defjvp(xlogy_p, lambda t, x, y, ans: lax.mul(t, lax.log(y)), lambda t, x, y, ans: lax.mul(t, lax.div(x, y)))
defjvp(xlog1py_p, lambda t, x, y, ans: lax.mul(t, lax.log1p(y)),
       lambda t, x, y, ans: lax.mul(t, lax.div(x, lax.add(y, 1))))


def _psi_difference(a, b):
    """psi(a) - psi(a + b): d/da ln B(a, b) by DLMF 5.12.1 (B = Gamma(a) Gamma(b) / Gamma(a + b)) and 5.2.2."""
    return lax.sub(lax.digamma(a), lax.digamma(lax.add(a, b)))


defjvp(betaln_p, lambda t, a, b, ans: lax.mul(t, _psi_difference(a, b)),
       lambda t, a, b, ans: lax.mul(t, _psi_difference(b, a)))
defjvp(beta_p, lambda t, a, b, ans: lax.mul(t, lax.mul(ans, _psi_difference(a, b))),
       lambda t, a, b, ans: lax.mul(t, lax.mul(ans, _psi_difference(b, a))))


def _gamma_density(a, x):
    """d/dx P(a, x) = x^(a-1) exp(-x) / Gamma(a) (DLMF 8.2.1 and 8.2.4), in logarithms: no overflow."""
    return lax.exp(lax.sub(lax.sub(lax.xlogy(lax.sub(a, 1), x), x), lax.gammaln(a)))


defjvp(gammainc_p, _no_derivative("gammainc", "a"), lambda t, a, x, ans: lax.mul(t, _gamma_density(a, x)))
defjvp(gammaincc_p, _no_derivative("gammaincc", "a"),
       lambda t, a, x, ans: lax.mul(t, lax.neg(_gamma_density(a, x))))


def _beta_density(a, b, x):
    """d/dx I_x(a, b) = x^(a-1) (1 - x)^(b-1) / B(a, b) (DLMF 8.17.1 and 8.17.2), in logarithms."""
    log_density = lax.add(lax.xlogy(lax.sub(a, 1), x), lax.xlog1py(lax.sub(b, 1), lax.neg(x)))
    return lax.exp(lax.sub(log_density, lax.betaln(a, b)))


defjvp(betainc_p, _no_derivative("betainc", "a"), _no_derivative("betainc", "b"),
       lambda t, a, b, x, ans: lax.mul(t, _beta_density(a, b, x)))


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import elementwise as _batch_elementwise  # noqa: E402

for _p in [v for v in globals().values() if isinstance(v, Primitive)]:  # every primitive here is elementwise
    _batch_elementwise(_p)
