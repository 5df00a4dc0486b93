"""Names of a structured argument's leaves from the statement that unpacks it in the user's function.

A scan's step receives its carry as one tuple, ``def step(carry, v_t): mu_h, S_hh, nll = carry``;
a model, its parameters, ``W, b = params``. Unpacking a Python tuple of tracers records no
equation, so the tracer never sees those names: without them the leaves print as ``carry_0``,
``carry_1``, ... This module reads the function's own source for the first statement of its body
that unpacks the parameter, ``a, (b, c) = param``, and, when the target's shape is the
argument's, names each leaf after its target (``_`` and starred targets keep the default).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable

from pullback.ir import callables
from pullback.tree import LEAF


@functools.lru_cache(maxsize=256)
def _unpackings(code) -> dict[str, ast.expr]:
    """Parameter name -> the target of the first top-level statement ``target = name`` of the function
    whose code object this is."""
    try:
        lines, _ = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return {}
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn.name != code.co_name:
        return {}
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args)}
    found: dict[str, ast.expr] = {}
    for stmt in fn.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Name)
                and stmt.value.id in params and isinstance(stmt.targets[0], ast.Tuple | ast.List)):
            found.setdefault(stmt.value.id, stmt.targets[0])
    return found


def _match(target: ast.expr, treedef) -> list[str | None] | None:
    """The name of each leaf of ``treedef`` that ``target`` unpacks it into (None: no name of its own);
    None when the shapes differ."""
    if isinstance(target, ast.Name):
        if target.id == "_":
            return [None] * _count(treedef)
        if treedef is LEAF:
            return [target.id]
        return None  # a structure kept whole: its leaves keep their default names
    if isinstance(target, ast.Tuple | ast.List):
        if treedef is LEAF or treedef[0] not in (tuple, list) or len(treedef[-1]) != len(target.elts):
            return None
        names: list[str | None] = []
        for elt, child in zip(target.elts, treedef[-1]):
            found = _match(elt, child)
            if found is None:
                return None
            names += found
        return names
    return None


def _count(treedef) -> int:
    return 1 if treedef is LEAF else sum(_count(c) for c in treedef[-1])


def leaf_names(fn: Callable | None, param: str, treedef) -> list[str | None] | None:
    """The names ``fn``'s source unpacks its parameter ``param`` (of structure ``treedef``) into, one per
    leaf in flatten's order (None where a leaf gets no name); None when it does not unpack it so."""
    code = getattr(callables.unwrapped(fn), "__code__", None) if fn is not None else None
    if code is None or treedef is LEAF:
        return None
    target = _unpackings(code).get(param)
    return _match(target, treedef) if target is not None else None
