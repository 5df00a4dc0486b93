"""Compile generated source into a function, with the source registered in
``linecache`` so that tracebacks and ``inspect.getsource`` show it, for as long as the
function lives."""

from __future__ import annotations

import itertools
import linecache
import weakref
from collections.abc import Callable
from types import ModuleType

from pullback.ad.emit import gc_paused
from pullback.backends import codegen, errstate, numba_loops, numba_warming
from pullback.backends.numpy import backend as numpy_backend
from pullback.ir.core import Program

_counter = itertools.count()


def _forget(filename: str) -> None:
    linecache.cache.pop(filename, None)


def print_program(program: Program, backend: ModuleType = numpy_backend, out_tree=None, loops: str = "numpy") -> str:
    """The source ``compile_program`` would compile, without importing what it calls."""
    return codegen.generate(program, backend, out_tree, loops=loops).source


def compile_program(program: Program, backend: ModuleType = numpy_backend, out_tree=None,
                    loops: str = "numpy", cold: bool = True) -> tuple[Callable, str]:
    """The compiled function of ``program``, and its source. ``loops``: which loops Numba compiles
    (``numba_loops``); a module holding such loops is written to a file first, which Numba's on-disk
    cache needs. ``cold=False``: where Numba's cache does not hold them yet, the function returned is
    the NumPy program, marked ``__pullback_deferred__`` with what will compile them (``numba_warming.Deferred``),
    with their source."""
    with gc_paused():
        gen = codegen.generate(program, backend, out_tree, loops=loops)
    if "@numba.njit" in gen.source:  # a module of its own, that Numba's cache finds again (``numba_loops``)
        try:
            filename = numba_loops.module_file(gen.source, gen.function_name)
        except OSError as e:  # no cache directory to write: the loops stay NumPy
            numba_loops.log_fallback(gen.function_name, e)
            return compile_program(program, backend, out_tree)
        if not cold and not numba_loops.cached(filename, gen.source):
            fn = compile_program(program, backend, out_tree)[0]
            fn.__pullback_deferred__ = numba_warming.Deferred(filename, gen.source, gen.function_name,
                                                              dict(gen.constants))
            return fn, gen.source
        namespace = numba_loops.module_namespace(filename)
        namespace[errstate.STATEMENTS] = gen.statements
    else:
        filename = f"<pullback:{gen.function_name}:{next(_counter)}>"
        namespace = {"__name__": f"pullback.generated.{gen.function_name}", errstate.STATEMENTS: gen.statements}
    linecache.cache[filename] = (len(gen.source), None, gen.source.splitlines(True), filename)
    with gc_paused():
        exec(compile(gen.source, filename, "exec"), namespace)
    fn = namespace[gen.function_name]
    weakref.finalize(fn, _forget, filename).atexit = False  # a traceback holds fn (its globals): it keeps the lines
    if gen.constants:  # the keyword-only constants default to the arrays themselves: no per-call cost
        constant = getattr(backend, "constant", None)  # e.g. CuPy moves constants to the device, once
        fn.__kwdefaults__ = {k: constant(v) for k, v in gen.constants.items()} if constant else dict(gen.constants)
    fn.__pullback_source__ = gen.source
    return fn, gen.source


def compile_programs(programs: list[Program], backend: ModuleType = numpy_backend,
                     fresh: bool = True) -> list[Callable]:
    """The compiled functions of many small ``programs`` (their names distinct), printed into one
    module and compiled by one ``compile()``: a call of ``compile()`` costs about as much as printing
    a small program, so kernels built together share it (``api.eager``). The module's lines stay in
    ``linecache`` for as long as the process runs (its functions are kept by a process-wide cache);
    ``fresh``: see ``codegen.generate``. They share their templates (equations of a kind print alike) and
    their comments (each user line's made once)."""
    shared: dict = {}
    comments: dict = {}
    with gc_paused():
        gens = [codegen.generate(p, backend, fresh=fresh, templates=shared, comments=comments) for p in programs]
    source = "\n\n".join(gen.source for gen in gens)
    filename = f"<pullback:kernels:{next(_counter)}>"
    statements = {}
    for gen in gens:
        statements.update(gen.statements)
    namespace = {"__name__": "pullback.generated.kernels", errstate.STATEMENTS: statements}
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    with gc_paused():
        exec(compile(source, filename, "exec"), namespace)
    fns = []
    for gen in gens:
        fn = namespace[gen.function_name]
        if gen.constants:
            constant = getattr(backend, "constant", None)
            fn.__kwdefaults__ = {k: constant(v) for k, v in gen.constants.items()} if constant else dict(gen.constants)
        fn.__pullback_source__ = gen.source
        fns.append(fn)
    return fns
