"""Compile generated source into a function, with the source registered in
``linecache`` so that tracebacks and ``inspect.getsource`` show it, for as long as the
function lives."""

from __future__ import annotations

import gc
import itertools
import linecache
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

from pullback.backends import codegen, errstate
from pullback.backends.numpy import backend as numpy_backend
from pullback.ir.core import Program

_counter = itertools.count()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic garbage collection off while a program is built. Building allocates millions of
    small objects (IR, libcst nodes) that reference counting frees, and each full collection would
    walk all of them: about a third of the time of a large first call. The collector's own state
    is restored after; cycles made meanwhile are collected then."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _forget(filename: str) -> None:
    linecache.cache.pop(filename, None)


def print_program(program: Program, backend: ModuleType = numpy_backend, out_tree=None) -> str:
    """The source ``compile_program`` would compile, without importing what it calls."""
    return codegen.generate(program, backend, out_tree).source


def compile_program(program: Program, backend: ModuleType = numpy_backend, out_tree=None) -> tuple[Callable, str]:
    """The compiled function of ``program``, and its source."""
    with gc_paused():
        gen = codegen.generate(program, backend, out_tree)
    filename = f"<pullback:{gen.function_name}:{next(_counter)}>"
    linecache.cache[filename] = (len(gen.source), None, gen.source.splitlines(True), filename)
    namespace = {"__name__": f"pullback.generated.{gen.function_name}", errstate.STATEMENTS: gen.statements}
    with gc_paused():
        exec(compile(gen.source, filename, "exec"), namespace)
    fn = namespace[gen.function_name]
    weakref.finalize(fn, _forget, filename).atexit = False  # a traceback holds fn (its globals): it keeps the lines
    if gen.constants:  # the keyword-only constants default to the arrays themselves: no per-call cost
        constant = getattr(backend, "constant", None)  # e.g. CuPy moves constants to the device, once
        fn.__kwdefaults__ = {k: constant(v) for k, v in gen.constants.items()} if constant else dict(gen.constants)
    fn.__pullback_source__ = gen.source
    return fn, gen.source
