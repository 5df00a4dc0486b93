"""``checkpoint``: a sub-program whose intermediates are recomputed in reverse mode, not kept."""

from __future__ import annotations

from collections.abc import Sequence

from pullback.ad import dce as dce_
from pullback.ad import partial_eval as pe
from pullback.ad.batch import at_front, batch_rules, batch_size
from pullback.ad.jvp import Zero, jvp, jvp_rules
from pullback.ad.transpose import Linear, transpose, transpose_rules
from pullback.errors import TracingError
from pullback.ir.core import (
    WITH_BODIES,
    Eqn,
    Params,
    Primitive,
    Program,
    ShapeError,
    Var,
    effectful,
    shape_rules,
)
from pullback.ir.tracer import bind, located
from pullback.primitives.control.common import (
    _MASKS,
    _batched_body,
    _depends,
    _live_inputs,
    _nonzero_outputs,
    _unknown_outputs,
    close,
)

checkpoint_p = Primitive("checkpoint", multiple_results=True)
WITH_BODIES.add(checkpoint_p)


def _checkpoint_shape(*args, body: Program):
    if tuple(a.type for a in args) != body.in_types:
        raise ShapeError(f"checkpoint body takes {', '.join(map(str, body.in_types))}; "
                         f"operands give {', '.join(str(a.type) for a in args)}")
    if body.constvars:
        raise ShapeError("a checkpoint body must be closed (no constants)")
    return body.out_types


shape_rules[checkpoint_p] = _checkpoint_shape


def hoist_effects(body: Program) -> tuple[Program, list]:
    """A checkpoint's draws made once, before it, in the current trace: recomputing the body in the
    backward pass must not draw again (other numbers, and a stream that runs ahead of eager NumPy's).
    Returns the body reading their results as leading inputs, and those results."""
    effects = [e for e in body.eqns if effectful(e)]
    if not effects:
        return body, []
    consts = {id(v): c for v, c in zip(body.constvars, body.constvals)}
    if any(e.prim in WITH_BODIES or any(isinstance(a, Var) and id(a) not in consts for a in e.inputs)
           for e in effects):
        raise TracingError(located(
            "a random draw inside pb.checkpoint that reads the checkpointed function's values (or is inside a "
            "loop or branch there) would be drawn again when the function is recomputed; draw outside it and "
            "pass the numbers in"))
    drawn: list = []
    for e in effects:
        out = bind(e.prim, *(consts[id(a)] if isinstance(a, Var) else a for a in e.inputs), **e.params)
        drawn.extend(out if e.prim.multiple_results else [out])
    made = tuple(v for e in effects for v in e.outputs)
    return Program(made + body.inputs, tuple(e for e in body.eqns if not effectful(e)), body.outputs,
                   body.constvars, body.constvals, body.name), drawn


def make_checkpoint(body: Program, args: Sequence) -> list:
    body, values = close(body)
    return list(bind(checkpoint_p, *values, *args, body=body))


def passed_through(eqn: Eqn, ins: tuple) -> tuple[Eqn | None, dict[int, object]] | None:
    """The checkpoint without the outputs its body returns as they came in (a cotangent seed carried through
    a recomputed block), and the map from those outputs to the operands they are: a loop around it then
    sees its carry unchanged, not a copy (``nll_bar_1 = nll_bar``). None where no output passes through;
    no equation where every output does."""
    body = eqn.params["body"]
    at = {id(v): j for j, v in enumerate(body.inputs)}
    through = {i: at[id(o)] for i, o in enumerate(body.outputs) if type(o) is Var and id(o) in at}
    if not through:
        return None
    same = {id(eqn.outputs[i]): ins[j] for i, j in through.items()}
    keep = [i for i in range(len(body.outputs)) if i not in through]
    if not keep:
        return None, same
    new_body = Program(body.inputs, body.eqns, tuple(body.outputs[i] for i in keep), body.constvars,
                       body.constvals, name=body.name)
    return Eqn(checkpoint_p, ins, tuple(eqn.outputs[i] for i in keep), Params({**eqn.params, "body": new_body}),
               eqn.source), same


def _checkpoint_jvp(primals, tangents, *, body: Program):
    nz = [not isinstance(t, Zero) for t in tangents]
    out_nz = _nonzero_outputs(body, nz)
    j = jvp(body, nz)
    n_out = len(body.outputs)
    new_body = Program(j.inputs, j.eqns, j.outputs[:n_out] + tuple(
        t for t, z in zip(j.outputs[n_out:], out_nz) if z), j.constvars, j.constvals, name=body.name)
    outs = make_checkpoint(new_body, list(primals) + [t for t, z in zip(tangents, nz) if z])
    it = iter(outs[n_out:])
    return tuple(outs[:n_out]), tuple(next(it) if z else Zero(o.ssa.type) for o, z in zip(outs[:n_out], out_nz))


jvp_rules[checkpoint_p] = _checkpoint_jvp


def _checkpoint_partial_eval(eqn: Eqn, unknown_inputs: list[bool]):
    """The known side computes the known outputs alone; the unknown side reads the checkpoint's known
    inputs (the only residuals) and recomputes what it needs from them."""
    body = eqn.params["body"]
    out_u = _unknown_outputs(body, unknown_inputs)
    known_body, known_in = _live_inputs(body, [not u for u in out_u])
    unknown_body, unknown_in = _live_inputs(body, out_u)
    eqns = []
    if not all(out_u):
        kb = Program(tuple(v for v, k in zip(body.inputs, known_in) if k), known_body.eqns, known_body.outputs,
                     name=body.name)
        eqns.append(Eqn(checkpoint_p, tuple(a for a, k in zip(eqn.inputs, known_in) if k),
                        tuple(v for v, u in zip(eqn.outputs, out_u) if not u), Params({"body": kb}), eqn.source))
    unknown_eqns = []
    if any(out_u):
        ub = Program(tuple(v for v, k in zip(body.inputs, unknown_in) if k), unknown_body.eqns, unknown_body.outputs,
                     name=body.name)
        unknown_eqns.append(Eqn(checkpoint_p, tuple(a for a, k in zip(eqn.inputs, unknown_in) if k),
                                tuple(v for v, u in zip(eqn.outputs, out_u) if u), Params({"body": ub}), eqn.source))
    return eqns, unknown_eqns, out_u


pe.partial_eval_rules[checkpoint_p] = _checkpoint_partial_eval
_MASKS[checkpoint_p] = lambda eqn, unknown: _unknown_outputs(eqn.params["body"], unknown)


def _checkpoint_transpose(cts, *args, body: Program):
    from pullback.primitives import lax

    lin = [isinstance(a, Linear) for a in args]
    # the body recomputes forward values from its non-linear inputs: split that part off (a loop in the
    # body splits into its known and linear loops), then transpose the linear rest
    split = pe.partial_eval(body, lin, [True] * len(body.outputs))
    linear_t = transpose(split.unknown, [False] * split.n_residuals + [True] * sum(lin))
    consts = {id(v): (v, c) for p in (split.known, linear_t) for v, c in zip(p.constvars, p.constvals)}
    body_t = Program(split.known.inputs + linear_t.inputs[split.n_residuals:], split.known.eqns + linear_t.eqns,
                     linear_t.outputs, tuple(v for v, _ in consts.values()), tuple(c for _, c in consts.values()),
                     name=f"{body.name}_transpose")
    cts = [lax.zeros(c.type) if isinstance(c, Zero) else c for c in cts]
    outs = make_checkpoint(body_t, [a for a, is_lin in zip(args, lin) if not is_lin] + cts)
    it = iter(outs)
    return [next(it) if is_lin else None for is_lin in lin]


transpose_rules[checkpoint_p] = _checkpoint_transpose


def _checkpoint_dce(eqn: Eqn, used: list[bool]) -> Eqn | None:
    body = eqn.params["body"]
    pruned, in_used = _live_inputs(body, used)
    if all(in_used) and all(used):
        return eqn if pruned.eqns == body.eqns else Eqn(checkpoint_p, eqn.inputs, eqn.outputs,
                                                         Params({"body": pruned}), eqn.source)
    new_body = Program(tuple(v for v, k in zip(body.inputs, in_used) if k), pruned.eqns, pruned.outputs,
                       name=body.name)
    return Eqn(checkpoint_p, tuple(a for a, k in zip(eqn.inputs, in_used) if k),
               tuple(v for v, u in zip(eqn.outputs, used) if u), Params({"body": new_body}), eqn.source)


dce_.dce_rules[checkpoint_p] = _checkpoint_dce


# --- batching ---------------------------------------------------------------------------------


def _checkpoint_batch(args, dims, *, body: Program):
    size = batch_size(args, dims)
    batched = [d is not None for d in dims]
    out = _depends(body, batched)
    outs = bind(checkpoint_p, *(at_front(a, d, size) if d is not None else a for a, d in zip(args, dims)),
                body=_batched_body(body, batched, out, size))
    return outs, tuple(0 if b else None for b in out)
batch_rules[checkpoint_p] = _checkpoint_batch
