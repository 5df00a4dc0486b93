"""Tracing: run a NumPy-style function on ``Tracer`` objects and record a Program.

A ``Tracer`` stands for an IR value. NumPy's protocols (``__array_ufunc__``,
``__array_function__``) and Python's operators on it are implemented by
``pullback.frontend.numpy``, which lowers them to primitives through ``bind``.
Tracing state is thread-local; transforms re-use ``bind`` to trace rules.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np
import scipy

from pullback.errors import ConcretizationError, TracingError
from pullback.ir import callables, sourcemap, unpacked
from pullback.ir.core import (
    _KNOWN_EQNS,
    VIEWS,
    WITH_BODIES,
    Atom,
    Eqn,
    Literal,
    Params,
    Primitive,
    Program,
    ShapeError,
    SourceInfo,
    Var,
    interned,
    makes_view,
    typed_params,
)
from pullback.ir.types import ArrayType, ShapeDtypeStruct
from pullback.tree import leaf_paths

PYTHON_SCALARS = (bool, int, float, complex)

# Frames inside these packages are not the user's: locations skip them
# (except pullback's own demo, which plays a user).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(__file__))  # pullback/, read here without importing it
_LIBRARY_DIRS = (_PACKAGE_DIR + os.sep,) + tuple(
    os.path.dirname(m.__file__) + os.sep for m in (np, scipy)  # type: ignore[arg-type]
)
_USER_FILES = frozenset({os.path.join(_PACKAGE_DIR, "demo.py")})


def is_user_code(frame) -> bool:
    """Whether ``frame`` runs the user's code, not pullback's, NumPy's or SciPy's."""
    filename = frame.f_code.co_filename
    return not filename.startswith(_LIBRARY_DIRS) or filename in _USER_FILES


# files already classified: every traced operation walks the same few frames, so a frame's file is tested
# once, not once per equation (by its name, whose hash a str keeps; a code object's is recomputed at every
# lookup). Bounded: cleared when full
_LIBRARY_FILES: set[str] = set()
_USER_FILES_SEEN: set[str] = set()
_KNOWN_MAX = 1 << 14


def user_frame(depth: int = 1):
    """The innermost frame that is neither pullback's, NumPy's nor SciPy's."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename in _LIBRARY_FILES:  # (most frames walked: pullback's own, between a trace's bind and the user)
            frame = frame.f_back
            continue
        if filename in _USER_FILES_SEEN:
            return frame
        if len(_LIBRARY_FILES) + len(_USER_FILES_SEEN) >= _KNOWN_MAX:
            _LIBRARY_FILES.clear()
            _USER_FILES_SEEN.clear()
        if not filename.startswith(_LIBRARY_DIRS) or filename in _USER_FILES:
            _USER_FILES_SEEN.add(filename)
            return frame
        _LIBRARY_FILES.add(filename)
        frame = frame.f_back
    return None


# one SourceInfo per line: an unrolled loop's equations at one line share it (fewer objects, and the
# passes that compare or look up equations' lines find them equal by identity)
_SOURCES: dict[tuple[str, int], SourceInfo] = {}


# each place in the user's code an operation was traced at: (the code's first line, instruction offset) -> (the
# code, its line's SourceInfo). A frame's ``f_lineno`` decodes the code's line table from its start (1 to 9 us in
# a long converted loop body); its instruction offset is read at once, and an unrolled loop traces at the same
# offsets step after step. (An entry is another code's where two share the key: checked, and replaced.) Bounded:
# cleared when full
_LINES: dict[tuple[int, int], tuple[Any, SourceInfo]] = {}


def source_at(frame) -> SourceInfo:
    """The user's line ``frame`` runs, one SourceInfo per line (``_SOURCES``), found by its place (``_LINES``)."""
    code = frame.f_code
    at = (code.co_firstlineno, frame.f_lasti)
    found = _LINES.get(at)
    if found is not None and found[0] is code:
        return found[1]
    key = (code.co_filename, frame.f_lineno)
    source = _SOURCES.get(key)
    if source is None:
        if len(_SOURCES) >= _KNOWN_MAX:
            _SOURCES.clear()
            _LINES.clear()  # (its entries hold the SourceInfos of the table cleared: one object per line, still)
        source = _SOURCES[key] = SourceInfo(*key)
    if len(_LINES) >= _KNOWN_MAX:
        _LINES.clear()
    _LINES[at] = (code, source)
    return source


def user_location() -> SourceInfo | None:
    frame = user_frame(2)
    return None if frame is None else source_at(frame)


def _local_arrays() -> dict[int, str]:
    """id(array) -> name, for the NumPy arrays the user's running frame holds in its local variables."""
    frame = user_frame(3)
    if frame is None:
        return {}
    return {id(v): k for k, v in frame.f_locals.items() if type(v) is np.ndarray and k.isidentifier()}


def located(message: str, source: SourceInfo | None = None) -> str:
    """``message`` prefixed by the user's file:line."""
    source = source or user_location()
    return message if source is None else f"{source}: {message}"


_NOWHERE = (None, -1, None)


class Builder:
    """Collects the equations and constants of one trace."""

    def __init__(self):
        self.eqns: list[Eqn] = []
        self.consts: dict[int, tuple[Var, Any]] = {}  # id(array) -> (var, array)
        self.const_names: dict[int, str] = {}
        self.source: SourceInfo | None = None  # set by transforms tracing a rule
        # A user function's trace lifts the tracers of enclosing traces it meets into extra
        # inputs (closure conversion): id(outer var) -> (inner var, outer tracer). None: not allowed.
        self.captures: dict[int, tuple[Var, Tracer]] | None = None
        # the user's NumPy/SciPy function being lowered (``numpy.max``), set by the front end's
        # dispatch: shape errors from ``bind`` name it rather than the primitive
        self.lowering: str | None = None
        # arrays np.eye/np.identity made while this trace ran: id -> (array, k); the reference keeps the id valid
        # (frontend.eyes)
        self.eyes: dict[int, tuple[np.ndarray, int]] = {}
        # random generators the traced code made (``np.random.default_rng(0)``): id -> (generator,
        # seeded); their draws are the same at every call (frontend.numpy.random)
        self.generators: dict[int, tuple[Any, bool]] = {}
        # arrays the traced code reads from its scope (``scope_arrays`` of each function it runs): id ->
        # array. NumPy's and SciPy's functions called on them trace them as constants, re-read at every call
        self.captured: dict[int, np.ndarray] = {}
        self.scopes: dict[tuple, tuple] = {}  # ids -> the functions (and instances) whose scopes were read
        # NumPy arrays the traced code made (``np.zeros``, ...: id -> (weak reference, line)), and those of
        # them, or other arrays it made, that index assignment gave traced values: id -> (array, its tracer),
        # which every later read of the array stands for (frontend.construct)
        self.made: dict[int, tuple[Any, SourceInfo | None]] = {}
        self.buffers: dict[int, tuple[np.ndarray, Tracer]] = {}
        # the traced function's inputs and, when it was called on concrete arguments, their values
        # (see ``frontend.examples``)
        self.inputs: tuple[Var, ...] = ()
        self.replay = False  # see ``new_trace``
        self.transformed = False  # the traced callable is a transform of pullback's (``callables.described``)
        # names for values that code other than the user's made in this trace, applied when it ends: an
        # inlined program's values (at their own lines), a loop body's invariants hoisted out of it
        self.inlined_hints: dict[int, str] = {}
        # a function form's values (``pb.grad(f)(x, y)`` called in this trace), at ``f``'s lines: id -> the name
        # ``f``'s program gave it ("" none). Those lines' targets do not name them again (a cotangent at ``s = ...``
        # is not ``s``); the caller's targets may name its results (``g = pb.grad(f)(x, y)``)
        self.inlined: dict[int, str] = {}
        self.examples: dict[int, Any] = {}
        # the traced function's argument each input comes from: (name, position; None for a keyword)
        self.arguments: dict[Var, tuple[str, int | None]] = {}
        # integer scalars' forms, affine in traced integers (frontend.numpy.integers): what makes
        # ``x[it * b:(it + 1) * b]`` a slice of static length
        self.affine: dict[Var, Any] = {}
        # the equations that begin another execution of a statement (the next step of an unrolled loop, the next
        # call of a helper) where the equation before them came from the same statement: an unrolled line's
        # equations share one SourceInfo, so the line alone cannot tell steps apart (``name_from_source``).
        # ``at``: the previous equation's user code, its instruction offset there, and ``calls`` then; ``calls``:
        # the calls the user's converted code has made (frontend.construct's ``call`` counts them), so that one
        # call's equations are told from another call's at the same place. (No frame is held: a finished frame
        # would keep the user's locals alive, whose references the front end counts.)
        self.executions: list[Eqn] = []
        self.at: tuple = _NOWHERE
        # where the code left each code object it left for another (``at`` then): a branch of ``a if t % 2 else b``
        # is its own function (frontend.convert), so steps alternating branches switch code at every step
        self.left: dict = {}
        self.calls = 0
        # what the user's own functions returned, where: (equations made by then, the caller's line, the values)
        self.returns: list[tuple[int, SourceInfo, tuple[Var, ...]]] = []

    def location(self) -> SourceInfo | None:
        return self.source if self.source is not None or self.replay else user_location()

    def constants(self) -> tuple[tuple[Var, ...], tuple]:
        """The program's constant vars and their values."""
        consts = [(v, c) for v, c in self.consts.values() if c is not None]
        return tuple(v for v, _ in consts), tuple(c for _, c in consts)

    def const(self, value) -> Var:
        key = id(value)
        if key not in self.consts:
            refuse_subclass(value)
            if isinstance(value, np.ndarray) and (type(value) is not np.ndarray or not value.dtype.isnative):
                value = np.asarray(value, value.dtype.newbyteorder("="))  # a memmap, big-endian data: as arguments
            var = Var(interned(ArrayType.of(value)), self.const_names.get(key) or self._origin_name(value))
            self.consts[key] = (var, value)
        return self.consts[key][0]

    def _origin_name(self, value) -> str:
        """A constant's name from where it came from: a view of a named array is named after it
        (``L.T`` is ``L_T``, ``W[:2]`` is ``W_view``); an array the traced code made is named after the
        user's variable holding it where it is used (``D = np.eye(n) - np.eye(n, k=1)``: ``D``, a view of
        it ``D_view``); an anonymous array is ``c``."""
        for names in (self.const_names, None):
            if names is None:
                names = _local_arrays()
            base = value
            while base is not None and id(base) not in names:
                base = base.base if type(base) is np.ndarray else None
            if base is None:
                continue
            name = names[id(base)]
            if base is value:
                return name
            if value.shape == base.shape[::-1] and value.strides == base.strides[::-1] and value.ndim > 1:
                return f"{name}_T"
            return f"{name}_view"
        return "c"

    def read(self, value: np.ndarray) -> Tracer:
        """A captured array as a traced constant: work on it is the program's, re-run at every call."""
        return Tracer(self.const(value), self)

    def atom(self, x) -> Atom:
        if isinstance(x, Tracer):
            if x.builder is not self:
                return self._capture(x)
            if x.view is not None and x.view[0].version != x.view[1]:
                raise TracingError(located(
                    "a view (slice, reshape, transpose, ...) of an array is used after an assignment into "
                    "that array: pullback does not update views; take the view again after the assignment"))
            return x.ssa
        if isinstance(x, Literal):
            return x
        if isinstance(x, np.ndarray | np.generic):
            traced = traced_buffer(x)
            if traced is not None:  # an array made in the trace and filled with traced values: their tracer
                return self.atom(traced)
            return ARRAY_OPERAND(self, x)
        raise TypeError(f"cannot use {type(x).__name__} as an IR operand")

    def _capture(self, x: Tracer) -> Var:
        """A tracer of an enclosing trace on this thread becomes an input of this one, to be
        passed the outer tracer when the traced program is inlined into the outer trace."""
        if not _running(x.builder):
            raise escaped(x)
        if self.captures is None:
            raise TracingError(located("a traced value of an enclosing trace is used where it cannot be "
                                       "captured: pass it as an argument"))
        if id(x.ssa) not in self.captures:
            self.captures[id(x.ssa)] = (Var(x.ssa.type, x.ssa.hint), x)
        return self.captures[id(x.ssa)][0]


def traced_buffer(x) -> Tracer | None:
    """The tracer an array made during a trace on this thread stands for since index assignment gave it
    traced values (see ``Builder.buffers``); None for any other value."""
    if type(x) is not np.ndarray:
        return None
    for builder in getattr(_state, "stack", ()):
        found = builder.buffers.get(id(x))
        if found is not None and found[0] is x:
            return found[1]
    return None


_state = threading.local()



def _call(fn: Callable, args: Sequence[Any], kwargs: dict) -> Any:
    return fn(*args, **kwargs)


# How a trace calls the user's function: the front end (frontend.construct) sets it to call the
# function's converted copy, so that NumPy's and SciPy's names in it reach pullback.
CALL_USER: Callable[[Callable, Sequence[Any], dict], Any] = _call


def _constant(builder: Builder, value) -> Atom:
    return builder.const(value)


def _nothing(builder: Builder) -> None:
    pass


# How an array the traced code uses becomes an operand: a constant, unless the front end
# (frontend.eyes) knows it as an identity the trace made, which the program then makes itself.
ARRAY_OPERAND: Callable[[Builder, Any], Atom] = _constant
# What a trace does last, before its builder's program is read (frontend.eyes: the identities it made
# that the user keeps become constants).
TRACE_END: Callable[[Builder], None] = _nothing


def running_builders() -> Sequence[Builder]:
    """The traces running on this thread, the innermost last."""
    return getattr(_state, "stack", ())


def call_user(fn: Callable, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` of the user's function, from a trace (or a wrapper a trace calls)."""
    return CALL_USER(fn, args, kwargs)


def current_builder() -> Builder:
    try:  # the attribute read, not ``getattr``: this runs at every traced operation
        return _state.stack[-1]
    except (AttributeError, IndexError):
        raise TracingError("no trace is active (a traced value used after its trace ended reports where it was "
                           "made; this call needs a running trace)") from None


def _running(builder: Builder) -> bool:
    """Whether ``builder``'s trace is running on this thread (the innermost or an enclosing one)."""
    try:
        return builder in _state.stack  # builders compare by identity
    except AttributeError:
        return False


def escaped(x: Tracer) -> TracingError:
    """The error for a tracer used outside its trace: it was kept (in a global, a list, an
    attribute) while the function was traced, and is a placeholder, not a value, once the trace ends.
    Names the user's line that made it, found from its equation (error path only: a scan)."""
    builder = x.builder
    if any(v is x.ssa for v in builder.inputs):
        made = f"(the traced argument {x.ssa.hint})" if x.ssa.hint else "(a traced argument)"
    else:
        source = next((e.source for e in reversed(builder.eqns) if any(o is x.ssa for o in e.outputs)), None)
        made = f"created at {source}" if source is not None else "created while tracing"
    return TracingError(located(
        f"a traced value {x.ssa.type} {made} was used after its trace ended (it escaped, e.g. stored in a "
        f"global, a list or an attribute while tracing); return it from the function instead"))


def tracing() -> bool:
    """Whether a trace is running on this thread (functions such as ``pb.scan`` simply run outside one)."""
    try:
        return bool(_state.stack)
    except AttributeError:
        return False


@contextmanager
def new_trace(replay: bool = False):
    """A trace on the stack. ``replay``: a transform re-binding a program's equations at their own lines,
    where an equation without a line has none (not the line of whatever code called the transform)."""
    builder = Builder()
    stack = _state.__dict__.setdefault("stack", [])
    builder.replay = replay
    if stack:  # a sub-program of a rule (det's branches) comes from the rule's equation, as the rule's own do
        builder.source = stack[-1].source
        builder.replay = replay or stack[-1].replay
    stack.append(builder)
    try:
        yield builder
    finally:
        stack.pop()


def bind(prim: Primitive, *args, **params):
    """Record ``prim`` applied to ``args`` in the current trace; return Tracer(s)."""
    try:  # ``current_builder()`` without its calls: this runs for every equation every transform records
        builder = _state.stack[-1]
    except (AttributeError, IndexError):
        builder = current_builder()
    # each operand's atom and its part of ``typed_params``' key, in one loop without a call for the common
    # operands: a tracer of this trace that is no view (its var), a literal
    # (tuples grown by ``+=``, no call made, for the one to three operands of most operations; a list for more)
    atoms: tuple = ()
    ins: tuple | None = ()
    operands = args
    if args[1:] and not args[2:]:  # two operands (most equations): two tracers of this trace, no views, at once
        a, b = args
        if (type(a) is Tracer and type(b) is Tracer and a.builder is builder and b.builder is builder
                and a.view is None and b.view is None):
            a, b = a.ssa, b.ssa
            atoms, ins, operands = (a, b), (a.type, b.type), ()
    elif args[4:]:  # (``len(args) > 4`` without a call)
        atoms = tuple([a.ssa if type(a) is Tracer and a.builder is builder and a.view is None else builder.atom(a)
                       for a in args])
        operands, ins = (), None
    for a in operands:
        kind = type(a)
        if kind is Tracer and a.builder is builder and a.view is None:
            a = a.ssa
            ins += (a.type,)  # type: ignore[operator]
        else:
            if kind is not Literal:
                a = builder.atom(a)
            ins += (a.type if type(a) is Var else (type(a.value), a),)  # type: ignore[operator]
        atoms += (a,)
    hit = None
    if ins is not None:  # ``typed_params``' table read here, without the call (its key, made alike)
        try:
            hit = _KNOWN_EQNS.get((prim, ins, tuple(params.items()), tuple(map(type, params.values())))
                                  if params else (prim, ins))
        except TypeError:  # an unhashable param: ``typed_params`` says what is wrong with it
            pass
    if hit is None:
        try:
            hit = typed_params(prim, atoms, params, ins)
        except ShapeError as e:
            raise TracingError(located(f"{builder.lowering or prim.name}: {e}", builder.location())) from None
    types, eqn_params = hit
    multiple = prim.multiple_results
    if multiple:
        outs = tuple([Var(t) for t in types])
        tracers = tuple([Tracer(v, builder) for v in outs])
        first = tracers[0]
    else:
        out = Var(types[0])
        outs = (out,)
        first = tracers = Tracer(out, builder)
    source = builder.source  # ``builder.location()``, inline
    frame = None
    if source is None and not builder.replay:  # ``user_location()``, inline
        frame = user_frame()
        if frame is not None:
            code, lasti = frame.f_code, frame.f_lasti
            try:  # ``source_at``, inline (a subscript, not a call: a miss is once per place)
                found = _LINES[code.co_firstlineno, lasti]
            except KeyError:
                found = None
            source = found[1] if found is not None and found[0] is code else source_at(frame)
    eqn = Eqn(prim, atoms, outs, eqn_params, source)
    builder.eqns.append(eqn)
    if frame is not None:
        # another execution of a statement: the code went back (a loop's next step, another call of a helper)
        # or called again at the same place (another call, not one call's second equation)
        at, calls = builder.at, builder.calls
        if at[0] is code and (lasti < at[1] or (lasti == at[1] and calls != at[2])):
            builder.executions.append(eqn)
        elif at[0] is not code:  # back in code left before, before where it was left: a new execution
            builder.left[at[0]] = at[1]
            if lasti < builder.left.get(code, -1):
                builder.executions.append(eqn)
        builder.at = (code, lasti, calls)
    if prim in VIEWS and args and isinstance(args[0], Tracer) and makes_view(prim, atoms):  # refuse writes to views
        root = args[0].view[0] if args[0].view is not None else args[0]
        first.view = (root, root.version)
    return tracers  # (one tracer, or a tuple of them)


def returned(out, builder: Builder):
    """``out``, which a call of the user's function returned to the user's code calling it (the caller of this
    function's caller; not pullback's, which calls the traced function itself): noted, so that the caller's
    line's targets name it (``h = step(W, h)``: the helper's values come from its own lines)."""
    values = out if type(out) is tuple else (out,)
    for o in values:  # (loops, not generators: this runs at every call of a function from traced code)
        if type(o) is not Tracer or o.builder is not builder or o.ssa.hint:
            return out
    frame = sys._getframe(2)
    if is_user_code(frame):
        builder.returns.append((len(builder.eqns), source_at(frame), tuple([o.ssa for o in values])))
    return out


def inline(program: Program, args: Sequence[Any], hints: dict[int, str] | None = None,
           sources: bool = True) -> list[Any]:
    """Bind ``program``'s equations on ``args`` (tracers, literals, arrays) in the current trace and
    return its outputs. ``sources``: each equation keeps its user line (a sub-program re-bound by a
    transform); otherwise the equations take the line of the current call (a nested ``grad``).
    ``hints``, given, receives the program's value names for the new values, by ``id`` of their Var."""
    builder = current_builder()
    env: dict[int, Any] = {id(v): a for v, a in zip(program.inputs, args)}
    env.update({id(v): c for v, c in zip(program.constvars, program.constvals)})
    # its constants keep the names its own trace gave them (``M``, ``L_T``) where this trace's scope gives none:
    # named while the program holds them (an id is a name only while its array lives)
    names, named = builder.const_names, []
    for v, c in zip(program.constvars, program.constvals):
        if v.hint and v.hint != "c" and id(c) not in names and id(c) not in builder.consts:
            names[id(c)] = v.hint
            named.append(id(c))

    def read(a):
        return env.get(id(a), a) if isinstance(a, Var) else a

    saved, replay = builder.source, builder.replay
    builder.replay = replay or (sources and saved is None)  # a line-less equation: no line, not the caller's
    for eqn in program.eqns:
        if sources:
            builder.source = eqn.source or saved
        outs = bind(eqn.prim, *map(read, eqn.inputs), **eqn.params)
        for v, o in zip(eqn.outputs, outs if eqn.prim.multiple_results else (outs,)):
            env[id(v)] = o
            if hints is not None and v.hint and isinstance(o, Tracer) and not o.ssa.hint:
                hints.setdefault(id(o.ssa), v.hint)
    builder.source, builder.replay = saved, replay
    for key in named:
        del names[key]
    return [read(a) for a in program.outputs]


def inline_called(program: Program, args: Sequence[Any]) -> list[Any]:
    """``inline`` for a function form called in the user's function (``g = pb.grad(f)(x, y)``): the program's
    equations at ``f``'s lines (the caller's where they have none), its values named as its program names them
    or as the caller's targets name its results (``Builder.inlined``, ``Builder.returns``), and the values the
    caller's statement computed for its arguments (``np.stack([a, b])``) not named by its targets."""
    builder = current_builder()
    frame = user_frame(2)
    caller = user_location()
    made: dict[int, str] = {}
    first, saved = len(builder.eqns), builder.source
    builder.source = saved or caller
    try:
        outs = inline(program, args, hints=made)
    finally:
        builder.source = saved
    eqns, inlined = builder.eqns, builder.inlined
    inlined.update((id(v), made.get(id(v), "")) for e in eqns[first:] for v in e.outputs)
    at = builder.at
    if frame is not None and at[0] is frame.f_code and at[1] < frame.f_lasti:  # this execution's arguments
        start = builder.executions[-1] if builder.executions else None
        j = first - 1
        while j >= 0 and eqns[j].source is caller:
            inlined.update((id(v), "") for v in eqns[j].outputs)
            if eqns[j] is start:
                break
            j -= 1
    if caller is not None and all(type(o) is Tracer and o.builder is builder for o in outs):
        builder.returns.append((len(eqns), caller, tuple(o.ssa for o in outs)))
    return outs


class Tracer:
    """A traced array. Behaves like a NumPy array under NumPy's protocols."""

    __slots__ = ("ssa", "builder", "weak", "view", "version")
    __array_priority__ = 1000
    _numpy_api: ModuleType  # pullback.frontend.numpy, installed when it is imported

    def __init__(self, var: Var, builder: Builder, weak: bool = False):
        self.ssa = var  # the IR value this array stands for (not ``var``: that is NumPy's x.var())
        self.builder = builder
        self.weak = weak  # a Python scalar argument: NumPy's weak promotion applies
        self.view: tuple[Tracer, int] | None = None  # a view's base array, and the base's version it saw
        self.version = 0  # assignments into this array so far (``x[i] = v`` rebinds ``ssa``)

    # --- static properties -------------------------------------------------
    shape = property(lambda self: self.ssa.type.shape)
    dtype = property(lambda self: self.ssa.type.dtype)
    ndim = property(lambda self: self.ssa.type.ndim)
    size = property(lambda self: self.ssa.type.size)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(located("len() of a 0-d traced array"))
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def _api(self) -> ModuleType:
        """pullback.frontend.numpy, through which every NumPy operation on a tracer goes: the one place
        that refuses a tracer whose trace has ended (or runs on another thread)."""
        try:  # ``_running``, inline: this runs at every operation on a tracer
            if self.builder in _state.stack:
                return self._numpy_api
        except AttributeError:
            pass
        raise escaped(self)

    def __repr__(self) -> str:
        return f"Tracer({self.ssa.type}{'' if _running(self.builder) else ', escaped its trace'})"

    def __str__(self) -> str:
        """``print(x)`` of an escaped tracer says where it escaped (its repr, for debuggers, does not raise)."""
        if not _running(self.builder):
            raise escaped(self)
        return repr(self)

    __hash__ = object.__hash__

    # --- refusing concrete values -------------------------------------------
    def _concrete(self, what: str):
        if not _running(self.builder):
            raise escaped(self)
        raise ConcretizationError(located(
            f"{what} of a traced value {self.ssa.type}: Python control flow and conversions "
            f"cannot depend on traced values (use np.where for elementwise choices, pb.fori_loop and pb.cond "
            f"for loops and branches){argument_hint(self)}"
        ))

    def __bool__(self):
        self._concrete("bool()")

    def __int__(self):
        self._concrete("int()")

    def __float__(self):
        self._concrete("float()")

    def __complex__(self):
        self._concrete("complex()")

    def __index__(self):
        self._concrete("use as an index")

    def __array__(self, dtype=None, copy=None):
        self._api.refuse_conversion(self)

    # --- NumPy protocols and operators: see pullback.frontend.numpy -------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return self._api.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return self._api.array_function(func, args, kwargs)

    def __getitem__(self, key):
        return self._api.indexing.getitem(self, key)

    def __setitem__(self, key, value):
        """``x[key] = value`` rebinds this tracer to an updated copy (see ``frontend.numpy.indexing``)."""
        self._api.indexing.setitem(self, key, value)

    at = property(lambda self: self._api.indexing.IndexUpdates(self))

    def __neg__(self): return self._api.negative(self)
    def __pos__(self): return self.copy()
    def __abs__(self): return self._api.absolute(self)
    def __add__(self, o): return self._api.add(self, o)
    def __radd__(self, o): return self._api.add(o, self)
    def __sub__(self, o): return self._api.subtract(self, o)
    def __rsub__(self, o): return self._api.subtract(o, self)
    def __mul__(self, o): return self._api.multiply(self, o)
    def __rmul__(self, o): return self._api.multiply(o, self)
    def __truediv__(self, o): return self._api.divide(self, o)
    def __rtruediv__(self, o): return self._api.divide(o, self)
    def __pow__(self, o): return self._api.power(self, o)
    def __rpow__(self, o): return self._api.power(o, self)
    def __matmul__(self, o): return self._api.matmul_operator(self, o)
    def __rmatmul__(self, o): return self._api.matmul_operator(o, self)
    def __eq__(self, o): return self._api.equal(self, o)  # type: ignore[override]
    def __ne__(self, o): return self._api.not_equal(self, o)  # type: ignore[override]
    def __lt__(self, o): return self._api.less(self, o)
    def __le__(self, o): return self._api.less_equal(self, o)
    def __gt__(self, o): return self._api.greater(self, o)
    def __ge__(self, o): return self._api.greater_equal(self, o)

    def __and__(self, o): return self._api.ufuncs.bitwise_and(self, o)
    def __rand__(self, o): return self._api.ufuncs.bitwise_and(o, self)
    def __or__(self, o): return self._api.ufuncs.bitwise_or(self, o)
    def __ror__(self, o): return self._api.ufuncs.bitwise_or(o, self)
    def __xor__(self, o): return self._api.ufuncs.bitwise_xor(self, o)
    def __rxor__(self, o): return self._api.ufuncs.bitwise_xor(o, self)
    def __invert__(self): return self._api.ufuncs.invert(self)
    def __floordiv__(self, o): return self._api.ufuncs.floor_divide(self, o)
    def __rfloordiv__(self, o): return self._api.ufuncs.floor_divide(o, self)
    def __mod__(self, o): return self._api.ufuncs.remainder(self, o)
    def __rmod__(self, o): return self._api.ufuncs.remainder(o, self)
    def __divmod__(self, o): return self._api.ufuncs.divmod_(self, o)
    def __rdivmod__(self, o): return self._api.ufuncs.divmod_(o, self)

    # --- array methods --------------------------------------------------------
    T = property(lambda self: self._api.transpose(self))
    mT = property(lambda self: self._api.matrix_transpose(self))
    real = property(lambda self: self._api.real(self))
    imag = property(lambda self: self._api.imag(self))

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return self._api.reshape(self, shape, order=order)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
        return self._api.transpose(self, axes or None)

    def sum(self, axis=None, dtype=None, keepdims=False): return self._api.sum(self, axis, dtype, keepdims=keepdims)
    def mean(self, axis=None, dtype=None, keepdims=False): return self._api.mean(self, axis, dtype, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return self._api.max(self, axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return self._api.min(self, axis, keepdims=keepdims)
    def all(self, axis=None, out=None, keepdims=False): return self._api.all(self, axis, out, keepdims)
    def any(self, axis=None, out=None, keepdims=False): return self._api.any(self, axis, out, keepdims)
    def clip(self, min=None, max=None): return self._api.ufuncs.clip(self, min, max)
    def round(self, decimals=0): return self._api.ufuncs.round_(self, decimals)
    def conj(self): return self._api.conj(self)
    def prod(self, axis=None, dtype=None, out=None, keepdims=False): return self._api.statistics.prod(
        self, axis, dtype, out, keepdims)
    def cumsum(self, axis=None, dtype=None, out=None): return self._api.statistics.cumsum(self, axis, dtype, out)
    def cumprod(self, axis=None, dtype=None, out=None): return self._api.statistics.cumprod(self, axis, dtype, out)
    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False): return self._api.statistics.var(
        self, axis, dtype, out, ddof, keepdims)
    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False): return self._api.statistics.std(
        self, axis, dtype, out, ddof, keepdims)
    def item(self, *args): self._concrete("x.item()")
    def tolist(self): self._concrete("x.tolist()")
    def tobytes(self, order="C"): self._concrete("x.tobytes()")
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def fill(self, value):
        """In place, as NumPy's: rebinds this tracer to ``value`` everywhere."""
        self._api.indexing.setitem(self, ..., value)
    conjugate = conj

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        """A new array of ``dtype`` (any layout and ``copy`` hold the same values); ``casting`` as NumPy's."""
        if order != "K" or casting != "unsafe":
            self._api.numpy_checks(self._api.standin(self).astype, dtype, order=order, casting=casting)
        return self._api.astype(self, dtype).copy()

    def swapaxes(self, a, b): return self._api.swapaxes(self, a, b)
    def squeeze(self, axis=None): return self._api.squeeze(self, axis)
    def diagonal(self, offset=0, axis1=0, axis2=1): return self._api.diagonal(self, offset, axis1, axis2)
    def trace(self, offset=0, axis1=0, axis2=1): return self._api.trace(self, offset, axis1, axis2)
    def dot(self, o): return self._api.dot(self, o)
    def ravel(self, order="C"): return self._api.manipulation.ravel(self, order)
    def repeat(self, repeats, axis=None): return self._api.manipulation.repeat(self, repeats, axis)
    def flatten(self, order="C"): return self.ravel(order).copy()

    def copy(self, order="C"):
        """A new array (not a view) with this value: assigning into it changes neither (any layout
        ``order`` holds the same values)."""
        if not _running(self.builder):
            raise escaped(self)
        if order != "C":
            self._api.numpy_checks(self._api.standin(self).copy, order=order)
        self.builder.atom(self)  # a stale view raises
        return Tracer(self.ssa, self.builder, self.weak)

    def sort(self, axis=-1, kind=None, order=None):
        """In place, as NumPy's: rebinds this tracer to the sorted value."""
        self._api.indexing.rebind(self, self._api.indexing.sort(self, axis, kind, order))

    def argsort(self, axis=-1, kind=None, order=None): return self._api.indexing.argsort(self, axis, kind, order)
    def argmax(self, axis=None, out=None, *, keepdims=False):
        return self._api.indexing.argmax(self, axis, out, keepdims)
    def argmin(self, axis=None, out=None, *, keepdims=False):
        return self._api.indexing.argmin(self, axis, out, keepdims)
    def take(self, indices, axis=None, mode="raise"): return self._api.indexing.take(self, indices, axis, mode=mode)

    def __getattr__(self, name: str):
        """An attribute a traced array lacks: NumPy's that pullback does not trace, or none, said at the
        user's line (Python's own probes, ``__dunder__`` names, get a plain AttributeError)."""
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if hasattr(np.ndarray, name):
            raise AttributeError(located(f"ndarray.{name} is not supported on traced values by pullback"))
        raise AttributeError(located(f"a traced array (pullback's Tracer, standing for a NumPy array) has no "
                                     f"attribute {name!r}, as NumPy's ndarray has none"))


def traced_arguments(x: Tracer) -> list[tuple[Var, str, int | None]]:
    """The inputs of the traced function that ``x`` is computed from, with their arguments' names and
    positions: the trace is walked back from ``x`` (into enclosing traces through the values a nested
    trace captured). For error messages: it reads every equation."""
    builder, wanted = x.builder, {id(x.ssa)}
    for eqn in reversed(builder.eqns):
        if not wanted.isdisjoint(map(id, eqn.outputs)):
            wanted.update(id(a) for a in eqn.inputs if type(a) is Var)
    found = [(v, *builder.arguments[v]) for v in builder.inputs if id(v) in wanted and v in builder.arguments]
    for inner, outer in (builder.captures or {}).values():
        if id(inner) in wanted:
            found += [f for f in traced_arguments(outer) if all(f[0] is not g[0] for g in found)]
    return found


def argument_hint(x: Tracer) -> str:
    """``'; ... static_argnums=(1,) ...'``, naming the scalar arguments of the traced function that ``x``
    is computed from, which could be static (baked into the program, compiled per value); or ``''``."""
    found = [(name, at) for v, name, at in traced_arguments(x) if v.type.shape == ()]
    if not found:
        return ""
    names = ", ".join(name for name, _ in found)
    positional = tuple(at for _, at in found if at is not None)
    keywords = tuple(name for name, at in found if at is None)
    marks = " and ".join(([f"static_argnums={positional}"] if positional else [])
                         + ([f"static_argnames={keywords}"] if keywords else []))
    it = "it" if len(found) == 1 else "them"
    return (f"; the value is computed from the traced argument{'s' if len(found) > 1 else ''} {names}: to compile "
            f"one program per value instead, mark {it} static ({marks})")


def _arg_names(fn: Callable, n: int) -> list[str]:
    fn = callables.described(fn)[1]  # through pullback's wrappers: pb.grad(f) takes f's arguments
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        elif params and params[-1].kind == params[-1].VAR_POSITIONAL:
            names.append(f"{params[-1].name}_{i}")
        else:
            names.append(f"arg{i}")
    return names


def _closure_names(fn: Callable) -> dict[int, str]:
    """id(array) -> variable name: the generated code's keyword-only parameters take these names."""
    return {key: name for key, (name, _) in scope_arrays(fn).items()}


def scope_arrays(fn: Callable) -> dict[int, tuple[str, np.ndarray]]:
    """id(array) -> (variable name, array), for arrays the function closes over, reads as globals or has
    as defaults, and those it reaches through one attribute (``self.W``, ``model.W``) or a dict (``params["W"]``)
    of such a value: what the function captures from its scope."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    roots: list[tuple[str, Any]] = []
    if getattr(fn, "__self__", None) is not None:  # a bound method's ``self``
        roots.append(("self", fn.__self__))  # type: ignore[attr-defined]
    fn_globals = getattr(fn, "__globals__", {})
    roots += [(name, fn_globals[name]) for name in code.co_names if name in fn_globals]
    defaults = getattr(fn, "__defaults__", None) or ()  # ``def f(x, w=np.ones(3))``: the user's arrays too
    roots += [*zip(code.co_varnames[code.co_argcount - len(defaults):], defaults),
              *(getattr(fn, "__kwdefaults__", None) or {}).items()]
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            roots.append((name, cell.cell_contents))
        except ValueError:
            continue
    found: dict[int, tuple[str, np.ndarray]] = {}
    for name, value in roots:
        if isinstance(value, np.ndarray):
            found.setdefault(id(value), (name, value))
        elif isinstance(value, dict):  # keys the code spells out (``params["W"]``)
            for key in code.co_consts:
                v = value.get(key) if isinstance(key, str) and key.isidentifier() else None
                if isinstance(v, np.ndarray):
                    found.setdefault(id(v), (key, v))
        elif not isinstance(value, ModuleType | type) and isinstance(getattr(value, "__dict__", None), dict):
            for attr in code.co_names:
                v = value.__dict__.get(attr)
                if isinstance(v, np.ndarray):
                    found.setdefault(id(v), (attr, v))
    return found


def is_cupy(a) -> bool:
    """A CuPy array, recognised without importing CuPy."""
    return type(a).__module__.startswith("cupy") and hasattr(a, "__cuda_array_interface__")


def _is_dask(a) -> bool:
    """A Dask array, recognised without importing Dask."""
    return type(a).__module__.startswith("dask.array") and hasattr(a, "chunks") and hasattr(a, "dask")


def is_python_scalar(x) -> bool:
    """Whether ``x`` is weakly typed under NEP 50: Python's own bool, int, float or complex, by
    exact type (``np.float64`` subclasses ``float`` yet is a strong float64)."""
    return type(x) in PYTHON_SCALARS


def refuse_subclass(x) -> None:
    """Refuse the ndarray subclasses whose operations mean something else than ndarray's, as an
    argument or a constant the function reads: pullback would compute the plain arrays' result,
    silently different from NumPy's. ``np.matrix``'s ``*`` is a matrix product; a masked array's
    operations skip its masked entries."""
    if isinstance(x, np.matrix):
        raise TypeError(located("pullback does not take np.matrix arrays (their * is a matrix product, not NumPy's "
                                "elementwise product); pass np.asarray(m) and use @ for matrix products"))
    if isinstance(x, np.ma.MaskedArray):
        refuse_masked()


def refuse_masked():
    raise TypeError(located(
        "pullback does not take masked arrays (np.ma.MaskedArray): it would ignore the mask; pass the data and "
        "the mask as plain arrays (m.filled(0), np.ma.getmaskarray(m)) and write np.where(mask, 0, x) where the "
        "mask matters"))


def input_type(x) -> tuple[ArrayType, bool]:
    """The IR type of an argument, and whether it is weakly typed (a Python scalar). Arrays in
    non-native byte order are typed as their native dtype (the caller converts them)."""
    if is_python_scalar(x):
        return ArrayType((), np.asarray(x).dtype), True
    refuse_subclass(x)
    if isinstance(x, np.ndarray | np.generic):
        return ArrayType(x.shape, x.dtype.newbyteorder("=")), False
    if isinstance(x, PYTHON_SCALARS):  # a subclass (an IntEnum): strong, as NumPy takes it
        return ArrayType((), np.asarray(x).dtype), False
    if isinstance(x, Tracer):  # a traced function called inside another trace
        if not _running(x.builder):
            raise escaped(x)
        return x.ssa.type, x.weak
    if is_cupy(x) or _is_dask(x):  # traced like NumPy's (a Dask array's values are never read)
        return ArrayType(x.shape, np.dtype(x.dtype)), False
    if type(x) is ShapeDtypeStruct:  # a type alone: the trace has no example value for it
        return x.type, False
    raise TypeError(
        f"pullback traces functions of NumPy arrays and scalars; got an argument of type {type(x).__name__}"
    )


def _leaf_names(treedef, name: str) -> list[str]:
    """``params`` -> ``params`` for a leaf, ``params_0``, ``params_W``, ... inside a structure."""
    return ["_".join(map(str, (name, *path) if name else path)) for path in leaf_paths(treedef)]


def argument_leaf_names(fn: Callable, name: str, treedef) -> list[str]:
    """The names the leaves of ``fn``'s argument ``name`` (of structure ``treedef``) trace under: those
    ``fn``'s source unpacks it into (``mu_h, S_hh, nll = carry``), else ``carry_0``, ``carry_1``, ..."""
    default = _leaf_names(treedef, name)
    given = unpacked.leaf_names(fn, name, treedef) if name else None
    return [g or d for g, d in zip(given, default)] if given else default


def trace(fn: Callable, args: Sequence[Any], name: str | None = None,
          captures: list | None = None, arg_names: Sequence[str] | None = None,
          scope: Callable | None = None, positions: Sequence[int | None] | None = None,
          naming: list | None = None) -> tuple[Program, Any]:
    """Trace ``fn(*args)``; return its Program and the output tree (see ``tree``).

    Arguments may be nested tuples, lists and dicts of arrays: the program's inputs are
    their leaves, in ``tree.flatten`` order. Given a ``captures`` list, tracers of enclosing
    traces that ``fn`` closes over become further inputs, after the leaves, and the list
    receives those outer tracers in the same order (a nested ``grad`` inside a traced function).
    ``arg_names`` names the arguments (default: ``fn``'s parameters); an empty name gives a
    dict's leaves their keys alone (keyword arguments). ``scope`` (default ``fn``) is the user's function
    whose variables name the arrays it reads (when ``fn`` wraps it). ``positions``, for the trace of the
    user's function itself, gives each argument's position in its signature (None for the keyword
    arguments' dict), so that errors can name the argument a value comes from (``argument_hint``). ``naming``,
    a list, receives the naming of the program's values from the user's source (``name_from_source``) as a
    callable instead of it running now: what only walks the program (``api.eager``) needs no names, and
    naming reads every equation. Called, it names the program's own values in place and returns the named
    program (a new one only where it holds loop bodies)."""
    from pullback.tree import flatten, unflatten

    arg_names = _arg_names(fn, len(args)) if arg_names is None else arg_names
    user_fn = scope or callables.described(fn)[1]  # through pullback's wrappers: pb.grad(f) unpacks as f does
    names, leaves, trees, arguments = [], [], [], []
    for a, n, at in zip(args, arg_names, positions or [None] * len(args)):
        arg_leaves, tree = flatten(a)
        trees.append(tree)
        leaves += arg_leaves
        names += argument_leaf_names(user_fn, n, tree)
        arguments += [(n, at) if n else (name, None) for name in _leaf_names(tree, n)]
    types = [input_type(a) for a in leaves]
    with new_trace() as builder:
        builder.const_names = _closure_names(callables.unwrapped(scope or fn))
        builder.transformed = callables.described(fn)[2]  # pullback's own code calls the user's: see ``inline``
        if captures is not None:
            builder.captures = {}
        in_vars = tuple(Var(interned(t), n) for (t, _), n in zip(types, names))
        builder.inputs = in_vars
        if positions is not None:
            builder.arguments = dict(zip(in_vars, arguments))
        builder.examples = {id(v): x for v, x in zip(in_vars, leaves)
                            if isinstance(x, np.ndarray | np.generic) or is_python_scalar(x) or isinstance(x, Tracer)}
        tracers = iter(Tracer(v, builder, weak) for v, (_, weak) in zip(in_vars, types))
        structured = [unflatten(tree, tracers) for tree in trees]
        out = CALL_USER(fn, structured, {})
        leaves, treedef = flatten(out)
        outputs = tuple(_output_atom(builder, leaf) for leaf in leaves)
        del out, leaves, structured
        TRACE_END(builder)
    constvars, constvals = builder.constants()
    fname = callables.described(fn)[0]
    if builder.captures:
        captures.extend(outer for _, outer in builder.captures.values())  # type: ignore[union-attr]
        in_vars += tuple(inner for inner, _ in builder.captures.values())
    program = Program(in_vars, tuple(builder.eqns), outputs, constvars, constvals,
                      name=name or fname)
    if builder.inlined_hints:
        program = rename(program, builder.inlined_hints)
    # a transform's trace holds programs already named by their own traces, at the user's lines:
    # naming by those lines' targets again would name a derivative after the value it differentiates
    if builder.transformed:
        return program, treedef
    executions, eqns, returns, inlined = builder.executions, builder.eqns, builder.returns, builder.inlined

    def named() -> Program:
        again = set(executions)  # (equations hash by identity; frontend.eyes may have dropped some)
        cuts = [i for i, e in enumerate(eqns) if e in again] if again else ()
        return name_from_source(program, cuts, returns, inlined)

    if naming is not None:
        naming.append(named)
        return program, treedef
    return named(), treedef


def trace_closed(fn: Callable, args: Sequence[Any], name: str | None = None,
                 arg_names: Sequence[str] | None = None, scope: Callable | None = None) -> tuple[Program, list, Any]:
    """``trace`` for a sub-program (a loop body, a branch, a checkpointed function): the tracers of
    enclosing traces it reads become its *leading* inputs, the consts of the equation holding it.
    Returns the program, those outer tracers, and the output tree."""
    captures: list = []
    program, out_tree = trace(fn, args, name=name, captures=captures, arg_names=arg_names, scope=scope)
    n = len(program.inputs) - len(captures)
    return Program(program.inputs[n:] + program.inputs[:n], program.eqns, program.outputs, program.constvars,
                   program.constvals, program.name), captures, out_tree


def _output_atom(builder: Builder, leaf) -> Atom:
    if isinstance(leaf, PYTHON_SCALARS):
        return Literal.of(leaf, np.asarray(leaf).dtype)
    try:
        return builder.atom(leaf)
    except TracingError:
        raise
    except TypeError:
        raise TypeError(
            f"a traced function must return arrays or scalars (in tuples, lists or dicts); "
            f"got {type(leaf).__name__}"
        ) from None


def name_from_source(program: Program, executions: Sequence[int] = (),
                     returns: Sequence[tuple[int, SourceInfo, tuple[Var, ...]]] = (),
                     inlined: dict[int, str] | None = None) -> Program:
    """Give unnamed values the names the user's source assigns them to.

    In each run of equations coming from one execution of an assignment statement, the outputs
    of the last equation get the statement's target names. ``executions``: the equations (their
    indices, ascending) that begin another execution of the statement before them (``Builder.executions``):
    each step of an unrolled ``h = np.tanh(W @ h)`` names its own ``h``. ``returns``: the results of the user's
    own functions (``Builder.returns``), named by the caller's targets where the call is the statement's value
    (``h = step(W, h)``: no equation of that statement follows the call). ``inlined``: the values of function
    forms called in the trace (``Builder.inlined``), which their own programs' names name, not their lines.
    """
    hints: dict[int, str] = {}
    inlined = inlined or {}
    named: dict[int, Var] = {}
    eqns = program.eqns
    # once per line: a lookup reads the whole file (keyed by the line's (file, number), hashed without a call)
    found: dict[tuple[str, int], sourcemap.Statement | None] = {}

    def statement(src: SourceInfo) -> sourcemap.Statement | None:
        key = (src.filename, src.lineno)
        try:
            return found[key]
        except KeyError:
            stmt = found[key] = sourcemap.statement_at(src.filename, src.lineno)
            return stmt

    # runs of equations sharing one SourceInfo object (an unrolled line's share it: ``user_location``) within
    # one execution, each with its statement, looked up once, and whether it begins another execution: only a
    # run's last equation can be the last of its statement's run
    groups: list[tuple[int, int, SourceInfo | None, sourcemap.Statement | None, bool]] = []
    cuts = [*executions, -1]
    cut_at = set(executions) if returns else ()
    k, cut = 0, cuts[0]
    i, n = 0, len(eqns)
    last_src: SourceInfo | None = None
    last_stmt = None
    while i < n:
        src = eqns[i].source
        again = i == cut
        if again:
            k += 1
            cut = cuts[k]
        j = i + 1
        while j < n and eqns[j].source is src and j != cut:
            j += 1
        if src is not last_src:  # (an unrolled line's executions: one lookup for all)
            last_src, last_stmt = src, None if src is None else statement(src)
        stmt = last_stmt
        # a statement that runs code several times in one execution (a comprehension) is not cut
        groups.append((i, j, src, stmt, again and (stmt is None or not stmt.repeats)))
        i = j

    def same_statement(a: SourceInfo, sa, b: SourceInfo, sb) -> bool:
        # (statements of one file are one object per statement: ``==`` only where a file was read twice)
        return a is b or (a.filename == b.filename and (sa is sb or (
            sa is not None and sb is not None and sa.first == sb.first and sa == sb)))

    last_read: dict[int, int] | None = None  # var -> the last equation reading it (made when first needed)
    start = 0  # the first equation of the current statement's run
    prev: SourceInfo | None = None
    prev_stmt = None
    last = len(groups) - 1
    for g, (first, end, src, stmt, again) in enumerate(groups):
        if g and (again or src is None or prev is None or not same_statement(prev, prev_stmt, src, stmt)):
            start = first
        prev, prev_stmt = src, stmt
        if src is None or stmt is None or not stmt.targets:
            continue
        if g < last:
            _, _, nxt, nxt_stmt, nxt_again = groups[g + 1]
            if nxt is not None and not nxt_again and same_statement(src, stmt, nxt, nxt_stmt):
                continue  # not the last equation of this statement's run
        i = end - 1
        eqn = eqns[i]
        outs = eqn.outputs
        n_targets = len(stmt.targets)
        if n_targets == 1 and outs[1:]:  # `L = cholesky(A)`: the factor, not the status
            outs = tuple(v for v in outs if v.dtype.kind in "fc")
        if n_targets > 1 and len(outs) != n_targets:
            # `a, b = x` (an array unpacked) or `S_h, S_v = f(x), g(y)`: the run's values read after it,
            # in the order the run makes them, are the targets'
            if last_read is None:
                last_read = _last_reads(program)
            outs = tuple(v for e in eqns[start:i + 1] for v in e.outputs if last_read.get(id(v), -1) > i)
        if n_targets == 1 and len(outs) == 1:  # (the common case, without a loop)
            v = outs[0]
            if not v.hint and id(v) not in inlined:
                key = id(v)
                hints[key], named[key] = stmt.targets[0], v
        elif n_targets == len(outs):
            for v, name in zip(outs, stmt.targets):
                if not v.hint and id(v) not in inlined:
                    key = id(v)
                    hints[key], named[key] = name, v
    for made, src, values in returns:
        stmt = statement(src)
        targets = stmt and (stmt.targets or stmt.called)
        if targets and len(targets) < len(values) and inlined and all(id(v) in inlined for v in values):
            # ``g = pb.grad(f)(x, y)``: of a function form's results (value and gradient), those the caller reads
            if last_read is None:
                last_read = _last_reads(program)
            values = tuple(v for v in values if last_read.get(id(v), -1) >= made)
        if not targets or len(targets) != len(values) or any(v.hint or id(v) in hints for v in values):
            continue
        after = eqns[made].source if made < n else None
        if after is not None and made not in cut_at and same_statement(src, stmt, after, statement(after)):
            continue  # ``h = step(W, h) * 2``: the statement goes on computing
        for v, name in zip(values, targets):
            hints[id(v)], named[id(v)] = name, v
    if inlined:  # the rest of a function form's values: the names its program gave them
        for e in eqns:
            for v in e.outputs:
                key = id(v)
                if inlined.get(key) and not v.hint and key not in hints:
                    hints[key], named[key] = inlined[key], v
    if hints:
        program = _name_loop_consts(program, hints)
    for key, v in named.items():  # the trace's own Vars, in no other program yet: named in place, not copied
        v.hint = hints[key]
    return program


def _name_loop_consts(program: Program, hints: dict[int, str]) -> Program:
    """Name a loop body's inputs that stand for the loop's constant operands (arrays the step reads from
    the enclosing function, traced before the enclosing function's names were known) after those
    operands: the gradient accumulated for ``S_v`` then prints as ``S_v_bar_sum``. Through the bodies of
    checkpoints (whose inputs are their operands) and loops within, as deep as they go."""
    eqns = list(program.eqns)
    changed = False
    for k, e in enumerate(eqns):
        if e.prim not in WITH_BODIES:  # only an equation holding programs has a body's inputs to name
            continue
        p = e.params
        if "body" in p and "num_consts" in p and "length" in p:
            body, first = p["body"], int(p["length"] is None)
            pairs = zip(body.inputs[:p["num_consts"]], e.inputs[first:])
        elif set(p) == {"body"} and isinstance(p["body"], Program) and len(p["body"].inputs) == len(e.inputs):
            body, pairs = p["body"], zip(p["body"].inputs, e.inputs)  # a checkpoint: its inputs are its operands
        else:
            continue
        named = {id(v): hints.get(id(a)) or a.hint for v, a in pairs
                 if isinstance(a, Var) and not v.hint and (hints.get(id(a)) or a.hint)}
        new = _name_loop_consts(rename(body, named) if named else body, {})
        if new is not body:
            eqns[k] = Eqn(e.prim, e.inputs, e.outputs, Params({**p, "body": new}), e.source)
            changed = True
    if not changed:
        return program
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def _last_reads(program: Program) -> dict[int, int]:
    """id(var) -> the index of the last equation reading it (past the end for the program's outputs)."""
    last = {id(a): k for k, e in enumerate(program.eqns) for a in e.inputs}
    last.update((id(a), len(program.eqns)) for a in program.outputs)
    return last


def rename(program: Program, hints: dict[int, str]) -> Program:
    """A copy of ``program`` whose vars ``id(v) in hints`` carry new name hints."""
    new: dict[int, Var] = {}

    def sub(a):
        if isinstance(a, Var) and id(a) in hints:
            if id(a) not in new:
                new[id(a)] = Var(a.type, hints[id(a)])
            return new[id(a)]
        return a

    def eqn(e: Eqn) -> Eqn:  # rebuilt only where a var is renamed: most keep theirs
        if hints.keys().isdisjoint(map(id, e.outputs)) and hints.keys().isdisjoint(map(id, e.inputs)):
            return e
        return Eqn(e.prim, tuple(map(sub, e.inputs)), tuple(map(sub, e.outputs)), e.params, e.source)

    eqns = tuple(map(eqn, program.eqns))
    return Program(tuple(map(sub, program.inputs)), eqns, tuple(map(sub, program.outputs)),
                   tuple(map(sub, program.constvars)), program.constvals, program.name)
