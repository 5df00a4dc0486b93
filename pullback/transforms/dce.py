"""Dead-code elimination: drop equations (and constants) no output depends on.
All primitives are pure, so liveness is the whole story."""

from __future__ import annotations

from pullback.ir.core import Program, Var


def dce(program: Program) -> Program:
    live = {id(a) for a in program.outputs if isinstance(a, Var)}
    kept = []
    for eqn in reversed(program.eqns):
        if any(id(v) in live for v in eqn.outputs):
            kept.append(eqn)
            live.update(id(a) for a in eqn.inputs if isinstance(a, Var))
    consts = [(v, c) for v, c in zip(program.constvars, program.constvals) if id(v) in live]
    return Program(program.inputs, tuple(reversed(kept)), program.outputs,
                   tuple(v for v, _ in consts), tuple(c for _, c in consts), program.name)
