"""Structured control flow: ``scan``, an equation whose body is a typed Program run once per step.

Operands are ``consts`` (read by every step), the initial ``carry`` and ``xs`` (arrays whose
leading axis of ``length`` is sliced, one slice per step). The body maps
``(*consts, *carry, *x) -> (*carry, *y)``; the equation's outputs are the final carry and the
``y`` of every step, stacked along a new leading axis. The body is closed: it reads nothing but
its inputs (tracing turns captured arrays and enclosing tracers into consts). With ``length`` None the
number of steps is a leading operand known at run time, over stacks (a while loop's records); with
``bound`` as well, at most ``bound`` steps over arrays of ``bound`` rows, the ys zero past the steps run (a
shorter last block of ``checkpoint=True``, one loop with the others).

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pullback.ad import dce as dce_
from pullback.ad import jvp as jvp_
from pullback.ad import partial_eval as pe
from pullback.ad.batch import at_front, batch_rules, batch_size, broadcasts_of, moveaxis
from pullback.ad.cse import cse
from pullback.ad.jvp import Zero, jvp, jvp_rules
from pullback.ad.transpose import Linear, cotangent_hint, transpose, transpose_rules
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
    makes_view,
    shape_rules,
)
from pullback.ir.tracer import Tracer, bind, current_builder, inline, new_trace, rename
from pullback.ir.types import ArrayType, StackType
from pullback.primitives import lax
from pullback.primitives import structural as st
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
    expression_hint,
)

scan_p = Primitive("scan", multiple_results=True)
WITH_BODIES.add(scan_p)


def _stacked(t: ArrayType | StackType, length: int | None, bound: int | None = None) -> ArrayType | StackType:
    """The type of ``length`` steps' values of type ``t`` stacked: an array with a leading step axis, or a
    stack (a Python list) where the number of steps is known at run time only, or the values are stacks.
    A scan of a number of steps known at run time but at most ``bound`` stacks in an array of ``bound``."""
    rows = length if length is not None else bound
    if rows is None or isinstance(t, StackType):
        return StackType(t)
    return ArrayType((rows, *t.shape), t.dtype)


def _sliced(t: ArrayType | StackType, length: int | None, bound: int | None = None) -> ArrayType | StackType:
    """One step's value of an ``xs`` operand of type ``t``."""
    if isinstance(t, StackType):
        return t.elem
    rows = length if length is not None else bound
    if rows is None or t.shape[:1] != (rows,):
        raise ShapeError(f"scan over {'a number of steps known at run time' if length is None else length} "
                         f"got an xs operand of type {t}" + (" (it takes stacks)" if rows is None else ""))
    return ArrayType(t.shape[1:], t.dtype)


def _counted(args: Sequence, length: int | None) -> tuple[list, list]:
    """A scan's operands split into its step count (a leading operand where ``length`` is None: the
    steps a while loop ran, an integer, or a stack as long as the steps) and the others."""
    n = 1 if length is None else 0
    return list(args[:n]), list(args[n:])


def _scan_shape(*args, body: Program, length: int | None, reverse: bool, num_consts: int, num_carry: int,
                bound: int | None = None):
    del reverse
    count, args = _counted(args, length)
    if count and not isinstance(count[0].type, StackType) and (count[0].type.shape != ()
                                                                or count[0].type.dtype.kind not in "iu"):
        raise ShapeError(f"scan: the step count must be an integer scalar or a stack, got {count[0].type}")
    if bound is not None and (length is not None or bound < 0 or isinstance(count[0].type, StackType)):
        raise ShapeError(f"scan: a bound on the steps ({bound}) goes with a count of steps known at run time")
    consts, carry, xs = args[:num_consts], args[num_consts:num_consts + num_carry], args[num_consts + num_carry:]
    expected = tuple(a.type for a in consts) + tuple(a.type for a in carry) + tuple(
        _sliced(x.type, length, bound) for x in xs)
    if body.in_types != expected:
        raise ShapeError(f"scan body takes {', '.join(map(str, body.in_types))}; "
                         f"operands give {', '.join(map(str, expected))}")
    if body.constvars:
        raise ShapeError("a scan body must be closed (no constants)")
    outs = body.out_types
    if outs[:num_carry] != tuple(a.type for a in carry):
        raise ShapeError(f"scan body returns a carry of types {', '.join(map(str, outs[:num_carry]))} "
                         f"for a carry of types {', '.join(str(a.type) for a in carry)}")
    return outs[:num_carry] + tuple(_stacked(t, length, bound) for t in outs[num_carry:])


shape_rules[scan_p] = _scan_shape


# --- building scans ---------------------------------------------------------------------------


def _subst(a, env):
    return env.get(id(a), a) if isinstance(a, Var) else a


def make_scan(body: Program, consts: Sequence, carry: Sequence, xs: Sequence, *, length: int | None,
              reverse: bool, count=None, bound: int | None = None) -> list:
    """Bind a scan in the current trace, after hoisting the body's loop-invariant equations (those
    reading consts and literals alone) into the enclosing trace, and dropping constants the body
    does not read. Returns the outputs: final carry, then stacked ys. ``length=None``: ``count``
    steps, a value known at run time (the steps a while loop ran), over stacks; with ``bound``, at most
    ``bound`` steps over arrays of ``bound`` (a shorter last block of ``checkpoint=True``): the steps read
    their first ``count`` rows, and the rows of the ys past ``count`` are zeros."""
    body, consts = hoist_invariant(body, consts)
    outs = bind(scan_p, *([count] if length is None else []), *consts, *carry, *xs,
                body=body, length=length, reverse=reverse, num_consts=len(consts), num_carry=len(carry),
                **_bounded(bound))
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
    hints = current_builder().inlined_hints  # a hoisted value keeps its name (``a = theta[0]``)
    made: dict[tuple, object] = {}  # equal hoisted equations bound once (``theta[0]`` read by four calls)
    for eqn in moved:
        args = [_subst(a, invariant) for a in eqn.inputs]
        key = (eqn.prim, eqn.params, *[id(a.ssa) if isinstance(a, Tracer) else (id(a) if isinstance(a, Var) else (
            type(a).__name__, repr(getattr(a, "value", a)), str(getattr(a, "type", "")))) for a in args])
        try:
            outs = made.get(key)
        except TypeError:  # params that cannot be compared: bound afresh
            key, outs = None, None
        if outs is None:
            outs = bind(eqn.prim, *args, **eqn.params)
            if key is not None:
                made[key] = outs
        for v, o in zip(eqn.outputs, outs if eqn.prim.multiple_results else (outs,)):
            invariant[id(v)] = o
            if not v.hint and len(eqn.outputs) == 1:  # (the body's own Var, named before it is returned)
                if eqn.prim in _MOVES:  # a broadcast of ``mul_k``: its cotangent sums as ``mul_k_bar_sum``
                    v.hint = next((a.hint for a in eqn.inputs if isinstance(a, Var)), "")
                    continue  # (the value before the loop keeps its own name, ``bcast``)
                v.hint = expression_hint(eqn)  # ``mul_k = 0.01 * k``, before the loop and in it
            if v.hint and isinstance(o, Tracer) and not o.ssa.hint:
                hints.setdefault(id(o.ssa), v.hint)
    used = {id(a) for e in kept for a in e.inputs} | {id(a) for a in body.outputs}
    hoisted = [v for e in moved for v in e.outputs if id(v) in used]
    const_vars = [v for v in body.inputs[:n] if id(v) in used] + hoisted
    # a body output that is invariant (or a const) is still returned by the body, read from a const input
    body = Program(tuple(const_vars) + body.inputs[n:], tuple(kept), body.outputs, name=body.name)
    values = [invariant[id(v)] for v in const_vars]
    merged = _one_input_per_const(body, len(values), values)
    return merged if merged is not None else (body, values)


def _bounded(bound: int | None) -> dict:
    """A scan's ``bound`` param, where it has one (the others' params stay as they were)."""
    return {} if bound is None else {"bound": bound}


# what moves a value (its cotangent's sum is named after that value's)
_MOVES = frozenset({st.slice_p, st.concatenate_p, st.reshape_p, st.transpose_p, st.broadcast_in_dim_p})

# Views of loop invariants whose transposes are views too: left in the step that reads them (``S_hh @ B.T``,
# as the user wrote it), for free, so that the backward loop sums the cotangent of ``B`` in one accumulator
# (``B_bar_sum + x.T``), not one of ``B.T`` beside it transposed after the loop, and a transposed ``A.T``
# in it is ``A`` again. (Not reshapes: ``theta[0]`` is a slice and a reshape, read once before the loop.)
_STEP_VIEWS = frozenset({st.transpose_p})


def _views_stay(kept: list[Eqn], moved: list[Eqn]) -> tuple[list[Eqn], list[Eqn]]:
    """``split_invariant``'s answer with the invariant views of ``_STEP_VIEWS`` that no hoisted equation
    reads moved back to the start of the step."""
    views = [e for e in moved if e.prim in _STEP_VIEWS and makes_view(e.prim, e.inputs)]
    if not views:
        return kept, moved
    read = {id(a) for e in moved for a in e.inputs}
    stay = [e for e in views if id(e.outputs[0]) not in read]
    if not stay:
        return kept, moved
    ids = {id(e) for e in stay}
    return stay + kept, [e for e in moved if id(e) not in ids]


def split_invariant(eqns: Sequence[Eqn], consts: Sequence[Var]) -> tuple[list[Eqn], list[Eqn]]:
    """A loop body's equations split into those that vary and those that read literals, ``consts``
    and what such equations make alone (loop invariants, to compute once before the loop), in order.
    An effect (a draw) varies: each step draws anew. A transpose of an invariant that no other invariant
    reads stays in the step (``_views_stay``)."""
    invariant = {id(v) for v in consts}
    kept, moved = [], []
    for eqn in eqns:
        if all(isinstance(a, Literal) or id(a) in invariant for a in eqn.inputs) and not effectful(eqn):
            moved.append(eqn)
            invariant.update(id(v) for v in eqn.outputs)
        else:
            kept.append(eqn)
    return _views_stay(kept, moved)


# --- JVP --------------------------------------------------------------------------------------


def _scan_jvp(primals, tangents, *, body: Program, length: int | None, reverse: bool, num_consts: int,
              num_carry: int, bound: int | None = None):
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

    def tangent(t, p):
        return lax.zeros(p.ssa.type if isinstance(p, Tracer) else p.type) if isinstance(t, Zero) else t

    cs, ks, xs = _split(primals, num_consts, num_carry)
    cts, kts, xts = _split(tangents, num_consts, num_carry)
    outs = make_scan(new_body,
                     cs + [t for t, z in zip(cts, c_nz) if z],
                     ks + [tangent(t, p) for t, p, z in zip(kts, ks, k_nz) if z],
                     xs + [t for t, z in zip(xts, x_nz) if z], length=length, reverse=reverse,
                     count=count[0] if count else None, bound=bound)
    outs = iter(outs)
    carry = [next(outs) for _ in range(num_carry)]
    carry_t = [next(outs) if z else Zero(c.ssa.type) for c, z in zip(carry, k_nz)]
    ys = [next(outs) for _ in y_nz]
    ys_t = [next(outs) if z else Zero(y.ssa.type) for y, z in zip(ys, y_nz)]
    return tuple(carry + ys), tuple(carry_t + ys_t)


jvp_rules[scan_p] = _scan_jvp


# --- partial evaluation -----------------------------------------------------------------------


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
    stacks = [Var(_stacked(r.type, length, p.get("bound")), _record_hint(r.hint)) for r in step_res]
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
_MASKS[scan_p] = _scan_unknown


# --- transposition ---------------------------------------------------------------------------


def _unchanged(body: Program) -> Program:
    return body


# The pass a scan's body takes before it is transposed: the optimiser (opt.simplify, a floor above)
# registers itself here when it is imported; unset, the body is transposed as it is.
BODY_PASS: Callable[[Program], Program] = _unchanged


def _scan_transpose(cts, *args, body: Program, length: int | None, reverse: bool, num_consts: int,
                    num_carry: int, bound: int | None = None):
    count, args = _counted(args, length)
    cs, ks, xs = _split(args, num_consts, num_carry)
    c_lin = [isinstance(a, Linear) for a in cs]
    x_lin = [isinstance(a, Linear) for a in xs]
    # every carry is linear in the loop; a carry whose initial value is not (a zero tangent made before the
    # loop, hence known) gets no cotangent
    # simplified first (BODY_PASS: duplicates merged, structure used): a factor read by several solves then gives one
    # tangent triangle (tril(dL)), or none when dL is triangular already (a Cholesky factor's tangent), so
    # the transposed step takes no triangle of each solve's cotangent
    body_t = transpose(cse(BODY_PASS(body)), c_lin + [True] * num_carry + x_lin)
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
                + [_sliced(c.ssa.type, length, bound) for c in ct_ys])
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
        cty = [lax.zeros(_sliced(c.type, length, bound)) if z else next(cty_it)
               for c, z in zip(cts[num_carry:], y_zero)]
        outs = inline(body_t, consts_t + rx + ctk + cty, hints)
        n_lc = len(lin_c_types)
        ct_lc, ct_k, ct_x = outs[:n_lc], outs[n_lc:n_lc + num_carry], outs[n_lc + num_carry:]
        new_acc = [lax.add(a, c) for a, c in zip(acc, ct_lc)]
        step_outs = tuple(builder.atom(o) for o in ct_k + new_acc + ct_x)
    step = rename(Program(tuple(vs), tuple(builder.eqns), step_outs, *builder.constants(),
                          name=f"{body.name}_transpose"), hints)
    zeros = [lax.zeros(t) for t in lin_c_types]
    outs = make_scan(step, list(t_values) + res_c, ct_carry + zeros, res_x + ct_ys, length=length,
                     reverse=not reverse, count=count[0] if count else None, bound=bound)
    ct_k_in, acc_out, ct_xs = outs[:num_carry], outs[num_carry:num_carry + len(zeros)], outs[num_carry + len(zeros):]
    acc_it, x_it = iter(acc_out), iter(ct_xs)
    return ([None] * len(count) + [next(acc_it) if lin else None for lin in c_lin]
            + [c if isinstance(k, Linear) else None for c, k in zip(ct_k_in, ks)]
            + [next(x_it) if lin else None for lin in x_lin])


transpose_rules[scan_p] = _scan_transpose


# --- dead code --------------------------------------------------------------------------------


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


def shared_consts(eqn: Eqn, ins: tuple) -> Eqn | None:
    """The scan with each constant operand passed once: the body's inputs that stand for one value
    (a step reading ``theta[0]`` in four calls) made one input, so that the backward loop sums one
    cotangent for it, not one per copy. None when none repeats."""
    p = eqn.params
    count, ops = _counted(ins, p["length"])
    found = _one_input_per_const(p["body"], p["num_consts"], ops[:p["num_consts"]])
    if found is None:
        return None
    body, consts = found
    return Eqn(scan_p, tuple(count) + tuple(consts) + tuple(ops[p["num_consts"]:]), eqn.outputs,
               Params({**p, "body": body, "num_consts": len(consts)}), eqn.source)


def _one_input_per_const(body: Program, nc: int, consts: Sequence) -> tuple[Program, list] | None:
    """``body`` with its leading ``nc`` inputs (standing for ``consts``) merged where they stand for one
    value (the same var, or tracer of one var), and the consts left; None when none repeats."""
    first: dict[int, int] = {}
    same: dict[int, Var] = {}
    keep = []
    for k, a in enumerate(consts):
        ident = id(a.ssa) if isinstance(a, Tracer) else id(a) if isinstance(a, Var) else None
        if ident is not None and ident in first:
            same[id(body.inputs[k])] = body.inputs[first[ident]]
            continue
        if ident is not None:
            first[ident] = k
        keep.append(k)
    if not same:
        return None
    eqns = tuple(e if not any(isinstance(a, Var) and id(a) in same for a in e.inputs) else
                 Eqn(e.prim, tuple(_subst(a, same) for a in e.inputs), e.outputs, e.params, e.source)
                 for e in body.eqns)
    new_body = Program(tuple(body.inputs[k] for k in keep) + body.inputs[nc:], eqns,
                       tuple(_subst(a, same) for a in body.outputs), name=body.name)
    return new_body, [consts[k] for k in keep]


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


# --- stacks -----------------------------------------------------------------------------------


def zeros_like_stack(x):
    """A stack of zeros as long as the stack ``x``, each entry shaped as its (a stack's tangent that is
    zero, where one must be made: a scan over ``x``'s steps)."""
    elem = x.ssa.type.elem
    body = _closed_program([elem], lambda e: [zeros_like_stack(e[0]) if isinstance(elem, StackType)
                                              else lax.zeros(elem)], "zeros")
    return make_scan(body, [], [], [x], length=None, reverse=False, count=x)[0]


jvp_.zeros_of[StackType] = zeros_like_stack


# --- batching ---------------------------------------------------------------------------------


def _scan_batch(args, dims, *, body: Program, length: int | None, reverse: bool, num_consts: int, num_carry: int,
                bound: int | None = None):
    size = batch_size(args, dims)
    count, args = _counted(args, length)
    count_dim, dims = _counted(dims, length)
    if any(d is not None for d in count_dim) and not isinstance(count[0].ssa.type, StackType):
        return _scan_batch_counts(count[0], count_dim[0], args, dims, size, body=body, reverse=reverse,
                                  num_consts=num_consts, num_carry=num_carry, bound=bound)
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
                num_carry=num_carry, **_bounded(bound))
    return outs, tuple([0 if b else None for b in kb] + [1 if b else None for b in yb])


def _scan_batch_counts(count, count_dim: int, args, dims, size: int, *, body: Program, reverse: bool,
                       num_consts: int, num_carry: int, bound: int | None = None):
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
                     reverse=reverse, count=steps, bound=bound)
    return tuple(outs[1:]), (0,) * num_carry + (1,) * (len(outs) - 1 - num_carry)


def _broadcast_stack(x, size: int):
    """The stack ``x`` with each entry broadcast along a batch axis first: a scan over its steps."""
    elem = x.ssa.type.elem
    body = _closed_program([elem], lambda e: [at_front(e[0], None, size)], "broadcast")
    return make_scan(body, [], [], [x], length=None, reverse=False, count=x)[0]


broadcasts_of[StackType] = _broadcast_stack
batch_rules[scan_p] = _scan_batch


def _record_hint(hint: str) -> str:
    """The name of a residual's record over a loop's steps: ``mu_steps`` for ``mu``; ``u_blocks`` for a
    checkpointed loop's ``u_block`` (a block's first state, kept once per block)."""
    if not hint:
        return ""
    return f"{hint}s" if hint.endswith("_block") else f"{hint}_steps"
