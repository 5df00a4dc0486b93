"""Rerolling: a Python loop that tracing unrolled, found again and made a ``scan``.

Tracing runs a Python ``for`` loop step by step, so T steps become T copies of the loop's body,
and every stage after tracing pays for every copy: a Kalman filter over 300 observations is
11,000 equations before differentiation and 30,000 after. When a run of equations repeats with
a period (the same primitives, params, types and source lines, step after step), and each copy
reads nothing but

- values of the copy before it (the loop's carry; the first copy reads their initial values),
- values from before the run, the same in every copy (loop invariants), and
- one slice per step of an array from before the run, ``v[t]`` (the scan's ``xs``), or a literal
  that changes from step to step (a constant ``xs``),

then the run is one ``scan`` whose body is the first copy (``control.scan_p``): everything after
tracing costs the body, not T, and the gradient prints as the two loops a person would write.
Values of a copy read after the run are the scan's final carry (the last copy's) or its stacked
outputs (an earlier copy's). Loop-invariant equations of the body, such as ``B.T`` written in
the loop, are hoisted out, as ``pb.scan`` does. The rerolled program computes exactly what the
unrolled one did, operation for operation, in the same order.

Short loops stay unrolled (``MIN_STEPS``, ``MIN_EQNS``): there, straight-line code costs little to
compile and lets the optimiser work across steps. ``differentiate(f, reroll=False)`` keeps every
loop unrolled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from pullback.ir.core import Eqn, Literal, Params, Primitive, Program, Var
from pullback.ir.types import ArrayType
from pullback.primitives import control
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st

MIN_STEPS = 4  # copies of the body, at least
MIN_EQNS = 1_000  # equations in the run, at least
_PERIODS_TRIED = 4  # the most frequent distances between repeats of an equation
_LOOPS = 16  # runs rolled per program, at most
# a literal operand that changes from step to step becomes a value read from a table: elementwise
# operations take it broadcast (elsewhere, a literal may be a static operand)
_ELEMENTWISE = frozenset(v for v in vars(ew).values() if isinstance(v, Primitive))
# a run of these alone only moves data (the rows of a loop's stacked results read one by one, say):
# no loop to make of it
_MOVES = frozenset({st.slice_p, st.reshape_p, st.broadcast_in_dim_p, st.transpose_p})


def reroll(program: Program, min_steps: int = MIN_STEPS, min_eqns: int = MIN_EQNS) -> Program:
    """``program`` with each long periodic run of equations made a ``scan`` (see the module's
    docstring); ``program`` itself when there is none."""
    for _ in range(_LOOPS):
        loop = _find(program, min_steps, min_eqns)
        if loop is None:
            break
        program = _rolled(program, loop, min_steps, min_eqns)
    return program


# --- finding a run -------------------------------------------------------------------------


def _signature(eqn: Eqn) -> tuple:
    """What two copies of one equation share: a slice's window moves from step to step, its size does not."""
    params = eqn.params
    if eqn.prim is st.slice_p:
        params = (params["strides"], tuple(b - a for a, b in zip(params["start_indices"], params["limit_indices"])))
    return (eqn.prim, params, eqn.source, tuple(a.type if type(a) is Var else (Literal, a.type) for a in eqn.inputs),
            tuple(v.type for v in eqn.outputs))


@dataclass
class _Loop:
    """A run of ``steps`` copies of ``period`` equations from ``start``, and how the copies read."""

    start: int
    period: int
    steps: int
    carry_of: dict[tuple[int, int], tuple] = field(default_factory=dict)  # (eqn, operand) -> carry key
    literals: dict[tuple[int, int], list] = field(default_factory=dict)  # (eqn, operand) -> value per step
    tables: dict[tuple[int, int], list] = field(default_factory=dict)  # the same, of constant arrays
    sliced: dict[int, int] = field(default_factory=dict)  # eqn -> the axis its window moves along
    pos: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # id of a var of the run -> (copy, eqn, out)


def _find(program: Program, min_steps: int, min_eqns: int) -> _Loop | None:
    """The longest periodic run that reads only what a loop can (``_check``), if one is long enough."""
    eqns, outputs = program.eqns, program.outputs
    if len(eqns) < min_eqns:
        return None
    table: dict[tuple, int] = {}
    ids = [table.setdefault(_signature(e), len(table)) for e in eqns]
    last: dict[int, int] = {}
    gaps: Counter[int] = Counter()
    for i, s in enumerate(ids):
        j = last.get(s)
        if j is not None:
            gaps[i - j] += 1
        last[s] = i
    candidates = []
    for k, _ in gaps.most_common(_PERIODS_TRIED):
        for a, b in _runs(ids, k):
            if (b - a + k) // k >= min_steps and (b - a + k) // k * k >= min_eqns:
                candidates.append((a, b, k))
    if not candidates:
        return None
    last_use = _last_uses(eqns, outputs)
    constants = dict(zip(map(id, program.constvars), program.constvals))
    for a, b, k in sorted(candidates, key=lambda c: -((c[1] - c[0] + c[2]) // c[2] * c[2])):
        if all(e.prim in _MOVES for e in eqns[a:a + k]):
            continue
        p = _cut(eqns, last_use, a, b, k, min_steps)
        loop = _check(eqns, p, k, (b + k - p) // k, constants)
        if loop.steps >= min_steps and loop.steps * k >= min_eqns:
            return loop
    return None


def _runs(ids: list[int], k: int):
    """Maximal ``[a, b)`` with ``ids[i] == ids[i + k]`` for every i in it: equations a .. b + k - 1 repeat."""
    start = None
    for i in range(len(ids) - k):
        if ids[i] == ids[i + k]:
            if start is None:
                start = i
        elif start is not None:
            yield start, i
            start = None
    if start is not None:
        yield start, len(ids) - k


def _last_uses(eqns: tuple[Eqn, ...], outputs) -> dict[int, int]:
    last = {}
    for i, e in enumerate(eqns):
        for a in e.inputs:
            last[id(a)] = i
    end = len(eqns)
    for a in outputs:
        last[id(a)] = end
    return last


def _cut(eqns, last_use: dict[int, int], a: int, b: int, k: int, min_steps: int) -> int:
    """Where the first copy starts. A run found by its repeats can start anywhere in a step; the loop
    is clearest cut where the fewest values pass from one step to the next (the carry), so: the cut
    the fewest values cross, then the one keeping the most copies in the run, then the earliest."""
    cuts = [p for p in range(a, a + k) if (b + k - p) // k >= min_steps]
    if len(cuts) < 2:
        return a
    lo_cut, hi = a + k, cuts[-1] + k  # counted a step later: the first step can read the run's inputs
    crossing = [0] * (hi - lo_cut + 2)
    for d in range(a, min(hi, len(eqns))):
        for v in eqns[d].outputs:
            lo, up = max(d + 1, lo_cut), min(last_use.get(id(v), d), hi)  # v crosses the cuts c, d < c <= last use
            if lo <= up:
                crossing[lo - lo_cut] += 1
                crossing[up + 1 - lo_cut] -= 1
    running, scored = 0, []
    for p in range(a, cuts[-1] + 1):
        running += crossing[p - a]
        scored.append((running, -((b + k - p) // k), p))
    return min(scored)[2]


def _key(a) -> object:
    return ("literal", a.value, a.dtype) if type(a) is Literal else id(a)


def _check(eqns: tuple[Eqn, ...], p: int, k: int, m: int, constants: dict) -> _Loop:
    """The copies from ``p`` that read only what a loop can, as a ``_Loop`` (``steps``: how many, from the first)."""
    pos: dict[int, tuple[int, int, int]] = {}  # id of a var of the run -> (copy, equation, output)
    for j in range(m):
        for i in range(k):
            for o, v in enumerate(eqns[p + j * k + i].outputs):
                pos[id(v)] = (j, i, o)
    loop = _Loop(p, k, m, pos=pos)
    for j in range(1, m):
        if not _copy_reads(eqns, loop, pos, j, constants):
            loop.steps = j
            break
    for values in (*loop.literals.values(), *loop.tables.values()):
        del values[loop.steps:]
    return loop


def _copy_reads(eqns, loop: _Loop, pos: dict, j: int, constants: dict) -> bool:
    """Whether copy ``j`` reads as the first does (recording carries, moving windows, changing literals
    and constants: tracing makes a new constant of an array each step reads from the user's scope)."""
    p, k = loop.start, loop.period
    base = p + j * k
    for i in range(k):
        e0, ej = eqns[p + i], eqns[base + i]
        moving = i in loop.sliced
        if e0.params is not ej.params and e0.params != ej.params:
            if not _window(e0, ej, j, loop, i, pos):
                return False
        elif moving:
            return False
        for q, (a0, aj) in enumerate(zip(e0.inputs, ej.inputs)):
            carry = loop.carry_of.get((i, q))
            where = pos.get(id(aj)) if type(aj) is Var else None
            if carry is not None:  # the carry's slot reads, in each copy, the copy before's value
                if where != (j - 1, carry[0], carry[1]):
                    return False
                continue
            if type(aj) is Literal:
                if type(a0) is not Literal:
                    return False
                values = loop.literals.get((i, q))
                if values is not None:
                    values.append(aj.value)
                elif aj.value != a0.value or type(aj.value) is not type(a0.value):
                    if e0.prim not in _ELEMENTWISE:
                        return False
                    loop.literals[(i, q)] = [a0.value] * j + [aj.value]
                continue
            if (i, q) in loop.literals:
                return False
            if where is None:  # from before the run: the same value in every copy, or a constant per copy
                values = loop.tables.get((i, q))
                if values is None and aj is a0:
                    continue
                if id(aj) not in constants or (values is None and id(a0) not in constants):
                    return False
                if values is None:
                    loop.tables[(i, q)] = [constants[id(a0)]] * j + [constants[id(aj)]]
                else:
                    values.append(constants[id(aj)])
                continue
            jj, l, o = where
            if jj == j:  # the copy's own value
                if pos.get(id(a0)) != (0, l, o):
                    return False
            elif jj == j - 1 and j == 1 and (type(a0) is Literal or id(a0) not in pos):
                loop.carry_of[(i, q)] = (l, o, _key(a0))  # a carry: a0, from before the run, is its initial value
            else:
                return False
    return True


def _window(e0: Eqn, ej: Eqn, j: int, loop: _Loop, i: int, pos: dict) -> bool:
    """Whether ``ej`` is ``e0``'s slice moved ``j`` places along one axis, of an array from before the run."""
    if e0.prim is not st.slice_p or type(e0.inputs[0]) is not Var or id(e0.inputs[0]) in pos:
        return False
    s0, sj = e0.params["start_indices"], ej.params["start_indices"]
    moved = [d for d in range(len(s0)) if s0[d] != sj[d]]
    if len(moved) != 1:
        return False
    d = moved[0]
    if e0.params["strides"][d] != 1 or e0.params["limit_indices"][d] != s0[d] + 1 or sj[d] != s0[d] + j:
        return False
    if i not in loop.sliced:
        if j != 1:  # the first copies read one window, this one another: not a step per copy
            return False
        loop.sliced[i] = d
    return loop.sliced[i] == d


# --- rolling it ----------------------------------------------------------------------------


def _rolled(program: Program, loop: _Loop, min_steps: int, min_eqns: int) -> Program:
    """``program`` with ``loop``'s copies replaced by: the xs (windows of arrays, tables of literals and
    constants) and the body's hoisted equations, the scan, and the rows of its stacked results read after it."""
    eqns = program.eqns
    p, k, m = loop.start, loop.period, loop.steps
    end = p + m * k
    first = eqns[p:p + k]
    pos = loop.pos  # (copies past ``steps`` too: only membership is asked, of what the first copy reads)

    # the body's inputs: consts (values from before the run), carries, xs
    consts: dict[int, Var] = {}  # id of an outer var -> the body's input for it
    const_outer: list = []
    carries: dict[tuple, int] = {}
    carry_in: list[Var] = []
    carry_init: list = []
    carry_src: list[tuple[int, int]] = []
    for (i, q), key in loop.carry_of.items():
        if key not in carries:
            l, o = key[0], key[1]
            src = first[l].outputs[o]
            carries[key] = len(carry_in)
            carry_in.append(Var(src.type, src.hint))
            carry_init.append(first[i].inputs[q])
            carry_src.append((l, o))
    before: list[Eqn] = []  # the xs, made before the scan
    xs_outer: list[Var] = []
    xs_in: list[Var] = []
    constvars, constvals = list(program.constvars), list(program.constvals)
    step_in: dict[tuple[int, int], Var] = {}
    for (i, q), values in loop.literals.items():
        lit = first[i].inputs[q]
        table = Var(ArrayType((m,), lit.dtype), "steps")
        constvars.append(table)
        constvals.append(np.array(values, lit.dtype))
        xs_outer.append(table)
        step_in[(i, q)] = Var(lit.type, "step")
        xs_in.append(step_in[(i, q)])
    for (i, q), values in loop.tables.items():
        a0 = first[i].inputs[q]
        if all(np.array_equal(v, values[0]) and np.asarray(v).dtype == np.asarray(values[0]).dtype for v in values):
            continue  # the same array each step: read as a loop invariant
        table = Var(ArrayType((m, *a0.shape), a0.dtype), a0.hint)
        constvars.append(table)
        constvals.append(np.stack([np.asarray(v, a0.dtype) for v in values]))
        xs_outer.append(table)
        step_in[(i, q)] = Var(a0.type, a0.hint)
        xs_in.append(step_in[(i, q)])
    window_in: dict[int, Var] = {}
    for i, d in loop.sliced.items():
        e0 = first[i]
        array, prm = e0.inputs[0], e0.params
        start, limit = list(prm["start_indices"]), list(prm["limit_indices"])
        limit[d] = start[d] + m
        shape = tuple(limit[a] - start[a] if a == d else e0.outputs[0].shape[a] for a in range(len(start)))
        xs = Var(ArrayType(shape, array.dtype), array.hint)
        before.append(Eqn(st.slice_p, (array,), (xs,), Params({"start_indices": tuple(start),
                                                               "limit_indices": tuple(limit),
                                                               "strides": prm["strides"]}), e0.source))
        if d:
            perm = (d, *(a for a in range(len(shape)) if a != d))
            moved = Var(ArrayType(tuple(shape[a] for a in perm), array.dtype), array.hint)
            before.append(Eqn(st.transpose_p, (xs,), (moved,), Params({"permutation": perm}), e0.source))
            xs = moved
        xs_outer.append(xs)
        window_in[i] = Var(ArrayType(xs.shape[1:], xs.dtype), e0.outputs[0].hint)
        xs_in.append(window_in[i])

    # the body: the first copy, with values of its own (a copy's values may be read after the loop by
    # their old names), reading the body's inputs
    own = {id(v): Var(v.type, v.hint) for e in first for v in e.outputs}
    body_eqns: list[Eqn] = []
    for i, e in enumerate(first):
        outs = tuple(own[id(v)] for v in e.outputs)
        if i in window_in:
            body_eqns.append(Eqn(st.reshape_p, (window_in[i],), outs, Params({"new_sizes": outs[0].shape}), e.source))
            continue
        ins = []
        for q, a in enumerate(e.inputs):
            key = loop.carry_of.get((i, q))
            if key is not None:
                ins.append(carry_in[carries[key]])
            elif (i, q) in step_in:
                step = step_in[(i, q)]
                shape = e.outputs[0].shape
                if type(a) is Literal and shape:
                    wide = Var(ArrayType(shape, step.dtype), step.hint)
                    body_eqns.append(Eqn(st.broadcast_in_dim_p, (step,), (wide,),
                                         Params({"shape": shape, "broadcast_dimensions": ()}), e.source))
                    step = wide
                ins.append(step)
            elif type(a) is Var and id(a) not in pos:
                v = consts.get(id(a))
                if v is None:
                    v = consts[id(a)] = Var(a.type, a.hint)
                    const_outer.append(a)
                ins.append(v)
            else:
                ins.append(own.get(id(a), a))
        body_eqns.append(Eqn(e.prim, tuple(ins), outs, e.params, e.source))

    # what is read after the run: the last copy's values are the final carry (those it does not pass to
    # the next copy are carries too, starting from zeros: no stack for one value); an earlier copy's are stacked
    read_after = {id(a) for e in eqns[end:] for a in e.inputs} | {id(a) for a in program.outputs}
    sources = set(carry_src)
    final: dict[tuple[int, int], Var] = {}
    stacked: dict[tuple[int, int], list[tuple[int, Var]]] = {}
    for j in range(m):
        for i in range(k):
            for o, v in enumerate(eqns[p + j * k + i].outputs):
                if id(v) not in read_after:
                    continue
                if j == m - 1 and (i, o) not in stacked:
                    final[(i, o)] = v
                else:
                    stacked.setdefault((i, o), []).append((j, v))
    for i, o in list(final):
        if (i, o) in stacked:  # an earlier copy's is read too: the last one's comes from the stack
            stacked[(i, o)].append((m - 1, final.pop((i, o))))
        elif (i, o) not in sources:
            v = first[i].outputs[o]
            carry_in.append(Var(v.type, v.hint))
            carry_init.append(Literal.of(0, v.dtype) if v.shape == () else v.type)
            carry_src.append((i, o))
    carry_out = [final.pop((l, o)) if (l, o) in final else Var(first[l].outputs[o].type, first[l].outputs[o].hint)
                 for l, o in carry_src]
    ys_slots = list(stacked)
    ys_outer = [Var(ArrayType((m, *first[i].outputs[o].shape), first[i].outputs[o].dtype), first[i].outputs[o].hint)
                for i, o in ys_slots]

    body_outputs = [own[id(first[i].outputs[o])] for i, o in carry_src + ys_slots]
    body_eqns, body_outputs, hoisted, const_in = _hoist(body_eqns, body_outputs, consts, const_outer)
    const_vars = [consts[id(a)] for a in const_outer] + [v for v, _ in const_in]
    const_args = list(const_outer) + [a for _, a in const_in]
    body = Program(tuple(const_vars) + tuple(carry_in) + tuple(xs_in), tuple(body_eqns),
                   tuple(body_outputs), name=f"{program.name}_step")
    body = reroll(body, min_steps, min_eqns)
    inits = []
    for a in carry_init:  # a literal, or the type of a carry that starts from zeros
        if type(a) is not Var:
            v = Var(a.type if type(a) is Literal else a)
            fill = a if type(a) is Literal else Literal.of(0, a.dtype)
            before.append(Eqn(st.broadcast_in_dim_p, (fill,), (v,),
                              Params({"shape": v.shape, "broadcast_dimensions": ()})))
            a = v
        inits.append(a)
    scan = Eqn(control.scan_p, (*const_args, *inits, *xs_outer), (*carry_out, *ys_outer),
               Params({"body": body, "length": m, "reverse": False, "num_consts": len(const_args),
                       "num_carry": len(carry_in)}), first[0].source)
    after: list[Eqn] = []
    for (i, o), ys in zip(ys_slots, ys_outer):
        row = ys.shape[1:]
        for j, v in stacked[(i, o)]:
            one = Var(ArrayType((1, *row), ys.dtype), v.hint)
            after.append(Eqn(st.slice_p, (ys,), (one,), Params({
                "start_indices": (j, *(0 for _ in row)), "limit_indices": (j + 1, *row),
                "strides": (1,) * (len(row) + 1)})))
            after.append(Eqn(st.reshape_p, (one,), (v,), Params({"new_sizes": row})))
    new = eqns[:p] + tuple(hoisted) + tuple(before) + (scan,) + tuple(after) + eqns[end:]
    return Program(program.inputs, new, program.outputs, tuple(constvars), tuple(constvals), program.name)


def _hoist(body_eqns: list[Eqn], body_outputs: list, consts: dict[int, Var], const_outer: list):
    """The body's loop invariants (``control.split_invariant``, as ``pb.scan`` hoists them), moved before
    the loop: (the body's equations and outputs left, those hoisted, and (body input, outer value) for
    each hoisted value the body still reads or returns)."""
    outer_of = {id(consts[id(a)]): a for a in const_outer}  # body input -> outer value
    kept, moved = control.split_invariant(body_eqns, [consts[id(a)] for a in const_outer])
    if not moved:
        return body_eqns, body_outputs, [], []
    hoisted = [Eqn(e.prim, tuple(outer_of.get(id(a), a) for a in e.inputs), e.outputs, e.params, e.source)
               for e in moved]
    made = {id(v) for e in hoisted for v in e.outputs}
    const_in: dict[int, tuple[Var, Var]] = {}
    body = []
    for e in kept:
        ins = tuple(_const_input(a, made, const_in) for a in e.inputs)
        body.append(e if ins == e.inputs else Eqn(e.prim, ins, e.outputs, e.params, e.source))
    outputs = [_const_input(a, made, const_in) for a in body_outputs]
    return body, outputs, hoisted, list(const_in.values())


def _const_input(a, made: set[int], const_in: dict):
    """The body's input for a hoisted value (made at its first use)."""
    if type(a) is not Var or id(a) not in made:
        return a
    if id(a) not in const_in:
        const_in[id(a)] = (Var(a.type, a.hint), a)
    return const_in[id(a)][0]
