"""One inverse per LU factorisation: ``inv(A)`` beside ``slogdet(A)`` or ``det(A)`` computes A^{-1}
once, where each call's rule asks for it on its own.

``inv`` prints getri of A's factors, checked (``getri_at``: it raises on a singular A, as NumPy's
``inv``); the derivative of ``log|det A|`` (and of ``det A``) is A^{-T}, which its rule computes with
an unchecked ``getri`` of the same factors. They are one value, so the unchecked one is replaced by
the checked one's result. When the checked one comes later, it moves up to the first one's place,
unless an equation that may raise or has an effect lies between them (the errors keep their order).

Before::

    X = getri_at A lu piv info          # inv(A)
    ...
    Y = getri lu piv                    # from slogdet's rule
    A_bar = transpose Y ...

After::

    X = getri_at A lu piv info
    ...
    A_bar = transpose X ...
"""

from __future__ import annotations

from pullback.ad.substitute import substitute
from pullback.ir.core import WITH_BODIES, Eqn, Program, Var, effectful
from pullback.opt.census import primitives
from pullback.primitives.linalg import factor_solves as fa


def _raises(e: Eqn) -> bool:
    return e.prim in WITH_BODIES or effectful(e) or bool(e.params.get("check", False)) or e.prim in (
        fa.gesv_p, fa.getri_at_p)


def shared_inverses(program: Program) -> Program:
    """``program`` with each unchecked ``getri`` of factors that a checked ``getri_at`` inverts
    replaced by the latter's result; ``program`` itself when there is none."""
    prims = set(primitives(program))
    if fa.getri_p not in prims or fa.getri_at_p not in prims:
        return program
    checked: dict[tuple[int, int], int] = {}  # (lu, piv) -> index of its getri_at
    for i, e in enumerate(program.eqns):
        if e.prim is fa.getri_at_p:
            checked.setdefault((id(e.inputs[1]), id(e.inputs[2])), i)
    eqns: list[Eqn | None] = list(program.eqns)
    replace: dict[int, Var] = {}
    for i, e in enumerate(program.eqns):
        if e.prim is not fa.getri_p or eqns[i] is None:
            continue
        j = checked.get((id(e.inputs[0]), id(e.inputs[1])))
        if j is None:
            continue
        inverse = program.eqns[j]
        if j > i:  # the checked inverse moves up here, if no error or effect lies between
            if any(x is not None and _raises(x) for x in eqns[i + 1:j]):
                continue
            eqns[i], eqns[j] = inverse, None
            checked[(id(e.inputs[0]), id(e.inputs[1]))] = i
        else:
            eqns[i] = None
        replace[id(e.outputs[0])] = inverse.outputs[0]
    if not replace:
        return program
    out = Program(program.inputs, tuple(e for e in eqns if e is not None), program.outputs, program.constvars,
                  program.constvals, program.name)
    return substitute(out, replace)
