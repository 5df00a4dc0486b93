"""What the loops and branches share: closing a body over its constants, which of a body's values
depend on marked inputs (a fixed point over a loop's carries), its live inputs, its batched form."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pullback.ad import dce as dce_
from pullback.ad.batch import batch
from pullback.ir.core import (
    Eqn,
    Primitive,
    Program,
    Var,
)
from pullback.ir.tracer import Tracer, current_builder, new_trace, tracing
from pullback.ir.types import ArrayType, is_inexact
from pullback.primitives import elementwise as ew
from pullback.primitives.contractions import dot_general_p
from pullback.primitives.reductions import reduce_sum_p

# --- closing a body ---------------------------------------------------------------------------


def close(program: Program) -> tuple[Program, tuple]:
    """``program`` with its constants made leading inputs, and their values (which keep their names
    as constants of the trace they are passed in)."""
    if not program.constvars:
        return program, ()
    if tracing():
        names = current_builder().const_names
        for v, c in zip(program.constvars, program.constvals):
            if v.hint:
                names.setdefault(id(c), v.hint)
    return Program(program.constvars + program.inputs, program.eqns, program.outputs, name=program.name), \
        program.constvals


def _split(seq, num_consts: int, num_carry: int):
    seq = list(seq)
    return seq[:num_consts], seq[num_consts:num_consts + num_carry], seq[num_consts + num_carry:]


# --- which outputs depend on marked inputs (nonzero tangents, batched values) -----------------


def _depends(program: Program, marked: Sequence[bool], inexact_only: bool = False) -> list[bool]:
    """Which outputs of ``program`` depend on its marked inputs (through inexact values only, for
    tangents: an integer result carries none)."""
    dep = {id(v) for v, m in zip(program.inputs, marked) if m}
    for eqn in program.eqns:
        if any(isinstance(a, Var) and id(a) in dep for a in eqn.inputs):
            dep.update(id(v) for v in eqn.outputs if not inexact_only or is_inexact(v.dtype))
    return [isinstance(a, Var) and id(a) in dep for a in program.outputs]


def _fixed_point(step: Callable[[list[bool]], Sequence[bool]], carry: list[bool]) -> list[bool]:
    """The smallest marking of a loop's carries that holds ``carry`` and that a step keeps: ``step``
    gives the carries a step marks (tangent, unknown, live, batched) from those marked before it."""
    while True:
        new = [a or b for a, b in zip(carry, step(carry))]
        if new == carry:
            return carry
        carry = new


def _nonzero_outputs(body: Program, nonzero: Sequence[bool]) -> list[bool]:
    """Which outputs' tangents can be nonzero, given which inputs' can."""
    return _depends(body, nonzero, inexact_only=True)


# --- partial evaluation: which outputs are unknown --------------------------------------------


def _unknown_outputs(body: Program, unknown: Sequence[bool]) -> list[bool]:
    """Which outputs partial evaluation will find unknown (as ``partial_eval`` does, equation by equation)."""
    u = {id(v) for v, z in zip(body.inputs, unknown) if z}
    for eqn in body.eqns:
        ins = [isinstance(a, Var) and id(a) in u for a in eqn.inputs]
        if not any(ins):
            continue
        mask = _MASKS.get(eqn.prim)
        outs = mask(eqn, ins) if mask is not None else [True] * len(eqn.outputs)
        u.update(id(v) for v, o in zip(eqn.outputs, outs) if o)
    return [isinstance(a, Var) and id(a) in u for a in body.outputs]


# which outputs of a loop or branch equation are unknown, by primitive (each file registers its own)
_MASKS: dict[Primitive, object] = {}


# --- dead code: a body's live inputs ----------------------------------------------------------


_LIVE: dict[tuple[int, tuple[bool, ...]], tuple[Program, Program, list[bool]]] = {}


def _live_inputs(body: Program, live_outputs: Sequence[bool]) -> tuple[Program, list[bool]]:
    """``body`` pruned to the live outputs, and which inputs they read. Memoised: dead-code elimination
    runs to a fixed point inside ``simplify``, and asks again about the same bodies."""
    key = (id(body), tuple(live_outputs))
    hit = _LIVE.get(key)
    if hit is not None and hit[0] is body:
        return hit[1], hit[2]
    if len(_LIVE) > 4096:
        _LIVE.clear()
    pruned, used = _live_inputs_uncached(body, live_outputs)
    _LIVE[key] = (body, pruned, used)
    return pruned, used


def _live_inputs_uncached(body: Program, live_outputs: Sequence[bool]) -> tuple[Program, list[bool]]:
    pruned = dce_.dce(Program(body.inputs, body.eqns, tuple(a for a, lv in zip(body.outputs, live_outputs) if lv),
                              name=body.name))
    used = {id(a) for e in pruned.eqns for a in e.inputs} | {id(a) for a in pruned.outputs}
    return pruned, [id(v) in used for v in body.inputs]


# --- batching ---------------------------------------------------------------------------------
# A body is batched with the batching transform itself; which of its values carry the batch axis
# follows from which inputs do (a carry is batched when its initial value or any step makes it so:
# a fixed point, as for nonzero tangents). A batched value's batch axis is first (after the step
# axis for stacked xs and ys).


def _batched_body(body: Program, batched_in: Sequence[bool], batched_out: Sequence[bool], size: int) -> Program:
    b = batch(body, [0 if x else None for x in batched_in], size, [0 if x else None for x in batched_out])
    return Program(b.inputs, b.eqns, b.outputs, b.constvars, b.constvals, name=body.name)


def _closed_program(in_types: Sequence[ArrayType], fn, name: str, hints: Sequence[str] = ()) -> Program:
    """The program of ``fn`` on tracers of ``in_types`` (its outputs: a list of tracers); ``hints``
    names its inputs."""
    with new_trace() as builder:
        inputs = tuple(Var(t, h) for t, h in zip(in_types, [*hints, *[""] * (len(in_types) - len(hints))]))
        outs = fn([Tracer(v, builder) for v in inputs])
        outputs = tuple(builder.atom(o) for o in outs)
    return Program(inputs, tuple(builder.eqns), outputs, name=name)


def expression_hint(e: Eqn) -> str:
    """A name for an unnamed loop invariant from the operation that makes it and the named values it
    reads (``sub_open`` for ``1 - open_``, ``mul_k`` for ``0.01 * k``): the backward loop sums its cotangent
    as ``sub_open_bar_sum``, not in a ``carry``. None ("") for an operation the printer names otherwise
    (``cast``, ``picked``) or one of several results."""
    word = _WORDS.get(e.prim) or (e.prim.name if getattr(ew, f"{e.prim.name}_p", None) is e.prim
                                  and "_" not in e.prim.name else "")
    if not word or len(e.outputs) != 1:
        return ""
    named = [b.hint.rstrip("_") for b in e.inputs if type(b) is Var and b.hint.rstrip("_")]
    return "_".join([word, *named[:2]])


_WORDS = {dot_general_p: "dot", reduce_sum_p: "total"}  # as the printer names them (``codegen.TEMP_HINTS``)
