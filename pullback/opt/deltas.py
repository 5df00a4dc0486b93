"""Materialise an outer product with a delta factor as zeros and one diagonal write.

A Hessian kept factored (``outer``, ``grouped``) often ends as ``P = c * delta_pq * bcast(E)``: an
identity ``eye`` broadcast on a pair of axes (p, q) of equal size, times factors that do not read
axis q (the block-diagonal masked-factorisation Hessian ``2 delta_ij C[j, a, b]``, or
``2 delta_ij (V^T V)_ab``). Computed as written, that product is a pass over every entry of the
result, reading two broadcasts. Its nonzeros are the diagonal ``p == q`` only, so a program output
of that form is printed as the hand-written Hessian is::

    E = c * prod(other factors)                # out.size / n entries (axis q dropped)
    D = np.zeros(...); D[..., i, i] = E        # diag_embed onto axes (p, q), moved last
    H = D.transpose(perm)                      # a view: no pass over the result

NumPy's ``zeros`` takes its pages from the operating system already zeroed, so the result costs
the allocation and the E-sized write. A factor that reads axis q but not p reads p instead (the
same entries, under the delta); one that reads both is left alone (and so is the product). A sum
of such products sharing one delta (a ridge ``c * sum(U**2)`` adds ``2 c delta_ij delta_ab``) is
one write of the summed E. The outputs are found through transposes, and through the
contraction-free ``dot_general`` the contraction order makes of a product of two broadcasts.
``block_diagonal`` reads the result back as Kronecker factors for ``compressed=True``.
"""

from __future__ import annotations

import numpy as np

from pullback.ad.substitute import substitute
from pullback.ir.core import Eqn, Literal, Params, Program, Var
from pullback.ir.types import ArrayType, is_inexact
from pullback.opt.grouped import sorted_onto
from pullback.opt.outer import Factor, Outer, build, outer_factors, summands
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import indexing as ix
from pullback.primitives import structural as st


def materialise(program: Program) -> Program:
    """``program`` with each output that is a sum of outer products sharing a delta factor computed
    as zeros and one diagonal write (itself when there is none)."""
    candidates = [out for out in program.outputs if isinstance(out, Var) and is_inexact(out.dtype)
                  and out.type.ndim >= 3]
    if not candidates:  # (most programs: the definitions are not indexed)
        return program
    defs = {id(o): e for e in program.eqns for o in e.outputs}
    replaced: dict[int, list[Eqn]] = {}
    for out in candidates:
        if id(out) in replaced:
            continue
        eqns = _materialised(out, defs)
        if eqns is not None:
            replaced[id(out)] = eqns
    if not replaced:
        return program
    new: list[Eqn] = []
    renamed: dict[int, Var] = {}  # an output written in place under a name of its own
    for e in program.eqns:
        if len(e.outputs) == 1 and id(e.outputs[0]) in replaced:
            eqns = replaced[id(e.outputs[0])]
            new.extend(eqns)
            if eqns[-1].outputs[0] is not e.outputs[0]:
                renamed[id(e.outputs[0])] = eqns[-1].outputs[0]
        else:
            new.append(e)
    return substitute(Program(program.inputs, tuple(new), program.outputs, program.constvars, program.constvals,
                              program.name), renamed)


def _materialised(out: Var, defs) -> list[Eqn] | None:
    """Equations computing ``out`` (a transpose of a sum of delta products) as a diagonal write."""
    perm, base = tuple(range(out.type.ndim)), out
    d = defs.get(id(base))
    while d is not None and d.prim is st.transpose_p and isinstance(d.inputs[0], Var):
        perm = tuple(d.params["permutation"][t] for t in perm)
        base = d.inputs[0]
        d = defs.get(id(base))
    products = []
    for sign, a in summands(base, defs, 1, 0):
        o = _delta_product(a, defs)
        if o is None or o.type != base.type:
            return None
        products.append(Outer(sign * o.coef, o.factors, o.type))
    shared = set.intersection(*({f.dims for f in o.factors if _is_delta(f, defs)} for o in products))
    if not shared:
        return None
    p, q = max(sorted(shared), key=lambda dims: base.shape[dims[0]])
    kept = [a for a in range(base.type.ndim) if a != q]  # the blocks' axes
    e_type = ArrayType(tuple(base.shape[a] for a in kept), base.dtype)
    eqns: list[Eqn] = []
    total = None
    for o in products:
        part = _blocks(o, p, q, kept, e_type, defs)
        if part is None:
            return None
        eqns += part[0]
        if total is not None:
            summed = Var(e_type, "blocks")
            eqns.append(Eqn(ew.add_p, (total, part[1]), (summed,)))
            part = (part[0], summed)
        total = part[1]
    # the blocks with axis p last, embedded on the last two axes, then moved to (p, q)
    at = {a: i for i, a in enumerate(kept)}
    others = [a for a in kept if a != p]
    order = tuple(at[a] for a in others) + (at[p],)
    if order != tuple(range(len(order))):
        last = Var(ArrayType(tuple(e_type.shape[k] for k in order), out.dtype), "blocks")
        eqns.append(Eqn(st.transpose_p, (total,), (last,), Params({"permutation": order})))
    else:
        last = total
    n = base.shape[p]
    axes = [*others, p, q]  # the embedding's axes, as base's
    total_perm = tuple(axes.index(perm[t]) for t in range(out.type.ndim))
    if total_perm != tuple(range(out.type.ndim)):  # the pair not last in the result: written where it lies
        return eqns + _diagonal_store(out, total, kept, perm, p, q)
    embedded = Var(ArrayType((*last.shape[:-1], n, n), out.dtype), "embedded")
    eqns.append(Eqn(st.diag_embed_p, (last,), (embedded,), Params({"shape": (n, n), "offset": 0})))
    eqns.append(Eqn(st.reshape_p, (embedded,), (out,), Params({"new_sizes": out.shape})))
    return eqns


def _store_layout(ndim: int, pair: tuple[int, int]) -> list:
    """The axes of ``out[key]`` for a key with one index array at each of ``pair`` (out's axes) and
    slices elsewhere: out's other axes in order, and ``None`` for the diagonal where NumPy puts it (at
    the pair when adjacent, else first)."""
    a, b = sorted(pair)
    rest = [t for t in range(ndim) if t not in pair]
    at = a if b == a + 1 else 0
    return rest[:at] + [None] + rest[at:]


def _diagonal_store(out: Var, total: Var, kept: list[int], perm: tuple, p: int, q: int) -> list[Eqn]:
    """``out = zeros; out[.., i, .., i, ..] = blocks``: the result C-ordered, written in place (``total``
    over base's axes ``kept``; out's axis t is base's ``perm[t]``; the delta on base's (p, q))."""
    pair = (perm.index(p), perm.index(q))
    layout = _store_layout(out.type.ndim, pair)
    order = tuple(kept.index(p if t is None else perm[t]) for t in layout)
    eqns: list[Eqn] = []
    updates = total
    if order != tuple(range(len(order))):
        updates = Var(ArrayType(tuple(total.shape[k] for k in order), out.dtype), "blocks")
        eqns.append(Eqn(st.transpose_p, (total,), (updates,), Params({"permutation": order})))
    n = out.shape[pair[0]]
    zeros, result = Var(out.type), Var(out.type, out.hint or "hessian")
    eqns.append(Eqn(st.broadcast_in_dim_p, (Literal.of(0, out.dtype),), (zeros,),
                    Params({"shape": out.shape, "broadcast_dimensions": ()})))
    i = Var(ArrayType((n,), np.dtype(np.int64)), "i")
    eqns.append(Eqn(st.iota_p, (), (i,), Params({"dtype": np.dtype(np.int64), "shape": (n,), "dimension": 0})))
    index = tuple(ix.Operand(sorted(pair).index(t)) if t in pair else ix.Slice(0, out.shape[t], 1)
                  for t in range(out.type.ndim))  # (both are ``i``: numbered in the order they stand, as bind checks)
    eqns.append(Eqn(ix.scatter_p, (zeros, updates, i, i), (result,), Params({"index": index, "unique_indices": True})))
    return eqns


def _delta_product(a, defs) -> Outer | None:
    """``a`` as an outer product of broadcasts, or as a contraction-free ``dot_general`` with an
    identity (what the contraction order makes of ``bcast(eye) * bcast(C)``)."""
    if not isinstance(a, Var):
        return None
    o = outer_factors(a, defs)
    if o is not None and o.all_broadcasts():
        return o
    d = defs.get(id(a))
    return _batched_product(d, a, defs) if d is not None and d.prim is con.dot_general_p else None


def _batched_product(d: Eqn, base: Var, defs) -> Outer | None:
    """A ``dot_general`` without contracted axes, one operand an identity: the product of its
    operands broadcast onto its result's axes (batch axes first, then each side's free axes)."""
    dims: con.DotDims = d.params["dims"]
    if dims.lhs_contract or not all(isinstance(x, Var) for x in d.inputs):
        return None
    nb = len(dims.lhs_batch)
    factors, start = [], nb
    for x, batch in zip(d.inputs, (dims.lhs_batch, dims.rhs_batch)):
        free = [a for a in range(x.type.ndim) if a not in batch]
        where = {a: i for i, a in enumerate(batch)} | {a: start + i for i, a in enumerate(free)}
        start += len(free)
        factors.append(Factor(x, tuple(where[a] for a in range(x.type.ndim))))
    if not any(_is_delta(f, defs) for f in factors) or any(len(f.dims) >= base.type.ndim for f in factors):
        return None
    return Outer(1, tuple(factors), base.type)


def _is_delta(f: Factor, defs) -> bool:
    """An identity broadcast on two axes (in either order: it is its own transpose)."""
    d = defs.get(id(f.operand))
    return (d is not None and d.prim is st.eye_p and d.params["k"] == 0 and len(f.dims) == 2
            and f.operand.shape[0] == f.operand.shape[1])


def _blocks(o: Outer, p: int, q: int, kept: list[int], e_type: ArrayType, defs) -> tuple[list[Eqn], Var] | None:
    """The product of ``o``'s factors but its delta on (p, q), over the axes ``kept`` (all but q):
    a factor reading q (and not p) reads p instead, the same entries under the delta."""
    eqns: list[Eqn] = []
    rest: list[Factor] = []
    dropped = False
    for f in o.factors:
        if not dropped and _is_delta(f, defs) and set(f.dims) == {p, q}:
            dropped = True
            continue
        positions = list(f.dims)
        if q in positions and p in positions:
            return None
        if q in positions:
            positions = [p if d == q else d for d in positions]
        at = {a: i for i, a in enumerate(kept)}
        if _is_delta(f, defs):
            factor = Factor(f.operand, tuple(sorted(at[d] for d in positions)))
        else:
            moved, operand, dims = sorted_onto(f.operand, [at[d] for d in positions])
            eqns += moved
            factor = Factor(operand, dims)
        rest.append(factor)
    e = Var(e_type, "blocks")
    if not rest:  # the delta alone: ones, scaled
        eqns.append(Eqn(st.broadcast_in_dim_p, (Literal.of(o.coef, e_type.dtype),), (e,),
                        Params({"shape": e_type.shape, "broadcast_dimensions": ()})))
        return eqns, e
    return eqns + build(Outer(o.coef, tuple(rest), e_type), e), e


def _embedded_diagonal(h: Var, defs):
    """(E, E's axis k -> h's axis, E's diagonal axis, the pair (p, q) of h's axes) when h is
    ``diag_embed(E)``, perhaps transposed: the diagonal on the last two axes of the embedding."""
    d = defs.get(id(h))
    perm = tuple(range(h.type.ndim))
    if d is not None and d.prim is st.transpose_p and isinstance(d.inputs[0], Var):
        perm, d = d.params["permutation"], defs.get(id(d.inputs[0]))
    elif d is not None and d.prim is st.reshape_p and isinstance(d.inputs[0], Var) and d.inputs[0].shape == h.shape:
        d = defs.get(id(d.inputs[0]))
    if d is None or d.prim is not st.diag_embed_p or d.params["offset"] or not isinstance(d.inputs[0], Var):
        return None
    nd = h.type.ndim
    p, q = sorted((perm.index(nd - 2), perm.index(nd - 1)))
    return d.inputs[0], [perm.index(k) for k in range(nd - 2)] + [p], nd - 2, (p, q)


def _stored_diagonal(h: Var, defs):
    """The same for ``h = zeros; h[.., i, .., i, ..] = E`` (``_diagonal_store``)."""
    d = defs.get(id(h))
    if d is None or d.prim is not ix.scatter_p or len(d.inputs) != 4 or d.inputs[2] is not d.inputs[3]:
        return None
    z, e, i = d.inputs[0], d.inputs[1], d.inputs[2]
    dz, di = defs.get(id(z)), defs.get(id(i))
    if (dz is None or dz.prim is not st.broadcast_in_dim_p or not isinstance(dz.inputs[0], Literal)
            or dz.inputs[0].value != 0 or di is None or di.prim is not st.iota_p or not isinstance(e, Var)):
        return None
    index = d.params["index"]
    pair = tuple(t for t, entry in enumerate(index) if isinstance(entry, ix.Operand))
    if len(pair) != 2 or any(isinstance(entry, ix.Slice) and len(entry) != h.shape[t] for t, entry in enumerate(index)):
        return None
    layout = _store_layout(h.type.ndim, pair)
    return e, [min(pair) if t is None else t for t in layout], layout.index(None), pair


def block_diagonal(h: Var, defs, r: int) -> tuple[list[Eqn], list[tuple]] | None:
    """A Hessian block (of shape ``s + s``, ``r`` axes each) that ``materialise`` printed as a
    diagonal write, as Kronecker factor specs ``(axes, kind, value)`` (see ``outer.FactorSpec``) and
    the equations making their values: a ``"blocks"`` factor over ``(p, *G)``, the delta's axis p and
    the other axes G of ``s`` (each paired with itself in the second copy), its value ``B`` of shape
    ``(s[p], *s[G], *s[G])`` (``H[i, a, i, b] = B[i, a, b]``); or, when every block is the same
    matrix A, an identity over ``(p,)`` and A over G. None otherwise."""
    found = _stored_diagonal(h, defs) or _embedded_diagonal(h, defs)
    if found is None:
        return None
    e, where, dk, (p, q) = found
    if p >= r or q != p + r:
        return None
    off = [a for k, a in enumerate(where) if k != dk]  # h's axes of E's other axes
    first = sorted(a for a in off if a < r)
    second = sorted(a for a in off if a >= r)
    if [a + r for a in first] != second:
        return None
    if not first:  # a vector on the diagonal
        return [], [((p,), "diagonal", e)]
    b = defs.get(id(e))
    if b is not None and b.prim is st.broadcast_in_dim_p and isinstance(b.inputs[0], Var) \
            and len(b.params["broadcast_dimensions"]) == e.type.ndim - 1 \
            and dk not in b.params["broadcast_dimensions"]:  # every block the same: I (x) A
        a = b.inputs[0]
        at = [where[k] for k in b.params["broadcast_dimensions"]]  # a's axis -> h's axis
        moved, a, _ = sorted_onto(a, at)
        return moved, [((p,), "identity", None), (tuple(first), "dense", a)]
    order = tuple(where.index(a) for a in (p, *first, *second))
    t = defs.get(id(e))
    if t is not None and t.prim is st.transpose_p and isinstance(t.inputs[0], Var):  # one transpose, not two
        order, e = tuple(t.params["permutation"][k] for k in order), t.inputs[0]
    if order == tuple(range(len(order))):
        return [], [((p, *first), "blocks", e)]
    out = Var(ArrayType(tuple(e.shape[k] for k in order), e.dtype), "blocks")
    return [Eqn(st.transpose_p, (e,), (out,), Params({"permutation": order}))], [((p, *first), "blocks", out)]
