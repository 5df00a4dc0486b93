"""Replace uses of vars by other atoms throughout a program."""

from __future__ import annotations

from pullback.ir.core import Atom, Eqn, Program, Var


def substitute(program: Program, replace: dict[int, Atom]) -> Program:
    """Uses of ``v`` become ``replace[id(v)]`` (followed transitively); definitions stay."""
    if not replace:
        return program

    def sub(a):
        while isinstance(a, Var) and id(a) in replace:
            a = replace[id(a)]
        return a

    def eqn(e: Eqn) -> Eqn:  # the very equation where nothing changes: passes compare programs by identity
        if replace.keys().isdisjoint(map(id, e.inputs)):
            return e
        ins = tuple(map(sub, e.inputs))
        return e if all(a is b for a, b in zip(ins, e.inputs)) else Eqn(e.prim, ins, e.outputs, e.params, e.source)

    eqns = tuple(map(eqn, program.eqns))
    return Program(program.inputs, eqns, tuple(map(sub, program.outputs)), program.constvars, program.constvals,
                   program.name)
