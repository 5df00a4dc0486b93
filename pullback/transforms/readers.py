"""Rewrites that are only worth making when a value has a single reader, which ``simplify`` (reading
upstream definitions alone) cannot know: the transpose of a product that nothing else reads is the
product taken the other way round, ``(a b)^T = b^T a^T``, so ``t = a @ b; u = t.T`` prints as one
product (a transposed view is free to make, but reads as a detour; a product read twice would be
computed twice).

Before::

    t: f64[3,2] = dot_general[((0,), (0,))] a b
    u: f64[2,3] = transpose[(1, 0)] t          ->    u = dot_general[((0,), (0,))] b a
"""

from __future__ import annotations

from collections import Counter

from pullback.ir.core import Eqn, Params, Program
from pullback.primitives import contractions as con
from pullback.primitives import structural as st
from pullback.transforms.dce import dce


def single_readers(program: Program) -> Program:
    """``program`` with the products read only by a transpose taken the other way round."""
    products = {id(e.outputs[0]): e for e in program.eqns if e.prim is con.dot_general_p}
    transposed = {id(e.inputs[0]) for e in program.eqns if e.prim is st.transpose_p and id(e.inputs[0]) in products}
    if not transposed:
        return program
    readers = Counter(id(a) for e in program.eqns for a in e.inputs if id(a) in transposed)
    readers.update(id(a) for a in program.outputs if id(a) in transposed)
    eqns = [_swapped_product(e, products, readers) if e.prim is st.transpose_p else e for e in program.eqns]
    if all(a is b for a, b in zip(eqns, program.eqns)):
        return program
    return dce(Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals,
                       program.name))


def _swapped_product(eqn: Eqn, products: dict[int, Eqn], readers: Counter) -> Eqn:
    """``transpose(a . b)`` as ``b . a`` when the transpose swaps the two operands' free axes."""
    d = products.get(id(eqn.inputs[0]))
    if d is None or readers[id(eqn.inputs[0])] != 1:
        return eqn
    dims: con.DotDims = d.params["dims"]
    a, b = d.inputs
    nb = len(dims.lhs_batch)
    nl = a.type.ndim - nb - len(dims.lhs_contract)
    nr = b.type.ndim - nb - len(dims.rhs_contract)
    if not nl or not nr:  # a vector's product: nothing to swap
        return eqn
    swap = (*range(nb), *range(nb + nl, nb + nl + nr), *range(nb, nb + nl))
    if eqn.params["permutation"] != swap:
        return eqn
    turned = con.DotDims(dims.rhs_contract, dims.lhs_contract, dims.rhs_batch, dims.lhs_batch)
    return Eqn(con.dot_general_p, (b, a), eqn.outputs, Params({**d.params, "dims": turned}), eqn.source)
