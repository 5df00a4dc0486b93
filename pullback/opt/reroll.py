"""Rerolling: a Python loop that tracing unrolled, found again and made a ``scan``.

Tracing runs a Python ``for`` loop step by step, so T steps become T copies of the loop's body,
and every stage after tracing pays for every copy: a Kalman filter over 300 observations is
11,000 equations before differentiation and 30,000 after. When a run of equations repeats with
a period (the same primitives, params, types and source lines, step after step), and each copy
reads nothing but

- values of the copy before it (the loop's carry; the first copy reads their initial values), or values
  the copy before read as its carry (``a`` of ``a, b = b, f(a)``, which no equation makes: a carry the
  body passes on, ``_Loop.delayed``),
- values from before the run, the same in every copy (loop invariants), and
- one slice per step of an array from before the run, ``v[t]`` (the scan's ``xs``), or a literal
  that changes from step to step (a constant ``xs``),

and writes, if it writes by index, one whole row per step of an array it carries (``ys[t] = h``,
made a write at ``t`` in the body), then the run is one ``scan`` whose body is the first copy
(``control.scan_p``): everything after tracing costs the body, not T, and the gradient prints as
the two loops a person would write.

Values of a copy read after the run are the scan's final carry (the last copy's) or its stacked
outputs (an earlier copy's). Loop-invariant equations of the body, such as ``B.T`` written in
the loop, are hoisted out, as ``pb.scan`` does. The rerolled program computes exactly what the
unrolled one did, operation for operation, in the same order, but for an invariant that each step
recomputes: that is computed once.

Runs are found by their period: the most frequent distances from an equation to its next few
repeats (a step that calls a helper three times, or holds an inner loop, repeats most equations
within the step; its own period is the distance to the repeat a step later), each tried by the run
it covers, the longest first. The step may start anywhere in the period (code before the loop may
end as a step does), so a few cuts are tried, the one fewest values cross first. Invariants a
step recomputes (a helper's ``1 - mask``) are one value to the check, and hoisted once. Inner
loops are rolled in the body in turn. A long run that is not rolled is reported in the log
(``pullback`` logger, INFO), with the first equation that reads otherwise than in the first step.

A first step that lacks the step's first equations (``mu = A @ f if t else f``: it starts from the
initial values) or reads a number where later steps read a carry (``nll = 0.0``) is folded into the loop
(``_fold_first``), so that no step is printed before it; a last step lacking the step's last equations
folds in likewise (``_fold_last``). A loop is cut where a statement of the user's starts (``_mid_statement``),
not inside one, whose partial value the carry would be; a first step that lacks a statement's start folds
in only where it read fills where the step moves the carry (``np.roll`` of ``p = np.zeros(n)``: ``_fold_fills``),
the carry then starting from the fill, and else stays before the loop.

Short loops stay unrolled (``MIN_STEPS``, ``MIN_EQNS``): there, straight-line code costs little to
compile and lets the optimiser work across steps. ``differentiate(f, reroll=False)`` keeps every
loop unrolled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from pullback import log
from pullback.ir import sourcemap
from pullback.ir.core import Eqn, Literal, Params, Primitive, Program, Var, effectful
from pullback.ir.types import ArrayType
from pullback.primitives import control
from pullback.primitives import elementwise as ew
from pullback.primitives import indexing as ix
from pullback.primitives import structural as st
from pullback.primitives.contractions import dot_general_p
from pullback.primitives.reductions import reduce_sum_p

MIN_STEPS = 4  # copies of the body, at least
MIN_EQNS = 1_000  # equations in the run, at least
_LOOPS = 16  # runs rolled per program, at most
# a literal operand that changes from step to step becomes a value read from a table: elementwise
# operations take it broadcast (elsewhere, a literal may be a static operand)
_ELEMENTWISE = frozenset(v for v in vars(ew).values() if isinstance(v, Primitive))
# a run of these alone only moves data (the rows of a loop's stacked results read one by one, say):
# no loop to make of it
_MOVES = frozenset({st.slice_p, st.reshape_p, st.broadcast_in_dim_p, st.transpose_p})
_AT_INDEX = frozenset({ix.scatter_p, ix.scatter_add_p, ix.gather_p})  # ``ys[t] = h``, ``x[t, idx]``
_PLACED = _AT_INDEX | {st.slice_p}  # the primitives whose signature leaves out where they read or write


def reroll(program: Program, min_steps: int = MIN_STEPS, min_eqns: int = MIN_EQNS) -> Program:
    """``program`` with each long periodic run of equations made a ``scan`` (see the module's
    docstring); ``program`` itself when there is none."""
    signatures = _Signatures()
    for _ in range(_LOOPS):
        loop = _find(program, min_steps, min_eqns, signatures)
        if loop is None:
            break
        program, loop = _fold_last(*_fold_first(program, loop))
        program = _rolled(program, loop, min_steps, min_eqns)
    return program


# --- finding a run -------------------------------------------------------------------------


def _signature(eqn: Eqn, loose: bool = False) -> tuple:
    """What two copies of one equation share: a slice's window moves from step to step, its size does not.
    ``loose``: a number may stand where another copy reads a value (a carry's initial value)."""
    params = eqn.params
    if eqn.prim is st.slice_p:
        params = (params["strides"], tuple(b - a for a, b in zip(params["start_indices"], params["limit_indices"])))
    elif eqn.prim in _AT_INDEX:  # (an index that moves keeps the run, to be reported if not rolled)
        params = (tuple(type(e) if type(e) is ix.Int else e for e in params["index"]), params.get("unique_indices"))
    source = eqn.source  # (its fields: compared in C, not by the dataclass's methods)
    return (eqn.prim, params, source and source.filename, source and source.lineno,
            tuple([a.type if type(a) is Var or loose else (Literal, a.type) for a in eqn.inputs]),
            tuple([v.type for v in eqn.outputs]))


class _Signatures:
    """Each equation's signature as a number, equal numbers for equal signatures, kept across the
    searches of one ``reroll``: rolling a loop keeps the equations around it."""

    def __init__(self):
        self._numbers: dict[tuple, int] = {}
        self._of: dict[int, tuple[Eqn, int]] = {}  # id of an equation -> (it, kept alive; its number)

    def __call__(self, eqns: tuple[Eqn, ...]) -> np.ndarray:
        numbers, of, out = self._numbers, self._of, np.empty(len(eqns), np.int64)
        for n, eqn in enumerate(eqns):
            known = of.get(id(eqn))
            if known is None:
                known = of[id(eqn)] = (eqn, numbers.setdefault(_signature(eqn), len(numbers)))
            out[n] = known[1]
        return out


@dataclass
class _Loop:
    """A run of ``steps`` copies of ``period`` equations from ``start``, and how the copies read."""

    start: int
    period: int
    steps: int
    carry_of: dict[tuple[int, int], tuple] = field(default_factory=dict)  # (eqn, operand) -> carry key
    # (eqn, operand) -> the (eqn, operand) whose value it reads a step later: ``a`` of ``a, b = b, f(a)``, made
    # by no equation, reads the ``b`` the step before read (a carry too, passed on unchanged)
    delayed: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    literals: dict[tuple[int, int], list] = field(default_factory=dict)  # (eqn, operand) -> value per step
    tables: dict[tuple[int, int], list] = field(default_factory=dict)  # the same, of constant arrays
    sliced: dict[int, int] = field(default_factory=dict)  # eqn -> the axis its window moves along
    placed: dict[int, int] = field(default_factory=dict)  # eqn (a scatter, ``ys[t] = h``) -> the axis it writes along
    pos: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # id of a var of the run -> (copy, eqn, out)
    why: str = ""  # why copy ``steps`` reads otherwise than the first (for the log)
    where: int = 0  # the equation of the step it was found at


def _find(program: Program, min_steps: int, min_eqns: int, signatures: _Signatures) -> _Loop | None:
    """The longest periodic run that reads only what a loop can (``_check``), if one is long enough."""
    eqns, outputs = program.eqns, program.outputs
    if len(eqns) < min_eqns:
        return None
    ids = signatures(eqns)
    candidates = []
    for k in _periods(ids, min_steps):
        for a, b in _runs(ids, k, max((min_steps - 1) * k, -(-min_eqns // k) * k - k)):
            if (b - a + k) // k >= min_steps and (b - a + k) // k * k >= min_eqns:
                candidates.append((a, b, k))
    if not candidates:
        return None
    last_use = _last_uses(eqns, outputs)
    before = _Before(eqns, dict(zip(map(id, program.constvars), program.constvals)))
    # the run covering the most equations first; of runs covering as many, the shortest period (the
    # loop itself rather than two of its steps taken as one)
    unrolled = None  # the longest run not rolled, and why: for the log
    for a, b, k in sorted(candidates, key=lambda c: (-((c[1] - c[0] + c[2]) // c[2] * c[2]), c[2], c[0])):
        if all(e.prim in _MOVES for e in eqns[a:a + k]):
            continue
        while (b + k - a) // k >= min_steps:
            steps, failed = 1, None
            for p in _cuts(eqns, last_use, a, b, k, min_steps)[:_CUTS_TRIED]:
                loop = _check(eqns, p, k, (b + k - p) // k, before)
                if loop.steps >= min_steps and loop.steps * k >= min_eqns:
                    return loop
                if failed is None:
                    failed = loop
                steps = max(steps, loop.steps)
            if unrolled is None and failed is not None:
                unrolled = (b + k - a) // k, failed
            a += steps * k  # the copies from the first that reads otherwise may still be a loop
    if unrolled is not None and log.logger.isEnabledFor(logging.INFO):
        _log_unrolled(eqns, *unrolled)
    return None


def _log_unrolled(eqns: tuple[Eqn, ...], steps: int, loop: _Loop) -> None:
    """Say that a long run of repeating steps stays unrolled, and why: the first equation found
    reading otherwise than in the first step."""
    first, odd = eqns[loop.start], eqns[loop.start + loop.steps * loop.period + loop.where]
    log.logger.info("a loop of %d steps of %d equations (from %s) was seen but not rolled into a scan: in step %d, "
                    "%s (%s): %s; its steps stay unrolled, so compiling costs each of them",
                    steps, loop.period, first.source or "the program", loop.steps, odd.prim.name,
                    odd.source or "no source line", loop.why)


_CUTS_TRIED = 4  # where a step may start, the likeliest first: code before a loop may end as its steps do
_LAGS = 4  # a step's equations may each occur up to this many times in a step (a helper called in it)
_PERIODS = 64  # distances between repeats tried, the most frequent first


def _periods(ids: np.ndarray, min_steps: int) -> list[int]:
    """Periods worth trying: the most frequent distances from an equation to the 1st .. ``_LAGS``-th
    later one like it. A loop whose body holds an inner loop, or calls a helper several times, has
    every equation's nearest repeat inside one step; its own period is the distance to the c-th repeat
    of an equation that occurs c times a step (once, for most)."""
    order = np.argsort(ids, kind="stable")
    same_id = ids[order]
    gaps = []
    for c in range(1, _LAGS + 1):
        same = same_id[c:] == same_id[:-c]
        gaps.append(order[c:][same] - order[:-c][same])
    values, counts = np.unique(np.concatenate(gaps), return_counts=True)
    keep = counts >= min_steps - 1
    values, counts = values[keep], counts[keep]
    return [int(k) for k in values[np.argsort(-counts, kind="stable")[:_PERIODS]]]


def _runs(ids: np.ndarray, k: int, shortest: int = 1) -> list[tuple[int, int]]:
    """Maximal ``[a, b)``, ``shortest`` long at least, with ``ids[i] == ids[i + k]`` for every i in it:
    equations a .. b + k - 1 repeat."""
    if k >= len(ids):
        return []
    edges = np.diff((ids[:-k] == ids[k:]).view(np.int8), prepend=0, append=0)
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long = ends - starts >= shortest
    return list(zip(starts[long].tolist(), ends[long].tolist()))


def _last_uses(eqns: tuple[Eqn, ...], outputs) -> dict[int, int]:
    last = {}
    for i, e in enumerate(eqns):
        for a in e.inputs:
            last[id(a)] = i
    end = len(eqns)
    for a in outputs:
        last[id(a)] = end
    return last


def _cuts(eqns, last_use: dict[int, int], a: int, b: int, k: int, min_steps: int) -> list[int]:
    """Where the first copy may start, best first. A run found by its repeats can start anywhere in a
    step; the loop is clearest cut where the fewest values pass from one step to the next (the carry),
    so: the cut the fewest values cross, then the one keeping the most copies in the run, then the
    earliest."""
    cuts = [p for p in range(a, a + k) if (b + k - p) // k >= min_steps]
    if len(cuts) < 2:
        return [a]
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
        mid = _mid_statement(eqns[p + k - 1])  # (a statement's start: the step's share left over goes before it)
        scored.append((running, mid, -((b + k - p) // k), 0 if mid else (b + k - p) % k, p))
    return [p for *_, p in sorted(scored)]


def _mid_statement(eqn: Eqn) -> bool:
    """Whether a cut right after ``eqn`` falls inside a statement of the user's: a statement's last
    equation makes the value it assigns, which carries the user's name (``name_from_source``); an
    unnamed one is an operand of the rest of its statement (``div + np.roll(p, 1)`` of ``p = (...) / 4``).
    A loop cut there would carry that partial value, a name no one wrote."""
    return not any(v.hint for v in eqn.outputs)


def _key(a) -> object:
    return ("literal", a.value, a.dtype) if type(a) is Literal else id(a)


class _Before:
    """Values from before a run, and which of them are the same value: two copies of a step may each
    compute an invariant afresh (a helper called each step recomputes ``1 - mask``), and read each its own."""

    DEPTH = 64  # equations followed back, at most, to show two values the same

    def __init__(self, eqns: tuple[Eqn, ...], constants: dict):
        self.constants = constants
        self._eqns = eqns
        self._made: dict[int, tuple[Eqn, int]] = {}  # id of a var -> (the equation making it, which output)
        self._upto = 0  # ``_made`` holds the equations before this one
        self.start = 0  # the first equation of the run checked (``_check`` sets it)
        self._same: dict[tuple[int, int], bool] = {}

    def same(self, a, b, depth: int = 0) -> bool:
        """Whether ``a`` and ``b`` are the same value: one var, equal literals or constants, or outputs of
        equal equations of the same values (none with an effect)."""
        if a is b:
            return True
        if type(a) is not type(b) or a.type != b.type:
            return False
        if type(a) is Literal:
            return a.value == b.value and type(a.value) is type(b.value)
        key = (id(a), id(b))
        known = self._same.get(key)
        if known is not None:
            return known
        if self._upto < self.start:  # what the copies read from before the run is made before the run
            made = self._eqns[self._upto:self.start]
            self._made.update((id(v), (e, o)) for e in made for o, v in enumerate(e.outputs))
            self._upto = self.start
        ea, eb = self._made.get(id(a)), self._made.get(id(b))
        if ea is None or eb is None:
            ca, cb = self.constants.get(id(a)), self.constants.get(id(b))
            result = (ea is None and eb is None and ca is not None and cb is not None
                      and np.asarray(ca).dtype == np.asarray(cb).dtype and np.array_equal(ca, cb))
        else:
            (e, o), (f, r) = ea, eb
            result = (o == r and e.prim is f.prim and depth < self.DEPTH and len(e.inputs) == len(f.inputs)
                      and (e.params is f.params or e.params == f.params) and not effectful(e)
                      and all(self.same(x, y, depth + 1) for x, y in zip(e.inputs, f.inputs)))
        self._same[key] = result
        return result


def _check(eqns: tuple[Eqn, ...], p: int, k: int, m: int, before: _Before) -> _Loop:
    """The copies from ``p`` that read only what a loop can, as a ``_Loop`` (``steps``: how many, from the first)."""
    pos: dict[int, tuple[int, int, int]] = {}  # id of a var of the copies so far -> (copy, equation, output)
    before.start = p
    loop = _Loop(p, k, m, pos=pos)
    for j in range(m):
        for i in range(k):
            for o, v in enumerate(eqns[p + j * k + i].outputs):
                pos[id(v)] = (j, i, o)
        why = _copy_reads(eqns, loop, pos, j, before) if j else None
        if why is not None:
            loop.steps, loop.why = j, why
            break
    for values in (*loop.literals.values(), *loop.tables.values()):
        del values[loop.steps:]
    return loop


def _copy_reads(eqns, loop: _Loop, pos: dict, j: int, before: _Before) -> str | None:
    """None if copy ``j`` reads as the first does (recording carries, moving windows, changing literals
    and constants: tracing makes a new constant of an array each step reads from the user's scope),
    else why not, for the log (``loop.where``: the equation's place in the step)."""
    p, k = loop.start, loop.period
    base = p + j * k
    for i in range(k):
        e0, ej = eqns[p + i], eqns[base + i]
        loop.where = i
        moving = i in loop.sliced or i in loop.placed
        if e0.prim in _PLACED and e0.params is not ej.params and e0.params != ej.params:  # (else equal: same signature)
            if not (_window(e0, ej, j, loop, i, pos) or _row_written(e0, ej, j, loop, i)):
                return _differs(e0)
        elif moving:
            return "a window that moved in earlier steps stays in this one"
        for q, (a0, aj) in enumerate(zip(e0.inputs, ej.inputs)):
            carry = loop.carry_of.get((i, q))
            where = pos.get(id(aj)) if type(aj) is Var else None
            passed = loop.delayed.get((i, q))
            if passed is not None:  # reads what the copy before read at ``passed``, a carry
                read = eqns[base - k + passed[0]].inputs[passed[1]]
                if (passed not in loop.carry_of and passed not in loop.delayed) or aj is not read:
                    return "where the first steps read the value the step before read, it reads another"
                continue
            if carry is not None:  # the carry's slot reads, in each copy, the copy before's value
                if where != (j - 1, carry[0], carry[1]):
                    return "where the first steps read the step before's value, it reads another"
                continue
            if type(aj) is Literal:
                if type(a0) is not Literal:
                    return "it reads a number where the first step reads a value"
                values = loop.literals.get((i, q))
                if values is not None:
                    values.append(aj.value)
                elif aj.value != a0.value or type(aj.value) is not type(a0.value):
                    if e0.prim not in _ELEMENTWISE:
                        return (f"a number it reads changes from step to step ({a0.value} in the first step), "
                                "not in an elementwise operation")
                    loop.literals[(i, q)] = [a0.value] * j + [aj.value]
                continue
            if (i, q) in loop.literals:
                return "it reads a value where earlier steps read numbers"
            if where is None:  # from before the run: the same value in every copy, or a constant per copy
                values = loop.tables.get((i, q))
                if values is None and (aj is a0 or before.same(a0, aj)):
                    continue
                passed = _read_before(eqns, p, k, aj) if j == 1 and values is None and type(a0) is Var else None
                if passed is not None and passed != (i, q):
                    loop.delayed[(i, q)] = passed
                    continue
                constants = before.constants
                if id(aj) not in constants or (values is None and id(a0) not in constants):
                    return ("it reads a value from before the loop other than the first step's (not the same "
                            "value, nor a constant)")
                if values is None:
                    loop.tables[(i, q)] = [constants[id(a0)]] * j + [constants[id(aj)]]
                else:
                    values.append(constants[id(aj)])
                continue
            jj, l, o = where
            if jj == j:  # the copy's own value
                if pos.get(id(a0)) != (0, l, o):
                    return "it reads a value of its own step where the first step reads another"
            elif jj == j - 1 and j == 1 and (type(a0) is Literal or id(a0) not in pos):
                loop.carry_of[(i, q)] = (l, o, _key(a0))  # a carry: a0, from before the run, is its initial value
            else:
                return ("it reads a value from two or more steps back, or from the step before where the "
                        "first step reads its own")
    return None


def _read_before(eqns, p: int, k: int, a) -> tuple[int, int] | None:
    """Where the first copy reads ``a`` (a value from before the run), if it does: the slot whose value a
    delayed slot of the next copy reads."""
    for i in range(k):
        for q, b in enumerate(eqns[p + i].inputs):
            if b is a:
                return i, q
    return None


def _differs(e0: Eqn) -> str:
    if e0.prim in (ix.scatter_p, ix.scatter_add_p):
        return ("it writes into an array at an index that changes each step, other than a whole row at t "
                "(ys[t] = h); collect the rows in a list and np.stack them, or use pb.scan")
    if e0.prim is ix.gather_p:
        return "it reads an array at a fixed index that changes each step alongside index arrays"
    return "its parameters differ from the first step's (not a window moving one place a step)"


def _row_written(e0: Eqn, ej: Eqn, j: int, loop: _Loop, i: int) -> bool:
    """Whether ``ej`` is ``e0``'s write of a whole row (``ys[t] = h``) moved ``j`` places along one axis."""
    if e0.prim is not ix.scatter_p or len(e0.inputs) != 2 or type(e0.inputs[1]) is not Var:
        return False
    x, i0, ij = e0.inputs[0], e0.params["index"], ej.params["index"]
    if len(i0) != len(ij) or len(i0) != len(x.shape):
        return False
    moved = [d for d in range(len(i0)) if i0[d] != ij[d]]
    if len(moved) != 1:
        return False
    d = moved[0]
    if type(i0[d]) is not ix.Int or type(ij[d]) is not ix.Int or ij[d].value != i0[d].value + j:
        return False
    if any(e != ix.Slice(0, n, 1) for a, (e, n) in enumerate(zip(i0, x.shape)) if a != d):
        return False  # (the rest of the row written whole: a window of one along the axis)
    if e0.inputs[1].shape != x.shape[:d] + x.shape[d + 1:]:
        return False
    if i not in loop.placed:
        if j != 1:
            return False
        loop.placed[i] = d
    return loop.placed[i] == d


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


# --- the first and last steps, folded in ----------------------------------------------------

# what the copy of a step the user's program never ran may compute (the last step's share of a step after
# it, see ``_fold_first`` and ``_fold_last``): arithmetic that cannot fail or warn but by overflow, no effect
_SAFE_EXTRA = frozenset({ew.add_p, ew.sub_p, ew.mul_p, ew.neg_p, dot_general_p, reduce_sum_p, st.transpose_p,
                         st.broadcast_in_dim_p, st.reshape_p, st.slice_p, st.concatenate_p})


def _fold_first(program: Program, loop: _Loop) -> tuple[Program, _Loop]:
    """``program`` and ``loop`` with the step before the loop folded into it where that step differs
    from the loop's only by the values that feed it, else both unchanged.

    A loop written ``mu = A @ f if t else f`` (or any loop whose first step starts from the initial
    values rather than computing them) traces a step 0 without the step's first equations, and one that
    accumulates into ``nll = 0.0`` a step 0 reading the number 0.0 where later steps read the sum so far;
    the run of equal copies then starts at step 1. Step 0 is aligned with the end of the loop's step,
    backwards, a number standing where the step reads a value: the equations it lacks at the start make
    the step start later (the loop is cut after them, so that they end each step and feed the next one,
    as a person writes ``mu_h, S_hh = A @ f, ...`` at the end of the loop body), and a number it reads
    for a carry is the carry's initial value. The last step's share of the next step's start, which the
    program never computed, is computed and left unread (safe arithmetic only, ``_SAFE_EXTRA``). The
    copies so made are checked as any run is (``_check``): the folded loop reads only what a loop can,
    or nothing changes."""
    eqns = program.eqns
    p, k, m = loop.start, loop.period, loop.steps
    first = eqns[p:p + k]
    i, j = k - 1, p - 1
    while i >= 0 and j >= 0 and _signature(first[i], True) == _signature(eqns[j], True):
        i, j = i - 1, j - 1
    s, start = i + 1, j + 1  # step 0 (from ``start``) lacks the body's equations before ``s``
    if start == p:
        return program, loop
    if s and _mid_statement(first[s - 1]) and not _mid_statement(first[-1]):
        # the loop cut where a statement starts, not moved inside one: step 0 read with the fills it
        # starts from, or else it stays before the loop, the loop's carry the user's
        return _fold_fills(program, loop) or (program, loop)
    last, end = p + (m - 1) * k, p + m * k
    if s and _read_after(program, end, eqns[last:last + s]):
        return program, loop  # the last step's start, read after the loop, would be stacked for every step
    extra = _step_after(eqns, loop, range(s), {})  # the last step's share of a step after it
    if extra is None:
        return program, loop
    return _extended(program, eqns[:end] + tuple(extra) + eqns[end:], start, k, m + 1, loop)


# what a fill moved stays the same fill: ``np.roll(np.zeros(n), 1)`` traced is ``np.zeros(n)``
_FILL_KEEPING = frozenset({st.slice_p, st.concatenate_p, st.reshape_p, st.transpose_p, st.broadcast_in_dim_p})


def _fold_fills(program: Program, loop: _Loop) -> tuple[Program, _Loop] | None:
    """``program`` and ``loop`` with step 0 folded in where it is the body but for fills standing where
    the body moves a carry (``np.roll(p, 1)`` of ``p = np.zeros(n)``, which tracing made a fill, so that
    the step starts inside a statement); else None. Step 0 becomes the body's copy: its own equations,
    and the body's moves of the carry reading one fill made before it, the carry's initial value, which
    is what a person writes (``p = np.zeros(n)`` before the loop, the loop's carry ``p``). The moves of a
    fill compute the fill itself: the program computes what it did."""
    eqns = program.eqns
    p, k = loop.start, loop.period
    first = eqns[p:p + k]
    own: dict[int, int] = {}  # id of a body value -> its equation in the body
    for i, e in enumerate(first):
        own.update((id(v), i) for v in e.outputs)
    steps: list = []  # step 0 in the body's order: an equation of step 0, or (the body's moves, the fill)
    fill_value, carry = None, None  # the fill, and the carry its moves read
    i, j = k - 1, p - 1
    while i >= 0 and j >= 0:
        e, f = first[i], eqns[j]
        if _signature(e, True) == _signature(f, True):
            steps.append(f)
            i, j = i - 1, j - 1
            continue
        if (f.prim is not st.broadcast_in_dim_p or type(f.inputs[0]) is not Literal
                or e.prim not in _FILL_KEEPING or f.outputs[0].type != e.outputs[0].type):
            return None
        moved, n = [], i + 1  # the body's moves making e's value: e and the equations just before it
        pending = [e.outputs[0]]
        while pending:
            v = pending.pop()
            if own.get(id(v)) != n - 1 or first[n - 1].prim not in _FILL_KEEPING:
                return None
            n -= 1
            moved.append(first[n])
            for q, a in enumerate(first[n].inputs):
                if type(a) is not Var:
                    continue
                if id(a) in own:
                    pending.append(a)
                    continue
                key = loop.carry_of.get((n, q))
                if key is None or (carry is not None and key[:2] != carry):
                    return None  # (a value from before the loop moved with the carry: not the fill)
                carry = key[:2]
        value = f.inputs[0]
        if fill_value is not None and (fill_value.value != value.value or fill_value.dtype != value.dtype):
            return None
        fill_value = value
        steps.append((moved[::-1], f.outputs[0]))
        i, j = n - 1, j - 1
    if i >= 0 or carry is None:
        return None
    start, source = first[carry[0]].outputs[carry[1]], first[0].source
    init = Var(start.type)  # (the fill may be shared with other zeros: the carry, not it, takes the user's name)
    made = Eqn(st.broadcast_in_dim_p, (fill_value,), (init,),
               Params({"shape": init.shape, "broadcast_dimensions": ()}), source)
    step0 = []
    for item in reversed(steps):
        if type(item) is Eqn:
            step0.append(item)
            continue
        moves, fill = item
        copies = {}
        for m in moves:
            ins = tuple(copies.get(id(a), a) if type(a) is Var and id(a) in own else (init if type(a) is Var else a)
                        for a in m.inputs)
            outs = (fill,) if m is moves[-1] else tuple(Var(v.type, v.hint) for v in m.outputs)
            copies.update(zip(map(id, m.outputs), outs))
            step0.append(Eqn(m.prim, ins, outs, m.params, m.source))
    new = eqns[:j + 1] + (made,) + tuple(step0) + eqns[p:]
    folded, checked = _extended(program, new, j + 2, k, loop.steps + 1, loop)
    return (folded, checked) if checked is not loop else None


def _fold_last(program: Program, loop: _Loop) -> tuple[Program, _Loop]:
    """``program`` and ``loop`` with the step after the loop folded into it where that step is the start
    of one, else both unchanged: a loop whose last step lacks the step's last equations (the loop cut so
    that they come last in the step, or ``if t < T - 1``) is all its steps, the last one computing them
    too, unread (safe arithmetic only, as in ``_fold_first``)."""
    eqns = program.eqns
    p, k, m = loop.start, loop.period, loop.steps
    first, last, end = eqns[p:p + k], p + (m - 1) * k, p + m * k
    s = 0
    while s < k and end + s < len(eqns) and _signature(first[s], True) == _signature(eqns[end + s], True):
        s += 1
    if not s or s == k or _read_after(program, end + s, eqns[last:end]):
        return program, loop  # (values of the old last step read after the loop would be stacked)
    own = {id(v): w for i in range(s) for v, w in zip(first[i].outputs, eqns[end + i].outputs)}
    extra = _step_after(eqns, loop, range(s, k), own)
    if extra is None:
        return program, loop
    return _extended(program, eqns[:end + s] + tuple(extra) + eqns[end + s:], p, k, m + 1, loop)


def _read_after(program: Program, at: int, made: tuple[Eqn, ...]) -> bool:
    """Whether the equations from ``at`` or the program's outputs read a value ``made`` makes."""
    ids = {id(v) for e in made for v in e.outputs}
    return any(id(a) in ids for e in program.eqns[at:] for a in e.inputs) or any(id(a) in ids for a in program.outputs)


def _step_after(eqns, loop: _Loop, body: range, own: dict[int, Var]) -> list[Eqn] | None:
    """Copies of the body's equations ``body`` for a step after the loop's last: carries read from the last
    step, the step's own values from ``own`` (and the copies made), the rest as the body reads it. None
    where one would compute what may fail (``_SAFE_EXTRA``) or read a window or number of a step that
    has none."""
    first, pos, last = eqns[loop.start:loop.start + loop.period], loop.pos, loop.start + (loop.steps - 1) * loop.period
    made = []
    for i in body:
        e = first[i]
        if e.prim not in _SAFE_EXTRA or i in loop.sliced or i in loop.placed:
            return None
        ins = []
        for q, a in enumerate(e.inputs):
            carry, passed = loop.carry_of.get((i, q)), loop.delayed.get((i, q))
            if passed is not None:
                ins.append(eqns[last + passed[0]].inputs[passed[1]])
            elif carry is not None:
                ins.append(eqns[last + carry[0]].outputs[carry[1]])
            elif (i, q) in loop.literals or (i, q) in loop.tables:
                return None
            elif type(a) is Var and id(a) in pos:
                if id(a) not in own:
                    return None
                ins.append(own[id(a)])
            else:
                ins.append(a)
        outs = tuple(Var(v.type, v.hint) for v in e.outputs)
        own.update(zip(map(id, e.outputs), outs))
        made.append(Eqn(e.prim, tuple(ins), outs, e.params, e.source))
    return made


def _extended(program: Program, eqns: tuple[Eqn, ...], start: int, k: int, m: int, loop: _Loop):
    """The program of ``eqns`` and its loop of ``m`` steps from ``start``, if its copies read as a loop's
    (``_check``); else ``program`` and ``loop`` as they were."""
    checked = _check(eqns, start, k, m, _Before(eqns, dict(zip(map(id, program.constvars), program.constvals))))
    if checked.steps != m:
        return program, loop
    return Program(program.inputs, eqns, program.outputs, program.constvars, program.constvals, program.name), checked


# --- rolling it ----------------------------------------------------------------------------


def _rolled(program: Program, loop: _Loop, min_steps: int, min_eqns: int) -> Program:
    """``program`` with ``loop``'s copies replaced by: the xs (windows of arrays, tables of literals and
    constants) and the body's hoisted equations, the scan, and the rows of its stacked results read after it."""
    eqns = program.eqns
    p, k, m = loop.start, loop.period, loop.steps
    end = p + m * k
    first = eqns[p:p + k]
    pos = loop.pos  # (the copies checked: only membership is asked, of what the first copy reads)

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
    # a delayed slot's carry (one per slot it reads a step later): the body passes on that slot's input,
    # itself a carry or delayed (``a, b, c = b, c, f(a)``), named by the statement (``a``, not ``b``)
    passes: dict[tuple, tuple[int, int]] = {}
    for (i, q), passed in loop.delayed.items():
        key = ("passed", passed)
        if key not in carries:
            carries[key] = len(carry_in)
            passes[key] = (i, q)
            carry_in.append(Var(first[i].inputs[q].type, first[i].inputs[q].hint))
            carry_init.append(first[i].inputs[q])
            carry_src.append((-1, -1))  # (-1: set below, the carry whose input the body passes on)
        loop.carry_of[(i, q)] = key
    for key in passes:
        carry_src[carries[key]] = (-1, carries[loop.carry_of[key[1]]])
    for _ in passes:  # (a chain's names, each from the one it passes on)
        for key, (i, _q) in passes.items():
            c, later = carry_in[carries[key]], carry_in[carry_src[carries[key]][1]]
            c.hint = sourcemap.renamed(first[i].source, later.hint) or c.hint
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
    row_at: dict[int, Var] = {}  # a row written per step: the index it is written at
    for i in loop.placed:
        t0 = first[i].params["index"][loop.placed[i]].value
        table = Var(ArrayType((m,), ix.INDEX_DTYPE), "rows")
        constvars.append(table)
        constvals.append(np.arange(t0, t0 + m, dtype=ix.INDEX_DTYPE))
        xs_outer.append(table)
        row_at[i] = Var(ArrayType((), ix.INDEX_DTYPE), "t")
        xs_in.append(row_at[i])
    window_in: dict[int, Var] = {}
    for i, d in loop.sliced.items():
        e0 = first[i]
        array, prm = e0.inputs[0], e0.params
        start, limit = list(prm["start_indices"]), list(prm["limit_indices"])
        limit[d] = start[d] + m
        shape = tuple(limit[a] - start[a] if a == d else e0.outputs[0].shape[a] for a in range(len(start)))
        if shape == array.shape:  # every window of the array, in order: the array itself
            xs = array
        else:
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
        window_in[i] = Var(ArrayType(xs.shape[1:], xs.dtype), e0.outputs[0].hint or _row_hint(first, i))
        xs_in.append(window_in[i])

    # the body: the first copy, with values of its own (a copy's values may be read after the loop by
    # their old names), reading the body's inputs
    made_before: dict[int, Eqn] = {}  # (filled when a value from before the run has no name: _moved_hint)
    named: dict[int, Var] = {}  # an unnamed invariant from before the run -> it named (_expression_hint)
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
                    v = consts[id(a)] = Var(a.type, a.hint or _moved_hint(a, eqns, p, made_before))
                    const_outer.append(a)
                    maker = made_before.get(id(a)) if not a.hint and v.hint else None
                    if maker is not None and maker.prim not in _FILL_KEEPING:
                        named[id(a)] = Var(a.type, v.hint)  # printed as its accumulator's name says
                ins.append(v)
            else:
                ins.append(own.get(id(a), a))
        if i in row_at:  # ys[t] = h: h, a window of one row, written at t
            d, x = loop.placed[i], ins[0]
            row = Var(ArrayType(x.shape[:d] + (1,) + x.shape[d + 1:], x.dtype), ins[1].hint)
            body_eqns.append(Eqn(st.reshape_p, (ins[1],), (row,), Params({"new_sizes": row.shape}), e.source))
            body_eqns.append(Eqn(ix.dynamic_update_slice_p, (x, row, row_at[i]), outs,
                                 Params({"axes": (d,), "sizes": (1,), "check": False}), e.source))
            continue
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
    carry_out = [final.pop((l, o)) if (l, o) in final else Var(carry_in[n].type, carry_in[n].hint)
                 for n, (l, o) in enumerate(carry_src)]
    ys_slots = list(stacked)
    ys_outer = [Var(ArrayType((m, *first[i].outputs[o].shape), first[i].outputs[o].dtype), first[i].outputs[o].hint)
                for i, o in ys_slots]

    body_outputs = [carry_in[o] if i < 0 else own[id(first[i].outputs[o])] for i, o in carry_src + ys_slots]
    # the body's own loops rolled before its invariants are hoisted: an inner loop's first step, read
    # whole, may start from fills (``p = np.zeros(n)``, ``_fold_fills``) that hoisting would take away
    inputs = tuple(consts[id(a)] for a in const_outer) + tuple(carry_in) + tuple(xs_in)
    inner = reroll(Program(inputs, tuple(body_eqns), tuple(body_outputs), name=f"{program.name}_step"),
                   min_steps, min_eqns)
    expressed: set[int] = set()  # the hoisted values named from their expressions (_const_input)
    body_eqns, body_outputs, hoisted, const_in = _hoist(list(inner.eqns), list(inner.outputs), consts, const_outer,
                                                        expressed)
    if expressed:
        _name_earlier_twins(hoisted, expressed, eqns[:p], named)
    const_vars = [consts[id(a)] for a in const_outer] + [v for v, _ in const_in]
    const_args = list(const_outer) + [a for _, a in const_in]
    body = Program(tuple(const_vars) + tuple(carry_in) + tuple(xs_in), tuple(body_eqns),
                   tuple(body_outputs), inner.constvars, inner.constvals, name=f"{program.name}_step")
    inits, where = [], sourcemap.user_loop(e.source for e in first)  # the user's ``for`` these steps run in
    for a, c, (l, _) in zip(carry_init, carry_in, carry_src):  # a literal, or the type of a carry from zeros
        if type(a) is not Var:
            v = Var(a.type if type(a) is Literal else a, c.hint)
            fill = a if type(a) is Literal else Literal.of(0, a.dtype)
            before.append(Eqn(st.broadcast_in_dim_p, (fill,), (v,),
                              Params({"shape": v.shape, "broadcast_dimensions": ()}),
                              sourcemap.start_source(where, c.hint) or first[l].source))  # under ``nll = 0.0``
            a = v
        inits.append(a)
    scan = Eqn(control.scan_p, (*const_args, *inits, *xs_outer), (*carry_out, *ys_outer),
               Params({"body": body, "length": m, "reverse": False, "num_consts": len(const_args),
                       "num_carry": len(carry_in)}), sourcemap.header_source(where) or first[0].source)
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
    outputs = program.outputs
    if named:
        new, outputs = _renamed(new, outputs, named)
    return Program(program.inputs, new, outputs, tuple(constvars), tuple(constvals), program.name)


def _renamed(eqns: tuple[Eqn, ...], outputs: tuple, named: dict[int, Var]) -> tuple[tuple[Eqn, ...], tuple]:
    """``eqns`` and ``outputs`` with the Vars in ``named`` (by id) replaced: where they are made, and read."""
    def new(a):
        return named.get(id(a), a) if type(a) is Var else a

    out = []
    for e in eqns:
        if any(id(a) in named for a in e.inputs) or any(id(v) in named for v in e.outputs):
            e = Eqn(e.prim, tuple(map(new, e.inputs)), tuple(map(new, e.outputs)), e.params, e.source)
        out.append(e)
    return tuple(out), tuple(map(new, outputs))


def _moved_hint(a: Var, eqns: tuple[Eqn, ...], p: int, made: dict[int, Eqn]) -> str:
    """The name of the value an unnamed loop invariant moves (``np.roll(open_, 1)``, a concatenation of
    slices of ``open_``): the backward loop sums its cotangent as ``open__bar_sum``, not in a ``carry``."""
    if not made:
        made.update((id(v), e) for e in eqns[:p] for v in e.outputs)
    for _ in range(8):
        e = made.get(id(a))
        if e is None:
            return ""
        if e.prim not in _FILL_KEEPING:
            return _expression_hint(e)
        a = next((b for b in e.inputs if type(b) is Var), None)
        if a is None:
            return ""
        if a.hint:
            return a.hint
    return ""


_expression_hint = control.expression_hint  # (``sub_open`` for ``1 - open_``)


def _row_hint(first: tuple[Eqn, ...], i: int) -> str:
    """The user's name for the row a window reads (``row = xs[t]``: the reshape of the window of one,
    which the statement names), else none: the body reads ``row``, not ``x``, at each step."""
    window = first[i].outputs[0]
    if i + 1 < len(first) and first[i + 1].prim is st.reshape_p and first[i + 1].inputs[0] is window:
        return first[i + 1].outputs[0].hint
    return ""


def _name_earlier_twins(hoisted: list[Eqn], expressed: set[int], before: tuple[Eqn, ...],
                        named: dict[int, Var]) -> None:
    """A hoisted invariant named from its expression (``_const_input``) that an unnamed equation before
    the run computes too (a first step left before the loop): that value takes the name (``named``), so
    that the two, merged later (``cse``), print as one ``sub_open = 1.0 - open_``, the name the backward
    loop's ``sub_open_bar_sum`` says. Names only: what the program computes is unchanged."""
    def key(e: Eqn, twin_of: dict[int, Var]) -> tuple:
        return (e.prim, tuple(id(twin_of.get(id(a), a)) if type(a) is Var else (a.value, a.dtype) for a in e.inputs),
                e.params)

    by_key: dict[tuple, Eqn] = {}
    first: dict[int, Var] = {}  # a value before the run -> the first one computing the same (as ``cse`` keeps)
    for e in before:
        if not effectful(e):
            twin = by_key.setdefault(key(e, first), e)
            if twin is not e:
                first.update((id(v), w) for v, w in zip(e.outputs, twin.outputs))
    twin_of = dict(first)  # and a hoisted value -> the one before the run computing it
    for e in hoisted:
        twin = None if effectful(e) else by_key.get(key(e, twin_of))
        if twin is None:
            continue
        for v, w in zip(e.outputs, twin.outputs):
            twin_of[id(v)] = w
            if id(v) in expressed and not w.hint and id(w) not in named:
                named[id(w)] = Var(w.type, v.hint)


def _hoist(body_eqns: list[Eqn], body_outputs: list, consts: dict[int, Var], const_outer: list,
           expressed: set[int] | None = None):
    """The body's loop invariants (``control.split_invariant``, as ``pb.scan`` hoists them), moved before
    the loop: (the body's equations and outputs left, those hoisted, and (body input, outer value) for
    each hoisted value the body still reads or returns)."""
    outer_of = {id(consts[id(a)]): a for a in const_outer}  # body input -> outer value
    kept, moved = control.split_invariant(body_eqns, [consts[id(a)] for a in const_outer])
    if not moved:
        return body_eqns, body_outputs, [], []
    # a step calling a helper several times computes its invariants as often: hoisted, once each
    hoisted, seen, first = [], {}, {}
    for e in moved:
        ins = tuple(first.get(id(a), outer_of.get(id(a), a)) for a in e.inputs)
        key = (e.prim, tuple(id(a) if type(a) is Var else (a.value, a.dtype) for a in ins), e.params)
        twin = None if effectful(e) else seen.get(key)
        if twin is not None:
            first.update((id(v), w) for v, w in zip(e.outputs, twin.outputs))
            continue
        seen[key] = e = Eqn(e.prim, ins, e.outputs, e.params, e.source)
        hoisted.append(e)
    made = {id(v): e for e in hoisted for v in e.outputs}
    const_in: dict[int, tuple[Var, Var]] = {}
    body = []
    for e in kept:
        ins = tuple(_const_input(first.get(id(a), a), made, const_in, expressed) for a in e.inputs)
        body.append(e if ins == e.inputs else Eqn(e.prim, ins, e.outputs, e.params, e.source))
    outputs = [_const_input(first.get(id(a), a), made, const_in, expressed) for a in body_outputs]
    return body, outputs, hoisted, list(const_in.values())


def _const_input(a, made: dict[int, Eqn], const_in: dict, expressed: set[int] | None = None):
    """The body's input for a hoisted value (made at its first use), named as the value, or as what it
    moves (``a * x`` reads ``a`` broadcast: its gradient sums into ``a_bar_sum``; ``np.roll(open_, 1)``'s
    into ``open__bar_sum``)."""
    if type(a) is not Var or id(a) not in made:
        return a
    if id(a) not in const_in:
        hint, e = a.hint, made[id(a)]
        while not hint and e is not None and e.prim in _FILL_KEEPING and type(e.inputs[0]) is Var:
            hint, e = e.inputs[0].hint, made.get(id(e.inputs[0]))
        if not hint and e is not None and e.prim not in _FILL_KEEPING:
            hint = a.hint = _expression_hint(e)  # (``a``, hoisted, is this pass's own Var: named in place)
            if hint and expressed is not None:
                expressed.add(id(a))
        const_in[id(a)] = (Var(a.type, hint), a)
    return const_in[id(a)][0]

