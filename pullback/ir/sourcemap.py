"""Map lines of user source to statements and assignment targets.

Used to name IR values after the user's variables and to put each user line
above the generated statements it produced. Read with the standard ``ast``
module: positions are all we need, and ``ast`` gives them directly and fast.
"""

from __future__ import annotations

import ast
import functools
import linecache
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Statement:
    first: int
    last: int
    targets: tuple[str, ...]  # empty when the statement assigns no plain names
    repeats: bool = False  # it runs code of its own several times (a comprehension): steps within one execution
    called: tuple[str, ...] = ()  # `k2 = rhs(u + h * k1)`: the targets of the call's result alone


def statement_at(filename: str, lineno: int) -> Statement | None:
    """The innermost simple statement of ``filename`` covering ``lineno``."""
    lines = linecache.getlines(filename)
    if not lines:
        return None
    return _statements("".join(lines)).get(lineno)


def statement_text(filename: str, stmt: Statement, max_len: int = 100) -> str:
    """The statement's source on one line: whitespace collapsed, control characters dropped."""
    lines = linecache.getlines(filename)[stmt.first - 1 : stmt.last]
    text = " ".join(" ".join(line.split()) for line in lines)
    text = "".join(c for c in text if c.isprintable())
    return text if len(text) <= max_len else text[: max_len - 3] + "..."


def _names(target: ast.expr) -> tuple[str, ...] | None:
    if isinstance(target, ast.Name):
        return (target.id,)
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        return (target.value.id,)  # `y[i] = v` makes a new value of y
    if isinstance(target, ast.Tuple | ast.List):
        names = [_names(t) for t in target.elts]
        if all(n is not None and len(n) == 1 for n in names):
            return tuple(n[0] for n in names)
    return None


@functools.lru_cache(maxsize=64)
def _statements(text: str) -> dict[int, Statement]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    by_line: dict[int, Statement] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or isinstance(node, _COMPOUND):
            continue
        targets: tuple[str, ...] = ()
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            targets = _names(node.targets[0]) or ()
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = _names(node.target) or ()
        if len(targets) == 1 and isinstance(getattr(node, "value", None), _CONTAINERS):
            targets = ()  # `a = (x, y)`: no single value is `a`
        if targets and any(isinstance(n, ast.Lambda) for n in ast.walk(node)):
            targets = ()  # `f = jit(lambda x: np.sum(x))`: the lambda's values are not `f`
        called: tuple[str, ...] = ()
        if targets and _calls_a_function_on_expressions(getattr(node, "value", None)):
            # `k2 = rhs(u + h * k1)`: this line computes the argument; `rhs`'s lines, `k2`
            targets, called = (), targets
        repeats = bool(targets) and any(isinstance(n, _REPEATING) for n in ast.walk(node))
        stmt = Statement(node.lineno, node.end_lineno or node.lineno, targets, repeats, called)
        for line in range(stmt.first, stmt.last + 1):
            by_line[line] = stmt
    # a lambda inside a statement of several lines (``minimize(\n pb.value_and_grad(lambda w: ...),\n ...)``):
    # its own lines are the function's, quoted for its values, not the statement's first line
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda):
            outer = by_line.get(node.lineno)
            last = node.end_lineno or node.lineno
            if outer is not None and outer.last - outer.first > last - node.lineno:
                inner = Statement(node.lineno, last, ())
                for line in range(inner.first, inner.last + 1):
                    by_line[line] = inner
    return by_line


def _calls_a_function_on_expressions(value) -> bool:
    """``f(u + h * k)``: a function called by a plain name (the user's own, most likely: NumPy's are
    ``np.``...) on an argument computed in place, so the values this line makes are the argument's."""
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and any(not isinstance(a, ast.Name | ast.Constant | ast.Starred) for a in value.args))


_REPEATING = (ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)
_CONTAINERS = (ast.Tuple, ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)
_COMPOUND = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
    ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
)
