"""Readers before the overwriter: ``potri`` may write A^{-1} into the Cholesky factor's buffer (as the
expert's code does) only if it is the factor's last reader. A reverse-mode program often asks for
another O(n^2) use of the factor (a triangular solve of a vector) after the inverse, because the
cotangents arrive in the reverse order of the user's calls; such a reader, whose operands are all ready
before ``potri``, is moved before it, so that the memory plan can reuse the buffer."""

from __future__ import annotations

from pullback.ir.core import WITH_BODIES, Eqn, Program, Var, effectful
from pullback.primitives.linalg import factorizations as la

OVERWRITERS = frozenset({la.potri_p})


def readers_first(program: Program) -> Program:
    """``program`` with the readers described above moved; ``program`` itself when none is."""
    if not any(e.prim in OVERWRITERS for e in program.eqns):
        return program
    eqns = list(program.eqns)
    moved = False
    i = 0
    while i < len(eqns):
        eqn = eqns[i]
        if eqn.prim in OVERWRITERS and isinstance(eqn.inputs[0], Var):
            before = {id(v) for e in eqns[:i] for v in e.outputs} | {id(v) for v in program.inputs} | {
                id(v) for v in program.constvars}
            factor = eqn.inputs[0]
            hoisted = [e for e in eqns[i + 1:] if factor in e.inputs and _movable(e) and all(
                not isinstance(a, Var) or id(a) in before for a in e.inputs)]
            if hoisted:
                ids = {id(e) for e in hoisted}
                eqns = eqns[:i] + hoisted + [eqn] + [e for e in eqns[i + 1:] if id(e) not in ids]
                i += len(hoisted)
                moved = True
        i += 1
    if not moved:
        return program
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def _movable(e: Eqn) -> bool:
    """Pure, no sub-program, raising nothing of its own (a checked solve keeps its place among the errors)."""
    return e.prim not in WITH_BODIES and not effectful(e) and not e.params.get("check", False)
