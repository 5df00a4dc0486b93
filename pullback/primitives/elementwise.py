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
