"""Structured control flow: ``scan``, an equation whose body is a typed Program run once per step.

Operands are ``consts`` (read by every step), the initial ``carry`` and ``xs`` (arrays whose
leading axis of ``length`` is sliced, one slice per step). The body maps
``(*consts, *carry, *x) -> (*carry, *y)``; the equation's outputs are the final carry and the
``y`` of every step, stacked along a new leading axis. The body is closed: it reads nothing but
its inputs (tracing turns captured arrays and enclosing tracers into consts).

The transforms treat a scan as a whole and recurse into its body:

- JVP: the body's JVP, with the tangents of consts, carry and xs beside their primals; the
  carry tangents that can be nonzero are found by a fixed point.
- Partial evaluation: the body splits into a known loop, which also stacks the per-step
  residuals as extra ``y`` outputs (kept by the printed code in an array preallocated once, or in a
  list of the steps' arrays: see ``codegen._listed_stacks``), and an unknown
  loop reading them as extra ``xs``; residuals that are consts stay consts.
- Transposition: the body, simplified (duplicates merged, structure such as a triangular tangent
  used: no triangle of it taken per solve), transposed, run in the opposite direction; cotangents of linear
  consts (loop-invariant inputs, such as a Kalman filter's A) are summed in extra carries, never
  stacked.
- Dead code: unused ``y`` outputs, carries nothing live reads, and unused operands are removed.

Loop-invariant equations are hoisted out of a body when a scan is built (``make_scan``), so
residuals that depend on consts alone are computed once.

``while`` runs its body while its condition holds; the number of steps is known only when it runs.
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

from collections.abc import Callable, Sequence

import numpy as np

from pullback.ad import dce as dce_
from pullback.ad import jvp as jvp_
from pullback.ad import partial_eval as pe
from pullback.ad.cse import cse
from pullback.ad.jvp import Zero, jvp, jvp_rules
from pullback.ad.transpose import Linear, cotangent_hint, transpose, transpose_rules
from pullback.errors import TracingError
from pullback.ir.core import (
    WITH_BODIES,
    Eqn,
    Literal,
    Params,
    Primitive,
    Program,
    ShapeError,
    Var,
    effectful,
    shape_rules,
)
from pullback.ir.tracer import Tracer, bind, current_builder, inline, located, new_trace, rename, tracing
from pullback.ir.types import ArrayType, StackType, is_inexact

scan_p = Primitive("scan", multiple_results=True)
WITH_BODIES.add(scan_p)


def _stacked(t: ArrayType | StackType, length: int | None) -> ArrayType | StackType:
    """The type of ``length`` steps' values of type ``t`` stacked: an array with a leading step axis, or a
    stack (a Python list) where the number of steps is known at run time only, or the values are stacks."""
    if length is None or isinstance(t, StackType):
        return StackType(t)
    return ArrayType((length, *t.shape), t.dtype)


def _sliced(t: ArrayType | StackType, length: int | None) -> ArrayType | StackType:
    """One step's value of an ``xs`` operand of type ``t``."""
    if isinstance(t, StackType):
        return t.elem
    if length is None or t.shape[:1] != (length,):
        raise ShapeError(f"scan over {'a number of steps known at run time' if length is None else length} "
                         f"got an xs operand of type {t}" + (" (it takes stacks)" if length is None else ""))
    return ArrayType(t.shape[1:], t.dtype)


def _counted(args: Sequence, length: int | None) -> tuple[list, list]:
    """A scan's operands split into its step count (a leading operand where ``length`` is None: the
    steps a while loop ran, an integer, or a stack as long as the steps) and the others."""
    n = 1 if length is None else 0
    return list(args[:n]), list(args[n:])


def _scan_shape(*args, body: Program, length: int | None, reverse: bool, num_consts: int, num_carry: int):
    del reverse
    count, args = _counted(args, length)
    if count and not isinstance(count[0].type, StackType) and (count[0].type.shape != ()
                                                                or count[0].type.dtype.kind not in "iu"):
        raise ShapeError(f"scan: the step count must be an integer scalar or a stack, got {count[0].type}")
    consts, carry, xs = args[:num_consts], args[num_consts:num_consts + num_carry], args[num_consts + num_carry:]
    expected = tuple(a.type for a in consts) + tuple(a.type for a in carry) + tuple(
        _sliced(x.type, length) for x in xs)
    if body.in_types != expected:
        raise ShapeError(f"scan body takes {', '.join(map(str, body.in_types))}; "
                         f"operands give {', '.join(map(str, expected))}")
    if body.constvars:
        raise ShapeError("a scan body must be closed (no constants)")
    outs = body.out_types
    if outs[:num_carry] != tuple(a.type for a in carry):
        raise ShapeError(f"scan body returns a carry of types {', '.join(map(str, outs[:num_carry]))} "
                         f"for a carry of types {', '.join(str(a.type) for a in carry)}")
    return outs[:num_carry] + tuple(_stacked(t, length) for t in outs[num_carry:])


shape_rules[scan_p] = _scan_shape


# --- building scans ------------------------------------------------------------------------


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


def _subst(a, env):
    return env.get(id(a), a) if isinstance(a, Var) else a


def make_scan(body: Program, consts: Sequence, carry: Sequence, xs: Sequence, *, length: int | None,
              reverse: bool, count=None) -> list:
    """Bind a scan in the current trace, after hoisting the body's loop-invariant equations (those
    reading consts and literals alone) into the enclosing trace, and dropping constants the body
    does not read. Returns the outputs: final carry, then stacked ys. ``length=None``: ``count``
    steps, a value known at run time (the steps a while loop ran), over stacks."""
    body, consts = hoist_invariant(body, consts)
    outs = bind(scan_p, *([count] if length is None else []), *consts, *carry, *xs,
                body=body, length=length, reverse=reverse, num_consts=len(consts), num_carry=len(carry))
    return list(outs)


def hoist_invariant(body: Program, consts: Sequence) -> tuple[Program, list]:
    """``body`` (its leading inputs ``consts``) with its loop-invariant equations (those reading consts and
    literals alone) bound in the enclosing trace instead, and the constants it does not read dropped:
    the new body and the values for its leading inputs."""
    body, values = close(body)
    consts = list(values) + list(consts)
    n = len(consts)
    invariant: dict[int, object] = {id(v): c for v, c in zip(body.inputs[:n], consts)}
    kept, moved = split_invariant(body.eqns, body.inputs[:n])
    for eqn in moved:
        outs = bind(eqn.prim, *(_subst(a, invariant) for a in eqn.inputs), **eqn.params)
        for v, o in zip(eqn.outputs, outs if eqn.prim.multiple_results else (outs,)):
            invariant[id(v)] = o
    used = {id(a) for e in kept for a in e.inputs} | {id(a) for a in body.outputs}
    hoisted = [v for e in moved for v in e.outputs if id(v) in used]
    const_vars = [v for v in body.inputs[:n] if id(v) in used] + hoisted
    # a body output that is invariant (or a const) is still returned by the body, read from a const input
    body = Program(tuple(const_vars) + body.inputs[n:], tuple(kept), body.outputs, name=body.name)
    return body, [invariant[id(v)] for v in const_vars]


def split_invariant(eqns: Sequence[Eqn], consts: Sequence[Var]) -> tuple[list[Eqn], list[Eqn]]:
    """A loop body's equations split into those that vary and those that read literals, ``consts``
    and what such equations make alone (loop invariants, to compute once before the loop), in order.
    An effect (a draw) varies: each step draws anew."""
    invariant = {id(v) for v in consts}
    kept, moved = [], []
    for eqn in eqns:
        if all(isinstance(a, Literal) or id(a) in invariant for a in eqn.inputs) and not effectful(eqn):
            moved.append(eqn)
            invariant.update(id(v) for v in eqn.outputs)
        else:
            kept.append(eqn)
    return kept, moved


def _split(seq, num_consts: int, num_carry: int):
    seq = list(seq)
    return seq[:num_consts], seq[num_consts:num_consts + num_carry], seq[num_consts + num_carry:]


# --- JVP -----------------------------------------------------------------------------------


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


def _scan_jvp(primals, tangents, *, body: Program, length: int | None, reverse: bool, num_consts: int,
              num_carry: int):
    count, primals = _counted(primals, length)
    _, tangents = _counted(tangents, length)  # an integer's: zero
    nz = [not isinstance(t, Zero) for t in tangents]
    c_nz, k_nz, x_nz = _split(nz, num_consts, num_carry)
    # a carry's tangent is nonzero if its initial value's is, or if the body makes it so
    k_nz = _fixed_point(lambda k: _nonzero_outputs(body, c_nz + k + x_nz)[:num_carry], k_nz)
    y_nz = _nonzero_outputs(body, c_nz + k_nz + x_nz)[num_carry:]
    wrt = c_nz + k_nz + x_nz
    j = jvp(body, wrt)
    n_in, n_out = len(body.inputs), len(body.outputs)
    p_in, t_in = list(j.inputs[:n_in]), iter(j.inputs[n_in:])
    t_for = [next(t_in) if w else None for w in wrt]
    pc, pk, px = _split(p_in, num_consts, num_carry)
    tc, tk, tx = _split(t_for, num_consts, num_carry)
    inputs = (pc + [t for t in tc if t is not None] + pk + [t for t in tk if t is not None]
              + px + [t for t in tx if t is not None])
    p_out, t_out = list(j.outputs[:n_out]), list(j.outputs[n_out:])
    outputs = (p_out[:num_carry] + [t for t, z in zip(t_out[:num_carry], k_nz) if z]
               + p_out[num_carry:] + [t for t, z in zip(t_out[num_carry:], y_nz) if z])
    new_body = Program(tuple(inputs), j.eqns, tuple(outputs), j.constvars, j.constvals, name=body.name)

    from pullback.primitives import lax

    def tangent(t, p):
        return lax.zeros(p.ssa.type if isinstance(p, Tracer) else p.type) if isinstance(t, Zero) else t

    cs, ks, xs = _split(primals, num_consts, num_carry)
    cts, kts, xts = _split(tangents, num_consts, num_carry)
    outs = make_scan(new_body,
                     cs + [t for t, z in zip(cts, c_nz) if z],
                     ks + [tangent(t, p) for t, p, z in zip(kts, ks, k_nz) if z],
                     xs + [t for t, z in zip(xts, x_nz) if z], length=length, reverse=reverse,
                     count=count[0] if count else None)
    outs = iter(outs)
    carry = [next(outs) for _ in range(num_carry)]
    carry_t = [next(outs) if z else Zero(c.ssa.type) for c, z in zip(carry, k_nz)]
    ys = [next(outs) for _ in y_nz]
    ys_t = [next(outs) if z else Zero(y.ssa.type) for y, z in zip(ys, y_nz)]
    return tuple(carry + ys), tuple(carry_t + ys_t)


jvp_rules[scan_p] = _scan_jvp


# --- partial evaluation ---------------------------------------------------------------------


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


def _scan_unknown(eqn: Eqn, unknown_inputs: list[bool]) -> list[bool]:
    body, nc, nk = eqn.params["body"], eqn.params["num_consts"], eqn.params["num_carry"]
    count_u, unknown_inputs = _counted(unknown_inputs, eqn.params["length"])
    if any(count_u):  # the number of steps is unknown: so is everything
        return [True] * len(eqn.outputs)
    c_u, k_u, x_u = _split(unknown_inputs, nc, nk)
    k_u = _fixed_point(lambda k: _unknown_outputs(body, c_u + k + x_u)[:nk], k_u)
    return k_u + _unknown_outputs(body, c_u + k_u + x_u)[nk:]


def _rematerialize_views(known: Program, residuals) -> tuple[list[Var], list[Eqn]]:
    """Residuals that are views (transposes, reshapes, diagonals, slices) of other known values are
    taken again in the unknown loop rather than stacked: the residual becomes what they view."""
    from pullback.backends.memory import makes_view

    defs = {id(v): e for e in known.eqns for v in e.outputs}
    out: dict[int, Var] = {}
    moved: dict[int, Eqn] = {}
    for r in residuals:
        a = r
        while (isinstance(a, Var) and id(a) in defs and len(defs[id(a)].inputs) == 1
               and makes_view(defs[id(a)].prim, defs[id(a)].inputs) and isinstance(defs[id(a)].inputs[0], Var)):
            moved.setdefault(id(defs[id(a)]), defs[id(a)])
            a = defs[id(a)].inputs[0]
        out.setdefault(id(a), a)
    order = {id(e): i for i, e in enumerate(known.eqns)}
    return list(out.values()), sorted(moved.values(), key=lambda e: order[id(e)])


def _scan_partial_eval(eqn: Eqn, unknown_inputs: list[bool]):
    p = eqn.params
    body, length, nc, nk = p["body"], p["length"], p["num_consts"], p["num_carry"]
    out_u = _scan_unknown(eqn, unknown_inputs)
    count, operands = _counted(eqn.inputs, length)
    count_u, unknown_inputs = _counted(unknown_inputs, length)
    if any(count_u):
        return [], [eqn], out_u
    c_u, _, x_u = _split(unknown_inputs, nc, nk)
    k_u, y_u = out_u[:nk], out_u[nk:]
    split = pe.partial_eval(body, c_u + k_u + x_u, k_u + y_u)
    known, unknown = split.known, split.unknown
    residuals, remat = _rematerialize_views(known, unknown.inputs[:split.n_residuals])
    unknown = Program(unknown.inputs, tuple(remat) + unknown.eqns, unknown.outputs, name=unknown.name)
    n_known_out = len(known.outputs) - split.n_residuals
    # residuals that are the body's known consts stay consts; those that are known slices of xs are
    # read from the same xs; the others are stacked per step
    body_consts = {id(v): a for v, a in zip(body.inputs[:nc], operands[:nc])}
    body_xs = {id(v): a for v, a in zip(body.inputs[nc + nk:], operands[nc + nk:])}
    const_res = [r for r in residuals if id(r) in body_consts]
    xs_res = [r for r in residuals if id(r) in body_xs]
    step_res = [r for r in residuals if id(r) not in body_consts and id(r) not in body_xs]
    known_body = Program(known.inputs, known.eqns, known.outputs[:n_known_out] + tuple(step_res),
                         name=f"{body.name}_known")
    cs, ks, xs = _split(operands, nc, nk)
    outs_k, outs_y = eqn.outputs[:nk], eqn.outputs[nk:]
    stacks = [Var(_stacked(r.type, length), f"{r.hint}_steps" if r.hint else "") for r in step_res]
    known_eqn = Eqn(scan_p, tuple(count) + tuple(a for a, u in zip(cs, c_u) if not u)
                    + tuple(a for a, u in zip(ks, k_u) if not u) + tuple(a for a, u in zip(xs, x_u) if not u),
                    tuple(v for v, u in zip(outs_k, k_u) if not u) + tuple(v for v, u in zip(outs_y, y_u) if not u)
                    + tuple(stacks),
                    Params({**p, "body": known_body, "num_consts": nc - sum(c_u), "num_carry": nk - sum(k_u)}),
                    eqn.source)
    unknown_body_inputs = unknown.inputs[split.n_residuals:]  # the unknown consts, carry, xs, in order
    uc, uk, ux = _split(unknown_body_inputs, sum(c_u), sum(k_u))
    unknown_body = Program(tuple(const_res) + tuple(uc) + tuple(uk) + tuple(step_res) + tuple(xs_res) + tuple(ux),
                           unknown.eqns, unknown.outputs, name=f"{body.name}_unknown")
    unknown_eqn = Eqn(scan_p, tuple(count) + tuple(body_consts[id(r)] for r in const_res)
                      + tuple(a for a, u in zip(cs, c_u) if u) + tuple(a for a, u in zip(ks, k_u) if u)
                      + tuple(stacks) + tuple(body_xs[id(r)] for r in xs_res) + tuple(a for a, u in zip(xs, x_u) if u),
                      tuple(v for v, u in zip(outs_k, k_u) if u) + tuple(v for v, u in zip(outs_y, y_u) if u),
                      Params({**p, "body": unknown_body, "num_consts": len(const_res) + sum(c_u),
                              "num_carry": sum(k_u)}),
                      eqn.source)
    # a known carry whose initial value is unknown cannot happen: k_u covers the inputs
    return [known_eqn], [unknown_eqn], k_u + y_u


pe.partial_eval_rules[scan_p] = _scan_partial_eval
_MASKS: dict[Primitive, object] = {scan_p: _scan_unknown}


# --- transposition ---------------------------------------------------------------------------


def _scan_transpose(cts, *args, body: Program, length: int | None, reverse: bool, num_consts: int,
                    num_carry: int):
    from pullback.opt.simplify import simplify  # simplify imports this module
    from pullback.primitives import lax

    count, args = _counted(args, length)
    cs, ks, xs = _split(args, num_consts, num_carry)
    c_lin = [isinstance(a, Linear) for a in cs]
    x_lin = [isinstance(a, Linear) for a in xs]
    # every carry is linear in the loop; a carry whose initial value is not (a zero tangent made before the
    # loop, hence known) gets no cotangent
    # simplified first (duplicates merged, structure used): a factor read by several solves then gives one
    # tangent triangle (tril(dL)), or none when dL is triangular already (a Cholesky factor's tangent), so
    # the transposed step takes no triangle of each solve's cotangent
    body_t = transpose(cse(simplify(body)), c_lin + [True] * num_carry + x_lin)
    ct_carry = [lax.zeros(c.type) if isinstance(c, Zero) else c for c in cts[:num_carry]]
    ct_ys = cts[num_carry:]  # a zero one is made inside the step (a stack's cannot be made outside)
    y_zero = [isinstance(c, Zero) for c in ct_ys]
    ct_ys = [c for c in ct_ys if not isinstance(c, Zero)]
    res_c = [a for a, lin in zip(cs, c_lin) if not lin]
    res_x = [a for a, lin in zip(xs, x_lin) if not lin]
    lin_c_types = [a.type for a, lin in zip(cs, c_lin) if lin]
    n_rc, n_rx = len(res_c), len(res_x)
    body_t, t_values = close(body_t)
    n_tv = len(t_values)

    # the transposed step: (consts..., ct_carry..., acc..., res_x..., ct_y...) -> (ct_carry..., acc..., ct_x...)
    in_types = ([v.type for v in body_t.inputs[:n_tv + n_rc]] + [c.ssa.type for c in ct_carry] + lin_c_types
                + [v.type for v in body_t.inputs[n_tv + n_rc:n_tv + n_rc + n_rx]]
                + [_sliced(c.ssa.type, length) for c in ct_ys])
    ks_vars = body.inputs[num_consts:num_consts + num_carry]
    in_hints = ([v.hint for v in body_t.inputs[:n_tv + n_rc]] + [cotangent_hint(v.hint) for v in ks_vars]
                + [cotangent_hint(v.hint) + "_sum" if v.hint else ""
                   for v, lin in zip(body.inputs[:num_consts], c_lin) if lin]
                + [v.hint for v in body_t.inputs[n_tv + n_rc:n_tv + n_rc + n_rx]]
                + [cotangent_hint(a.hint) if isinstance(a, Var) else ""
                   for a, z in zip(body.outputs[num_carry:], y_zero) if not z])
    hints: dict[int, str] = {}
    where = current_builder().source  # the scan's own line, for the equations added here
    with new_trace() as builder:
        builder.source = where
        # residuals keep their Vars, so that the printed loops call them by the same names
        end = len(in_types) - len(ct_ys)
        same = list(range(n_tv + n_rc)) + list(range(end - n_rx, end))
        reused = dict(zip(same, body_t.inputs[:n_tv + n_rc + n_rx]))
        vs = [reused.get(i) or Var(t, h) for i, (t, h) in enumerate(zip(in_types, in_hints))]
        tr = [Tracer(v, builder) for v in vs]
        consts_t, rest = tr[:n_tv + n_rc], tr[n_tv + n_rc:]
        ctk, acc = rest[:num_carry], rest[num_carry:num_carry + len(lin_c_types)]
        rx, cty = rest[num_carry + len(lin_c_types):][:n_rx], rest[num_carry + len(lin_c_types) + n_rx:]
        cty_it = iter(cty)
        cty = [lax.zeros(_sliced(c.type, length)) if z else next(cty_it) for c, z in zip(cts[num_carry:], y_zero)]
        outs = inline(body_t, consts_t + rx + ctk + cty, hints)
        n_lc = len(lin_c_types)
        ct_lc, ct_k, ct_x = outs[:n_lc], outs[n_lc:n_lc + num_carry], outs[n_lc + num_carry:]
        new_acc = [lax.add(a, c) for a, c in zip(acc, ct_lc)]
        step_outs = tuple(builder.atom(o) for o in ct_k + new_acc + ct_x)
    step = rename(Program(tuple(vs), tuple(builder.eqns), step_outs, *builder.constants(),
                          name=f"{body.name}_transpose"), hints)
    zeros = [lax.zeros(t) for t in lin_c_types]
    outs = make_scan(step, list(t_values) + res_c, ct_carry + zeros, res_x + ct_ys, length=length,
                     reverse=not reverse, count=count[0] if count else None)
    ct_k_in, acc_out, ct_xs = outs[:num_carry], outs[num_carry:num_carry + len(zeros)], outs[num_carry + len(zeros):]
    acc_it, x_it = iter(acc_out), iter(ct_xs)
    return ([None] * len(count) + [next(acc_it) if lin else None for lin in c_lin]
            + [c if isinstance(k, Linear) else None for c, k in zip(ct_k_in, ks)]
            + [next(x_it) if lin else None for lin in x_lin])


transpose_rules[scan_p] = _scan_transpose


# --- dead code -------------------------------------------------------------------------------


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


def _scan_dce(eqn: Eqn, used: list[bool]) -> Eqn | None:
    p = eqn.params
    body, nc, nk = p["body"], p["num_consts"], p["num_carry"]
    k_live, y_live = list(used[:nk]), list(used[nk:])
    # a carry stays if its result is used, or a live output reads it
    k_live = _fixed_point(lambda k: _live_inputs(body, k + y_live)[1][nc:nc + nk], k_live)
    if not any(k_live) and not any(y_live):
        return None
    pruned, in_used = _live_inputs(body, k_live + y_live)
    keep_in = in_used[:nc] + k_live + in_used[nc + nk:]
    if all(keep_in) and all(k_live) and all(y_live):
        return eqn if pruned.eqns == body.eqns else Eqn(eqn.prim, eqn.inputs, eqn.outputs,
                                                         Params({**p, "body": pruned}), eqn.source)
    new_body = Program(tuple(v for v, k in zip(body.inputs, keep_in) if k), pruned.eqns, pruned.outputs,
                       name=body.name)
    count, operands = _counted(eqn.inputs, p["length"])
    return Eqn(scan_p, tuple(count) + tuple(a for a, k in zip(operands, keep_in) if k),
               tuple(v for v, lv in zip(eqn.outputs, k_live + y_live) if lv),
               Params({**p, "body": new_body, "num_consts": sum(keep_in[:nc]), "num_carry": sum(k_live)}),
               eqn.source)


dce_.dce_rules[scan_p] = _scan_dce


# --- simplification ---------------------------------------------------------------------------


def invariant_carries(eqn: Eqn, ins: tuple) -> tuple[Eqn, dict[int, object]] | None:
    """The scan with the carries its body returns unchanged (a cotangent seed passed through the
    backward loop) made consts, and the map from their final values to their initial ones."""
    p = eqn.params
    body, nc, nk = p["body"], p["num_consts"], p["num_carry"]
    same = [k for k in range(nk) if body.outputs[k] is body.inputs[nc + k]]
    if not same:
        return None
    count, ins = _counted(ins, p["length"])
    keep = [k for k in range(nk) if k not in same]
    order = list(range(nc)) + [nc + k for k in same] + [nc + k for k in keep] + list(range(nc + nk, len(ins)))
    new_body = Program(tuple(body.inputs[i] for i in order), body.eqns,
                       tuple(body.outputs[k] for k in keep) + body.outputs[nk:], name=body.name)
    new = Eqn(scan_p, tuple(count) + tuple(ins[i] for i in order),
              tuple(eqn.outputs[k] for k in keep) + eqn.outputs[nk:],
              Params({**p, "body": new_body, "num_consts": nc + len(same), "num_carry": len(keep)}), eqn.source)
    return new, {id(eqn.outputs[k]): ins[nc + k] for k in same}


def with_fills(eqn: Eqn, ins: tuple, fill_of) -> Eqn | None:
    """The scan with its consts and xs that are fills (a broadcast literal, such as the ones seeding a
    sum's cotangent) made inside the body instead: no array of ones is stacked, sliced and read."""
    from pullback.primitives import structural as st

    p = eqn.params
    body, nc, nk = p["body"], p["num_consts"], p["num_carry"]
    count, ins = _counted(ins, p["length"])
    filled = [i for i, a in enumerate(ins) if (i < nc or i >= nc + nk) and isinstance(a, Var)
              and isinstance(a.type, ArrayType) and fill_of(a) is not None]
    if not filled:
        return None
    made = tuple(Eqn(st.broadcast_in_dim_p, (fill_of(ins[i]),), (body.inputs[i],),
                     Params({"shape": body.inputs[i].type.shape, "broadcast_dimensions": ()})) for i in filled)
    keep = [i for i in range(len(ins)) if i not in filled]
    new_body = Program(tuple(body.inputs[i] for i in keep), made + body.eqns, body.outputs, name=body.name)
    return Eqn(scan_p, tuple(count) + tuple(ins[i] for i in keep), eqn.outputs,
               Params({**p, "body": new_body, "num_consts": sum(1 for i in keep if i < nc)}), eqn.source)


# --- checkpoint: a sub-program whose intermediates are recomputed, not kept ---------------------

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


# --- while: a loop whose number of steps depends on values --------------------------------------

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

    from pullback.primitives import lax

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


# --- cond: one of several branches, chosen by an integer or boolean index ------------------------

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


def zeros_like_stack(x):
    """A stack of zeros as long as the stack ``x``, each entry shaped as its (a stack's tangent that is
    zero, where one must be made: a scan over ``x``'s steps)."""
    from pullback.primitives import lax

    elem = x.ssa.type.elem
    body = _closed_program([elem], lambda e: [zeros_like_stack(e[0]) if isinstance(elem, StackType)
                                              else lax.zeros(elem)], "zeros")
    return make_scan(body, [], [], [x], length=None, reverse=False, count=x)[0]


jvp_.zeros_of[StackType] = zeros_like_stack


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
    from pullback.primitives import lax

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


# --- batching ----------------------------------------------------------------------------------
# A body is batched with the batching transform itself; which of its values carry the batch axis
# follows from which inputs do (a carry is batched when its initial value or any step makes it so:
# a fixed point, as for nonzero tangents). A batched value's batch axis is first (after the step
# axis for stacked xs and ys).

from pullback.ad.batch import (  # noqa: E402
    at_front,
    batch,
    batch_rules,
    batch_size,
    broadcasts_of,
    moveaxis,
)
from pullback.primitives import lax  # noqa: E402
from pullback.primitives import reductions as red  # noqa: E402


def _batched_body(body: Program, batched_in: Sequence[bool], batched_out: Sequence[bool], size: int) -> Program:
    b = batch(body, [0 if x else None for x in batched_in], size, [0 if x else None for x in batched_out])
    return Program(b.inputs, b.eqns, b.outputs, b.constvars, b.constvals, name=body.name)


def _scan_batch(args, dims, *, body: Program, length: int | None, reverse: bool, num_consts: int, num_carry: int):
    size = batch_size(args, dims)
    count, args = _counted(args, length)
    count_dim, dims = _counted(dims, length)
    if any(d is not None for d in count_dim) and not isinstance(count[0].ssa.type, StackType):
        return _scan_batch_counts(count[0], count_dim[0], args, dims, size, body=body, reverse=reverse,
                                  num_consts=num_consts, num_carry=num_carry)
    consts, carry, xs = _split(args, num_consts, num_carry)
    cd, kd, xd = _split(dims, num_consts, num_carry)
    cb, xb = [d is not None for d in cd], [d is not None for d in xd]
    kb = _fixed_point(lambda k: _depends(body, cb + k + xb)[:num_carry], [d is not None for d in kd])
    yb = _depends(body, cb + kb + xb)[num_carry:]
    new_body = _batched_body(body, cb + kb + xb, kb + yb, size)
    operands = ([at_front(c, d, size) if d is not None else c for c, d in zip(consts, cd)]
                + [at_front(c, d, size) if b else c for c, d, b in zip(carry, kd, kb)]
                + [moveaxis(x, d, 1) if d is not None else x for x, d in zip(xs, xd)])
    outs = bind(scan_p, *count, *operands, body=new_body, length=length, reverse=reverse, num_consts=num_consts,
                num_carry=num_carry)
    return outs, tuple([0 if b else None for b in kb] + [1 if b else None for b in yb])


def _checkpoint_batch(args, dims, *, body: Program):
    size = batch_size(args, dims)
    batched = [d is not None for d in dims]
    out = _depends(body, batched)
    outs = bind(checkpoint_p, *(at_front(a, d, size) if d is not None else a for a, d in zip(args, dims)),
                body=_batched_body(body, batched, out, size))
    return outs, tuple(0 if b else None for b in out)


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


def _closed_program(in_types: Sequence[ArrayType], fn, name: str, hints: Sequence[str] = ()) -> Program:
    """The program of ``fn`` on tracers of ``in_types`` (its outputs: a list of tracers); ``hints``
    names its inputs."""
    with new_trace() as builder:
        inputs = tuple(Var(t, h) for t, h in zip(in_types, [*hints, *[""] * (len(in_types) - len(hints))]))
        outs = fn([Tracer(v, builder) for v in inputs])
        outputs = tuple(builder.atom(o) for o in outs)
    return Program(inputs, tuple(builder.eqns), outputs, name=name)


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


def _scan_batch_counts(count, count_dim: int, args, dims, size: int, *, body: Program, reverse: bool,
                       num_consts: int, num_carry: int):
    """A scan over the steps of a while loop whose condition was batched: each element ran its own
    number of steps (``count``, batched), and the stacks hold as many steps as the longest. The scan
    runs that many, and an element keeps its carry on the steps past its own count (a ``select`` per
    step, as the while loop did), so that what it computes there from the stacks' stale entries is
    never used."""
    count = moveaxis(count, count_dim, 0)
    steps = lax.reduce_max(count, (0,))
    consts, carry, xs = _split(args, num_consts, num_carry)
    cd, _, xd = _split(dims, num_consts, num_carry)
    cb, xb = [d is not None for d in cd], [d is not None for d in xd]
    new_body = _batched_body(body, cb + [True] * num_carry + xb, [True] * len(body.outputs), size)
    i64 = ArrayType((), np.dtype(np.int64))
    const_types = [v.type for v in new_body.inputs[:num_consts]]
    carry_types = [v.type for v in new_body.inputs[num_consts:num_consts + num_carry]]
    x_types = [v.type for v in new_body.inputs[num_consts + num_carry:]]

    def step(vs):
        counts, cs, (t, *ks), xs_ = vs[0], vs[1:1 + num_consts], vs[1 + num_consts:2 + num_consts + num_carry], \
            vs[2 + num_consts + num_carry:]
        outs = inline(new_body, cs + ks + xs_)
        active = lax.lt(lax.broadcast_in_dim(t, (size,), ()), counts)
        kept = [lax.select(lax.broadcast_in_dim(active, k.shape, (0,)), n, k) for n, k in zip(outs[:num_carry], ks)]
        return [lax.sub(t, 1) if reverse else lax.add(t, 1), *kept, *outs[num_carry:]]

    masked = _closed_program([ArrayType((size,), count.dtype), *const_types, i64, *carry_types, *x_types], step,
                             body.name, ["steps", *(v.hint for v in new_body.inputs[:num_consts]), "step",
                                         *(v.hint for v in new_body.inputs[num_consts:])])
    first = lax.sub(steps, 1) if reverse else lax.full((), 0, np.int64)
    outs = make_scan(masked, [count, *[at_front(c, d, size) if d is not None else c for c, d in zip(consts, cd)]],
                     [first, *[at_front(k, d, size) for k, d in zip(carry, dims[num_consts:num_consts + num_carry])]],
                     [moveaxis(x, d, 1) if d is not None else x for x, d in zip(xs, xd)], length=None,
                     reverse=reverse, count=steps)
    return tuple(outs[1:]), (0,) * num_carry + (1,) * (len(outs) - 1 - num_carry)


def _broadcast_stack(x, size: int):
    """The stack ``x`` with each entry broadcast along a batch axis first: a scan over its steps."""
    elem = x.ssa.type.elem
    body = _closed_program([elem], lambda e: [at_front(e[0], None, size)], "broadcast")
    return make_scan(body, [], [], [x], length=None, reverse=False, count=x)[0]


broadcasts_of[StackType] = _broadcast_stack
batch_rules[scan_p] = _scan_batch
batch_rules[checkpoint_p] = _checkpoint_batch
batch_rules[cond_p] = _cond_batch
batch_rules[while_p] = _while_batch
