"""Common-subexpression elimination: an equation repeating an earlier one
(same primitive, same inputs, same params) reuses its outputs. Effects never do: two equal draws
are two draws."""

from __future__ import annotations

from pullback.ir.core import Eqn, Literal, Program, Var, effectful


def _key(a):
    return ("lit", type(a.value), a.value, a.dtype) if isinstance(a, Literal) else id(a)


def cse(program: Program) -> Program:
    """``program`` itself when no equation repeats another."""
    seen: dict[tuple, Eqn] = {}
    replace: dict[int, Var] = {}
    eqns: list[Eqn] | None = None  # made at the first change: until then the kept equations are a prefix
    for i, eqn in enumerate(program.eqns):
        inputs = eqn.inputs
        if replace:  # (a literal's id is never a key: no var has it)
            inputs = tuple([replace.get(id(a), a) for a in inputs])
        key = (eqn.prim, tuple([id(a) if type(a) is Var else _key(a) for a in inputs]), eqn.params)
        first = None if effectful(eqn) else seen.get(key)
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
