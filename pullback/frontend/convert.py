"""Scoped conversion of the user's code: how NumPy's and SciPy's names reach pullback without
changing NumPy or SciPy.

Most of NumPy reaches a tracer through its protocols (``__array_ufunc__``, ``__array_function__``).
What does not (``np.array([x, y])``, ``scipy.special.logsumexp``, ``rs.standard_normal(3)``, which
sees no tracer at all) is found where the user calls it: a traced function runs as a *converted*
copy, compiled from its own source with every call ``f(a, b=c)`` rewritten as
``__pullback_call__(f, a, b=c)``, arithmetic ``a * b`` as ``__pullback_call__(operator.mul, a, b)``,
``a[k]`` as ``__pullback_index__(a, k)`` (a key with slices, ``a[1:, 0]``, passed as
``__pullback_keys__[1:, 0]``), an index assignment ``a[k] = v`` as ``__pullback_setitem__(a, k, v)``
and a name read as ``__pullback_load__(a)`` (see ``_Calls``). The dispatcher, given by ``install``,
decides by the identity of ``f``: pullback's implementation of a NumPy or SciPy function, a random
draw recorded as an equation, the user's own function converted in turn, or else ``f`` itself. So
a name bound before the trace (``from scipy.special import logsumexp``) is still seen, and nothing
outside the traced code changes: other threads, pickling, ``inspect.signature`` and an interrupted
trace see NumPy and SciPy as they are.

The copy shares everything with the original but its code: globals (writes land in the user's
module), defaults, and closure cells (``nonlocal`` works), with more cells: the dispatchers, the
``operator`` module and the key maker. Line numbers and the file name are the original's, so
tracebacks and pullback's source map point at the user's lines. ``operator.mul(a, b)`` is ``a * b``
to the letter, reflected operators included. A function without source (``exec``, the REPL without
a file) runs unconverted: NumPy's protocols still reach it, and what they do not reach fails with
pullback's error. Converted code is made once per code object.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dis
import linecache
import operator
import os
import sys
import sysconfig
import types
from collections.abc import Callable

CALL = "__pullback_call__"
INDEX = "__pullback_index__"
SETITEM = "__pullback_setitem__"
LOAD = "__pullback_load__"
OPERATOR = "__pullback_operator__"  # the ``operator`` module: ``a * b`` is called as ``operator.mul(a, b)``
KEYS = "__pullback_keys__"  # ``KEYS[1:, 0]`` is the key ``(slice(1, None), 0)``: slice syntax as a value

# arithmetic (not comparisons, nor bitwise operators on masks), by the ``operator`` function that is it
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.MatMult: "matmul",
           ast.Pow: "pow", ast.FloorDiv: "floordiv", ast.Mod: "mod"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos"}
# ``a[k] op= v``: the in-place operator, which Python's own statement applies to ``a[k]``
_INPLACE = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.Div: "itruediv", ast.MatMult: "imatmul",
            ast.Pow: "ipow", ast.FloorDiv: "ifloordiv", ast.Mod: "imod", ast.BitAnd: "iand", ast.BitOr: "ior",
            ast.BitXor: "ixor", ast.LShift: "ilshift", ast.RShift: "irshift"}

# calls that read or write the caller's own frame: rewriting them would move them into the dispatcher's
_FRAME_CALLS = frozenset({"super", "locals", "globals", "vars", "eval", "exec", "dir", "breakpoint", "__import__"})


class _Keys:
    """``KEYS[k]`` is ``k``: a subscript's key, slices included, as an argument of the dispatchers."""

    def __getitem__(self, key):
        return key


def _key(node: ast.Subscript) -> ast.expr:
    """The key of ``a[k]`` as an expression: ``k`` itself unless it holds slice syntax (``KEYS[1:, 0]``)."""
    key = node.slice
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    if not any(isinstance(p, ast.Slice) for p in parts):
        return key
    return ast.copy_location(ast.Subscript(ast.Name(KEYS, ast.Load()), key, ast.Load()), key)


class _Calls(ast.NodeTransformer):
    """``f(a, *b, c=d)`` -> ``__pullback_call__(f, a, *b, c=d)``; ``a * b`` -> ``__pullback_call__(operator.mul,
    a, b)``; ``a[k]`` -> ``__pullback_index__(a, k)``; ``a[k] = v`` -> ``__pullback_setitem__(a, k, v)`` (and
    ``a[k] += v`` -> ``__pullback_setitem__(a, k, v, operator.iadd)``); a name read, other than a callee,
    -> ``__pullback_load__(a)``.

    The stores and loads are for NumPy arrays made inside the traced function and filled with traced
    values (``traj = np.zeros((T, 2))``, then ``traj[t] = y``): such an array becomes a traced value,
    and every later read of it, by any name, through a call or as an operand, is that value's.
    ``ifexps``: where each conditional expression starts, for ``_ControlFlow`` (which rewrites only those);
    ``globals``: whether a ``global`` statement was seen (where none was, ``_ControlFlow`` looks for none)."""

    def __init__(self):
        self.ifexps: list[tuple[int, int]] = []
        self.globals = False

    def visit_Global(self, node: ast.Global) -> ast.AST:
        self.globals = True
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.ifexps.append((node.lineno, node.col_offset))
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name):  # the callee, found by identity: not a value to load
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
        else:
            self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("locals", "vars") and not node.args:
            return _own_locals(node)
        if isinstance(node.func, ast.Name) and node.func.id in _FRAME_CALLS:
            return node
        return ast.copy_location(ast.Call(ast.Name(CALL, ast.Load()), [node.func, *node.args], node.keywords), node)

    def _operator(self, name: str, operands: list, node: ast.AST) -> ast.AST:
        func = ast.Attribute(ast.Name(OPERATOR, ast.Load()), name, ast.Load())
        return ast.copy_location(ast.Call(ast.Name(CALL, ast.Load()), [func, *operands], []), node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        name = _BINARY.get(type(node.op))
        return node if name is None else self._operator(name, [node.left, node.right], node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        name = _UNARY.get(type(node.op))
        return node if name is None else self._operator(name, [node.operand], node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return ast.copy_location(ast.Call(ast.Name(INDEX, ast.Load()), [node.value, _key(node)], []), node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and not node.id.startswith("__pullback_"):
            return ast.copy_location(ast.Call(ast.Name(LOAD, ast.Load()), [node], []), node)
        return node

    def visit_match_case(self, node: ast.match_case) -> ast.AST:
        """A ``case`` pattern is no expression (``case np.inf:``, ``case Point(x=0):``): left as written."""
        if node.guard is not None:
            node.guard = self.visit(node.guard)
        node.body = [b for stmt in node.body for b in _as_list(self.visit(stmt))]
        return node

    def _setitem(self, target: ast.Subscript, value: ast.expr, op: str | None = None) -> ast.stmt:
        args = [target.value, _key(target), value]
        if op is not None:
            args.append(ast.Attribute(ast.Name(OPERATOR, ast.Load()), op, ast.Load()))
        return ast.copy_location(ast.Expr(ast.Call(ast.Name(SETITEM, ast.Load()), args, [])), target)

    def visit_Assign(self, node: ast.Assign) -> ast.AST | list[ast.stmt]:
        """``a[k] = b = v`` -> ``__pullback_value__ = v; __pullback_setitem__(a, k, __pullback_value__);
        b = __pullback_value__``: the value first, then each target from the left, as Python assigns."""
        self.generic_visit(node)
        if not any(isinstance(t, ast.Subscript) for t in node.targets):
            return node
        value = "__pullback_value__"
        out: list[ast.stmt] = [ast.copy_location(ast.Assign([ast.Name(value, ast.Store())], node.value), node)]
        for t in node.targets:
            read = ast.Name(value, ast.Load())
            out.append(self._setitem(t, read) if isinstance(t, ast.Subscript)
                       else ast.copy_location(ast.Assign([t], read), node))
        return out

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.target, ast.Subscript):
            return node
        return self._setitem(node.target, node.value, _INPLACE[type(node.op)])


def _as_list(node) -> list:
    return node if isinstance(node, list) else [node]


def _own_locals(node: ast.Call) -> ast.AST:
    """``locals()`` -> ``{k: v for k, v in locals().items() if k[:11] != "__pullback_"}``: the frame's own
    names, without the dispatchers' cells (the first iterable is evaluated in the function's scope)."""
    template = ast.parse('{k: v for k, v in locals().items() if k[:11] != "__pullback_"}', mode="eval").body
    template.generators[0].iter.func.value = node  # the user's own ``locals()`` call, with its position
    for n in ast.walk(template):
        ast.copy_location(n, node)
    return template


# --- control flow ---------------------------------------------------------------------------------
# ``if``, ``while`` and ``for i in range(...)`` become calls of ``control_flow`` with their blocks as
# nested functions assigning the enclosing function's variables through ``nonlocal``, a getter and a
# setter of those variables; ``a if c else b`` becomes ``ifexp(c, lambda: a, lambda: b)``. A statement
# that returns, breaks, continues or yields from inside a block is left as it is, but an ``if`` one of
# whose branches returns takes the rest of the block into its other branch first, so that every path
# of it returns (``if x > 0: return a`` followed by ``return b``).

FLOW = "__pullback_flow__"
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)


def _stores(stmts: list[ast.stmt]) -> tuple[list[str], bool]:
    """The names the statements assign (in order, not inside nested scopes), and whether they hold
    something that cannot move into a nested function (``global``, ``nonlocal``, ``except ... as``)."""
    names: dict[str, None] = {}  # the converter's own helpers (an inner statement's) are not the user's
    awkward = False
    todo: list[ast.AST] = list(reversed(stmts))
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            names[n.id] = None
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[n.name] = None
            continue
        elif isinstance(n, ast.alias):
            names[(n.asname or n.name).split(".")[0]] = None
        elif isinstance(n, ast.Global | ast.Nonlocal | ast.ExceptHandler | ast.NamedExpr):
            awkward = True
        if not isinstance(n, _SCOPES):
            todo.extend(reversed(list(ast.iter_child_nodes(n))))
    return [n for n in names if not n.startswith("__pullback_") or n.startswith(_FLAGS)], awkward


def _jumps(stmts: list[ast.stmt], loops: bool) -> bool:
    """Whether the statements return or yield, or (``loops``: at this loop's level) break or continue."""
    todo = [(s, loops) for s in stmts]
    while todo:
        n, here = todo.pop()
        if isinstance(n, ast.Return | ast.Yield | ast.YieldFrom | ast.Await) or (
                here and isinstance(n, ast.Break | ast.Continue)):
            return True
        if isinstance(n, _SCOPES):
            continue
        inner = here and not isinstance(n, ast.For | ast.While | ast.AsyncFor)
        todo.extend((c, inner) for c in ast.iter_child_nodes(n))
    return False


def _returns(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], ast.Return)


class _ControlFlow(ast.NodeTransformer):
    """Runs after ``_Calls``: the code it adds calls ``control_flow`` directly."""

    def __init__(self, calls: _Calls):
        self.count = 0
        self.declared: list[set[str]] = [set()]  # names declared global in the enclosing functions
        self.ifexps = calls.ifexps  # where ``_Calls`` saw conditional expressions: a statement without one is kept
        self.globals = calls.globals

    def _has_ifexp(self, stmt: ast.stmt) -> bool:
        start, end = (stmt.lineno, stmt.col_offset), (stmt.end_lineno, stmt.end_col_offset)
        return any(start <= spot <= end for spot in self.ifexps)  # type: ignore[operator]

    def visit_FunctionDef(self, node):
        self.declared.append({n for s in ast.walk(node) if isinstance(s, ast.Global) for n in s.names}
                             if self.globals else set())
        node.body = self._block(node.body)
        self.declared.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        thunk = ast.arguments([], [], None, [], [], None, [])
        call = ast.Call(ast.Attribute(ast.Name(FLOW, ast.Load()), "ifexp", ast.Load()),
                        [node.test, ast.Lambda(thunk, node.body), ast.Lambda(thunk, node.orelse)], [])
        return ast.copy_location(call, node)

    def _block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, ast.If) and _returns(stmt.body) != _returns(stmt.orelse) and i + 1 < len(stmts):
                rest = stmts[i + 1:]  # runs only where the branch did not return: it is the other branch's
                if _returns(stmt.body):
                    stmt.orelse = stmt.orelse + rest
                else:
                    stmt.body = stmt.body + rest
                out.extend(self._statement(stmt))
                return out
            out.extend(self._statement(stmt))
        return out

    def _statement(self, stmt: ast.stmt) -> list[ast.stmt]:
        if isinstance(stmt, ast.If):
            stmt.body, stmt.orelse = self._block(stmt.body), self._block(stmt.orelse)
            stmt.test = self.visit(stmt.test)
            both = _returns(stmt.body) and _returns(stmt.orelse)
            blocks = stmt.body + stmt.orelse
            if both and not _jumps(stmt.body[:-1] + stmt.orelse[:-1], loops=True):
                return self._lower(stmt, "if_return", [stmt.test], [stmt.body, stmt.orelse], blocks)
            if not _jumps(blocks, loops=True):
                return self._lower(stmt, "if_stmt", [stmt.test], [stmt.body, stmt.orelse or [ast.Pass()]], blocks)
            return self._refused(stmt, "an if statement with a break, continue or return on some paths only")
        if isinstance(stmt, ast.While):
            before = self._flags(stmt) if not stmt.orelse else []
            stmt.body, stmt.orelse = self._block(stmt.body), self._block(stmt.orelse)
            stmt.test = self.visit(stmt.test)
            if not stmt.orelse and not _jumps(stmt.body, loops=True):
                return before + self._lower(stmt, "while_stmt", [stmt.test], [stmt.body], stmt.body)
            return before + self._refused(stmt, "a while loop with a return or else clause")
        if isinstance(stmt, ast.For):
            stmt.body, stmt.orelse = self._block(stmt.body), self._block(stmt.orelse)
            stmt.iter = self.visit(stmt.iter)
            bounds = _range_bounds(stmt.iter)
            if (bounds is not None and isinstance(stmt.target, ast.Name) and not stmt.orelse
                    and not _jumps(stmt.body, loops=True)):
                assign = ast.Assign([ast.Name(stmt.target.id, ast.Store())], ast.Name("__pullback_i", ast.Load()))
                return self._lower(stmt, "for_range", [ast.copy_location(ast.Tuple(bounds, ast.Load()), stmt.iter)],
                                   [[ast.copy_location(assign, stmt), *stmt.body]], [assign, *stmt.body])
            return [stmt]
        if isinstance(stmt, ast.With | ast.AsyncWith | ast.Try | ast.TryStar):
            for field in ("body", "orelse", "finalbody"):
                if hasattr(stmt, field):
                    setattr(stmt, field, self._block(getattr(stmt, field)))
            for handler in getattr(stmt, "handlers", ()):
                handler.body = self._block(handler.body)
            return [stmt]
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) or self._has_ifexp(stmt):
            return [self.visit(stmt)]
        return [stmt]  # nothing in it to rewrite (visiting every node of it costs more than the check)

    def _flags(self, loop: ast.While) -> list[ast.stmt]:
        """A ``while`` whose body breaks or continues (no return): the jumps become flags, as AutoGraph
        does. ``break`` sets ``__pullback_break_k``, which the loop's test reads (``until_break``);
        ``continue`` sets ``__pullback_continue_k``, reset at each step; the statements after a block
        that may jump run only where neither is set (``neither``, a converted ``if``). Returns the
        statements to put before the loop (the flags made false)."""
        if not _jumps(loop.body, loops=True) or _jumps(loop.body, loops=False):
            return []
        k = self.count = self.count + 1
        brk, cont = f"{_FLAGS[0]}_{k}", f"{_FLAGS[1]}_{k}"
        body = _unjump(loop.body, brk, cont)
        if body is None:  # a jump inside ``with``/``try``: left as written
            return []
        flow = ast.Name(FLOW, ast.Load())
        loop.body = [_assign(cont, False, loop), *body]
        loop.test = ast.copy_location(ast.Call(ast.Attribute(flow, "until_break", ast.Load()), [
            ast.Name(brk, ast.Load()), ast.Lambda(ast.arguments([], [], None, [], [], None, []), loop.test)], []),
            loop.test)
        return [_assign(brk, False, loop), _assign(cont, False, loop)]

    def _refused(self, stmt: ast.If | ast.While, construct: str) -> list[ast.stmt]:
        """The statement as written, its test checked: a traced one is refused naming the construct."""
        call = ast.Call(ast.Attribute(ast.Name(FLOW, ast.Load()), "refuse", ast.Load()),
                        [stmt.test, ast.Constant(construct)], [])
        stmt.test = ast.copy_location(call, stmt.test)
        return [stmt]

    def _lower(self, stmt: ast.stmt, kind: str, head: list[ast.expr], blocks: list[list[ast.stmt]],
               assigning: list[ast.stmt]) -> list[ast.stmt]:
        """The statement as nested functions and a call of ``control_flow.<kind>``."""
        names, awkward = _stores(assigning)
        if awkward or set(names) & self.declared[-1]:
            if isinstance(stmt, ast.If | ast.While):
                return self._refused(stmt, f"an {'if' if isinstance(stmt, ast.If) else 'while'} statement that "
                                           f"assigns a global, nonlocal or exception variable")
            return [stmt]
        k = self.count = self.count + 1
        nonlocal_ = f"    nonlocal {', '.join(names)}\n" if names else ""
        argument = "__pullback_i" if kind == "for_range" else ""
        text = f"if False:\n    {' = '.join(names)} = None\n" if names else ""
        block_names = []
        for j, _ in enumerate(blocks):
            block_names.append(f"__pullback_block_{k}_{j}")
            text += f"def {block_names[-1]}({argument}):\n{nonlocal_}    pass\n"
        text += f"def __pullback_get_{k}():\n    return ({''.join(f'{FLOW}.load(lambda: {n}), ' for n in names)})\n"
        text += f"def __pullback_put_{k}(__pullback_values):\n{nonlocal_}    pass\n"
        for j, n in enumerate(names):
            text += (f"    if __pullback_values[{j}] is {FLOW}.UNDEFINED:\n        try:\n            del {n}\n"
                     f"        except NameError:\n            pass\n    else:\n        {n} = __pullback_values[{j}]\n")
        test = "lambda: __pullback_head" if kind == "while_stmt" else "__pullback_head"
        call = (f"{FLOW}.{kind}({test}, {', '.join(block_names)}, __pullback_get_{k}, __pullback_put_{k}, "
                f"{tuple(names)!r})")
        text += f"return {call}\n" if kind == "if_return" else f"{call}\n"
        made = ast.parse(text).body
        for n in (n for top in made for n in ast.walk(top)):  # at the ``if``/``while``/``for`` line itself
            if hasattr(n, "lineno"):
                ast.copy_location(n, head[0])
        defs = [d for d in made if isinstance(d, ast.FunctionDef) and d.name.startswith("__pullback_block_")]
        for d, block in zip(defs, blocks):
            d.body = d.body[:-1] + block  # after the ``nonlocal`` line, the block in place of ``pass``
        last = made[-1]
        call_node = last.value
        call_node.args[0] = ast.Lambda(ast.arguments([], [], None, [], [], None, []), head[0]) \
            if kind == "while_stmt" else head[0]
        return made


_FLAGS = ("__pullback_break", "__pullback_continue")


def _assign(name: str, value: bool, where: ast.AST) -> ast.stmt:
    return ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], ast.Constant(value)), where)


def _unjump(stmts: list[ast.stmt], brk: str, cont: str) -> list[ast.stmt] | None:
    """The loop body's ``break``/``continue`` (at this loop's level) as assignments of the flags, and
    what follows a block that may have set one guarded by ``if neither(brk, cont):``. None where a
    jump stands inside ``with`` or ``try``."""
    out: list[ast.stmt] = []
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Break | ast.Continue):
            out.append(_assign(brk if isinstance(stmt, ast.Break) else cont, True, stmt))
            return out
        if not _jumps([stmt], loops=True):
            out.append(stmt)
            continue
        if not isinstance(stmt, ast.If):
            return None
        body, orelse = _unjump(stmt.body, brk, cont), _unjump(stmt.orelse, brk, cont)
        if body is None or orelse is None:
            return None
        stmt.body, stmt.orelse = body or [ast.copy_location(ast.Pass(), stmt)], orelse
        out.append(stmt)
        rest = _unjump(stmts[i + 1:], brk, cont)
        if rest is None:
            return None
        if rest:
            test = ast.Call(ast.Attribute(ast.Name(FLOW, ast.Load()), "neither", ast.Load()),
                            [ast.Name(brk, ast.Load()), ast.Name(cont, ast.Load())], [])
            out.append(ast.copy_location(ast.If(ast.copy_location(test, stmt), rest, []), stmt))
        return out
    return out


def _range_bounds(node: ast.expr) -> list[ast.expr] | None:
    """The arguments of ``range(...)`` as converted by ``_Calls`` (``__pullback_call__(range, ...)``)."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CALL and node.args
            and isinstance(node.args[0], ast.Name) and node.args[0].id == "range" and not node.keywords
            and 2 <= len(node.args) <= 4 and not any(isinstance(a, ast.Starred) for a in node.args)):
        return node.args[1:]
    return None


# --- which code is the user's ----------------------------------------------------------------------


def _library_dirs() -> tuple[str, ...]:
    import numpy
    import scipy

    modules = [numpy, scipy]
    for name in ("jax", "torch", "cupy", "cupyx", "dask", "distributed", "libcst", "_pytest", "pytest", "hypothesis"):
        modules.append(sys.modules.get(name))
    files = [os.path.dirname(os.path.dirname(__file__)) + os.sep + "__init__.py"]  # pullback's, without importing it
    files += [getattr(m, "__file__", None) for m in modules if m is not None]
    return tuple(os.path.realpath(os.path.dirname(f)) + os.sep for f in files if f)


_LIBRARY: tuple[str, ...] | None = None
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_USER_FILES: set[str] = set()  # pullback's own files that play a user (the demo)


def is_library(code: types.CodeType) -> bool:
    """Whether ``code`` is NumPy's, SciPy's, pullback's, a peer's or the standard library's: never converted."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = _library_dirs()
        _USER_FILES.add(_LIBRARY[0] + "demo.py")
    filename = code.co_filename
    if filename in _USER_FILES:
        return False
    return filename.startswith(_LIBRARY) or (filename.startswith(_STDLIB)
                                             and "site-packages" not in filename[len(_STDLIB):])


# --- finding a function's source -------------------------------------------------------------------


class _File:
    """One source file parsed once: its functions and lambdas by first line, and the class each is in."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        tree = ast.parse("".join(lines))
        self.by_line: dict[int, list[tuple[ast.AST, ast.ClassDef | None]]] = {}
        self._index(tree, None)

    def _index(self, node: ast.AST, cls: ast.ClassDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                self.by_line.setdefault(first, []).append((child, cls))
            elif isinstance(child, ast.Lambda):
                self.by_line.setdefault(child.lineno, []).append((child, cls))
            self._index(child, child if isinstance(child, ast.ClassDef) else cls)


_FILES: dict[str, _File] = {}


def _parsed(filename: str, module_globals: dict | None) -> _File | None:
    lines = linecache.getlines(filename, module_globals)
    if not lines:
        return None
    found = _FILES.get(filename)
    if found is None or found.lines != lines:
        try:
            found = _FILES[filename] = _File(lines)
        except (SyntaxError, ValueError):
            return None
    return found


def _own_lines(code: types.CodeType, module_globals: dict | None) -> ast.AST | None:
    """A function's syntax parsed from its own lines (a fresh tree, at the file's positions), without
    parsing and indexing the whole file: its lines end before the next line that starts at its ``def``'s
    indentation or left of it (a line of it that starts there is inside brackets or a string, and cut off
    it does not parse). None for a method, a function in a class, a lambda, an indentation with tabs, or
    lines that do not parse to one function: the whole file is read for those."""
    parts = code.co_qualname.split(".")  # ``f.<locals>.g``: no class around it (one would mangle names)
    if code.co_name == "<lambda>" or len(parts) % 2 == 0 or any(p != "<locals>" for p in parts[1:-1:2]):
        return None
    lines = linecache.getlines(code.co_filename, module_globals)
    first = code.co_firstlineno
    if not 0 < first <= len(lines):
        return None
    indent = len(lines[first - 1]) - len(lines[first - 1].lstrip(" "))
    if lines[first - 1][indent:indent + 1] in _INDENT or (indent and first < 2):
        return None  # a tab or form feed in the indentation
    end = first - 1
    while end < len(lines) and not lines[end][indent:].startswith(("def ", "async def ")):  # past the decorators
        end += 1
    end += 1
    while end < len(lines):
        line = lines[end]
        text = line.lstrip(" ")
        if text[:1] in _INDENT and text.strip():
            if indent:
                return None
        elif len(line) - len(text) <= indent and text[:1] not in _INSIDE and text.strip():
            break
        end += 1
    text = "".join(lines[first - 1:end])
    if indent:  # in a block: ``if 1:`` on the line above stands for it
        text = "\n" * (first - 2) + "if 1:\n" + text
    else:
        text = "\n" * (first - 1) + text
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError):
        return None
    if indent and len(body) == 1 and isinstance(body[0], ast.If):
        body = body[0].body
    return body[0] if len(body) == 1 and isinstance(body[0], ast.FunctionDef | ast.AsyncFunctionDef) else None


_INDENT = (" ", "\t", "\f")
_INSIDE = frozenset("#)]}")  # how a line of the function can start at its def's indentation or left of it


def _node(code: types.CodeType, module_globals: dict | None) -> tuple[ast.AST, ast.ClassDef | None, bool] | None:
    """The syntax of ``code``'s function and its enclosing class, if the source is found and fits; and
    whether that syntax is a fresh copy (not the file's, which stays as parsed)."""
    own = _own_lines(code, module_globals)
    if own is not None:
        found = _fitting(code, [(own, None)])
        if found is not None:
            return (*found, True)
    file = _parsed(code.co_filename, module_globals)
    if file is None:
        return None
    found = _fitting(code, file.by_line.get(code.co_firstlineno, ()))
    return None if found is None else (*found, False)


def _fitting(code: types.CodeType, nodes) -> tuple[ast.AST, ast.ClassDef | None] | None:
    """The one of ``nodes`` (syntax, class) that is ``code``'s function, its source unchanged since."""
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    candidates = []
    for node, cls in nodes:
        name = "<lambda>" if isinstance(node, ast.Lambda) else node.name
        args = node.args
        params = tuple(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))
        if name == code.co_name and params == names:
            candidates.append((node, cls))
    if len(candidates) > 1:  # lambdas on one line: the one whose body holds the code's positions
        spots = {(line, col) for line, _, col, _ in code.co_positions() if line is not None and col is not None}
        candidates = [(n, c) for n, c in candidates if any(_within(n.body, spot) for spot in spots)]
    if len(candidates) != 1 or not _names_fit(code, *candidates[0]):
        return None
    return candidates[0]


def _names_fit(code: types.CodeType, node: ast.AST, cls: ast.ClassDef | None) -> bool:
    """Whether every global name the code reads is spelled in the syntax (private names mangled as in
    ``cls``): source edited since the function was compiled is not converted.
    (Names a tool added, such as pytest's ``@py_assert``, are not spelled anywhere: they start with ``@``.)"""
    spelled: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            spelled.add(n.id)
        elif isinstance(n, ast.Attribute):
            spelled.add(n.attr)
        elif isinstance(n, ast.alias):
            spelled.update((n.name, n.name.split(".")[0], n.asname or n.name))
        elif isinstance(n, ast.ImportFrom) and n.module:
            spelled.add(n.module)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            spelled.add(n.name)
    if cls is not None and cls.name.lstrip("_"):
        prefix = "_" + cls.name.lstrip("_")
        spelled |= {prefix + n for n in spelled if n.startswith("__") and not n.endswith("__")}
    return all(name in spelled or name.startswith("@") for name in _all_names(code))


def _all_names(code: types.CodeType):
    """The global names the code reads (and its nested code): what an edit of the source most often
    changes. (Attribute names are left out: tools such as pytest's assertion rewriting read their own.)"""
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval not in _BUILTINS:
            yield ins.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _all_names(const)


_BUILTINS = frozenset(vars(builtins))


def _within(node: ast.AST, spot: tuple[int, int]) -> bool:
    start, end = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
    return start <= spot <= end  # type: ignore[operator]


# --- conversion ------------------------------------------------------------------------------------


def _copy(node: ast.AST, lines: list[str]) -> ast.AST:
    """A fresh copy of a function's syntax (``_convert`` rewrites it in place; the file's stays as parsed):
    its own lines parsed again, at their positions, which costs a fraction of a ``deepcopy`` of the tree.
    A lambda, or lines that do not parse to the same function, are deep-copied."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        text = "".join(lines[first - 1:node.end_lineno])
        indented = node.col_offset > 0
        if not indented or first >= 2:  # an indented def sits in a block: ``if 1:`` on the line above stands for it
            text = "\n" * (first - 1 - indented) + ("if 1:\n" if indented else "") + text
            try:
                new = ast.parse(text).body[0]
            except (SyntaxError, ValueError, IndexError):
                new = None
            if indented and isinstance(new, ast.If):
                new = new.body[0]
            if (type(new) is type(node) and new.name == node.name  # type: ignore[union-attr]
                    and (new.lineno, new.col_offset, new.end_lineno, new.end_col_offset)  # type: ignore[union-attr]
                    == (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)):
                return new  # type: ignore[return-value]
    return copy.deepcopy(node)


def _bare(node: ast.AST) -> ast.AST:
    """The function's syntax without what runs when it is defined (decorators, defaults,
    annotations): the original function object already holds their values. ``node``: a copy, changed in place."""
    args = node.args  # type: ignore[attr-defined]
    args.defaults, args.kw_defaults = [], [None] * len(args.kwonlyargs)
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if a is not None:
            a.annotation = None
    if not isinstance(node, ast.Lambda):
        node.decorator_list, node.returns = [], None  # type: ignore[attr-defined]
    return node


def _convert(code: types.CodeType, module_globals: dict | None) -> types.CodeType | None:
    """``code`` with its calls rewritten, compiled inside a factory whose parameters are its free
    variables and the dispatchers (so the new code's free variables are the original's plus those),
    in a class of the enclosing class's name where there is one (private names mangle alike)."""
    found = _node(code, module_globals)
    if found is None:
        return None
    node, cls, fresh = found
    calls = _Calls()
    node = _ControlFlow(calls).visit(calls.visit(_bare(node if fresh else _copy(node, _FILES[code.co_filename].lines))))
    if isinstance(node, ast.Lambda):
        fn_name = "__pullback_lambda__"
        definition: ast.stmt = ast.copy_location(ast.Assign([ast.Name(fn_name, ast.Store())], node), node)
    else:
        fn_name, definition = node.name, node  # type: ignore[attr-defined]
    result: ast.expr = ast.Name(fn_name, ast.Load())
    body = [definition]
    if cls is not None:
        body = [ast.copy_location(ast.ClassDef(cls.name, [], [], body, []), node)]
        result = ast.Attribute(ast.Name(cls.name, ast.Load()), fn_name, ast.Load())
    params = [CALL, INDEX, SETITEM, LOAD, OPERATOR, KEYS, FLOW, *code.co_freevars]
    factory = ast.copy_location(ast.FunctionDef(
        "__pullback_factory__", ast.arguments([], [ast.arg(p) for p in params], None, [], [], None, []),
        [*body, ast.copy_location(ast.Return(result), node)], []), node)
    module = ast.fix_missing_locations(ast.Module([factory], []))
    try:
        compiled = compile(module, code.co_filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    namespace: dict = {}
    exec(compiled, namespace)
    return namespace["__pullback_factory__"](*[None] * len(params)).__code__


_CODES: dict[int, tuple[types.CodeType, types.CodeType | None]] = {}  # id(original) -> (original, converted)
_CODES_MAX = 4096


def converted_code(fn: types.FunctionType) -> types.CodeType | None:
    code = fn.__code__
    if CALL in code.co_freevars:  # converted already (a function defined inside converted code)
        return None
    found = _CODES.get(id(code))
    if found is None or found[0] is not code:
        new = None if is_library(code) else _convert(code, fn.__globals__)
        if len(_CODES) >= _CODES_MAX:
            _CODES.clear()
        found = _CODES[id(code)] = (code, new)  # the entry keeps the code it is keyed by alive
    return found[1]


_dispatch: tuple[Callable, Callable, Callable, Callable] | None = None  # (call, index, setitem, load): ``install``
_OPERATOR_CELL = types.CellType(operator)
_KEYS_CELL = types.CellType(_Keys())
_FLOW_CELL = types.CellType(None)  # pullback.frontend.control_flow, set by ``install``


def install(call: Callable, index: Callable, setitem: Callable, load: Callable, flow: types.ModuleType) -> None:
    """Give the dispatchers converted code calls: ``call(f, *args, **kwargs)``, ``index(obj, key)``,
    ``setitem(obj, key, value, inplace_operator=None)`` and ``load(value)``, and the module of control
    flow (``control_flow``)."""
    global _dispatch
    _dispatch = (call, index, setitem, load)
    _FLOW_CELL.cell_contents = flow


def converted(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` whose calls go through the dispatcher; ``fn`` itself where it has no source or is a library's."""
    new = converted_code(fn)
    if new is None:
        return fn
    call, index, setitem, load = _dispatch  # type: ignore[misc]
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells[CALL], cells[INDEX], cells[OPERATOR] = types.CellType(call), types.CellType(index), _OPERATOR_CELL
    cells[SETITEM], cells[LOAD], cells[KEYS] = types.CellType(setitem), types.CellType(load), _KEYS_CELL
    cells[FLOW] = _FLOW_CELL
    out = types.FunctionType(new, fn.__globals__, fn.__name__, fn.__defaults__,
                             tuple(cells[name] for name in new.co_freevars))
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__, out.__module__ = fn.__qualname__, fn.__module__
    out.__wrapped__ = fn  # type: ignore[attr-defined]
    return out
