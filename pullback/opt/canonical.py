"""Canonical forms before structure (DESIGN, turn 3): every spelling of one factorisation is
brought to one form on the primal program, before derivatives are taken, so that the structure
passes meet one pattern whatever the user wrote.

- **The lower Cholesky factor.** pullback factorises A = L L^H only (``potrf``); the upper factor
  that SciPy's ``cholesky``/``cho_factor`` return by default is ``U = L^H``, a transpose. A triangular
  solve or product with a transposed operand, ``op(L^H)``, is the same call on ``L`` with the other
  triangle and the other ``trans`` (``op(L^H) = L^H`` when op is N, ``L`` when op is C), and
  ``diag(L^H) = conj(diag(L))``: so the upper spellings become the lower one, and the transpose dies.
  The rule holds for any matrix, not only Cholesky factors.
- **One factorisation per matrix.** ``potrf`` of A and of A^H (its two triangles, e.g.
  ``cholesky(A)`` beside ``solve(A, b, assume_a='pos')``, which reads the upper one) are one
  factorisation of a Hermitian A; their tangents agree already (both see dA's Hermitian part).
  A matrix that the program factorises with a checked ``potrf`` is Hermitian positive definite
  wherever the program runs past it (the user asserts the symmetry: LAPACK reads one triangle),
  so its LU needs no pivoting and ``getrf`` is not needed for its
  determinant: ``log|det A| = 2 sum log L_ii`` (``po_logdet``, differentiated as A^{-1} by potri, as
  ``lu_logabsdet`` is by getri), the sign is +1 (U_ii = L_ii^2 > 0, no swaps). A ``getrf`` whose
  every use is its determinant (``lu_logabsdet``, ``det``, the diagonal and pivots that slogdet's sign
  reads) is replaced so, and so is one whose other uses are ``inv`` of the same matrix: A^{-1} is then
  ``potri`` of the factor (``po_inv``, differentiated as ``inv``, -X dA X for all of dA); any other use
  (an LU solve, whose derivative sees dA's non-Hermitian part) keeps it.
- **The solve at the factors.** ``lu_solve(lu_factor(A), B)`` traces as a permutation and two
  triangular solves with getrf's factors, whose derivative would run through the factors (the LU
  notes' tangent map: four triangular solves and two products per use). Their value is A^{-1} B, so
  they become ``gesv`` of A at those factors, differentiated at the solve (one getrs, one rank-k
  product) as ``solve(A, B)`` is, and never raising (info 0: ``lu_solve`` of a singular A does not).
- **log |det A|** spelled ``log(abs(det(A)))`` is slogdet's ``lu_logabsdet`` of the same factors:
  no product of pivots that may overflow, and a derivative A^{-T} without det's singular branch.
"""

from __future__ import annotations

from functools import cached_property

from pullback.ad.cse import cse
from pullback.ad.dce import dce
from pullback.ir.core import Eqn, Literal, Params, Program, Var, output_types
from pullback.ir.types import ArrayType
from pullback.opt.census import primitives
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import matrix_functions as lx

Trans = la.Trans


def _swaps_last(eqn: Eqn | None) -> bool:
    if eqn is None or eqn.prim is not st.transpose_p:
        return False
    n = len(eqn.params["permutation"])
    return n >= 2 and eqn.params["permutation"] == (*range(n - 2), n - 1, n - 2)


class _Canon:
    REWRITES: dict = {}  # primitive -> its rewrites (below, once the methods exist)

    def __init__(self, program: Program):
        self.program = program
        self.defs: dict[int, Eqn] = {id(v): e for e in program.eqns for v in e.outputs}
        self.dropped: set[int] = set()
        self.returned = {id(a) for a in program.outputs if isinstance(a, Var)}
        self.adjoint_factored = False  # a potrf read an adjoint (its key is the matrix under it): see ``canonical``

    @cached_property
    def uses(self) -> dict[int, list[Eqn]]:
        """id of a var -> the equations reading it (asked for only where the program factorises with getrf)."""
        uses: dict[int, list[Eqn]] = {}
        for e in self.program.eqns:
            for a in e.inputs:
                if isinstance(a, Var):
                    uses.setdefault(id(a), []).append(e)
        return uses

    def adjoint_of(self, t) -> tuple[Var, bool] | None:
        """(x, conjugated) when ``t`` is ``x^T`` (False) or ``x^H`` (True; real: a transpose is both)."""
        d = self.defs.get(id(t)) if isinstance(t, Var) else None
        if _swaps_last(d):
            x = d.inputs[0]
            dx = self.defs.get(id(x)) if isinstance(x, Var) else None
            if dx is not None and dx.prim is ew.conj_p:
                return dx.inputs[0], True
            return x, x.dtype.kind != "c"
        if d is not None and d.prim is ew.conj_p:
            inner = self.defs.get(id(d.inputs[0])) if isinstance(d.inputs[0], Var) else None
            if _swaps_last(inner):
                return inner.inputs[0], True
        return None

    # --- the lower factor ------------------------------------------------------------------------
    def triangular(self, eqn: Eqn) -> Eqn | None:
        """``op(X^T)`` or ``op(X^H)`` as ``op'(X)`` with the other triangle."""
        found = self.adjoint_of(eqn.inputs[0])
        if found is None:
            return None
        x, conjugated = found
        trans, real = eqn.params["trans"], x.dtype.kind != "c"
        if real:
            new = Trans.T if trans == Trans.N else Trans.N
        elif conjugated:  # op(X^H): N -> C, C -> N; T would be conj(X)
            new = {Trans.N: Trans.C, Trans.C: Trans.N}.get(trans)
        else:  # op(X^T): N -> T, T -> N; C would be conj(X)
            new = {Trans.N: Trans.T, Trans.T: Trans.N}.get(trans)
        if new is None:
            return None
        params = Params({**eqn.params, "lower": not eqn.params["lower"], "trans": new})
        return Eqn(eqn.prim, (x, *eqn.inputs[1:]), eqn.outputs, params, eqn.source)

    def diagonal(self, eqn: Eqn) -> list[Eqn] | None:
        """``diag(X^T) = diag(X)``, ``diag(X^H) = conj(diag(X))`` (``diag(X)`` for a Cholesky factor: real)."""
        if eqn.params["offset"] != 0:
            return None
        found = self.adjoint_of(eqn.inputs[0])
        if found is None:
            return None
        x, conjugated = found
        (out,) = eqn.outputs
        factor = self.defs.get(id(x))
        real_diagonal = factor is not None and factor.prim is la.potrf_p and factor.outputs[0] is x  # LAPACK's
        if not conjugated or x.dtype.kind != "c" or real_diagonal:
            return [Eqn(st.diagonal_p, (x,), (out,), eqn.params, eqn.source)]
        d = Var(out.type, "diagonal")
        return [Eqn(st.diagonal_p, (x,), (d,), eqn.params, eqn.source),
                Eqn(ew.conj_p, (d,), (out,), Params(), eqn.source)]

    # --- the solve at the factors ----------------------------------------------------------------
    def lu_solve(self, eqn: Eqn) -> Eqn | None:
        """``U^{-1} (L^{-1} (P B))`` with getrf's factors of a square A (one matrix) as ``gesv``."""
        p = eqn.params
        if not (p["left"] and not p["lower"] and p["trans"] == Trans.N and not p["unit_diagonal"]) or p.get(
                "alpha", 1.0) != 1.0:
            return None
        lu, y = eqn.inputs
        g, inner = self.defs.get(id(lu)), self.defs.get(id(y))
        if g is None or g.prim is not la.getrf_p or g.outputs[0] is not lu or lu.type.ndim != 2 or inner is None:
            return None
        q = inner.params
        unit_lower = q["left"] and q["lower"] and q["trans"] == Trans.N and q["unit_diagonal"]
        if inner.prim is not la.trsm_p or inner.inputs[0] is not lu or not unit_lower or q.get("alpha", 1.0) != 1.0:
            return None
        permuted = self.defs.get(id(inner.inputs[1]))
        if permuted is None or permuted.prim is not la.permute_p or permuted.inputs[1] is not g.outputs[2]:
            return None
        a, piv, info = g.inputs[0], g.outputs[1], g.outputs[3]
        return Eqn(fa.gesv_p, (a, lu, piv, Literal.of(0, info.dtype), permuted.inputs[0]), eqn.outputs, Params(),
                   eqn.source)

    def log_abs_det(self, eqn: Eqn) -> Eqn | None:
        """``log(abs(det(A)))`` as ``lu_logabsdet`` (real A: complex abs of det is another story)."""
        ab = self.defs.get(id(eqn.inputs[0])) if isinstance(eqn.inputs[0], Var) else None
        if ab is None or ab.prim is not ew.abs_p or not isinstance(ab.inputs[0], Var):
            return None
        d = self.defs.get(id(ab.inputs[0]))
        if d is None or d.prim is not lx.det_p or d.inputs[0].dtype.kind == "c":
            return None
        a, lu, piv = d.inputs
        return Eqn(fa.lu_logabsdet_p, (a, lu, piv), eqn.outputs, Params(), eqn.source)

    # --- one factorisation -----------------------------------------------------------------------
    def cholesky_of(self) -> dict[int, Eqn]:
        """Matrix (by id) -> a checked potrf of it (of A, or of A^H: the other triangle)."""
        found: dict[int, Eqn] = {}
        for e in self.program.eqns:
            if e.prim is not la.potrf_p or not e.params["check"]:
                continue
            a = e.inputs[0]
            adj = self.adjoint_of(a)
            if adj is not None and adj[1]:
                found.setdefault(id(adj[0]), e)
            found.setdefault(id(a), e)
        return found

    def determinant_only(self, getrf: Eqn) -> bool:
        """Every use of getrf's outputs is one that a pivot-free LU of a positive definite A answers."""
        packed, piv, perm, info = getrf.outputs
        if any(id(v) in self.returned for v in getrf.outputs):
            return False
        for e in self.uses.get(id(packed), ()):
            if e.prim is st.diagonal_p and e.params["offset"] == 0:
                continue
            if e.prim is fa.lu_logabsdet_p and e.inputs[0] is getrf.inputs[0]:
                continue
            if e.prim is lx.det_p and e.inputs[0] is getrf.inputs[0]:
                continue
            if e.prim is fa.getri_at_p and e.inputs[0] is getrf.inputs[0]:
                continue
            return False
        return True

    def run(self) -> Program:
        chol = None
        eqns: list[Eqn] = []
        replace: dict[int, object] = {}
        factored: dict[tuple, Eqn] = {}  # (matrix, params) -> its first potrf, of either triangle
        changed = False
        rewrites, dropped, keep = self.REWRITES, self.dropped, eqns.append
        for eqn in self.program.eqns:
            prim = eqn.prim
            if prim not in rewrites and prim is not la.potrf_p and prim is not la.getrf_p:  # most: nothing to do
                if not dropped or id(eqn) not in dropped:
                    keep(eqn)
                continue
            if id(eqn) in dropped:
                continue
            new = next((r for rule in rewrites[prim] if (r := rule(self, eqn)) is not None), None) if prim in rewrites \
                else None
            if new is not None:
                eqns.extend(new if isinstance(new, list) else [new])
                changed = True
                continue
            if eqn.prim is la.potrf_p:
                base = self.adjoint_of(eqn.inputs[0])
                key = id(base[0]) if base is not None and base[1] else id(eqn.inputs[0])
                self.adjoint_factored |= key != id(eqn.inputs[0])
                first = factored.setdefault((key, eqn.params), eqn)
                if first is not eqn:  # A's other triangle, factorised again
                    replace.update(zip(map(id, eqn.outputs), first.outputs))
                    changed = True
                    continue
            elif eqn.prim is la.getrf_p:
                chol = self.cholesky_of() if chol is None else chol
                potrf = chol.get(id(eqn.inputs[0]))
                if potrf is not None and self.determinant_only(eqn):
                    eqns.extend(self.merged(eqn, potrf, replace))
                    changed = True
                    continue
            eqns.append(eqn)
        if not changed:
            return self.program
        out = _substituted(Program(self.program.inputs, tuple(eqns), self.program.outputs, self.program.constvars,
                                   self.program.constvals, self.program.name), replace)
        return dce(cse(out))

    def merged(self, getrf: Eqn, potrf: Eqn, replace: dict[int, object]) -> list[Eqn]:
        """The potrf (again: CSE merges it with the program's own, which may come later) and, in place
        of getrf's outputs, the pivot-free LU's: U_ii = L_ii^2, no swaps, info 0; logdet from L."""
        a = getrf.inputs[0]
        src = getrf.source
        out: list[Eqn] = []
        factor_in = potrf.inputs[0]
        dp = self.defs.get(id(factor_in)) if isinstance(factor_in, Var) else None
        chain: list[Eqn] = []
        while dp is not None and factor_in is not a and dp.prim in (st.transpose_p, ew.conj_p):
            chain.append(dp)  # the adjoint of A that potrf reads, rebuilt here
            factor_in = dp.inputs[0]
            dp = self.defs.get(id(factor_in)) if isinstance(factor_in, Var) else None
        out.extend(reversed(chain))
        l, info = (Var(v.type, v.hint) for v in potrf.outputs)
        out.append(Eqn(la.potrf_p, potrf.inputs, (l, info), potrf.params, potrf.source))
        packed, piv, perm, linfo = getrf.outputs
        d = Var(ArrayType(l.shape[:-1], l.dtype), "diagonal")
        out.append(Eqn(st.diagonal_p, (l,), (d,), Params({"offset": 0}), src))
        u = Var(d.type, "pivots")
        out.append(Eqn(ew.mul_p, (d, d), (u,), Params(), src))
        for e in self.uses.get(id(packed), ()):
            self.dropped.add(id(e))  # its output is replaced by what follows
            if e.prim is st.diagonal_p:
                replace[id(e.outputs[0])] = u
            elif e.prim is fa.lu_logabsdet_p:
                replace[id(e.outputs[0])] = self.logdet(a, l, out, src)
            elif e.prim is fa.getri_at_p:  # inv(A): potri of the factor (potrf checked A already)
                inverse = Var(e.outputs[0].type, e.outputs[0].hint)
                out.append(Eqn(fa.po_inv_p, (a, l), (inverse,), Params(), e.source))
                replace[id(e.outputs[0])] = inverse
            else:  # det
                ld = self.logdet(a, l, out, src)
                value = Var(ld.type, "det")
                out.append(Eqn(ew.exp_p, (ld,), (value,), Params(), src))
                if value.dtype != e.outputs[0].dtype:
                    conv = Var(e.outputs[0].type, "det")
                    out.append(Eqn(st.convert_element_type_p, (value,), (conv,),
                                   Params({"new_dtype": e.outputs[0].dtype}), src))
                    value = conv
                replace[id(e.outputs[0])] = value
        for v in (piv, perm):
            index = Var(v.type, "index")
            out.append(Eqn(st.iota_p, (), (index,), Params({"dtype": v.dtype, "shape": v.shape,
                                                           "dimension": v.type.ndim - 1}), src))
            replace[id(v)] = index
        zero = Var(linfo.type, "info")
        out.append(Eqn(st.broadcast_in_dim_p, (Literal.of(0, linfo.dtype),), (zero,),
                       Params({"shape": linfo.shape, "broadcast_dimensions": ()}), src))
        replace[id(linfo)] = zero
        return out

    @staticmethod
    def logdet(a, l: Var, out: list[Eqn], src) -> Var:
        (t,) = output_types(fa.po_logdet_p, (a, l), {})
        v = Var(t, "logdet")
        out.append(Eqn(fa.po_logdet_p, (a, l), (v,), Params(), src))
        return v


# The rewrites of one equation, by its primitive, tried in order: each returns the equation(s) that
# replace it, or None where its pattern does not hold.
_Canon.REWRITES = {
    la.trsm_p: (_Canon.lu_solve, _Canon.triangular), la.trmm_p: (_Canon.triangular,),
    ew.log_p: (_Canon.log_abs_det,), st.diagonal_p: (_Canon.diagonal,),
}


def _substituted(program: Program, replace: dict[int, object]) -> Program:
    from pullback.ad.substitute import substitute

    return substitute(program, replace)


# without one of these, ``canonical`` returns the program at once (counted in C: no Python call per equation)
_TRIGGERS = frozenset((la.trsm_p, la.trmm_p, st.diagonal_p, la.getrf_p, ew.log_p))


def canonical(program: Program) -> Program:
    """``program`` with the factorisations' spellings brought to one form (the module docstring);
    ``program`` itself when there is nothing to bring."""
    prims = set(primitives(program))
    if _TRIGGERS.isdisjoint(prims):
        return program
    if la.getrf_p not in prims:
        # Without getrf, CSE changes no rewrite's match: a rule reads the primitives and params of the
        # equations making its operands, which CSE keeps (it only swaps a value for an equal one's), and of
        # two potrfs that one factorisation serves, CSE merges those reading one matrix itself; only a potrf
        # of an adjoint is keyed by a matrix under it, which CSE may make one with another. So where the
        # rules change nothing on the program as it is, CSE's copy (a pass over every equation) is not needed.
        canon = _Canon(program)
        if canon.run() is program and not canon.adjoint_factored:
            return program
    merged = cse(program)
    out = _Canon(merged).run()
    return program if out is merged else out

