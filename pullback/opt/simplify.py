"""Local algebraic simplification, to a fixed point.

- a broadcast of a scalar literal (a *fill*) feeding an elementwise operation is the
  literal; an elementwise operation on literals and fills alone is folded into a fill, and so
  is the sum of a fill;
- scalar factors fold: ``x c1 + x c2`` is ``x (c1 + c2)``, ``(x c1) c2`` is ``x (c1 c2)``;
- ``x * 1``, ``x / 1``, ``x + 0``, ``x - 0``, ``0 + x`` are ``x``; ``0 - x`` is ``-x``;
  ``x * 0`` and ``0 * x`` are zeros (for zero literals that rules introduce);
- ``-(-x)`` is ``x``; a transpose of a transpose composes; a reshape of a reshape is
  one reshape; identity reshapes, transposes, broadcasts and conversions vanish;
- signs move on to the sum that absorbs them (transposed subtractions make negations of
  cotangents): ``a + (-b)`` is ``a - b``, a scaling, transpose, triangle, sum or elementwise
  product of ``-x`` is the negated one of ``x``, and so is a contraction of ``-a`` (an outer
  product, which sums nothing, negates its smaller side);
- a contraction of ``x.T`` contracts ``x`` on the other axis; a symmetric matrix (``x + x.T``,
  ``a a^T``, potri, ...) is its own transpose, so symmetrising it doubles it;
- diagonal matrices stay vectors: ``x * eye`` is ``diag_embed(diagonal(x))``, the diagonal
  of a broadcast scalar is a broadcast scalar, the sum of a ``diag_embed`` sums its vector,
  and ``x + diag_embed(v)`` or ``x + I`` updates n entries of x (``add_diagonal``), as in ``K + s I``;
- ``x + x.T`` of a square matrix is ``add_transpose(x)``, which the backend can block;
- ``x + outer(u, v)`` of a large matrix is ``ger(x, u, v)``, a rank-1 update of x's buffer;
- pads of adjacent slabs of one axis, added, are one pad of their concatenation (no pad at
  all when the slabs cover the axis), and a concatenation of a concatenation along the same
  axis is one: the transpose of splitting an array into slices (``np.split``, ``np.roll``,
  ``np.repeat``) is then a concatenation of the cotangents, not a sum of zero-padded copies;
- a triangular solve with a factor of a checked Cholesky (or its transpose) skips its
  zero-diagonal check: the factorisation succeeded, so the diagonal is positive (on a GPU
  the check is a device-to-host synchronisation).

``checked_once``, run last (``ad.optimize``), drops the range check of a window at a traced start
(``dynamic_slice``, ``dynamic_update_slice``) that an earlier equation of the same program made: the
tangent's and the cotangent's windows repeat the primal's check.

Each pass after the first rewrites only the equations that are new and, in order, those of which
something read (an operand's definition or fill, or an equation further upstream looked up through
``defs``) was redefined since (``Settled``, a worklist): a rule must read upstream equations through
``defs`` and ``fill_of``, whose lookups are recorded, and keep nothing derived from them between
equations. An equation tries only the rules of its primitive that look for what defines one of its
operands (``_TRIGGERS``, indexed once per combination in ``_plan``): most equations try none.

Before::

    z_bar: f64[] = broadcast_in_dim[shape=(), broadcast_dimensions=()] 1.0
    t: f64[3] = mul x z_bar            ->    t is x
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict, deque
from contextlib import contextmanager
from heapq import heappop, heappush
from itertools import count, repeat
from operator import attrgetter, is_

import numpy as np

from pullback.ad.cse import Clean
from pullback.ad.dce import dce, dce_rules
from pullback.ir.core import Eqn, Literal, Params, Primitive, Program, Var
from pullback.ir.types import DTYPES, ArrayType
from pullback.opt.outer import OUTER_REWRITES, outer_rewrite
from pullback.primitives import contractions as con
from pullback.primitives import control
from pullback.primitives import elementwise as ew
from pullback.primitives import indexing as ix
from pullback.primitives import reductions as red
from pullback.primitives import special as sp
from pullback.primitives import structural as st
from pullback.primitives.lax import FOLD
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import rank_update as rk

_ELEMENTWISE_BINARY = {ew.add_p, ew.sub_p, ew.mul_p, ew.div_p, ew.pow_p, ew.max_p, ew.min_p, ew.eq_p, ew.ne_p,
                       ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p}


_NEUTRAL = {ew.mul_p: 1, ew.add_p: 0}
_consume = deque(maxlen=0).extend  # runs an iterator for its effects (appends), the loop in C
_prim = attrgetter("prim")
_RESHAPING = {st.broadcast_in_dim_p, st.reshape_p, st.transpose_p}


def _fold(prim, ins, fills: dict[int, Literal]) -> Literal | None:
    if prim not in FOLD:
        return None
    values = [a if isinstance(a, Literal) else fills.get(id(a)) for a in ins]
    if any(v is None for v in values):
        return None
    with np.errstate(all="ignore"):
        result = FOLD[prim](*(np.asarray(v.value, v.dtype) for v in values))
    return Literal.of(result, result.dtype)


def _is(a, value) -> bool:
    return isinstance(a, Literal) and not isinstance(a.value, bool) and a.value == value


def simplify(program: Program, settled: Settled | None = None) -> Program:
    """``program`` rewritten to a fixed point. ``settled``, given, is what an earlier simplification
    (of a program sharing equations with this one) learnt: equations it kept are not rewritten again
    unless something they read has changed; it is updated for the next caller."""
    settled = settled if settled is not None else Settled()
    settled.forget(program.inputs + program.constvars)
    stepped, clean = program, False
    for _ in range(10):
        new = _step(stepped, settled)
        if new is stepped:
            break
        # dead code is dropped once, after the last step (a rewrite of dead code leaves the live equations as
        # they are), but after each step where an equation may lose the outputs no one reads (a loop's, see
        # ``dce_rules``): the equation that remains is new, and the next step visits it
        clean = not dce_rules.keys().isdisjoint(map(_prim, new.eqns))
        stepped = dce(new) if clean else new
    new = stepped if clean else dce(stepped)
    if new is program:  # a new program, as ever (callers compare the programs passes return)
        return Program(program.inputs, program.eqns, program.outputs, program.constvars, program.constvals,
                       program.name)
    return new


class Settled:
    """What the steps so far learnt for the next: the equations the last one kept as they were, all
    those it produced (those the equations after them saw), the definitions of the vars (``defs``,
    the primitive of each, ``kinds``, and the fills), and, per var, the equations kept that read it:
    as an operand, or through ``defs`` (each rewrite's lookups are logged). A rewrite reads nothing
    else, so an equation kept by the last step is kept again, unread, unless the definition of a var
    it read has changed since: a step visits the equations that are new and, in order, the readers
    of what changed (a worklist), and costs what changed, not the program's length."""

    __slots__ = ("kept", "seen", "alive", "log", "defs", "reads", "kinds", "fills", "readers", "clean")

    def __init__(self):
        self.alive: tuple[Eqn, ...] = ()  # the step's result, held: the var ids below stay its vars' own
        self.kept: set[Eqn] = set()  # equations of the step's result that it kept unchanged (by identity)
        self.seen: set[Eqn] = set()  # all equations of the step's result
        self.log: dict[int, None] = {}  # the vars looked up in ``defs`` by the rewrite being tried
        self.defs: dict[int, Eqn] = {}  # id of a var -> its definition, as the last visit left it
        self.reads = _Reads(self.defs, self.log)  # ``defs`` as the rules read it: lookups logged
        self.kinds: dict[int, Primitive] = {}  # the same keys -> the primitive of the definition (``_plan``)
        self.fills: dict[int, Literal] = {}  # vars that are broadcasts of a scalar literal -> the literal
        self.readers: defaultdict[int, list[Eqn]] = defaultdict(list)  # id of a var -> equations kept that read it
        self.clean = Clean()  # what the pipeline's last CSE of the program left (``cse``)

    def forget(self, atoms) -> None:
        """Drop the definitions of ``atoms`` (a program's inputs: an earlier program may have defined them)."""
        for k in map(id, atoms):
            if k in self.kinds:
                del self.defs[k], self.kinds[k]
            self.fills.pop(k, None)


def checked_once(program: Program) -> Program:
    """``program`` with each window at a traced start unchecked where an earlier equation checked the
    same start against the same bound: the program's equations run in order, so the first check
    raised already (a body's equations are another program, checked on their own)."""
    if _WINDOWS.isdisjoint(map(_prim, program.eqns)):  # (no window: one sweep in C, no copy)
        return program
    seen: set[tuple[int, int]] = set()
    eqns = list(program.eqns)
    for i, e in enumerate(eqns):
        if e.prim not in (ix.dynamic_slice_p, ix.dynamic_update_slice_p) or not e.params["check"]:
            continue
        p = e.params
        starts = e.inputs[len(e.inputs) - len(p["axes"]):]
        keys = {(id(s), e.inputs[0].shape[a] - n) for s, a, n in zip(starts, p["axes"], p["sizes"])
                if isinstance(s, Var)}
        if keys <= seen:
            eqns[i] = Eqn(e.prim, e.inputs, e.outputs, Params({**p, "check": False}), e.source)
        seen |= keys
    if all(map(is_, eqns, program.eqns)):
        return program
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


_WINDOWS = frozenset({ix.dynamic_slice_p, ix.dynamic_update_slice_p})


def _same(a: Program, b: Program) -> bool:
    return len(a.eqns) == len(b.eqns) and all(map(is_, a.eqns, b.eqns))


class _Reads:
    """``defs`` as the rules read it: every key looked up is logged, so that a step knows what each rewrite
    read (an operand's fill is an operand's: its reader is known without). The table itself, a plain dict, is
    what the step writes; the log is a dict used as an ordered set."""

    __slots__ = ("table", "log")

    def __init__(self, table: dict[int, Eqn], log: dict[int, None]):
        self.table, self.log = table, log

    def get(self, key, default=None):
        self.log[key] = None
        table = self.table
        return table[key] if key in table else default

    def __getitem__(self, key):
        self.log[key] = None
        return self.table[key]

    def __contains__(self, key):
        self.log[key] = None
        return key in self.table


def _step(program: Program, settled: Settled | None = None) -> Program:
    """One rewriting pass over the equations that are new since the last (not kept by it) and, in order,
    the readers of the vars whose definitions change (``Settled``); ``settled`` is updated for the next
    (without it, every equation is rewritten)."""
    settled = settled if settled is not None else Settled()
    eqns = program.eqns
    position = dict(zip(eqns, count()))  # (an equation hashes by identity)
    seen_before = settled.seen
    # in order, then ``pending``: all of them when nothing is known (no set of them, no sort)
    todo = (sorted(map(position.__getitem__, position.keys() - settled.kept))
            if settled.kept or len(position) != len(eqns) else list(range(len(eqns))))
    settled.log.clear()
    if not todo:
        settled.kept, settled.seen, settled.alive = settled.kept & position.keys(), set(position), eqns
        return program
    defs, kinds, fills, readers, log = settled.defs, settled.kinds, settled.fills, settled.readers, settled.log
    reads = settled.reads
    replace: dict[int, object] = {}
    replaced = replace.keys()
    results: dict[int, object] = {}  # position -> what replaces its equation (``_visit``)

    def sub(a):
        while isinstance(a, Var) and id(a) in replace:
            a = replace[id(a)]
        return a

    pending: list[int] = []  # a heap of the positions of readers, after ``todo``'s next
    last, t, n_todo = -1, 0, len(todo)
    while True:
        if pending and (t == n_todo or pending[0] < todo[t]):
            i = heappop(pending)
            if i == last:
                continue
        elif t < n_todo:
            i = todo[t]
            t += 1
            if i == last:
                continue
        else:
            break
        last = i
        eqn = eqns[i]
        result = _visit(eqn, fills, defs, reads, kinds, replace, replaced, sub)
        if result is eqn:  # it reads its operands and what its rewrites looked up
            _consume(map(list.append, map(readers.__getitem__, map(id, eqn.inputs)), repeat(eqn)))
            if log:
                _consume(map(list.append, map(readers.__getitem__, log), repeat(eqn)))
                log.clear()
            if eqn in seen_before:  # as the equations after it saw it in the last pass
                continue
        else:
            log.clear()
            results[i] = result
        for later in map(readers.get, map(id, eqn.outputs)):  # defined otherwise than the equations after it
            if later:  # saw: they are read again
                for reader in later:
                    j = position.get(reader)
                    if j is not None and j > i:
                        heappush(pending, j)
    # what the step kept: the equations it did not visit (kept by the last) and those it visited and kept
    kept = position.keys() - set(map(eqns.__getitem__, results)) if results else set(position)
    if not results:
        settled.kept, settled.seen, settled.alive = kept, kept, eqns
        return program
    new: list[Eqn] = []
    at = 0
    for i in sorted(results):
        new += eqns[at:i]
        result = results[i]
        if type(result) is list:
            new += result
        elif result is not None:
            new.append(result)
        at = i + 1
    new += eqns[at:]
    settled.kept, settled.seen, settled.alive = kept, set(new), tuple(new)
    outputs = tuple(map(sub, program.outputs)) if replace else program.outputs
    return Program(program.inputs, settled.alive, outputs, program.constvars, program.constvals, program.name)


def _sourced(result, source):
    """A rewrite's equations keep the user's line of the equation they replace (its comment, and the line
    the equations transposed from them name)."""
    if source is None:
        return result
    if type(result) is list:
        return [e if e.source is not None else Eqn(e.prim, e.inputs, e.outputs, e.params, source) for e in result]
    if type(result) is Eqn and result.source is None:
        return Eqn(result.prim, result.inputs, result.outputs, result.params, source)
    return result


def _visit(eqn: Eqn, fills: dict[int, Literal], defs: dict[int, Eqn], reads: _Reads, kinds: dict[int, Primitive],
           replace: dict[int, object], replaced, sub) -> Eqn | list[Eqn] | None:
    """Rewrite one equation: ``eqn`` itself if it stays, what replaces it (an equation, or a list ending with
    the definition of its output), or None when its output equals an atom (recorded in ``replace``). The
    definitions (``defs``, ``kinds``, ``fills``) of what it returns are updated."""
    ins = eqn.inputs if not replace or replaced.isdisjoint(map(id, eqn.inputs)) else tuple(map(sub, eqn.inputs))
    prim, p = eqn.prim, eqn.params
    out = eqn.outputs[0]
    k_out = id(out)
    key = (prim, *map(kinds.get, map(id, ins), map(_MARKS.get, ins, map(type, ins))))
    rules, general = _PLANS.get(key) or _plan(key)
    if general:  # an operand may be a fill, or all are literals, or a scan
        before = ins
        if prim in _ELEMENTWISE_BINARY or prim is ew.select_p:
            lits = [fills.get(id(a)) if isinstance(a, Var) else None for a in ins]
            if any([lit is not None for lit in lits]) and any(
                isinstance(a, Var) and lit is None for a, lit in zip(ins, lits)
            ):  # keep one array operand: it carries the shape
                ins = tuple(a if lit is None else lit for a, lit in zip(ins, lits))
        folded = _fold(prim, ins, fills)
        if folded is not None:  # an operation on constants alone is a constant
            ins, prim, p = (folded,), st.broadcast_in_dim_p, Params({"shape": out.shape, "broadcast_dimensions": ()})
        elif prim in _RESHAPING and isinstance(ins[0], Var) and id(ins[0]) in fills:
            ins = (fills[id(ins[0])],)  # a fill reshaped is a fill of the new shape
            prim, p = st.broadcast_in_dim_p, Params({"shape": out.shape, "broadcast_dimensions": ()})
        elif prim is red.reduce_sum_p and isinstance(ins[0], Var) and id(ins[0]) in fills:
            c = fills[id(ins[0])]  # the sum of a fill: the fill times the count
            count = int(np.prod([ins[0].shape[a] for a in p["axes"]], dtype=np.int64))
            ins = (Literal.of((np.asarray(c.value, out.dtype) * count).item(), out.dtype),)
            prim, p = st.broadcast_in_dim_p, Params({"shape": out.shape, "broadcast_dimensions": ()})
        if prim is control.scan_p:
            merged = control.shared_consts(eqn, ins)
            if merged is not None:
                eqn, ins = merged, merged.inputs
            found = control.invariant_carries(eqn, ins)
            if found is not None:
                eqn, same = found
                ins = eqn.inputs
                replace.update(same)
            result = control.with_fills(eqn, ins, lambda v: fills.get(id(v))) or (eqn if found or merged else None)
            if result is not None:
                defs[k_out], kinds[k_out] = result, result.prim
                return result
        if prim is control.checkpoint_p:
            found = control.passed_through(eqn, ins)
            if found is not None:
                result, same = found
                replace.update(same)
                _undefine(k_out, defs, kinds, fills)
                if result is None:
                    return []
                defs[id(result.outputs[0])], kinds[id(result.outputs[0])] = result, result.prim
                return result
        if ins is not before or prim is not key[0]:
            key = (prim, *map(kinds.get, map(id, ins), map(_MARKS.get, ins, map(type, ins))))
            rules = (_PLANS.get(key) or _plan(key))[0]
    if prim is ew.add_p and ins[0] is ins[1]:
        rules = _RULES[prim]  # x + x is x 2 (``_scaling_rewrite``), whatever defines x
    for rule in rules:
        result = rule(prim, ins, p, out, reads, lambda v: fills.get(id(v)))
        if result is None:
            continue
        result = _sourced(result, eqn.source)
        if type(result) is list:
            for e in result:
                defs[id(e.outputs[0])] = e
                kinds[id(e.outputs[0])] = e.prim
        elif type(result) is Eqn:
            defs[k_out] = result
            kinds[k_out] = result.prim
        else:
            replace[k_out] = result
            _undefine(k_out, defs, kinds, fills)
            return None
        if k_out in fills:  # a fill the equations after it see from the next step on, if it is one
            del fills[k_out]
        return result
    new = Eqn(prim, ins, eqn.outputs, p, eqn.source) if ins != eqn.inputs or prim is not eqn.prim else eqn
    if prim is st.broadcast_in_dim_p and isinstance(ins[0], Literal):
        fills[k_out] = ins[0]
    elif k_out in fills:
        del fills[k_out]
    defs[k_out] = new
    kinds[k_out] = prim
    return new


def _undefine(k: int, defs: dict[int, Eqn], kinds: dict[int, Primitive], fills: dict[int, Literal]) -> None:
    if k in kinds:
        del defs[k], kinds[k]
    fills.pop(k, None)


def _plan(key: tuple) -> tuple[tuple, bool]:
    """The rules that may rewrite an equation of ``key``'s primitive whose operands are defined by ``key``'s
    other entries (a primitive; for a literal, ``_ZERO``, ``_ONE``, ``_MINUS_ONE`` or else ``Literal``; for a
    var that no equation defines, ``Var``),
    and whether one may be a fill or all constants, or the equation a scan (``_visit``'s general path).
    A rule is tried only when an operand is of a kind that it looks for (``_TRIGGERS``): most equations
    try none. Remembered in ``_PLANS`` (a few hundred keys at most)."""
    prim, operands = key[0], set(key[1:])
    rules = tuple(rule for rule in _RULES.get(prim, ()) if _triggered(rule, prim, key[1:], operands))
    general = (st.broadcast_in_dim_p in operands or prim is control.scan_p or prim is control.checkpoint_p
               or (prim in FOLD and operands <= _LITERALS))
    if len(_PLANS) > 4096:
        _PLANS.clear()
    _PLANS[key] = plan = (rules, general)
    return plan


_PLANS: dict[tuple, tuple[tuple, bool]] = {}

# an operand's kind in a key when it is one of the literals the rules look for (``_is``); any other literal's
# is ``Literal``: every literal has one of the supported dtypes, so no 0, 1 or -1 is missed
_ZERO, _ONE, _MINUS_ONE = "literal 0", "literal 1", "literal -1"
_MARKS = {Literal.of(value, dtype): mark for dtype in DTYPES if dtype.kind in "fci"
          for value, mark in ((0, _ZERO), (1, _ONE), (-1, _MINUS_ONE))}
_LITERALS = {Literal, _ZERO, _ONE, _MINUS_ONE}


def _triggered(rule, prim, kinds: tuple, operands: set) -> bool:
    """Whether ``rule`` may rewrite an equation of ``prim`` whose operands are of ``kinds`` (in order;
    ``operands``, as a set): a trigger is a set of kinds of which one operand must be, or a test of
    ``kinds`` where the rule needs more (a literal and a product, each in its place)."""
    triggers = _TRIGGERS.get(rule)
    if isinstance(triggers, dict):
        triggers = triggers.get(prim)
    if callable(triggers):
        return triggers(kinds)
    return triggers is None or not operands.isdisjoint(triggers)


def _literal_and(wanted):
    """The test of a binary operation's operand kinds: one is a literal, the other of ``wanted``."""
    return lambda kinds: (kinds[1] in _LITERALS and kinds[0] in wanted) or (kinds[0] in _LITERALS
                                                                            and kinds[1] in wanted)


def _at(k: int, wanted):
    """The test of operand kinds: the ``k``-th is of ``wanted``."""
    return lambda kinds: kinds[k] in wanted


def _both(wanted):
    """The test of a binary operation's operand kinds: both of ``wanted``."""
    return lambda kinds: kinds[0] in wanted and kinds[1] in wanted


def _same_type(a, out: Var) -> bool:
    return isinstance(a, Var) and a.type == out.type


_stops = threading.local()


@contextmanager
def keeping_stop_gradients():
    """Within it, ``stop_gradient`` stays: the programs built will be differentiated again (the
    gradient inside a Hessian, a ``grad`` traced inside another), so their derivatives must still
    see it (removed, the Hessian of ``x**2 * stop_gradient(x)`` was ``4 x``, not ``2 x``)."""
    depth = getattr(_stops, "depth", 0)
    _stops.depth = depth + 1
    try:
        yield
    finally:
        _stops.depth = depth


def _identity(prim, ins, p, out, defs, fill_of):  # stop_gradient is the identity, once all derivatives are taken
    return None if getattr(_stops, "depth", 0) else ins[0]


def _neutral(prim, ins, p, out, defs, fill_of):  # x * 1, 1 * x, x + 0, 0 + x
    x, y = ins
    if _is(y, _NEUTRAL[prim]) and _same_type(x, out):
        return x
    if _is(x, _NEUTRAL[prim]) and _same_type(y, out):
        return y
    return None


def _times_zero(prim, ins, p, out, defs, fill_of):
    x, y = ins
    if _is(x, 0) or _is(y, 0):
        return Eqn(st.broadcast_in_dim_p, (Literal.of(0, out.dtype),), (out,),
                   Params({"shape": out.shape, "broadcast_dimensions": ()}))
    return None


def _real_conjugate_transpose(prim, ins, p, out, defs, fill_of):
    if p["trans"] == la.Trans.C and ins[0].dtype.kind != "c":
        return Eqn(prim, ins, (out,), Params({**p, "trans": la.Trans.T}))  # one spelling of a real transpose: CSE
    return None


def _unchecked_solve(prim, ins, p, out, defs, fill_of):
    if p["check"] and _checked_cholesky_factor(ins[0], defs):
        return Eqn(prim, ins, (out,), Params({**p, "check": False}))
    return None


def _outer_by_fill(prim, ins, p, out, defs, fill_of):
    if p["dims"] != con.DotDims((), ()):
        return None
    x, y = ins
    for scalar, other in ((x, y), (y, x)):  # an outer product with a scalar fill is a scaling
        literal = fill_of(scalar) if isinstance(scalar, Var) else None
        if literal is not None and isinstance(other, Var) and _same_type(other, out):
            return Eqn(ew.mul_p, (other, literal), (out,))
    return None


def _negated_operand(prim, ins, p, out, defs, fill_of):
    negated = [defs.get(id(a)) if isinstance(a, Var) else None for a in ins]
    k = next((k for k, d in enumerate(negated) if d is not None and d.prim is ew.neg_p
              and (_contracted(ins[0], p["dims"]) > 1 or ins[k].type.size > out.type.size)), None)
    if k is None:
        return None
    # (-a) . b = -(a . b): the sign moves on, to the sum that absorbs it (it costs a pass over the result
    # at most, a fraction of the contraction's; an outer product negates its smaller side)
    inner = Var(out.type, out.hint)
    operands = tuple(negated[k].inputs[0] if j == k else a for j, a in enumerate(ins))
    return [Eqn(prim, operands, (inner,), p), Eqn(ew.neg_p, (inner,), (out,))]


def _scaled_operand(prim, ins, p, out, defs, fill_of):
    """``a . (x c)`` is ``(a c) . x`` when a is the smaller operand (the scaling of the weighted
    least-squares Hessian ``A^T diag(w) (2 A)`` moves from the n x d matrix onto the weights), and
    ``(a . x) c`` when the result is no larger than ``x``, where it meets the scalings around it (the
    RBF kernel gradient's ``2 (S @ (0.5 X))`` is ``S @ X``)."""
    for k in (0, 1):
        inner = _scaled(ins[k], defs)
        other = ins[1 - k]
        if inner is None or not isinstance(other, Var) or not isinstance(inner[0], Var) or inner[0].type.ndim < 2 \
                or inner[0].type != ins[k].type or other.dtype != out.dtype or out.dtype.kind not in "fc":
            continue  # (a vector's scaling costs little, and is often shared by several products)
        if other.type.size < ins[k].type.size:
            scaled = Var(other.type, other.hint)
            operands = (scaled, inner[0]) if k == 1 else (inner[0], scaled)
            return [Eqn(ew.mul_p, (other, inner[1]), (scaled,)), Eqn(prim, operands, (out,), p)]
        if out.type.size <= ins[k].type.size:
            product = Var(out.type, out.hint)
            operands = (other, inner[0]) if k == 1 else (inner[0], other)
            return [Eqn(prim, operands, (product,), p), Eqn(ew.mul_p, (product, inner[1]), (out,))]
    return None


def _scalar_broadcast(a, defs: dict[int, Eqn]) -> Var | None:
    """The 0-d value ``s`` when ``a`` is ``broadcast(s)``, a traced scalar filling an array."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is None or d.prim is not st.broadcast_in_dim_p or d.params["broadcast_dimensions"]:
        return None
    s = d.inputs[0]
    return s if isinstance(s, Var) and s.type.ndim == 0 else None


def _traced_scaled(a, defs: dict[int, Eqn]) -> tuple[Var, Var, Var] | None:
    """``(x, b, s)`` when ``a`` is ``x * b`` (either order), ``b = broadcast(s)`` of a 0-d ``s``."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is None or d.prim is not ew.mul_p:
        return None
    for k in (0, 1):
        x, b = d.inputs[1 - k], d.inputs[k]
        s = _scalar_broadcast(b, defs)
        if s is not None and isinstance(x, Var) and x.type == a.type and _scalar_broadcast(x, defs) is None:
            return x, b, s
    return None


def _scalar_outward(prim, ins, p, out, defs, fill_of):
    """A traced scalar moves out of a product: ``(x s) y`` is ``(x y) s``, so that products of the same
    two arrays scaled differently are one product (the RBF kernel's cotangent meets ``K = s E`` in
    ``sum(K_bar E)`` and again in ``(s K_bar) E``); and ``(x s) c`` is ``x (s c)``, the literal on the
    scalar, not on another pass over the array."""
    if out.dtype.kind not in "fc":
        return None
    for k in (0, 1):
        found = _traced_scaled(ins[k], defs)
        other = ins[1 - k]
        if found is None:
            continue
        x, b, s = found
        if isinstance(other, Literal) and other.type.ndim == 0:
            s2, b2 = Var(s.type), Var(b.type)
            return [Eqn(ew.mul_p, (s, Literal.of(other.value, s.dtype)), (s2,)),
                    Eqn(st.broadcast_in_dim_p, (s2,), (b2,), defs[id(b)].params), Eqn(ew.mul_p, (x, b2), (out,))]
        if isinstance(other, Var) and other.type == out.type and _scalar_broadcast(other, defs) is None \
                and _traced_scaled(other, defs) is None and (d := defs.get(id(other))) is not None \
                and d.prim is not st.broadcast_in_dim_p:
            product = Var(out.type, out.hint)
            return [Eqn(ew.mul_p, (x, other), (product,)), Eqn(ew.mul_p, (product, b), (out,))]
    return None


def _scalar_after_reduction(prim, ins, p, out, defs, fill_of):
    """A contraction or sum of ``x s`` (s a traced scalar) is that of ``x``, scaled after, when the result
    is smaller than ``x``: the scaling of the RBF kernel's n x n cotangent moves onto ``S @ X`` and
    ``S``'s row sums, and no pass over S makes it."""
    if out.dtype.kind not in "fc":
        return None
    for k in range(len(ins)):
        found = _traced_scaled(ins[k], defs)
        if found is None or out.type.size >= ins[k].type.size:
            continue
        x, _, scalar = found
        inner, b = Var(out.type, out.hint), Var(out.type)
        return [Eqn(prim, tuple(x if j == k else a for j, a in enumerate(ins)), (inner,), p),
                Eqn(st.broadcast_in_dim_p, (scalar,), (b,), Params({"shape": out.shape, "broadcast_dimensions": ()})),
                Eqn(ew.mul_p, (inner, b), (out,))]
    return None


def _outer(prim, ins, p, out, defs, fill_of):  # Kronecker-structured values
    return outer_rewrite(prim, ins, p, out, defs)


def _unit_contraction(prim, ins, p, out, defs, fill_of):
    return _identity_contraction(ins, p["dims"], out, defs)


def _diagonal(prim, ins, p, out, defs, fill_of):
    return _diagonal_rewrite(prim, ins, p, out, defs)


def _scaling(prim, ins, p, out, defs, fill_of):
    return _scaling_rewrite(prim, ins, p, out, defs)


def _pads(prim, ins, p, out, defs, fill_of):
    return _adjacent_pads(ins, out, defs) or _pads_gathered(ins, out, defs)


def _pads_gathered(ins, out: Var, defs: dict[int, Eqn]):
    """``(z + pad(a)) + pad(b)`` of adjacent slabs: ``z + pad(concatenate(a, b))``, so that the cotangents
    of ``x, y = u`` (``u[0]``, ``u[1]``) add to ``u_bar`` as one array, ``u_bar + concatenate(x_bar, y_bar)``,
    not one zero-padded array each."""
    for b, inner in ((ins[1], ins[0]), (ins[0], ins[1])):
        d = defs.get(id(inner)) if isinstance(inner, Var) else None
        if d is None or d.prim is not ew.add_p or d.outputs[0].type != out.type or _slab(
                defs.get(id(b)) if isinstance(b, Var) else None, out) is None:
            continue
        for a, z in ((d.inputs[1], d.inputs[0]), (d.inputs[0], d.inputs[1])):
            joined = Var(out.type)
            found = _adjacent_pads((a, b), joined, defs)
            if found is not None and _same_type(z, out):
                return [*(found if isinstance(found, list) else [found]), Eqn(ew.add_p, (z, joined), (out,))]
    return None


def _flat_concatenate(prim, ins, p, out, defs, fill_of):
    dim = p["dimension"]
    ds = [defs.get(id(a)) if isinstance(a, Var) else None for a in ins]
    if any(d is not None and d.prim is st.concatenate_p and d.params["dimension"] == dim for d in ds):
        flat = tuple(x for a, d in zip(ins, ds) for x in (
            d.inputs if d is not None and d.prim is st.concatenate_p and d.params["dimension"] == dim else (a,)))
        return Eqn(st.concatenate_p, flat, (out,), p)
    return None


def _whole_from_slices(prim, ins, p, out, defs, fill_of):
    """``concatenate`` of one array's consecutive slices along the axis, covering it: the array (a
    loop's stacked results, read a row at a time and stacked again)."""
    dim = p["dimension"]
    ds = [defs.get(id(a)) if type(a) is Var else None for a in ins]
    if any(d is None or d.prim is not st.slice_p for d in ds):
        return None
    whole = ds[0].inputs[0]
    if not _same_type(whole, out):
        return None
    at = 0
    for d in ds:
        start, limit, strides = d.params["start_indices"], d.params["limit_indices"], d.params["strides"]
        if d.inputs[0] is not whole or any(s != 1 for s in strides) or start[dim] != at or any(
                a != dim and (start[a], limit[a]) != (0, n) for a, n in enumerate(whole.shape)):
            return None
        at = limit[dim]
    return whole if at == whole.shape[dim] else None


def _divide_by_one(prim, ins, p, out, defs, fill_of):
    return ins[0] if _is(ins[1], 1) and _same_type(ins[0], out) else None


def _triangle_of_triangular(prim, ins, p, out, defs, fill_of):
    if _same_type(ins[0], out) and _triangular(ins[0], prim is st.tril_p, p["k"], defs):
        return ins[0]  # the triangle of a triangular value, such as a Cholesky factor's tangent L Phi
    return None


def _subtract_zero(prim, ins, p, out, defs, fill_of):
    x, y = ins
    if _is(y, 0) and _same_type(x, out):
        return x
    if _is(x, 0) and _same_type(y, out):
        return Eqn(ew.neg_p, (y,), (out,))
    return None


def _double_negation(prim, ins, p, out, defs, fill_of):
    d = defs.get(id(ins[0]))
    return d.inputs[0] if d is not None and d.prim is ew.neg_p else None


def _transposes(prim, ins, p, out, defs, fill_of):
    perm = p["permutation"]
    d = defs.get(id(ins[0]))
    if d is not None and d.prim is st.transpose_p:
        inner = d.params["permutation"]
        perm = tuple(inner[i] for i in perm)
        src = d.inputs[0]
        if perm == tuple(range(len(perm))):
            return src
        return Eqn(st.transpose_p, (src,), (out,), Params({"permutation": perm}))
    return ins[0] if perm == tuple(range(len(perm))) else None


def _reshape(prim, ins, p, out, defs, fill_of):
    d = defs.get(id(ins[0]))
    src = d.inputs[0] if d is not None and d.prim is st.reshape_p else ins[0]
    if isinstance(src, Var) and src.shape == out.shape:
        return src
    return Eqn(st.reshape_p, (src,), (out,), p) if src is not ins[0] else None


def _identity_broadcast(prim, ins, p, out, defs, fill_of):
    if _same_type(ins[0], out) and p["broadcast_dimensions"] == tuple(range(out.type.ndim)):
        return ins[0]
    return None


def _same_type_conversion(prim, ins, p, out, defs, fill_of):
    return ins[0] if _same_type(ins[0], out) else None


def _rank_one_update(ins, out: Var, defs: dict[int, Eqn]) -> Eqn | None:
    """``x + outer(u, v)`` of a large matrix is ``ger(x, u, v)``: the outer product added into x's
    buffer (when x is dead), not materialised as a second matrix of its own."""
    if out.type.ndim != 2 or out.type.size < rk.MIN_SIZE or out.dtype.kind not in "fc":
        return None
    for x, y in (ins, ins[::-1]):
        d = defs.get(id(y)) if isinstance(y, Var) else None
        if (isinstance(x, Var) and x.type == out.type and d is not None and d.prim is con.dot_general_p
                and d.params["dims"] == con.DotDims((), ()) and all(
                    isinstance(a, Var) and a.type.ndim == 1 and a.dtype == out.dtype for a in d.inputs)):
            return Eqn(rk.ger_p, (x, *d.inputs), (out,))
    return None


def _rank_one(prim, ins, p, out, defs, fill_of):
    return _rank_one_update(ins, out, defs)


def _triangular(a, lower: bool, k: int, defs: dict[int, Eqn], depth: int = 16) -> bool:
    """Whether ``a`` is zero outside its lower (``lower``) or upper triangle shifted by ``k`` (``np.tril(a, k)
    == a``), by construction: a triangle, a diagonal, sums, negations and scalings of those, and triangular
    products and solves (a triangular factor keeps a triangular operand triangular)."""
    d = defs.get(id(a)) if isinstance(a, Var) and depth else None
    if d is None:
        return False
    sign = 1 if lower else -1

    def tri(x):
        return _triangular(x, lower, k, defs, depth - 1)

    if d.prim in (st.tril_p, st.triu_p):
        return (d.prim is st.tril_p) == lower and sign * d.params["k"] <= sign * k
    if d.prim is st.diag_embed_p:
        return sign * d.params["offset"] <= sign * k and d.params["shape"][0] == d.params["shape"][1]
    if d.prim is st.add_diagonal_p:
        return sign * k >= 0 and tri(d.inputs[0])
    if d.prim in (ew.add_p, ew.sub_p):
        return all(tri(x) if isinstance(x, Var) else _is(x, 0) for x in d.inputs)
    if d.prim is ew.neg_p:
        return tri(d.inputs[0])
    if d.prim is ew.mul_p:  # by a scalar
        x, y = d.inputs
        return any(tri(u) and (isinstance(w, Literal) or w.type.ndim == 0) for u, w in ((x, y), (y, x)))
    if d.prim in (la.trmm_p, la.trsm_p) and k == 0 and not d.params["unit_diagonal"]:
        # op(A) B or B op(A) (and their solves) with op(A) triangular on the same side keeps B's triangle
        q = d.params
        same_side = q["lower"] == (q["trans"] == la.Trans.N) if lower else q["lower"] != (q["trans"] == la.Trans.N)
        return same_side and tri(d.inputs[1])
    return False


def _slab(d: Eqn | None, out: Var) -> tuple[int, int, int] | None:
    """(axis, start, stop) when ``d`` pads its operand into ``out`` along one axis alone, with stride 1."""
    if d is None or d.prim is not st.pad_p or d.outputs[0].type != out.type:
        return None
    p = d.params
    partial = [i for i, (n, a, b, k) in enumerate(zip(out.shape, p["start_indices"], p["limit_indices"],
                                                      p["strides"])) if (a, b, k) != (0, n, 1)]
    if len(partial) != 1 or p["strides"][partial[0]] != 1:
        return None
    axis = partial[0]
    return axis, p["start_indices"][axis], p["limit_indices"][axis]


def _adjacent_pads(ins, out: Var, defs: dict[int, Eqn]):
    """``pad(a) + pad(b)`` of adjacent slabs of one axis: one pad of ``concatenate(a, b)``, or
    the concatenation itself when it fills the axis."""
    ds = [defs.get(id(a)) if isinstance(a, Var) else None for a in ins]
    slabs = [_slab(d, out) for d in ds]
    if None in slabs or slabs[0][0] != slabs[1][0]:
        return None
    (axis, s0, e0), (_, s1, e1) = slabs
    if e0 != s1 and e1 != s0:
        return None
    parts = (ds[0].inputs[0], ds[1].inputs[0]) if e0 == s1 else (ds[1].inputs[0], ds[0].inputs[0])
    start, stop = min(s0, s1), max(e0, e1)
    concat = Eqn(st.concatenate_p, parts, (out,), Params({"dimension": axis}))
    if (start, stop) == (0, out.shape[axis]):
        return concat
    shape = out.shape[:axis] + (stop - start,) + out.shape[axis + 1:]
    joined = Var(ArrayType(shape, out.dtype))
    n = out.type.ndim
    return [Eqn(st.concatenate_p, parts, (joined,), Params({"dimension": axis})),
            Eqn(st.pad_p, (joined,), (out,), Params({
                "shape": out.shape, "start_indices": tuple(start if i == axis else 0 for i in range(n)),
                "limit_indices": tuple(stop if i == axis else out.shape[i] for i in range(n)),
                "strides": (1,) * n}))]


def _scaled(a, defs: dict[int, Eqn]) -> tuple[object, Literal] | None:
    """``(x, c)`` when ``a`` is ``x * c`` (or ``c * x``) for a scalar literal ``c``."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is None or d.prim is not ew.mul_p:
        return None
    x, y = d.inputs
    if isinstance(y, Literal) and not isinstance(x, Literal):
        return x, y
    if isinstance(x, Literal) and not isinstance(y, Literal):
        return y, x
    return None


_SOLVES = {la.trsm_p: 1, fa.potrs_p: 1, fa.getrs_p: 2}  # linear in this operand


def _scaling_rewrite(prim, ins, p, out: Var, defs: dict[int, Eqn]):
    """Scalar factors fold: ``x c1 + x c2`` is ``x (c1 + c2)``, ``(x c1) c2`` is ``x (c1 c2)``, and
    a solve of ``b c`` is ``solve(b) c``, so that
    the cotangent of ``0.5 * z @ z``, ``0.5 z + 0.5 z``, is ``z`` (floats only: exact for powers of
    two, within a rounding otherwise)."""
    if out.dtype.kind not in "fc":
        return None
    if prim is ew.add_p:  # x c1 + x c2 = x (c1 + c2), a bare x counting as x 1
        (x, c1), (y, c2) = [_scaled(a, defs) or (a, None) for a in ins]
        if x is y and isinstance(x, Var) and x.type == out.type:
            c1, c2 = (np.asarray(1 if c is None else c.value, out.dtype) for c in (c1, c2))
            value = c1 + c2
            return Eqn(ew.mul_p, (x, Literal.of(value.item(), out.dtype)), (out,))
    if prim in _SOLVES:  # a solve of a scaled right-hand side is the scaled solve: solves of b and of 0.5 b share
        k, pre = _SOLVES[prim], []
        d = defs.get(id(ins[k])) if isinstance(ins[k], Var) else None
        inner = _scaled(ins[k], defs)
        if inner is None and d is not None and d.prim is st.reshape_p:  # a vector made a column
            inner = _scaled(d.inputs[0], defs)
            if inner is not None and inner[0].type == d.inputs[0].type:
                column = Var(ins[k].type, ins[k].hint)
                pre, inner = [Eqn(st.reshape_p, (inner[0],), (column,), d.params)], (column, inner[1])
        if inner is not None and inner[0].type == ins[k].type:
            solved = Var(out.type, out.hint)
            operands = tuple(inner[0] if j == k else a for j, a in enumerate(ins))
            return [*pre, Eqn(prim, operands, (solved,), p), Eqn(ew.mul_p, (solved, inner[1]), (out,))]
    if prim is ew.mul_p:
        x, y = ins
        c2, other = (y, x) if isinstance(y, Literal) else (x, y) if isinstance(x, Literal) else (None, None)
        inner = _scaled(other, defs) if c2 is not None else None
        if inner is not None and inner[0].type == out.type:
            base, c1 = inner
            value = np.asarray(c1.value, out.dtype) * np.asarray(c2.value, out.dtype)
            return Eqn(ew.mul_p, (base, Literal.of(value.item(), out.dtype)), (out,))
    return None


def _checked_cholesky_factor(a, defs: dict[int, Eqn]) -> bool:
    """``a`` is L, or L transposed, of a potrf that raises unless it succeeded."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is not None and d.prim is st.transpose_p:
        a = d.inputs[0]
        d = defs.get(id(a)) if isinstance(a, Var) else None
    return d is not None and d.prim is la.potrf_p and d.params["check"] and a is d.outputs[0]


def _is_square_eye(d: Eqn | None, out: Var) -> bool:
    return (d is not None and d.prim is st.eye_p and d.params["k"] == 0 and out.type.ndim == 2
            and out.shape[0] == out.shape[1])


def _identity_contraction(ins, dims: con.DotDims, out: Var, defs: dict[int, Eqn]):
    """``x . I`` (I an ``eye``, square, contracted on one axis, no batch axes) is ``x`` with the
    contracted axis in I's other axis's place: a transpose at most; ``x . diag(v)`` is the same
    after scaling that axis of ``x`` by ``v``. The identity seeds of Jacobians meet their first
    contraction here and vanish (Laue's unit tensor), and diagonal matrices stay vectors."""
    if dims.lhs_batch or len(dims.lhs_contract) != 1:
        return None
    for k in (0, 1):
        a = ins[k]
        d = defs.get(id(a)) if isinstance(a, Var) else None
        scale = d.inputs[0] if _diag_embedded(d, a) else None
        if not isinstance(a, Var) or (scale is None and not _is_square_eye(d, a)):
            continue
        x = ins[1 - k]
        axis = (dims.rhs_contract if k == 0 else dims.lhs_contract)[0]
        free = [i for i in range(x.type.ndim) if i != axis]
        perm = tuple([axis, *free] if k == 0 else [*free, axis])
        eqns = []
        if scale is not None:
            b = Var(x.type)
            scaled = Var(x.type, "scaled")
            eqns = [Eqn(st.broadcast_in_dim_p, (scale,), (b,), Params({"shape": x.shape,
                                                                       "broadcast_dimensions": (axis,)})),
                    Eqn(ew.mul_p, (x, b), (scaled,))]
            x = scaled
        if perm == tuple(range(len(perm))):
            if not eqns:
                return x
            eqns[-1] = Eqn(ew.mul_p, eqns[-1].inputs, (out,))
            return eqns
        return [*eqns, Eqn(st.transpose_p, (x,), (out,), Params({"permutation": perm}))]
    return None


def _diag_embedded(d: Eqn | None, out: Var) -> bool:
    return (d is not None and d.prim is st.diag_embed_p and d.params["offset"] == 0 and d.inputs[0].type.ndim == 1
            and out.type.ndim == 2 and out.shape[0] == out.shape[1] and d.outputs[0].type == out.type)


_DIAGONAL_MAKERS = frozenset({st.eye_p, st.diag_embed_p, st.transpose_p})


def _diagonal_rewrite(prim, ins, p, out: Var, defs: dict[int, Eqn]):
    """The rules that keep diagonal matrices as vectors (see the module docstring)."""

    def same(a) -> bool:
        return _same_type(a, out)

    ds = [defs.get(id(a)) if isinstance(a, Var) else None for a in ins]
    if (prim is ew.mul_p or prim is ew.add_p) and not any([d is not None and d.prim in _DIAGONAL_MAKERS for d in ds]):
        return None  # every rewrite of a product or a sum below reads an identity, a diag_embed or a transpose
    if prim is ew.mul_p:
        for k in (0, 1):
            x = ins[1 - k]
            if _is_square_eye(ds[k], out) and same(x):
                d = Var(ArrayType(out.shape[:1], out.dtype), "diagonal")
                return [Eqn(st.diagonal_p, (x,), (d,), Params({"offset": 0})),
                        Eqn(st.diag_embed_p, (d,), (out,), Params({"shape": out.shape, "offset": 0}))]
    if prim is st.diagonal_p and ds[0] is not None and ds[0].prim is st.broadcast_in_dim_p \
            and ds[0].inputs[0].type == out.type and p["offset"] == 0 and ins[0].type.ndim == 2 \
            and ds[0].params["broadcast_dimensions"] in ((0,), (1,)):  # a vector down rows or columns
        return ds[0].inputs[0]
    if prim is st.diagonal_p and ds[0] is not None and ds[0].prim is st.broadcast_in_dim_p \
            and ds[0].inputs[0].type.ndim == 0:
        params = Params({"shape": out.shape, "broadcast_dimensions": ()})
        return Eqn(st.broadcast_in_dim_p, ds[0].inputs, (out,), params)
    if prim is red.reduce_sum_p and ds[0] is not None and ds[0].prim is st.diag_embed_p \
            and len(p["axes"]) == ins[0].type.ndim:
        v = ds[0].inputs[0]
        return Eqn(red.reduce_sum_p, (v,), (out,), Params({"axes": tuple(range(v.type.ndim))}))
    if prim is red.reduce_sum_p and ds[0] is not None and _diag_embedded(ds[0], ins[0]) and len(p["axes"]) == 1 \
            and ds[0].inputs[0].type == out.type:  # the row (or column) sums of diag(v) are v
        return ds[0].inputs[0]
    if prim is ew.add_p:
        for k in (0, 1):
            x = ins[1 - k]
            if _diag_embedded(ds[k], out) and same(x):
                v = ds[k].inputs[0]
                dv = defs.get(id(v)) if isinstance(v, Var) else None
                if dv is not None and dv.prim is st.broadcast_in_dim_p and dv.inputs[0].type.ndim == 0:
                    v = dv.inputs[0]  # the same scalar all along the diagonal
                return Eqn(st.add_diagonal_p, (x, v), (out,))
            if _is_square_eye(ds[k], out) and same(x):  # x + I
                return Eqn(st.add_diagonal_p, (x, Literal.of(1, out.dtype)), (out,))
            if (ds[k] is not None and ds[k].prim is st.transpose_p and ds[k].inputs[0] is x and same(x)
                    and out.type.ndim == 2 and out.shape[0] == out.shape[1]):
                return Eqn(st.add_transpose_p, (x,), (out,))
    return None


def _transposed_operand(prim, ins, p, out: Var, defs: dict[int, Eqn], fill_of=None):
    """A contraction of ``x.T`` contracts ``x`` on the other axes, when that keeps the order of the
    result's axes: ``a @ (b.T).T`` is ``a @ b``, and ``t = B.T; S @ t`` prints ``S @ B.T``."""
    if prim is not con.dot_general_p:
        return None
    dims: con.DotDims = p["dims"]
    for k in (0, 1):
        d = defs.get(id(ins[k])) if isinstance(ins[k], Var) else None
        if d is None or d.prim is not st.transpose_p:
            continue
        perm = d.params["permutation"]
        contract, batch = (dims.lhs_contract, dims.lhs_batch) if k == 0 else (dims.rhs_contract, dims.rhs_batch)
        free = [perm[j] for j in con.free_axes(len(perm), contract, batch)]
        if free != sorted(free):
            continue
        moved = (tuple(perm[j] for j in contract), tuple(perm[j] for j in batch))
        new = con.DotDims(moved[0], dims.rhs_contract, moved[1], dims.rhs_batch) if k == 0 else \
            con.DotDims(dims.lhs_contract, moved[0], dims.lhs_batch, moved[1])
        operands = (d.inputs[0], ins[1]) if k == 0 else (ins[0], d.inputs[0])
        return Eqn(prim, operands, (out,), Params({**p, "dims": new}))
    return None


def _negated(a, defs: dict[int, Eqn]):
    """``x`` when ``a`` is ``-x``."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    return d.inputs[0] if d is not None and d.prim is ew.neg_p else None


def _signs(prim, ins, p, out: Var, defs: dict[int, Eqn], fill_of=None):
    """Negations fold into the arithmetic that reads them: ``a + (-b)`` is ``a - b``, ``(-a) + b`` is
    ``b - a``, ``a - (-b)`` is ``a + b``, ``(-a) - b`` is ``-(a + b)``; ``(-x) c`` and ``-(x c)`` are
    ``x (-c)`` for a literal ``c``, and ``x (-1)`` is ``-x``; a transpose, reshape, triangle or sum of
    ``-x``, or a product or quotient of it with an array as large, is the negated one of ``x`` (no
    larger: the sign moves on at no cost, to a sum that absorbs it). Transposing a subtraction makes
    such negations of cotangents."""
    if prim in (ew.add_p, ew.sub_p) and all([isinstance(a, Var) and a.type == out.type for a in ins]):
        a, b = ins
        da, db = defs.get(id(a)), defs.get(id(b))  # each looked up once (``_negated`` of each, below)
        if _diagonal_matrix(da, out) or _diagonal_matrix(db, out):
            if prim is ew.sub_p and (x := _negated(b, defs)) is not None:  # diag(v) - (-x) = x + diag(v)
                return Eqn(ew.add_p, (x, a), (out,))
            return None  # x + diag(v) updates x's diagonal (``_diagonal_rewrite``)
        neg_a = da.inputs[0] if da is not None and da.prim is ew.neg_p else None
        neg_b = db.inputs[0] if db is not None and db.prim is ew.neg_p else None
        if (x := neg_a) is not None and (y := neg_b) is not None:
            if prim is ew.sub_p:  # (-x) - (-y) = y - x
                return Eqn(ew.sub_p, (y, x), (out,))
            inner = Var(out.type, out.hint)  # (-x) + (-y) = -(x + y)
            return [Eqn(ew.add_p, (x, y), (inner,)), Eqn(ew.neg_p, (inner,), (out,))]
        if (x := neg_b) is not None:
            return Eqn(ew.sub_p if prim is ew.add_p else ew.add_p, (a, x), (out,))
        if prim is ew.add_p and (x := neg_a) is not None:
            return Eqn(ew.sub_p, (b, x), (out,))
        if (x := neg_a) is not None:  # (-a) - b = -(a + b): the sign moves on
            inner = Var(out.type, out.hint)
            return [Eqn(ew.add_p, (x, b), (inner,)), Eqn(ew.neg_p, (inner,), (out,))]
    if prim is ew.mul_p and out.dtype.kind in "fc":
        for k in (0, 1):
            if isinstance(ins[1 - k], Literal) and (x := _negated(ins[k], defs)) is not None and x.type == out.type:
                return Eqn(ew.mul_p, (x, Literal.of(-ins[1 - k].value, out.dtype)), (out,))
    if prim is ew.neg_p and out.dtype.kind in "fc" and (scaled := _scaled(ins[0], defs)) is not None \
            and scaled[0].type == out.type:
        return Eqn(ew.mul_p, (scaled[0], Literal.of(-scaled[1].value, out.dtype)), (out,))
    if prim is ew.mul_p and out.dtype.kind in "fc":
        for k in (0, 1):
            if _is(ins[1 - k], -1) and isinstance(ins[k], Var) and ins[k].type == out.type:
                return Eqn(ew.neg_p, (ins[k],), (out,))
    if prim in _SAME_SIZE_LINEAR and (x := _negated(ins[0], defs)) is not None:
        inner = Var(out.type, out.hint)  # the sign moves on, towards the sum that absorbs it
        return [Eqn(prim, (x, *ins[1:]), (inner,), p), Eqn(ew.neg_p, (inner,), (out,))]
    if prim in (ew.mul_p, ew.div_p) and out.dtype.kind in "fc" and all(
            isinstance(a, Var) and a.type == out.type for a in ins):
        if (x := _negated(ins[0], defs)) is not None and (y := _negated(ins[1], defs)) is not None:
            return Eqn(prim, (x, y), (out,), p)  # (-a) (-b) = a b
        for k in (0, 1):
            if (x := _negated(ins[k], defs)) is not None:  # (-a) b = -(a b), as large
                inner = Var(out.type, out.hint)
                operands = (x, ins[1]) if k == 0 else (ins[0], x)
                return [Eqn(prim, operands, (inner,), p), Eqn(ew.neg_p, (inner,), (out,))]
    return None


# linear, and no larger than their operand: a sign moved past them costs no more
_SAME_SIZE_LINEAR = {st.transpose_p, st.reshape_p, st.tril_p, st.triu_p, red.reduce_sum_p}


def _contracted(lhs: Var, dims: con.DotDims) -> int:
    """How many products each entry of a contraction sums."""
    return math.prod(lhs.shape[a] for a in dims.lhs_contract)


def _diagonal_matrix(d: Eqn | None, out: Var) -> bool:
    return _is_square_eye(d, out) or _diag_embedded(d, out)



def _symmetric(a, defs: dict[int, Eqn], depth: int = 16) -> bool:
    """Whether the square matrix ``a`` equals its transpose by construction: ``x + x.T``, ``x x^T``,
    potri and syrk of real factors, a diagonal, and sums, negations, scalings, diagonal updates and
    symmetric rank-1 updates (``ger(S, x, x)``) of those. (What needs no lookup is tested first.)"""
    shape = a.type.shape if isinstance(a, Var) and depth else None
    if shape is None or len(shape) != 2 or shape[0] != shape[1]:
        return False
    d = defs.get(id(a))
    if d is None:
        return False
    prim = d.prim
    if prim is st.add_transpose_p:
        return True
    if prim is st.diag_embed_p:
        return d.params["offset"] == 0
    if prim is st.eye_p and d.params["k"] == 0:
        return True
    if prim is la.potri_p or prim is la.syrk_p:
        return a.dtype.kind != "c"  # Hermitian, not symmetric, when complex
    if prim is con.dot_general_p:  # x x^T, either side scaled by a literal
        dims = d.params["dims"]
        if dims.lhs_batch or dims.lhs_contract != dims.rhs_contract:
            return False
        u, v = d.inputs
        x, y = _scaled(u, defs), _scaled(v, defs)
        x, y = u if x is None else x[0], v if y is None else y[0]
        return x is y and x.type.ndim == 2
    if (prim is ew.add_p or prim is ew.sub_p) and _mirrored(*d.inputs, defs):  # r[:, None] + r[None, :]
        return True
    if prim is ew.neg_p or prim is st.add_diagonal_p or (prim is st.transpose_p and d.params["permutation"] == (1, 0)):
        return _symmetric(d.inputs[0], defs, depth - 1)
    if prim in _ELEMENTWISE:  # entrywise of symmetric matrices and scalars (exp(-d2 / 2), K * W, ...)
        matrix = False  # (a symmetric operand is a matrix)
        for x in d.inputs:
            if isinstance(x, Literal) or not x.type.shape:
                continue
            if not _symmetric(x, defs, depth - 1):
                return False
            matrix = True
        return matrix
    if prim is rk.ger_p:
        return d.inputs[1] is d.inputs[2] and _symmetric(d.inputs[0], defs, depth - 1)
    if prim is st.broadcast_in_dim_p:
        return d.inputs[0].type.ndim == 0 if isinstance(d.inputs[0], Var) else True
    return False


_ELEMENTWISE = frozenset(v for v in vars(ew).values() if isinstance(v, Primitive))
# what may define a matrix that ``_symmetric`` finds symmetric (``_symmetry``'s triggers)
_SYMMETRIC_MAKERS = _ELEMENTWISE | {st.add_transpose_p, st.diag_embed_p, st.eye_p, la.potri_p, la.syrk_p,
                                    con.dot_general_p, st.add_diagonal_p, st.transpose_p, rk.ger_p,
                                    st.broadcast_in_dim_p}


def _mirrored(x, y, defs: dict[int, Eqn]) -> bool:
    """``x`` and ``y`` are one vector broadcast along the columns and along the rows."""
    def spread(a):  # (vector, the axis it runs along) of a broadcast of v or of v as a column or row
        d = defs.get(id(a)) if isinstance(a, Var) and a.type.ndim == 2 else None
        if d is None or d.prim is not st.broadcast_in_dim_p or not isinstance(d.inputs[0], Var):
            return None
        v, dims = d.inputs[0], d.params["broadcast_dimensions"]
        r = defs.get(id(v))
        if v.type.ndim == 2 and dims == (0, 1) and r is not None and r.prim is st.reshape_p \
                and isinstance(r.inputs[0], Var) and r.inputs[0].type.ndim == 1 and 1 in v.shape:
            return r.inputs[0], 0 if v.shape[1] == 1 else 1
        return (v, dims[0]) if v.type.ndim == 1 else None

    sx, sy = spread(x), spread(y)
    return sx is not None and sy is not None and sx[0] is sy[0] and sx[1] != sy[1]


# a symmetric matrix of at least this many entries is read as S B, not B^T S (see ``_symmetry``): below
# it, the two small products cost less than the transpose costs the reader
_SHARED_PRODUCT_MIN = 1 << 10


def _symmetry(prim, ins, p, out: Var, defs: dict[int, Eqn], fill_of=None):
    """A symmetric matrix (``_symmetric``) is its own transpose: symmetrising it doubles it, transposing it
    is itself, a product reads it untransposed (``S.T @ B`` is ``S @ B``, which CSE then shares) and its
    column sums are its row sums."""
    if prim is st.add_transpose_p and _symmetric(ins[0], defs):
        return Eqn(ew.mul_p, (ins[0], Literal.of(2, out.dtype)), (out,))
    if prim is st.transpose_p and p["permutation"] == (1, 0) and _symmetric(ins[0], defs):
        return ins[0]
    if prim is red.reduce_sum_p and p["axes"] == (0,) and _symmetric(ins[0], defs):  # column sums are row sums
        return Eqn(prim, ins, (out,), Params({**p, "axes": (1,)}))
    if prim is not con.dot_general_p:
        return None
    dims: con.DotDims = p["dims"]
    if dims.lhs_batch or len(dims.lhs_contract) != 1:
        return None
    a, b = ins[0].type.shape, ins[1].type.shape  # (a symmetric matrix is square)
    if len(a) == 2 and a[0] == a[1] and dims.lhs_contract == (0,) and _symmetric(ins[0], defs):
        return Eqn(prim, ins, (out,), Params({**p, "dims": con.DotDims((1,), dims.rhs_contract)}))
    if len(b) == 2 and b[0] == b[1]:
        if dims.rhs_contract == (1,) and _symmetric(ins[1], defs):
            return Eqn(prim, ins, (out,), Params({**p, "dims": con.DotDims(dims.lhs_contract, (0,))}))
        if ins[0].type.ndim == 2 and dims.lhs_contract == (0,) and dims.rhs_contract == (0,) \
                and ins[0].shape[1] < ins[0].shape[0] and ins[1].type.size >= _SHARED_PRODUCT_MIN \
                and _symmetric(ins[1], defs):
            # B^T S = (S B)^T for a thin B (the RBF kernel's X): the product S B, which CSE shares
            product = Var(ArrayType(out.shape[::-1], out.dtype), out.hint)
            return [Eqn(prim, (ins[1], ins[0]), (product,), Params({**p, "dims": con.DotDims((1,), (0,))})),
                    Eqn(st.transpose_p, (product,), (out,), Params({"permutation": (1, 0)}))]
    return None


# Each primitive's rewrites, in the order they are tried (``_visit``), and what may trigger each (``_plan``): the
# primitives defining an operand that it looks for, or the literals (``_MARKS``), per primitive where it
# differs, or None: always tried. A rule sees only the equations of the primitives it is listed for, and of
# those only the ones with an operand it looks for, so an equation costs the rules that can rewrite it.
_DIAGONAL_TRIGGERS = {ew.mul_p: _DIAGONAL_MAKERS, ew.add_p: _DIAGONAL_MAKERS, st.diagonal_p: {st.broadcast_in_dim_p},
                      red.reduce_sum_p: {st.diag_embed_p}}
_SIGNS_TRIGGERS = {ew.mul_p: {ew.neg_p, _MINUS_ONE}, ew.neg_p: {ew.mul_p},
                   **{prim: {ew.neg_p} for prim in (ew.add_p, ew.sub_p, ew.div_p, *_SAME_SIZE_LINEAR)}}
# x c1 + x c2 (or x): a scaling; (x c1) c2: a literal and a scaling; a solve of a scaled (or reshaped) operand
_SCALING_TRIGGERS = {ew.add_p: {ew.mul_p}, ew.mul_p: _literal_and({ew.mul_p}),
                     **{prim: _at(k, {ew.mul_p, st.reshape_p}) for prim, k in _SOLVES.items()}}
# what ``outer.outer_rewrite`` looks through (``outer._PRODUCTS``): a broadcast of a broadcast, a product of one,
# a scaling of one by a literal, a sum of two
_OUTER_PRODUCTS = {st.broadcast_in_dim_p, ew.neg_p, ew.mul_p}
_OUTER_TRIGGERS = {st.broadcast_in_dim_p: {st.broadcast_in_dim_p}, con.dot_general_p: _OUTER_PRODUCTS,
                   ew.neg_p: _OUTER_PRODUCTS, ew.mul_p: _literal_and(_OUTER_PRODUCTS),
                   ew.add_p: _both(_OUTER_PRODUCTS), ew.sub_p: _both(_OUTER_PRODUCTS), st.transpose_p: _OUTER_PRODUCTS}
_CHAIN = [
    (_identity, {sp.stop_gradient_p}, None),
    (_neutral, set(_NEUTRAL), {ew.mul_p: {_ONE}, ew.add_p: {_ZERO}}),
    (_times_zero, {ew.mul_p}, {_ZERO}),
    (_scaling, {ew.add_p, ew.mul_p, *_SOLVES}, _SCALING_TRIGGERS),  # and x + x (``_visit``)
    (_scalar_outward, {ew.mul_p}, {ew.mul_p}),
    (_scalar_after_reduction, {con.dot_general_p, red.reduce_sum_p}, {ew.mul_p}),
    (_real_conjugate_transpose, {la.trsm_p, la.trmm_p}, None),
    (_unchecked_solve, {la.trsm_p}, {st.transpose_p, la.potrf_p}),
    (_outer_by_fill, {con.dot_general_p}, {st.broadcast_in_dim_p}),
    (_negated_operand, {con.dot_general_p}, {ew.neg_p}),
    (_scaled_operand, {con.dot_general_p}, {ew.mul_p}),
    (_transposed_operand, {con.dot_general_p}, {st.transpose_p}),
    (_signs, {ew.add_p, ew.sub_p, ew.mul_p, ew.div_p, ew.neg_p, *_SAME_SIZE_LINEAR}, _SIGNS_TRIGGERS),
    (_symmetry, {st.add_transpose_p, st.transpose_p, con.dot_general_p, red.reduce_sum_p}, _SYMMETRIC_MAKERS),
    (_outer, OUTER_REWRITES, _OUTER_TRIGGERS),
    (_unit_contraction, {con.dot_general_p}, {st.eye_p, st.diag_embed_p}),
    (_diagonal, {ew.mul_p, ew.add_p, st.diagonal_p, red.reduce_sum_p}, _DIAGONAL_TRIGGERS),
    (_pads, {ew.add_p}, {st.pad_p}),
    (_rank_one, {ew.add_p}, {con.dot_general_p}),
    (_flat_concatenate, {st.concatenate_p}, {st.concatenate_p}),
    (_whole_from_slices, {st.concatenate_p}, {st.slice_p}),
    (_divide_by_one, {ew.div_p}, {_ONE}),
    (_triangle_of_triangular, {st.tril_p, st.triu_p}, None),
    (_subtract_zero, {ew.sub_p}, {_ZERO}),
    (_double_negation, {ew.neg_p}, {ew.neg_p}),
    (_transposes, {st.transpose_p}, None),
    (_reshape, {st.reshape_p}, None),
    (_identity_broadcast, {st.broadcast_in_dim_p}, None),
    (_same_type_conversion, {st.convert_element_type_p}, None),
]
_RULES = {prim: tuple(rule for rule, prims, _ in _CHAIN if prim in prims) for _, prims, _ in _CHAIN for prim in prims}
_TRIGGERS = {rule: triggers for rule, _, triggers in _CHAIN}

# a scan's body is simplified before it is transposed (duplicates merged, structure used: see there)
control.scan.BODY_PASS = simplify
