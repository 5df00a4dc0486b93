"""``np.stack`` as a person writes it, made while printing.

The IR has no stack: ``np.stack``, ``np.array`` of scalars, and ``np.hstack``/``np.vstack`` of 0-d and
1-d pieces trace as a reshape of each piece that gives it a unit axis, and a ``concatenate`` along that
axis (two primitives whose rules already exist: the derivative of a stack is the stack of the
derivatives, its transpose slices, and both come from those rules). A concatenation whose operands are
all such reshapes prints as the stack of the reshapes' operands, and a reshape nothing else reads is
not printed::

    reshaped = a.reshape(1, 3)                            stacked = np.stack((a, b))
    reshaped_1 = b.reshape(1, 3)                 ->
    concat = np.concatenate((reshaped, reshaped_1), axis=0)

(of scalars, NumPy's backend prints ``np.array((a, b))``: see its emitter). The same holds on the
cotangent side, where a transposed slice of a stacked value gives such a concatenation (``theta_bar =
np.array((a_bar, b_bar))`` for ``a, b = theta[0], theta[1]``), and along any axis (``axis=k``). An
elementwise operation of one array that alone reads such a reshape, and that the concatenation alone
reads, commutes with it: ``-x.reshape(1)`` stacks as ``-x``.
"""

from __future__ import annotations

from collections import Counter

from pullback.ir.core import Eqn, Params, Primitive, Program, Var
from pullback.ir.types import ArrayType
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st

# ``np.stack(operands, axis)``: a concatenation of unit-axis reshapes, made while printing only (``stacks``)
stack_p = Primitive("stack", registered=False)
_ELEMENTWISE = frozenset(v for v in vars(ew).values() if isinstance(v, Primitive))


def stacks(program: Program) -> Program:
    """``program`` with each concatenation of unit-axis reshapes a ``stack`` of their operands, and the
    reshapes that nothing else reads dropped (see the module docstring)."""
    concats = [e for e in program.eqns if e.prim is st.concatenate_p and len(e.inputs) > 1]
    if not concats:
        return program
    made = {id(e.outputs[0]): e for e in program.eqns if e.prim is st.reshape_p}
    if not made:
        return program
    ops = {id(e.outputs[0]): e for e in program.eqns if e.prim in _ELEMENTWISE and len(e.outputs) == 1}
    readers = Counter(id(a) for e in program.eqns for a in e.inputs if isinstance(a, Var))
    readers.update(id(a) for a in program.outputs if isinstance(a, Var))
    found: dict[int, Eqn] = {}  # id(concatenation or elementwise operation) -> what prints instead
    pieces: set[int] = set()  # the reshapes read by stacks
    for e in concats:
        axis, operands, moved, reshapes = e.params["dimension"], [], {}, []
        for a in e.inputs:
            d = made.get(id(a)) if isinstance(a, Var) else None
            if d is not None and _unit_axis(d, axis):
                operands.append(d.inputs[0])
                reshapes.append(id(a))
                continue
            op = ops.get(id(a)) if isinstance(a, Var) and readers[id(a)] == 1 else None
            d = _unit_operand(op, made, readers, axis) if op is not None else None
            if d is None:
                break
            # ``-x.reshape(1)`` read by the concatenation alone: ``-x``, stacked
            (out,) = op.outputs
            new = Var(ArrayType(d.inputs[0].type.shape, out.type.dtype), out.hint)
            moved[id(op)] = Eqn(op.prim, tuple(d.inputs[0] if b is d.outputs[0] else b for b in op.inputs), (new,),
                                op.params, op.source)
            operands.append(new)
            reshapes.append(id(d.outputs[0]))
        else:
            found[id(e)] = Eqn(stack_p, tuple(operands), e.outputs, Params({"axis": axis}), e.source)
            found.update(moved)
            pieces.update(reshapes)
    if not found:
        return program
    eqns = [found.get(id(e), e) for e in program.eqns]
    readers = Counter(id(a) for e in eqns for a in e.inputs if isinstance(a, Var))
    readers.update(id(a) for a in program.outputs if isinstance(a, Var))
    eqns = [e for e in eqns  # less the reshapes that stacks alone read
            if not (e.prim is st.reshape_p and id(e.outputs[0]) in pieces and not readers[id(e.outputs[0])])]
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def _unit_operand(op: Eqn, made: dict[int, Eqn], readers: Counter, axis: int) -> Eqn | None:
    """The unit-axis reshape at ``axis`` that elementwise ``op`` alone reads, its one array operand
    (the others literals): ``-x.reshape(1)``, ``2.0 * x.reshape(1)``, which stack as ``-x``, ``2.0 * x``."""
    arrays = [b for b in op.inputs if isinstance(b, Var)]
    if len(arrays) != 1 or readers[id(arrays[0])] != 1:
        return None
    d = made.get(id(arrays[0]))
    return d if d is not None and _unit_axis(d, axis) else None


def _unit_axis(d: Eqn, axis: int) -> bool:
    """Whether reshape ``d`` only gives its operand a unit axis at ``axis``."""
    src, out = d.inputs[0], d.outputs[0].shape
    return isinstance(src, Var) and len(out) == src.type.ndim + 1 and out[axis] == 1 and \
        out[:axis] + out[axis + 1:] == src.type.shape
