"""Reverse mode as ``transpose(linearize(f))``; nobody writes a VJP by hand.

``linearize`` is ``partial_eval`` after ``jvp``: a known program (outputs and
residuals) and a linear program (tangents in, tangents out). ``vjp`` transposes the
linear program and appends it to the known one, so the result is one function: the
forward pass keeps residuals as locals, the backward pass follows.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from pullback.ad.cse import cse
from pullback.ad.dce import dce
from pullback.ad.jvp import jvp
from pullback.ad.partial_eval import Split, partial_eval
from pullback.ad.transpose import transpose
from pullback.ir.core import EFFECTS, WITH_BODIES, Eqn, Literal, Params, Program, Var, effectful
from pullback.opt.canonical import canonical
from pullback.opt.pipeline import optimize
from pullback.opt.simplify import Settled
from pullback.primitives import structural as st


def linearize(program: Program, wrt: Sequence[bool], n_aux: int = 0, canonical_form: bool = False) -> Split:
    """known: primals -> (outs..., residuals...); unknown: (residuals..., tangents...) -> out tangents.
    The last ``n_aux`` outputs are auxiliary (``has_aux``): computed, not differentiated. ``canonical_form``:
    ``program`` is one that ``canonical`` returns as it is, free of dead code (a primal stage's, when its
    ``canonical`` changed nothing), so that neither runs again here."""
    n_tangents = sum(wrt)
    m = len(program.outputs)
    # one factorisation (one tangent map) per repeated computation or spelling (canonical), none for dead ones
    # (CSE of a program free of dead code leaves none: a duplicate reads what its first reads)
    program = cse(program) if canonical_form else dce(cse(canonical(program)))
    j = jvp(program, wrt)
    if n_aux:
        j = Program(j.inputs, j.eqns, j.outputs[:m + m - n_aux], j.constvars, j.constvals, j.name)
    split = partial_eval(j, [False] * len(program.inputs) + [True] * n_tangents, [False] * m + [True] * (m - n_aux))
    # Not optimised here: the residuals must stay the very Vars both programs name.
    return Split(split.known, Program(split.unknown.inputs, split.unknown.eqns, split.unknown.outputs,
                                      split.unknown.constvars, split.unknown.constvals,
                                      name=f"{program.name}_linear"), split.n_residuals)


def transpose_linear(split: Split, settled: Settled | None = None, final: bool = True) -> Program:
    """(residuals..., out cotangents...) -> tangent-input cotangents (``settled``, ``final``: see
    ``simplify``, ``optimize``)."""
    return optimize(_transposed(split), settled, final)


def _transposed(split: Split) -> Program:
    """The linear program transposed, not yet optimised."""
    n_linear = len(split.unknown.inputs) - split.n_residuals
    t = transpose(split.unknown, [False] * split.n_residuals + [True] * n_linear)
    return Program(t.inputs, t.eqns, t.outputs, t.constvars, t.constvals, name=t.name.replace(
        "_linear_transpose", "_transpose"))


def _merge_consts(*programs: Program) -> tuple[tuple[Var, ...], tuple]:
    seen: dict[int, tuple[Var, object]] = {}
    for p in programs:
        for v, c in zip(p.constvars, p.constvals):
            seen.setdefault(id(v), (v, c))
    return tuple(v for v, _ in seen.values()), tuple(c for _, c in seen.values())


def vjp(program: Program, wrt: Sequence[bool], n_aux: int = 0, settled: Settled | None = None,
        final: bool = True, canonical_form: bool = False) -> Program:
    """``(*primals, *out_cotangents) -> (*outs, *input_cotangents)`` for the inputs in ``wrt``; the
    last ``n_aux`` outputs get no cotangent (see ``linearize``, also for ``canonical_form``; ``settled``,
    ``final``: see ``simplify``, ``optimize``)."""
    split = linearize(program, wrt, n_aux, canonical_form)
    settled = settled if settled is not None else Settled()
    # the backward pass is simplified once, below, with the forward pass's definitions in view: simplified on
    # its own first, most of it was read again there (its residuals gain definitions), for the same result
    t = _transposed(split)
    m = len(program.outputs)
    cts = t.inputs[split.n_residuals:]
    constvars, constvals = _merge_consts(split.known, t)
    outputs = split.known.outputs[:m] + t.outputs
    eqns = sink(split.known.eqns + t.eqns, len(split.known.eqns), outputs)
    return optimize(Program(program.inputs + cts, eqns, outputs, constvars, constvals, name=f"{program.name}_vjp"),
                    settled, final)


def sink(eqns: tuple[Eqn, ...], boundary: int, outputs) -> tuple[Eqn, ...]:
    """Move forward equations (before ``boundary``) that only the backward pass reads to just
    before their first use: residuals are then computed where they are needed and die sooner.

    Walking the forward equations from the last, one that nothing left in the forward pass reads
    goes just before its first reader (a backward equation or one sunk already), after those sunk
    there before it. That order is a forest: each sunk equation hangs under its first reader, and
    its position key (a path: a backward equation's index, then the order of arrival under each
    reader, with a reader after all it holds) compares readers without moving anything, so the
    list is rebuilt once, linear in the equations for the shallow forests residuals make."""
    eqns = tuple(eqns)
    n = len(eqns)
    # keyed by the Vars themselves (identity hash, in C), each forward equation's readers a list made at its
    # first reader (the walk reads in order, so a repeat is the last entry), a path per position in a list
    pinned = {a for a in outputs if type(a) is Var}
    producer = {v: i for i, eqn in enumerate(eqns[:boundary]) for v in eqn.outputs}
    readers: list[list[int] | None] = [None] * boundary
    produced = producer.get
    for j, eqn in enumerate(eqns):
        for a in eqn.inputs:
            i = produced(a) if type(a) is Var else None
            if i is not None:
                found = readers[i]
                if found is None:
                    readers[i] = [j]
                elif found[-1] != j:
                    found.append(j)
    last = sys.maxsize  # a reader's key ends with it: it follows the equations sunk under it
    path: list[tuple[int, ...] | None] = [None] * boundary + [(j,) for j in range(boundary, n)]
    held: dict[int, list[int]] = {}  # reader -> the equations sunk just before it, in arrival order
    for i in reversed(range(boundary)):
        read = readers[i]
        eqn = eqns[i]  # (``effectful`` asked only of a primitive that may be one: most are not)
        if read is None or not pinned.isdisjoint(eqn.outputs) or (
                eqn.prim in EFFECTS or eqn.prim in WITH_BODIES and effectful(eqn)):
            continue  # unread, an output or an effect (effects keep their order): it stays
        if len(read) == 1:
            first = read[0]
            if path[first] is None:
                continue  # read by the forward pass: it stays
        elif None in map(path.__getitem__, read):
            continue
        else:
            first = min(read, key=lambda j: path[j] + (last,))
        below = held.setdefault(first, [])
        path[i] = path[first] + (len(below),)
        below.append(i)
    order = [i for i in range(boundary) if path[i] is None]
    stack = [(j, False) for j in reversed(range(boundary, n))]
    while stack:  # each reader after the equations it holds, in arrival order, each after its own
        j, expanded = stack.pop()
        if expanded or j not in held:
            order.append(j)
            continue
        stack.append((j, True))
        stack.extend((k, False) for k in reversed(held[j]))
    return tuple(map(eqns.__getitem__, order))


def value_and_grad(program: Program, wrt: Sequence[bool], n_aux: int = 0, canonical_form: bool = False) -> Program:
    """``(*primals) -> (value, *aux, *gradients)`` of a real scalar function (its first output, of size 1
    and any shape, as autograd takes it; the ``n_aux`` others are auxiliary values, returned as they are):
    the VJP seeded with 1 (``canonical_form``: see ``linearize``)."""
    assert len(program.outputs) == 1 + n_aux
    settled = Settled()  # what simplifying the VJP learnt: with the seed set, only what reads it is rewritten again
    # sunk and simplified with the seed still an input
    v = vjp(program, wrt, n_aux, settled, final=False, canonical_form=canonical_form)
    seed = v.inputs[-1]
    one = Eqn(st.broadcast_in_dim_p, (Literal.of(1, seed.dtype),), (seed,),
              Params({"shape": seed.type.shape, "broadcast_dimensions": ()}))
    n_fwd = _forward_length(v, seed)
    eqns = v.eqns[:n_fwd] + (one,) + v.eqns[n_fwd:]
    return optimize(Program(v.inputs[:-1], eqns, v.outputs, v.constvars, v.constvals, name=f"{program.name}_grad"),
                    settled)


def _forward_length(program: Program, seed: Var) -> int:
    """The index of the first equation that reads the cotangent seed."""
    for i, eqn in enumerate(program.eqns):
        for a in eqn.inputs:  # (a loop, not a generator per equation)
            if a is seed:
                return i
    return len(program.eqns)


def is_real_scalar(program: Program) -> bool:
    """One real output of one element (``f64[]``, ``f64[1]``, ``f64[1,1]``: a loss summed with
    ``keepdims`` is still one number, as autograd and PyTorch take it)."""
    return len(program.outputs) == 1 and program.outputs[0].type.size == 1 and np.dtype(
        program.outputs[0].dtype).kind == "f"
