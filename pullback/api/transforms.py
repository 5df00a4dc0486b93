"""The public entry points: trace, transform, print, compile, call.

Each user-facing function keeps one compiled program per argument signature
(shapes, dtypes, static values). Called on traced values — inside another
trace, as in ``grad(grad(f))`` — it inlines its program instead, which is what
makes the transforms compose.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from types import MethodType
from typing import Any

import numpy as np

from pullback import log
from pullback.ad.batch import batch
from pullback.ad.dce import dce
from pullback.ad.jvp import jvp as jvp_transform
from pullback.ad.jvp import tangent_type
from pullback.ad.transpose import cotangent_hint
from pullback.api import cache, eager, kronecker, lowrank
from pullback.api import jacobian as jacobian_transforms
from pullback.api import stages as ad
from pullback.backends import errstate, numba_loops, numba_warming
from pullback.backends.codegen import TEMP_HINTS, printable_tree
from pullback.backends.compiler import compile_program, gc_paused, print_program
from pullback.backends.dask import backend as dask_backend
from pullback.backends.dask.backend import chunks_of, is_dask
from pullback.backends.numpy import backend as numpy_backend
from pullback.errors import LinAlgError, TracingError
from pullback.ir.core import Literal, Program, Var
from pullback.ir.tracer import (
    PYTHON_SCALARS,
    Tracer,
    _arg_names,
    call_user,
    current_builder,
    inline_called,
    is_cupy,
    refuse_subclass,
    trace,
)
from pullback.ir.tracer import inline as tracer_inline
from pullback.ir.types import ShapeDtypeStruct, is_inexact
from pullback.opt.canonical import canonical
from pullback.opt.contraction_order import program_flops
from pullback.opt.outer import kronecker_factors
from pullback.opt.reroll import reroll
from pullback.opt.simplify import keeping_stop_gradients
from pullback.opt.structure import diagonal_plus_low_rank
from pullback.tree import LEAF, flatten, graft, is_node, prefix_leaves, unflatten


def inline(program: Program, args: Sequence[Any]) -> list[Any]:
    """Evaluate ``program`` on traced ``args`` inside the current trace, at its own lines (``f``'s), whether
    a function form is called inside the user's function (``g = pb.grad(f)(x, y)``: its values keep ``f``'s
    names, its results take the caller's) or the trace is of a transform itself
    (``pb.jit(pb.vmap(pb.grad(f)))``: no user line calls it). Python scalars among ``args`` become literals
    of their inputs' types; literal outputs come back as NumPy scalars."""
    args = [Literal.of(a, v.dtype) if isinstance(a, PYTHON_SCALARS) else a for v, a in zip(program.inputs, args)]
    builder = current_builder()
    if builder.transformed:  # its values keep their names (``w_bar``, not a name from the line's target)
        outs = tracer_inline(program, args, hints=builder.inlined_hints)
    else:  # called in the user's function: at its own lines too, its values named by its program or the caller
        outs = inline_called(program, args)
    return [np.asarray(a.value, a.dtype)[()] if isinstance(a, Literal) else a for a in outs]


class _Lock:
    """A reentrant lock that a forked child makes afresh: a thread that held it in the parent (tracing or
    compiling another program) does not exist in the child, which would otherwise wait for it forever."""

    __slots__ = ("_pid", "_lock")

    def __init__(self):
        self._pid, self._lock = os.getpid(), threading.RLock()

    @contextlib.contextmanager
    def held(self):
        if self._pid != os.getpid():
            self._pid, self._lock = os.getpid(), threading.RLock()
        lock = self._lock
        with lock:  # (the one acquired is the one released, a fork in between or not)
            yield


_COMPILING = _Lock()  # held while a ``Staged`` compiles (``runner``): one compile per program
_NAMING = _Lock()  # held while a ``Staged``'s deferred naming runs (``Staged.program``)


class Staged:
    """A program with its output structure; compiled on first concrete call."""

    __slots__ = ("_program", "naming", "treedef", "backend", "captures", "capture_at", "loops", "canonical", "warm",
                 "warming", "_fn", "_run", "_source", "_constants", "_deferred")

    def __init__(self, program: Program, treedef=None, captures: tuple = (), capture_at: int = 0):
        self._program = program
        # a primal program's naming from the user's source, not yet run (``trace``'s ``naming``): run when the
        # program is first read, except by the eager walk (``unnamed``), which needs no names
        self.naming: Callable[[], Program] | None = None
        self.treedef = treedef
        # tracers of enclosing traces the function closes over: the program's inputs from
        # ``capture_at`` on (after the primal leaves, before any tangents or cotangents), passed
        # when it is inlined into the enclosing trace (such a program is never compiled)
        self.captures = captures
        self.capture_at = capture_at
        self.backend = numpy_backend  # the CuPy backend for CuPy arguments (set by differentiate)
        self.loops = "numpy"  # which loops Numba compiles: differentiate's ``compile`` (see ``numba_loops``)
        # the program is one that ``canonical`` returns as it is, free of dead code (a primal's, known when
        # it is made): the derivatives' ``linearize`` runs neither again (``canonical_form``)
        self.canonical = False
        # under ``compile="auto"``: Numba compiles the loops now, even where its on-disk cache lacks them (the
        # program has run as NumPy for ``numba_loops.AUTO_WARM_SECONDS``; see ``_warming``)
        self.warm = False
        self.warming: numba_warming.Warming | None = None  # the subprocess compiling them meanwhile, once started
        # the compiled function is the NumPy stand-in for one with loops that Numba's cache lacks: what compiles
        # them (``numba_warming.Deferred``; see ``_warming``)
        self._deferred: numba_warming.Deferred | None = None
        self._fn: Callable | None = None
        self._run: Callable | None = None
        self._source: str | None = None
        self._constants: dict[str, Any] = {}

    @property
    def program(self) -> Program:
        if self.naming is not None:
            with _NAMING.held():  # (another thread reading it meanwhile waits for the names, not half of them)
                naming = self.naming
                if naming is not None:
                    naming()  # (in place: a program whose naming is deferred holds no loop bodies)
                    self.naming = None
        return self._program

    @program.setter
    def program(self, program: Program) -> None:
        self._program, self.naming = program, None

    @property
    def unnamed(self) -> Program:
        """The program, its values' names from the user's source perhaps not given yet (``naming``)."""
        return self._program

    def _compile(self) -> Callable:
        n, logging_on = len(self.program.eqns), log.logger.isEnabledFor(logging.INFO)
        if n >= log.LARGE:  # seconds of printing and compiling ahead: said even with logging off
            log.logger.log(logging.INFO if logging_on else logging.WARNING,
                           "compiling %s (%d equations), which takes seconds ...", self.program.name, n)
        start = time.perf_counter()
        loops = self.loops if self.backend is numpy_backend else "numpy"
        self._fn, self._source = compile_program(self.program, self.backend, out_tree=self.treedef, loops=loops,
                                                 cold=loops != "auto" or self.warm)
        self._deferred = getattr(self._fn, "__pullback_deferred__", None)
        if logging_on:
            log.logger.info("compiled %s: %d equations, %d lines, %.3f s", self.program.name, n,
                            self._source.count("\n"), time.perf_counter() - start)
        self._constants = dict(self._fn.__kwdefaults__ or {})  # the arrays the runner passes, by parameter name
        if self.treedef is not None and not printable_tree(self.treedef):  # dicts: rebuild in Python
            fn, treedef = self._fn, self.treedef
            n = len(self.program.outputs)
            self._fn = lambda *a: unflatten(treedef, fn(*a) if n > 1 else [fn(*a)])
        return self._fn

    def runner(self) -> Callable:
        """The compiled function with only what concrete calls need around it (no tracer
        check): what ``differentiate``'s per-signature fast path calls."""
        if self._run is not None:
            return self._run
        with _COMPILING.held():  # threads calling a new program at once: one compiles it, the others take it
            return self._run or self._runner()

    def _runner(self) -> Callable:
        fn = self._fn or self._compile()
        if self.backend is numpy_backend:  # NumPy's floating-point warnings at the user's lines
            fn = errstate.attributed(fn)
        wrap = getattr(self.backend, "wrap", None)  # Dask: constants persisted once per client
        if wrap is not None:
            fn = wrap(fn)
        # the generated NumPy code makes the Python scalars it must into arrays itself (codegen.scalar_inputs)
        as_array: tuple[int, ...] = ()
        asarray = getattr(self.backend, "asarray", np.asarray)
        if getattr(self.backend, "SCALARS_AS_ARRAYS", False):
            as_array = tuple(range(len(self.program.inputs)))

        def run(*args):
            if as_array:
                args = tuple(asarray(a) if i in as_array else a for i, a in enumerate(args))
            try:
                return fn(*args)
            except np.linalg.LinAlgError as e:  # generated code depends on NumPy alone
                if isinstance(e, LinAlgError):
                    raise
                raise LinAlgError(str(e)) from None

        if self._deferred:
            self._run = self._warming(run)
        else:
            self._run = run if "@numba.njit" not in (self._source or "") else self._falling_back(run)
        return self._run

    def _warming(self, run: Callable) -> Callable:
        """``run``, the NumPy program standing in for one whose loops Numba has not compiled yet (``auto``
        with a cold cache), replaced by the compiled one once the calls have taken
        ``numba_loops.AUTO_WARM_SECONDS`` in all and the loops have compiled in a subprocess meanwhile
        (``numba_warming``): a program run once never waits for LLVM, nor does one that keeps running. A
        subprocess that fails leaves the program NumPy for good. Where none can start, the loops compile in
        this process once the calls have taken as long as that compile should (``numba_loops.compile_estimate``:
        ski rental, at most twice the better choice had the number of calls been known)."""
        deferred = self._deferred
        spent, instead, here = [0.0], [], [False]
        lock = threading.Lock()  # one subprocess, one switch, whichever threads call

        def switch(to: Callable | None) -> None:
            if to is None:  # compiled now, here or from the cache the subprocess filled
                self.warm, self._fn, self._run = True, None, None
                to = self.runner()
            instead.append(to)

        def run_then_compile(*args):
            if instead:
                return instead[0](*args)
            job = self.warming
            if job is not None and job.poll() is not None:
                with lock:
                    if not instead:
                        switch(None if job.result else run)
                return instead[0](*args)
            start = time.perf_counter()
            out = run(*args)
            spent[0] += time.perf_counter() - start
            if spent[0] >= numba_loops.AUTO_WARM_SECONDS and job is None and lock.acquire(blocking=False):
                try:
                    if self.warming is None and not here[0] and not instead:
                        self.warming = numba_warming.start(deferred, args)
                        here[0] = self.warming is None
                    if here[0] and not instead and spent[0] >= numba_loops.compile_estimate(deferred.source):
                        switch(None)
                finally:
                    lock.release()
            return out

        return run_then_compile

    def _falling_back(self, run: Callable) -> Callable:
        """``run``, which calls loops compiled by Numba, replaced by the NumPy program for good once a loop
        fails to compile (for these layouts); callers that kept this runner reach the new one through it."""
        numba_errors = numba_loops.compile_errors()
        instead: list[Callable] = []

        def run_or_numpy(*args):
            if instead:
                return instead[0](*args)
            try:
                return run(*args)
            except numba_errors as e:
                instead.append(self._without_numba(e))
                return instead[0](*args)

        return run_or_numpy

    def _without_numba(self, error: BaseException) -> Callable:
        """The runner of this program printed without Numba, which replaces the one that failed."""
        numba_loops.log_fallback(self.program.name, error)
        self.loops, self._fn, self._run, self._source = "numpy", None, None, None
        return self.runner()

    def _inline(self, args):
        if self.captures:
            args = (*args[:self.capture_at], *self.captures, *args[self.capture_at:])
        outs = inline(self.program, args)
        if self.treedef is None:
            return outs if len(outs) != 1 else outs[0]
        return unflatten(self.treedef, outs)

    @property
    def source(self) -> str:
        if self._source is None:
            self._compile()
        return self._source  # type: ignore[return-value]

    @property
    def constants(self) -> dict[str, Any]:
        if self._source is None:
            self._compile()
        return dict(self._constants)

    def __call__(self, *args):
        if self.captures:
            return self._inline(args)
        for a in args:
            if type(a) is Tracer:
                return self._inline(args)
            if type(a) is ShapeDtypeStruct:
                raise TypeError(f"{self.program.name} was called on a ShapeDtypeStruct, which has a shape and a dtype "
                                "but no values: read the program with source, ir or pb.export, or call it on arrays")
        return (self._run or self.runner())(*args)


def _as_tuple(nums: int | Sequence[int]) -> tuple[int, ...]:
    return (nums,) if isinstance(nums, int) else tuple(nums)


def _signature(args: tuple) -> tuple:
    """Shapes and dtypes of arrays; the type of scalars (a NumPy scalar type names its dtype)."""
    return tuple(map(_signature_of, args))


def _signature_of(a):
    t = type(a)
    if t is np.ndarray:
        return a.shape, a.dtype
    if isinstance(a, np.ndarray):  # a subclass: not the fast path's; its program is keyed as an ndarray's
        return a.shape, a.dtype, t
    if t is Tracer:
        return a.shape, a.dtype, a.weak
    if t in _SCALARS:
        return t
    if is_cupy(a):
        return a.shape, a.dtype, "cuda"
    if is_dask(a):  # a program per chunking: printing follows the chunks
        return a.shape, a.dtype, "dask", chunks_of(a)
    if t is ShapeDtypeStruct:  # traced without an example value: a program apart from the arrays'
        return a.shape, a.dtype, t
    return t


def at_boundary(a):
    """An argument as compiled programs take it: an ndarray subclass (``np.memmap``) as a plain
    ndarray view of it (no copy), non-native byte order (``>f8`` from FITS or HDF5) converted to
    native (a copy); ``np.matrix`` and masked arrays refused (see ``refuse_subclass``)."""
    if type(a) is not np.ndarray:
        if not isinstance(a, np.ndarray):
            return a
        refuse_subclass(a)
        a = np.asarray(a)
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


RECOMPILES = 5  # values of one static argument, each compiling a program, before the log says so


class _Kwargs(dict):
    """Keyword arguments of a call, carried as one last dynamic argument (a dict of leaves);
    those named in ``static_argnames`` ride along in ``static``, outside the traced leaves."""

    static: dict[str, Any] = {}


def _static_key(v, i: int | str):
    """A static argument in a cache key: its type with its value (``2`` and ``2.0`` differ)."""
    key = (tuple, tuple(_static_key(e, i) for e in v)) if type(v) is tuple else (type(v), v)
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"static argument {i!r} (static_argnums, static_argnames) must be hashable, as programs are "
                        f"cached by its value; got a {type(v).__name__}") from None
    return key


def _backend_for(leaves: tuple, names=None):
    """CuPy arguments run the CuPy program, NumPy ones the NumPy program; never both."""
    if any(map(is_dask, leaves)):
        return dask_backend.for_leaves(leaves)
    gpu = [is_cupy(a) for a in leaves]
    if not any(gpu):
        return numpy_backend
    cpu = [i for i, a in enumerate(leaves) if isinstance(a, np.ndarray)]
    if cpu:
        raise TypeError(f"arguments mix NumPy (CPU) and CuPy (GPU) arrays: argument {cpu[0]} is a numpy.ndarray and "
                        f"argument {gpu.index(True)} a cupy.ndarray; move them to one device (cupy.asarray or .get())")
    from pullback.backends.cupy import backend as cupy_backend

    return cupy_backend


_CONTAINERS = frozenset({tuple, list, dict, _Kwargs})
_SCALARS = frozenset({bool, int, float, complex, np.bool_, np.int32, np.int64, np.float16, np.float32, np.float64,
                      np.complex64, np.complex128})

class _ByFunction:
    """Pickled and copied as the function and the options, never the compiled programs: a process
    pool's workers unpickle the callable (with each batch of tasks) and compile where they run."""

    fn: Callable

    def _options(self) -> dict[str, Any]:
        raise NotImplementedError

    def __reduce__(self):
        return _reduce(self, self._options())

    def __copy__(self):
        return type(self)(self.fn, **self._options())

    def __deepcopy__(self, memo):
        return self.__copy__()


class differentiate(_ByFunction):
    """A function made differentiable: call it (compiled), or ask for ``grad``,
    ``value_and_grad``, ``jvp``, ``vjp``, ``linearize``; read any stage with
    ``source`` or ``ir``. ``argnums`` picks the inputs reverse mode differentiates and
    ``static_argnums`` those that are Python values fixed per compiled program; both count
    positional arguments. Keyword arguments, as in JAX, are traced (dynamic) and not differentiated.
    A long Python loop, which tracing unrolls, is rolled back into a ``scan`` (``transforms.reroll``:
    compile time then depends on the loop's body, not its length); ``reroll=False`` keeps it unrolled.
    ``compile`` picks the loops (``scan``, ``fori_loop``, ``while_loop``) and the elementwise chains outside
    them printed as functions compiled by Numba, when it is installed: ``"auto"`` (the default, or
    ``$PULLBACK_COMPILE``) loops of many small steps and chains a measured cost model finds faster
    compiled, ``"numba"`` all it can compile, ``"numpy"`` none (see ``backends.numba_loops`` and
    ``backends.numba_chains``).
    Dask arrays run the Dask program (printed for their chunks, computed by one ``dask.compute``);
    ``backend="dask"`` runs it for NumPy arguments too, chunked as ``da.from_array(x, chunks)``.
    ``first_call`` picks how ``grad`` and ``value_and_grad`` serve a call: ``"compiled"`` differentiates,
    prints and compiles the whole gradient first; ``"eager"`` walks the primal program equation by equation
    (``api.eager``: each equation's derivative from the rules, one small compiled kernel per distinct
    equation, as an eager reverse mode would) at every call; ``"auto"`` (the default) walks the calls of a
    signature where the program is long, flat (no loops or conditionals left) and repeats few distinct
    equations (an unrolled loop), until the walks have taken as long as compiling should
    (``eager.compile_estimate``), then compiles. Where the walk cannot serve (loops, other backends, traced
    calls), the compiled program does.

    Use as ``@differentiate`` or ``@differentiate(argnums=(0, 1))``.

    >>> @pb.differentiate(argnums=(0, 1))
    ... def f(x, y):
    ...     return np.sum(x * np.log(y))
    >>> x, y = np.array([1.0, 2.0]), np.array([1.0, 4.0])
    >>> value, (x_bar, y_bar) = f.value_and_grad(x, y)
    >>> round(float(value), 6), np.allclose(x_bar, np.log(y)), y_bar.tolist()
    (2.772589, True, [1.0, 0.5])
    >>> "def f_grad(x, y):" in f.source(x, y)
    True
    """

    def __new__(cls, fn: Callable | None = None, *, argnums: int | Sequence[int] = 0,
                static_argnums: int | Sequence[int] = (), has_aux: bool = False,
                static_argnames: str | Sequence[str] = (), reroll: bool = True, compile: str | None = None,
                backend: str | None = None, chunks: Any = "auto", first_call: str = "auto"):
        if fn is None:
            return functools.partial(cls, argnums=argnums, static_argnums=static_argnums, has_aux=has_aux,
                                     static_argnames=static_argnames, reroll=reroll, compile=compile, backend=backend,
                                     chunks=chunks, first_call=first_call)
        return super().__new__(cls)

    def __init__(self, fn: Callable, *, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
                 has_aux: bool = False, static_argnames: str | Sequence[str] = (), reroll: bool = True,
                 compile: str | None = None, backend: str | None = None, chunks: Any = "auto",
                 first_call: str = "auto"):
        functools.update_wrapper(self, fn)
        self.fn = fn
        # which loops print as functions compiled by Numba, when it is installed (``numba_loops``); None:
        # $PULLBACK_COMPILE, else "auto"
        self.compile = None if compile is None else numba_loops.check_mode(compile)
        if backend not in (None, "numpy", "dask"):
            raise ValueError(f"backend must be None (by the arguments: NumPy, CuPy or Dask arrays), 'numpy' or 'dask', "
                             f"got {backend!r}")
        # backend="dask": NumPy arguments become Dask arrays of these chunks (da.from_array's), as Dask arguments
        # do by themselves
        self.backend, self.chunks = backend, chunks
        self.argnums = argnums
        # as JAX infers them: a static parameter is static whether passed by position or by name
        self._params = _positional_params(fn) if _as_tuple(static_argnums) or static_argnames else None
        self.static_argnums, self.static_argnames = _infer_static(
            self._params, _as_tuple(static_argnums), (static_argnames,) if isinstance(static_argnames, str)
            else tuple(static_argnames))
        # fn returns (value, aux): grad differentiates value and returns aux beside it, as JAX's has_aux
        self.has_aux = has_aux
        self.reroll = reroll
        if first_call not in FIRST_CALLS:
            raise ValueError(f"first_call must be one of {', '.join(map(repr, FIRST_CALLS))}, got {first_call!r}")
        # how a gradient's first call is served: "eager" walks the primal program equation by equation
        # (``api.eager``) at every call, "compiled" compiles the whole gradient first, "auto" walks a long
        # flat program until its walks have taken as long as its compile should (``eager.compile_estimate``)
        self.first_call = first_call
        self._walked: dict[tuple, list] = {}  # stage key -> [the seconds its walks took, its primal] ("auto")
        self._stages: dict[tuple, Any] = {}
        # static argument (position or name) -> the values it has compiled programs for; None once the
        # log has said that they are many (``_count_static``)
        self._static_values: dict[int | str, set | None] = {}
        # (stage, signature of each argument) -> runner, for calls whose arguments are all
        # arrays or scalars: a steady-state call is one dict hit on a tuple of shapes and types
        self._runners: dict[tuple, Callable] = {}
        # both emptied when fn reads other objects than it did when they were traced (a rebound scalar)
        self._programs = cache.Programs(self._stages, self._runners)
        self._building = _Lock()  # held while a program is traced and built (``_stage``)

    def _options(self) -> dict[str, Any]:
        return {"argnums": self.argnums if isinstance(self.argnums, int) else _as_tuple(self.argnums),
                "static_argnums": self.static_argnums, "has_aux": self.has_aux,
                "static_argnames": self.static_argnames, "reroll": self.reroll, "compile": self.compile,
                "backend": self.backend, "chunks": self.chunks, "first_call": self.first_call}

    # --- programs, per stage and signature ---------------------------------------------------

    def _split_static(self, args: tuple) -> tuple[Callable, tuple, list[str] | None, list[int | None]]:
        """The function of the dynamic arguments alone, those arguments, their names, and their positions
        among the function's arguments (None: the keyword arguments)."""
        kw = _has_kwargs(args)
        if not self.static_argnums and not kw:
            return self.fn, args, None, list(range(len(args)))
        n = len(args) - kw
        static = {i: args[i] for i in self._static_at(args)}
        static_kw = args[n].static if kw else {}
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        positional = _arg_names(self.fn, n)
        names = [positional[i] for i in range(n) if i not in static] + [""] * kw  # keyword leaves: their keys

        def with_static(*dyn):
            it = iter(dyn)
            full = [static[i] if i in static else next(it) for i in range(len(args))]
            return call_user(self.fn, *full[:n], **(full[n] if kw else {}), **static_kw)

        with_static.__name__ = getattr(self.fn, "__name__", "f")
        with_static.__wrapped__ = self.fn  # type: ignore[attr-defined]
        return with_static, dynamic, names, [i for i in range(n) if i not in static] + [None] * kw

    def _static_at(self, args: tuple) -> tuple[int, ...]:
        """The static argnums this call passes by position."""
        n = len(args) - _has_kwargs(args)
        return tuple(i for i in self.static_argnums if i < n)

    def _check_static(self, args: tuple) -> None:
        kw = _has_kwargs(args)
        n = len(args) - kw
        for i in self.static_argnums:
            if 0 <= i < n:
                continue
            param = self._params[i] if self._params is not None and 0 <= i < len(self._params) else None
            if param is None or not (param.name in (args[-1].static if kw else {})
                                     or param.default is not param.empty):
                raise ValueError(f"static_argnums {self.static_argnums} out of range for a call with {n} positional "
                                 "arguments (pass static arguments by position, or by a parameter's name)")

    def _flat(self, args: tuple) -> tuple[tuple, tuple | None]:
        """The dynamic arguments' leaves (as ``at_boundary`` makes them), and their structures
        (None when all are arrays)."""
        if self.static_argnums:
            self._check_static(args)
        static = self._static_at(args) if self.static_argnums else ()
        dyn = args if not static else tuple(a for i, a in enumerate(args) if i not in static)
        for a in dyn:
            if type(a) in _CONTAINERS or is_node(a):  # (a NamedTuple, a registered class, an unregistered dataclass)
                break
        else:
            return self._placed(tuple(map(at_boundary, dyn))), None
        trees, leaves = [], []
        for a in dyn:
            arg_leaves, tree = flatten(a)
            leaves += arg_leaves
            trees.append(tree)
        return self._placed(tuple(map(at_boundary, leaves))), tuple(trees)

    def _placed(self, leaves: tuple) -> tuple:
        """The leaves on the backend that runs them: with ``backend="dask"`` or beside a Dask array, NumPy
        arrays chunked as ``da.from_array(a, chunks)`` (the chunks are then part of the signature)."""
        if self.backend == "dask" or (self.backend is None and any(map(is_dask, leaves))):
            return tuple(dask_backend.chunked(a, self.chunks) for a in leaves)
        if self.backend == "numpy" and any(map(is_dask, leaves)):
            raise TypeError("backend='numpy' was given a Dask array: compute it first (x.compute()) if it fits in "
                            "memory, or leave backend unset (Dask arrays run the Dask program)")
        return leaves

    def _leaf_ranges(self, args: tuple, trees: tuple | None) -> dict[int, range]:
        """Argument position -> the range of its leaves among the program's inputs."""
        ranges, start = {}, 0
        static = self._static_at(args)
        dyn_positions = [i for i in range(len(args)) if i not in static]
        for i in dyn_positions:
            n = 1 if trees is None else len(flatten(args[i])[0])
            ranges[i] = range(start, start + n)
            start += n
        return ranges

    def _wrt(self, program: Program, args: tuple, trees) -> tuple[list[bool], list[int]]:
        """Reverse-mode inputs (a mask over the program's inputs), and the argnums in order."""
        ranges = self._leaf_ranges(args, trees)
        nums = list(_as_tuple(self.argnums))
        n = len(args) - _has_kwargs(args)
        for i in nums:
            if i not in ranges or i >= n:
                raise ValueError(f"argnums {self.argnums} out of range or static for {n} positional arguments "
                                 "(argnums count positional arguments: keyword ones are not differentiated)")
        wanted = {k for i in nums for k in ranges[i]}
        wrt = [k in wanted for k in range(len(program.inputs))]
        for k, v in enumerate(program.inputs):
            if wrt[k] and not is_inexact(v.dtype):
                raise TypeError(f"argument {v.hint or k} has dtype {v.dtype.name}: only float and complex inputs "
                                "can be differentiated")
        return wrt, nums

    def _key(self, kind: str, args: tuple, leaves: tuple, trees) -> tuple:
        """The key of stage ``kind``'s program for these arguments: their signatures and static values."""
        key = (kind, trees, _has_kwargs(args), *map(_signature_of, leaves))
        if self.static_argnums:
            key += tuple(_static_key(args[i], i) for i in self._static_at(args))
        if _has_kwargs(args) and args[-1].static:
            key += (tuple((k, _static_key(v, k)) for k, v in sorted(args[-1].static.items())),)
        return key

    def _stage(self, kind: str, args: tuple, flat=None):
        leaves, trees = flat or self._flat(args)
        key = self._key(kind, args, leaves, trees)
        self._programs.check(self.fn)
        staged = self._stages.get(key)
        if staged is None:
            with self._building.held():  # threads finding no program at once: one builds it, the rest take it
                staged = self._stages.get(key) or self._new_stage(kind, args, key, leaves, trees)
        return staged

    def _new_stage(self, kind: str, args: tuple, key: tuple, leaves: tuple, trees) -> Staged:
        backend = _backend_for(leaves)
        start = time.perf_counter()
        nested = any(type(leaf) is Tracer for leaf in leaves)  # inlined in a trace: differentiated again
        # (what the build made and keeps goes to the oldest generation: a young scan of it cost 1 to 2 us per equation)
        with gc_paused(promote=True), keeping_stop_gradients() if nested else contextlib.nullcontext():
            staged = self._build(kind, args, trees)
        if log.logger.isEnabledFor(logging.INFO):
            signature = ", ".join(str(v.type) for v in staged.unnamed.inputs[:len(leaves)])
            log.logger.info("traced %s, stage %s, for (%s): %d equations, %.3f s%s",
                            getattr(self.fn, "__qualname__", "a function"), kind, signature,
                            len(staged.unnamed.eqns), time.perf_counter() - start,
                            f" (program {len(self._stages) + 1} of this function)" if self._stages else "")
        staged.backend = backend
        staged.loops = self.compile or numba_loops.default_mode()
        if not staged.captures:  # captures are found again by each trace
            self._stages[key] = staged
        self._programs.traced(self.fn)
        if kind == "primal" and (self.static_argnums or (_has_kwargs(args) and args[-1].static)):
            self._count_static(args)  # a program per value of the static arguments
        return staged

    def _count_static(self, args: tuple) -> None:
        """Note the values of the static arguments a program was traced for; at the ``RECOMPILES``-th
        value of one, say once (a warning of the ``pullback`` logger, as JAX warns of recompiles) that each
        value compiles a program of its own, and that tracing it would compile one for all."""
        n = len(args) - _has_kwargs(args)
        static: dict[int | str, Any] = {i: args[i] for i in self._static_at(args)}
        if _has_kwargs(args):
            static.update(args[-1].static)
        names = _arg_names(self.fn, n)
        for k, value in static.items():
            seen = self._static_values.setdefault(k, set())
            if seen is None:
                continue
            seen.add(_static_key(value, k))
            if len(seen) < RECOMPILES:
                continue
            self._static_values[k] = None
            name, mark = (names[k], f"static_argnums={k}") if isinstance(k, int) else (k, f"static_argnames={k!r}")
            log.logger.warning(
                "%s has compiled a program for each of %d values of its static argument %s (%s) and compiles one "
                "more for each new value: if %s only picks positions (a slice of fixed length, x[%s * b:(%s + 1) * b], "
                "an index), leave it out of %s: traced, it takes one program for every value",
                getattr(self.fn, "__qualname__", "a function"), len(seen), name, mark, name, name, name,
                mark.split("=")[0])

    def _build(self, kind: str, args: tuple, trees) -> Staged:
        """The program of stage ``kind``, by its builder in ``BUILDERS`` (every stage but the primal
        is built from the primal's program, staged first)."""
        build = BUILDERS.get(kind)
        if build is None:
            raise ValueError(f"unknown stage {kind!r}; one of {', '.join(STAGES)}")
        return build(self, kind, args, trees, None if kind == "primal" else self._stage("primal", args))

    def _build_primal(self, kind: str, args: tuple, trees, primal: None) -> Staged:
        f, dyn, names, positions = self._split_static(args)
        captures: list = []
        # the walk (``_eager``) needs no names: naming waits until something reads the program, where no pass
        # before then copies values (reroll does: it names first) and the program holds no loop bodies
        naming: list | None = [] if self.first_call != "compiled" and not self.reroll else None
        program, treedef = trace(f, dyn, captures=captures, arg_names=names, positions=positions, naming=naming)
        if naming and not eager.flat_program(program):
            program = naming.pop()()
        if self.reroll:
            program = reroll(program)
        # no dead values (pb.grad(f) inlined drops f's value; effects stay, see ``dce``), then one spelling per
        # factorisation, before any derivative
        clean = dce(program)
        program = canonical(clean)
        if naming and program is not clean:  # canonical's new values copy names: named first, and again
            naming.pop()()
            program = canonical(clean)
        staged = Staged(program, treedef, tuple(captures), len(program.inputs) - len(captures))
        staged.canonical = program is clean  # canonical of it is itself: linearize need not run it again
        staged.naming = naming[0] if naming else None
        return staged

    def _build_jvp(self, kind: str, args: tuple, trees, primal: Staged) -> Staged:
        p, n = primal.program, primal.capture_at  # the captures get no tangents: the inner derivative holds them
        wrt = [i < n and tangent_type(v.type) is not None for i, v in enumerate(p.inputs)]  # constant
        return _closed(primal, ad.optimize(jvp_transform(p, wrt)))

    def _build_linearized(self, kind: str, args: tuple, trees, primal: Staged) -> Staged:
        """``known`` (primals -> outputs and residuals), ``linear`` (residuals and tangents -> output
        tangents) and ``transpose`` (its transpose), of one linearisation."""
        wrt, _ = self._wrt(primal.program, args, trees)
        split = ad.linearize(primal.program, wrt, self._n_aux(primal), canonical_form=primal.canonical)
        if kind == "known":
            return _closed(primal, ad.optimize(split.known))
        if kind == "linear":
            return Staged(ad.optimize(split.unknown))
        program = ad.transpose_linear(split)
        _name_cotangents(primal.program, program.inputs[split.n_residuals:])
        return Staged(program)

    def _build_vjp(self, kind: str, args: tuple, trees, primal: Staged) -> Staged:
        wrt, _ = self._wrt(primal.program, args, trees)
        program = ad.vjp(primal.program, wrt, canonical_form=primal.canonical)
        _name_cotangents(primal.program, program.inputs[len(primal.program.inputs):])
        return _closed(primal, program)

    def _build_grad(self, kind: str, args: tuple, trees, primal: Staged) -> Staged:
        p = primal.program
        wrt, nums, n_aux, tree = self._grad_layout(primal, args, trees)
        g = ad.value_and_grad(p, wrt, n_aux, canonical_form=primal.canonical)
        program = Program(g.inputs, g.eqns, self._grad_outputs(list(g.outputs), n_aux, args, trees, nums), g.constvars,
                          g.constvals, g.name)
        return _closed(primal, program, tree)

    def _grad_outputs(self, outputs: list, n_aux: int, args: tuple, trees, nums: list[int]) -> tuple:
        """(value, *aux, *cotangents grouped by argnum) from (value, *aux, *cotangents in input order)."""
        cts = self._by_argnum(outputs[1 + n_aux:], args, trees, nums)
        return (*outputs[:1 + n_aux], *[c for group in cts for c in group])

    def _grad_layout(self, primal: Staged, args: tuple, trees) -> tuple[list[bool], list[int], int, Any]:
        """The inputs differentiated (a mask), the argnums in order, the number of auxiliary outputs, and
        the gradient's output tree, after checking that the function returns a real scalar."""
        p = primal.unnamed  # (read for its structure: the walk needs no names)
        wrt, nums = self._wrt(p, args, trees)
        n_aux, aux_tree = 0, None
        if self.has_aux:
            tree = primal.treedef
            if not (tree is not LEAF and tree[0] in (tuple, list) and len(tree[1]) == 2 and tree[1][0] is LEAF):
                raise TypeError(f"with has_aux=True, {p.name} must return a pair (value, aux)")
            n_aux, aux_tree = len(p.outputs) - 1, tree[1][1]
        main = Program(p.inputs, p.eqns, p.outputs[:1], p.constvars, p.constvals, p.name) if n_aux else p
        if not ad.is_real_scalar(main):
            types = ", ".join(map(str, p.out_types[:1] if self.has_aux else p.out_types))
            raise TracingError(f"{self._output_line(main)}: grad needs a function returning a real scalar (or an "
                            f"array of one element); {p.name} returns {types} (use vjp or jvp)")
        grads = self._grads_tree(args, trees, nums)
        tree = (tuple, ((tuple, (LEAF, aux_tree)), grads)) if self.has_aux else (tuple, (LEAF, grads))
        return wrt, nums, n_aux, tree

    def _eager(self, args: tuple, flat: tuple):
        """The gradient served by walking the primal program (``api.eager``) where ``first_call`` asks for
        it and the walk can serve it; None where the compiled program serves this call."""
        leaves, trees = flat
        key = self._key("grad", args, leaves, trees)
        walked = self._walked.get(key)
        if key in self._stages or walked is not None and walked[0] >= eager.compile_estimate(walked[1]):
            return None  # "auto": compiled once the walks have taken as long as compiling should
        for leaf in leaves:
            if not ((type(leaf) is np.ndarray and leaf.dtype.isnative) or type(leaf) in _SCALARS):
                eager.log_fallback("its arguments are not all NumPy arrays or scalars")
                return None
        # the collector off through the trace and the walk, what they made then promoted to the oldest generation:
        # a young scan of the program's objects (about 5 per equation) cost 0.5 us per equation, a tenth of the
        # walk; the walk's own objects die by their reference counts
        with gc_paused(promote=True):
            return self._walk(args, flat, key, walked)

    def _walk(self, args: tuple, flat: tuple, key: tuple, walked: list | None):
        """``_eager`` once the arguments are known to suit the walk."""
        leaves, trees = flat
        primal = self._stage("primal", args, flat)
        p = primal.unnamed
        if primal.captures or self.backend == "dask":
            eager.log_fallback("it is traced inside another function" if primal.captures else "the backend is Dask")
            return None
        if not eager.flat_program(p):
            eager.log_fallback("the program holds loops or conditionals")
            return None
        first = self.first_call == "auto" and walked is None
        if first and len(p.eqns) < eager.MIN_EQUATIONS:
            return None
        wrt, nums, n_aux, tree = self._grad_layout(primal, args, trees)
        start = time.perf_counter()
        built = eager.built[0]
        try:  # "auto": None where the program repeats too few signatures (the walk's first pass counts them)
            served = _EAGER_RUN(p, leaves, wrt, eager.MIN_REPEATS if first else 0)
        except np.linalg.LinAlgError as e:  # as ``Staged.runner``: pullback's own error, at the user's line
            if isinstance(e, LinAlgError):
                raise
            raise LinAlgError(str(e)) from None
        if served is None:
            return None
        values, grads = served
        if first:
            walked = self._walked[key] = [0.0, p]
        if walked is not None:
            walked[0] += time.perf_counter() - start
        if log.logger.isEnabledFor(logging.INFO):
            log.logger.info("served %s's gradient eagerly (%s): %d equations walked, %d kernels built, %.3f s",
                            getattr(self.fn, "__qualname__", "a function"), self.first_call, len(p.eqns),
                            eager.built[0] - built, time.perf_counter() - start)
        return unflatten(tree, self._grad_outputs(values[:1 + n_aux] + grads, n_aux, args, trees, nums))

    def _build_jacobian(self, kind: str, args: tuple, trees, primal: Staged) -> Staged:
        """``jacfwd``, ``jacrev``, ``jacobian`` (the cheaper of the two) and ``hessian``."""
        p = primal.program
        wrt, nums = self._wrt(p, args, trees)
        if not self.has_aux:
            return _closed(primal, *self._jacobian_program(kind, p, wrt, args, trees, nums, primal.treedef))
        n_main = len(p.outputs) - self._n_aux(primal)  # differentiate ``out`` of ``(out, aux)``; aux beside it
        main = Program(p.inputs, p.eqns, p.outputs[:n_main], p.constvars, p.constvals, p.name)
        aux = Program(p.inputs, p.eqns, p.outputs[n_main:], p.constvars, p.constvals, p.name)
        j, tree = self._jacobian_program(kind, main, wrt, args, trees, nums, primal.treedef[1][0])
        return _closed(primal, jacobian_transforms.joined(j, aux), (tuple, (tree, primal.treedef[1][1])))

    def _build_hessian_factors(self, kind: str, args: tuple, trees, primal: Staged) -> Staged:
        p = primal.program
        wrt, nums = self._wrt(p, args, trees)
        return _factored_hessian(self._jacobian_program("hessian", p, wrt, args, trees, nums, primal.treedef)[0],
                                 primal)

    def _jacobian_program(self, kind: str, p: Program, wrt: list[bool], args: tuple, trees, nums: list[int],
                          out_tree) -> tuple[Program, Any]:
        """The Jacobian (or Hessian) program, its outputs regrouped from input order into argnums
        order, and its output tree: each output leaf replaced by the argnums structure (twice
        for a Hessian), as JAX's ``jacfwd`` returns it."""
        if kind == "jacobian":  # the mode whose optimised program has fewer flops (ties: the smaller batch)
            n_in = sum(v.type.size for v, w in zip(p.inputs, wrt) if w)
            by_size = ("jacrev", "jacfwd") if sum(o.type.size for o in p.outputs) < n_in else ("jacfwd", "jacrev")
            j, kind = min(((getattr(jacobian_transforms, k)(p, wrt), k) for k in by_size),
                          key=lambda jk: program_flops(jk[0]))
        else:
            j = getattr(jacobian_transforms, kind)(p, wrt)
        w = sum(wrt)
        per_out = w * w if kind == "hessian" else w
        outs, group = list(j.outputs), functools.partial(self._by_argnum, args=args, trees=trees, nums=nums)
        flat = []
        for start in range(0, len(outs), per_out):
            block = outs[start:start + per_out]
            if kind == "hessian":
                rows = [[x for g in group(block[i * w:(i + 1) * w]) for x in g] for i in range(w)]
                block = [x for g in group(rows) for row in g for x in row]
            else:
                block = [x for g in group(block) for x in g]
            flat += block
        sub = self._grads_tree(args, trees, nums)
        tree = graft(out_tree, graft(sub, sub) if kind == "hessian" else sub)
        return Program(j.inputs, j.eqns, tuple(flat), j.constvars, j.constvals, j.name), tree

    def _by_argnum(self, cts: list, args: tuple, trees, nums: list[int]) -> list[list]:
        """Cotangents (in input order) grouped per argnum, in argnums order."""
        ranges = self._leaf_ranges(args, trees)
        wanted = sorted({k for i in nums for k in ranges[i]})
        at = {k: c for k, c in zip(wanted, cts)}
        return [[at[k] for k in ranges[i]] for i in nums]

    def _grads_tree(self, args: tuple, trees, nums: list[int]):
        static = self._static_at(args)
        dyn_positions = [i for i in range(len(args)) if i not in static]
        arg_trees = [LEAF if trees is None else trees[dyn_positions.index(i)] for i in nums]
        return arg_trees[0] if isinstance(self.argnums, int) else (tuple, tuple(arg_trees))

    # --- calling ------------------------------------------------------------------------------

    def _pack(self, args: tuple, kwargs: dict) -> tuple:
        """``args`` and the keyword arguments as one last argument, static ones (``static_argnames``) apart."""
        packed = _Kwargs({k: v for k, v in kwargs.items() if k not in self.static_argnames})
        if len(packed) != len(kwargs):
            packed.static = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        return (*args, packed)

    def _run(self, kind: str, args: tuple):
        flat = self._flat(args)
        if kind == "grad" and self.first_call != "compiled":
            served = self._eager(args, flat)
            if served is not None:
                return served
        staged = self._stage(kind, args, flat)
        concrete = all((type(a) is np.ndarray and a.dtype.isnative) or type(a) in _SCALARS for a in args)
        if concrete and getattr(staged.backend, "FAST_PATH", True) and not staged.captures and not self.static_argnums:
            self._runners[(kind, *map(_signature_of, args))] = staged.runner()
        return staged(*flat[0])

    def __call__(self, *args, **kwargs):
        if kwargs:
            return self._run("primal", self._pack(args, kwargs))
        self._programs.check(self.fn)  # what fn reads is what it read when its programs were traced
        run = self._runners.get(("primal", *map(_signature_of, args)))
        return run(*args) if run is not None else self._run("primal", args)

    def value_and_grad(self, *args, **kwargs):
        if kwargs:
            return self._run("grad", self._pack(args, kwargs))
        self._programs.check(self.fn)  # what fn reads is what it read when its programs were traced
        run = self._runners.get(("grad", *map(_signature_of, args)))
        return run(*args) if run is not None else self._run("grad", args)

    def grad(self, *args, **kwargs):
        """The gradient; with ``has_aux``, ``(gradient, aux)``."""
        out = self.value_and_grad(*args, **kwargs)
        return (out[1], out[0][1]) if self.has_aux else out[1]

    def _call_stage(self, kind: str, args: tuple, kwargs: dict):
        if kwargs:
            return self._run(kind, self._pack(args, kwargs))
        self._programs.check(self.fn)  # what fn reads is what it read when its programs were traced
        run = self._runners.get((kind, *map(_signature_of, args)))
        return run(*args) if run is not None else self._run(kind, args)

    def jacfwd(self, *args, **kwargs):
        """The Jacobian by forward mode (one batched JVP over the identity): for each output leaf,
        an array of shape ``out.shape + in.shape`` per ``argnums`` argument leaf."""
        return self._call_stage("jacfwd", args, kwargs)

    def jacrev(self, *args, **kwargs):
        """The Jacobian by reverse mode (one forward pass, one batched transposed pass over the
        identity); the same structure as ``jacfwd``."""
        return self._call_stage("jacrev", args, kwargs)

    def jacobian(self, *args, **kwargs):
        """``jacrev`` when the outputs have fewer entries than the ``argnums`` inputs, else ``jacfwd``."""
        return self._call_stage("jacobian", args, kwargs)

    def hessian(self, *args, compressed: bool = False, **kwargs):
        """``jacfwd(jacrev(f))``: shape ``out.shape + in.shape + in.shape`` per output leaf. With
        ``compressed=True`` (a real-scalar function of one array argument), a
        ``pullback.api.kronecker.KroneckerOperator``: the Hessian as a sum of Kronecker products of
        its factors, never made dense (the factors' program is ``source(..., program="hessian_factors")``);
        for a vector argument, ``diag(d) + U V^T`` (``pullback.api.lowrank.DiagonalPlusLowRank``)
        where the Hessian has that form."""
        if not compressed:
            return self._call_stage("hessian", args, kwargs)
        if self.has_aux:
            raise TypeError("hessian(..., compressed=True) does not take has_aux=True")
        args = self._pack(args, kwargs) if kwargs else args
        flat = self._flat(args)
        staged = self._stage("hessian_factors", args, flat)
        if staged.backend is not numpy_backend:
            raise TypeError("hessian(..., compressed=True) returns a SciPy LinearOperator: it takes NumPy arrays "
                            "(the factors' CuPy program prints with source(..., compressed=True, device='cuda'))")
        if isinstance(staged.structure, lowrank.Structure):
            return staged.structure.operator(staged(*flat[0]))
        return kronecker.operator(staged.structure, staged(*flat[0]))

    def jvp(self, primals: Sequence, tangents: Sequence):
        """``(f(*primals), J(primals) @ tangents)``; tangents have the primals' structure
        (those of non-float inputs are ignored)."""
        primals, tangents = tuple(primals), tuple(tangents)
        self._programs.check(self.fn)  # what fn reads is what it read when its programs were traced
        run = self._runners.get(("jvp-call", *map(_signature_of, primals), *map(_signature_of, tangents)))
        if run is not None:
            return run(primals, tangents)
        if len(primals) != len(tangents):
            raise ValueError(f"jvp got {len(primals)} primals and {len(tangents)} tangents")
        flat = self._flat(primals)
        flat_t = self._flat(tuple(tangents[i] if i not in self._static_at(primals) else primals[i]
                                  for i in range(len(primals))))
        if flat_t[1] != flat[1] or len(flat_t[0]) != len(flat[0]):
            raise ValueError("tangents must have the structure of the primals")
        primal: Staged = self._stage("primal", primals, flat)
        ts = [_tangent_like(t, v) for t, v in zip(flat_t[0], primal.program.inputs) if is_inexact(v.dtype)]
        staged = self._stage("jvp", primals, flat)
        outs = _as_list(staged(*flat[0], *ts))
        m = len(primal.program.outputs)
        if not self.has_aux:
            self._jvp_runner(primals, tangents, flat[1], primal, staged)
        if self.has_aux:  # ``(out, out_dot, aux)`` as JAX's; aux's tangents are dropped
            k = m - self._n_aux(primal)
            out_tree, aux_tree = primal.treedef[1]
            return unflatten(out_tree, outs[:k]), unflatten(out_tree, outs[m:m + k]), unflatten(aux_tree, outs[k:m])
        return unflatten(primal.treedef, outs[:m]), unflatten(primal.treedef, outs[m:])

    def _jvp_runner(self, primals: tuple, tangents: tuple, trees, primal: Staged, staged: Staged) -> None:
        """For calls on arrays whose tangents have their primals' types exactly, a runner that skips
        what this call has checked once (structure, types, which inputs take tangents): a held
        object's steady-state ``jvp`` is then one check of what ``fn`` reads, one lookup and the program."""
        inputs = primal.program.inputs
        if (trees is not None or self.static_argnums or primal.captures or staged.captures
                or len(inputs) != len(primals)):
            return
        for a, t, v in zip(primals, tangents, inputs):
            if not (type(a) is np.ndarray and a.dtype.isnative) and type(a) not in _SCALARS:
                return
            if is_inexact(v.dtype) and not (type(t) is np.ndarray and t.shape == v.shape and t.dtype == v.dtype):
                return
        takes = tuple(i for i, v in enumerate(inputs) if is_inexact(v.dtype))
        fn, treedef, m = staged.runner(), primal.treedef, len(primal.program.outputs)

        if treedef is LEAF:  # one output and its tangent
            def run(primals: tuple, tangents: tuple):
                out, out_dot = fn(*primals, *[tangents[i] for i in takes])
                return out, out_dot
        else:
            def run(primals: tuple, tangents: tuple):
                outs = fn(*primals, *[tangents[i] for i in takes])
                outs = list(outs) if isinstance(outs, tuple | list) else [outs]
                return unflatten(treedef, outs[:m]), unflatten(treedef, outs[m:])

        self._runners[("jvp-call", *map(_signature_of, primals), *map(_signature_of, tangents))] = run

    def _forward(self, args: tuple):
        """Run the known program: (primal Staged, outputs, residuals)."""
        flat = self._flat(args)
        primal: Staged = self._stage("primal", args, flat)
        m = len(primal.program.outputs)
        known = _as_list(self._stage("known", args, flat)(*flat[0]))
        return primal, flat, known[:m], known[m:]

    def linearize(self, *args, **kwargs):
        """``(f(*args), jvp_fn)``: the forward pass runs now; ``jvp_fn(*tangents)``, one
        tangent per ``argnums`` argument, reuses its residuals."""
        args = self._pack(args, kwargs) if kwargs else args
        primal, flat, outs, residuals = self._forward(args)
        linear: Staged = self._stage("linear", args, flat)
        nums = list(_as_tuple(self.argnums))

        def jvp_fn(*tangents):
            if len(tangents) != len(nums):
                raise ValueError(f"jvp_fn takes {len(nums)} tangents, one per argnum")
            order = sorted(range(len(nums)), key=lambda k: nums[k])  # program inputs are in argument order
            leaves = [leaf for k in order for leaf in flatten(tangents[k])[0]]
            types = linear.program.inputs[len(residuals):]
            if len(leaves) != len(types):
                raise ValueError("jvp_fn's tangents must have the structure of the argnums arguments")
            leaves = [_tangent_like(t, v) for t, v in zip(leaves, types)]
            return unflatten(out_tree, _as_list(linear(*residuals, *leaves)))

        if self.has_aux:  # ``(out, jvp_fn, aux)`` as JAX's
            self._n_aux(primal)  # checks the pair
            out_tree = primal.treedef[1][0]
            value = unflatten(primal.treedef, outs)
            return value[0], jvp_fn, value[1]
        out_tree = primal.treedef
        return unflatten(primal.treedef, outs), jvp_fn

    def _output_line(self, program: Program) -> str:
        """Where the user's code made ``program``'s first output (the line of the equation that made
        it), else where the function is defined: for errors about what the function returns."""
        out = program.outputs[0]
        made = next((e.source for e in reversed(program.eqns) if any(v is out for v in e.outputs)), None)
        if made is not None:
            return str(made)
        code = getattr(inspect.unwrap(self.fn), "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else getattr(self.fn, "__name__", "f")

    def _n_aux(self, primal: Staged) -> int:
        """With ``has_aux``, how many output leaves are the auxiliary value's (the function must
        return a pair ``(out, aux)``)."""
        if not self.has_aux:
            return 0
        tree = primal.treedef
        if tree is LEAF or tree[0] not in (tuple, list) or len(tree[1]) != 2:
            raise TypeError(f"with has_aux=True, {primal.program.name} must return a pair (out, aux)")
        return len(primal.program.outputs) - len(flatten(unflatten(tree[1][0], iter(lambda: 0, 1)))[0])

    def vjp(self, *args, **kwargs):
        """``(f(*args), vjp_fn)``: ``vjp_fn(cotangent)`` returns the tuple of cotangents of
        the ``argnums`` arguments; the forward pass runs once, now. With ``has_aux``, ``f``
        returns ``(out, aux)`` and this returns ``(out, vjp_fn, aux)``, as JAX's ``vjp``."""
        args = self._pack(args, kwargs) if kwargs else args
        primal, flat, outs, residuals = self._forward(args)
        transpose: Staged = self._stage("transpose", args, flat)
        n_aux = self._n_aux(primal)
        out_tree = primal.treedef[1][0] if self.has_aux else primal.treedef
        out_types = primal.program.out_types[:len(primal.program.outputs) - n_aux]
        nums = list(_as_tuple(self.argnums))
        grads_tree = self._grads_tree(args, flat[1], nums)

        def vjp_fn(cotangent):
            cts, treedef = flatten(cotangent)
            if treedef != out_tree or len(cts) != len(out_types):
                raise ValueError("the cotangent must have the structure of the function's output")
            cts = [_tangent_like(c, t) for c, t in zip(cts, out_types)]
            grouped = self._by_argnum(_as_list(transpose(*residuals, *cts)), args, flat[1], nums)
            result = unflatten(grads_tree, [c for group in grouped for c in group])
            return (result,) if isinstance(self.argnums, int) else result

        if self.has_aux:
            value = unflatten(primal.treedef, outs)
            return value[0], vjp_fn, value[1]
        return unflatten(primal.treedef, outs), vjp_fn

    # --- reading ------------------------------------------------------------------------------

    def ir(self, *args, stage: str = "grad", **kwargs) -> Program:
        return self._stage(stage, self._pack(args, kwargs) if kwargs else args).program

    def with_backend(self, backend: str | None) -> differentiate:
        """This function, its options kept, on another backend (``"dask"``)."""
        new = self.__copy__()
        new.backend = backend
        return new

    def constants(self, *args, program: str = "grad", **kwargs) -> dict[str, Any]:
        """The arrays the generated source of a stage takes as keyword-only parameters, by name
        (the very objects: what a saved program needs besides the arguments)."""
        return self._stage(program, self._pack(args, kwargs) if kwargs else args).constants

    def source(self, *args, program: str = "grad", device: str = "cpu", compressed: bool = False,
               backend: str | None = None, **kwargs) -> str:
        """The generated source of a stage; ``device="cuda"`` prints the CuPy program for
        arguments of these shapes (no GPU, nor CuPy, is needed to read it). ``program="hessian",
        compressed=True`` is the ``"hessian_factors"`` stage: the compressed Hessian's factors.
        ``backend="dask"`` prints the Dask program (for Dask arguments' chunks, NumPy ones chunked
        by ``chunks``; Dask arguments print it by themselves)."""
        if backend == "dask" and self.backend != "dask":
            return self.with_backend("dask").source(*args, program=program, compressed=compressed, **kwargs)
        staged = self._stage("hessian_factors" if compressed and program == "hessian" else program,
                             self._pack(args, kwargs) if kwargs else args)
        if device == "cpu":
            return staged.source
        if device != "cuda":
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        from pullback.backends.cupy import backend as cupy_backend

        return print_program(staged.program, cupy_backend, out_tree=staged.treedef)


#: Each stage's builder: ``(differentiate, kind, args, trees, primal Staged or None) -> Staged``.
BUILDERS: dict[str, Callable[..., Staged]] = {
    "primal": differentiate._build_primal, "jvp": differentiate._build_jvp,
    "known": differentiate._build_linearized, "linear": differentiate._build_linearized,
    "transpose": differentiate._build_linearized, "vjp": differentiate._build_vjp, "grad": differentiate._build_grad,
    "jacfwd": differentiate._build_jacobian, "jacrev": differentiate._build_jacobian,
    "jacobian": differentiate._build_jacobian, "hessian": differentiate._build_jacobian,
    "hessian_factors": differentiate._build_hessian_factors,
}
STAGES = tuple(BUILDERS)
FIRST_CALLS = ("auto", "eager", "compiled")
_EAGER_RUN = errstate.attributed(eager.value_and_grads)  # NumPy's warnings at the user's lines, as compiled


def _name_cotangents(primal: Program, cts) -> None:
    """The cotangent parameters a vjp (or transpose) program takes, named after the outputs they are the
    cotangents of, as the gradients are after the inputs: ``def f_vjp(x, y, mul_bar)`` for an output
    printed as ``mul`` (a named one's ``loss_bar``; a literal one's ``out_bar``), not the fallback ``x_1``.
    The transform made these Vars itself, in no other program yet: named in place."""
    made = None
    for out, ct in zip(primal.outputs, cts):
        if ct.hint or type(ct) is not Var:
            continue
        hint = out.hint if type(out) is Var else "out"
        if not hint:
            if made is None:
                made = {id(v): e.prim for e in primal.eqns for v in e.outputs}
            prim = made.get(id(out))
            hint = TEMP_HINTS.get(prim, prim.name) if prim is not None else "out"
        ct.hint = cotangent_hint(hint)


def _closed(primal: Staged, program: Program, treedef=None) -> Staged:
    """A stage's program holding the primal's captures (the tracers of enclosing traces it reads)."""
    return Staged(program, treedef, captures=primal.captures, capture_at=primal.capture_at)


class _Factored(Staged):
    """The factors' program of a compressed Hessian, with the structure that assembles them."""

    __slots__ = ("structure",)


def _factored_hessian(h: Program, primal: Staged) -> _Factored:
    if len(h.outputs) != 1 or h.outputs[0].type.ndim % 2:
        raise TypeError("hessian(..., compressed=True) needs a real-scalar function and one array argument "
                        f"(argnums); {h.name} has {len(h.outputs)} Hessian blocks")
    program, terms = kronecker_factors(h)
    r = h.outputs[0].type.ndim // 2
    low = diagonal_plus_low_rank(h) if r == 1 else None  # a vector's: Kronecker factors add nothing to it
    if low is not None:  # diag(d) + U V^T: no Kronecker structure, but a compact form all the same
        staged = _Factored(low[0], (tuple, (LEAF,) * 3), primal.captures, primal.capture_at)
        staged.structure = lowrank.Structure(h.outputs[0].type.shape[:r], low[1])
        return staged
    staged = _Factored(program, (tuple, (LEAF,) * len(program.outputs)), primal.captures, primal.capture_at)
    staged.structure = kronecker.Structure(h.outputs[0].type.shape[:r], h.outputs[0].type.dtype, terms)
    return staged


def _positional_params(fn: Callable) -> list | None:
    """``fn``'s parameters that can be passed by position (None when it has no signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _infer_static(params: list | None, nums: tuple[int, ...], names: tuple[str, ...]) -> tuple[tuple, tuple]:
    """static_argnums and static_argnames completed from each other through the signature, as JAX does."""
    if params is None:
        return nums, names
    by_name = {p.name: i for i, p in enumerate(params)}
    more_nums = tuple(by_name[n] for n in names if n in by_name and by_name[n] not in nums)
    more_names = tuple(params[i].name for i in nums if 0 <= i < len(params) and params[i].name not in names
                       and params[i].kind is not params[i].POSITIONAL_ONLY)
    return nums + more_nums, names + more_names


def _as_list(out) -> list:
    return list(out) if isinstance(out, tuple | list) else [out]


def _has_kwargs(args: tuple) -> bool:
    return bool(args) and type(args[-1]) is _Kwargs


def _tangent_like(t, v):
    """A tangent or cotangent as an array of its primal's type. A complex one for a real value
    is refused (as JAX does) rather than losing its imaginary part, a masked one rather than its mask."""
    if isinstance(t, Tracer):
        return t
    refuse_subclass(t)
    arr = t if is_cupy(t) else np.asarray(t)
    if arr.shape != v.shape:
        raise ValueError(f"expected a (co)tangent of shape {v.shape}, got {arr.shape}")
    if arr.dtype.kind == "c" and v.dtype.kind != "c":
        raise TypeError(f"a complex (co)tangent ({arr.dtype}) for a real value ({v.dtype}): its imaginary part would "
                        "be lost; pass a real one, or make the value complex")
    return arr.astype(v.dtype, copy=False)


# --- function forms -------------------------------------------------------------------------
# ``pb.grad(f)(x)`` in a loop must not trace on every call: the function forms share one program
# cache per (function, argnums, static_argnums, ...), as JAX caches on the function's identity.
# Each call gets a ``differentiate`` object of its own, holding the function, around the shared
# state, which does not hold it: the cache is keyed on the function's identity, weakly
# (``cache.IdentityCache``), so an entry goes with its function (a one-off lambda and the arrays it
# captures are freed with it). Its programs are checked like any ``differentiate`` object's
# (``cache.snapshot``): a redefined function is another key; a rebound global, closure cell or
# default, or an attribute of a bound method's instance, traces again. Unpickling shares the same
# way (``_shared``): a pool's worker is sent the callable with every batch of tasks, and compiles once.

_HELD = cache.IdentityCache(256)


def held(fn: Callable, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
         has_aux: bool = False, static_argnames: str | Sequence[str] = (), first_call: str = "auto") -> differentiate:
    """A ``differentiate`` object for ``fn`` sharing the programs of every other one the function
    forms made for it (see above)."""
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    return _shared(differentiate, fn, argnums=argnums if isinstance(argnums, int) else _as_tuple(argnums),
                   static_argnums=_as_tuple(static_argnums), has_aux=has_aux, static_argnames=names,
                   first_call=first_call)


def _shared(cls: type, fn: Callable, **options) -> Any:
    """``cls(fn, **options)`` sharing its programs with every other one made here for the same function
    and options (see above): what the function forms use, and what unpickling makes."""
    key = _key_objects(fn)
    settings = (cls, *options.items())
    try:
        shared = _HELD.get(key, settings)
    except TypeError:  # an unhashable callable or option: no sharing
        return cls(fn, **options)
    if shared is None:
        made = cls(fn, **options)
        _HELD.put(key, settings, {k: v for k, v in vars(made).items() if v is not fn})  # all but fn, __wrapped__
        return made
    made = cls.__new__(cls, fn)
    made.__dict__.update(shared)
    made.fn = made.__wrapped__ = fn
    return made


def _reduce(obj: _ByFunction, options: dict[str, Any]):
    """How ``obj`` pickles: by name when it is its module's object of that name (``@pb.jit`` on a
    module-level function), else as its function and options, rebuilt (``_shared``) where unpickled.
    A function that pickle cannot find by its name (a lambda, a nested function) is refused here,
    naming it, rather than with pickle's own error from deep inside the pickled object."""
    if _found(getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")) is obj:
        return obj.__qualname__
    fn = obj.fn
    if isinstance(fn, types.FunctionType) and _found(fn.__module__, fn.__qualname__) is not fn:
        code = fn.__code__
        raise TypeError(f"cannot pickle pullback.{type(obj).__name__} of {fn.__qualname__} defined at "
                        f"{code.co_filename}:{code.co_firstlineno}: pickle needs a module-level function")
    return _unpickle, (type(obj), fn, options)


def _unpickle(cls: type, fn: Callable, options: dict[str, Any]) -> Any:
    return _shared(cls, fn, **options)


def _found(module: str | None, qualname: str) -> Any:
    """What pickle finds at ``module.qualname`` (None where nothing is)."""
    found = sys.modules.get(module or "")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def _key_objects(fn: Callable) -> tuple:
    """The objects whose identities name ``fn``'s entry: a bound method is made anew at each
    ``obj.method``, so it is named by its function and instance; the methods of the function forms'
    objects (``pb.grad(f)``, a bound method of a new object at each call) by their shared programs."""
    if type(fn) is MethodType:
        owner = fn.__self__
        return fn.__func__, owner._programs if isinstance(owner, differentiate) else owner
    return (fn,)


def grad(fn: Callable, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
         has_aux: bool = False, static_argnames: str | Sequence[str] = (), first_call: str = "auto") -> Callable:
    """The gradient of a real-scalar function with respect to ``argnums``; with ``has_aux``, ``fn``
    returns ``(value, aux)`` and the gradient comes with ``aux``: ``(gradient, aux)``.

    >>> pb.grad(lambda x: np.sum(x ** 2))(np.array([1.0, -2.0])).tolist()
    [2.0, -4.0]
    >>> abs(float(pb.grad(pb.grad(np.sin))(0.5)) + float(np.sin(0.5))) < 1e-12  # second derivative
    True
    """
    return held(fn, argnums, static_argnums, has_aux, static_argnames, first_call).grad


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
                   has_aux: bool = False, static_argnames: str | Sequence[str] = (),
                   first_call: str = "auto") -> Callable:
    """``(value, gradient)``; with ``has_aux``, ``((value, aux), gradient)`` as in JAX.

    >>> value, g = pb.value_and_grad(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    >>> float(value), g.tolist()
    (9.0, [3.0, 12.0])
    """
    return held(fn, argnums, static_argnums, has_aux, static_argnames, first_call).value_and_grad


def jvp(fn: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False,
        static_argnums: int | Sequence[int] = ()):
    """``(fn(*primals), J @ tangents)``: forward mode, one directional derivative (JAX's ``jvp``).
    With ``has_aux``, ``fn`` returns ``(out, aux)`` and ``jvp`` returns ``(out, out_dot, aux)``.
    ``static_argnums``: primals that are Python values fixed per compiled program (their tangents
    are ignored).

    >>> out, out_dot = pb.jvp(np.sin, (np.array([0.0, np.pi]),), (np.array([1.0, 2.0]),))
    >>> out_dot.tolist()  # cos(x) * x_dot
    [1.0, -2.0]
    """
    return held(fn, static_argnums=static_argnums, has_aux=has_aux).jvp(primals, tangents)


def vjp(fn: Callable, *primals, has_aux: bool = False, static_argnums: int | Sequence[int] = ()):
    """``(out, vjp_fn)`` with cotangents for every argument: ``vjp_fn(out_bar)`` returns one per
    argument (but the ``static_argnums`` ones); the forward pass runs once, however often
    ``vjp_fn`` is called. With ``has_aux``, ``fn`` returns ``(out, aux)`` and ``vjp`` returns
    ``(out, vjp_fn, aux)``.

    >>> A = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> out, vjp_fn = pb.vjp(lambda A, x: A @ x, A, np.ones(2))
    >>> A_bar, x_bar = vjp_fn(np.array([1.0, 0.0]))
    >>> A_bar.tolist(), x_bar.tolist()
    ([[1.0, 1.0], [0.0, 0.0]], [1.0, 2.0])
    """
    return held(fn, _dynamic(len(primals), static_argnums), static_argnums, has_aux).vjp(*primals)


def linearize(fn: Callable, *primals, has_aux: bool = False, static_argnums: int | Sequence[int] = ()):
    """``(fn(*primals), jvp_fn)``: the forward pass runs once, and ``jvp_fn(*tangents)`` applies the
    linear map (the Jacobian at ``primals``) to tangents, one per primal but the
    ``static_argnums`` ones, as JAX's ``linearize``; with ``has_aux``, ``fn`` returns
    ``(out, aux)`` and this returns ``(out, jvp_fn, aux)``.

    >>> out, jvp_fn = pb.linearize(lambda x: x ** 2, np.array([1.0, 3.0]))
    >>> jvp_fn(np.array([1.0, 1.0])).tolist()
    [2.0, 6.0]
    """
    return held(fn, _dynamic(len(primals), static_argnums), static_argnums, has_aux).linearize(*primals)


def _dynamic(n: int, static_argnums: int | Sequence[int]) -> tuple[int, ...]:
    """The positions of ``n`` arguments that are not static: those a function form differentiates."""
    static = {i % n for i in _as_tuple(static_argnums)} if n else set()
    return tuple(i for i in range(n) if i not in static)


class jit(_ByFunction):
    """``fn`` traced, printed and compiled once per argument signature, then called directly.

    >>> fast = pb.jit(lambda x, n: np.sum(x ** n), static_argnums=1)
    >>> float(fast(np.array([1.0, 2.0]), 3))
    9.0
    >>> "def " in fast.source(np.array([1.0, 2.0]), 3)
    True
    """

    def __new__(cls, fn=None, static_argnums=(), static_argnames=(), compile=None):
        if fn is None:  # @jit(static_argnames=...)
            return functools.partial(cls, static_argnums=static_argnums, static_argnames=static_argnames,
                                     compile=compile)
        return object.__new__(cls)

    def __init__(self, fn: Callable, static_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = (), compile: str | None = None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        # the staging (traces, caches, programs per signature) of ``differentiate``, used for its primal
        # program only: a jitted function has no derivative methods of its own (``pb.grad(jit(f))`` has)
        self._staging = differentiate(fn, static_argnums=static_argnums, static_argnames=static_argnames,
                                      compile=compile)

    def _options(self) -> dict[str, Any]:
        return {"static_argnums": self.static_argnums, "static_argnames": self.static_argnames,
                "compile": self.compile}

    def __call__(self, *args, **kwargs):
        return self._staging(*args, **kwargs)

    def source(self, *args, device: str = "cpu", **kwargs) -> str:
        """The printed program (what a call runs), for arguments like ``args``."""
        return self._staging.source(*args, program="primal", device=device, **kwargs)

    def constants(self, *args, **kwargs) -> dict[str, Any]:
        """The arrays the printed program takes as keyword-only constants, by name."""
        return self._staging.constants(*args, program="primal", **kwargs)

    def ir(self, *args, **kwargs) -> Program:
        """The traced program (pullback's IR), for arguments like ``args``."""
        return self._staging.ir(*args, stage="primal", **kwargs)

    @property
    def static_argnums(self):
        return self._staging.static_argnums

    @property
    def static_argnames(self):
        return self._staging.static_argnames

    @property
    def compile(self):
        return self._staging.compile

    @property
    def _programs(self):  # the staging's caches, as tests and tools inspect them
        return self._staging._programs

    @property
    def _runners(self):
        return self._staging._runners

    @property
    def _stages(self):
        return self._staging._stages


def make_ir(fn: Callable, static_argnums: int | Sequence[int] = (),
            static_argnames: str | Sequence[str] = ()) -> Callable[..., Program]:
    """``make_ir(f)(*args)``: the Program of ``f`` at the shapes and dtypes of ``args``.

    >>> def scaled_exp(x):
    ...     return np.exp(x) * 2.0
    >>> print(pb.make_ir(scaled_exp)(np.ones(3)))
    program scaled_exp(x: f64[3]):
      t: f64[3] = exp x
      t_1: f64[3] = mul t 2.0
      return t_1
    """
    return jit(fn, static_argnums, static_argnames).ir


def source(fn: Callable, *args, static_argnums: int | Sequence[int] = (), device: str = "cpu",
           backend: str | None = None, **kwargs) -> str:
    """The generated Python source of ``fn`` at these arguments, keyword arguments included as a call of
    ``fn`` takes them (``device="cuda"``: for CuPy; ``backend="dask"``: for Dask, NumPy arguments chunked
    by ``da.from_array``'s ``"auto"``).

    >>> def f(x):
    ...     return np.sum(np.sqrt(x))
    >>> print(pb.source(f, np.ones(3)), end="")  # doctest: +ELLIPSIS
    import numpy as np
    <BLANKLINE>
    <BLANKLINE>
    def f(x):
        # ...:2  return np.sum(np.sqrt(x))
        sqrt = np.sqrt(x)
        total = np.sum(sqrt)
        return total
    """
    return jit(fn, static_argnums).source(*args, device=device, backend=backend, **kwargs)


def jacfwd(fn: Callable, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
           has_aux: bool = False, static_argnames: str | Sequence[str] = ()) -> Callable:
    """The Jacobian of ``fn`` by forward mode: shape ``out.shape + in.shape`` (JAX's ``jacfwd``).
    With ``has_aux``, ``fn`` returns ``(out, aux)`` and this returns ``(jacobian, aux)``, as in JAX;
    likewise for ``jacrev``, ``jacobian`` and ``hessian``.

    >>> pb.jacfwd(lambda x: x[:2] * x[2])(np.array([1.0, 2.0, 3.0])).tolist()
    [[3.0, 0.0, 1.0], [0.0, 3.0, 2.0]]
    """
    return held(fn, argnums, static_argnums, has_aux, static_argnames).jacfwd


def jacrev(fn: Callable, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
           has_aux: bool = False, static_argnames: str | Sequence[str] = ()) -> Callable:
    """The Jacobian of ``fn`` by reverse mode: shape ``out.shape + in.shape`` (JAX's ``jacrev``).

    >>> pb.jacrev(lambda x: x[:2] * x[2])(np.array([1.0, 2.0, 3.0])).tolist()
    [[3.0, 0.0, 1.0], [0.0, 3.0, 2.0]]
    """
    return held(fn, argnums, static_argnums, has_aux, static_argnames).jacrev


def jacobian(fn: Callable, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
             has_aux: bool = False, static_argnames: str | Sequence[str] = ()) -> Callable:
    """The Jacobian of ``fn`` by the mode (forward or reverse) whose program has fewer flops after
    cross-country reordering (``program_flops``: multiply-adds of the contractions plus one per
    element of every other result); on a tie, reverse mode when ``fn`` has fewer outputs than inputs.

    >>> A = np.arange(6.0).reshape(2, 3)
    >>> np.array_equal(pb.jacobian(lambda x: A @ x)(np.ones(3)), A)
    True
    """
    return held(fn, argnums, static_argnums, has_aux, static_argnames).jacobian


def hessian(fn: Callable, argnums: int | Sequence[int] = 0, static_argnums: int | Sequence[int] = (),
            has_aux: bool = False, static_argnames: str | Sequence[str] = (), *, compressed: bool = False) -> Callable:
    """``jacfwd(jacrev(fn))``: shape ``out.shape + in.shape + in.shape``. With ``compressed=True``
    (``fn`` real-scalar, ``argnums`` one array argument), a ``KroneckerOperator`` of shape (N, N)
    holding the Hessian's Kronecker factors (see ``pullback.api.kronecker``), or for a vector
    argument whose Hessian is a diagonal plus a low-rank matrix, a ``DiagonalPlusLowRank``
    (``pullback.api.lowrank``).

    >>> pb.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0])).tolist()
    [[4.0, 2.0], [2.0, 0.0]]
    """
    d = held(fn, argnums, static_argnums, has_aux, static_argnames)
    return functools.partial(d.hessian, compressed=True) if compressed else d.hessian


def _is_static(x, axis) -> bool:
    """An unbatched Python int or bool: vmap keeps it a Python value (JAX's vmap does not trace it)."""
    return axis is None and type(x) in (int, bool)


class vmap(_ByFunction):
    """``fn`` mapped over an axis of its arguments, as one whole-array program (JAX's ``vmap``).

    ``in_axes``: an int or None for every argument, or a tuple with one per positional argument: an int
    or None for all of a tuple, list or dict argument's leaves, or a tree of them matching a prefix of the
    argument's structure (``{"W": 0, "b": None}``), as in JAX; None passes the argument unbatched.
    An unbatched Python int or bool stays a Python value, as in JAX (a loop bound, a flag): one
    program per value.
    ``out_axes``: where each output leaf gets the batch axis (an int, or a tuple per element of
    a tuple output); None for outputs that do not depend on the batch. Called inside a trace
    (``vmap(grad(f))``, ``vmap(vmap(f))``, or within a differentiated function) it inlines its
    batched program, so it composes with the other transforms.

    >>> X = np.arange(6.0).reshape(3, 2)
    >>> pb.vmap(lambda x, w: np.sum(x * w), in_axes=(0, None))(X, np.array([1.0, 10.0])).tolist()
    [10.0, 32.0, 54.0]
    >>> per_example = pb.vmap(pb.grad(lambda w, x: np.sum(x * w) ** 2), in_axes=(None, 0))(np.ones(2), X)
    >>> per_example.shape
    (3, 2)
    """

    def __init__(self, fn: Callable, in_axes: int | None | Sequence[int | None] = 0,
                 out_axes: int | None | Sequence[int | None] = 0):
        functools.update_wrapper(self, fn)
        self.fn, self.in_axes, self.out_axes = fn, in_axes, out_axes
        self._stages: dict[tuple, Staged] = {}
        self._programs = cache.Programs(self._stages)  # emptied when fn reads other objects (a rebound scalar)
        self._building = _Lock()  # held while a program is traced and built
        self._kw_maps: dict[tuple, vmap] = {}  # (positional count, keyword names) -> the map taking them

    def _options(self) -> dict[str, Any]:
        return {"in_axes": self.in_axes, "out_axes": self.out_axes}

    def _flat_axes(self, args: tuple) -> tuple[list, list, list]:
        axes = tuple(self.in_axes) if isinstance(self.in_axes, tuple | list) else (self.in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(f"vmap in_axes {self.in_axes} has {len(axes)} entries for {len(args)} arguments")
        leaves, trees, leaf_axes = [], [], []
        for a, axis in zip(args, axes):
            arg_leaves, tree = flatten(a)
            leaves += map(at_boundary, arg_leaves)
            trees.append(tree)
            try:
                leaf_axes += prefix_leaves(axis, a)
            except ValueError as e:
                raise ValueError(f"vmap in_axes: {e}") from None
        return leaves, trees, leaf_axes

    def _program(self, leaves: list, trees: list, leaf_axes: list) -> Staged:
        size, placeholders = None, []
        for k, (x, axis) in enumerate(zip(leaves, leaf_axes)):
            if _is_static(x, axis):
                continue
            if axis is None:
                placeholders.append(x if isinstance(x, PYTHON_SCALARS) else np.broadcast_to(
                    np.zeros((), x.dtype), np.shape(x)))
                continue
            shape = list(np.shape(x))
            if not -len(shape) <= axis < len(shape):
                raise ValueError(f"vmap in_axes {axis} out of range for argument leaf {k} of shape {tuple(shape)}")
            n = shape.pop(axis)
            if size is not None and n != size:
                raise ValueError(f"vmap got batch axes of different sizes, {size} and {n}")
            size = n
            placeholders.append(np.broadcast_to(np.zeros((), x.dtype), shape))
        if size is None:
            raise ValueError("vmap needs at least one argument with a batch axis (in_axes not None)")
        static = {k: x for k, (x, axis) in enumerate(zip(leaves, leaf_axes)) if _is_static(x, axis)}
        leaf_axes = [axis for k, axis in enumerate(leaf_axes) if k not in static]

        def mapped(*dyn):  # the function of the traced leaves, the static ones put back in place
            it = iter(dyn)
            full = iter([static[k] if k in static else next(it) for k in range(len(static) + len(dyn))])
            return call_user(self.fn, *[unflatten(tree, full) for tree in trees])

        functools.update_wrapper(mapped, self.fn)
        captures: list = []
        program, treedef = trace(mapped, placeholders, captures=captures)
        n_out = len(program.outputs)
        if isinstance(self.out_axes, tuple | list):
            if treedef is LEAF or treedef[0] not in (tuple, list) or len(treedef[1]) != len(self.out_axes):
                raise ValueError(f"vmap out_axes {self.out_axes} does not match the function's output structure")
            out_axes = [a for a, sub in zip(self.out_axes, treedef[1]) for _ in range(len(flatten(unflatten(
                sub, iter(range(n_out))))[0]))]
        else:
            out_axes = [self.out_axes] * n_out
        batched = ad.optimize(batch(program, [*leaf_axes, *[None] * len(captures)], size, out_axes))
        batched = Program(batched.inputs, batched.eqns, batched.outputs, batched.constvars, batched.constvals,
                          name=f"{program.name}_vmap")
        staged = Staged(batched, treedef, tuple(captures), len(placeholders))
        staged.backend = _backend_for(tuple(placeholders))
        return staged

    def __call__(self, *args, **kwargs):
        if kwargs:  # as JAX does, keyword arguments are mapped over their leading axis
            return self._with_kwargs(len(args), kwargs)(*args, kwargs)
        leaves, trees, leaf_axes = self._flat_axes(args)
        static = [_is_static(x, axis) for x, axis in zip(leaves, leaf_axes)]
        key = (tuple(trees), tuple(leaf_axes), *map(_signature_of, leaves),
               tuple((type(x), x) if s else None for x, s in zip(leaves, static)))
        self._programs.check(self.fn)
        staged = self._stages.get(key)
        if staged is None:
            with self._building.held():  # threads finding no program at once: one builds it (as differentiate)
                staged = self._stages.get(key)
                if staged is None:
                    staged = self._program(leaves, trees, leaf_axes)
                    if not staged.captures:
                        self._stages[key] = staged
                    self._programs.traced(self.fn)
        return staged(*[x for x, s in zip(leaves, static) if not s])

    def _with_kwargs(self, n: int, kwargs: dict) -> vmap:
        """This map of a function taking the keyword arguments as one last positional dict, batched on axis 0."""
        fn = self.fn

        def call(*args):
            return fn(*args[:-1], **args[-1])

        call.__name__ = getattr(fn, "__name__", "f")
        call.__wrapped__ = fn  # type: ignore[attr-defined]
        in_axes = (*self.in_axes, 0) if isinstance(self.in_axes, tuple | list) else (self.in_axes,) * n + (0,)
        key = (n, tuple(kwargs))
        found = self._kw_maps.get(key)
        if found is None:
            found = self._kw_maps[key] = vmap(call, in_axes, self.out_axes)
        return found

    def source(self, *args, device: str = "cpu") -> str:
        """The generated source of the batched program at these arguments."""
        leaves, trees, leaf_axes = self._flat_axes(args)
        staged = self._program(leaves, trees, leaf_axes)
        if device == "cpu":
            return staged.source
        from pullback.backends.cupy import backend as cupy_backend

        return print_program(staged.program, cupy_backend, out_tree=staged.treedef)
