"""Map lines of user source to statements and assignment targets.

Used to name IR values after the user's variables and to put each user line
above the generated statements it produced. Read with the standard ``ast``
module: positions are all we need, and ``ast`` gives them directly and fast.
"""

from __future__ import annotations

import ast
import functools
import linecache
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from pullback.ir.core import SourceInfo


@dataclass(frozen=True, slots=True)
class Statement:
    first: int
    last: int
    targets: tuple[str, ...]  # empty when the statement assigns no plain names
    repeats: bool = False  # it runs code of its own several times (a comprehension): steps within one execution
    called: tuple[str, ...] = ()  # `k2 = rhs(u + h * k1)`: the targets of the call's result alone
    # `a, b = b, f(a)`: the targets given a name's value, which no equation makes, each with that name
    # (("a", "b"),); ``targets`` then holds the others alone
    renames: tuple[tuple[str, str], ...] = ()


def statement_at(filename: str, lineno: int) -> Statement | None:
    """The innermost simple statement of ``filename`` covering ``lineno``."""
    lines = linecache.getlines(filename)
    if not lines:
        return None
    return _statements("".join(lines)).get(lineno)


def renamed(src: SourceInfo | None, name: str) -> str:
    """The target that the statement at ``src`` gives ``name``'s value (``a`` of ``a, b = b, f(a)``), or ""."""
    stmt = src and name and statement_at(src.filename, src.lineno)
    return next((t for t, v in stmt.renames if v == name), "") if stmt else ""


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


@functools.lru_cache(maxsize=2)
def _parsed(text: str) -> ast.Module | None:
    """``text``'s tree, for its statements and its loops alike (read one after the other: parsed once)."""
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


@functools.lru_cache(maxsize=64)
def _statements(text: str) -> dict[int, Statement]:
    tree = _parsed(text)
    if tree is None:
        return {}
    simple, lambdas = _simple_statements(tree)
    by_line: dict[int, Statement] = {}
    for node, kinds in simple:
        targets: tuple[str, ...] = ()
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            targets = _names(node.targets[0]) or ()
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = _names(node.target) or ()
        if len(targets) == 1 and isinstance(getattr(node, "value", None), _CONTAINERS):
            targets = ()  # `a = (x, y)`: no single value is `a`
        if targets and ast.Lambda in kinds:
            targets = ()  # `f = jit(lambda x: np.sum(x))`: the lambda's values are not `f`
        renames: tuple[tuple[str, str], ...] = ()
        value = getattr(node, "value", None)
        if len(targets) > 1 and isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(targets):
            renames = tuple((t, v.id) for t, v in zip(targets, value.elts) if isinstance(v, ast.Name))
            targets = tuple(t for t, v in zip(targets, value.elts) if not isinstance(v, ast.Name))
        called: tuple[str, ...] = ()
        if targets and _calls_a_function_on_expressions(getattr(node, "value", None)):
            # `k2 = rhs(u + h * k1)`: this line computes the argument; `rhs`'s lines, `k2`
            targets, called = (), targets
        repeats = bool(targets) and not kinds.isdisjoint(_REPEATING)
        stmt = Statement(node.lineno, node.end_lineno or node.lineno, targets, repeats, called, renames)
        for line in range(stmt.first, stmt.last + 1):
            by_line[line] = stmt
    # a loop's header (``for t in range(n):``) stands for the loop: a rolled loop's comment quotes it
    for first, header, _, _, _ in _loops(text):
        for line in range(first, header + 1):
            by_line.setdefault(line, Statement(first, header, ()))
    # a lambda inside a statement of several lines (``minimize(\n pb.value_and_grad(lambda w: ...),\n ...)``):
    # its own lines are the function's, quoted for its values, not the statement's first line
    for node in lambdas:
        outer = by_line.get(node.lineno)
        last = node.end_lineno or node.lineno
        if outer is not None and outer.last - outer.first > last - node.lineno:
            inner = Statement(node.lineno, last, ())
            for line in range(inner.first, inner.last + 1):
                by_line[line] = inner
    return by_line


def _simple_statements(tree: ast.AST) -> tuple[list[tuple[ast.stmt, set[type]]], list[ast.Lambda]]:
    """The simple statements of ``tree``, each with the kinds of node inside it, and its lambdas, both in
    ``ast.walk``'s order (breadth first): one pass over the nodes, not one more per statement."""
    simple: list[tuple[ast.stmt, set[type]]] = []
    lambdas: list[ast.Lambda] = []
    queue = deque([(tree, None)])
    pop, push, node_type = queue.popleft, queue.append, ast.AST
    while queue:
        node, kinds = pop()
        kind = type(node)
        if kinds is not None:
            kinds.add(kind)
        elif issubclass(kind, ast.stmt) and not issubclass(kind, _COMPOUND):
            kinds = set()
            simple.append((node, kinds))
        if kind is ast.Lambda:
            lambdas.append(node)
        for field in node._fields:
            child = getattr(node, field, None)
            if isinstance(child, list):
                for item in child:
                    if isinstance(item, node_type):
                        push((item, kinds))
            elif isinstance(child, node_type):
                push((child, kinds))
    return simple, lambdas


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


@functools.lru_cache(maxsize=64)
def _loops(text: str) -> tuple[tuple[int, int, int, int, int], ...]:
    """Each ``for`` and ``while`` statement of ``text``: (its first line, its header's last line, its last
    line, and the first and last lines of the function holding it; 0, 0 at module level)."""
    tree = _parsed(text)
    if tree is None:
        return ()
    found = []
    stack: list[tuple[ast.AST, int, int]] = [(tree, 0, 0)]
    while stack:
        node, fn_first, fn_last = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            fn_first, fn_last = node.lineno, node.end_lineno or node.lineno
        elif isinstance(node, _LOOPS) and node.body:
            header = max(node.lineno, node.body[0].lineno - 1)
            found.append((node.lineno, header, node.end_lineno or node.lineno, fn_first, fn_last))
        # statements hold statements only in their blocks (an expression holds none, a lambda's body is one):
        # the blocks alone are walked, not every node of the file (a third of the time of parsing it, before)
        for block in _BLOCKS:
            children = getattr(node, block, None)
            if type(children) is list:
                stack.extend((child, fn_first, fn_last) for child in children)
    return tuple(sorted(found))


# the fields holding statements (an ``except``'s and a ``case``'s own ``body``: under ``handlers``, ``cases``)
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


@dataclass(frozen=True, slots=True)
class Loop:
    """A ``for`` or ``while`` statement of the user's: its file, lines, and the function holding it."""

    filename: str
    first: int
    header: int  # the header's last line
    last: int
    function: tuple[int, int]  # the first and last lines of the function holding it (0, 0: the module)


def user_loop(sources: Iterable[SourceInfo | None]) -> Loop | None:
    """The innermost loop of the user's that holds the lines of one step of a rolled loop (``sources``): of
    the function of the first line inside a loop (the lines of the helpers the step calls, ``pb.grad(loss)``'s
    included, are in other functions, outside it); None where no line is inside a loop."""
    holding: list = []
    files: dict[str, tuple] = {}  # each file's loops, read once
    sources = list(dict.fromkeys(src for src in sources if src is not None))
    for anchor in sources:
        loops = files.get(anchor.filename)
        if loops is None:
            loops = files[anchor.filename] = _loops("".join(linecache.getlines(anchor.filename)))
        holding = [loop for loop in loops if loop[1] < anchor.lineno <= loop[2]]  # (sorted: innermost last)
        if holding:
            break
    if not holding:
        return None
    filename, function = anchor.filename, holding[-1][3:]
    lines = [src.lineno for src in sources if src.filename == filename]
    lines = [n for n in lines if function[0] <= n <= function[1] or not function[1]]
    for first, header, last, fn_first, fn_last in reversed(holding):
        if all(header < n <= last for n in lines):
            return Loop(filename, first, header, last, (fn_first, fn_last))
    return None


def header_source(loop: Loop | None) -> SourceInfo | None:
    """The loop's header (``for t in range(n):``): the line a rolled loop's comment quotes."""
    return None if loop is None else _source(loop.filename, loop.first)


def start_source(loop: Loop | None, name: str) -> SourceInfo | None:
    """The user's statement that starts the loop's carry ``name``: the last assignment of ``name`` before the
    loop in the function holding it (``nll = 0.0``); None where there is none."""
    if loop is None or not name:
        return None
    fn_first, fn_last = loop.function
    text = "".join(linecache.getlines(loop.filename))
    starts = [stmt.first for line, stmt in _statements(text).items()
              if fn_first <= line < loop.first and line == stmt.first and name in stmt.targets
              and (stmt.last <= fn_last or not fn_last)]
    return _source(loop.filename, max(starts)) if starts else None


@functools.lru_cache(maxsize=256)
def _source(filename: str, lineno: int) -> SourceInfo:
    return SourceInfo(filename, lineno)  # (one object per line, as the tracer's)


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
