"""Arrays made while tracing: ``np.eye``/``np.identity`` called by the traced code (or pullback's
own compositions, through ``eye``), arrays of shapes alone (``np.zeros``/``ones``/``full``, ranges of
``np.arange``/``np.linspace``, any array of one value the trace made: ``np.roll`` of zeros), scalar
arithmetic on those (``JITTER * np.eye(u)``), NumPy's functions, ufuncs and array methods of those alone
(``np.meshgrid(np.arange(m), np.arange(n))``, ``np.sqrt``, ``.reshape``: ``record_derived``) and NumPy scalars
(``np.int64(0)``) make arrays the program recreates (printed ``np.eye(n)``, ``np.arange(n) + 1``, ``1e-06 *
eye``, the same call; a fill, which simplification folds into the literal where an operation reads it)
instead of reading them as keyword constants ``c``.

Only arrays made during the trace and unchanged since qualify: an array the function reads from its
scope is a constant like any other, read at every call, and so is one the user keeps past the trace.
The tracer reaches this module through its hooks (``tracer.ARRAY_OPERAND``, ``tracer.TRACE_END``),
installed when it is imported."""

from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Callable

import numpy as np

from pullback.errors import PullbackError
from pullback.ir import tracer
from pullback.ir.core import Atom, Eqn, Literal, Params, Var
from pullback.ir.tracer import Builder
from pullback.ir.types import ArrayType
from pullback.primitives import structural as st


def eye(n: int, m: int | None = None, k: int = 0, dtype=np.float64) -> np.ndarray:
    """``np.eye`` for pullback's own compositions: while this thread traces, the program makes the
    identity (an ``eye`` equation) rather than reading it as a constant."""
    out = np.eye(n, m, k=k, dtype=dtype)
    record_eye(out, k)
    return out


def record_eye(value, k: int = 0) -> None:
    """Note that ``np.eye``/``np.identity`` made ``value`` while this thread traces (called from the
    user's traced code: frontend.construct)."""
    stack = tracer.running_builders()
    if stack and isinstance(value, np.ndarray) and isinstance(k, int | np.integer):
        stack[-1].eyes[id(value)] = (value, int(k))


def made_eye(x) -> int | None:
    """The diagonal ``k`` of an array made by ``np.eye``/``np.identity`` during a trace on this thread
    and unchanged since; None for any other array. Only such arrays become ``eye`` equations: an
    identity-valued array the function reads from its scope is a constant like any other, read at
    every call (``self.W = np.eye(3)`` later changed in place must not be frozen)."""
    for builder in tracer.running_builders():
        found = builder.eyes.get(id(x))
        if found is not None and found[0] is x and type(found[1]) is int:  # (the table holds other arrays too)
            k = found[1]
            same = x.ndim == 2 and np.array_equal(x, np.eye(*x.shape, k=k, dtype=x.dtype))
            return k if same else None
    return None


def operand(builder: Builder, value) -> Atom:
    """An array the traced code uses: an identity made during the trace becomes an ``eye`` equation
    (``tracer.ARRAY_OPERAND``), an array made from shapes alone the call that makes it, a NumPy scalar a
    literal, any other a constant. An array read from scope is always a constant, read at every call."""
    known = builder.consts.get(id(value))
    if known is not None and known[1] is value or _captured(value):
        return builder.const(value)
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":  # ``np.bool_(False)``: a literal's fill
        # (one a NumPy function made of arrays the trace made, ``np.sum(w)``, is that call in the program:
        # the array may yet be the user's, kept past the trace and changed in place: ``keep_eyes``)
        return derived_var(builder, value) or scalar_var(builder, value)
    k = made_eye(value)
    if k is not None:
        return eye_var(builder, value, k)
    made = made_var(builder, value)
    if made is None:
        made = derived_var(builder, value)
    return builder.const(value) if made is None else made


def scalar_var(builder: Builder, value: np.generic) -> Var:
    """A NumPy scalar the traced code made (``np.int64(0)``, a tableau's ``A[2, 1]``): a fill of its
    value (``np.zeros((), dtype=np.int64)``), which simplification turns into the literal wherever an
    operation reads it (``h * 0.2``), rather than a keyword constant ``c``. (Keyed by value: NumPy's
    scalars are immutable, and their ids are soon another's.)"""
    key = ("scalar", value.dtype.str, value.tobytes())
    if key not in builder.consts:
        var = Var(ArrayType((), value.dtype), "")
        builder.eqns.append(Eqn(st.broadcast_in_dim_p, (Literal.of(value.item(), value.dtype),), (var,),
                                Params({"shape": (), "broadcast_dimensions": ()}), builder.location()))
        builder.consts[key] = (var, None)
    return builder.consts[key][0]


def _captured(x) -> bool:
    """An array some running trace's code read from its scope (a traced function's closure's too), or a
    view of one."""
    builders = tracer.running_builders()
    while type(x) is np.ndarray:
        if any(b.captured.get(id(x)) is x or id(x) in b.const_names for b in builders):
            return True
        x = x.base
    return False


def made_var(builder: Builder, x) -> Var | None:
    """An array made from shapes alone and left as made: the program makes it again where it was made
    (``np.ones(3)``, ``np.arange(5)``, ``np.arange(1, 6)``, ``np.linspace(0, 1, 5)``) rather than taking
    it as a keyword constant ``c``. Such are the arrays this trace's code made by ``np.zeros``, ``np.ones``,
    ``np.full``, ``np.arange``, ``np.linspace`` (see ``frontend.construct``), and any array of one value
    it made otherwise (``np.roll`` of zeros): its value is known at the trace, as a constant's would be.
    One the user keeps past the trace is theirs: a constant (``keep_eyes``)."""
    recipe = _made_recipe(builder, x)
    if recipe is None:
        return None
    key = ("made", id(x))
    if key in builder.consts:
        return builder.consts[key][0]
    found = builder.made.get(id(x))
    made_at = found[1] if found is not None and found[0]() is x else None  # (an id outlives its array)
    saved, builder.source = builder.source, made_at or builder.source
    try:
        if recipe[0] == "fill":
            var = Var(ArrayType.of(x), "")
            builder.eqns.append(Eqn(st.broadcast_in_dim_p, (Literal.of(recipe[1], x.dtype),), (var,),
                                    Params({"shape": x.shape, "broadcast_dimensions": ()}), builder.location()))
        elif recipe[0] == "linspace":  # NumPy's call itself: its last value is ``stop``
            var = Var(ArrayType.of(x), "")
            builder.eqns.append(Eqn(st.linspace_p, (), (var,), Params({
                "start": recipe[1], "stop": recipe[2], "num": x.size, "dtype": x.dtype}), builder.location()))
        else:  # a range: start + step * (0, 1, ..., n - 1), as NumPy's arange and linspace compute it
            _, start, step = recipe
            var = Var(ArrayType.of(x), "")
            builder.eqns.append(Eqn(st.iota_p, (), (var,), Params({"dtype": x.dtype, "shape": x.shape,
                                                                      "dimension": 0}), builder.location()))
            if step != 1 or start != 0:
                t = tracer.Tracer(var, builder)
                t = t * step if step != 1 else t
                t = t + start if start != 0 else t
                var = t.ssa
    finally:
        builder.source = saved
    builder.consts[key] = (var, None)
    builder.eyes[id(x)] = (x, "made")  # kept past the trace: a constant after all (keep_eyes)
    return var


def _made_recipe(builder: Builder, x) -> tuple | None:
    """How the program makes ``x`` again: ``("fill", value)`` for an array of one value, ``("range",
    start, step)`` for a range made by ``np.arange``/``np.linspace``, ``("linspace", start, stop)`` for a
    ``np.linspace`` that ``start + step * arange`` misses (NumPy sets the last value to ``stop``); None
    when it cannot (or need not)."""
    if type(x) is not np.ndarray or x.dtype.kind not in "biuf" or not x.size:
        return None
    found = builder.made.get(id(x))
    made = found is not None and found[0]() is x
    if not made and _captured(x):
        return None
    flat = x.reshape(-1)
    first = flat[0]  # (two elements first: a large array of many values is told apart without a pass over it)
    if first == flat[-1] and first == flat[flat.size // 2] and bool((flat == first).all()):
        return ("fill", first.item())
    if not made or x.ndim != 1:
        return None
    n = x.size
    steps = {x[1] - x[0]} if x.dtype.kind != "f" else {x[1] - x[0], (x[-1] - x[0]) / (n - 1)}
    iota = np.arange(n, dtype=x.dtype)
    for step in steps:
        start, step = x.dtype.type(x[0]), x.dtype.type(step)
        made_again = (iota * step if step != 1 else iota) + start
        if step and np.array_equal(made_again, x) and np.array_equal(np.signbit(made_again), np.signbit(x)):
            return ("range", start.item(), step.item())
    if x.dtype == np.float64:  # ``np.linspace(a, b, n)``, whose last value NumPy sets to ``b``
        start, stop = x[0].item(), x[-1].item()
        if np.isfinite(start) and np.isfinite(stop):
            made_again = np.linspace(start, stop, n)
            if np.array_equal(made_again, x) and np.array_equal(np.signbit(made_again), np.signbit(x)):
                return ("linspace", start, stop)
    return None


def record_derived(out, op, args: tuple, kwargs: dict | None = None) -> None:
    """Note that ``op`` (arithmetic in the traced code, ``JITTER * np.eye(u)``, or a NumPy function,
    ``np.meshgrid(np.arange(m), np.arange(n))``) made ``out`` (an array, or a tuple or list of arrays)
    from arrays the program can make again, scalars and shapes: ``out`` is then made again by the program
    too, the same call on them (``derived_var``), rather than read as a constant."""
    stack = tracer.running_builders()
    if not stack:
        return
    builder = stack[-1]
    kwargs = kwargs or {}
    if "out" in kwargs or not _plain(builder, (*args, *kwargs.values())):
        return
    if type(out) is np.ndarray or isinstance(out, np.generic):  # (a reduction's NumPy scalar too)
        outs: tuple = ((out, None),)
    elif type(out) in (tuple, list) and all(type(o) is np.ndarray for o in out):
        outs = tuple((o, i) for i, o in enumerate(out))
    else:
        return
    where = builder.location()
    for o, i in outs:
        known = builder.eyes.get(id(o))  # (``np.asarray(a)`` is ``a``, already known: its recipe kept)
        if o.dtype.kind in "biuf" and not (known is not None and known[0] is o):
            builder.eyes[id(o)] = (o, (op, args, kwargs, i, where))


SHAPED = tuple(getattr(np, name) for name in sorted(st.SHAPED_FUNCTIONS))  # ``np.tri`` and friends


def shaped(func: Callable) -> Callable:
    """``func`` (one of ``SHAPED``, a function of shapes and numbers alone: ``np.tri(n)``) noting the array
    it makes while tracing, which the program then makes by the same call (``derived_var``)."""
    def call(*args, **kwargs):
        out = func(*args, **kwargs)
        stack = tracer.running_builders()
        if stack and type(out) is np.ndarray and out.dtype.kind in "biuf" and _numbers((*args, *kwargs.values())):
            stack[-1].eyes[id(out)] = (out, (func, args, kwargs, None, stack[-1].location()))
        return out

    call.__name__ = func.__name__
    return call


def _numbers(args) -> bool:
    """Whether ``args`` are numbers, ``None``, dtypes and shapes only: nothing of the user's data."""
    return all(a is None or isinstance(a, int | float | np.integer | np.floating | np.dtype | type)
               or type(a) is tuple and all(isinstance(n, int | np.integer) for n in a) for a in args)


def _shaped_var(builder: Builder, x, op, args: tuple, kwargs: dict) -> Var:
    """The ``shaped`` equation making ``x`` again: ``np.tri(3)`` (``structural.shaped_p``)."""
    def plain(v):
        if isinstance(v, type | np.dtype):
            return np.dtype(v)
        return tuple(map(int, v)) if type(v) is tuple else v.item() if isinstance(v, np.generic) else v

    var = Var(ArrayType.of(x), op.__name__)
    params = {"function": op.__name__, "args": tuple(map(plain, args)),
              "kwargs": tuple((k, plain(v)) for k, v in kwargs.items()), "shape": x.shape, "dtype": x.dtype}
    builder.eqns.append(Eqn(st.shaped_p, (), (var,), Params(params), builder.location()))
    return var


def same(x):
    """``x`` itself: a copy of an array the trace made, noted as made by this (``record_derived``), is the
    program's value of the array (an index array's snapshot, ``frontend.numpy.indexing``)."""
    return x


def snapshot(builder: Builder, user: np.ndarray, value: np.ndarray) -> None:
    """``value``, the copy of an index array ``user`` that indexing keeps (``frontend.numpy.indexing``), is made
    by the program where ``user`` is (``np.arange(n)[::-1]``), or else a constant named after it (``idx``,
    ``perm_view``): a name of the user's, not ``c``."""
    name = builder.const_names.get(id(user))
    if name is None and value.dtype == user.dtype and _recreatable(builder, user) and np.array_equal(value, user):
        record_derived(value, same, (user,))
        return
    name = name or builder._origin_name(user)
    if name != "c":
        builder.const_names[id(value)] = name


def derived(x: np.generic) -> bool:
    """Whether a NumPy function made the scalar ``x`` of arrays this thread's trace made (``np.sum(w)``,
    ``record_derived``): the program computes it too, rather than taking the number, since the array may
    be the user's after all (kept past the trace, ``keep_eyes``) and changed in place before a later call."""
    for builder in tracer.running_builders():
        found = builder.eyes.get(id(x))
        if found is not None and found[0] is x:
            return True
    return False


@functools.cache
def method(name: str) -> Callable:
    """An array method as a function of the array (``np.ndarray.reshape`` that takes a tracer too), for
    ``record_derived``: ``method("reshape")(a, 2, -1)`` is ``a.reshape(2, -1)``."""
    def call(self, *args, **kwargs):
        return getattr(self, name)(*args, **kwargs)

    call.__name__ = name
    return call


def forget(x) -> None:
    """``x`` is about to be written with traced values: the call that made it (``record_derived``) no
    longer does, and its hold on the arrays it came from goes."""
    for builder in tracer.running_builders():
        found = builder.eyes.get(id(x))
        if found is not None and found[0] is x and type(found[1]) is tuple:
            del builder.eyes[id(x)]


def _plain(builder: Builder, args: tuple, arrays: list | None = None) -> bool:
    """Whether ``args`` hold only arrays this trace made (and noted) and scalars, shapes, names and
    dtypes: no user data beyond what a trace's own calls made; at least one array at the top call."""
    top = arrays is None
    arrays = [] if top else arrays
    for a in args:
        if type(a) is np.ndarray or isinstance(a, np.generic) and id(a) in builder.eyes:  # (``2 * np.sum(w)``)
            found = builder.eyes.get(id(a))
            made = builder.made.get(id(a))
            if not (found is not None and found[0] is a or made is not None and made[0]() is a):
                return False
            arrays.append(a)
        elif type(a) in (tuple, list):
            if not _plain(builder, a, arrays):
                return False
        elif not (a is None or a is Ellipsis
                  or isinstance(a, int | float | str | np.integer | np.floating | np.dtype | type | slice)):
            return False
    return bool(arrays) or not top


def _arrays(args) -> list:
    """The arrays and NumPy scalars in ``args`` and its nested tuples and lists."""
    found = []
    for a in args:
        if type(a) is np.ndarray or isinstance(a, np.generic):
            found.append(a)
        elif type(a) in (tuple, list):
            found.extend(_arrays(a))
    return found


def _call(op, args: tuple, kwargs: dict, index: int | None):
    out = op(*args, **kwargs)
    return out if index is None else out[index]


def _recipe(builder: Builder, x) -> tuple | None:
    """The call ``record_derived`` saw make ``x``, if ``x`` is unchanged since (NumPy makes it again from
    the same arguments) and each array it came from can be made by the program."""
    found = builder.eyes.get(id(x))
    if found is None or found[0] is not x or type(found[1]) is not tuple:
        return None
    op, args, kwargs, index, _ = found[1]
    if not all(_recreatable(builder, a) for a in _arrays((args, kwargs.values()))):
        return None
    with np.errstate(all="ignore"):
        again = _call(op, args, kwargs, index)
    same = (type(again) is type(x) and again.dtype == x.dtype and again.shape == x.shape
            and np.array_equal(again, x, equal_nan=True))
    return found[1] if same else None


def _recreatable(builder: Builder, x) -> bool:
    if isinstance(x, np.generic) and id(x) not in builder.eyes:
        return True  # a number (``np.float64(0.5)``), not one a NumPy function made (``np.sum(w)``)
    return (made_eye(x) is not None or _made_recipe(builder, x) is not None or _recipe(builder, x) is not None
            or ("derived", id(x)) in builder.consts)


def _traced(builder: Builder, args):
    """``args`` with each array the program's value of it (nested tuples and lists kept)."""
    out = []
    for a in args:
        if type(a) is np.ndarray or isinstance(a, np.generic) and derived(a):  # (``np.sum(w) * 0.5``)
            atom = operand(builder, a)
            if isinstance(atom, Var) and not atom.hint and (_made_recipe(builder, a) or ("",))[0] == "range":
                atom.hint = "arange"  # the user's name is the result's (``w = np.arange(n) / n``)
            a = tracer.Tracer(atom, builder)
        elif type(a) in (tuple, list):
            a = type(a)(_traced(builder, a))
        out.append(a)
    return out


def derived_var(builder: Builder, x) -> Var | None:
    """An array made by arithmetic or a NumPy function on arrays the program makes again and on scalars
    (``JITTER * np.eye(u)``, ``np.meshgrid(np.arange(m), np.arange(n))``, see ``record_derived``): the
    program makes the same call on its own values of them (``1e-06 * eye``)."""
    key = ("derived", id(x))
    if key in builder.consts:
        return builder.consts[key][0]
    recipe = _recipe(builder, x)
    if recipe is None:
        return None
    op, args, kwargs, index, where = recipe
    saved, builder.source = builder.source, where or builder.source  # at the line that made it
    try:
        if op in SHAPED:  # of numbers alone: the same call, an equation of its own
            out = tracer.Tracer(_shaped_var(builder, x, op, args, kwargs), builder)
        else:
            values = _traced(builder, list(kwargs.values()))
            out = _call(op, _traced(builder, args), dict(zip(kwargs, values)), index)
    except PullbackError:  # a call pullback does not trace (of arrays it makes): a constant, as before
        return None
    finally:
        builder.source = saved
    if not isinstance(out, tracer.Tracer) or not isinstance(out.ssa, Var) or out.ssa.type != ArrayType.of(x):
        return None
    # the user's variable holding it (``D = np.eye(n) - np.eye(n, k=1)``; an index's snapshot: the index's)
    name = builder._origin_name(args[0] if op is same else x)
    if name != "c" and (not out.ssa.hint or op in SHAPED or op is same):
        out.ssa.hint = name
    builder.consts[key] = (out.ssa, None)
    return out.ssa


def eye_var(builder: Builder, value, k: int) -> Var:
    """An ``np.eye``/``np.identity`` array made during this trace (see ``record_eye``) is
    recreated by the program (``eye`` prints as ``np.eye(n)``) instead of living on as a constant."""
    key = ("eye", id(value), k)  # one equation per array: one the user keeps becomes a constant (keep_eyes)
    if key not in builder.consts:
        var = Var(ArrayType.of(value), "eye")
        builder.eqns.append(Eqn(st.eye_p, (), (var,), Params({"dtype": value.dtype, "shape": value.shape, "k": k}),
                                builder.location()))
        builder.consts[key] = (var, None)
    return builder.consts[key][0]


def keep_eyes(builder: Builder) -> None:
    """An identity the traced code made and kept (``self.W = np.eye(3)``, still referenced when the
    trace ends) is the user's array from then on, changed in place as the user likes: a constant
    read at every call, not an ``eye`` equation (``tracer.TRACE_END``). (CPython's reference count
    says who holds it: the builder's table, this loop, ``getrefcount`` itself and the table's views of it
    (``np.arange(n).reshape(n, 1)``), or someone else too.)"""
    for value, k in list(builder.eyes.values()):
        if type(k) is tuple:  # the arithmetic that made it: its operands' references go (derived_var)
            builder.eyes[id(value)] = (value, "derived")
    views = Counter(id(v.base) for v, _ in builder.eyes.values() if v.base is not None)  # (the table's views')
    for value, k in list(builder.eyes.values()):
        key = (k, id(value)) if k in ("made", "derived") else ("eye", id(value), k)
        found = builder.consts.get(key)
        if found is None or sys.getrefcount(value) <= 3 + views[id(value)]:
            continue
        var = found[0]
        var.hint = var.hint or builder.const_names.get(id(value)) or "c"
        del builder.consts[key]
        builder.eqns = [e for e in builder.eqns if not (e.outputs and e.outputs[0] is var)]
        builder.consts[id(value)] = (var, value)


tracer.ARRAY_OPERAND = operand
tracer.TRACE_END = keep_eyes
