"""Building arrays from traced values: ``np.array([x, y])``, ``np.asarray``, ``np.asanyarray``,
``np.r_[...]``, ``np.c_[...]``, and Python lists of traced values given to any NumPy function
pullback implements (``np.mean([a, b])``, ``np.linalg.norm([a, b])``, ``np.max([a, b])``).

NumPy does not dispatch ``np.array`` to ``__array_function__``, and a function's dispatcher
does not look inside a list given where an array is expected, so NumPy would call
``np.asarray`` on the list and fail on the tracers in it. Instead, while any trace is active
in the process, the ``numpy`` and ``numpy.linalg`` modules hold wrappers of ``array``,
``asarray``, ``asanyarray``, ``r_``, ``c_`` and of every (non-ufunc) function in
``FUNCTIONS``. A wrapper called on this thread while it traces, with a (nested) list or tuple
holding a tracer among its arguments, makes that list a traced array (``array`` below) and
calls pullback's implementation; in any other case it calls NumPy's function with the
arguments unchanged, so other threads, and calls without such lists, see NumPy's behaviour.
The wrappers are installed when the first trace of the process starts and the very same
objects are put back when the last one ends (reference-counted under a lock; see
``tracer.TRACE_HOOKS``), also when a trace ends by an exception. The same mechanism stands in
for functions outside NumPy's dispatch that families register by (owner, attribute) with
``implements_attribute`` (``scipy.special.logsumexp``, the methods of ``scipy.stats.norm``):
see ``ATTRIBUTES``.

The wrappers of ``eye`` and ``identity`` always call NumPy's, and on a thread that traces tell the
trace which arrays they made (``tracer.record_eye``): only those become ``eye`` equations, so
an identity-valued array the function reads from its scope stays a constant read at every call.

Limits: a name bound before the trace (``from numpy import array``, ``mean = np.mean``) is
NumPy's own function, which does not see the tracers in a list; ufuncs (``np.add([a, b], 1)``)
are not wrapped; ``np.asarray(x)`` of a tracer itself still refuses (a concrete array is what
it promises); ``np.zeros``/``np.ones`` never return tracers. Dtypes follow NumPy's array
coercion, in which Python scalars are not weak: ``np.array([np.float32(1), 2.0])`` is
float64, as is the list of a float32 tracer and ``2.0``; a ``dtype=`` argument casts.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
from collections.abc import Callable

import numpy as np

from pullback import numpy_api as api
from pullback.errors import TracingError
from pullback.ir import tracer as tr
from pullback.ir.tracer import PYTHON_SCALARS, Tracer, located
from pullback.ir.types import canonical_dtype

_SEQUENCES = (list, tuple)
# NumPy's names for parameters that take a sequence of arrays
_ARRAY_SEQUENCE_PARAMS = frozenset({"arrays", "tup", "arys", "condlist", "choicelist", "xi"})
_ARRAY_PARAMS = frozenset({"a", "b", "x", "y", "x1", "x2", "m", "v", "val", "condition", "array", "ary", "operands",
                           "arr", "values"})


def _holds_tracer(x) -> bool:
    if type(x) is Tracer:
        return True
    return isinstance(x, _SEQUENCES) and any(map(_holds_tracer, x))


def _is_traced_sequence(x) -> bool:
    return isinstance(x, _SEQUENCES) and _holds_tracer(x)


_tracing = tr.tracing


# --- pullback's np.array ------------------------------------------------------------------------


def _leaf_dtypes(x, out: list) -> None:
    if isinstance(x, _SEQUENCES):
        for e in x:
            _leaf_dtypes(e, out)
    elif isinstance(x, Tracer | np.ndarray | np.generic):
        out.append(x.dtype)
    elif isinstance(x, PYTHON_SCALARS):
        out.append(np.asarray(x).dtype)  # NumPy's array coercion: Python scalars are not weak
    else:
        api.unsupported(f"an array element of type {type(x).__name__}")


def _leaves(x, out: list) -> tuple[int, ...]:
    """Append the leaves of a nested list (arrays, tracers, scalars, at any depth) to ``out`` in
    row-major order; return the shape of the array they make."""
    if not isinstance(x, _SEQUENCES):
        out.append(x)
        return np.shape(x)
    shapes = {_leaves(e, out) for e in x}
    if len(shapes) > 1:
        raise TracingError(located(
            f"cannot build an array from a list of elements of different shapes {sorted(shapes)}"))
    return (len(x), *(shapes.pop() if shapes else ()))


def array(obj, dtype=None):
    """``np.array(obj, dtype)`` for a (nested) list or tuple that may hold tracers: the leaves,
    raveled, are concatenated (each run of constant ones as one NumPy constant) and reshaped."""
    if isinstance(obj, Tracer):
        return obj if dtype is None else api.astype(obj, dtype)
    if dtype is None:
        dtypes: list = []
        _leaf_dtypes(obj, dtypes)
        dtype = np.result_type(*dtypes) if dtypes else np.float64
    dtype = canonical_dtype(dtype)
    if not _holds_tracer(obj):
        return np.asarray(obj, dtype)
    leaves: list = []
    shape = _leaves(obj, leaves)
    pieces, run = [], []
    for leaf in leaves:
        if isinstance(leaf, Tracer):
            if run:
                pieces.append(np.concatenate(run))
                run = []
            pieces.append(api.reshape(api.astype(leaf, dtype), (-1,)))
        else:
            run.append(np.asarray(leaf, dtype).reshape(-1))
    if run:
        pieces.append(np.concatenate(run))
    return api.reshape(api.concatenate(pieces, axis=0), shape)


def _called_by_user() -> bool:
    """Whether the wrapper's caller is the user's code: NumPy's and SciPy's own conversions of a
    tracer (``np.asarray`` inside scipy.linalg) still refuse, naming the function that asked."""
    return tr.is_user_code(sys._getframe(2))


def _array(obj, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    if ndmin or like is not None:
        api.unsupported("np.array with ndmin= or like= on a list of traced values")
    if type(obj) is Tracer:
        return api.astype(obj, dtype).copy() if dtype is not None else obj.copy()
    return array(obj, dtype)


def _asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    if like is not None:
        api.unsupported("np.asarray with like= on a list of traced values")
    if type(a) is Tracer:
        return api.astype(a, dtype) if dtype is not None else a
    return array(a, dtype)


# --- np.r_ and np.c_ ------------------------------------------------------------------------------


def _concat_item(item, columns: bool):
    if isinstance(item, str):
        api.unsupported("np.r_/np.c_ with a string directive on traced values")
    if isinstance(item, slice):
        item = np.r_[item]
    a = array(item) if isinstance(item, _SEQUENCES) else item
    a = api._lift(a)
    if columns:  # np.c_ is np.r_['-1,2,0']: 1-d pieces become columns
        return api.reshape(a, (1, 1)) if a.ndim == 0 else api.reshape(a, (-1, 1)) if a.ndim == 1 else a
    return api.reshape(a, (1,)) if a.ndim == 0 else a


class _Concatenator:
    """``np.r_`` / ``np.c_`` while tracing: pullback's for keys holding tracers, NumPy's otherwise."""

    def __init__(self, original, columns: bool):
        self._original = original
        self._columns = columns

    def __getitem__(self, key):
        if _tracing() and _holds_tracer(key if isinstance(key, tuple) else (key,)):  # np.r_[x] with x traced too
            items = key if isinstance(key, tuple) else (key,)
            pieces = [_concat_item(item, self._columns) for item in items]
            return api.concatenate(pieces, axis=-1 if self._columns else 0)
        return self._original[key]

    def __len__(self):
        return len(self._original)

    def __getattr__(self, name):
        return getattr(self._original, name)


# --- the wrappers ---------------------------------------------------------------------------------


def _convert(value, param: str):
    """An argument of pullback's implementation: lists where NumPy takes an array become arrays
    (constant ones too, as NumPy would make them), other lists only if they hold tracers."""
    if not isinstance(value, _SEQUENCES):
        return value
    if param in _ARRAY_SEQUENCE_PARAMS:  # np.stack([a, [b, c]]): each element is one array
        return [array(e) if isinstance(e, _SEQUENCES) else e for e in value]
    if param in _ARRAY_PARAMS or _holds_tracer(value):
        return array(value)
    return value


def _positional_names(func: Callable) -> tuple[list[str], str | None]:
    """The names of ``func``'s positional parameters, and of its ``*args`` if any."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return [], None
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    return positional, star


def _wrap(func: Callable, impl: Callable | None = None) -> Callable:
    """``func`` that makes lists holding tracers arrays and calls pullback's implementation."""
    positional, star = _positional_names(func)

    def call(*args, **kwargs):
        if impl is not None and args and type(args[0]) is Tracer and _tracing() and _called_by_user():
            return impl(*args, **kwargs)  # np.array(x) of a tracer in the user's code: a copy of it
        if _tracing() and (any(map(_is_traced_sequence, args)) or any(map(_is_traced_sequence, kwargs.values()))):
            names = positional + [star or ""] * (len(args) - len(positional))
            args = tuple(_convert(a, n) for n, a in zip(names, args))
            kwargs = {k: _convert(v, k) for k, v in kwargs.items()}
            if impl is not None:
                return impl(*args, **kwargs)
            return api.array_function(func, args, kwargs)
        return func(*args, **kwargs)

    functools.update_wrapper(call, func)
    call.__pullback_wraps__ = func  # type: ignore[attr-defined]
    return call


def _recording_eye(func: Callable) -> Callable:
    """``np.eye``/``np.identity`` that, on a thread that traces, tell the trace which arrays they made:
    only those become ``eye`` equations (``tracer.record_eye``), never an identity-valued array that
    the traced function reads from its scope."""
    signature = inspect.signature(func)

    def call(*args, **kwargs):
        out = func(*args, **kwargs)
        if _tracing():
            try:
                k = signature.bind(*args, **kwargs).arguments.get("k", 0)
            except TypeError:
                return out
            tr.record_eye(out, k)
        return out

    functools.update_wrapper(call, func)
    call.__pullback_wraps__ = func  # type: ignore[attr-defined]
    return call


_lock = threading.Lock()
_active = 0  # traces running in the process, all threads
_saved: list[tuple[object, str, object]] = []  # (module, name, NumPy's object)


# NumPy's dispatch of np.block sees tracers at any depth of its nested lists
_NOT_WRAPPED = frozenset({"block"})
_WRAPPED = {"array": _array, "asarray": _asarray, "asanyarray": _asarray}
_RECORDED = ("eye", "identity")  # arrays they make during a trace are known to be identities


@functools.cache
def _names(n_functions: int) -> tuple[tuple[object, str], ...]:
    """(module, name) of every object the wrappers replace (recomputed if a family registers more)."""
    names = [(module, name) for module in (np, np.linalg) for name, value in vars(module).items()
             if not name.startswith("_") and name not in _NOT_WRAPPED and not isinstance(value, np.ufunc)
             and _known(value)]
    return (*names, *((np, name) for name in (*_WRAPPED, "r_", "c_", *_RECORDED)))


def _known(value) -> bool:
    try:
        return value in api.FUNCTIONS
    except TypeError:  # unhashable
        return False


_wrappers: dict[int, tuple[object, object]] = {}  # id(NumPy's object) -> (it, its wrapper)


def _wrapper(module, name: str, original):
    found = _wrappers.get(id(original))
    if found is None or found[0] is not original:
        if name in ("r_", "c_"):
            wrapper = _Concatenator(original, columns=name == "c_")
        elif module is np and name in _RECORDED:
            wrapper = _recording_eye(original)
        else:
            wrapper = _wrap(original, _WRAPPED.get(name) if module is np else None)
        found = _wrappers[id(original)] = (original, wrapper)
    return found[1]


# --- functions outside NumPy's dispatch -------------------------------------------------------------
# SciPy functions that call np.asarray themselves (``scipy.special.logsumexp``) and methods of
# SciPy's distribution objects (``scipy.stats.norm`` is an instance of ``norm_gen``) never reach
# ``__array_function__``. A family registers pullback's implementation by the object that holds the
# attribute and its name; while any trace runs, the attribute is a wrapper calling it when an
# argument holds a tracer (and the original otherwise). Registered on a class, the wrapper is a
# method (every instance sees it: ``scipy.stats.norm(mu, sigma).logpdf(x)`` calls a fresh
# ``norm_gen``), shadowing the inherited one until the last trace ends, when it is deleted again.
ATTRIBUTES: dict[tuple[object, str], tuple[str, Callable]] = {}  # (owner, name) -> (public name, impl)
_MISSING = object()


def implements_attribute(owner, name: str, public: str | None = None) -> Callable:
    """Register the decorated function as pullback's ``owner.name`` on traced arguments
    (``public``, the name errors use, defaults to ``module.name``; for a class, the method's
    arguments after ``self``)."""
    def register(impl):
        ATTRIBUTES[owner, name] = (public or f"{owner.__name__}.{name}", impl)
        return impl

    return register


def _traced_call(args, kwargs) -> bool:
    return _tracing() and (any(map(_holds_tracer, args)) or any(map(_holds_tracer, kwargs.values())))


def _lowered(public: str, impl: Callable, args, kwargs):
    if getattr(impl, "takes_tuples", False):  # ``cho_solve((c, lower), b)``: the pair is not an array
        return api.lowering(public, impl, args, kwargs)
    args = tuple(array(a) if _is_traced_sequence(a) else a for a in args)
    kwargs = {k: array(v) if _is_traced_sequence(v) else v for k, v in kwargs.items()}
    return api.lowering(public, impl, args, kwargs)


def _wrap_attribute(original: Callable, public: str, impl: Callable, method: bool) -> Callable:
    if method:
        def call(self, *args, **kwargs):
            if _traced_call(args, kwargs):
                return _lowered(public, impl, args, kwargs)
            return original(self, *args, **kwargs)
    else:
        def call(*args, **kwargs):
            if _traced_call(args, kwargs):
                return _lowered(public, impl, args, kwargs)
            return original(*args, **kwargs)

    functools.update_wrapper(call, original)
    call.__pullback_wraps__ = original  # type: ignore[attr-defined]
    return call


_attribute_wrappers: dict[tuple[int, str], tuple[object, object, Callable]] = {}  # (owner, original, wrapper)


def _attribute_wrapper(owner, name: str, original) -> Callable:
    key = (id(owner), name)
    found = _attribute_wrappers.get(key)
    if found is None or found[0] is not owner or found[1] != original:  # bound methods compare by self and func
        public, impl = ATTRIBUTES[owner, name]
        wrapper = _wrap_attribute(original, public, impl, method=isinstance(owner, type))
        found = _attribute_wrappers[key] = (owner, original, wrapper)
    return found[2]


# A name bound before the trace (``from scipy.special import logsumexp``, or the bound method
# ``scipy.stats.norm.pdf`` held by a test helper) is SciPy's function object itself, which no
# module attribute reaches. While traces run, such a function has its code replaced by a
# trampoline that calls ``_redirected``: pullback's implementation on traced arguments of a
# registered owner, else a copy of the original function (same code, defaults, globals and
# closure), so every other call behaves exactly as before. The code is put back when the last
# trace ends. A decorated function (``scipy.linalg.solve_sylvester`` is the closure that
# ``_apply_over_batch`` returns) gets a trampoline with the same free variables, never read,
# since Python only swaps code whose free variables match the function's closure.
_REDIRECT = "__pullback_redirect__"
_code_saved: dict[int, tuple[types.FunctionType, types.CodeType, types.FunctionType]] = {}
_owners: dict[int, list[tuple[object, str]]] = {}
_globals_touched: list[dict] = []


def _redirect_code(fn, owner, name: str) -> None:
    if not isinstance(fn, types.FunctionType):
        return
    key = id(fn)
    _owners.setdefault(key, []).append((owner, name))
    if key in _code_saved:
        return
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    _code_saved[key] = (fn, fn.__code__, copy)
    if _REDIRECT not in fn.__globals__:
        fn.__globals__[_REDIRECT] = _redirected
        _globals_touched.append(fn.__globals__)
    fn.__code__ = _trampoline(key, fn.__code__.co_freevars, fn.__qualname__)


def _trampoline(key: int, freevars: tuple[str, ...], qualname: str) -> types.CodeType:
    """``def trampoline(*args, **kwargs): return _redirected(key, args, kwargs)``, with the free
    variables ``freevars`` (identifiers from a code object) named in a branch that never runs."""
    free = ", ".join(freevars)
    body = ("    def trampoline(*__pullback_args, **__pullback_kwargs):\n"
            + (f"        if False:\n            {free},\n" if freevars else "")
            + f"        return {_REDIRECT}({key}, __pullback_args, __pullback_kwargs)\n"
            + "    return trampoline\n")
    head = f"def outer():\n    {' = '.join(freevars)} = None\n" if freevars else "def outer():\n"
    namespace: dict = {}
    exec(compile(head + body, f"<pullback stand-in for {qualname}>", "exec"), namespace)
    return namespace["outer"]().__code__  # CPython sorts free variables by name: the same order as fn's


def _redirected(key: int, args: tuple, kwargs: dict):
    _, _, copy = _code_saved[key]
    for owner, name in _owners.get(key, ()):
        if callable(getattr(owner, "__pullback_wraps__", None)):  # a NumPy function's wrapper
            if _tracing() and (any(map(_is_traced_sequence, args)) or any(map(_is_traced_sequence, kwargs.values()))):
                return owner(*args, **kwargs)
        elif isinstance(owner, type):  # a method: the instance's class must be the registered one
            if args and isinstance(args[0], owner) and _traced_call(args[1:], kwargs):
                public, impl = ATTRIBUTES[owner, name]
                return _lowered(public, impl, args[1:], kwargs)
        elif _traced_call(args, kwargs):
            public, impl = ATTRIBUTES[owner, name]
            return _lowered(public, impl, args, kwargs)
    return copy(*args, **kwargs)


def _restore_code() -> None:
    for fn, code, _ in _code_saved.values():
        fn.__code__ = code
    _code_saved.clear()
    _owners.clear()
    while _globals_touched:
        _globals_touched.pop().pop(_REDIRECT, None)


def enter() -> None:
    """A trace starts: the first one installs the wrappers."""
    global _active
    with _lock:
        _active += 1
        if _active == 1:
            for module, name in _names(len(api.FUNCTIONS)):
                original = getattr(module, name)
                _saved.append((module, name, original))
                wrapper = _wrapper(module, name, original)
                setattr(module, name, wrapper)
                # NumPy's function held from before the trace (``f = np.append``) still dispatches
                # to its Python implementation: lists of tracers given to it reach the wrapper too
                _redirect_code(getattr(original, "_implementation", None), wrapper, name)
            for owner, name in ATTRIBUTES:
                original = getattr(owner, name)
                _redirect_code(original, owner, name)
                _saved.append((owner, name, vars(owner).get(name, _MISSING)))
                setattr(owner, name, _attribute_wrapper(owner, name, original))


def leave() -> None:
    """A trace ends: the last one puts the original objects back (and removes shadowing methods)."""
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            while _saved:
                module, name, original = _saved.pop()
                if original is _MISSING:
                    delattr(module, name)
                else:
                    setattr(module, name, original)
            _restore_code()


tr.TRACE_HOOKS.append((enter, leave))


@api.implements(np.result_type)
def result_type(*arrays_and_dtypes):
    """NumPy's result dtype, with tracers standing for arrays of their dtype (a tracer of a
    Python scalar argument stays weak, as the scalar would be)."""
    reps = [api._WEAK_REP[x.dtype.kind] if type(x) is Tracer and x.weak else x.dtype if type(x) is Tracer else x
            for x in arrays_and_dtypes]
    return np.result_type(*reps)
