"""Rewrites of a program for printing only, where NumPy's implicit semantics read better than the IR's
explicit ones (the IR keeps its forms, which differentiate and simplify better):

- a slice one entry wide on some axes, reshaped to drop those axes, is NumPy's integer index,
  ``v[t]`` rather than ``p = v[t:t + 1]; p.reshape(3)`` (both views; the IR's derivatives of slice
  and reshape are a pad and a reshape, and adjacent pads join);
- a concatenation of arrays each reshaped to a unit axis along it is ``np.stack`` of the arrays
  (``stacked``);
- a broadcast read only by elementwise arithmetic is left to NumPy's broadcasting, ``K * s``
  rather than ``b = np.broadcast_to(s, (2, 3)); K * b``, where the operands' shapes still broadcast
  to the result's (the IR's binary operations take equal shapes).
"""

from __future__ import annotations

from collections import Counter
from operator import is_

from pullback.ad.substitute import substitute
from pullback.backends.stacked import stacks
from pullback.ir.core import Eqn, Params, Program, Var
from pullback.primitives import elementwise as ew
from pullback.primitives import indexing as ix
from pullback.primitives import structural as st


def prepare(program: Program) -> Program:
    """``program`` as it prints (see the module docstring)."""
    return stacks(implicit_broadcasts(unit_indices(program)))


def unit_indices(program: Program) -> Program:
    """``program`` with each ``reshape(slice(x))`` that drops the slice's unit axes a ``gather`` of x."""
    slices = {id(e.outputs[0]): e for e in program.eqns if e.prim is st.slice_p}
    if not slices:
        return program
    readers = Counter(id(a) for e in program.eqns for a in e.inputs if id(a) in slices)
    readers.update(id(a) for a in program.outputs if id(a) in slices)
    eqns, dropped = [], set()
    for eqn in program.eqns:
        d = slices.get(id(eqn.inputs[0])) if eqn.prim is st.reshape_p else None
        index = _index(d, eqn.outputs[0].shape) if d is not None else None
        if index is None:
            eqns.append(eqn)
            continue
        eqns.append(Eqn(ix.gather_p, d.inputs[:1], eqn.outputs, Params({"index": index, "unique_indices": True}),
                        eqn.source))
        if readers[id(d.outputs[0])] == 1:
            dropped.add(id(d))
    if len(eqns) == len(program.eqns) and all(map(is_, eqns, program.eqns)):
        return program
    return Program(program.inputs, tuple(e for e in eqns if id(e) not in dropped), program.outputs,
                   program.constvars, program.constvals, program.name)


def _index(d: Eqn, shape: tuple[int, ...]) -> tuple | None:
    """The key of ``x[key]`` equal to slice ``d`` reshaped to ``shape``, when the reshape only drops
    axes the slice makes one entry wide (and it drops at least one)."""
    p = d.params
    entries, kept = [], []
    for n, start, stop, step in zip(d.outputs[0].shape, p["start_indices"], p["limit_indices"], p["strides"]):
        if n == 1 and step > 0:
            entries.append(ix.Int(start))
        else:
            entries.append(ix.Slice(start, stop, step))
            kept.append(n)
    if tuple(kept) != shape or len(kept) == len(entries):
        return None
    return tuple(entries)


# operations printed as NumPy operators or ufuncs, which broadcast their operands
_BROADCASTING = frozenset({ew.add_p, ew.sub_p, ew.mul_p, ew.div_p, ew.pow_p, ew.max_p, ew.min_p, ew.eq_p, ew.ne_p,
                           ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p, ew.select_p})


def implicit_broadcasts(program: Program) -> Program:
    """``program`` with the broadcasts that NumPy's own broadcasting makes needless read as their operands."""
    returned = {id(a) for a in program.outputs}
    candidates = {id(e.outputs[0]): e for e in program.eqns if e.prim is st.broadcast_in_dim_p
                  and isinstance(e.inputs[0], Var) and id(e.outputs[0]) not in returned and _trailing(e)}
    if not candidates:
        return program
    for e in program.eqns:  # each read only by elementwise arithmetic (or as the values of a diagonal update)
        for k, a in enumerate(e.inputs):
            if id(a) in candidates and not (e.prim in _BROADCASTING or (e.prim is st.add_diagonal_p and k == 1)):
                candidates.pop(id(a), None)
    readers = [e for e in program.eqns if e.prim in _BROADCASTING and any(id(a) in candidates for a in e.inputs)]
    while candidates:  # drop those of which some reader would no longer have its result's shape
        failed = {id(a) for e in readers if not _shapes_hold(e, candidates) for a in e.inputs if id(a) in candidates}
        if not failed:
            break
        for k in failed:
            del candidates[k]
    if not candidates:
        return program
    kept = Program(program.inputs, tuple(e for e in program.eqns if id(e.outputs[0]) not in candidates),
                   program.outputs, program.constvars, program.constvals, program.name)
    return substitute(kept, {k: e.inputs[0] for k, e in candidates.items()})


def _trailing(e: Eqn) -> bool:
    """Whether NumPy broadcasts the operand to the result as this broadcast does (aligned to the last axes)."""
    src, out = e.inputs[0].shape, e.outputs[0].shape
    dims = e.params["broadcast_dimensions"]
    return dims == tuple(range(len(out) - len(src), len(out))) and all(
        a in (1, b) for a, b in zip(src, out[len(out) - len(src):]))


def _shapes_hold(e: Eqn, candidates: dict[int, Eqn]) -> bool:
    """Whether NumPy broadcasts the operands, the candidates read as their sources, to the result's shape:
    each operand's axes, aligned to the last, are the result's or 1, and together they reach every axis
    (``(n, 1) + (1, n)``)."""
    out = e.outputs[0].shape
    shapes = [candidates[id(a)].inputs[0].shape if id(a) in candidates else a.shape
              for a in e.inputs if isinstance(a, Var)]
    if any(len(s) > len(out) or any(n not in (1, m) for n, m in zip(s[::-1], out[::-1])) for s in shapes):
        return False
    return all(any(len(s) > i and s[-1 - i] == n for s in shapes) for i, n in enumerate(out[::-1]))
