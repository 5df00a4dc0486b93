"""Contractions of an outer product over several of its factors, as a small einsum.

``outer._contraction`` contracts an outer product ``P = c * bcast(f_1) * ... * bcast(f_m)`` when
the contracted axes belong to one factor. In a Hessian they often belong to several: the masked
matrix-factorisation Hessian ``sum(M * (U V^T - Y)**2)`` in U reaches

    P[i, a, j, l] = 2 delta_ij V[l, a] M[j, l]        (eye on (0, 2), V^T on (1, 3), M on (2, 3))
    H = P . V                                          (contracting l)

whose dense form is an (n, k, n, m) tensor. Here the factors that own a contracted axis and the
other operand are contracted alone, pairwise, in the order that keeps each intermediate smallest
(a greedy einsum path): ``W[l, a, b] = V[l, a] V[l, b]`` (m k^2), then ``C = M . W`` (one gemm,
n x k^2); the factors that own no contracted axis (the delta) stay broadcasts of the result, so
``H = 2 delta_ij C[j, a, b]``: block-diagonal, never dense until it is materialised
(``deltas.materialise``) or handed over compressed (``outer.kronecker_factors``).
"""

from __future__ import annotations

from itertools import combinations

from pullback.ir.core import Eqn, Params, Var
from pullback.ir.types import ArrayType
from pullback.primitives import contractions as con
from pullback.primitives import structural as st

_MAX_OPERANDS = 6  # factors owning the contracted axes, and the other operand


class _Term:
    """An operand whose axes carry labels (hashable), in order."""

    __slots__ = ("var", "labels")

    def __init__(self, var: Var, labels: tuple):
        self.var, self.labels = var, labels


def contract_group(owners: list[tuple[Var, tuple[int, ...]]], y: Var, p_contract: tuple[int, ...],
                   y_contract: tuple[int, ...], sizes: dict, dtype) -> tuple[list[Eqn], Var, tuple] | None:
    """``sum over p_contract of prod(owners) * y``: the owners are (operand, axes of P), ``y``'s axes
    ``y_contract`` meet P's ``p_contract``; ``y``'s free axis j is labelled ``("y", j)``. Returns the
    equations, the result and its labels (P's free axes of the owners, and ``y``'s free axes), or None
    when the group cannot be contracted pairwise (a label only one operand has and nobody reads)."""
    if len(owners) + 1 > _MAX_OPERANDS:
        return None
    meet = dict(zip(y_contract, p_contract))
    y_labels = tuple(meet.get(j, ("y", j)) for j in range(y.type.ndim))
    terms = [_Term(v, dims) for v, dims in owners] + [_Term(y, y_labels)]
    target = {lab for t in terms for lab in t.labels} - set(p_contract)
    eqns: list[Eqn] = []
    while len(terms) > 1:
        best = None
        for i, j in combinations(range(len(terms)), 2):
            others = {lab for k, t in enumerate(terms) if k not in (i, j) for lab in t.labels}
            plan = _pair(terms[i], terms[j], target | others, sizes)
            if plan is not None and (best is None or plan[0] < best[0]):
                best = (*plan, i, j)
        if best is None:
            return None
        _, dims, labels, i, j = best
        a, b = terms[i], terms[j]
        out = Var(ArrayType(tuple(sizes[lab] for lab in labels), dtype), "contracted")
        eqns.append(Eqn(con.dot_general_p, (a.var, b.var), (out,), Params({"dims": dims})))
        terms = [t for k, t in enumerate(terms) if k not in (i, j)] + [_Term(out, labels)]
    (last,) = terms
    return eqns, last.var, last.labels


def _pair(a: _Term, b: _Term, keep: set, sizes: dict):
    """(size of the result, DotDims, result labels) of contracting ``a`` with ``b``: shared labels
    still needed are batch axes, the others are summed; None if a label would need a reduction alone."""
    if any(lab not in keep and lab not in b.labels for lab in a.labels) or \
            any(lab not in keep and lab not in a.labels for lab in b.labels):
        return None
    shared = [lab for lab in a.labels if lab in b.labels]
    batch = [lab for lab in shared if lab in keep]
    summed = [lab for lab in shared if lab not in keep]
    dims = con.DotDims(tuple(a.labels.index(lab) for lab in summed), tuple(b.labels.index(lab) for lab in summed),
                       tuple(a.labels.index(lab) for lab in batch), tuple(b.labels.index(lab) for lab in batch))
    labels = (*batch, *(lab for lab in a.labels if lab not in shared), *(lab for lab in b.labels if lab not in shared))
    size = 1
    for lab in labels:
        size *= sizes[lab]
    return size, dims, labels


def sorted_onto(var: Var, positions: list[int]) -> tuple[list[Eqn], Var, tuple[int, ...]]:
    """``var`` whose axis i lands on output axis ``positions[i]``, transposed so that its axes land in
    increasing order (how a broadcast factor is kept)."""
    order = tuple(sorted(range(len(positions)), key=positions.__getitem__))
    dims = tuple(positions[i] for i in order)
    if order == tuple(range(len(order))):
        return [], var, dims
    out = Var(ArrayType(tuple(var.shape[i] for i in order), var.dtype), "transposed")
    return [Eqn(st.transpose_p, (var,), (out,), Params({"permutation": order}))], out, dims
