"""The public entry points: trace, print and compile functions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pullback.backends.compiler import compile_program
from pullback.ir.core import Program
from pullback.ir.tracer import PYTHON_SCALARS, Tracer, bind, trace
from pullback.tree import LEAF, unflatten


def _split(fn: Callable, args: tuple, static_argnums: tuple[int, ...]) -> tuple[Callable, tuple]:
    if not static_argnums:
        return fn, args
    static = {i: args[i] for i in static_argnums}
    dynamic = tuple(a for i, a in enumerate(args) if i not in static)

    @functools.wraps(fn)
    def with_static(*dyn):
        it = iter(dyn)
        return fn(*(static[i] if i in static else next(it) for i in range(len(args))))

    return with_static, dynamic


def _normalize_argnums(static_argnums: int | Sequence[int]) -> tuple[int, ...]:
    return (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)


def make_ir(fn: Callable, static_argnums: int | Sequence[int] = ()) -> Callable[..., Program]:
    """``make_ir(f)(*args)``: the Program of ``f`` at the shapes and dtypes of ``args``."""
    nums = _normalize_argnums(static_argnums)

    def make(*args) -> Program:
        f, dyn = _split(fn, args, nums)
        return trace(f, dyn)[0]

    return make


def inline(program: Program, args: Sequence[Any]) -> list[Any]:
    """Evaluate ``program`` on traced ``args`` inside the current trace."""
    env: dict[int, Any] = {id(v): a for v, a in zip(program.inputs, args)}
    env.update({id(v): c for v, c in zip(program.constvars, program.constvals)})

    def read(a):
        return env.get(id(a), a)

    for eqn in program.eqns:
        outs = bind(eqn.prim, *map(read, eqn.inputs), **eqn.params)
        for v, o in zip(eqn.outputs, outs if eqn.prim.multiple_results else (outs,)):
            env[id(v)] = o
    return [read(a) for a in program.outputs]


def _cache_key(args: tuple) -> tuple:
    """Shapes and dtypes of arrays; the type of scalars (a NumPy scalar type names its dtype)."""
    return tuple(
        (a.shape, a.dtype) if isinstance(a, np.ndarray) else (a.shape, a.dtype, a.weak) if isinstance(a, Tracer)
        else type(a)
        for a in args
    )


class jit:
    """``f`` traced, printed and compiled once per argument signature (shapes,
    dtypes, static argument values), then called directly."""

    def __init__(self, fn: Callable, static_argnums: int | Sequence[int] = ()):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.static_argnums = _normalize_argnums(static_argnums)
        self._cache: dict[tuple, tuple[Callable, Callable, Program, str]] = {}

    def _entry(self, args: tuple):
        key = _cache_key(args)
        if self.static_argnums:
            key += tuple(args[i] for i in self.static_argnums)
        entry = self._cache.get(key)
        if entry is None:
            f, dyn = _split(self.fn, args, self.static_argnums)
            program, treedef = trace(f, dyn)
            compiled, source = compile_program(program)
            entry = (compiled, _output_builder(treedef, len(program.outputs)), program, source)
            self._cache[key] = entry
        return entry

    def __call__(self, *args):
        compiled, build, program, _ = self._entry(args)
        if self.static_argnums:
            args = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        if any(isinstance(a, Tracer) for a in args):  # called inside another trace
            return build(inline(program, args))
        if any(isinstance(a, PYTHON_SCALARS) for a in args):
            args = tuple(np.asarray(a) if isinstance(a, PYTHON_SCALARS) else a for a in args)
        return build(compiled(*args))

    def ir(self, *args) -> Program:
        return self._entry(args)[2]

    def source(self, *args) -> str:
        return self._entry(args)[3]


def _output_builder(treedef, n_outputs: int) -> Callable:
    """Turn the compiled function's return value into the user's output structure."""
    if treedef is LEAF:
        return lambda out: out[0] if isinstance(out, list) else out
    if n_outputs == 1:
        return lambda out: unflatten(treedef, out if isinstance(out, list) else [out])
    return lambda out: unflatten(treedef, out)


def source(fn: Callable, *args, static_argnums: int | Sequence[int] = ()) -> str:
    """The generated Python source of ``fn`` at these arguments."""
    return jit(fn, static_argnums).source(*args)
