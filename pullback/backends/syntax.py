"""Small constructors of libcst nodes: generated code is built as syntax, never as strings."""

from __future__ import annotations

import math
from collections.abc import Sequence

import libcst as cst
import numpy as np

Expr = cst.BaseExpression


def name(s: str) -> cst.Name:
    return cst.Name(s)


def dotted(path: str) -> Expr:
    """``np.linalg.norm`` as an Attribute chain."""
    head, *rest = path.split(".")
    node: Expr = cst.Name(head)
    for part in rest:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


def arg(value: Expr, keyword: str | None = None) -> cst.Arg:
    if keyword is None:
        return cst.Arg(value=value)
    return cst.Arg(value=value, keyword=cst.Name(keyword),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def call(func: str | Expr, *args: Expr, **kwargs: Expr) -> cst.Call:
    f = dotted(func) if isinstance(func, str) else func
    return cst.Call(func=f, args=[arg(a) for a in args] + [arg(v, k) for k, v in kwargs.items()])


def method(obj: Expr, meth: str, *args: Expr, **kwargs: Expr) -> cst.Call:
    return call(cst.Attribute(value=atomic(obj), attr=cst.Name(meth)), *args, **kwargs)


def attribute(obj: Expr, attr: str) -> cst.Attribute:
    return cst.Attribute(value=atomic(obj), attr=cst.Name(attr))


def number(value) -> Expr:
    """A Python number as source; non-finite values as ``np.inf`` / ``np.nan``."""
    if isinstance(value, bool | np.bool_):
        return cst.Name("True" if value else "False")
    if isinstance(value, complex):
        re, im = number(value.real), cst.Imaginary(repr(abs(value.imag)) + "j")
        if not math.isfinite(value.imag):
            im = cst.BinaryOperation(number(abs(value.imag)), cst.Multiply(), cst.Imaginary("1j"))
        op = cst.Subtract() if math.copysign(1, value.imag) < 0 else cst.Add()
        return cst.BinaryOperation(re, op, im, lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    if isinstance(value, float):
        if math.isnan(value):
            return dotted("np.nan")
        mag = dotted("np.inf") if math.isinf(value) else cst.Float(repr(abs(value)))
    else:
        mag = cst.Integer(str(abs(int(value))))
    return cst.UnaryOperation(cst.Minus(), mag) if math.copysign(1, value) < 0 else mag


def ints(values: Sequence[int]) -> cst.Tuple:
    """A tuple of ints, ``(3,)`` for one."""
    elems = [cst.Element(number(int(v))) for v in values]
    if len(elems) == 1:
        elems = [cst.Element(elems[0].value, comma=cst.Comma())]
    return cst.Tuple(elems)


def tuple_(values: Sequence[Expr], parens: bool = True) -> cst.Tuple:
    elems = [cst.Element(v) for v in values]
    if len(elems) == 1:
        elems = [cst.Element(elems[0].value, comma=cst.Comma())]
    return cst.Tuple(elems) if parens else cst.Tuple(elems, lpar=[], rpar=[])


def dtype(dt: np.dtype) -> Expr:
    return dotted(f"np.{np.dtype(dt).name}" if np.dtype(dt) != np.bool_ else "np.bool_")


def parens(e: Expr) -> Expr:
    return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def atomic(e: Expr) -> Expr:
    """``e`` parenthesised unless it is a name, attribute, call or subscript."""
    if isinstance(e, cst.Name | cst.Attribute | cst.Call | cst.Subscript | cst.Integer | cst.Float | cst.SimpleString
                  ) or e.lpar:
        return e
    return parens(e)


_BINOPS = {"+": cst.Add, "-": cst.Subtract, "*": cst.Multiply, "/": cst.Divide, "**": cst.Power,
           "@": cst.MatrixMultiply, "//": cst.FloorDivide, "%": cst.Modulo, "&": cst.BitAnd, "|": cst.BitOr,
           "^": cst.BitXor}
_COMPARE = {"==": cst.Equal, "!=": cst.NotEqual, "<": cst.LessThan, "<=": cst.LessThanEqual,
            ">": cst.GreaterThan, ">=": cst.GreaterThanEqual}


_PRECEDENCE = {cst.Add: 2, cst.Subtract: 2, cst.Multiply: 3, cst.Divide: 3, cst.MatrixMultiply: 3, cst.Power: 5,
               cst.FloorDivide: 3, cst.Modulo: 3, cst.BitOr: 1.25, cst.BitXor: 1.5, cst.BitAnd: 1.75}


def _precedence(e: Expr) -> float:
    """How tightly ``e`` binds, as Python's grammar says (higher binds tighter)."""
    if e.lpar:
        return math.inf
    if isinstance(e, cst.BinaryOperation):
        return _PRECEDENCE[type(e.operator)]
    if isinstance(e, cst.Comparison):
        return 1
    if isinstance(e, cst.UnaryOperation):
        return 4 if isinstance(e.operator, cst.Minus | cst.Plus | cst.BitInvert) else 0.5
    if isinstance(e, cst.BooleanOperation | cst.IfExp | cst.Lambda):
        return 0
    return math.inf


def binop(lhs: Expr, op: str, rhs: Expr) -> Expr:
    """``lhs op rhs`` with the parentheses that keep the operands' grouping."""
    p = 1 if op in _COMPARE else _PRECEDENCE[_BINOPS[op]]
    right_assoc = op == "**"
    # comparisons chain (a == b == c is not (a == b) == c), so they never nest bare
    if _precedence(lhs) < p or (_precedence(lhs) == p and (right_assoc or op in _COMPARE)):
        lhs = parens(lhs)
    if _precedence(rhs) < p or (_precedence(rhs) == p and not right_assoc):
        rhs = parens(rhs)
    if op in _COMPARE:
        return cst.Comparison(left=lhs, comparisons=[cst.ComparisonTarget(_COMPARE[op](), rhs)])
    return cst.BinaryOperation(lhs, _BINOPS[op](), rhs)


def neg(e: Expr) -> Expr:
    return cst.UnaryOperation(cst.Minus(), atomic(e) if isinstance(e, cst.UnaryOperation) else e)


def subscript(value: Expr, index: Sequence[cst.BaseSlice | Expr]) -> cst.Subscript:
    elems = [cst.SubscriptElement(i if isinstance(i, cst.BaseSlice) else cst.Index(i)) for i in index]
    return cst.Subscript(value=atomic(value), slice=elems)


def slice_(start: int | None, stop: int | None, step: int | None) -> cst.Slice:
    def opt(v):
        return None if v is None else number(v)

    return cst.Slice(lower=opt(start), upper=opt(stop), step=opt(step))


def assign(targets: Sequence[cst.Name], value: Expr) -> cst.SimpleStatementLine:
    target: Expr = targets[0] if len(targets) == 1 else cst.Tuple([cst.Element(t) for t in targets], lpar=[],
                                                                  rpar=[])
    return cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], value)])


def statement(expr_or_small: cst.BaseSmallStatement | Expr) -> cst.SimpleStatementLine:
    small = expr_or_small if isinstance(expr_or_small, cst.BaseSmallStatement) else cst.Expr(expr_or_small)
    return cst.SimpleStatementLine([small])


def _text(part: str) -> str:
    return part.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def message(template: str, *values: Expr, suffix: str = "") -> Expr:
    """Our message as a string literal: ``f"... {info} ... (at f.py:3)"`` for ``template`` with a ``{}``
    per value, then ``suffix`` (the user's ``file:line``). A long line breaks it between words (``lines``)."""
    if template.count("{}") != len(values):
        raise ValueError(f"{template.count('{}')} fields for {len(values)} values")
    return _literal(template.replace("{", "{{").replace("}", "}}").replace("{{}}", "{}")
                    + suffix.replace("{", "{{").replace("}", "}}"), values) if values else _literal(
        template + suffix, ())


def _literal(template: str, values: Sequence[Expr]) -> Expr:
    """``"text"``, or ``f"text {value} text"`` with a ``{}`` in ``template`` per value."""
    if not values:
        return cst.SimpleString('"' + _text(template) + '"')
    parts: list[cst.BaseFormattedStringContent] = []
    for k, part in enumerate(template.split("{}")):
        if part:
            parts.append(cst.FormattedStringText(_text(part)))
        if k < len(values):
            parts.append(cst.FormattedStringExpression(values[k]))
    return cst.FormattedString(parts, start='f"', end='"')
