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

from pullback import lax  # noqa: E402
from pullback.transforms.jvp import Zero, defjvp, deflinear, defzero, jvp_rules  # noqa: E402
from pullback.transforms.transpose import Linear, transpose_rules  # noqa: E402

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
defjvp(pow_p,
       lambda t, x, y, ans: lax.mul(t, lax.mul(y, lax.pow(x, lax.sub(y, 1)))),
       lambda t, x, y, ans: lax.mul(t, lax.mul(lax.log(x), ans)))
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
        return s, Zero(s.var.type)
    r = lax.convert(lax.abs(z), z.dtype)
    radial = lax.convert(lax.real(lax.mul(t, lax.conj(s))), z.dtype)
    return s, lax.div(lax.sub(t, lax.mul(radial, s)), r)


jvp_rules[sign_p] = _sign_jvp
deflinear(real_p)
deflinear(imag_p)
deflinear(conj_p)
for _p in (eq_p, ne_p, lt_p, le_p, gt_p, ge_p):
    defzero(_p)


def _extremum_share(x, y, first_wins):
    """1 where x wins, 0 where y wins, 1/2 at ties (so the derivative is symmetric)."""
    return lax.add(lax.convert(first_wins(x, y), x.dtype), lax.mul(lax.convert(lax.eq(x, y), x.dtype), 0.5))


def _extremum_jvp(prim, first_wins):
    def share(x, y):
        x_arr = x if not isinstance(x, Literal) else y
        s = _extremum_share(x, y, first_wins)
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
        return ans, Zero(ans.var.type)
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
