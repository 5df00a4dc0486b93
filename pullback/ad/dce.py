"""Dead-code elimination: drop equations (and constants) no output depends on. Liveness is the
whole story but for effects (a random draw consumes its generator's stream even when its result is
unused): an effectful equation always stays."""

from __future__ import annotations

from collections.abc import Callable

from pullback.ir.core import Eqn, Primitive, Program, Var, effectful

# Equations that can drop some of their outputs (a scan: unused stacked results and carries):
# rule(eqn, which outputs are used) -> the pruned equation (None: nothing is needed).
dce_rules: dict[Primitive, Callable[[Eqn, list[bool]], Eqn | None]] = {}


def dce(program: Program) -> Program:
    """``program`` itself when every equation and constant is live."""
    live = {id(a) for a in program.outputs if isinstance(a, Var)}
    kept = []
    changed = False
    for eqn in reversed(program.eqns):
        outs = eqn.outputs
        if len(outs) == 1:  # most equations: one lookup
            used = [id(outs[0]) in live]
        else:
            used = [id(v) in live for v in outs]
        if not any(used) and not effectful(eqn):
            changed = True
            continue
        rule = dce_rules.get(eqn.prim)
        if rule is not None:
            pruned = rule(eqn, used)
            changed = changed or pruned is not eqn
            if pruned is None:
                if not effectful(eqn):
                    continue
                pruned = eqn  # nothing read, but it acts: kept whole
            eqn = pruned
        kept.append(eqn)
        live.update(map(id, eqn.inputs))  # literals' ids too: harmless, no var has them
    if not changed and all(id(v) in live for v in program.constvars):
        return program
    consts = [(v, c) for v, c in zip(program.constvars, program.constvals) if id(v) in live]
    return Program(program.inputs, tuple(reversed(kept)), program.outputs,
                   tuple(v for v, _ in consts), tuple(c for _, c in consts), program.name)
