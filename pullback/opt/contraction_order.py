"""Cross-country mode: evaluate each chain of contractions in the order with the fewest flops.

Jacobian and Hessian programs multiply chains of partial derivatives: ``jacfwd`` of
``A @ (B @ (C @ x))`` is ``A @ (B @ C)`` (forward order), ``jacrev`` gives ``(C.T @ (B.T @ A.T)).T``
(reverse order), and which is cheaper depends on the shapes, not on the mode (Laue et al.,
cross-country mode; Naumann's matrix-chain view of the Jacobian). This pass reads every maximal
tree of single-use ``dot_general`` equations, together with the transposes and the scalings
``x * broadcast(u)`` between them (a diagonal factor ``diag(u)``, Laue's example 7), as one
tensor network (an einsum: each axis a label, a label shared by several operands contracted
where it is last needed), finds the order with the fewest multiply-adds (exact dynamic
programming over subsets for up to ``EXACT_MAX`` operands, greedy beyond, as ``np.einsum_path``
does) and rewrites the tree in that order where it saves at least ``MIN_SAVING`` of the flops.

Before (``A``: 2 x n, ``B``, ``C``: n x n; 4 n^3 flops)::

    d: f64[n,n] = dot_general B C
    e: f64[2,n] = dot_general A d

After (8 n^2 flops)::

    d: f64[2,n] = dot_general A B
    e: f64[2,n] = dot_general d C
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from pullback.ir.core import Eqn, Params, Program, Var
from pullback.ir.types import ArrayType
from pullback.opt import census
from pullback.opt.census import primitives
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st

EXACT_MAX = 8  # operands up to which the order is optimal (3^8 subset pairs); greedy beyond
GREEDY_MAX = 32  # longer chains keep their order (the greedy search is cubic in the operands)
MIN_SAVING = 0.1  # a smaller saving does not pay for changing the program a person reads

_NODES = (con.dot_general_p, st.transpose_p, ew.mul_p)
_VIEWS = (st.transpose_p, st.broadcast_in_dim_p, st.reshape_p)
_READ = frozenset({*_NODES, st.broadcast_in_dim_p, st.reshape_p})  # the definitions a network reads


@dataclass
class _Net:
    """A tree of contractions as an einsum: ``leaves[i]`` with axis labels ``labels[i]``,
    the result's labels ``out``, and the flops of the order the program has now."""

    leaves: list
    labels: list[tuple[int, ...]]
    out: tuple[int, ...]
    sizes: dict[int, int]
    cost: int = 0
    dots: int = 0


def reorder_contractions(program: Program) -> Program:
    """``program`` with each contraction tree evaluated in its cheapest order (see the module)."""
    if list(primitives(program)).count(con.dot_general_p) < 2:
        return program
    uses = census.readers(program)
    for a in program.outputs:
        if isinstance(a, Var):
            uses[id(a)] += 1  # an output is never folded into another value (two readers at least)
    defs = {id(e.outputs[0]): e for e in program.eqns if e.prim in _READ}  # what the walks look through
    absorbed: set[int] = set()
    replaced: dict[int, list[Eqn]] = {}
    def grows(a) -> bool:  # a single-use contraction (or transpose, or product) the tree reads through
        e = defs.get(id(a)) if isinstance(a, Var) else None
        return e is not None and e.prim in _NODES and uses.get(id(a)) == 1 and _is_node(e)

    for eqn in reversed(program.eqns):
        if eqn.prim not in _NODES or id(eqn) in absorbed or not _is_node(eqn) or not any(map(grows, eqn.inputs)):
            continue  # (a lone equation has nothing to reorder: skipping it keeps the pass cheap)
        inner: list[Eqn] = []
        net = _network(eqn, defs, uses, inner)
        absorbed.update(id(e) for e in inner)
        if net.dots < 2 or not 3 <= len(net.leaves) <= GREEDY_MAX:
            continue
        steps, cost = _best_order(net)
        if cost < net.cost and cost <= (1 - MIN_SAVING) * net.cost:
            replaced[id(eqn)] = _emit(net, steps, eqn)
    if not replaced:
        return program
    eqns = tuple(e2 for e in program.eqns for e2 in replaced.get(id(e), [e]))
    return Program(program.inputs, eqns, program.outputs, program.constvars, program.constvals, program.name)


def _is_node(eqn: Eqn) -> bool:
    """A contraction, a transpose, or an elementwise product of floats without literals."""
    if eqn.prim is ew.mul_p:
        return not eqn.params and all(isinstance(a, Var) for a in eqn.inputs) and eqn.outputs[0].dtype.kind in "fc"
    return eqn.prim is not con.dot_general_p or eqn.outputs[0].dtype.kind in "fc"


def _network(root: Eqn, defs, uses, inner: list[Eqn]) -> _Net:
    counter = itertools.count()
    out_var = root.outputs[0]
    out = tuple(next(counter) for _ in out_var.shape)
    net = _Net([], [], out, dict(zip(out, out_var.shape)))

    def label(size: int) -> int:
        k = next(counter)
        net.sizes[k] = size
        return k

    def walk(eqn: Eqn, labels: tuple[int, ...]) -> list[tuple[object, tuple[int, ...], bool]]:
        """The equation's operands with their labels, and whether each is a leaf already."""
        inner.append(eqn)
        if eqn.prim is st.transpose_p:
            ins = [0] * len(labels)
            for i, p in enumerate(eqn.params["permutation"]):
                ins[p] = labels[i]
            return [(eqn.inputs[0], tuple(ins), False)]
        if eqn.prim is ew.mul_p:
            net.cost += math.prod(net.sizes[k] for k in labels)
            found = [_scaling(a, defs) for a in eqn.inputs]
            return [(a, labels, False) if f is None else (f[0], tuple(labels[d] for d in f[1]), True)
                    for a, f in zip(eqn.inputs, found)]
        x, y = eqn.inputs
        d: con.DotDims = eqn.params["dims"]
        lx, ly = [0] * x.type.ndim, [0] * y.type.ndim
        it = iter(labels)
        for a, b in zip(d.lhs_batch, d.rhs_batch):
            lx[a] = ly[b] = next(it)
        for a in con.free_axes(x.type.ndim, d.lhs_contract, d.lhs_batch):
            lx[a] = next(it)
        for b in con.free_axes(y.type.ndim, d.rhs_contract, d.rhs_batch):
            ly[b] = next(it)
        for a, b in zip(d.lhs_contract, d.rhs_contract):
            lx[a] = ly[b] = label(x.shape[a])
        net.cost += math.prod(net.sizes[k] for k in set(lx) | set(ly))
        net.dots += 1
        return [(x, tuple(lx), False), (y, tuple(ly), False)]

    stack = list(reversed(walk(root, out)))  # depth first, left operands first, without recursion
    while stack:
        a, labels, is_leaf = stack.pop()
        e = None if is_leaf or not isinstance(a, Var) else defs.get(id(a))
        if e is not None and e.prim in _NODES and uses.get(id(a)) == 1 and _is_node(e) \
                and a.dtype == root.outputs[0].dtype:
            stack.extend(reversed(walk(e, labels)))
        else:
            net.leaves.append(a)
            net.labels.append(labels)
    return net


def _scaling(a, defs) -> tuple[Var, tuple[int, ...]] | None:
    """``a = broadcast(u)``: u and the axes of ``a`` its axes are, where u is not stretched along
    any axis, or is the reshape of a value to size-1 axes that are (``u[:, None] * x``)."""
    b = defs.get(id(a)) if isinstance(a, Var) else None
    if b is None or b.prim is not st.broadcast_in_dim_p or not isinstance(b.inputs[0], Var):
        return None
    u, dims = b.inputs[0], b.params["broadcast_dimensions"]
    stretched = {i for i, d in enumerate(dims) if u.shape[i] != a.shape[d]}
    if not stretched:
        return u, dims
    r = defs.get(id(u))
    kept = tuple(i for i in range(u.type.ndim) if i not in stretched)
    if r is not None and r.prim is st.reshape_p and isinstance(r.inputs[0], Var) \
            and r.inputs[0].shape == tuple(u.shape[i] for i in kept):
        return r.inputs[0], tuple(dims[i] for i in kept)
    return None


# --- the order ------------------------------------------------------------------------------


def _best_order(net: _Net) -> tuple[list[tuple[int, int]], int]:
    """Pairwise steps over operand masks (each step's operands are unions of leaves) and their flops."""
    n = len(net.leaves)
    where: dict[int, int] = {}  # label -> mask of the leaves that carry it
    for i, ls in enumerate(net.labels):
        for k in ls:
            where[k] = where.get(k, 0) | (1 << i)
    full = (1 << n) - 1
    outs = set(net.out)
    memo_labels: dict[int, frozenset[int]] = {}

    def kept(mask: int) -> frozenset[int]:
        """The labels a partial product keeps: those needed outside it."""
        if mask not in memo_labels:
            memo_labels[mask] = frozenset(k for k, m in where.items() if m & mask and (m & ~mask or k in outs))
        return memo_labels[mask]

    def step_cost(a: int, b: int) -> int:
        return math.prod(net.sizes[k] for k in kept(a) | kept(b))

    if n <= EXACT_MAX:
        best: dict[int, tuple[int, tuple[int, int] | None]] = {1 << i: (0, None) for i in range(n)}
        for mask in sorted(range(1, full + 1), key=lambda m: bin(m).count("1")):
            if mask in best:
                continue
            low = mask & -mask
            rest = mask ^ low
            choice, outer = None, None
            sub = rest
            while True:  # every split with the lowest leaf on the first side
                first = sub | low
                second = mask ^ first
                if second:
                    c = best[first][0] + best[second][0] + step_cost(first, second)
                    # outer products (no shared label) only where the operands share none at all
                    if kept(first) & kept(second):
                        if choice is None or c < choice[0]:
                            choice = (c, (first, second))
                    elif outer is None or c < outer[0]:
                        outer = (c, (first, second))
                if sub == 0:
                    break
                sub = (sub - 1) & rest
            best[mask] = choice or outer
        steps: list[tuple[int, int]] = []

        def unfold(mask: int) -> None:
            split = best[mask][1]
            if split is not None:
                unfold(split[0])
                unfold(split[1])
                steps.append(split)

        unfold(full)
        return steps, best[full][0]
    parts = [1 << i for i in range(n)]
    steps, total = [], 0
    while len(parts) > 1:  # greedy: the cheapest contraction among operands that share a label
        pairs = [(a, b) for a, b in itertools.combinations(parts, 2) if kept(a) & kept(b)] \
            or list(itertools.combinations(parts, 2))
        a, b = min(pairs, key=lambda p: (step_cost(*p), math.prod(net.sizes[k] for k in kept(p[0] | p[1]))))
        total += step_cost(a, b)
        steps.append((a, b))
        parts = [p for p in parts if p not in (a, b)] + [a | b]
    return steps, total


# --- the rewritten equations ------------------------------------------------------------------


def _emit(net: _Net, steps: list[tuple[int, int]], root: Eqn) -> list[Eqn]:
    """Equations computing the steps, the last one defining the root's output."""
    n = len(net.leaves)
    where: dict[int, int] = {}
    for i, ls in enumerate(net.labels):
        for k in ls:
            where[k] = where.get(k, 0) | (1 << i)
    outs = set(net.out)
    dtype = root.outputs[0].dtype
    vals: dict[int, tuple[object, tuple[int, ...]]] = {1 << i: (net.leaves[i], net.labels[i]) for i in range(n)}
    eqns: list[Eqn] = []

    def bind(prim, ins, labels, **params):
        v = Var(_type(labels, net, dtype))
        eqns.append(Eqn(prim, tuple(ins), (v,), Params(params), root.source))
        return v

    position = {k: i for i, k in enumerate(net.out)}

    def in_order(lx, ly, keep) -> bool:
        """Whether the product ``x y`` keeps the result's axes in the order they have in the root."""
        shared = [k for k in lx if k in ly and k in keep]
        kept = [*shared, *(k for k in lx if k not in ly), *(k for k in ly if k not in lx)]
        seen = [position[k] for k in kept if k in position]
        return seen == sorted(seen)

    for a, b in steps:
        if (b & -b) < (a & -a):  # the operand holding the earlier leaf goes on the left
            a, b = b, a
        mask = a | b
        keep = {k for k, m in where.items() if m & mask and (m & ~mask or k in outs)}
        if not in_order(vals[a][1], vals[b][1], keep) and in_order(vals[b][1], vals[a][1], keep):
            a, b = b, a  # (x y)^T = y^T x^T: no transpose of the result
        (x, lx), (y, ly) = vals[a], vals[b]
        shared = [k for k in lx if k in ly]
        contract = [k for k in shared if k not in keep]
        if not contract and (set(ly) <= set(lx) or set(lx) <= set(ly)):
            big, lb, small, ls = (x, lx, y, ly) if set(ly) <= set(lx) else (y, ly, x, lx)
            order = sorted(ls, key=lb.index)
            if order != list(ls):
                small = bind(st.transpose_p, [small], order, permutation=tuple(ls.index(k) for k in order))
            if tuple(order) != tuple(lb):
                small = bind(st.broadcast_in_dim_p, [small], lb, shape=_type(lb, net, dtype).shape,
                             broadcast_dimensions=tuple(lb.index(k) for k in order))
            vals[mask] = (bind(ew.mul_p, [x, small] if big is x else [small, y], lb), tuple(lb))
            continue
        batch = [k for k in shared if k in keep]
        dims = con.DotDims(tuple(lx.index(k) for k in contract), tuple(ly.index(k) for k in contract),
                           tuple(lx.index(k) for k in batch), tuple(ly.index(k) for k in batch))
        labels = (*batch, *(k for k in lx if k not in shared), *(k for k in ly if k not in shared))
        vals[mask] = (bind(con.dot_general_p, [x, y], labels, dims=dims), labels)
    result, labels = vals[(1 << n) - 1]
    last = eqns[-1]
    if labels == net.out:
        eqns[-1] = Eqn(last.prim, last.inputs, root.outputs, last.params, last.source)
    else:
        perm = tuple(labels.index(k) for k in net.out)
        eqns.append(Eqn(st.transpose_p, (result,), root.outputs, Params({"permutation": perm}), root.source))
    return eqns


def _type(labels, net: _Net, dtype) -> ArrayType:
    return ArrayType(tuple(net.sizes[k] for k in labels), dtype)


def program_flops(program: Program) -> int:
    """Multiply-adds of the contractions in ``program`` plus one per element of every other
    result but the views (transpose, broadcast, reshape): the cost model ``pb.jacobian`` picks
    forward or reverse mode by."""
    total = 0
    for e in program.eqns:
        if e.prim in _VIEWS:
            continue
        if e.prim is con.dot_general_p:
            x, y = e.inputs
            d = e.params["dims"]
            contracted = math.prod(x.shape[a] for a in d.lhs_contract)
            total += e.outputs[0].type.size * contracted
        else:
            total += sum(v.type.size for v in e.outputs if type(v.type) is ArrayType)  # (a loop's records: uncounted)
    return total

