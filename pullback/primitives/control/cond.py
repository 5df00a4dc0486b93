"""``cond``: one of several branches, chosen at run time by an integer or boolean index."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pullback.ad import dce as dce_
from pullback.ad import partial_eval as pe
from pullback.ad.batch import at_front, batch_rules, batch_size, moveaxis
from pullback.ad.jvp import Zero, jvp, jvp_rules
from pullback.ad.transpose import Linear, transpose, transpose_rules
from pullback.ir.core import (
    WITH_BODIES,
    Eqn,
    Literal,
    Params,
    Primitive,
    Program,
    ShapeError,
    Var,
    shape_rules,
)
from pullback.ir.tracer import bind, inline
from pullback.ir.types import StackType
from pullback.primitives import lax
from pullback.primitives.control.common import (
    _MASKS,
    _batched_body,
    _depends,
    _live_inputs,
    _nonzero_outputs,
    _unknown_outputs,
    close,
)
from pullback.primitives.control.scan import (
    scan_p,
)

cond_p = Primitive("cond", multiple_results=True)
WITH_BODIES.add(cond_p)


def _cond_shape(index, *args, branches: tuple[Program, ...]):
    if index.type.shape != () or index.type.dtype.kind not in "biu":
        raise ShapeError(f"cond: the index must be a boolean or integer scalar, got {index.type}")
    types = tuple(a.type for a in args)
    outs = branches[0].out_types
    for br in branches:
        if br.in_types != types:
            raise ShapeError("cond: a branch's inputs do not match the operands")
        if br.out_types != outs:
            raise ShapeError(f"cond: branches return different types: {', '.join(map(str, outs))} and "
                             f"{', '.join(map(str, br.out_types))}")
        if br.constvars:
            raise ShapeError("cond: branches must be closed (no constants)")
    return outs


shape_rules[cond_p] = _cond_shape


def make_cond(index, branches: Sequence[Program], args: Sequence, own: Sequence[Sequence] | None = None) -> list:
    """Bind a cond on ``args``. Branch i's leading inputs stand for ``own[i]``, values only it reads
    (the tracers it captured); its constants join them. Every branch then takes every branch's own
    values as operands and ignores the others'."""
    closed = [close(br) for br in branches]
    per = [[*values, *mine] for (_, values), mine in zip(closed, own or [()] * len(branches))]
    types = [v.type for (br, _), vals in zip(closed, per) for v in br.inputs[:len(vals)]]
    new = []
    for i, (br, _) in enumerate(closed):
        start, n = sum(len(vals) for vals in per[:i]), len(per[i])
        before, after = (tuple(Var(t) for t in ts) for ts in (types[:start], types[start + n:]))
        new.append(Program(before + br.inputs[:n] + after + br.inputs[n:], br.eqns, br.outputs, name=br.name))
    return list(bind(cond_p, index, *(v for vals in per for v in vals), *args, branches=tuple(new)))


def _cond_jvp(primals, tangents, *, branches):
    index, args, ts = primals[0], primals[1:], tangents[1:]
    nz = [not isinstance(t, Zero) for t in ts]
    out_nz = [any(z) for z in zip(*(_nonzero_outputs(br, nz) for br in branches))]
    n_out = len(branches[0].outputs)
    new = []
    for br in branches:
        j = jvp(br, nz)
        new.append(Program(j.inputs, j.eqns, j.outputs[:n_out] + tuple(
            t for t, z in zip(j.outputs[n_out:], out_nz) if z), j.constvars, j.constvals, name=br.name))
    outs = make_cond(index, new, list(args) + [t for t, z in zip(ts, nz) if z])
    it = iter(outs[n_out:])
    return tuple(outs[:n_out]), tuple(next(it) if z else Zero(o.ssa.type) for o, z in zip(outs[:n_out], out_nz))


jvp_rules[cond_p] = _cond_jvp


def _cond_unknown(eqn: Eqn, unknown_inputs: list[bool]) -> list[bool]:
    if unknown_inputs[0]:
        return [True] * len(eqn.outputs)
    return [any(z) for z in zip(*(_unknown_outputs(br, unknown_inputs[1:]) for br in eqn.params["branches"]))]


def _fill(v: Var) -> Eqn:
    """The equation making ``v`` zeros, or for a stack an empty one (a scan of no steps, printed ``[]``)."""
    from pullback.primitives import structural as st

    t = v.type
    if isinstance(t, StackType):
        entry = Var(t.elem)
        body = Program((), (_fill(entry),), (entry,), name="empty")
        return Eqn(scan_p, (Literal.of(0, np.int64),), (v,), Params({
            "body": body, "length": None, "reverse": False, "num_consts": 0, "num_carry": 0}))
    return Eqn(st.broadcast_in_dim_p, (Literal.of(0, t.dtype),), (v,), Params({"shape": t.shape,
                                                                              "broadcast_dimensions": ()}))


def _cond_partial_eval(eqn: Eqn, unknown_inputs: list[bool]):
    """Each branch splits in two. The known cond returns the known results and the residuals of every
    branch (the branch taken fills the others' with zeros); the unknown cond takes them all, and each
    branch reads its own. Only the taken branch runs, forward and backward."""

    branches = eqn.params["branches"]
    if unknown_inputs[0]:
        return [], [eqn], [True] * len(eqn.outputs)
    out_u = _cond_unknown(eqn, unknown_inputs)
    u_in = unknown_inputs[1:]
    splits = [pe.partial_eval(br, u_in, out_u) for br in branches]
    residuals = [list(sp_.unknown.inputs[:sp_.n_residuals]) for sp_ in splits]
    all_types = [r.type for rs in residuals for r in rs]
    stacks = [Var(t) for t in all_types]
    known_branches, unknown_branches = [], []
    offsets = [sum(len(rs) for rs in residuals[:i]) for i in range(len(branches))]
    for i, (br, sp_) in enumerate(zip(branches, splits)):
        n_known = len(sp_.known.outputs) - sp_.n_residuals
        fills = []
        outs = list(sp_.known.outputs[:n_known])
        for j, t in enumerate(all_types):
            if offsets[i] <= j < offsets[i] + len(residuals[i]):
                outs.append(residuals[i][j - offsets[i]])
            else:
                v = Var(t)
                fills.append(_fill(v))
                outs.append(v)
        known_branches.append(Program(sp_.known.inputs, sp_.known.eqns + tuple(fills), tuple(outs),
                                      name=br.name))
        ins = [residuals[i][j - offsets[i]] if offsets[i] <= j < offsets[i] + len(residuals[i]) else Var(t)
               for j, t in enumerate(all_types)]
        unknown_branches.append(Program(tuple(ins) + sp_.unknown.inputs[sp_.n_residuals:], sp_.unknown.eqns,
                                        sp_.unknown.outputs, name=br.name))
    args = eqn.inputs[1:]
    known_eqn = Eqn(cond_p, (eqn.inputs[0],) + tuple(a for a, u in zip(args, u_in) if not u),
                    tuple(v for v, u in zip(eqn.outputs, out_u) if not u) + tuple(stacks),
                    Params({"branches": tuple(known_branches)}), eqn.source)
    unknown_eqn = Eqn(cond_p, (eqn.inputs[0],) + tuple(stacks) + tuple(a for a, u in zip(args, u_in) if u),
                      tuple(v for v, u in zip(eqn.outputs, out_u) if u),
                      Params({"branches": tuple(unknown_branches)}), eqn.source)
    return [known_eqn], [unknown_eqn], out_u


pe.partial_eval_rules[cond_p] = _cond_partial_eval
_MASKS[cond_p] = _cond_unknown


def _cond_transpose(cts, index, *args, branches):
    lin = [isinstance(a, Linear) for a in args]
    cts = [lax.zeros(c.type) if isinstance(c, Zero) else c for c in cts]
    new = [transpose(br, lin) for br in branches]
    outs = make_cond(index, new, [a for a, is_lin in zip(args, lin) if not is_lin] + cts)
    it = iter(outs)
    return [None] + [next(it) if is_lin else None for is_lin in lin]


transpose_rules[cond_p] = _cond_transpose


def _cond_dce(eqn: Eqn, used: list[bool]) -> Eqn | None:
    branches = eqn.params["branches"]
    pruned = [_live_inputs(br, used) for br in branches]
    in_used = [any(z) for z in zip(*(u for _, u in pruned))]
    if all(used) and all(in_used) and all(p.eqns == br.eqns for br, (p, _) in zip(branches, pruned)):
        return eqn
    new = tuple(Program(tuple(v for v, k in zip(br.inputs, in_used) if k), p.eqns, p.outputs, name=br.name)
                for br, (p, _) in zip(branches, pruned))
    return Eqn(cond_p, (eqn.inputs[0],) + tuple(a for a, k in zip(eqn.inputs[1:], in_used) if k),
               tuple(v for v, u in zip(eqn.outputs, used) if u), Params({"branches": new}), eqn.source)


dce_.dce_rules[cond_p] = _cond_dce


# --- batching ---------------------------------------------------------------------------------


def _cond_batch(args, dims, *, branches: tuple[Program, ...]):
    """An unbatched index picks one batched branch. A batched index picks a branch per batch
    element: every branch runs on the whole batch and ``select`` keeps each element's (JAX does
    the same)."""
    size = batch_size(args, dims)
    (index, *ops), (index_dim, *op_dims) = args, dims
    batched = [d is not None for d in op_dims]
    ops = [at_front(a, d, size) if d is not None else a for a, d in zip(ops, op_dims)]
    if index_dim is None:
        out = [any(z) for z in zip(*(_depends(br, batched) for br in branches))]
        new = tuple(_batched_body(br, batched, out, size) for br in branches)
        return bind(cond_p, index, *ops, branches=new), tuple(0 if b else None for b in out)
    n_out = len(branches[0].outputs)
    results = [inline(_batched_body(br, batched, [True] * n_out, size), ops) for br in branches]
    index = moveaxis(index, index_dim, 0)
    if index.dtype.kind != "b":
        index = lax.clip(index, 0, len(branches) - 1)
    outs = list(results[0])
    for k in range(1, len(branches)):
        pick = lax.eq(index, Literal.of(k, index.dtype))
        outs = [lax.select(lax.broadcast_in_dim(pick, o.shape, (0,)), r, o) for r, o in zip(results[k], outs)]
    return tuple(outs), (0,) * n_out
batch_rules[cond_p] = _cond_batch
