"""Collect the scalings of a batched array into one vector before applying them.

A batched JVP applies each elementwise rule to the whole batch of tangents: the logistic
Hessian's batch of tangents ``T`` (n x d) goes through ``T * s``, ``T - T * s``, ``(...) * s``,
three passes over n x d where the hand-written ``(s * (1 - s))[:, None] * X`` makes one. The
rewrites below move the arithmetic onto the small operands of broadcasts (Laue's observation
that derivative factors should be multiplied in order of increasing size)::

    op(bcast(u), bcast(v))       ->  bcast(op(u, v))          (same broadcast; also a scalar literal)
    x - x * bcast(u)             ->  x * (1 - bcast(u))       (likewise x + x * bcast(u))
    x * bcast(u) - x * bcast(v)  ->  x * bcast(u - v)         (likewise +)
    (x * bcast(u)) * bcast(v)    ->  x * bcast(u * v)

Before::

    m: f64[3,5] = mul t b              (b = bcast(s))
    d: f64[3,5] = sub t m
    h: f64[3,5] = mul d b

After::

    o: f64[5] = sub 1.0 s
    w: f64[5] = mul o s
    c: f64[3,5] = broadcast_in_dim w
    h: f64[3,5] = mul t c
"""

from __future__ import annotations

from pullback.ad.dce import dce
from pullback.ir.core import Eqn, Literal, Program, Var
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st

_ARITHMETIC = (ew.add_p, ew.sub_p, ew.mul_p, ew.div_p)


def collect_scalings(program: Program) -> Program:
    for _ in range(8):
        new = dce(_step(program))
        if len(new.eqns) == len(program.eqns) and all(a is b for a, b in zip(new.eqns, program.eqns)):
            return new
        program = new
    return program


def _step(program: Program) -> Program:
    defs: dict[int, Eqn] = {}
    eqns: list[Eqn] = []
    changed = False
    for eqn in program.eqns:
        new = None if changed else _rewrite(eqn, defs)  # one rewrite per pass keeps the bookkeeping simple
        for e in new or [eqn]:
            eqns.append(e)
            defs[id(e.outputs[0])] = e
        changed = changed or new is not None
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def _broadcast(a, defs) -> Eqn | None:
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is not None and d.prim is st.broadcast_in_dim_p and isinstance(d.inputs[0], Var):
        return d
    return None


def _product(a, defs) -> tuple[object, Eqn] | None:
    """``a = x * bcast(u)`` (either order): x and the broadcast's equation."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is None or d.prim is not ew.mul_p:
        return None
    for k in (0, 1):
        b = _broadcast(d.inputs[k], defs)
        if b is not None and d.inputs[1 - k].type == a.type:
            return d.inputs[1 - k], b
    return None


def _same_broadcast(b1: Eqn, b2: Eqn) -> bool:
    return b1.params == b2.params and b1.inputs[0].type == b2.inputs[0].type


def _small(prim, ins, like: Eqn) -> list[Eqn]:
    """``prim`` on the broadcasts' operands, then broadcast like ``like``: [the op, the broadcast]."""
    u = like.inputs[0]
    w = Var(u.type)
    return [Eqn(prim, ins, (w,)), Eqn(st.broadcast_in_dim_p, (w,), (Var(like.outputs[0].type),), like.params)]


def _rewrite(eqn: Eqn, defs: dict[int, Eqn]) -> list[Eqn] | None:
    if eqn.prim not in _ARITHMETIC or eqn.params:
        return None
    out = eqn.outputs[0]
    x, y = eqn.inputs
    bx, by = _broadcast(x, defs), _broadcast(y, defs)
    # op(bcast(u), bcast(v)) and op(literal, bcast(v)): on the small operands
    if (bx is not None or isinstance(x, Literal)) and (by is not None or isinstance(y, Literal)) \
            and (bx is not None or by is not None):
        like = bx if bx is not None else by
        if (bx is None or by is None or _same_broadcast(bx, by)) and like.outputs[0].type == out.type:
            w = Var(like.inputs[0].type)
            ins = (x if bx is None else bx.inputs[0], y if by is None else by.inputs[0])
            return [Eqn(eqn.prim, ins, (w,), source=eqn.source),
                    Eqn(st.broadcast_in_dim_p, (w,), (out,), like.params, eqn.source)]
    # x * bcast(u) -/+ x * bcast(v)  ->  x * bcast(u -/+ v)
    if eqn.prim in (ew.sub_p, ew.add_p):
        fx, fy = _product(x, defs), _product(y, defs)
        if fx is not None and fy is not None and fx[0] is fy[0] and _same_broadcast(fx[1], fy[1]):
            small = _small(eqn.prim, (fx[1].inputs[0], fy[1].inputs[0]), fx[1])
            return [*small, Eqn(ew.mul_p, (fx[0], small[-1].outputs[0]), (out,), source=eqn.source)]
    # x -/+ x * bcast(u)  ->  x * (1 -/+ bcast(u))
    if eqn.prim in (ew.sub_p, ew.add_p):
        found = _product(y, defs)
        if found is not None and found[0] is x:
            b = found[1].outputs[0]
            factor = Var(b.type)
            return [Eqn(eqn.prim, (Literal.of(1, b.dtype), b), (factor,), source=eqn.source),
                    Eqn(ew.mul_p, (x, factor), (out,), source=eqn.source)]
    # (x * bcast(u)) * bcast(v)  ->  x * bcast(u * v)
    if eqn.prim is ew.mul_p:
        for first, second in ((x, by), (y, bx)):
            found = _product(first, defs)
            if found is not None and second is not None and _same_broadcast(found[1], second) \
                    and found[0].type == out.type:
                small = _small(ew.mul_p, (found[1].inputs[0], second.inputs[0]), second)
                return [*small, Eqn(ew.mul_p, (found[0], small[-1].outputs[0]), (out,), source=eqn.source)]
    return None
