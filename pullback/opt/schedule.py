"""Readers before the overwriter: an operation may write its result into an operand's buffer (as the
expert's code does: ``potri`` into the Cholesky factor, ``getri`` into the LU factors, ``X * 0.5`` into
X) only if it is the buffer's last reader. A reverse-mode program often asks for another use of the
buffer (a triangular solve of a vector, ``getrs(trans=1)`` with the LU factors, a product of the inverse
with a vector) after the overwriter, because the cotangents arrive in the reverse order of the user's
calls; such a reader, whose operands are all ready before the overwriter and whose results are smaller
than the buffer (so that moving it up raises no peak), is moved before it, so that the memory plan can
reuse the buffer."""

from __future__ import annotations

from operator import is_

from pullback.ir.core import WITH_BODIES, Eqn, Program, Var, effectful
from pullback.opt.census import primitives
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la

# primitive -> the operand it may overwrite
OVERWRITERS = {la.potri_p: 0, fa.getri_p: 0, fa.getri_at_p: 1, fa.po_inv_p: 1}
ELEMENTWISE = frozenset({ew.mul_p, ew.add_p, ew.sub_p, ew.neg_p, ew.div_p})
MIN_SIZE = 1 << 16  # the memory plan's: smaller arrays are not reused
_VIEWS = frozenset({st.transpose_p, st.reshape_p})


def _overwritten(eqn: Eqn) -> list[Var]:
    k = OVERWRITERS.get(eqn.prim)
    if k is not None:
        return [eqn.inputs[k]] if isinstance(eqn.inputs[k], Var) else []
    if eqn.prim in ELEMENTWISE and eqn.outputs[0].type.size >= MIN_SIZE:
        return [a for a in eqn.inputs if isinstance(a, Var) and a.type == eqn.outputs[0].type]
    return []


def readers_first(program: Program) -> Program:
    """``program`` with the readers described above moved; ``program`` itself when none is."""
    eqns = program.eqns
    if OVERWRITERS.keys().isdisjoint(primitives(program)):
        return program
    # one walk for the views and the overwriters, then the readers of the overwritten buffers only
    root: dict[Var, Var] = {}  # a view -> the var owning its buffer (through transposes, reshapes)
    overwrites: list[tuple[int, list[Var]]] = []
    for i, e in enumerate(eqns):
        prim = e.prim
        if prim in _VIEWS and isinstance(e.inputs[0], Var):
            root[e.outputs[0]] = root.get(e.inputs[0], e.inputs[0])
        elif prim in OVERWRITERS or prim in ELEMENTWISE:
            xs = _overwritten(e)
            if xs:
                overwrites.append((i, xs))
    buffers = {root.get(x, x) for _, xs in overwrites for x in xs}
    aliases = {id(v) for v in buffers} | {id(v) for v, r in root.items() if r in buffers}
    readers: dict[Var, list[int]] = {}  # overwritten buffer -> indices of the equations reading it
    for i, e in enumerate(eqns):
        if not aliases.isdisjoint(map(id, e.inputs)):
            for a in e.inputs:
                if isinstance(a, Var) and id(a) in aliases:
                    readers.setdefault(root.get(a, a), []).append(i)
    given = set(program.inputs) | set(program.constvars)
    producer = {v: i for i, e in enumerate(eqns) for v in e.outputs}
    done: set[int] = set()  # equations moved up: each now before an overwriter earlier than itself
    before: dict[int, list[int]] = {}  # overwriter -> the equations moved just before it

    def hoist(j: int, i: int, size: int, depth: int) -> list[int] | None:
        """``j`` and the equations after ``i`` that it needs first (a few levels: a fill of ones, a
        reshape), when all may move; None when one may not. Defined before ``i``: the program's
        inputs, the equations before it and those moved."""
        r = eqns[j]
        if j <= i or not _movable(r) or any(v.type.size >= size for v in r.outputs):
            return None
        need: list[int] = []
        for a in r.inputs:
            if isinstance(a, Var) and a not in given:
                k = producer.get(a)
                if k is not None and (k < i or k in done):
                    continue
                more = None if k is None or depth == 0 else hoist(k, i, size, depth - 1)
                if more is None:
                    return None
                need += [m for m in more if m not in need]
        return [*need, j]

    for i, xs in overwrites:
        if i in done:
            continue
        for x in xs:
            for j in readers.get(root.get(x, x), ()):
                if j in done:
                    continue
                found = hoist(j, i, x.type.size, 2)
                for k in found or ():
                    if k not in done:
                        before.setdefault(i, []).append(k)
                        done.add(k)
    if not before:
        return program
    order = [eqns[k] for i, e in enumerate(eqns) if i not in done for k in (*before.get(i, ()), i)]
    if all(map(is_, order, eqns)):
        return program
    return Program(program.inputs, tuple(order), program.outputs, program.constvars, program.constvals, program.name)


def _movable(e: Eqn) -> bool:
    """Pure, no sub-program, raising nothing of its own (a checked solve keeps its place among the errors)."""
    return e.prim not in WITH_BODIES and not effectful(e) and not e.params.get("check", False) and e.prim not in (
        fa.gesv_p, fa.getri_at_p)
