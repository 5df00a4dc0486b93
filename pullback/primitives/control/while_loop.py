"""``while`` runs its body while its condition holds; the number of steps is known only when it runs.
Reverse mode stores what each step's linear part reads, so a while loop may also *record*: its
body returns ``num_ys`` values after the carry, and the loop returns, after the final carry, a
*stack* of each (``StackType``: the type of one entry, never a length, so every other type stays
concrete; a Python list when printed, appended to once per step). Partial evaluation splits a while
loop into a known one, which counts its steps and records the residuals, and a scan with
``length=None``: its first operand is that count, its ``xs`` are stacks; transposition reverses it
as any scan, and JVP, partial evaluation, dead code and batching are the scan's rules. A primitive
pair (push, read) or a list-typed carry would have served too, but would have needed its own
rules for every transform; a recording loop and a scan over stacks reuse the loops' own, and print
as the loops a person writes (``while ...: ...; res.append(r)``, then
``for t in range(steps - 1, -1, -1): r = res[t]``). Draws in the body stay in the known loop: made
once per step and recorded, never made again by the backward one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pullback.ad import dce as dce_
from pullback.ad import partial_eval as pe
from pullback.ad.batch import at_front, batch_rules, batch_size
from pullback.ad.jvp import Zero, jvp, jvp_rules
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
from pullback.ir.tracer import Tracer, bind, inline
from pullback.ir.types import ArrayType, StackType
from pullback.primitives import lax
from pullback.primitives import reductions as red
from pullback.primitives.control.common import (
    _MASKS,
    _batched_body,
    _closed_program,
    _depends,
    _fixed_point,
    _live_inputs,
    _nonzero_outputs,
    _split,
    _unknown_outputs,
    close,
)
from pullback.primitives.control.scan import (
    _rematerialize_views,
    hoist_invariant,
    scan_p,
)

while_p = Primitive("while", multiple_results=True)
WITH_BODIES.add(while_p)


def _while_shape(*args, cond: Program, body: Program, num_cond_consts: int, num_body_consts: int, num_ys: int):
    cc, bc, carry = args[:num_cond_consts], args[num_cond_consts:num_cond_consts + num_body_consts], \
        args[num_cond_consts + num_body_consts:]
    carry_types = tuple(a.type for a in carry)
    nk = len(carry)
    if cond.in_types != tuple(a.type for a in cc) + carry_types:
        raise ShapeError("while: the condition's inputs do not match its operands")
    if len(cond.outputs) != 1 or cond.out_types[0] != ArrayType((), np.dtype(bool)):
        raise ShapeError("while: the condition must return one boolean scalar")
    if (body.in_types != tuple(a.type for a in bc) + carry_types or body.out_types[:nk] != carry_types
            or len(body.outputs) != nk + num_ys):
        raise ShapeError("while: the body must map the carry to a carry of the same types"
                         + (f" and {num_ys} values to record" if num_ys else ""))
    if cond.constvars or body.constvars:
        raise ShapeError("while: condition and body must be closed (no constants)")
    return carry_types + tuple(StackType(t) for t in body.out_types[nk:])


shape_rules[while_p] = _while_shape


def make_while(cond: Program, body: Program, cond_consts: Sequence, body_consts: Sequence, init: Sequence,
               num_ys: int = 0) -> list:
    """Bind a while loop. The body maps the carry to the next carry and ``num_ys`` values that each step
    records (after the carry among its outputs); the loop returns the final carry, then the stacks
    of the recorded values."""
    cond, cv = close(cond)
    body, body_consts = hoist_invariant(body, body_consts)  # computed once, before the loop
    return list(bind(while_p, *cv, *cond_consts, *body_consts, *init, cond=cond, body=body,
                     num_cond_consts=len(cv) + len(cond_consts), num_body_consts=len(body_consts), num_ys=num_ys))


def _while_jvp(primals, tangents, *, cond: Program, body: Program, num_cond_consts: int, num_body_consts: int,
               num_ys: int):
    ncc, nbc = num_cond_consts, num_body_consts
    cc, bc, carry = primals[:ncc], primals[ncc:ncc + nbc], primals[ncc + nbc:]
    bct, kt = tangents[ncc:ncc + nbc], tangents[ncc + nbc:]
    nk = len(carry)
    b_nz = [not isinstance(t, Zero) for t in bct]
    k_nz = [not isinstance(t, Zero) for t in kt]
    k_nz = _fixed_point(lambda k: _nonzero_outputs(body, b_nz + k)[:nk], k_nz)
    y_nz = _nonzero_outputs(body, b_nz + k_nz)[nk:]
    j = jvp(body, b_nz + k_nz)
    n_in, n_out = len(body.inputs), len(body.outputs)
    t_in = iter(j.inputs[n_in:])
    t_for = [next(t_in) if w else None for w in b_nz + k_nz]
    inputs = (list(j.inputs[:nbc]) + [t for t in t_for[:nbc] if t is not None] + list(j.inputs[nbc:n_in])
              + [t for t in t_for[nbc:] if t is not None])
    p_out, t_out = j.outputs[:n_out], j.outputs[n_out:]
    outputs = (list(p_out[:nk]) + [t for t, z in zip(t_out[:nk], k_nz) if z]
               + list(p_out[nk:]) + [t for t, z in zip(t_out[nk:], y_nz) if z])
    new_body = Program(tuple(inputs), j.eqns, tuple(outputs), j.constvars, j.constvals, name=body.name)
    # the condition reads the primal carry only: its tangent carries are extra, unread inputs
    tangent_vars = [Var(c.ssa.type if isinstance(c, Tracer) else c.type) for c, z in zip(carry, k_nz) if z]
    new_cond = Program(cond.inputs + tuple(tangent_vars), cond.eqns, cond.outputs, name=cond.name)

    def tangent(t, p):
        return lax.zeros(p.ssa.type if isinstance(p, Tracer) else p.type) if isinstance(t, Zero) else t

    outs = make_while(new_cond, new_body, cc, list(bc) + [t for t, z in zip(bct, b_nz) if z],
                      list(carry) + [tangent(t, p) for t, p, z in zip(kt, carry, k_nz) if z], num_ys + sum(y_nz))
    nkt = nk + sum(k_nz)
    primal_out = outs[:nk] + outs[nkt:nkt + num_ys]
    k_it, y_it = iter(outs[nk:nkt]), iter(outs[nkt + num_ys:])
    return tuple(primal_out), tuple(
        [next(k_it) if z else Zero(o.ssa.type) for o, z in zip(outs[:nk], k_nz)]
        + [next(y_it) if z else Zero(o.ssa.type) for o, z in zip(outs[nkt:nkt + num_ys], y_nz)])


jvp_rules[while_p] = _while_jvp


def _while_unknown(eqn: Eqn, unknown_inputs: list[bool]) -> list[bool]:
    """Which results partial evaluation finds unknown: the carries a fixed point marks, and the values
    recorded from them; all of them when the condition reads an unknown value (the number of steps
    is unknown then)."""
    p = eqn.params
    cond, body, ncc, nbc = p["cond"], p["body"], p["num_cond_consts"], p["num_body_consts"]
    nk = len(body.inputs) - nbc
    cc_u, bc_u, k_u = unknown_inputs[:ncc], unknown_inputs[ncc:ncc + nbc], unknown_inputs[ncc + nbc:]
    k_u = _fixed_point(lambda k: _unknown_outputs(body, bc_u + k)[:nk], k_u)
    if _unknown_outputs(cond, cc_u + k_u)[0]:
        return [True] * len(eqn.outputs)
    return k_u + _unknown_outputs(body, bc_u + k_u)[nk:]


def _while_partial_eval(eqn: Eqn, unknown_inputs: list[bool]):
    """A while loop splits into a known while loop, which also counts its steps and records each step's
    residuals in stacks (Python lists), and an unknown scan over that many steps reading them (whose
    transpose runs them backwards). For ``x = sin(x)`` while ``x > 0.1``, with ``x_dot`` unknown::

        x, steps, c_steps = while[...] x0, 0          x_dot = scan[length=None] steps, x0_dot, c_steps
          body: x' = sin x; c = cos x                   body: x_dot' = mul x_dot c
                steps' = steps + 1; record c

    Residuals that are the body's known consts are read by the scan as consts, not recorded. When
    the condition reads an unknown value the loop stays whole, on the unknown side."""
    p = eqn.params
    cond, body, ncc, nbc, ny = p["cond"], p["body"], p["num_cond_consts"], p["num_body_consts"], p["num_ys"]
    nk = len(body.inputs) - nbc
    out_u = _while_unknown(eqn, unknown_inputs)
    cond_live, cond_used = _live_inputs(cond, [True])
    cc_u, bc_u = unknown_inputs[:ncc], unknown_inputs[ncc:ncc + nbc]
    k_u, y_u = out_u[:nk], out_u[nk:]
    if all(out_u) or any(u and used for u, used in zip(cc_u + k_u, cond_used)):
        return [], [eqn], out_u
    split = pe.partial_eval(body, bc_u + k_u, k_u + y_u)
    known, unknown = split.known, split.unknown
    residuals, remat = _rematerialize_views(known, unknown.inputs[:split.n_residuals])
    n_known_out = len(known.outputs) - split.n_residuals
    nkk = nk - sum(k_u)  # known carries
    body_consts = {id(v): a for v, a in zip(body.inputs[:nbc], eqn.inputs[ncc:ncc + nbc])}
    const_res = [r for r in residuals if id(r) in body_consts]
    step_res = [r for r in residuals if id(r) not in body_consts]
    i64 = ArrayType((), np.dtype(np.int64))
    step, next_step, steps = Var(i64, "steps"), Var(i64), Var(i64, "steps")
    from pullback.primitives import elementwise as ew

    counting = Eqn(ew.add_p, (step, Literal.of(1, np.int64)), (next_step,), Params(), eqn.source)
    known_body = Program(known.inputs + (step,), known.eqns + (counting,),
                         known.outputs[:nkk] + (next_step,) + known.outputs[nkk:n_known_out] + tuple(step_res),
                         name=f"{body.name}_known")
    known_cond = Program(tuple(v for v, u in zip(cond.inputs, cc_u + k_u) if not u) + (Var(i64),), cond_live.eqns,
                         cond_live.outputs, name=cond.name)
    cs, bs, ks = eqn.inputs[:ncc], eqn.inputs[ncc:ncc + nbc], eqn.inputs[ncc + nbc:]
    outs_k, outs_y = eqn.outputs[:nk], eqn.outputs[nk:]
    stacks = [Var(StackType(r.type), f"{r.hint}_steps" if r.hint else "") for r in step_res]
    known_eqn = Eqn(while_p, tuple(a for a, u in zip(cs, cc_u) if not u) + tuple(a for a, u in zip(bs, bc_u) if not u)
                    + tuple(a for a, u in zip(ks, k_u) if not u) + (Literal.of(0, np.int64),),
                    tuple(v for v, u in zip(outs_k, k_u) if not u) + (steps,)
                    + tuple(v for v, u in zip(outs_y, y_u) if not u) + tuple(stacks),
                    Params({"cond": known_cond, "body": known_body, "num_cond_consts": ncc - sum(cc_u),
                            "num_body_consts": nbc - sum(bc_u), "num_ys": ny - sum(y_u) + len(step_res)}),
                    eqn.source)
    ubc, uk = _split(unknown.inputs[split.n_residuals:], sum(bc_u), sum(k_u))[:2]
    unknown_body = Program(tuple(const_res) + tuple(ubc) + tuple(uk) + tuple(step_res), tuple(remat) + unknown.eqns,
                           unknown.outputs, name=f"{body.name}_unknown")
    unknown_eqn = Eqn(scan_p, (steps,) + tuple(body_consts[id(r)] for r in const_res)
                      + tuple(a for a, u in zip(bs, bc_u) if u) + tuple(a for a, u in zip(ks, k_u) if u)
                      + tuple(stacks),
                      tuple(v for v, u in zip(outs_k, k_u) if u) + tuple(v for v, u in zip(outs_y, y_u) if u),
                      Params({"body": unknown_body, "length": None, "reverse": False,
                              "num_consts": len(const_res) + sum(bc_u), "num_carry": sum(k_u)}),
                      eqn.source)
    return [known_eqn], [unknown_eqn], out_u


pe.partial_eval_rules[while_p] = _while_partial_eval
_MASKS[while_p] = _while_unknown


def _while_dce(eqn: Eqn, used: list[bool]) -> Eqn | None:
    """Unused records go, and the carries that neither the condition nor a used result (or an effect,
    such as a draw) reads, step after step."""
    p = eqn.params
    cond, body, ncc, nbc = p["cond"], p["body"], p["num_cond_consts"], p["num_body_consts"]
    nk = len(body.inputs) - nbc
    cond_live, cond_in = _live_inputs(cond, [True])
    y_live = list(used[nk:])
    k_live = _fixed_point(lambda k: _live_inputs(body, k + y_live)[1][nbc:],
                          [u or c for u, c in zip(used[:nk], cond_in[ncc:])])
    pruned, body_in = _live_inputs(body, k_live + y_live)
    cc_keep, bc_keep = cond_in[:ncc], body_in[:nbc]
    if all(k_live) and all(y_live) and all(cc_keep) and all(bc_keep):
        if pruned.eqns == body.eqns and cond_live.eqns == cond.eqns:
            return eqn
        return Eqn(while_p, eqn.inputs, eqn.outputs, Params({**p, "cond": Program(
            cond.inputs, cond_live.eqns, cond_live.outputs, name=cond.name), "body": Program(
            body.inputs, pruned.eqns, pruned.outputs, name=body.name)}), eqn.source)
    new_cond = Program(tuple(v for v, k in zip(cond.inputs, cc_keep + k_live) if k), cond_live.eqns,
                       cond_live.outputs, name=cond.name)
    new_body = Program(tuple(v for v, k in zip(body.inputs, bc_keep + k_live) if k), pruned.eqns, pruned.outputs,
                       name=body.name)
    return Eqn(while_p, tuple(a for a, k in zip(eqn.inputs, cc_keep + bc_keep + k_live) if k),
               tuple(v for v, k in zip(eqn.outputs, k_live + y_live) if k),
               Params({**p, "cond": new_cond, "body": new_body, "num_cond_consts": sum(cc_keep),
                       "num_body_consts": sum(bc_keep), "num_ys": sum(y_live)}), eqn.source)


dce_.dce_rules[while_p] = _while_dce


# --- batching ---------------------------------------------------------------------------------


def _while_batch(args, dims, *, cond: Program, body: Program, num_cond_consts: int, num_body_consts: int,
                 num_ys: int):
    """An unbatched condition: one loop over batched values. A batched one: the loop runs while
    any element's condition holds, and an element whose condition fails keeps its carry (a
    ``select`` per step), as JAX does; its records go on (the steps past its own are never read:
    see ``_scan_batch_counts``)."""
    size = batch_size(args, dims)
    ncc, nbc = num_cond_consts, num_body_consts
    nk = len(args) - ncc - nbc
    cb = [d is not None for d in dims[:ncc]]
    bb = [d is not None for d in dims[ncc:ncc + nbc]]
    kb = _fixed_point(lambda k: _depends(body, bb + k)[:nk], [d is not None for d in dims[ncc + nbc:]])
    pred_batched = _depends(cond, cb + kb)[0]
    if pred_batched:
        kb = [True] * len(kb)
    yb = [True] * num_ys if pred_batched else _depends(body, bb + kb)[nk:]
    args = [lax.full((), a.value, a.dtype) if isinstance(a, Literal) else a for a in args]  # (a step count's 0)
    operands = [at_front(a, d, size) if (d is not None or (i >= ncc + nbc and kb[i - ncc - nbc])) else a
                for i, (a, d) in enumerate(zip(args, dims))]
    new_cond = _batched_body(cond, cb + kb, [pred_batched], size)
    new_body = _batched_body(body, bb + kb, kb + yb, size)
    if not pred_batched:
        outs = bind(while_p, *operands, cond=new_cond, body=new_body, num_cond_consts=ncc, num_body_consts=nbc,
                    num_ys=num_ys)
        return outs, tuple([0 if b else None for b in kb] + [1 if b else None for b in yb])
    cc_types = [a.type for a in new_cond.inputs[:ncc]]
    carry_types = [a.type for a in new_body.inputs[nbc:]]
    any_cond = _closed_program(cc_types + carry_types,
                               lambda xs: [bind(red.reduce_or_p, inline(new_cond, xs)[0], axes=(0,))], cond.name)

    def step(xs):
        cc, bc, carry = xs[:ncc], xs[ncc:ncc + nbc], xs[ncc + nbc:]
        (going,) = inline(new_cond, cc + carry)
        new = inline(new_body, bc + carry)
        return ([lax.select(lax.broadcast_in_dim(going, c.shape, (0,)), n, c) for n, c in zip(new[:nk], carry)]
                + list(new[nk:]))

    selecting = _closed_program(cc_types + [a.type for a in new_body.inputs[:nbc]] + carry_types, step, body.name,
                                [v.hint for v in (*new_cond.inputs[:ncc], *new_body.inputs)])
    outs = bind(while_p, *operands[:ncc], *operands, cond=any_cond, body=selecting, num_cond_consts=ncc,
                num_body_consts=ncc + nbc, num_ys=num_ys)
    return outs, (0,) * nk + (1,) * num_ys
batch_rules[while_p] = _while_batch
