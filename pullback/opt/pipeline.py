"""The optimiser pipeline: simplify, CSE, shared inverses, LU of A^T (``transposed_lu``), structure,
contraction order, single-reader rewrites and DCE, in the order that lets each use what the others
made; loop bodies first. The stages of reverse
mode (``api.stages``) and the transforms run every program they make through ``optimize``.
"""

from __future__ import annotations

from pullback.ad.cse import cse
from pullback.ad.dce import dce
from pullback.ir.core import WITH_BODIES, Eqn, Params, Program
from pullback.opt.census import primitives
from pullback.opt.contraction_order import reorder_contractions
from pullback.opt.deltas import materialise
from pullback.opt.readers import single_readers
from pullback.opt.schedule import readers_first
from pullback.opt.shared_inverse import shared_inverses
from pullback.opt.simplify import Settled, checked_once, simplify
from pullback.opt.structure import structure
from pullback.opt.transposed_lu import transposed_lu


def optimize(program: Program, settled: Settled | None = None, final: bool = True) -> Program:
    """Simplify, CSE, structure, contraction order, single-reader rewrites and DCE; sub-programs
    (loop bodies) before the program around them, and again those that simplifying it changed (it
    may move operands into them). ``settled``: see ``simplify``. ``final=False``, for a program that
    will be optimised again once it is complete (the steps of building a gradient), only simplifies
    and runs CSE: the passes after those look at the whole program, so they run once, on the last one."""
    done: set[int] = set()
    settled = settled if settled is not None else Settled()
    once = simplify(_bodies(program, done, final), settled)
    bodies = _bodies(once, done, final)
    simplified = cse(bodies, settled.clean)  # (keying only what changed since the last CSE)
    if not final:
        return simplified
    # (CSE again only if that changed something)
    structured = structure(materialise(transposed_lu(shared_inverses(simplified))))
    merged = structured if structured is simplified else cse(structured, settled.clean)
    late = single_readers(reorder_contractions(merged))
    if late is not simplified:  # what those made, simplified in turn (rereading only that), and once more
        late = simplify(cse(simplify(late, settled), settled.clean), settled)  # after CSE merges what that made
    elif bodies is not once:  # a body optimised again may read fewer operands: the loop's DCE rule prunes them
        late = dce(late)
    # otherwise no DCE: ``late`` is simplify's result (which ends in one), or simplify's then CSE's (which
    # leaves no dead code: a duplicate reads what its first reads)
    return readers_first(checked_once(late))


def _bodies(program: Program, done: set[int], final: bool = True) -> Program:
    """``program`` with the sub-programs of its equations optimised (``done``: those already are)."""
    def opt(v):
        if not isinstance(v, Program) or id(v) in done:
            return v
        new = optimize(v, final=final)
        done.add(id(new))
        return new

    if WITH_BODIES.isdisjoint(primitives(program)):
        return program
    eqns = tuple(e if e.prim not in WITH_BODIES else Eqn(
        e.prim, e.inputs, e.outputs, Params({k: opt(v) for k, v in e.params.items()}), e.source)
        for e in program.eqns)
    return Program(program.inputs, eqns, program.outputs, program.constvars, program.constvals, program.name)
