"""Building arrays from traced values (``np.array([x, y])``, ``np.asarray``, ``np.r_[...]``,
``np.c_[...]``, lists of traced values given to any NumPy function pullback implements), and the
dispatcher that converted code calls (``convert``): NumPy's and SciPy's functions outside NumPy's
protocols, found by identity where the user's code calls them.

NumPy does not dispatch ``np.array`` to ``__array_function__``, and a function's dispatcher does not
look inside a list given where an array is expected, so NumPy would call ``np.asarray`` on the list
and fail on the tracers in it. Called from traced code with a (nested) list or tuple holding a tracer
among its arguments, such a function instead makes that list a traced array (``array`` below) and
calls pullback's implementation; any other call is NumPy's own. Nothing in NumPy or SciPy is
changed: other threads and untraced code never see pullback.

``np.eye`` and ``np.identity`` called from traced code tell the trace which arrays they made
(``eyes.record_eye``): only those become ``eye`` equations, so an identity-valued array the
function reads from its scope stays a constant read at every call.

Limits: NumPy and SciPy code that the user's code calls is not converted, so a list of tracers
reaches pullback only where the user's own code passes it; ufuncs (``np.add([a, b], 1)``) take no
lists; ``np.asarray(x)`` of a tracer inside SciPy still refuses (a concrete array is what it
promises); ``np.zeros``/``np.ones`` return NumPy arrays, which become traced values only when index
assignment gives them one (see "arrays made in the traced function" below). Dtypes follow NumPy's
array coercion, in which Python scalars are not weak: ``np.array([np.float32(1), 2.0])`` is float64,
as is the list of a float32 tracer and ``2.0``; a ``dtype=`` argument casts.
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
import types
import weakref
from collections.abc import Callable

import numpy as np

from pullback.errors import TracingError
from pullback.frontend import control_flow, convert, eyes
from pullback.frontend import numpy as api
from pullback.frontend.numpy import integers, random
from pullback.ir import tracer as tr
from pullback.ir.tracer import PYTHON_SCALARS, Tracer, located
from pullback.ir.types import canonical_dtype
from pullback.primitives import structural as st

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


# --- np.arange of traced bounds -------------------------------------------------------------------


def _arange(*args, dtype=None, **kwargs):
    """``np.arange(start, stop[, step])`` of traced integer bounds a constant apart: ``start`` plus a
    range of static length (``np.arange(it * b, (it + 1) * b)``, the positions of a minibatch); any
    other call is NumPy's."""
    if not _tracing() or not any(type(a) is Tracer for a in (*args, *kwargs.values())):
        return np.arange(*args, dtype=dtype, **kwargs)
    bounds = dict(zip(("start", "stop", "step"), args if len(args) > 1 else (0, *args)))
    bounds.update(kwargs)
    if set(bounds) - {"start", "stop", "step"} or "stop" not in bounds:
        api.unsupported(f"np.arange({', '.join(bounds)}) with traced bounds")
    step = bounds.get("step", 1)
    if type(step) is Tracer or not isinstance(step, int | np.integer) or step == 0:
        raise TracingError(located(f"np.arange with traced bounds needs a nonzero Python integer step, got {step!r}"))
    first, length = integers.span(bounds["start"], bounds["stop"])
    n = len(range(0, length.const, int(step)))
    dtype = canonical_dtype(dtype) if dtype is not None else api.result_dtype(bounds["start"], bounds["stop"], step)
    offsets = tr.bind(st.iota_p, dtype=dtype, shape=(n,), dimension=0)
    if step != 1:
        offsets = api.multiply(offsets, step)
    return api.add(api.astype(bounds["start"], dtype), offsets)


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


# --- arguments of pullback's implementations ----------------------------------------------------


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


# --- functions outside NumPy's dispatch -------------------------------------------------------------
# SciPy functions that call np.asarray themselves (``scipy.special.logsumexp``) and methods of
# SciPy's distribution objects (``scipy.stats.norm`` is an instance of ``norm_gen``) never reach
# ``__array_function__``. A family registers pullback's implementation by the object that holds the
# attribute and its name: called from traced code with an argument holding a tracer, the attribute
# (a function of a module, or a method of a class's instances, frozen distributions included) runs
# pullback's implementation instead.
ATTRIBUTES: dict[tuple[object, str], tuple[str, Callable]] = {}  # (owner, name) -> (public name, impl)


def implements_attribute(owner, name: str, public: str | None = None) -> Callable:
    """Register the decorated function as pullback's ``owner.name`` on traced arguments
    (``public``, the name errors use, defaults to ``module.name``; for a class, the method's
    arguments after ``self``, or with it where the function has ``takes_self = True``)."""
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


# --- the dispatcher of converted code -------------------------------------------------------------
# A traced function runs converted (``convert``): each call in it reaches ``call`` below, which
# looks the callee up by identity. Registered are NumPy's functions that take lists of tracers
# (``np.array``, ``np.asarray``, every non-ufunc function in ``FUNCTIONS``), ``np.eye`` and
# ``np.identity`` (their arrays are known identities), and the SciPy functions and methods that
# families register with ``implements_attribute``. The user's own functions are converted in turn.


def _positional_names(func: Callable) -> tuple[list[str], str | None]:
    """The names of ``func``'s positional parameters, and of its ``*args`` if any."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return [], None
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    return positional, star


def _numpy_handler(func: Callable, impl: Callable | None = None) -> Callable:
    """``func`` called from traced code: lists holding tracers become arrays for pullback's
    implementation (``impl``, else NumPy's dispatch to ``FUNCTIONS``); ``np.array(x)`` of a tracer
    is a copy of it; any other call is NumPy's. A tracer anywhere among the arguments reaches pullback,
    not only one NumPy's dispatcher looks at: ``np.full_like(a, v)`` and ``np.pad(a, 1,
    constant_values=v)`` dispatch on ``a`` alone, which may be a constant."""
    positional, star = _positional_names(func)

    def call(*args, **kwargs):
        if impl is not None and args and type(args[0]) is Tracer:
            return impl(*args, **kwargs)
        if len(args) == 1 and not kwargs and type(args[0]) is Tracer:  # (``np.diag(L)``, without the scans below)
            return impl(*args) if impl is not None else api.array_function(func, args, kwargs)
        if any(map(_is_traced_sequence, args)) or any(map(_is_traced_sequence, kwargs.values())):
            names = positional + [star or ""] * (len(args) - len(positional))
            args = tuple(_convert(a, n) for n, a in zip(names, args))
            kwargs = {k: _convert(v, k) for k, v in kwargs.items()}
        elif not any(type(a) is Tracer for a in (*args, *kwargs.values())):
            return _noted(func, args, kwargs)
        return impl(*args, **kwargs) if impl is not None else api.array_function(func, args, kwargs)

    return call


def _eye_handler(func: Callable) -> Callable:
    """``np.eye``/``np.identity`` that tell the trace which arrays they made: only those become
    ``eye`` equations (``eyes.record_eye``), never an identity-valued array read from scope."""
    names = list(inspect.signature(func).parameters)
    at = names.index("k") if "k" in names else None  # its diagonal's offset: positional there, or by keyword

    def call(*args, **kwargs):
        out = func(*args, **kwargs)  # (the call was good: its arguments bind as they did)
        k = 0 if at is None else args[at] if len(args) > at else kwargs.get("k", 0)
        eyes.record_eye(out, k)
        return out

    return call


def _scalar_handler(kind: type) -> Callable:
    """NumPy's scalar types as constructors (``np.float64(x)``): of a traced value, a cast to that dtype,
    as NumPy casts a 0-d array (and an array of more axes: ``np.float64(a)`` is ``a.astype(np.float64)``)."""
    def call(*args, **kwargs):
        if len(args) == 1 and not kwargs and (type(args[0]) is Tracer or _is_traced_sequence(args[0])):
            return api._strong(api.astype(array(args[0]), kind))
        return kind(*args, **kwargs)

    return call


def _attribute_handler(original: Callable, public: str, impl: Callable) -> Callable:
    """``impl`` where an argument holds a tracer, or whenever a trace runs if it says ``whenever_tracing``
    (a solver whose callable may read traced values through its closure alone)."""
    always = getattr(impl, "whenever_tracing", False)

    def call(*args, **kwargs):
        if (always and _tracing()) or _traced_call(args, kwargs):
            return _lowered(public, impl, args, kwargs)
        return original(*args, **kwargs)

    return call


# NumPy's dispatch of np.block sees tracers at any depth of its nested lists
_NOT_WRAPPED = frozenset({"block"})
_WRAPPED = {"array": _array, "asarray": _asarray, "asanyarray": _asarray}
_RECORDED = ("eye", "identity")  # arrays they make during a trace are known to be identities
_SCALAR_TYPES = (np.bool_, np.int32, np.int64, np.float16, np.float32, np.float64, np.complex64, np.complex128)

_OPERATORS = tuple(getattr(operator, name) for name in ("add", "sub", "mul", "truediv", "matmul", "pow",
                                                       "floordiv", "mod", "neg", "pos"))
# arithmetic that, on arrays made from shapes alone and scalars, the program does again (``eyes.record_derived``,
# as it does NumPy's functions, ufuncs and array methods on them: ``_noted``)
_DERIVING = frozenset({operator.add, operator.sub, operator.mul, operator.truediv, operator.neg})
# id(NumPy's or SciPy's object) -> (it, handler, lifts, the lowering of two tracers: ``call`` runs it at once)
_table: dict[int, tuple[object, Callable, bool, Callable | None]] = {}
_table_size = -1  # the registries' size it was built for


def _build_table() -> None:
    """(Re)build the table when the registries have grown; swapped whole, so a thread reading it never
    sees it half made."""
    global _table, _table_size
    size = len(api.FUNCTIONS) + len(ATTRIBUTES)
    if size == _table_size:
        return
    table: dict[int, tuple] = {}  # the bool: it reads captured arrays as constants
    for module in (np, np.linalg):
        for name, value in vars(module).items():
            if name.startswith("_") or name in _NOT_WRAPPED or isinstance(value, np.ufunc) or not _known(value):
                continue
            table[id(value)] = (value, _numpy_handler(value), True, None)
    for name, impl in _WRAPPED.items():
        table[id(getattr(np, name))] = (getattr(np, name), _numpy_handler(getattr(np, name), impl), False, None)
    table[id(np.arange)] = (np.arange, _arange, False, None)
    for name in _RECORDED:
        table[id(getattr(np, name))] = (getattr(np, name), _eye_handler(getattr(np, name)), False, None)
    for kind in _SCALAR_TYPES:
        table[id(kind)] = (kind, _scalar_handler(kind), False, None)
    for func in eyes.SHAPED:  # (``np.tri(n)``: made again by the program)
        table[id(func)] = (func, eyes.shaped(func), False, None)
    for op in _OPERATORS:  # arithmetic in the user's code: on a captured array, the program's
        handler = _derived_handler(op) if op in _DERIVING else op
        traced = _TRACED_OPERATORS.get(op)
        table[id(op)] = (op, handler if traced is None else _operator_handler(handler, traced, op), True, traced)
    for maker in random.MAKERS:
        table[id(maker)] = (maker, random.making(maker), False, None)
    for function, handler in random.module_functions().items():
        table[id(function)] = (function, handler, False, None)
    for name in _MAKERS:
        func = getattr(np, name)
        handler, lifts = table[id(func)][1:3] if id(func) in table else (func, False)
        table[id(func)] = (func, _maker_handler(func, handler), lifts, None)
    for (owner, name), (public, impl) in ATTRIBUTES.items():
        if not isinstance(owner, type):
            original = getattr(owner, name)
            table[id(original)] = (original, _attribute_handler(original, public, impl), True, None)
    _table = table
    _table_size = size


# the binary operators' lowerings, which their Tracer methods call (``Tracer.__add__``, ``__radd__``, ...)
_TRACED_OPERATORS = {operator.add: api.add, operator.sub: api.subtract, operator.mul: api.multiply,
                     operator.truediv: api.divide, operator.matmul: api.matmul_operator}
_WEAK = (float, int)  # Python's scalars that defer to a tracer's reflected method (not bool: an int of its own)
# NumPy's scalars of the dtypes a program holds: a tracer's method takes them as Python takes a float (``x +
# np.log(2 * np.pi)``), strong (NEP 50)
_NUMPY_SCALARS = frozenset({np.float64, np.float32, np.int64, np.int32})


# the operators whose lowering is NumPy's ufunc's (``np.subtract``'s is ``api.subtract``): a NumPy array beside a
# tracer reaches it through NumPy's dispatch to ``Tracer.__array_ufunc__`` (``np.eye(n) - K @ B``), or at once
_UFUNC_OPERATORS = frozenset({operator.add, operator.sub, operator.mul, operator.truediv})


def _operator_handler(handler: Callable, traced: Callable, op: Callable) -> Callable:
    """``handler`` of a binary operator, with the common cases at once: a tracer of the innermost trace beside
    a tracer or a Python float or int (or, first, a NumPy scalar), where Python would call the tracer's method
    (or the reflected one), which checks that its trace runs and calls ``traced`` on the operands in their
    order (a NumPy array too, for the operators of ``_UFUNC_OPERATORS``, which NumPy's dispatch lowers alike);
    two Python or NumPy numbers that no NumPy call of the trace's arrays made, whose result ``handler`` would
    not note (``0.5 * dv``: ``op`` itself)."""
    arrays = op in _UFUNC_OPERATORS

    def call(*args):
        if len(args) == 2:
            a, b = args
            ta, tb = type(a), type(b)
            if ta is Tracer:
                if ((tb is Tracer or tb in _WEAK or tb in _NUMPY_SCALARS or arrays and tb is np.ndarray)
                        and a.builder is tr._state.stack[-1]):
                    return traced(a, b)
            elif tb is Tracer:
                if (ta in _WEAK or arrays and ta is np.ndarray) and b.builder is tr._state.stack[-1]:
                    return traced(a, b)
            elif (ta in _WEAK or ta in _NUMPY_SCALARS) and (tb in _WEAK or tb in _NUMPY_SCALARS):
                eyes_made = tr._state.stack[-1].eyes  # (a NumPy scalar there is one a NumPy call made: noted)
                if id(a) not in eyes_made and id(b) not in eyes_made:
                    return op(a, b)
        return handler(*args)

    return call


def _derived_handler(op: Callable) -> Callable:
    """``op`` noting the NumPy arrays it makes (``JITTER * np.eye(u)``) for the program to make again."""
    def call(*args):  # (``_noted`` inline: this runs at every operator of traced code)
        out = op(*args)
        if type(out) is np.ndarray or isinstance(out, np.generic):
            eyes.record_derived(out, op, args)
        return out

    return call


def _noted(op: Callable, args: tuple, kwargs: dict):
    """``op(*args, **kwargs)`` on no tracers, its arrays noted: made from arrays the trace made, the
    program makes them again by the same call (``eyes.record_derived``)."""
    out = op(*args, **kwargs)
    if type(out) in (np.ndarray, tuple, list) or isinstance(out, np.generic):  # (``np.sum(w)``'s scalar too)
        eyes.record_derived(out, op, args, kwargs)
    return out


def _known(value) -> bool:
    try:
        return value in api.FUNCTIONS
    except TypeError:  # unhashable
        return False


try:
    from scipy.stats._distn_infrastructure import rv_frozen, rv_generic
except ImportError:  # a SciPy that moved them: distributions' methods are then not redirected
    rv_frozen = rv_generic = ()


def _method(f: types.MethodType):
    """The handler of a bound method: pullback's implementation of a registered SciPy method
    (``scipy.stats.norm.logpdf``, by the instance's class and the name), a frozen distribution's
    method as its distribution's with the frozen arguments, or the user's method converted."""
    self, func = f.__self__, f.__func__
    if func.__name__ == "rvs" and isinstance(self, rv_generic):
        return lambda *args, **kwargs: random.rvs(self, args, kwargs)
    if func.__name__ == "rvs" and isinstance(self, rv_frozen):
        return lambda size=None, random_state=None: random.rvs(
            self.dist, self.args, {**self.kwds, "size": size, "random_state": random_state})
    found = ATTRIBUTES.get((type(self), func.__name__))
    if found is not None:
        public, impl = found
        if getattr(impl, "takes_self", False):  # a method that reads its instance (``Polynomial.__call__``)
            impl = functools.partial(impl, self)

        def lowered(*args, **kwargs):
            args, kwargs = _read_captured(args, kwargs)
            return _lowered(public, impl, args, kwargs) if _traced_call(args, kwargs) else f(*args, **kwargs)

        return lowered
    frozen = getattr(self, "dist", None)
    if isinstance(self, rv_frozen) and (type(frozen), func.__name__) in ATTRIBUTES:
        method = getattr(frozen, func.__name__)
        return lambda *args, **kwargs: call(method, *args, *self.args, **{**self.kwds, **kwargs})
    if type(func) is types.FunctionType:
        new = _converted(func)
        if new is not func:  # ``self.W``: arrays of the instance the method reads
            _note_scope(f, (func, self))
        return types.MethodType(new, self)
    return f


def call(f, /, *args, **kwargs):
    """What converted code calls for ``f(*args, **kwargs)``: see above."""
    try:  # ``_tracing()`` and ``_buffers()`` inline: this runs at every call and operator of traced code
        stack = tr._state.stack
    except AttributeError:
        stack = None
    if not stack:  # converted code run outside its trace (a function it defined, kept and called later)
        return f(*args, **kwargs)
    stack[-1].calls += 1  # (one call's equations told from the next's: ``Builder.executions``)
    for builder in stack:
        if builder.buffers:
            args, kwargs = _read_buffers(args, kwargs)
            break
    found = _table.get(id(f))
    if found is not None and found[0] is f:
        if found[2] and stack[-1].captured:
            args, kwargs = _read_captured(args, kwargs)
        traced = found[3]
        if traced is not None and args[1:] and not args[2:] and not kwargs:  # (``_operator_handler``'s first case)
            a, b = args
            if type(a) is Tracer and type(b) is Tracer and a.builder is stack[-1]:
                return traced(a, b)
        return found[1](*args, **kwargs)
    kind = type(f)
    if kind is types.FunctionType:  # (its result noted: ``h = step(W, h)`` names it ``h``)
        return tr.returned(_converted(f)(*args, **kwargs), stack[-1])
    if kind is np.ufunc and f in api.UFUNCS:
        if stack[-1].captured:
            args, kwargs = _read_captured(args, kwargs)
        if not kwargs and (len(args) == 1 and type(args[0]) is Tracer
                           or len(args) == 2 and type(args[0]) is Tracer and type(args[1]) is Tracer):
            return args[0]._api.array_ufunc(f, "__call__", args, {})  # what NumPy's dispatch to a tracer calls
        if not kwargs and all([type(a) in _WEAK for a in args]):  # ``np.log(2 * np.pi)``: of no array, not noted
            return f(*args)
        return _noted(f, args, kwargs)
    if kind is types.MethodType or kind is types.BuiltinMethodType:
        owner = f.__self__
        if isinstance(owner, random.GENERATORS):  # a draw (Cython's methods are either kind)
            return random.draw(owner, f.__name__, args, kwargs)
        if kind is types.MethodType:
            return _method(f)(*args, **kwargs)
        if type(owner) is np.ndarray:
            traced = tr.traced_buffer(owner)
            if traced is not None:  # traj.sum() of an array filled with traced values
                return getattr(traced, f.__name__)(*args, **kwargs)
            if hasattr(Tracer, f.__name__) and (
                    owner.dtype.kind in "fc" and _is_captured(owner)  # W.sum()
                    or any(map(_holds_tracer, args)) or any(map(_holds_tracer, kwargs.values()))):  # c.take(k)
                args, kwargs = _read_captured(args, kwargs)
                return getattr(tr.current_builder().read(owner), f.__name__)(*args, **kwargs)
            if hasattr(Tracer, f.__name__):  # ``np.arange(n).reshape(2, -1)``: the program's too
                return _noted(eyes.method(f.__name__), (owner, *args), kwargs)
    if kind is functools.partial:
        return call(f.func, *f.args, *args, **{**f.keywords, **kwargs})
    method = next((vars(c)["__call__"] for c in kind.__mro__ if "__call__" in vars(c)), None)
    if type(method) is types.FunctionType and not isinstance(f, type):  # a callable object of the user's
        return _method(types.MethodType(method, f))(*args, **kwargs)
    return f(*args, **kwargs)


# --- captured arrays --------------------------------------------------------------------------------
# An array the traced code reads from its scope (a global, a closure's, ``self.W``, ``params["W"]``) is
# the program's constant, read at every call. Given to a NumPy or SciPy function pullback implements
# (``np.exp(W)``, ``np.linalg.inv(S)``, ``W.sum()``), it is traced as that constant, so the work is
# the program's and is re-run at every call, as eager NumPy would; it is never computed once while
# tracing and kept; nor is arithmetic on them (``W * 2``, converted as ``operator.mul(W, 2)``). Work on
# integer and boolean arrays alone (indices and masks, which pullback's indexing takes as constants:
# ``np.take(x, idx, mode="wrap")``) is NumPy's, when tracing.


def _converted(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` converted; the arrays it captures noted."""
    new = convert.converted(fn)
    if new is not fn:
        _note_scope(fn, (fn,))
    elif convert.CALL in fn.__code__.co_freevars:  # defined by converted code: a body it hands to pullback
        _note_scope(fn, (fn,), inner=True)
    return new


def _note_scope(scope, owners: tuple, inner: bool = False) -> None:
    """Note the arrays ``scope`` (a function, or a bound method for its ``self.W``) reads from its scope,
    once per trace for the objects ``owners`` (a closure's cells differ from another's of the same code,
    so the function itself, not its code, is the key; the table keeps them alive, keeping ids valid).
    ``inner``: a function the traced code defined, whose scope holds the arrays that code made too: those
    stay the trace's own (recreated, or written as buffers), the others are the user's."""
    builder = tr.current_builder()
    key = tuple(map(id, owners))
    if key in builder.scopes:
        return
    builder.scopes[key] = owners
    for found, (name, value) in tr.scope_arrays(scope).items():
        if inner and any(_trace_made(b, found, value) for b in tr._state.stack):
            continue
        builder.captured.setdefault(found, value)
        builder.const_names.setdefault(found, name)


def _trace_made(builder: tr.Builder, key: int, value: np.ndarray) -> bool:
    """Whether ``builder``'s trace made ``value`` (``np.zeros`` and friends, a recipe it notes, a buffer)."""
    made, eye, buffer = builder.made.get(key), builder.eyes.get(key), builder.buffers.get(key)
    return (made is not None and made[0]() is value or eye is not None and eye[0] is value
            or buffer is not None and buffer[0] is value)


def _is_captured(x, captured: dict | None = None) -> bool:
    """A captured array, or a view of one (``W[:2]``, ``W.T``: its memory is the captured array's)."""
    captured = tr.current_builder().captured if captured is None else captured
    while x is not None:
        if captured.get(id(x)) is x:
            return True
        x = x.base if type(x) is np.ndarray else None
    return False


def _read_captured(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    captured = tr.current_builder().captured
    if not captured:
        return args, kwargs

    def read(x):
        if type(x) is np.ndarray:
            return tr.current_builder().read(x) if x.dtype.kind in "fc" and _is_captured(x, captured) else x
        if type(x) in _SEQUENCES and any(type(e) is np.ndarray for e in x):
            return type(x)(map(read, x))
        return x

    return tuple(map(read, args)), {k: read(v) for k, v in kwargs.items()}


def index(obj, key):
    """What converted code reads for ``obj[key]``: ``np.r_[...]`` and ``np.c_[...]`` of tracers, a
    captured array's elements as the program's (``W[[2, 1, 0]]``, ``W[:, [1, 0]]``), an array filled
    with traced values as their tracer, any NumPy array at traced positions (``c[k]``, ``C[:, k]``: NumPy
    would ask the tracer for an integer) as a gather from a constant, and its slice at a traced start as
    the program's window of it (``X[it * b:(it + 1) * b]``)."""
    stack = getattr(tr._state, "stack", None)
    if stack:  # (one subscript's equations told from the next's, as ``call`` does: ``for t: x = x[perm]``)
        stack[-1].calls += 1
    if type(obj) is np.ndarray and _tracing():
        traced = tr.traced_buffer(obj)
        if traced is not None:
            return traced[key]
        if _holds_tracer(key if type(key) is tuple else (key,)) or _traced_slice(key):
            return api.getitem(obj if not _is_captured(obj) else tr.current_builder().read(obj), key)
    if type(obj) is np.ndarray and obj.dtype.kind in "fc" and _tracing() and _is_captured(obj) and _advanced(key):
        return tr.current_builder().read(obj)[key]
    if type(obj) is np.ndarray and _tracing() and _holds_tracer(key if type(key) is tuple else (key,)):
        return api.getitem(obj, key)
    if (obj is np.r_ or obj is np.c_) and _tracing() and _holds_tracer(key if isinstance(key, tuple) else (key,)):
        items = key if isinstance(key, tuple) else (key,)
        columns = obj is np.c_
        pieces = [_concat_item(item, columns) for item in items]
        return api.concatenate(pieces, axis=-1 if columns else 0)
    out = obj[key]
    if stack and type(out) is np.ndarray and type(obj) is np.ndarray:  # (``np.arange(n)[::-1]``: the program's too)
        eyes.record_derived(out, operator.getitem, (obj, key))
    return out


# --- arrays made in the traced function and filled by index assignment ---------------------------------
# ``traj = np.zeros((T, 2))`` then ``traj[t] = y`` in a Python loop: the NumPy array cannot hold a traced
# value, so the first index assignment of one (or at a traced position) makes the array a traced value of
# its own (its values then: ``np.zeros``, printed at its line, or a constant), updated by that assignment
# and every later one. The trace keeps the array's tracer (``Builder.buffers``); converted code reads it
# wherever the array is named (``load``), called with (``call``), indexed (``index``) or an operand
# (``Builder.atom``), so every name bound to the array sees the updates, as NumPy's in-place writes. The
# array itself is never written: only arrays the function made qualify, not those it reads from its scope.

_MAKERS = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "arange", "linspace")


def _maker_handler(func: Callable, made: Callable) -> Callable:
    """``np.zeros`` and friends (``made`` calls them) note the NumPy arrays they make and where, for the
    program to make them again at that line if they are filled with traced values. ``np.empty`` gives
    zeros: its values are any, and zeros print as ``np.zeros``."""
    empty = func.__name__.startswith("empty")

    def call(*args, **kwargs):
        out = made(*args, **kwargs)
        if type(out) is np.ndarray:
            if empty and out.dtype.kind in "biufc":
                out.fill(0)
            builder = tr.current_builder()
            builder.made[id(out)] = (weakref.ref(out), builder.location())
        return out

    return call


def _buffers() -> bool:
    return any(b.buffers for b in tr._state.stack)


def _read_buffers(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def read(x):
        if type(x) is np.ndarray:
            traced = tr.traced_buffer(x)
            return x if traced is None else traced
        if type(x) in _SEQUENCES and any(type(e) is np.ndarray for e in x):
            return type(x)(map(read, x))
        return x

    return tuple(map(read, args)), {k: read(v) for k, v in kwargs.items()}


def load(x):
    """What converted code reads for a name: the tracer of an array filled with traced values, else the
    value itself."""
    if type(x) is np.ndarray and _tracing():
        traced = tr.traced_buffer(x)
        if traced is not None:
            return traced
    return x


def setitem(obj, key, value, inplace: Callable | None = None) -> None:
    """What converted code runs for ``obj[key] = value`` (``obj[key] op= value``: ``inplace`` is
    ``operator.iadd``, ...): a NumPy array the trace made, given a traced value or at a traced position,
    becomes a traced value (see above)."""
    if type(obj) is np.ndarray and _tracing():
        traced = tr.traced_buffer(obj)
        if traced is None and (_holds_tracer(value) or _holds_tracer(key if type(key) is tuple else (key,))):
            traced = _buffer(obj)
        if traced is not None:
            obj = traced
    if inplace is not None:
        value = inplace(index(obj, key), value)
    if type(obj) is Tracer and _is_traced_sequence(value):
        value = array(value)
    obj[key] = value


def _buffer(a: np.ndarray) -> Tracer:
    """The tracer ``a`` becomes when it is first given a traced value: ``np.full`` of its value where
    all its elements are one (printed as ``np.zeros((T, 2))`` at the line that made it), else a constant."""
    if any(_is_captured(a, b.captured) for b in tr._state.stack):
        raise TracingError(located(
            "assigning a traced value into an array the function reads from its scope would change that array, "
            "which pullback never does: assign into a copy made in the function (a = a.copy())"))
    eyes.forget(a)  # (a recipe of it, ``np.zeros(6).reshape(2, 3)``, holds its base: void once written)
    root = a if a.base is None else a.base
    # a view of an array nothing else holds (``np.zeros(6).reshape(2, 3)``) is as good as its own array: the
    # base's references are then the view's, this name's and getrefcount's own
    if root is not a and (type(root) is not np.ndarray or sys.getrefcount(root) > 3 or _is_captured(root)):
        raise TracingError(located(
            "assigning a traced value into a view (a slice, reshape, transpose, ...) of a NumPy array: NumPy "
            "would change the base array too, which pullback does not track; assign into the base array"))
    builder = tr.current_builder()
    if any(_made_by(b, a) or _made_by(b, root) for b in tr._state.stack[:-1]):
        raise TracingError(located(
            "assigning a traced value into an array made outside a pb.scan, fori_loop, while_loop or cond body "
            "(or a nested transform) from inside it: the body cannot change what is outside it; return the value "
            "instead"))
    made = _made_by(builder, a) or _made_by(builder, root)
    flat = a.reshape(-1)
    if a.dtype.kind in "biufc" and (a.size == 0 or bool((flat == flat[0]).all())):
        saved = builder.source
        if made is not None and made[1] is not None:
            builder.source = made[1]
        try:
            traced = api.full_like(a, flat[0].item() if a.size else 0)
        finally:
            builder.source = saved
    else:
        traced = builder.read(a.copy())  # the values it holds now: a copy, as later writes change only the tracer
    traced = Tracer(traced.ssa, builder)
    builder.buffers[id(a)] = (a, traced)
    return traced


def _made_by(builder: tr.Builder, a: np.ndarray) -> tuple | None:
    """``(a weak reference to a, the line)`` where the trace of ``builder`` made ``a`` by ``np.zeros`` and
    friends, if it did."""
    found = builder.made.get(id(a))
    return found if found is not None and found[0]() is a else None


def _traced_slice(key) -> bool:
    """A slice at a traced start (``X[it * b:(it + 1) * b]``): the program's window of the array."""
    return any(type(k) is slice and (type(k.start) is Tracer or type(k.stop) is Tracer)
               for k in (key if type(key) is tuple else (key,)))


def _advanced(key) -> bool:
    """NumPy's advanced indexing (arrays or lists in the key): it copies, where basic indexing makes a
    view that sees the array's changes or a number for Python's own use."""
    return any(isinstance(k, np.ndarray | list | Tracer) for k in (key if type(key) is tuple else (key,)))


def _user_call(fn: Callable, args, kwargs: dict) -> object:
    """A trace calls the user's function: converted, so that its calls reach ``call``."""
    _build_table()
    return call(fn, *args, **kwargs)


convert.install(call, index, setitem, load, control_flow)
tr.CALL_USER = _user_call


@api.implements(np.result_type)
def result_type(*arrays_and_dtypes):
    """NumPy's result dtype, with tracers standing for arrays of their dtype (a tracer of a
    Python scalar argument stays weak, as the scalar would be)."""
    reps = [api._WEAK_REP[x.dtype.kind] if type(x) is Tracer and x.weak else x.dtype if type(x) is Tracer else x
            for x in arrays_and_dtypes]
    return np.result_type(*reps)
