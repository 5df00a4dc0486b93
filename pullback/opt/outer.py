"""Outer products of broadcasts: Kronecker-structured values stay factored.

A value ``P = c * bcast(f_1) * ... * bcast(f_m)`` (a product of broadcasts of small operands
times a scalar ``c``) is an outer product: entry ``P[i, a, j, b]`` is ``c f_1[i, j] f_2[a, b]`` for
the unit tensor ``delta_ij delta_ab`` of a Hessian's seed (``jacobian.unit_tensor``), or for the
matrix-factorisation Hessian ``2 delta_ij (V^T V)_ab``. The rewrites keep such values factored:

- a contraction of ``P`` whose contracted axes all belong to one factor ``f`` contracts ``f`` only:
  the result is the outer product of the other factors with ``f . Y`` (Laue's unit tensor moved to
  the end of the product, where ``X @ I = X`` removes it); when they belong to several factors and
  ``P`` has axes none of those reads, those factors and ``Y`` are contracted alone, as a small
  einsum (``grouped.contract_group``: the masked factorisation Hessian);
- ``-P``, ``P * s`` (``s`` a scalar literal) scale the smallest factor;
- ``P1 + P2`` of products that differ in one factor on the same axes is one product;
- a transpose of ``P`` permutes the broadcasts, and a broadcast of a broadcast is one broadcast
  (nested batching, as for a Hessian's per-axis seeds, broadcasts unbatched operands once per axis).

Only products whose factors are all true broadcasts (each operand of fewer axes than ``P``) are
rewritten by the last two rules, so values an ordinary program materialises are left alone.

Before (the seed of an (n, k) input meeting ``U_dot @ V.T``)::

    e1: f64[n,n] = eye;  b1: f64[n,k,n,k] = broadcast_in_dim[dims=(0, 2)] e1
    e2: f64[k,k] = eye;  b2: f64[n,k,n,k] = broadcast_in_dim[dims=(1, 3)] e2
    s: f64[n,k,n,k] = mul b1 b2
    d: f64[n,k,n,m] = dot_general[((3,), (0,))] s vt

After::

    c: f64[k,m] = dot_general[((1,), (0,))] e2 vt      (then ``I . vt`` is ``vt``)
    b3: f64[n,k,n,m] = broadcast_in_dim[dims=(1, 3)] c
    d: f64[n,k,n,m] = mul b1 b3
"""

from __future__ import annotations

from dataclasses import dataclass

from pullback.ad.dce import dce
from pullback.ir.core import Eqn, Literal, Params, Program, Var
from pullback.ir.types import ArrayType, is_inexact
from pullback.opt.grouped import contract_group, sorted_onto
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st

_MAX_FACTORS = 8


@dataclass(frozen=True)
class Factor:
    """``operand`` placed on axes ``dims`` of the product (a broadcast; all axes for a plain array)."""

    operand: Var
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Outer:
    """``coef * prod(broadcast(f.operand, f.dims))`` of type ``type``."""

    coef: complex
    factors: tuple[Factor, ...]
    type: ArrayType

    def all_broadcasts(self) -> bool:
        return all(len(f.dims) < self.type.ndim for f in self.factors)


def outer_factors(a, defs: dict[int, Eqn]) -> Outer | None:
    """``a`` as an outer product of at least one broadcast, or None."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is None or d.prim not in _PRODUCTS:  # a plain array (the common case: one lookup)
        return None
    if not _reaches_broadcast(d, defs, 0):  # a product of plain arrays (the next most common)
        return None
    found = _factors(a, defs, 0)
    if found is None or all(len(f.dims) == a.type.ndim for f in found[1]):
        return None
    return Outer(found[0], tuple(found[1]), a.type)


_PRODUCTS = frozenset({st.broadcast_in_dim_p, ew.neg_p, ew.mul_p})  # what _factors looks through


def _factors(a, defs, depth: int) -> tuple[complex, list[Factor]] | None:
    if not isinstance(a, Var) or depth > _MAX_FACTORS:
        return None
    d = defs.get(id(a))
    if d is not None and d.prim is st.broadcast_in_dim_p and isinstance(d.inputs[0], Var) \
            and all(d.inputs[0].shape[j] == a.shape[k] for j, k in enumerate(d.params["broadcast_dimensions"])):
        coef, operand = _peel(d.inputs[0], defs)
        return coef, [Factor(operand, d.params["broadcast_dimensions"])]
    if d is not None and d.prim is ew.neg_p:
        inner = _factors(d.inputs[0], defs, depth + 1)
        return None if inner is None else (-inner[0], inner[1])
    if d is not None and d.prim is ew.mul_p:
        x, y = d.inputs
        if isinstance(x, Literal) or isinstance(y, Literal):
            lit, other = (x, y) if isinstance(x, Literal) else (y, x)
            inner = _factors(other, defs, depth + 1) if lit.type.ndim == 0 else None
            return None if inner is None else (lit.value * inner[0], inner[1])
        fx = _factors(x, defs, depth + 1)
        fy = _factors(y, defs, depth + 1) if fx is not None else None  # (y's factors matter only with x's)
        if fx is None or fy is None or len(fx[1]) + len(fy[1]) > _MAX_FACTORS:
            return None
        return fx[0] * fy[0], fx[1] + fy[1]
    return 1, [Factor(a, tuple(range(a.type.ndim)))]


def _reaches_broadcast(d: Eqn, defs, depth: int) -> bool:
    """Whether ``_factors``'s walk from the definition ``d`` (at ``depth``) meets a broadcast, without which
    there is no outer product: the same walk (the same lookups), building nothing."""
    prim = d.prim
    if prim is st.broadcast_in_dim_p:
        return True
    if prim is ew.neg_p:
        below = (d.inputs[0],)
    elif prim is ew.mul_p:
        x, y = d.inputs
        below = (y,) if isinstance(x, Literal) else (x,) if isinstance(y, Literal) else (x, y)
    else:
        return False
    for b in below:
        if isinstance(b, Var) and depth < _MAX_FACTORS:
            e = defs.get(id(b))
            if e is not None and _reaches_broadcast(e, defs, depth + 1):
                return True
    return False


def _peel(a: Var, defs) -> tuple[complex, Var]:
    """``a`` as ``coef * b``, through negations and scalings by literals: the scalars of a factor
    join the product's, to be applied once, on its smallest factor."""
    coef = 1
    for _ in range(_MAX_FACTORS):
        d = defs.get(id(a))
        if d is not None and d.prim is ew.neg_p and isinstance(d.inputs[0], Var):
            coef, a = -coef, d.inputs[0]
        elif d is not None and d.prim is ew.mul_p and sum(isinstance(x, Literal) for x in d.inputs) == 1:
            lit, b = d.inputs if isinstance(d.inputs[0], Literal) else d.inputs[::-1]
            if lit.type.ndim or not isinstance(b, Var) or b.type != a.type:
                break
            coef, a = coef * lit.value, b
        else:
            break
    return coef, a


# the primitives ``outer_rewrite`` can rewrite
OUTER_REWRITES = frozenset({st.broadcast_in_dim_p, con.dot_general_p, ew.neg_p, ew.mul_p, ew.add_p, ew.sub_p,
                            st.transpose_p})


def outer_rewrite(prim, ins, p, out: Var, defs: dict[int, Eqn]):
    """Replacement equations for ``out`` (a list ending with its definition), or None."""
    if prim is st.broadcast_in_dim_p and isinstance(ins[0], Var):  # a broadcast of a broadcast is one
        d = defs.get(id(ins[0]))
        if d is not None and d.prim is st.broadcast_in_dim_p:
            dims = tuple(p["broadcast_dimensions"][k] for k in d.params["broadcast_dimensions"])
            return [Eqn(st.broadcast_in_dim_p, d.inputs, (out,), Params({**p, "broadcast_dimensions": dims}))]
    if not is_inexact(out.dtype):
        return None
    if prim is con.dot_general_p:
        return _contraction(ins, p["dims"], out, defs)
    if prim is ew.neg_p or (prim is ew.mul_p and sum(isinstance(a, Literal) for a in ins) == 1):
        o = outer_factors(next(a for a in ins if not isinstance(a, Literal)), defs)
        if o is not None and o.all_broadcasts() and o.type == out.type:
            coef = -o.coef if prim is ew.neg_p else next(a for a in ins if isinstance(a, Literal)).value * o.coef
            return build(Outer(coef, o.factors, out.type), out)
    if prim in (ew.add_p, ew.sub_p):
        return _sum(prim, ins, out, defs)
    if prim is st.transpose_p:
        o = outer_factors(ins[0], defs)
        if o is not None and o.all_broadcasts():
            return _transposed(o, p["permutation"], out, defs)
    return None


def _contraction(ins, dims: con.DotDims, out: Var, defs):
    if dims.lhs_batch:
        return None
    for k in (0, 1):
        o = outer_factors(ins[k], defs)
        if o is None:
            continue
        contracted = dims.lhs_contract if k == 0 else dims.rhs_contract
        others = dims.rhs_contract if k == 0 else dims.lhs_contract
        owners = [f for f in o.factors if set(f.dims) & set(contracted)]
        owned = {d for f in owners for d in f.dims}
        if len(owners) > 1 and any(d not in owned for f in o.factors for d in f.dims):  # P larger than the group
            grouped = _grouped_contraction(o, owners, k, ins[1 - k], contracted, others, out)
            if grouped is not None:
                return grouped
        if len(owners) != 1 or not set(contracted) <= set(owners[0].dims):
            continue
        f = owners[0]
        if len(f.dims) == o.type.ndim:  # a full array: nothing to save
            continue
        y = ins[1 - k]
        p_free = [i for i in range(o.type.ndim) if i not in contracted]
        n_y_free = y.type.ndim - len(others)
        shift = 0 if k == 0 else n_y_free
        pos = {axis: shift + j for j, axis in enumerate(p_free)}
        f_contract = tuple(f.dims.index(c) for c in contracted)
        f_free = [j for j in range(len(f.dims)) if j not in f_contract]
        y_dims = list(range(len(p_free), len(p_free) + n_y_free)) if k == 0 else list(range(n_y_free))
        f_dims = [pos[f.dims[j]] for j in f_free]
        c_dims = tuple(f_dims + y_dims) if k == 0 else tuple(y_dims + f_dims)
        c_shape = tuple(out.shape[d] for d in c_dims)
        c = Var(ArrayType(c_shape, out.dtype), "contracted")
        c_params = con.DotDims(f_contract, others) if k == 0 else con.DotDims(others, f_contract)
        contraction = Eqn(con.dot_general_p, (f.operand, y) if k == 0 else (y, f.operand), (c,),
                          Params({"dims": c_params}))
        rest = [Factor(g.operand, tuple(pos[d] for d in g.dims)) for g in o.factors if g is not f]
        return [contraction, *build(Outer(o.coef, (Factor(c, c_dims), *rest), out.type), out)]
    return None


def _grouped_contraction(o: Outer, owners: list[Factor], k: int, y: Var, contracted, others, out: Var):
    """A contraction whose axes several factors own: those factors and ``y`` contracted alone
    (``grouped.contract_group``), the other factors broadcast on the result."""
    sizes: dict = {axis: n for axis, n in enumerate(o.type.shape)}
    sizes.update({("y", j): n for j, n in enumerate(y.type.shape)})
    found = contract_group([(f.operand, f.dims) for f in owners], y, tuple(contracted), tuple(others), sizes,
                           out.dtype)
    if found is None:
        return None
    eqns, c, labels = found
    p_free = [i for i in range(o.type.ndim) if i not in contracted]
    y_free = [j for j in range(y.type.ndim) if j not in others]
    shift = 0 if k == 0 else len(y_free)
    pos: dict = {axis: shift + j for j, axis in enumerate(p_free)}
    y_shift = len(p_free) if k == 0 else 0
    pos.update({("y", j): y_shift + i for i, j in enumerate(y_free)})
    moved, c, c_dims = sorted_onto(c, [pos[lab] for lab in labels])
    rest = [Factor(g.operand, tuple(pos[d] for d in g.dims)) for g in o.factors if g not in owners]
    return [*eqns, *moved, *build(Outer(o.coef, (*rest, Factor(c, c_dims)), out.type), out)]


def _sum(prim, ins, out: Var, defs):
    """``P1 +- P2`` of outer products that share every factor but one, on the same axes, is one outer
    product: the sum is taken on the small differing factors (``I (x) A + I (x) B = I (x) (A + B)``)."""
    ox = outer_factors(ins[0], defs)
    oy = outer_factors(ins[1], defs) if ox is not None else None  # (the second matters only with the first)
    if ox is None or oy is None or not (ox.all_broadcasts() and oy.all_broadcasts()) \
            or ox.type != out.type or oy.type != out.type:
        return None
    rest_y = list(oy.factors)
    rest_x = []
    for f in ox.factors:
        same = next((g for g in rest_y if g.operand is f.operand and g.dims == f.dims), None)
        if same is None:
            rest_x.append(f)
        else:
            rest_y.remove(same)
    common = [f for f in ox.factors if f not in rest_x]
    if not common or len(rest_x) != 1 or len(rest_y) != 1 or rest_x[0].dims != rest_y[0].dims:
        return None
    (fx,), (fy,) = rest_x, rest_y
    eqns, terms = [], []
    for f, coef in ((fx, ox.coef), (fy, oy.coef)):
        if coef != 1:
            scaled = Var(f.operand.type, "scaled")
            eqns.append(Eqn(ew.mul_p, (f.operand, Literal.of(coef, out.dtype)), (scaled,)))
            terms.append(scaled)
        else:
            terms.append(f.operand)
    total = Var(fx.operand.type, "summed")
    eqns.append(Eqn(prim, tuple(terms), (total,)))
    return [*eqns, *build(Outer(1, (*common, Factor(total, fx.dims)), out.type), out)]


def _transposed(o: Outer, perm: tuple[int, ...], out: Var, defs) -> list[Eqn]:
    inverse = {axis: i for i, axis in enumerate(perm)}
    eqns, factors = [], []
    for f in o.factors:
        new = [inverse[d] for d in f.dims]
        order = tuple(sorted(range(len(new)), key=new.__getitem__))
        operand = f.operand
        if order != tuple(range(len(new))):
            eqns.append(_transpose(f.operand, order, defs))
            operand = eqns[-1].outputs[0]
        factors.append(Factor(operand, tuple(sorted(new))))
    return [*eqns, *build(Outer(o.coef, tuple(factors), out.type), out)]


def _transpose(x: Var, order: tuple[int, ...], defs) -> Eqn:
    """``x`` transposed: an ``eye`` is its own transpose, and a contraction's result with its two
    groups of free axes swapped is the contraction with its operands swapped."""
    d = defs.get(id(x))
    out = Var(ArrayType(tuple(x.shape[j] for j in order), x.dtype), "transposed")
    if d is not None and d.prim is st.eye_p and d.params["k"] == 0 and x.shape[0] == x.shape[1]:
        return Eqn(st.eye_p, (), (Var(out.type, "eye"),), d.params)
    if d is not None and d.prim is con.dot_general_p and not d.params["dims"].lhs_batch:
        dims = d.params["dims"]
        n_lhs = d.inputs[0].type.ndim - len(dims.lhs_contract)
        if order == (*range(n_lhs, x.type.ndim), *range(n_lhs)):
            swapped = con.DotDims(dims.rhs_contract, dims.lhs_contract)
            return Eqn(con.dot_general_p, d.inputs[::-1], (Var(out.type, "contracted"),), Params({"dims": swapped}))
    return Eqn(st.transpose_p, (x,), (out,), Params({"permutation": order}))


def build(o: Outer, out: Var) -> list[Eqn]:
    """Equations computing ``o`` into ``out``: the scalar on the smallest factor, one broadcast per
    factor, their product."""
    eqns: list[Eqn] = []
    factors = list(o.factors)
    if o.coef != 1:
        k = min(range(len(factors)), key=lambda i: factors[i].operand.type.size)
        f = factors[k]
        scaled = Var(f.operand.type, "scaled")
        if o.coef == -1:
            eqns.append(Eqn(ew.neg_p, (f.operand,), (scaled,)))
        else:
            eqns.append(Eqn(ew.mul_p, (f.operand, Literal.of(o.coef, out.dtype)), (scaled,)))
        factors[k] = Factor(scaled, f.dims)
    product = None
    for i, f in enumerate(factors):
        last = i == len(factors) - 1
        b = out if last and len(factors) == 1 else Var(out.type)
        eqns.append(Eqn(st.broadcast_in_dim_p, (f.operand,), (b,),
                        Params({"shape": out.shape, "broadcast_dimensions": f.dims})))
        if product is not None:
            eqns.append(Eqn(ew.mul_p, (product, b), (out if last else Var(out.type),)))
            product = eqns[-1].outputs[0]
        else:
            product = b
    return eqns


# --- Kronecker structure of a Hessian -----------------------------------------------------------

@dataclass(frozen=True)
class FactorSpec:
    """One factor of a Kronecker term over input ``axes``: ``kind`` is ``"identity"``, ``"diagonal"``,
    ``"dense"``, ``"blocks"`` (block-diagonal over ``axes[0]``, dense blocks over the rest) or
    ``"scalar"`` (a multiplier, no axes); ``output``: which output of the factor program holds its
    value (None for an identity)."""

    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    kind: str
    output: int | None


def kronecker_factors(program: Program) -> tuple[Program, list[tuple[complex, tuple[FactorSpec, ...]]]]:
    """The factors of a Hessian program (one output of shape ``s + s``) as a sum of Kronecker terms:
    a program returning the factors' values, and per term its coefficient and factors. A term
    without that structure is one dense factor over all axes (the term itself)."""
    from pullback.opt.deltas import block_diagonal  # deltas builds on this module

    (h,) = program.outputs
    defs = {id(o): e for e in program.eqns for o in e.outputs}
    r = h.type.ndim // 2
    outputs: list = []
    index: dict[int, int] = {}

    def output(a) -> int:
        if id(a) not in index:
            index[id(a)] = len(outputs)
            outputs.append(a)
        return index[id(a)]

    top = defs.get(id(h)) if isinstance(h, Var) else None
    if top is not None and top.prim is st.transpose_p \
            and top.params["permutation"] == (*range(r, 2 * r), *range(r)):
        h = top.inputs[0]  # a Hessian is symmetric: its halves swapped, it is itself
    terms = []
    extra: list[Eqn] = []  # blocks put in order for the operator
    for sign, a in summands(h, defs, 1, 0):
        o = outer_factors(a, defs)
        specs = _term_specs(o, r, defs) if o is not None else None
        blocks = block_diagonal(a, defs, r) if specs is None and isinstance(a, Var) else None
        if blocks is not None:
            extra += blocks[0]
            coef, specs = sign, []
            for axes, kind, value in blocks[1]:
                if kind == "dense":  # its scalings join the coefficient; it may be an identity
                    c, value = _peel(value, defs)
                    coef *= c
                    axes, kind, value = _classified(axes, value, defs)
                specs.append((axes, kind, value))
        elif specs is not None:
            coef = sign * o.coef
        elif isinstance(a, Var):  # no structure: the term is one factor over all axes
            coef, specs = sign, [_classified(tuple(range(r)), a, defs)]
        else:  # a constant: a scalar times a matrix of ones
            coef, specs = sign * a.value, [(tuple(range(r)), "ones", None)]
        factors = tuple(FactorSpec(axes, tuple(h.shape[d] for d in axes), kind,
                                   None if value is None else output(value)) for axes, kind, value in specs)
        terms.append((coef, tuple(sorted(factors, key=lambda f: min(f.axes, default=-1)))))
    factor_program = dce(Program(program.inputs, program.eqns + tuple(extra), tuple(outputs), program.constvars,
                                 program.constvals, f"{program.name}_factors"))
    return factor_program, terms


def summands(a, defs, sign, depth) -> list[tuple[complex, object]]:
    """``a`` as ``sum(sign_t * term_t)``, through additions, subtractions, negations and scalings by
    literals (at most ``_MAX_FACTORS`` deep): the terms a Hessian's structure is read from."""
    d = defs.get(id(a)) if isinstance(a, Var) else None
    if d is not None and depth < _MAX_FACTORS and d.prim in (ew.add_p, ew.sub_p) \
            and all(x.type == a.type for x in d.inputs if isinstance(x, Var)):
        x, y = d.inputs
        return [*summands(x, defs, sign, depth + 1),
                *summands(y, defs, -sign if d.prim is ew.sub_p else sign, depth + 1)]
    if d is not None and depth < _MAX_FACTORS and d.prim is ew.neg_p:
        return summands(d.inputs[0], defs, -sign, depth + 1)
    if d is not None and depth < _MAX_FACTORS and d.prim is ew.mul_p:
        coef, b = _peel(a, defs)
        if b is not a:
            return summands(b, defs, sign * coef, depth + 1)
    return [(sign, a)]


def _term_specs(o: Outer, r: int, defs) -> list | None:
    """Each factor's (axes, kind, value) when every factor lies on a group of axes and on the same
    group of the second copy of the axes, the groups disjoint; else None."""
    specs, seen = [], set()
    for f in o.factors:
        axes = tuple(d for d in f.dims if d < r)
        if f.dims != (*axes, *(a + r for a in axes)) or seen & set(axes):
            return None
        seen |= set(axes)
        specs.append(_classified(axes, f.operand, defs))
    # axes no factor depends on: a matrix of ones
    return specs + [((axis,), "ones", None) for axis in sorted(set(range(r)) - seen)]


def _classified(axes: tuple[int, ...], operand: Var, defs) -> tuple:
    """(axes, kind, value) of a factor: a scalar, an identity, a diagonal (its vector) or dense."""
    d = defs.get(id(operand))
    if not axes:
        return axes, "scalar", operand
    if len(axes) == 1 and d is not None and d.prim is st.eye_p and d.params["k"] == 0:
        return axes, "identity", None
    if len(axes) == 1 and d is not None and d.prim is st.diag_embed_p and d.params["offset"] == 0 \
            and isinstance(d.inputs[0], Var) and d.inputs[0].type.ndim == 1:
        return axes, "diagonal", d.inputs[0]
    return axes, "dense", operand
