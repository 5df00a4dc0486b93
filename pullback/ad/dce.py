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
    # the live vars themselves (a Var hashes by identity, in C): no int object per operand, as ids would
    # make, and a hit compares pointers without reading a key object, so long programs' lookups stay cheap
    live = {a for a in program.outputs if type(a) is Var}
    kept = []
    changed = False
    keep, add = kept.append, live.add
    for eqn in reversed(program.eqns):
        outs = eqn.outputs
        if len(outs) == 1 and eqn.prim not in dce_rules:  # most equations: one lookup, no rule
            if outs[0] in live or effectful(eqn):
                keep(eqn)
                for a in eqn.inputs:  # (literals hash by value, in Python: left out)
                    if type(a) is Var:
                        add(a)
            else:
                changed = True
            continue
        used = [v in live for v in outs]
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
        live.update([a for a in eqn.inputs if type(a) is Var])
    if not changed and all(v in live for v in program.constvars):
        return program
    consts = [(v, c) for v, c in zip(program.constvars, program.constvals) if v in live]
    return Program(program.inputs, tuple(reversed(kept)), program.outputs,
                   tuple(v for v, _ in consts), tuple(c for _, c in consts), program.name)
