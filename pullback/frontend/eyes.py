"""Arrays made while tracing: ``np.eye``/``np.identity`` called by the traced code (or pullback's
own compositions, through ``eye``), and ``np.zeros``/``ones``/``full``/``arange`` of shapes alone,
make arrays the program recreates (printed ``np.eye(n)``, ``np.arange(n)``) instead of reading them
as constants.

Only arrays made during the trace and unchanged since qualify: an identity-valued array the function
reads from its scope is a constant like any other, read at every call. The tracer reaches this module
through its hooks (``tracer.ARRAY_OPERAND``, ``tracer.TRACE_END``), installed when it is imported.
"""

from __future__ import annotations

import sys

import numpy as np

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
        if found is not None and found[0] is x and found[1] != "made":  # (``made_var``'s arrays share the table)
            k = found[1]
            same = x.ndim == 2 and np.array_equal(x, np.eye(*x.shape, k=k, dtype=x.dtype))
            return k if same else None
    return None


def operand(builder: Builder, value) -> Atom:
    """An array the traced code uses: an identity made during the trace becomes an ``eye`` equation
    (``tracer.ARRAY_OPERAND``), an array made from shapes alone the call that makes it, any other a
    constant."""
    k = made_eye(value)
    if k is not None:
        return eye_var(builder, value, k)
    made = made_var(builder, value)
    return builder.const(value) if made is None else made


def made_var(builder: Builder, x) -> Var | None:
    """An array this trace's code made from shapes alone (``np.zeros(n)``, ``np.ones((n, m))``,
    ``np.full``, ``np.arange(n)``: see ``frontend.construct``) and left as made: the program makes
    it again at that line (``np.ones(3)``, ``np.arange(5)``) rather than taking it as a keyword
    constant ``c``. One the user keeps past the trace is theirs: a constant (``keep_eyes``)."""
    found = builder.made.get(id(x)) if type(x) is np.ndarray else None
    if found is None or found[0]() is not x or x.dtype.kind not in "biuf" or not x.size:
        return None
    key = ("made", id(x))
    if key in builder.consts:
        return builder.consts[key][0]
    flat = x.reshape(-1)
    saved, builder.source = builder.source, found[1] or builder.source
    try:
        if bool((flat == flat[0]).all()):
            var = Var(ArrayType.of(x), "")
            value = Literal.of(flat[0].item(), x.dtype)
            builder.eqns.append(Eqn(st.broadcast_in_dim_p, (value,), (var,),
                                    Params({"shape": x.shape, "broadcast_dimensions": ()}), builder.location()))
        elif x.ndim == 1 and np.array_equal(x, np.arange(x.size, dtype=x.dtype)):
            var = Var(ArrayType.of(x), "")
            builder.eqns.append(Eqn(st.iota_p, (), (var,), Params({"dtype": x.dtype, "shape": x.shape,
                                                                      "dimension": 0}), builder.location()))
        else:
            return None
    finally:
        builder.source = saved
    builder.consts[key] = (var, None)
    builder.eyes[id(x)] = (x, "made")  # kept past the trace: a constant after all (keep_eyes)
    return var


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
    says who holds it: the builder's table, this loop and ``getrefcount`` itself, or someone else too.)"""
    for value, k in list(builder.eyes.values()):
        key = ("made", id(value)) if k == "made" else ("eye", id(value), k)
        found = builder.consts.get(key)
        if found is None or sys.getrefcount(value) <= 3:
            continue
        var = found[0]
        del builder.consts[key]
        builder.eqns = [e for e in builder.eqns if not (e.outputs and e.outputs[0] is var)]
        builder.consts[id(value)] = (var, value)


tracer.ARRAY_OPERAND = operand
tracer.TRACE_END = keep_eyes
