"""Whole Jacobians and Hessians as programs, from the batching transform.

``jacfwd`` batches the JVP program over the identity as the batch of input tangents (one
batch element per input entry); ``jacrev`` batches the transposed linear program over the
identity as the batch of output cotangents (one per output entry), after one forward pass;
``hessian`` is ``jacfwd`` of ``jacrev``. No loop over the batch is printed: a batched
``dot_general`` with the identity is one matrix product.

Each result is ``d out_j / d in_i`` of shape ``out_j.shape + in_i.shape``, listed output by
output, and for each output input by input (the inputs in ``wrt``). Inputs and outputs are
real floats (complex ones are refused, see ``_check_inexact``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pullback.ad.batch import batch
from pullback.ad.jvp import jvp
from pullback.api import stages as ad
from pullback.ir.core import Literal, Program
from pullback.ir.tracer import Tracer, bind, new_trace, rename
from pullback.ir.types import ArrayType, is_inexact
from pullback.opt.scalings import collect_scalings
from pullback.opt.simplify import keeping_stop_gradients


def call(program: Program, args: Sequence, hints: dict[int, str]) -> list:
    """Evaluate ``program`` on ``args`` (tracers or literals) inside the current trace; its
    constants become constants of the trace under their own vars. Its values' names go into
    ``hints`` (applied by ``_finish``), and an equation without a line of its own takes the
    current one, the user's function's (never the line that asked for the Jacobian)."""
    from pullback.ir.tracer import current_builder

    builder = current_builder()
    env: dict[int, object] = {id(v): a for v, a in zip(program.inputs, args)}
    for v, c in zip(program.constvars, program.constvals):
        builder.consts.setdefault(id(c), (v, c))
        env[id(v)] = Tracer(builder.consts[id(c)][0], builder)

    def read(a):
        return a if isinstance(a, Literal) else env[id(a)]

    saved = builder.source
    for eqn in program.eqns:
        builder.source = eqn.source or saved
        outs = bind(eqn.prim, *map(read, eqn.inputs), **eqn.params)
        for v, o in zip(eqn.outputs, outs if eqn.prim.multiple_results else (outs,)):
            env[id(v)] = o
            if v.hint and isinstance(o, Tracer) and not o.ssa.hint:
                hints.setdefault(id(o.ssa), v.hint)
    builder.source = saved
    return [read(a) for a in program.outputs]


def identity_seeds(types: Sequence[ArrayType]) -> list:
    """The identity of size ``N = sum of sizes``, split into one batch per type: seed i has
    shape ``(N, *types[i].shape)``, the unit tangents of that value's entries and zeros."""
    from pullback.primitives import lax
    from pullback.primitives import structural as st

    size = sum(t.size for t in types)
    seeds, offset = [], 0
    for t in types:
        part = bind(st.eye_p, dtype=t.dtype, shape=(size, t.size), k=-offset)
        seeds.append(lax.reshape(part, (size, *t.shape)))
        offset += t.size
    return seeds


def _seeded(linear: Program, fixed: list, seeded: Sequence[ArrayType],
            hints: dict[int, str]) -> tuple[list, tuple[int, ...]]:
    """``linear`` (its last inputs linear, one per type in ``seeded``) applied to the identity
    seeds, and the batch shape its outputs lead with: ``(N,)``, or the seeded value's own shape
    when there is one seeded value of several axes (batched once per axis over the factored unit
    tensor, so that no ``eye`` of its size is made). The batch of a single entry is the program
    applied to ones, with no batching at all (the gradient of a scalar function is one reverse pass)."""
    from pullback.primitives import lax

    size = sum(t.size for t in seeded)
    if size == 1:
        ones = [lax.full(t.shape, 1, t.dtype) for t in seeded]
        outs = call(linear, fixed + ones, hints)
        return [x if isinstance(x, Literal) else lax.reshape(x, (1, *x.shape)) for x in outs], (1,)
    if len(seeded) == 1 and seeded[0].ndim > 1:
        batched = linear
        for n in reversed(seeded[0].shape):  # the first axis outermost
            batched = batch(batched, [None] * len(fixed) + [0], n)
        return call(batched, fixed + [unit_tensor(seeded[0])], hints), seeded[0].shape
    batched = batch(linear, [None] * len(fixed) + [0] * len(seeded), size)
    return call(batched, fixed + identity_seeds(seeded), hints), (size,)


def unit_tensor(t: ArrayType):
    """The unit tensor ``delta_ij delta_ab ...`` of shape ``t.shape + t.shape``, kept factored: the
    product of one broadcast ``eye`` per axis, so that a contraction meeting it touches one small
    identity (see ``simplify._factored_contraction``), never an ``eye`` of the size of ``t``."""
    from pullback.primitives import lax
    from pullback.primitives import structural as st

    r = t.ndim
    result = None
    for axis, n in enumerate(t.shape):
        eye = bind(st.eye_p, dtype=t.dtype, shape=(n, n), k=0)
        factor = lax.broadcast_in_dim(eye, (*t.shape, *t.shape), (axis, r + axis))
        result = factor if result is None else lax.mul(result, factor)
    return result


def _last_line(program: Program):
    """Where the user's function returns (its last equation's line): the place the seeds and
    the final reshapes of a Jacobian are attributed to."""
    return next((e.source for e in reversed(program.eqns) if e.source is not None), None)


def _check_inexact(values, what: str) -> None:
    """Real floats only: for complex values the forward and reverse Jacobians differ by a
    conjugation for holomorphic functions and mean different things otherwise (JAX refuses them
    too, unless told the function is holomorphic)."""
    for v in values:
        if not is_inexact(v.dtype) or v.dtype.kind == "c":
            raise TypeError(f"a Jacobian needs real float {what}; got {v.type} (for complex values, take the "
                            "real and imaginary parts as separate real arrays)")


def _finish(program: Program, builder, results, name: str, hints: dict[int, str]) -> Program:
    out_atoms = tuple(builder.atom(r) for r in results)
    constvars, constvals = builder.constants()
    built = Program(program.inputs, tuple(builder.eqns), out_atoms, constvars, constvals, name=f"{program.name}_{name}")
    result = ad.optimize(rename(built, hints) if hints else built)
    return ad.optimize(collect_scalings(result))


def jacfwd(program: Program, wrt: Sequence[bool]) -> Program:
    """``inputs -> d out_j / d in_i`` for every output j and every input i in ``wrt``: the JVP
    program batched over the identity seeds of the inputs' tangents."""
    from pullback.primitives import lax

    wrt_vars = [v for v, w in zip(program.inputs, wrt) if w]
    _check_inexact(wrt_vars, "inputs")
    _check_inexact(program.outputs, "outputs")
    m = len(program.outputs)
    with new_trace(replay=True) as builder:
        builder.source = _last_line(program)  # seeds and reshapes: not the caller's line
        ins = [Tracer(v, builder) for v in program.inputs]
        hints: dict[int, str] = {}
        touts, lead = _seeded(jvp(program, wrt), ins, [v.type for v in wrt_vars], hints)
        builder.source = _last_line(program)
        results = []
        for o, t in zip(program.outputs, touts[m:]):  # t: (*lead, *o.shape)
            offset = 0
            for v in wrt_vars:
                part = t if len(wrt_vars) == 1 else lax.slice_axis(t, 0, offset, offset + v.type.size)
                nb = len(lead)
                part = lax.transpose(part, (*range(nb, part.ndim), *range(nb)))
                results.append(lax.reshape(part, (*o.shape, *v.shape)))
                offset += v.type.size
        return _finish(program, builder, results, "jacfwd", hints)


def jacrev(program: Program, wrt: Sequence[bool]) -> Program:
    """``inputs -> d out_j / d in_i``: one forward pass keeping residuals, then the transposed
    linear program batched over the identity seeds of the outputs' cotangents."""
    from pullback.primitives import lax

    wrt_vars = [v for v, w in zip(program.inputs, wrt) if w]
    _check_inexact(wrt_vars, "inputs")
    _check_inexact(program.outputs, "outputs")
    m = len(program.outputs)
    split = ad.linearize(program, wrt)
    transposed = ad.transpose_linear(split)
    with new_trace(replay=True) as builder:
        builder.source = _last_line(program)
        ins = [Tracer(v, builder) for v in program.inputs]
        hints: dict[int, str] = {}
        residuals = call(split.known, ins, hints)[m:]
        cts, _ = _seeded(transposed, residuals, program.out_types, hints)  # each (*lead, *in.shape)
        builder.source = _last_line(program)
        results, offset = [], 0
        for o in program.outputs:
            k = o.type.size
            for v, c in zip(wrt_vars, cts):
                part = c if m == 1 else lax.slice_axis(c, 0, offset, offset + k)
                results.append(lax.reshape(part, (*o.shape, *v.shape)))
            offset += k
        return _finish(program, builder, results, "jacrev", hints)


def hessian(program: Program, wrt: Sequence[bool]) -> Program:
    """``jacfwd(jacrev(program))``: for each output j, input i and input k (in ``wrt``),
    ``d^2 out_j / d in_i d in_k`` of shape ``out_j.shape + in_i.shape + in_k.shape``."""
    with keeping_stop_gradients():  # the gradient is differentiated again
        gradient = jacrev(program, wrt)
    return _renamed(jacfwd(gradient, wrt), f"{program.name}_hessian")


def joined(program: Program, other: Program) -> Program:
    """``program``'s outputs and then ``other``'s, computed from the same inputs (a Jacobian and
    the auxiliary values of ``has_aux``); shared work is computed once."""
    with new_trace(replay=True) as builder:
        ins = [Tracer(v, builder) for v in program.inputs]
        hints: dict[int, str] = {}
        outs = call(program, ins, hints) + call(other, ins, hints)
        constvars, constvals = builder.constants()
        built = Program(program.inputs, tuple(builder.eqns), tuple(builder.atom(o) for o in outs),
                        constvars, constvals, program.name)
        return ad.optimize(rename(built, hints))


def _renamed(program: Program, name: str) -> Program:
    return Program(program.inputs, program.eqns, program.outputs, program.constvars, program.constvals, name)
