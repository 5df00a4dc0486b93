"""Rewrites that are only worth making when a value has a single reader, which ``simplify`` (reading
upstream definitions alone) cannot know:

- the transpose of a product that nothing else reads is the product taken the other way round,
  ``(a b)^T = b^T a^T``, so ``t = a @ b; u = t.T`` prints as one product (a transposed view is free to
  make, but reads as a detour; a product read twice would be computed twice);
- a real scalar literal times (or the negation of) a triangular solve or product that nothing else
  reads, or such a solve or product of a scaled operand that nothing else reads, is one call with
  the scalar in BLAS's alpha (``dtrsm(0.5, L, x)``): no pass over the array, no temporary. (Simplify
  moves scalars out of solves, so that solves of ``b`` and of ``0.5 b`` share one; those it shared
  have several readers here and keep their scaling.);
- a product of a matrix with a vector made a column (or a row), read only by the reshape that drops
  the unit axis again, is the product with the vector itself: ``X @ y`` in one line, not
  ``c = y.reshape(n, 1); p = X @ c; p.reshape(m)`` (the transpose of a matrix-vector product makes
  that detour, as the products with y in the GP gradient's rank-1 update).

Before::

    t: f64[3,2] = dot_general[((0,), (0,))] a b
    u: f64[2,3] = transpose[(1, 0)] t          ->    u = dot_general[((0,), (0,))] b a

    s: f64[3,3] = trsm[left=True, ...] l x
    v: f64[3,3] = mul s 0.5                    ->    v = trsm[left=True, ..., alpha=0.5] l x
"""

from __future__ import annotations

from collections import Counter
from operator import is_

from pullback.ad.dce import dce
from pullback.ir.core import Eqn, Literal, Params, Program, Var
from pullback.opt import census
from pullback.opt.census import primitives
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st
from pullback.primitives.linalg import factorizations as la

# primitives with BLAS's alpha, linear in this operand
_ALPHA = {la.trsm_p: 1, la.trmm_p: 1}


def single_readers(program: Program) -> Program:
    """``program`` with the products read only by a transpose taken the other way round, and the
    scalings of triangular solves and products read by nothing else folded into their alpha."""
    vectors = _vector_products(program)
    swapped = _swapped(vectors, vectors is not program)
    return _alpha(swapped, swapped is not program)


def _without(program: Program, eqns: list[Eqn], killed: set[int], dead_free: bool) -> Program:
    """``program`` with ``eqns``, less the equations (by id) that the rewrites left unread: DCE, which
    finds just those where ``program`` held no dead code (``dead_free``; the rewritten equations read
    what the killed ones read), so that only the first pass that rewrites anything runs DCE."""
    if dead_free:
        return Program(program.inputs, tuple(e for e in eqns if id(e) not in killed), program.outputs,
                       program.constvars, program.constvals, program.name)
    return dce(Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals,
                       program.name))


def _vector_products(program: Program) -> Program:
    """``program`` with each ``reshape(X . reshape(v))`` described above the product with ``v``."""
    columns = {id(e.outputs[0]): e for e in program.eqns if e.prim is st.reshape_p and e.inputs[0].type.ndim == 1
               and e.outputs[0].type.ndim == 2 and 1 in e.outputs[0].shape and isinstance(e.inputs[0], Var)}
    if not columns:
        return program
    products = {id(e.outputs[0]): e for e in program.eqns if e.prim is con.dot_general_p
                and not columns.keys().isdisjoint(map(id, e.inputs))}
    if not products:
        return program
    readers = census.readers(program)
    eqns = [_vector_product(e, products, columns, readers) if e.prim is st.reshape_p else e for e in program.eqns]
    if all(map(is_, eqns, program.eqns)):
        return program
    return dce(Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals,
                       program.name))


def _vector_product(eqn: Eqn, products: dict[int, Eqn], columns: dict[int, Eqn], readers: Counter) -> Eqn:
    """``reshape(a . c)``, c = ``reshape(v)`` a column or row of a vector v contracted on its long axis and
    the product read only here, as ``a . v`` when the reshape drops just c's unit axis."""
    d = products.get(id(eqn.inputs[0]))
    if d is None or readers[id(eqn.inputs[0])] != 1:
        return eqn
    dims: con.DotDims = d.params["dims"]
    if dims.lhs_batch or len(dims.lhs_contract) != 1:
        return eqn
    for k in (0, 1):
        c = columns.get(id(d.inputs[k]))
        if c is None or id(d.inputs[1 - k]) in columns:
            continue
        axis = (dims.lhs_contract if k == 0 else dims.rhs_contract)[0]
        unit = 1 - axis
        if c.outputs[0].shape[unit] != 1 or c.outputs[0].shape[axis] == 1:
            continue
        other = d.inputs[1 - k]
        free = [n for i, n in enumerate(other.shape) if i not in (dims.rhs_contract if k == 0 else dims.lhs_contract)]
        if tuple(free) != eqn.outputs[0].shape:
            continue
        turned = con.DotDims((0,), dims.rhs_contract) if k == 0 else con.DotDims(dims.lhs_contract, (0,))
        operands = (c.inputs[0], other) if k == 0 else (other, c.inputs[0])
        return Eqn(con.dot_general_p, operands, eqn.outputs, Params({**d.params, "dims": turned}), eqn.source)
    return eqn


def _swapped(program: Program, dead_free: bool = False) -> Program:
    """``program`` with the products read only by a transpose taken the other way round (``dead_free``:
    see ``_without``)."""
    products = {id(e.outputs[0]): e for e in program.eqns if e.prim is con.dot_general_p}
    transposed = {id(e.inputs[0]) for e in program.eqns if e.prim is st.transpose_p and id(e.inputs[0]) in products}
    if not transposed:
        return program
    readers = census.readers(program)
    eqns = [_swapped_product(e, products, readers) if e.prim is st.transpose_p else e for e in program.eqns]
    if all(map(is_, eqns, program.eqns)):
        return program
    # a product read only by the transpose now read the other way round is unread
    killed = {id(products[id(old.inputs[0])]) for old, new in zip(program.eqns, eqns) if new is not old}
    return _without(program, eqns, killed, dead_free)


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


def _scaling(eqn: Eqn | None) -> tuple[Var, float] | None:
    """``(x, c)`` when ``eqn`` is ``x * c`` (or ``c * x``) for a real scalar literal ``c``, or ``-x`` (c = -1),
    ``x`` as large as the result."""
    if eqn is None or eqn.outputs[0].dtype.kind not in "fc":
        return None
    out = eqn.outputs[0]
    if eqn.prim is ew.neg_p:
        x, c = eqn.inputs[0], -1.0
    elif eqn.prim is ew.mul_p:
        x, y = eqn.inputs
        x, y = (y, x) if isinstance(x, Literal) else (x, y)
        if not isinstance(y, Literal) or isinstance(y.value, bool) or complex(y.value).imag != 0:
            return None
        c = float(complex(y.value).real)
    else:
        return None
    return (x, c) if isinstance(x, Var) and x.type == out.type else None


def _alpha(program: Program, dead_free: bool = False) -> Program:
    """Scalings of triangular solves and products (their results, or their right-hand sides) folded into
    BLAS's alpha where the scaled or unscaled intermediate has no other reader (``dead_free``: see
    ``_without``)."""
    if _ALPHA.keys().isdisjoint(primitives(program)):
        return program
    readers = census.readers(program)
    # the definitions looked up: the right-hand sides of solves and products, and what they define
    rhs = {id(e.inputs[_ALPHA[e.prim]]) for e in program.eqns if e.prim in _ALPHA}
    defs: dict[int, Eqn] = {}
    eqns = []
    killed: set[int] = set()  # the scalings and the solves folded into another equation: unread now
    for eqn in program.eqns:
        new = eqn
        prim = eqn.prim
        if prim in _ALPHA:  # op(x c): alpha c
            k = _ALPHA[prim]
            b = eqn.inputs[k]
            scaled = _scaling(defs.get(id(b))) if isinstance(b, Var) and readers[id(b)] == 1 else None
            if scaled is not None:
                x, c = scaled
                new = _scaled(eqn, tuple(x if j == k else a for j, a in enumerate(eqn.inputs)), eqn.outputs, c,
                              eqn.source)
                killed.add(id(defs[id(b)]))
        elif (prim is ew.mul_p or prim is ew.neg_p) and not defs.keys().isdisjoint(map(id, eqn.inputs)):
            scaled = _scaling(eqn)  # op(x) c: alpha c
            if scaled is not None:
                y, c = scaled
                d = defs.get(id(y))
                if d is not None and d.prim in _ALPHA and readers[id(y)] == 1:
                    new = _scaled(d, d.inputs, eqn.outputs, c, d.source)
                    killed.add(id(d))
        eqns.append(new)
        if len(new.outputs) == 1 and (new.prim in _ALPHA or id(new.outputs[0]) in rhs):
            defs[id(new.outputs[0])] = new
    if all(map(is_, eqns, program.eqns)):
        return program
    return _without(program, eqns, killed, dead_free)


def _scaled(eqn: Eqn, inputs, outputs, c: float, source) -> Eqn:
    """``eqn``'s primitive on ``inputs`` into ``outputs``, its alpha times ``c`` (absent when 1)."""
    params = dict(eqn.params)
    alpha = params.pop("alpha", 1.0) * c
    if alpha != 1.0:
        params["alpha"] = alpha
    return Eqn(eqn.prim, inputs, outputs, Params(params), source)
