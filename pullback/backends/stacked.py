"""``np.stack`` as a person writes it, made while printing.

The IR has no stack: ``np.stack``, ``np.array`` of scalars, and ``np.hstack``/``np.vstack`` of 0-d and
1-d pieces trace as a reshape of each piece that gives it a unit axis, and a ``concatenate`` along that
axis (two primitives whose rules already exist: the derivative of a stack is the stack of the
derivatives, its transpose slices, and both come from those rules). A concatenation whose operands are
all such reshapes prints as the stack of the reshapes' operands, and a reshape nothing else reads is
not printed::

    reshaped = a.reshape(1)                               stacked = np.stack((a, b))
    reshaped_1 = b.reshape(1)                    ->
    concat = np.concatenate((reshaped, reshaped_1), axis=0)

The same holds on the cotangent side, where a transposed slice of a stacked value gives such a
concatenation (``u_bar = np.stack((u_0_bar, u_1_bar))``), and along any axis (``axis=k``).
"""

from __future__ import annotations

from collections import Counter

from pullback.ir.core import Eqn, Params, Primitive, Program, Var
from pullback.primitives import structural as st

# ``np.stack(operands, axis)``: a concatenation of unit-axis reshapes, made while printing only (``stacks``)
stack_p = Primitive("stack", registered=False)


def stacks(program: Program) -> Program:
    """``program`` with each concatenation of unit-axis reshapes a ``stack`` of their operands, and the
    reshapes that nothing else reads dropped (see the module docstring)."""
    concats = [e for e in program.eqns if e.prim is st.concatenate_p and len(e.inputs) > 1]
    if not concats:
        return program
    made = {id(e.outputs[0]): e for e in program.eqns if e.prim is st.reshape_p}
    found: dict[int, Eqn] = {}  # id(concatenation) -> its stack
    for e in concats:
        axis = e.params["dimension"]
        pieces = [made.get(id(a)) if isinstance(a, Var) else None for a in e.inputs]
        if all(d is not None and _unit_axis(d, axis) for d in pieces):
            found[id(e)] = Eqn(stack_p, tuple(d.inputs[0] for d in pieces), e.outputs, Params({"axis": axis}),
                               e.source)
    if not found:
        return program
    readers = Counter(id(a) for e in program.eqns if id(e) not in found for a in e.inputs if isinstance(a, Var))
    readers.update(id(a) for a in program.outputs if isinstance(a, Var))
    pieces = {id(a) for e in concats if id(e) in found for a in e.inputs}
    eqns = [found.get(id(e), e) for e in program.eqns  # less the reshapes that stacks alone read
            if not (e.prim is st.reshape_p and id(e.outputs[0]) in pieces and not readers[id(e.outputs[0])])]
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def _unit_axis(d: Eqn, axis: int) -> bool:
    """Whether reshape ``d`` only gives its operand a unit axis at ``axis``."""
    src, out = d.inputs[0], d.outputs[0].shape
    return isinstance(src, Var) and len(out) == src.type.ndim + 1 and out[axis] == 1 and \
        out[:axis] + out[axis + 1:] == src.type.shape
