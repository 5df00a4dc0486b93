"""Scoped conversion of the user's code: how NumPy's and SciPy's names reach pullback without
changing NumPy or SciPy.

Most of NumPy reaches a tracer through its protocols (``__array_ufunc__``, ``__array_function__``).
What does not (``np.array([x, y])``, ``scipy.special.logsumexp``, ``rs.standard_normal(3)``, which
sees no tracer at all) is found where the user calls it: a traced function runs as a *converted*
copy, compiled from its own source with every call ``f(a, b=c)`` rewritten as
``__pullback_call__(f, a, b=c)``, arithmetic ``a * b`` as ``__pullback_call__(operator.mul, a, b)``,
and ``a[k]`` as ``__pullback_index__(a, k)`` where ``k`` is more than basic slicing (``a[:, k]`` too,
``k`` maybe traced), as must ``np.r_[...]``. The dispatcher, given by ``install``, decides by the
identity of ``f``: pullback's implementation of a NumPy or SciPy function, a random draw recorded as
an equation, the user's own function converted in turn, or else ``f`` itself. So a name bound before
the trace (``from scipy.special import logsumexp``) is still seen, and nothing outside the traced code
changes: other threads, pickling, ``inspect.signature`` and an interrupted trace see NumPy and SciPy
as they are.

The copy shares everything with the original but its code: globals (writes land in the user's
module), defaults, and closure cells (``nonlocal`` works), with three more cells: the dispatchers and
the ``operator`` module. Line numbers and the file name are the original's, so tracebacks and
pullback's source map point at the user's lines. ``operator.mul(a, b)`` is ``a * b`` to the letter,
reflected operators included. A function without source (``exec``, the REPL without a file) runs
unconverted: NumPy's protocols still reach it, and what they do not reach fails with pullback's
error. Converted code is made once per code object.
"""

from __future__ import annotations

import ast
import copy
import linecache
import operator
import os
import sys
import sysconfig
import types
from collections.abc import Callable

CALL = "__pullback_call__"
INDEX = "__pullback_index__"
OPERATOR = "__pullback_operator__"  # the ``operator`` module: ``a * b`` is called as ``operator.mul(a, b)``

# arithmetic (not comparisons, nor bitwise operators on masks), by the ``operator`` function that is it
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.MatMult: "matmul",
           ast.Pow: "pow", ast.FloorDiv: "floordiv", ast.Mod: "mod"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos"}

# calls that read or write the caller's own frame: rewriting them would move them into the dispatcher's
_FRAME_CALLS = frozenset({"super", "locals", "globals", "vars", "eval", "exec", "dir", "breakpoint", "__import__"})


class _Calls(ast.NodeTransformer):
    """``f(a, *b, c=d)`` -> ``__pullback_call__(f, a, *b, c=d)``; ``a * b`` -> ``__pullback_call__(operator.mul,
    a, b)``; ``a[k]`` -> ``__pullback_index__(a, k)``."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
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
        target, key = node.value, node.slice
        parts = key.elts if isinstance(key, ast.Tuple) else [key]
        basic = all(isinstance(p, ast.Slice | ast.Constant) for p in parts)
        if basic and any(isinstance(p, ast.Slice) for p in parts):
            return node  # basic slicing alone (``a[1:, None]``): a view, read as one anyway
        # ``a[:, k]`` (k maybe traced) too: the compiler builds slices in a call's arguments as in a subscript
        return ast.copy_location(ast.Call(ast.Name(INDEX, ast.Load()), [target, key], []), node)


def _own_locals(node: ast.Call) -> ast.AST:
    """``locals()`` -> ``{k: v for k, v in locals().items() if k[:11] != "__pullback_"}``: the frame's own
    names, without the dispatchers' cells (the first iterable is evaluated in the function's scope)."""
    template = ast.parse('{k: v for k, v in locals().items() if k[:11] != "__pullback_"}', mode="eval").body
    template.generators[0].iter.func.value = node  # the user's own ``locals()`` call, with its position
    for n in ast.walk(template):
        ast.copy_location(n, node)
    return template


# --- which code is the user's ----------------------------------------------------------------------


def _library_dirs() -> tuple[str, ...]:
    import numpy
    import scipy

    import pullback

    modules = [pullback, numpy, scipy]
    for name in ("jax", "torch", "cupy", "cupyx", "dask", "distributed", "libcst", "_pytest", "pytest", "hypothesis"):
        modules.append(sys.modules.get(name))
    files = [getattr(m, "__file__", None) for m in modules if m is not None]
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


def _node(code: types.CodeType, module_globals: dict | None) -> tuple[ast.AST, ast.ClassDef | None] | None:
    """The syntax of ``code``'s function and its enclosing class, if the source is found and fits."""
    file = _parsed(code.co_filename, module_globals)
    if file is None:
        return None
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    candidates = []
    for node, cls in file.by_line.get(code.co_firstlineno, ()):
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
    """Whether every global and attribute name the code reads is spelled in the syntax (private
    names mangled as in ``cls``): source edited since the function was compiled is not converted.
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
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _all_names(const)


def _within(node: ast.AST, spot: tuple[int, int]) -> bool:
    start, end = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
    return start <= spot <= end  # type: ignore[operator]


# --- conversion ------------------------------------------------------------------------------------


def _bare(node: ast.AST) -> ast.AST:
    """The function's syntax without what runs when it is defined (decorators, defaults,
    annotations): the original function object already holds their values."""
    node = copy.deepcopy(node)
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
    node, cls = found
    node = _Calls().visit(_bare(node))
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
    params = [CALL, INDEX, OPERATOR, *code.co_freevars]
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
    found = _CODES.get(id(code))
    if found is None or found[0] is not code:
        new = None if is_library(code) else _convert(code, fn.__globals__)
        if len(_CODES) >= _CODES_MAX:
            _CODES.clear()
        found = _CODES[id(code)] = (code, new)  # the entry keeps the code it is keyed by alive
    return found[1]


_dispatch: tuple[Callable, Callable] | None = None  # (call, index), set by ``install``
_OPERATOR_CELL = types.CellType(operator)


def install(call: Callable, index: Callable) -> None:
    """Give the dispatchers converted code calls: ``call(f, *args, **kwargs)``, ``index(obj, key)``."""
    global _dispatch
    _dispatch = (call, index)


def converted(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` whose calls go through the dispatcher; ``fn`` itself where it has no source or is a library's."""
    new = converted_code(fn)
    if new is None:
        return fn
    call, index = _dispatch  # type: ignore[misc]
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells[CALL], cells[INDEX], cells[OPERATOR] = types.CellType(call), types.CellType(index), _OPERATOR_CELL
    out = types.FunctionType(new, fn.__globals__, fn.__name__, fn.__defaults__,
                             tuple(cells[name] for name in new.co_freevars))
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__, out.__module__ = fn.__qualname__, fn.__module__
    out.__wrapped__ = fn  # type: ignore[attr-defined]
    return out
