"""Memory order of printed arrays: which locals are Fortran-ordered.

LAPACK and BLAS read column-major (F-contiguous) matrices, and f2py silently copies any
other it is handed. A NumPy result is row-major (C), and its ``.T`` the column-major view
of the transpose; but what LAPACK returns (getrf's ``lu``, getri's inverse, orgqr's ``q``)
is column-major, and so are its ``.T``'s transposes and elementwise results of
column-major operands (NumPy keeps its operands' order). Emitters that call LAPACK/BLAS
read ``ctx.fortran`` (the positions of their operands known to be F-ordered) and pass
each matrix as the view the routine reads without a copy: ``x.T`` of a C-ordered ``x``,
``x`` itself of an F-ordered one, with the transposition or triangle flags changed to
match.

Each backend says which results of its emitters are F-ordered (``FORTRAN``: primitive ->
rule from the operands' order to the results'); a result written into an operand's
buffer (``x += y``) has that operand's order. Anything else counts as C-ordered: a wrong
guess costs what it costs today (a copy), never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable

from pullback.ir.core import Eqn, Var

# (equation, positions of its operands known to be F-ordered) -> positions of its F-ordered results
Rule = Callable[[Eqn, frozenset[int]], frozenset[int]]

NONE: frozenset[int] = frozenset()


def operands(eqn: Eqn, fortran: set[int]) -> frozenset[int]:
    """Positions of ``eqn``'s operands whose values are F-ordered (ids in ``fortran``)."""
    if not fortran:  # (most programs: no F-ordered value yet)
        return NONE
    return frozenset(k for k, a in enumerate(eqn.inputs) if isinstance(a, Var) and id(a) in fortran)


def record(eqn: Eqn, rules: dict, in_fortran: frozenset[int], in_place: int | None, fortran: set[int]) -> None:
    """Add ``eqn``'s F-ordered results to ``fortran``, once it is printed (in place into operand
    ``in_place``, or by its emitter)."""
    if in_place is not None:
        out = frozenset({0}) if in_place in in_fortran else NONE
    else:
        rule = rules.get(eqn.prim)
        out = rule(eqn, in_fortran) if rule is not None else NONE
    for k in out:
        v = eqn.outputs[k]
        if v.type.ndim == 2 and min(v.shape) > 1:  # a vector-like matrix is both C- and F-ordered
            fortran.add(id(v))


def results(*positions: int) -> Rule:
    """A rule: these results are F-ordered (LAPACK's own arrays), for single (unbatched) matrices."""
    out = frozenset(positions)
    return lambda eqn, ins: out if eqn.inputs[0].type.ndim == 2 else NONE


def flipped(eqn: Eqn, ins: frozenset[int]) -> frozenset[int]:
    """``x.T`` of a matrix: F-ordered exactly when ``x`` is C-ordered."""
    swapped = eqn.params["permutation"] == (1, 0)
    return frozenset({0}) if swapped and 0 not in ins else NONE


def elementwise(eqn: Eqn, ins: frozenset[int]) -> frozenset[int]:
    """NumPy's elementwise result takes its operands' order (``order='K'``) when all the full-size
    ones are F-ordered and the others scalars."""
    if not ins:
        return NONE
    shape = eqn.outputs[0].shape
    full = [k for k, a in enumerate(eqn.inputs) if isinstance(a, Var) and a.type.ndim]
    if full and all(k in ins and eqn.inputs[k].shape == shape for k in full):
        return frozenset({0})
    return NONE


def same_as(position: int) -> Rule:
    """The result has the order of operand ``position`` (trsm's on its right-hand side, say)."""
    return lambda eqn, ins: frozenset({0}) if position in ins else NONE
