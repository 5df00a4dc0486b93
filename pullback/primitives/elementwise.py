"""Elementwise primitives. Operands have equal shapes (the tracer inserts
explicit broadcasts) and equal dtypes; a scalar Literal may stand for an operand."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pullback.ir.core import Literal, Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType, real_dtype

BOOL = np.dtype(bool)

# dtype kinds a primitive accepts: b bool, i int, f float, c complex
NUMERIC, INEXACT, REAL, REAL_FLOAT, COMPLEX = "ifc", "fc", "if", "f", "c"


def _common(prim: Primitive, xs, kinds: str) -> tuple[tuple[int, ...], np.dtype]:
    arrays = [x for x in xs if not isinstance(x, Literal)]
    shape = arrays[0].shape if arrays else ()
    dtype = xs[0].dtype
    for x in xs:
        if x.dtype != dtype:
            raise ShapeError(f"operands have different dtypes {dtype.name} and {x.dtype.name}")
    for x in arrays:
        if x.shape != shape:
            raise ShapeError(f"operands have different shapes {shape} and {x.shape}")
    if dtype.kind not in kinds:
        raise ShapeError(f"{prim.name} does not accept dtype {dtype.name}")
    return shape, dtype


def _register(name: str, arity: int, kinds: str, out: Callable[[np.dtype], np.dtype]) -> Primitive:
    prim = Primitive(name)

    def rule(*xs):
        if len(xs) != arity:
            raise ShapeError(f"{name} takes {arity} operands, got {len(xs)}")
        shape, dtype = _common(prim, xs, kinds)
        return ArrayType(shape, out(dtype))

    shape_rules[prim] = rule
    return prim


def _same(d):
    return d


def _bool(d):
    return BOOL


def unary(name: str, kinds: str = INEXACT, out=_same) -> Primitive:
    return _register(name, 1, kinds, out)


def binary(name: str, kinds: str = NUMERIC, out=_same) -> Primitive:
    return _register(name, 2, kinds, out)


neg_p = unary("neg", NUMERIC)
sign_p = unary("sign", NUMERIC)
exp_p = unary("exp")
log_p = unary("log")
log1p_p = unary("log1p")
expm1_p = unary("expm1")
sqrt_p = unary("sqrt")
sin_p = unary("sin")
cos_p = unary("cos")
tan_p = unary("tan")
tanh_p = unary("tanh")
sinh_p = unary("sinh")
cosh_p = unary("cosh")
logistic_p = unary("logistic", REAL_FLOAT)
abs_p = unary("abs", NUMERIC, real_dtype)
real_p = unary("real", COMPLEX, real_dtype)
imag_p = unary("imag", COMPLEX, real_dtype)
conj_p = unary("conj", COMPLEX)

add_p = binary("add")
sub_p = binary("sub")
mul_p = binary("mul")
div_p = binary("div", INEXACT)
pow_p = binary("pow", INEXACT)
max_p = binary("max", REAL)
min_p = binary("min", REAL)

eq_p = binary("eq", "b" + NUMERIC, _bool)
ne_p = binary("ne", "b" + NUMERIC, _bool)
lt_p = binary("lt", REAL, _bool)
le_p = binary("le", REAL, _bool)
gt_p = binary("gt", REAL, _bool)
ge_p = binary("ge", REAL, _bool)

# bitwise on integers, logical on booleans (``&``, ``|``, ``^``, ``~``); no tangent
and_p = binary("and", "bi")
or_p = binary("or", "bi")
xor_p = binary("xor", "bi")
not_p = unary("not", "bi")

# piecewise constant (zero derivative): rounding, integer quotients, classification
floor_p = unary("floor", REAL)
ceil_p = unary("ceil", REAL)
trunc_p = unary("trunc", REAL)
rint_p = unary("rint")
isnan_p = unary("isnan", INEXACT, _bool)
isinf_p = unary("isinf", INEXACT, _bool)
isfinite_p = unary("isfinite", INEXACT, _bool)
floor_divide_p = binary("floor_divide", REAL)
# more smooth functions, each a ufunc a person would call
log10_p = unary("log10")
log2_p = unary("log2")
exp2_p = unary("exp2")
arcsin_p = unary("arcsin")
arccos_p = unary("arccos")
arctan_p = unary("arctan")
arcsinh_p = unary("arcsinh")
arccosh_p = unary("arccosh")
arctanh_p = unary("arctanh")
cbrt_p = unary("cbrt", REAL_FLOAT)
sinc_p = unary("sinc")
angle_p = unary("angle", INEXACT, real_dtype)
rem_p = binary("rem", REAL)  # NumPy's ``%``: the result has the sign of the divisor
fmod_p = binary("fmod", REAL)  # C's fmod: the sign of the dividend
arctan2_p = binary("arctan2", REAL_FLOAT)
hypot_p = binary("hypot", REAL_FLOAT)
logaddexp_p = binary("logaddexp", REAL_FLOAT)
logaddexp2_p = binary("logaddexp2", REAL_FLOAT)
fmax_p = binary("fmax", REAL)
fmin_p = binary("fmin", REAL)
copysign_p = binary("copysign", REAL_FLOAT)

clip_p = _register("clip", 3, REAL, _same)  # clip(x, lo, hi) = minimum(maximum(x, lo), hi), as NumPy defines it

round_p = Primitive("round")


def _round_rule(x, *, decimals: int):
    if not isinstance(decimals, int) or isinstance(decimals, bool):
        raise ShapeError(f"round decimals must be an int, got {decimals!r}")
    _common(round_p, (x,), NUMERIC)
    return ArrayType(x.shape, x.dtype)


shape_rules[round_p] = _round_rule

nan_to_num_p = Primitive("nan_to_num")


def _nan_to_num_rule(x, *, nan: float, posinf: float | None, neginf: float | None):
    """``np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)``; None means the dtype's extreme."""
    for v in (nan, posinf, neginf):
        if v is not None and not isinstance(v, float):
            raise ShapeError(f"nan_to_num replacements must be floats or None, got {v!r}")
    _common(nan_to_num_p, (x,), INEXACT)
    return ArrayType(x.shape, x.dtype)


shape_rules[nan_to_num_p] = _nan_to_num_rule

integer_pow_p = Primitive("integer_pow")


def _integer_pow_rule(x, *, y: int):
    if not isinstance(y, int) or isinstance(y, bool):
        raise ShapeError(f"integer_pow exponent must be an int, got {y!r}")
    if x.dtype.kind not in NUMERIC or (y < 0 and x.dtype.kind == "i"):
        raise ShapeError(f"integer_pow does not accept dtype {x.dtype.name} with exponent {y}")
    return ArrayType(x.shape, x.dtype)


shape_rules[integer_pow_p] = _integer_pow_rule

select_p = Primitive("select")


def _select_rule(pred, on_true, on_false):
    """``where(pred, on_true, on_false)``."""
    if pred.dtype != BOOL:
        raise ShapeError(f"select predicate must be bool, got {pred.dtype.name}")
    _, dtype = _common(select_p, (on_true, on_false), "b" + NUMERIC)
    shapes = {x.shape for x in (pred, on_true, on_false) if not isinstance(x, Literal)}
    if len(shapes) > 1:
        raise ShapeError(f"select operands have different shapes {sorted(shapes)}")
    return ArrayType(shapes.pop() if shapes else (), dtype)


shape_rules[select_p] = _select_rule


# --- differentiation rules --------------------------------------------------------------
# Written in lax (traced code), so each rule's output is IR and can be differentiated again.

from pullback.ad.jvp import Zero, defjvp, deflinear, defzero, jvp_rules  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.ir.tracer import bind  # noqa: E402
from pullback.primitives import lax  # noqa: E402

deflinear(neg_p)
defjvp(add_p, lambda t, x, y, ans: t, lambda t, x, y, ans: t)


def _sub_jvp(primals, tangents):
    tx, ty = tangents
    ans = lax.sub(*primals)
    if isinstance(ty, Zero):
        return ans, tx
    return ans, lax.neg(ty) if isinstance(tx, Zero) else lax.sub(tx, ty)


jvp_rules[sub_p] = _sub_jvp
defjvp(mul_p, lambda t, x, y, ans: lax.mul(t, y), lambda t, x, y, ans: lax.mul(x, t))
defjvp(div_p, lambda t, x, y, ans: lax.div(t, y), lambda t, x, y, ans: lax.mul(t, lax.neg(lax.div(ans, y))))


def _replace_zero(x):
    """x with its zeros replaced by 1: d(x**y)/dy = log(x) x**y is 0, not NaN, where x = 0 (as in JAX)."""
    if isinstance(x, Literal):
        return Literal.of(1, x.dtype) if x.value == 0 else x
    return lax.select(lax.eq(x, 0), 1, x)


defjvp(pow_p,
       lambda t, x, y, ans: lax.mul(t, lax.mul(y, lax.pow(x, lax.sub(y, 1)))),
       lambda t, x, y, ans: lax.mul(t, lax.mul(lax.log(_replace_zero(x)), ans)))
defjvp(integer_pow_p,
       lambda t, x, ans, y: lax.mul(t, y) if y == 1 else lax.mul(t, lax.mul(lax.integer_pow(x, y - 1), y)))
defjvp(exp_p, lambda t, x, ans: lax.mul(t, ans))
defjvp(log_p, lambda t, x, ans: lax.div(t, x))
defjvp(log1p_p, lambda t, x, ans: lax.div(t, lax.add(x, 1)))
defjvp(expm1_p, lambda t, x, ans: lax.mul(t, lax.add(ans, 1)))
defjvp(sqrt_p, lambda t, x, ans: lax.div(t, lax.mul(ans, 2)))
defjvp(sin_p, lambda t, x, ans: lax.mul(t, lax.cos(x)))
defjvp(cos_p, lambda t, x, ans: lax.mul(t, lax.neg(lax.sin(x))))
defjvp(tan_p, lambda t, x, ans: lax.mul(t, lax.add(lax.integer_pow(ans, 2), 1)))
defjvp(tanh_p, lambda t, x, ans: lax.mul(t, lax.sub(1, lax.integer_pow(ans, 2))))
defjvp(sinh_p, lambda t, x, ans: lax.mul(t, lax.cosh(x)))
defjvp(cosh_p, lambda t, x, ans: lax.mul(t, lax.sinh(x)))
defjvp(logistic_p, lambda t, x, ans: lax.mul(t, lax.mul(ans, lax.sub(1, ans))))
# |z|' = Re(conj(z/|z|) dz); sign(z) = z/|z| (0 at 0) covers real and complex
defjvp(abs_p, lambda t, x, ans: lax.real(lax.mul(t, lax.conj(lax.sign(x)))))


def _sign_jvp(primals, tangents):
    """Zero for real x. For complex z, s = z/|z| moves on the unit circle:
    ds = (dz - s Re(conj(s) dz)) / |z|."""
    (z,), (t,) = primals, tangents
    s = lax.sign(z)
    if z.dtype.kind != "c":
        return s, Zero(s.ssa.type)
    r = lax.convert(lax.abs(z), z.dtype)
    radial = lax.convert(lax.real(lax.mul(t, lax.conj(s))), z.dtype)
    return s, lax.div(lax.sub(t, lax.mul(radial, s)), r)


jvp_rules[sign_p] = _sign_jvp
deflinear(real_p)
deflinear(imag_p)
deflinear(conj_p)
for _p in (eq_p, ne_p, lt_p, le_p, gt_p, ge_p, and_p, or_p, xor_p, not_p):
    defzero(_p)


def _extremum_share(x, y, first_wins, y_missing=None):
    """1 where x wins, 0 where y wins, 1/2 at ties (so the derivative is symmetric); with
    ``y_missing`` (NaN for fmax/fmin), x also wins where y is missing."""
    share = lax.add(lax.convert(first_wins(x, y), x.dtype), lax.mul(lax.convert(lax.eq(x, y), x.dtype), 0.5))
    if y_missing is not None and isinstance(y, Literal):
        share = lax.add(share, 1.0) if np.isnan(y.value) else share
    elif y_missing is not None:
        share = lax.add(share, lax.convert(y_missing(y), x.dtype))
    return share


def _extremum_jvp(prim, first_wins, y_missing=None):
    def share(x, y):
        x_arr = x if not isinstance(x, Literal) else y
        s = _extremum_share(x, y, first_wins, y_missing)
        return s if s.shape == x_arr.shape else lax.broadcast_in_dim(s, x_arr.shape, ())

    defjvp(prim, lambda t, x, y, ans: lax.mul(t, share(x, y)),
           lambda t, x, y, ans: lax.mul(t, lax.sub(1, share(x, y))))


_extremum_jvp(max_p, lambda a, b: lax.gt(a, b))
_extremum_jvp(min_p, lambda a, b: lax.lt(a, b))


def _select_jvp(primals, tangents):
    pred, on_true, on_false = primals
    _, t_true, t_false = tangents
    ans = lax.select(pred, on_true, on_false)
    if isinstance(t_true, Zero) and isinstance(t_false, Zero):
        return ans, Zero(ans.ssa.type)
    zero = 0.0 if ans.dtype.kind == "f" else 0j
    return ans, lax.select(pred, zero if isinstance(t_true, Zero) else t_true,
                           zero if isinstance(t_false, Zero) else t_false)


jvp_rules[select_p] = _select_jvp


def _both_linear(name):
    raise TypeError(f"{name} of two values that both depend on the inputs is not linear")


def _add_t(ct, x, y):
    return (ct if isinstance(x, Linear) else None, ct if isinstance(y, Linear) else None)


def _sub_t(ct, x, y):
    return (ct if isinstance(x, Linear) else None, lax.neg(ct) if isinstance(y, Linear) else None)


def _mul_t(ct, x, y):
    if isinstance(x, Linear) and isinstance(y, Linear):
        _both_linear("mul")
    if isinstance(x, Linear):
        return lax.mul(ct, lax.conj(y)), None
    return None, lax.mul(lax.conj(x), ct)


def _div_t(ct, x, y):
    if isinstance(y, Linear):
        raise TypeError("div is not linear in its denominator")
    return lax.div(ct, lax.conj(y)), None


def _select_t(ct, pred, on_true, on_false):
    if isinstance(pred, Linear):
        raise TypeError("select is not linear in its predicate")
    zero = 0.0 if ct.dtype.kind == "f" else 0j
    return (None,
            lax.select(pred, ct, zero) if isinstance(on_true, Linear) else None,
            lax.select(pred, zero, ct) if isinstance(on_false, Linear) else None)


transpose_rules[neg_p] = lambda ct, x: (lax.neg(ct),)
transpose_rules[add_p] = _add_t
transpose_rules[sub_p] = _sub_t
transpose_rules[mul_p] = _mul_t
transpose_rules[div_p] = _div_t
transpose_rules[select_p] = _select_t
# Re and Im map C to R; their adjoints under Re<x, y> embed r as r + 0j and as i r
transpose_rules[real_p] = lambda ct, z: (lax.convert(ct, z.dtype),)
transpose_rules[imag_p] = lambda ct, z: (lax.mul(lax.convert(ct, z.dtype), 1j),)
transpose_rules[conj_p] = lambda ct, z: (lax.conj(ct),)


# --- the wider elementwise vocabulary -----------------------------------------------------
for _p in (floor_p, ceil_p, trunc_p, rint_p, round_p, floor_divide_p, isnan_p, isinf_p, isfinite_p):
    defzero(_p)

_LN2, _LN10 = float(np.log(2)), float(np.log(10))


def _sq(x):
    """x**2 (a Literal folds)."""
    return lax.mul(x, x) if isinstance(x, Literal) else lax.integer_pow(x, 2)


defjvp(log10_p, lambda t, x, ans: lax.div(t, lax.mul(x, _LN10)))
defjvp(log2_p, lambda t, x, ans: lax.div(t, lax.mul(x, _LN2)))
defjvp(exp2_p, lambda t, x, ans: lax.mul(t, lax.mul(ans, _LN2)))
defjvp(arcsin_p, lambda t, x, ans: lax.div(t, lax.sqrt(lax.sub(1, _sq(x)))))
defjvp(arccos_p, lambda t, x, ans: lax.neg(lax.div(t, lax.sqrt(lax.sub(1, _sq(x))))))
defjvp(arctan_p, lambda t, x, ans: lax.div(t, lax.add(_sq(x), 1)))
defjvp(arcsinh_p, lambda t, x, ans: lax.div(t, lax.sqrt(lax.add(_sq(x), 1))))
# sqrt(z - 1) sqrt(z + 1), not sqrt(z**2 - 1): the two differ in sign off the real axis
defjvp(arccosh_p, lambda t, x, ans: lax.div(t, lax.mul(lax.sqrt(lax.sub(x, 1)), lax.sqrt(lax.add(x, 1)))))
defjvp(arctanh_p, lambda t, x, ans: lax.div(t, lax.sub(1, _sq(x))))
defjvp(cbrt_p, lambda t, x, ans: lax.div(t, lax.mul(_sq(ans), 3)))
# x = y (x // y) + x % y, so d(x % y) = dx - (x // y) dy; likewise fmod with trunc(x / y)
defjvp(rem_p, lambda t, x, y, ans: t, lambda t, x, y, ans: lax.mul(t, lax.neg(lax.floor_divide(x, y))))
defjvp(fmod_p, lambda t, x, y, ans: t, lambda t, x, y, ans: lax.mul(t, lax.neg(lax.trunc(lax.div(x, y)))))
defjvp(arctan2_p, lambda t, y, x, ans: lax.mul(t, lax.div(x, lax.add(_sq(x), _sq(y)))),
       lambda t, y, x, ans: lax.mul(t, lax.neg(lax.div(y, lax.add(_sq(x), _sq(y))))))
defjvp(hypot_p, lambda t, x, y, ans: lax.mul(t, lax.div(x, ans)), lambda t, x, y, ans: lax.mul(t, lax.div(y, ans)))
# exp(x - ans) <= 1: the weights never overflow, unlike exp(x) / exp(ans)
defjvp(logaddexp_p, lambda t, x, y, ans: lax.mul(t, lax.exp(lax.sub(x, ans))),
       lambda t, x, y, ans: lax.mul(t, lax.exp(lax.sub(y, ans))))
defjvp(logaddexp2_p, lambda t, x, y, ans: lax.mul(t, lax.exp2(lax.sub(x, ans))),
       lambda t, x, y, ans: lax.mul(t, lax.exp2(lax.sub(y, ans))))
defjvp(copysign_p, lambda t, x, y, ans: lax.mul(t, lax.mul(lax.sign(x), lax.sign(ans))), None)
# fmax/fmin ignore NaN: x wins where it is larger or y is NaN
_extremum_jvp(fmax_p, lambda a, b: lax.gt(a, b), lambda b: lax.isnan(b))
_extremum_jvp(fmin_p, lambda a, b: lax.lt(a, b), lambda b: lax.isnan(b))

_PI = float(np.pi)


def _sinc_jvp(primals, tangents):
    """sinc'(x) = (cos(pi x) - sinc(x)) / x cancels catastrophically near 0, where its Maclaurin
    polynomial -pi^2/3 x + pi^4/30 x^3 takes over (below eps**(1/6), where the two errors balance:
    ~1e-11 relative in float64); so the rule is exact at 0 to third order. The quotient sees x with
    those entries replaced by 1: no NaN reaches a cotangent through the branch ``select`` discards."""
    (x,), (t,) = primals, tangents
    ans = lax.sinc(x)
    if isinstance(t, Zero):
        return ans, t
    near = lax.lt(lax.abs(x), float(np.finfo(x.dtype).eps) ** (1 / 6))
    safe = lax.select(near, 1, x)
    slope = lax.div(lax.sub(lax.cos(lax.mul(safe, _PI)), lax.sinc(safe)), safe)
    series = lax.mul(x, lax.add(lax.mul(lax.integer_pow(x, 2), _PI**4 / 30), -_PI**2 / 3))
    return ans, lax.mul(t, lax.select(near, series, slope))


jvp_rules[sinc_p] = _sinc_jvp


def _angle_jvp(primals, tangents):
    """arg z moves by Im(dz / z); the angle of a real number (0 or pi) is piecewise constant."""
    (z,), (t,) = primals, tangents
    ans = lax.angle(z)
    if z.dtype.kind != "c" or isinstance(t, Zero):
        return ans, Zero(ans.ssa.type)
    return ans, lax.imag(lax.div(t, z))


jvp_rules[angle_p] = _angle_jvp


def _finite_part(t, x):
    return lax.select(lax.isfinite(x), t, 0.0)


def _nan_to_num_jvp(primals, tangents, **params):
    """The identity where x is finite, constant elsewhere (per real and imaginary part)."""
    (x,), (t,) = primals, tangents
    ans = bind(nan_to_num_p, x, **params)
    if isinstance(t, Zero):
        return ans, t
    if x.dtype.kind != "c":
        return ans, _finite_part(t, x)
    re = lax.convert(_finite_part(lax.real(t), lax.real(x)), x.dtype)
    im = lax.convert(_finite_part(lax.imag(t), lax.imag(x)), x.dtype)
    return ans, lax.add(re, lax.mul(im, 1j))


jvp_rules[nan_to_num_p] = _nan_to_num_jvp


def _clip_jvp(primals, tangents):
    """The tangent of whichever operand the result is: x where it is within the bounds (ties
    included), else the bound it was clipped to; so ``x_bar = where(clipped == x, g, 0)``."""
    x, lo, hi = primals
    ans = lax.clip(x, lo, hi)
    if all(isinstance(t, Zero) for t in tangents):
        return ans, Zero(ans.ssa.type)
    t_x, t_lo, t_hi = (0.0 if isinstance(t, Zero) else t for t in tangents)
    bound = 0.0 if isinstance(t_lo, float) and isinstance(t_hi, float) else lax.select(lax.eq(ans, lo), t_lo, t_hi)
    return ans, lax.select(lax.eq(ans, x), t_x, bound)


jvp_rules[clip_p] = _clip_jvp


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import elementwise as _batch_elementwise  # noqa: E402

for _p in [v for v in globals().values() if isinstance(v, Primitive)]:  # every primitive here is elementwise
    _batch_elementwise(_p)
