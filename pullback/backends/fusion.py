"""Elementwise fusion for the GPU: runs of elementwise equations become one ``fused`` equation
whose body the CuPy backend prints as a module-level ``@cp.fuse()`` function, one kernel where
each operation was a pass over memory (the GP gradient's O(n^2) chain, that XLA fuses too).

The grouping is one pass in program order, with one open group per shape. A group takes each
fusable equation of its shape that reads nothing computed from the group outside it; an
equation that is not fusable and reads one open group is *deferred*: printed after that group's
fused call, with everything that reads it in turn. Whatever reads another open group, or a
value deferred by its own, closes that group first (prints its call and deferred equations),
and one that reads several open groups closes them all. So a group reads only printed values
and its own, open groups never read each other, and closing any of them at any point prints a
valid order.

It runs on the program as it prints (``printed.prepare``): a broadcast that NumPy's own broadcasting
makes needless is already read as its operand, which ``cp.fuse`` broadcasts as ufuncs do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container

from pullback.ad.dce import dce
from pullback.ir.core import WITH_BODIES, Eqn, Params, Primitive, Program, Var
from pullback.primitives import elementwise as ew

fused_p = Primitive("fused", multiple_results=True, registered=False)  # made while printing only
WITH_BODIES.add(fused_p)

# Printed as operators or CuPy ufuncs, which ``cp.fuse`` compiles into one kernel.
FUSABLE = frozenset({
    ew.add_p, ew.sub_p, ew.mul_p, ew.div_p, ew.neg_p, ew.exp_p, ew.log_p, ew.log1p_p, ew.expm1_p, ew.sqrt_p,
    ew.sin_p, ew.cos_p, ew.tan_p, ew.tanh_p, ew.sinh_p, ew.cosh_p, ew.abs_p, ew.sign_p, ew.max_p, ew.min_p,
    ew.integer_pow_p, ew.eq_p, ew.ne_p, ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p,
})


class Group:
    """A run of equations of one shape printed as one kernel, and what waits for it."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.eqns: list[Eqn] = []
        self.defined: set[int] = set()  # values of the group's shape, computed in it
        self.reduced: set[int] = set()  # the results of the reductions that end it (Numba's chains)
        self.deferred: list[Eqn] = []
        self.tainted: set[int] = set()  # values computed from the group outside it (and its reductions')


def runs(program: Program, member: Callable[[Eqn, dict], bool], emit: Callable[[Group, list], None],
         ends: Callable[[Eqn, dict], Group | None] | None = None,
         waits: Callable[[Eqn, list[Group]], Group | None] | None = None, ending: Container[Primitive] = ()) -> list:
    """``program``'s equations in order, each run of ``member`` equations of one shape handed to ``emit``
    (which appends what prints in its place) when the run closes: before an equation that reads it and
    cannot join or wait for it. ``ends``: the open group a reduction (an equation of a primitive in
    ``ending``) closes as its last equation; ``waits``: the group an equation that is no member waits for
    (printed after its kernel), asked only of one reading an open group of another shape than its result's.
    One open group per shape; an equation reading a value computed from its shape's group outside it starts
    a new one. (Asked of every equation of a long program: the common case, an equation joining its shape's
    group, is inline.)"""
    out: list = []
    groups: dict[tuple[int, ...], Group] = {}  # the open groups, one per shape
    # the open group each value is defined in or computed from (keyed by the value: a Var hashes by identity)
    owner: dict[Var, Group] = {}

    def close(group: Group) -> None:
        emit(group, out)
        out.extend(group.deferred)
        del groups[group.shape]
        for eqns in (group.eqns, group.deferred):  # (the values ``join`` gave it)
            for e in eqns:
                for v in e.outputs:
                    del owner[v]

    def join(group: Group, eqn: Eqn, into: list[Eqn], made: set[int]) -> None:
        into.append(eqn)
        for v in eqn.outputs:
            made.add(id(v))
            owner[v] = group

    owned = owner.get
    for eqn in program.eqns:
        involved: list[Group] = []  # the open groups it reads, each once, in the order it reads them
        for a in eqn.inputs:
            if type(a) is Var:
                g = owned(a)
                if g is not None and g not in involved:
                    involved.append(g)
        # (a reduction ends, and an equation waits for, a group it reads: none where it reads none)
        end = ends(eqn, owner) if involved and ends is not None and eqn.prim in ending else None
        wait = None
        if involved and waits is not None:
            shape = eqn.outputs[0].type.shape
            if len(involved) > 1 or involved[0].shape != shape:
                wait = waits(eqn, involved)
        if end is not None:  # the reduction ends its operand's group
            join(end, eqn, end.eqns, end.reduced)
            end.tainted.update(id(v) for v in eqn.outputs)
        elif wait is None and member(eqn, groups):
            shape = eqn.outputs[0].type.shape
            group = groups.get(shape)
            # (ids of the operands: a literal's is no live var's)
            stale = group is not None and bool(group.tainted) and not group.tainted.isdisjoint(map(id, eqn.inputs))
            for g in involved:  # what it reads of other groups (or computed from its own) is printed first
                if g is not group or stale:
                    close(g)
            if group is None or stale:
                group = groups[shape] = Group(shape)
            group.eqns.append(eqn)  # (``join``, inline)
            made = group.defined
            for v in eqn.outputs:
                made.add(id(v))
                owner[v] = group
        elif wait is not None or len(involved) == 1:  # reads one group (or waits for one): after its kernel
            group = wait or involved[0]
            for g in involved:  # (smaller groups it reads are printed now)
                if g is not group:
                    close(g)
            join(group, eqn, group.deferred, group.tainted)
        else:
            for g in involved:
                close(g)
            out.append(eqn)
    for group in list(groups.values()):
        close(group)
    return out


def fuse(program: Program) -> Program:
    """``program`` with each run of two or more fusable equations of one (non-scalar) shape fused."""
    consumers = Counter(id(a) for e in program.eqns for a in e.inputs if isinstance(a, Var))
    consumers.update(id(a) for a in program.outputs if isinstance(a, Var))

    def emit(group: Group, out: list) -> None:
        out.extend(_fused(group, consumers) if len(group.eqns) > 1 else group.eqns)

    out = runs(program, lambda eqn, groups: eqn.prim in FUSABLE and eqn.outputs[0].type.ndim > 0, emit)
    if len(out) == len(program.eqns):
        return program
    return dce(Program(program.inputs, tuple(out), program.outputs, program.constvars, program.constvals,
                       program.name))


def _fused(group: Group, consumers: Counter) -> list[Eqn]:
    """The group as one equation: its operands and results (the values read outside the group) are
    its body's inputs and outputs, the same vars."""
    inside = Counter(id(a) for e in group.eqns for a in e.inputs if isinstance(a, Var))
    operands = {id(a): a for e in group.eqns for a in e.inputs if isinstance(a, Var) and id(a) not in group.defined}
    results = [v for e in group.eqns for v in e.outputs if consumers[id(v)] > inside[id(v)]]
    kernel = Program(tuple(operands.values()), tuple(group.eqns), tuple(results), name="fused")
    return [Eqn(fused_p, kernel.inputs, kernel.outputs, Params({"body": kernel}), group.eqns[-1].source)]
