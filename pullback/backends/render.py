"""Render the generated function's statements fast, to the very text libcst would print.

libcst builds and validates the code (``syntax``), but its printer walks every node through
context managers and costs about 100 us per statement: seconds for a program of 10^4 lines.
The emitters produce a small set of node kinds (names, attributes, calls, operators,
subscripts, numbers, strings, tuples; assignments, ``del``, ``return``); this module prints
those from their fields, whitespace included, in one recursive pass. Any other node (an
``if`` checking a LAPACK ``info``, a non-default whitespace kind) makes its whole statement
print through libcst. Nothing is formatted from values here: every token is a field of a node
the emitters built, so the text is libcst's, only sooner.
"""

from __future__ import annotations

import libcst as cst

INDENT = "    "


class _Unsupported(Exception):
    """A node this printer does not know: the statement prints through libcst."""


def _ws(w) -> str:
    if type(w) is cst.SimpleWhitespace:
        return w.value
    raise _Unsupported


def _paren(node, inner: str) -> str:
    if not node.lpar:
        return inner
    return ("".join("(" + _ws(p.whitespace_after) for p in node.lpar) + inner
            + "".join(_ws(p.whitespace_before) + ")" for p in node.rpar))


def _op(op) -> str:
    return _ws(op.whitespace_before) + op._get_token() + _ws(op.whitespace_after)


def _comma(comma, default: bool, default_text: str = ", ") -> str:
    if comma is cst.MaybeSentinel.DEFAULT:
        return default_text if default else ""
    if type(comma) is cst.Comma:
        return _op(comma)
    raise _Unsupported


def _arg(a: cst.Arg, default_comma: bool) -> str:
    out = a.star + _ws(a.whitespace_after_star)
    if a.keyword is not None:
        out += _expr(a.keyword)
        if a.equal is cst.MaybeSentinel.DEFAULT:
            out += " = "
        elif type(a.equal) is cst.AssignEqual:
            out += _op(a.equal)
    out += _expr(a.value) + _comma(a.comma, default_comma)
    return out + _ws(a.whitespace_after_arg)


def _elements(elements, bare_single: bool) -> str:
    if bare_single and len(elements) == 1:  # a one-element tuple: ``(x,)``
        e = elements[0]
        if type(e) is not cst.Element:
            raise _Unsupported
        return _expr(e.value) + _comma(e.comma, True, ",")
    last = len(elements) - 1
    out = []
    for i, e in enumerate(elements):
        if type(e) is not cst.Element:
            raise _Unsupported
        out.append(_expr(e.value) + _comma(e.comma, i < last))
    return "".join(out)


def _subscript_element(e: cst.SubscriptElement, default_comma: bool) -> str:
    sl = e.slice
    if type(sl) is cst.Index:
        text = (sl.star or "") + (_ws(sl.whitespace_after_star) if sl.whitespace_after_star is not None else "")
        text += _expr(sl.value)
    elif type(sl) is cst.Slice:
        text = (_expr(sl.lower) if sl.lower is not None else "") + _op(sl.first_colon)
        text += _expr(sl.upper) if sl.upper is not None else ""
        if sl.second_colon is cst.MaybeSentinel.DEFAULT:
            text += ":" if sl.step is not None else ""
        else:
            text += _op(sl.second_colon)
        text += _expr(sl.step) if sl.step is not None else ""
    else:
        raise _Unsupported
    return text + _comma(e.comma, default_comma)


def _expr(e) -> str:
    kind = type(e)
    if kind is cst.Name or kind is cst.Integer or kind is cst.Float or kind is cst.Imaginary \
            or kind is cst.SimpleString:
        return _paren(e, e.value)
    if kind is cst.Attribute:
        return _paren(e, _expr(e.value) + _op(e.dot) + _expr(e.attr))
    if kind is cst.Call:
        last = len(e.args) - 1
        args = "".join(_arg(a, i != last) for i, a in enumerate(e.args))
        return _paren(e, _expr(e.func) + _ws(e.whitespace_after_func) + "(" + _ws(e.whitespace_before_args) + args
                      + ")")
    if kind is cst.BinaryOperation:
        return _paren(e, _expr(e.left) + _op(e.operator) + _expr(e.right))
    if kind is cst.UnaryOperation:
        return _paren(e, e.operator._get_token() + _ws(e.operator.whitespace_after) + _expr(e.expression))
    if kind is cst.Comparison:
        comps = []
        for c in e.comparisons:
            if not hasattr(c.operator, "_get_token"):  # ``is not``, ``not in``: two tokens
                raise _Unsupported
            comps.append(_op(c.operator) + _expr(c.comparator))
        return _paren(e, _expr(e.left) + "".join(comps))
    if kind is cst.Subscript:
        last = len(e.slice) - 1
        items = "".join(_subscript_element(el, i != last) for i, el in enumerate(e.slice))
        return _paren(e, _expr(e.value) + _ws(e.whitespace_after_value) + "[" + _ws(e.lbracket.whitespace_after)
                      + items + _ws(e.rbracket.whitespace_before) + "]")
    if kind is cst.Tuple:
        return _paren(e, _elements(e.elements, True))
    if kind is cst.List:
        return _paren(e, "[" + _ws(e.lbracket.whitespace_after) + _elements(e.elements, False)
                      + _ws(e.rbracket.whitespace_before) + "]")
    raise _Unsupported


def _small(st, default_semicolon: bool) -> str:
    kind = type(st)
    if kind is cst.Assign:
        out = "".join(_expr(t.target) + _ws(t.whitespace_before_equal) + "=" + _ws(t.whitespace_after_equal)
                      for t in st.targets) + _expr(st.value)
    elif kind is cst.Expr:
        out = _expr(st.value)
    elif kind is cst.Del:
        out = "del" + _ws(st.whitespace_after_del) + _expr(st.target)
    elif kind is cst.AugAssign:
        out = _expr(st.target) + _op(st.operator) + _expr(st.value)
    elif kind is cst.Return:
        out = "return"
        if st.whitespace_after_return is cst.MaybeSentinel.DEFAULT:
            out += " " if st.value is not None else ""
        else:
            out += _ws(st.whitespace_after_return)
        out += _expr(st.value) if st.value is not None else ""
    else:
        raise _Unsupported
    if st.semicolon is cst.MaybeSentinel.DEFAULT:
        return out + ("; " if default_semicolon else "")
    return out + _op(st.semicolon)


def _newline(n: cst.Newline) -> str:
    return "\n" if n.value is None else n.value


def _statement(st) -> str:
    if type(st) is not cst.SimpleStatementLine or not st.body:
        raise _Unsupported
    out = []
    for line in st.leading_lines:
        out.append((INDENT if line.indent else "") + _ws(line.whitespace)
                   + (line.comment.value if line.comment is not None else "") + _newline(line.newline))
    out.append(INDENT)
    last = len(st.body) - 1
    out.extend(_small(small, i != last) for i, small in enumerate(st.body))
    tw = st.trailing_whitespace
    out.append(_ws(tw.whitespace) + (tw.comment.value if tw.comment is not None else "") + _newline(tw.newline))
    return "".join(out)


def body(statements: list[cst.BaseStatement]) -> str:
    """The statements as a function body (indented once), exactly as libcst prints them; text items are
    statements rendered already."""
    out = []
    for st in statements:
        if type(st) is str:  # already rendered (``templates``)
            out.append(st)
            continue
        try:
            out.append(_statement(st))
        except _Unsupported:  # libcst prints this one: an indented block holding it, less its header line
            out.append(cst.Module([]).code_for_node(cst.IndentedBlock([st]))[1:])
    return "".join(out)
