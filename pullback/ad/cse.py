"""Common-subexpression elimination: an equation repeating an earlier one
(same primitive, same inputs, same params; the inputs of a commutative one in either order) reuses
its outputs. Effects never do: two equal draws
are two draws."""

from __future__ import annotations

from pullback.ir.core import COMMUTATIVE, EFFECTS, WITH_BODIES, Eqn, Literal, Program, Var, effectful


def _key(a):
    return ("lit", type(a.value), a.value, a.dtype) if isinstance(a, Literal) else id(a)


def _before(a, b) -> bool:
    """A fixed order of two operand keys, so that a commutative pair is keyed one way: vars (ids) by id,
    before literals; literals by their text (rare, and a dtype's repr is dear)."""
    if type(a) is int:
        return type(b) is not int or a < b
    return type(b) is not int and repr(a) < repr(b)


def cse(program: Program) -> Program:
    """``program`` itself when no equation repeats another."""
    seen: dict[tuple, Eqn] = {}
    replace: dict[int, Var] = {}
    eqns: list[Eqn] | None = None  # made at the first change: until then the kept equations are a prefix
    for i, eqn in enumerate(program.eqns):
        inputs = eqn.inputs
        if replace and not replace.keys().isdisjoint(map(id, inputs)):  # (a literal's id is never a key)
            inputs = tuple([replace.get(id(a), a) for a in inputs])
        # vars by id, counted in C; literals by value (in the equations that have one)
        keys = tuple(map(id, inputs)) if Literal not in map(type, inputs) else tuple(
            [id(a) if type(a) is Var else _key(a) for a in inputs])
        prim = eqn.prim
        if prim in COMMUTATIVE and len(keys) == 2:
            a, b = keys
            var_a, var_b = type(a) is int, type(b) is int  # (a var and anything: ordered here, as ``_before`` does)
            if (b < a if var_a and var_b else var_b) if var_a or var_b else _before(b, a):
                keys = (b, a)  # x * c and c * x are one product
        key = (prim, keys, eqn.params)
        first = None if (prim in EFFECTS or prim in WITH_BODIES and effectful(eqn)) else seen.get(key)
        if first is not None:
            for v, w in zip(eqn.outputs, first.outputs):
                replace[id(v)] = w
            if eqns is None:
                eqns = list(program.eqns[:i])
            continue
        if inputs is not eqn.inputs and inputs != eqn.inputs:
            eqn = Eqn(eqn.prim, inputs, eqn.outputs, eqn.params, eqn.source)
        seen[key] = eqn
        if eqns is not None:
            eqns.append(eqn)
    if eqns is None:  # no duplicate, so nothing replaced either
        return program
    # uses were replaced on the way (a kept equation precedes its duplicates' uses): only outputs remain
    outputs = tuple(replace.get(id(a), a) if isinstance(a, Var) else a for a in program.outputs)
    return Program(program.inputs, tuple(eqns), outputs, program.constvars, program.constvals, program.name)
