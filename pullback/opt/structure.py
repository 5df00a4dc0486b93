"""Structure-aware simplification: diagonal, identity and rank-1 structure kept through the
linear algebra of a (transposed) program, so that cubic work on them becomes quadratic.

Each square matrix may get *forms*, sums of structured terms (``Term``: ``c I``, ``diag(d)``,
an outer product ``c u v^T`` of column vectors, or a dense matrix pullback computed here):

- ``exact``: the matrix itself;
- ``lower``: a matrix that agrees with it on and below the diagonal (what ``tril`` and
  Cholesky's Phi read);
- ``herm``: the Hermitian part ``X + X^H``.

They follow from a few rules, each an identity that holds for any matrix it meets:

- outer products: ``op(T) (u v^T) = (op(T) u) v^T``, a triangular product or solve of a vector
  (``T (T^{-1} u) = u`` and ``T^{-1} (T u) = u`` cancel), and ``(u v^T)^T = v u^T``;
- masks: for ``op(T)`` upper triangular, ``tril(op(T) X) = tril(op(T) tril(X))`` (and
  ``tril(X op(T))`` likewise), so a lower form passes through it; ``tril(op(T) diag(d))`` is
  ``diag(diag(op(T)) d)``, the identity when ``d = 1 / diag(T)``;
- Cholesky's Phi, ``tril(Y) - diag(Y) / 2``, has Hermitian part ``Y``'s lower form when that
  form is Hermitian (the ``copyltu`` of the paper);
- the sandwich ``L^{-H} X L^{-1}`` of a Hermitian part: ``L^{-H} L^{-1}`` is ``potri(L)`` and
  ``L^{-H} (u v^T) L^{-1} = (L^{-H} u) (L^{-T} v)^T``;
- sums, negations and scalings distribute; a vector scaled by a literal keeps its scale apart
  (``x`` and ``0.5 x`` are one vector), so equal outer products merge into one rank-1 term.

An equation that does cubic work (a triangular product or solve of a matrix, a symmetrisation)
whose exact form is cheap is replaced by that form, printed as scalings, ``potri``, outer
products and diagonal updates. For the Gaussian likelihood ``0.5 |L^{-1} y|^2 + sum log diag L``
the Cholesky gradient ``L^{-H} Phi(L^H Lbar) L^{-1}``, with ``Lbar = diag(1/L_ii) - tril(a z^T)``,
becomes ``(potri(L) - a a^T) / 2``: the expert's recipe.

Outer products are also read where they are spelled ``u[:, None] * v[None, :]`` or made by ``ger``,
and a traced scalar times a form lands on its vectors; a returned sum or transpose with a rank-1
term prints from its form (softmax's Hessian: one outer product, then one diagonal update).
``diagonal_plus_low_rank`` reads a Hessian's output as ``diag(d) + U V^T`` from these forms, for
``hessian(f, compressed=True)``.

Before::

    t_13: f64[n,n] = dot_general[((1,), (1,))] t_12 t_2      # -a z^T
    L_bar = add_diagonal (tril t_13) t_9                      # t_9 = 1 / diag(L)
    t_15 = trmm[left, lower, trans=1] L L_bar
    t_19 = add_diagonal (tril t_15) (-0.5 diagonal t_15)
    t_21 = trsm[left, lower, trans=1] L (trsm[right, lower] L t_19)
    K_bar = add_transpose (mul t_21 0.5)

After::

    a = trsm[left, lower, trans=1] L t_2
    K_bar = add (mul (potri L) 0.5) (dot_general (mul a -0.5) a)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pullback.ad.dce import dce
from pullback.ad.substitute import substitute
from pullback.ir.core import Eqn, Literal, Params, Program, Var, output_types
from pullback.ir.types import ArrayType
from pullback.opt import census
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import rank_update as rk

Trans = la.Trans
MAX_TERMS = 8  # terms of a form, at most
_OUTER = con.DotDims((1,), (1,))


@dataclass(frozen=True)
class Term:
    """``coef`` times: the identity (``kind="eye"``), ``diag(a)`` (``"diag"``, ``a`` a vector),
    ``a b^T`` (``"outer"``, ``a`` and ``b`` column vectors (n, 1)) or ``a`` (``"dense"``)."""

    coef: complex
    kind: str
    a: Var | None = None
    b: Var | None = None

    def scaled(self, c) -> Term:
        return Term(self.coef * c, self.kind, self.a, self.b)


Form = tuple[Term, ...]


def _scale(form: Form | None, c) -> Form | None:
    return None if form is None else tuple(t.scaled(c) for t in form)


def _plus(*forms: Form | None) -> Form | None:
    return None if any(f is None for f in forms) else _merge(sum(forms, ()))


def _merge(terms) -> Form:
    """Equal terms (same kind and operands) added into one."""
    out: dict[tuple, Term] = {}
    for t in terms:
        key = (t.kind, id(t.a), id(t.b))
        old = out.get(key)
        out[key] = t if old is None else Term(old.coef + t.coef, t.kind, t.a, t.b)
    return tuple(t for t in out.values() if t.coef != 0)


def _key(a):
    return ("lit", type(a.value), a.value, a.dtype) if isinstance(a, Literal) else id(a)


def _scalar(a) -> complex | None:
    if isinstance(a, Literal) and not isinstance(a.value, bool) and a.type.shape == ():
        return a.value
    return None


def _same_trans(a: Trans, b: Trans, dtype) -> bool:
    """Equal operations: ``trans=T`` and ``C`` are one for real matrices."""
    real = np.dtype(dtype).kind != "c"
    return a == b or (real and Trans.N not in (a, b))


def _vector_reshape(d: Eqn | None) -> bool:
    """A reshape, or a transpose that only moves unit axes (of a row or column vector)."""
    return d is not None and (d.prim is st.reshape_p or (
        d.prim is st.transpose_p and sum(k > 1 for k in d.inputs[0].shape) <= 1))


def _op_upper(lower: bool, trans: Trans) -> bool:
    return lower != (trans == Trans.N)


class _Pass:
    def __init__(self, program: Program):
        self.program = program
        self.defs: dict[int, Eqn] = {}
        self.seen: dict[tuple, Var] | None = None  # made at the first ``find`` (a vector program never asks)
        self.eqns: list[Eqn] = []
        self.replace: dict[int, Var] = {}
        self.exact: dict[int, Form] = {}
        self.lower: dict[int, Form] = {}
        self.herm: dict[int, Form] = {}
        self.canon_memo: dict[int, tuple[complex, Var]] = {}
        self.cancelled: set[int] = set()
        self.source = None
        self.changed = False

    # --- building ---------------------------------------------------------------------------
    def _record(self, eqn: Eqn) -> None:
        self.eqns.append(eqn)
        outs = eqn.outputs
        for v in outs:
            self.defs[id(v)] = eqn
        if self.seen is not None and len(outs) == 1:  # ``_see``, inlined: one call fewer per equation
            ins = eqn.inputs
            key = tuple(map(id, ins)) if Literal not in map(type, ins) else tuple(map(_key, ins))
            self.seen.setdefault((eqn.prim, key, eqn.params), outs[0])

    def _see(self, eqn: Eqn) -> None:
        if len(eqn.outputs) == 1:
            ins = eqn.inputs  # (vars by id, counted in C; literals by value where there is one)
            key = tuple(map(id, ins)) if Literal not in map(type, ins) else tuple(map(_key, ins))
            self.seen.setdefault((eqn.prim, key, eqn.params), eqn.outputs[0])

    def find(self, prim, ins, **params) -> Var | None:
        if self.seen is None:  # the equations recorded so far, in order: as if seen as they came
            self.seen = {}
            for eqn in self.eqns:
                self._see(eqn)
        return self.seen.get((prim, tuple(map(_key, ins)), Params(params)))

    def emit(self, prim, *ins, hint: str = "", **params) -> Var:
        found = self.find(prim, ins, **params)
        if found is not None:
            return found
        (t,) = output_types(prim, ins, params)
        out = Var(t, hint)
        self._record(Eqn(prim, ins, (out,), Params(params), self.source))
        return out

    def lit(self, value, dtype) -> Literal:
        return Literal.of(value, dtype)

    # --- vectors -------------------------------------------------------------------------------
    def canon(self, v: Var) -> tuple[complex, Var]:
        """(c, w) with v = c w: literal scalings, negations, reshapes and linear solves of a
        scaled vector looked through, so equal vectors up to a scale share ``w``."""
        if not isinstance(v, Var):
            return 1, v
        memo = self.canon_memo.get(id(v))
        if memo is not None:
            return memo
        result = self._canon(v)
        self.canon_memo[id(v)] = result
        return result

    def _canon(self, v: Var) -> tuple[complex, Var]:
        d = self.defs.get(id(v))
        if d is None:
            return 1, v
        if d.prim is ew.conj_p:
            c, w = self.canon(d.inputs[0])
            return np.conj(c), self.conj(w)
        scaling = d.prim is ew.mul_p or (d.prim is con.dot_general_p and d.params["dims"] == con.DotDims((), ()))
        if scaling:
            for k in (0, 1):
                c = self.constant(d.inputs[k])
                if c is not None and isinstance(d.inputs[1 - k], Var) and d.inputs[1 - k].type == v.type:
                    c2, w = self.canon(d.inputs[1 - k])
                    return c * c2, w
        if d.prim is ew.neg_p:
            c, w = self.canon(d.inputs[0])
            return -c, w
        if d.prim is ew.add_p and all(isinstance(a, Var) and a.type == v.type for a in d.inputs):
            (c1, w1), (c2, w2) = map(self.canon, d.inputs)
            if w1 is w2:
                return c1 + c2, w1
        if _vector_reshape(d):
            c, w = self.canon(d.inputs[0])
            if w.shape == v.shape:
                return c, w
            dw = self.defs.get(id(w))
            if _vector_reshape(dw) and dw.inputs[0].shape == v.shape:
                return c, dw.inputs[0]
            found = self.find(st.reshape_p, (w,), new_sizes=v.shape)
            if found is not None:
                return c, found
        if d.prim in (la.trsm_p, la.trmm_p) and isinstance(d.inputs[1], Var):
            c, w = self.canon(d.inputs[1])
            if w is not d.inputs[1]:
                found = self.find(d.prim, (d.inputs[0], w), **d.params)
                if found is not None:
                    return c, found
        return 1, v

    def constant(self, a) -> complex | None:
        """The value of a scalar literal, or of a 0-d fill of one (converted, perhaps)."""
        while isinstance(a, Var) and a.type.shape == ():
            d = self.defs.get(id(a))
            if d is None or d.prim not in (st.broadcast_in_dim_p, st.convert_element_type_p):
                return None
            a = d.inputs[0]
        return _scalar(a)

    def conj(self, v: Var) -> Var:
        if v.dtype.kind != "c":
            return v
        d = self.defs.get(id(v))
        if d is not None and d.prim is ew.conj_p:
            return d.inputs[0]
        return self.emit(ew.conj_p, v)

    def triangular(self, prim, t: Var, u: Var, *, lower: bool, trans: Trans, unit_diagonal: bool,
                   check: bool = False) -> tuple[complex, Var]:
        """``op(T) u`` (trmm) or ``op(T)^{-1} u`` (trsm) of a column vector, cancelling against
        the inverse operation with the same factor."""
        c, w = self.canon(u)
        d = self.defs.get(id(w))
        inverse = la.trsm_p if prim is la.trmm_p else la.trmm_p
        if (d is not None and d.prim is inverse and d.inputs[0] is t and d.params["left"] and d.params["lower"] == lower
                and _same_trans(d.params["trans"], trans, t.dtype) and d.params["unit_diagonal"] == unit_diagonal):
            c2, w2 = self.canon(d.inputs[1])
            return c * d.params.get("alpha", 1.0) * c2, w2
        params = dict(left=True, lower=lower, trans=trans, unit_diagonal=unit_diagonal)
        if prim is la.trsm_p:
            params["check"] = check
        if t.dtype.kind != "c" and trans != Trans.N:  # op(T) = T^T, spelled either way
            for spelling in (Trans.T, Trans.C):
                found = self.find(prim, (t, w), **{**params, "trans": spelling})
                if found is not None:
                    return c, found
        return c, self.emit(prim, t, w, **params)

    # --- forms ---------------------------------------------------------------------------------
    def form(self, table: dict[int, Form], a) -> Form | None:
        return table.get(id(a)) if isinstance(a, Var) else None

    def low(self, a) -> Form | None:
        f = self.form(self.lower, a)
        return f if f is not None else self.form(self.exact, a)

    def outer(self, u: Var, v: Var, c=1) -> Term:
        cu, bu = self.canon(u)
        cv, bv = self.canon(v)
        return Term(c * cu * cv, "outer", bu, bv)

    def diagonal_of_op(self, t: Var, trans: Trans, unit_diagonal: bool) -> Var | Literal:
        if unit_diagonal:
            return self.lit(1, t.dtype)
        d = self.emit(st.diagonal_p, t, offset=0)
        factor = self.defs.get(id(t))
        real_diagonal = factor is not None and factor.prim is la.potrf_p and factor.outputs[0] is t  # LAPACK's
        return self.conj(d) if trans == Trans.C and not real_diagonal else d

    def strip(self, v):
        """``v`` without real parts and conversions of a vector that is real already (a Cholesky
        factor's diagonal, or a real vector converted to complex and back)."""
        while isinstance(v, Var):
            d = self.defs.get(id(v))
            if d is None or d.prim not in (st.convert_element_type_p, ew.real_p):
                return v
            inner = d.inputs[0]
            di = self.defs.get(id(inner)) if isinstance(inner, Var) else None
            real_already = inner.dtype.kind != "c" or (
                di is not None and di.prim is st.diagonal_p and self.defs.get(id(di.inputs[0])) is not None
                and self.defs[id(di.inputs[0])].prim is la.potrf_p)
            if not real_already:
                return v
            v = inner
        return v

    def times_diagonal(self, d, scale) -> Term:
        """diag(d) diag(scale) as a term; the identity when ``scale = 1 / d``."""
        if _scalar(scale) is not None:
            return Term(scale.value, "eye") if _scalar(d) is not None and d.value == 1 else Term(scale.value, "diag", d)
        if _scalar(d) is not None:
            return Term(d.value, "diag", scale)
        ds = self.defs.get(id(self.strip(scale)))
        if ds is not None and ds.prim is ew.div_p and _scalar(ds.inputs[0]) is not None \
                and self.strip(ds.inputs[1]) is self.strip(d):
            return Term(ds.inputs[0].value, "eye")
        return Term(1, "diag", self.emit(ew.mul_p, d, scale))

    def triangular_lower(self, t: Var, p, form: Form) -> Form | None:
        """The lower form of ``op(T) X`` (or ``X op(T)``), op(T) upper, from X's lower form (alpha aside)."""
        out = []
        left, lower, trans, unit = p["left"], p["lower"], p["trans"], p["unit_diagonal"]
        for term in form:
            if term.kind == "outer":
                if left:
                    c, u = self.triangular(la.trmm_p, t, term.a, lower=lower, trans=trans, unit_diagonal=unit)
                    out.append(Term(term.coef * c, "outer", u, term.b))
                else:  # u (v^T op(T)) = u (op(T)^T v)^T
                    tt = Trans.N if trans != Trans.N else Trans.T
                    b = self.conj(term.b) if trans == Trans.C else term.b
                    c, v = self.triangular(la.trmm_p, t, b, lower=lower, trans=tt, unit_diagonal=unit)
                    if trans == Trans.C:
                        v = self.conj(v)
                        c = np.conj(c)
                    out.append(Term(term.coef * c, "outer", term.a, v))
            elif term.kind in ("eye", "diag"):
                dt = self.diagonal_of_op(t, trans, unit)
                scale = self.lit(1, t.dtype) if term.kind == "eye" else term.a
                out.append(self.times_diagonal(dt, scale).scaled(term.coef))
            else:
                return None
        return _merge(out)

    def triangular_exact(self, prim, t: Var, p, form: Form) -> Form | None:
        """op(T) (u v^T) = (op(T) u) v^T (left; right: u (op(T)^T v)^T), also for solves (alpha aside)."""
        if not form or any(term.kind != "outer" for term in form):
            return None
        out = []
        lower, trans, unit = p["lower"], p["trans"], p["unit_diagonal"]
        check = {"check": p["check"]} if prim is la.trsm_p else {}
        for term in form:
            if p["left"]:
                c, u = self.triangular(prim, t, term.a, lower=lower, trans=trans, unit_diagonal=unit, **check)
                out.append(Term(term.coef * c, "outer", u, term.b))
            else:
                tt = Trans.N if trans != Trans.N else Trans.T
                b = self.conj(term.b) if trans == Trans.C else term.b
                c, v = self.triangular(prim, t, b, lower=lower, trans=tt, unit_diagonal=unit, **check)
                if trans == Trans.C:
                    v, c = self.conj(v), np.conj(c)
                out.append(Term(term.coef * c, "outer", term.a, v))
        return _merge(out)

    def hermitian(self, form: Form | None) -> Form | None:
        """``form`` itself when it is Hermitian term by term (real diagonals, outer products
        paired with their adjoints), else None."""
        if form is None:
            return None
        terms = {(t.kind, id(t.a), id(t.b)): t for t in form}
        for t in form:
            if t.kind in ("eye", "diag"):
                real_diag = t.kind == "eye" or t.a.dtype.kind != "c"
                if np.imag(t.coef) != 0 or not real_diag:
                    return None
            elif t.kind == "outer":
                a, b = self.conj(t.b), self.conj(t.a)
                mate = terms.get(("outer", id(a), id(b)))
                if mate is None or mate.coef != np.conj(t.coef):
                    return None
            else:
                return None
        return form

    def conjugate(self, form: Form | None) -> Form | None:
        if form is None or any(t.kind == "dense" for t in form):
            return None
        return tuple(Term(np.conj(t.coef), t.kind, t.a if t.a is None else self.conj(t.a),
                          t.b if t.b is None else self.conj(t.b)) for t in form)

    def sandwich(self, lfac: Var, form: Form, check: bool) -> Form | None:
        """L^{-H} X L^{-1} of a form: potri for the identity, a rank-1 term per outer product. The
        vectors' solves come first: then potri is L's last reader and may overwrite it (the expert's order)."""
        out = []
        dtype = lfac.dtype
        for t in sorted(form, key=lambda t: t.kind == "eye"):
            if t.kind == "eye":
                out.append(Term(t.coef, "dense", self.emit(la.potri_p, lfac, hint="inverse")))
            elif t.kind == "outer":
                tc = Trans.C if dtype.kind == "c" else Trans.T
                cu, u = self.triangular(la.trsm_p, lfac, t.a, lower=True, trans=tc, unit_diagonal=False, check=check)
                if self.conj(t.a) is t.b:  # L^{-T} conj(u) = conj(L^{-H} u): one solve
                    cv, v = np.conj(cu), self.conj(u)
                else:
                    cv, v = self.triangular(la.trsm_p, lfac, t.b, lower=True, trans=Trans.T, unit_diagonal=False,
                                            check=check)
                out.append(Term(t.coef * cu * cv, "outer", u, v))
            else:
                return None
        return _merge(out)

    def sandwich_of(self, eqn: Eqn) -> tuple[Var, Var, bool, float] | None:
        """(L, X, check, c) when ``eqn`` computes c L^{-H} X L^{-1} (L lower) by two solves (c: their alphas)."""
        p = eqn.params
        inner = self.defs.get(id(eqn.inputs[1]))
        if inner is None or inner.prim is not la.trsm_p or inner.inputs[0] is not eqn.inputs[0]:
            return None
        q = inner.params
        if not (p["lower"] and q["lower"]) or p["unit_diagonal"] or q["unit_diagonal"] or p["left"] == q["left"]:
            return None
        left, right = (p, q) if p["left"] else (q, p)
        adjoint = Trans.C if eqn.inputs[0].dtype.kind == "c" else Trans.T
        if right["trans"] != Trans.N or left["trans"] not in (adjoint, Trans.C):
            return None
        return eqn.inputs[0], inner.inputs[1], p["check"] or q["check"], p.get("alpha", 1.0) * q.get("alpha", 1.0)

    # --- the walk ------------------------------------------------------------------------------
    def run(self) -> Program:
        returned = {id(a) for a in self.program.outputs}
        for eqn in self.program.eqns:
            if self.replace and not self.replace.keys().isdisjoint(map(id, eqn.inputs)):  # (literals' ids: no key)
                ins = tuple([self.replace.get(id(a), a) if isinstance(a, Var) else a for a in eqn.inputs])
                eqn = Eqn(eqn.prim, ins, eqn.outputs, eqn.params, eqn.source)
            out = eqn.outputs[0]
            t = out.type  # (its shape read once: no property calls per equation)
            square = len(eqn.outputs) == 1 and t.__class__ is ArrayType and len(n := t.shape) == 2 and n[0] == n[1] > 0
            if square:
                self.source = eqn.source
                self.analyse(eqn, out)
                form = self.exact.get(id(out))
                if form is not None and self.cheap(form) and (self.cubic(eqn) or self.gathers(eqn, form, returned)):
                    new = self.replace[id(out)] = self.materialise(form, out)
                    for table in (self.exact, self.lower, self.herm):
                        if id(out) in table:
                            table.setdefault(id(new), table[id(out)])
                    self.changed = True
                    continue
            self._record(eqn)
        if not self.changed:
            return self.program
        program = Program(self.program.inputs, tuple(self.eqns), self.program.outputs, self.program.constvars,
                          self.program.constvals, self.program.name)
        return dce(substitute(program, self.replace))

    def cubic(self, eqn: Eqn) -> bool:
        if eqn.prim in (la.trsm_p, la.trmm_p):
            return eqn.inputs[1].shape[-1] > 1 if eqn.params["left"] else eqn.inputs[1].shape[-2] > 1
        if eqn.prim is con.dot_general_p:
            return all(isinstance(a, Var) and a.type.ndim == 2 and min(a.shape) > 1 for a in eqn.inputs)
        return eqn.prim is st.add_transpose_p or id(eqn.outputs[0]) in self.cancelled or (eqn.prim is ew.add_p and any(
            isinstance(a, Var) and id(a) in self.herm for a in eqn.inputs))

    @staticmethod
    def gathers(eqn: Eqn, form: Form, returned: set[int]) -> bool:
        """A returned sum holding a rank-1 term: printed from its form, the outer product is one update
        of the dense term's buffer (``ger``), not an n x n array made and then added."""
        if eqn.prim is ew.sub_p and any(t.kind == "dense" and np.real(t.coef) <= 0 for t in form):
            return False  # the dense term subtracted: printed as it is, not negated first
        return eqn.prim in (ew.add_p, ew.sub_p, st.transpose_p) and id(eqn.outputs[0]) in returned and any(
            t.kind == "outer" for t in form)

    @staticmethod
    def cheap(form: Form) -> bool:
        return sum(t.kind == "dense" for t in form) <= 1

    def analyse(self, eqn: Eqn, out: Var) -> None:
        prim, ins, p = eqn.prim, eqn.inputs, eqn.params
        exact = lower = herm = None
        n = out.shape[0]
        if prim is st.eye_p and p["k"] == 0:
            exact = (Term(1, "eye"),)
        elif prim is st.diag_embed_p and p["offset"] == 0 and ins[0].type.ndim == 1:
            exact = (Term(1, "diag", ins[0]),)
        elif prim is con.dot_general_p and self.is_outer(ins, p["dims"], n):  # u v^T, any spelling
            exact = (self.outer(*(a if a.shape == (n, 1) else self.emit(st.reshape_p, a, new_sizes=(n, 1))
                                  for a in ins)),)
        elif prim is con.dot_general_p and self.matrix_product(ins, p["dims"], n):
            exact = self.product_exact(ins, p["dims"])
        elif prim is ew.conj_p:
            exact = self.conjugate(self.form(self.exact, ins[0])) or self.adjoint(eqn)
        elif prim is st.transpose_p and p["permutation"] == (1, 0):
            f = self.form(self.exact, ins[0])
            if f is not None and all(t.kind != "dense" for t in f):
                exact = tuple(Term(t.coef, t.kind, t.b, t.a) if t.kind == "outer" else t for t in f)
            else:
                exact = self.adjoint(eqn)
        elif prim is st.tril_p and p["k"] == 0:
            lower = self.low(ins[0])
            if lower is not None and all(t.kind in ("eye", "diag") for t in lower):
                exact = lower
        elif prim is st.add_diagonal_p:
            d = ins[1]
            diag = Term(d.value, "eye") if _scalar(d) is not None else Term(1, "diag", d)
            exact = _plus(self.form(self.exact, ins[0]), (diag,))
            lower = _plus(self.low(ins[0]), (diag,))
            herm = self.phi(ins[0], d)
        elif prim in (ew.add_p, ew.sub_p) and all(isinstance(a, Var) and a.type == out.type for a in ins):
            sign = 1 if prim is ew.add_p else -1
            # dense operands kept by name: a matrix and its negation may cancel
            parts = [self.form(self.exact, a) or (Term(1, "dense", a),) for a in ins]
            exact = _plus(parts[0], _scale(parts[1], sign))
            if len(exact) > MAX_TERMS:
                exact = None  # sums stay short: the pass stays linear in the program
            elif sum(t.kind == "dense" for t in exact) < sum(t.kind == "dense" for f in parts for t in f):
                self.cancelled.add(id(out))  # the work that made the cancelled matrix dies
            lower = _plus(self.low(ins[0]), _scale(self.low(ins[1]), sign))
            herm = _plus(self.form(self.herm, ins[0]), _scale(self.form(self.herm, ins[1]), sign))
            if prim is ew.add_p and exact is None:
                exact = self.adjoint_pair(ins)
        elif prim is ew.mul_p and self.broadcast_outer(ins, n) is not None:  # u[:, None] * v[None, :]
            exact = (self.outer(*self.broadcast_outer(ins, n)),)
        elif prim is ew.mul_p and self.traced_scale(ins, out) is not None:
            s, x = self.traced_scale(ins, out)
            exact = self.scaled_by(self.form(self.exact, x), s, n)
        elif prim is rk.ger_p and all(isinstance(a, Var) for a in ins):  # A + alpha x y^T
            column = [self.emit(st.reshape_p, v, new_sizes=(n, 1)) for v in ins[1:]]
            exact = _plus(self.form(self.exact, ins[0]) or (Term(1, "dense", ins[0]),),
                          (self.outer(*column, p.get("alpha", 1.0)),))
        elif prim is ew.neg_p or (prim is ew.mul_p and any(_scalar(a) is not None for a in ins)):
            c = -1 if prim is ew.neg_p else next(_scalar(a) for a in ins if _scalar(a) is not None)
            x = next(a for a in ins if isinstance(a, Var))
            if x.type == out.type:
                exact, lower = _scale(self.form(self.exact, x), c), _scale(self.low(x), c)
                if np.imag(c) == 0:
                    herm = _scale(self.form(self.herm, x), c)
        elif prim is st.add_transpose_p and out.dtype.kind != "c":
            exact = self.form(self.herm, ins[0]) or self.symmetrised(self.form(self.exact, ins[0]))
        elif prim in (la.trmm_p, la.trsm_p) and isinstance(ins[1], Var):
            alpha = p.get("alpha", 1.0)  # BLAS's, a scale folded into the call (readers.py)

            def scaled(form: Form | None, c: float = alpha) -> Form | None:
                return form if c == 1.0 else _scale(form, c)

            f = self.form(self.exact, ins[1])
            if f is not None:
                exact = scaled(self.triangular_exact(prim, ins[0], p, f))
            if prim is la.trmm_p and _op_upper(p["lower"], p["trans"]):
                f = self.low(ins[1])
                if f is not None:
                    lower = scaled(self.triangular_lower(ins[0], p, f))
            if prim is la.trsm_p:
                found = self.sandwich_of(eqn)
                if found is not None:
                    lfac, x, check, c = found
                    hx = self.form(self.herm, x)
                    if hx is not None:
                        herm = scaled(self.sandwich(lfac, hx, check), c)
        for table, f in ((self.exact, exact), (self.lower, lower), (self.herm, herm)):
            if f is not None and len(f) <= MAX_TERMS:  # every form stays short: the pass stays linear
                table[id(out)] = f

    def broadcast_outer(self, ins, n: int) -> tuple[Var, Var] | None:
        """(u, v) as columns when the operands are ``u`` broadcast along the rows and ``v`` along the columns."""
        vectors = {}
        for a in ins:
            d = self.defs.get(id(a)) if isinstance(a, Var) else None
            if d is None or d.prim is not st.broadcast_in_dim_p or not isinstance(d.inputs[0], Var) \
                    or d.inputs[0].shape != (n,) or d.params["broadcast_dimensions"] not in ((0,), (1,)):
                return None
            vectors[d.params["broadcast_dimensions"]] = d.inputs[0]
        if len(vectors) != 2:
            return None
        return tuple(self.emit(st.reshape_p, vectors[k], new_sizes=(n, 1)) for k in ((0,), (1,)))

    def traced_scale(self, ins, out: Var) -> tuple[Var, Var] | None:
        """(s, x) when ``ins`` are x and a broadcast of the 0-d value s (a traced scalar)."""
        for k in (0, 1):
            d = self.defs.get(id(ins[k])) if isinstance(ins[k], Var) else None
            x = ins[1 - k]
            if d is not None and d.prim is st.broadcast_in_dim_p and not d.params["broadcast_dimensions"] \
                    and isinstance(d.inputs[0], Var) and isinstance(x, Var) and x.type == out.type:
                return d.inputs[0], x
        return None

    def scaled_by(self, form: Form | None, s: Var, n: int) -> Form | None:
        """``s`` times a form without dense terms: s lands on each term's vector (the diagonal, or the
        outer product's first), n entries, not n^2."""
        if not form or any(t.kind == "dense" for t in form):
            return None
        out = []
        for t in form:
            if t.kind == "eye":
                out.append(Term(t.coef, "diag", self.emit(st.broadcast_in_dim_p, s, shape=(n,),
                                                          broadcast_dimensions=())))
                continue
            shape = t.a.shape
            times = self.emit(ew.mul_p, t.a, self.emit(st.broadcast_in_dim_p, s, shape=shape, broadcast_dimensions=()))
            out.append(Term(t.coef, t.kind, times, t.b))
        return _merge(out)

    @staticmethod
    def matrix_product(ins, dims: con.DotDims, n: int) -> bool:
        """A product of two n x n matrices, either transposed (``X^T W``, ``W X^T``): n^3 work."""
        return (not dims.lhs_batch and len(dims.lhs_contract) == 1 and all(
            isinstance(a, Var) and a.shape == (n, n) for a in ins))

    def product_exact(self, ins, dims: con.DotDims) -> Form | None:
        """M (u v^T) = (M u) v^T and (u v^T) M = u (M^T v)^T: a product with a rank-1 operand is a
        matrix-vector product (a rank-1 cotangent pushed through ``inv``'s ``-X^T X_bar X^T``)."""
        (cl,), (cr,) = dims.lhs_contract, dims.rhs_contract
        for side, (m, cm), (x, cx) in ((1, (ins[0], cl), (ins[1], cr)), (0, (ins[1], cr), (ins[0], cl))):
            form = self.form(self.exact, x)
            if not form or any(t.kind != "outer" for t in form) or len(form) > 2:
                continue
            out = []
            for t in form:  # x = a b^T: the contracted vector, and the free one
                inner, free = (t.a, t.b) if cx == 0 else (t.b, t.a)
                w = self.emit(con.dot_general_p, m, inner, dims=con.DotDims((cm,), (0,)))  # (n, 1)
                out.append(self.outer(w, free, t.coef) if side == 1 else self.outer(free, w, t.coef))
            return _merge(out)
        return None

    @staticmethod
    def is_outer(ins, dims: con.DotDims, n: int) -> bool:
        """Two vectors of n entries, no batch, at most a contraction of unit axes: an (n, n) outer product."""
        if dims.lhs_batch or len(dims.lhs_contract) > 1 or not all(isinstance(a, Var) and a.type.size == n
                                                                   for a in ins):
            return False
        if not dims.lhs_contract:
            return all(a.type.ndim == 1 for a in ins)
        return all(a.type.ndim == 2 and a.shape[k[0]] == 1 for a, k in zip(ins, (dims.lhs_contract,
                                                                              dims.rhs_contract)))

    def adjoint(self, eqn: Eqn) -> Form | None:
        """X^H = (X + X^H) - X, when ``eqn`` makes X^H (a transpose, conjugated if complex) and
        X's Hermitian part has a form."""
        x = eqn.inputs[0]
        if eqn.outputs[0].dtype.kind == "c":  # the last of the two steps: conj of a transpose, or the reverse
            d = self.defs.get(id(x)) if isinstance(x, Var) else None
            other = ew.conj_p if eqn.prim is st.transpose_p else st.transpose_p
            if d is None or d.prim is not other or (other is st.transpose_p and d.params["permutation"] != (1, 0)):
                return None
            x = d.inputs[0]
        h = self.form(self.herm, x) if x is not None else None
        return None if h is None else _plus(h, (Term(-1, "dense", x),))

    @staticmethod
    def symmetrised(form: Form | None, conj=None) -> Form | None:
        """X + X^T (X + X^H with ``conj``) of X's form without dense terms: u v^T + v u^T (one term
        2 u u^T when v = u), so that a solve's symmetrised rank-1 cotangent (``posv``'s, which sees dA's
        Hermitian part) stays rank-1."""
        if not form or any(t.kind == "dense" for t in form):
            return None
        if conj is None:
            mates = [Term(t.coef, t.kind, t.b, t.a) if t.kind == "outer" else t for t in form]
        elif any(t.kind == "diag" for t in form):
            return None
        else:
            mates = [Term(np.conj(t.coef), t.kind, conj(t.b), conj(t.a)) if t.kind == "outer"
                     else Term(np.conj(t.coef), t.kind) for t in form]
        return _merge([*form, *mates])

    def adjoint_source(self, y) -> Var | None:
        steps = {st.transpose_p, ew.conj_p} if y.dtype.kind == "c" else {st.transpose_p}
        d = self.defs.get(id(y)) if isinstance(y, Var) else None
        while d is not None and d.prim in steps and (d.prim is not st.transpose_p or d.params["permutation"] == (1, 0)):
            steps.discard(d.prim)
            y = d.inputs[0]
            d = self.defs.get(id(y)) if isinstance(y, Var) else None
        return y if not steps and isinstance(y, Var) else None

    def adjoint_pair(self, ins) -> Form | None:
        """X + X^H spelled out (the symmetrisation of a complex cotangent)."""
        a, b = ins
        for x, y in ((a, b), (b, a)):
            if self.adjoint_source(y) is x:
                return self.form(self.herm, x) or self.symmetrised(self.form(self.exact, x), self.conj)
        return None

    def phi(self, x, d) -> Form | None:
        """Hermitian part of Phi(Y) = tril(Y) - diag(Y)/2 (``add_diagonal(tril(Y), -diagonal(Y)/2)``)."""
        dx = self.defs.get(id(x)) if isinstance(x, Var) else None
        if dx is None or dx.prim is not st.tril_p or dx.params["k"] != 0 or not isinstance(d, Var):
            return None
        c, w = self.canon(d)
        dw = self.defs.get(id(w))
        if c != -0.5 or dw is None or dw.prim is not st.diagonal_p or dw.params["offset"] != 0:
            return None
        y = dx.inputs[0]
        if dw.inputs[0] is not y:
            return None
        return self.hermitian(self.low(y))

    def materialise(self, form: Form, out: Var) -> Var:
        dtype = out.dtype
        acc = None
        dense = [t for t in form if t.kind == "dense"]
        for t in dense:
            acc = t.a if t.coef == 1 else self.emit(ew.mul_p, t.a, self.lit(t.coef, dtype))
        for t in form:
            if t.kind != "outer":
                continue
            real = complex(t.coef).imag == 0
            if acc is not None and real:  # a rank-1 update of the buffer, its scale BLAS's alpha
                n = out.shape[0]
                alpha = {} if t.coef == 1 else {"alpha": float(complex(t.coef).real)}
                acc = self.emit(rk.ger_p, acc, self.emit(st.reshape_p, t.a, new_sizes=(n,)),
                                self.emit(st.reshape_p, t.b, new_sizes=(n,)), **alpha)
                continue
            u = t.a if t.coef == 1 else self.emit(ew.mul_p, t.a, self.lit(t.coef, dtype))
            if acc is None:
                acc = self.emit(con.dot_general_p, u, t.b, dims=_OUTER)
            else:  # a rank-1 update of the buffer, not an n x n product added to it
                n = out.shape[0]
                acc = self.emit(rk.ger_p, acc, self.emit(st.reshape_p, u, new_sizes=(n,)),
                                self.emit(st.reshape_p, t.b, new_sizes=(n,)))
        diagonal = None  # the diagonal terms summed first (n entries), then one update of the buffer
        for t in sorted((t for t in form if t.kind in ("eye", "diag")), key=lambda t: t.kind == "eye"):
            v = self.lit(t.coef, dtype) if t.kind == "eye" else (
                t.a if t.coef == 1 else self.emit(ew.mul_p, t.a, self.lit(t.coef, dtype)))
            diagonal = v if diagonal is None else self.emit(ew.add_p, diagonal, v)
        if diagonal is not None:
            if acc is None:
                acc = self.emit(st.broadcast_in_dim_p, self.lit(0, dtype), shape=out.shape, broadcast_dimensions=())
            acc = self.emit(st.add_diagonal_p, acc, diagonal)
        if acc is None:
            acc = self.emit(st.broadcast_in_dim_p, self.lit(0, dtype), shape=out.shape, broadcast_dimensions=())
        if out.hint and not acc.hint and self.eqns and self.eqns[-1].outputs == (acc,):
            named = Var(acc.type, out.hint)  # the user's name, for the equation that now defines it
            last = self.eqns.pop()
            self._record(Eqn(last.prim, last.inputs, (named,), last.params, last.source))
            acc = named
        return acc


def structure(program: Program) -> Program:
    """``program`` with cubic work on structured matrices replaced (see the module docstring)."""
    if not any(s is not None and len(s) == 2 and s[0] == s[1] > 0 for s in census.shapes(program)):
        return program  # no square matrix: nothing has a form
    return _Pass(program).run()


# --- diagonal plus low rank: what ``pb.hessian(f, compressed=True)`` returns for such a Hessian -----------


@dataclass(frozen=True)
class LowRank:
    """``H = diag(d) + U V^T``: which outputs of the factor program hold ``d`` (n,) and ``U``, ``V`` (n, k)."""

    diagonal: int
    u: int
    v: int
    rank: int


def _forms(program: Program) -> _Pass:
    """The pass's forms of every square matrix of ``program``, nothing replaced."""
    p = _Pass(program)
    for eqn in program.eqns:
        out = eqn.outputs[0]
        if len(eqn.outputs) == 1 and out.type.ndim == 2 and out.shape[0] == out.shape[1] > 0:
            p.source = eqn.source
            p.analyse(eqn, out)
        p._record(eqn)
    return p


def _pieces(p: _Pass, a, coef, depth: int = 0) -> list | None:
    """``a`` (n, n) as ``coef`` times a sum of pieces ``("diag", c, vector or None for the identity)`` and
    ``("low", c, U, V)`` (U V^T, U and V (n, k), k < n), through sums, negations, literal scalings,
    transposes, diagonal updates, rank-1 updates and products through a thin middle; None otherwise."""
    if not isinstance(a, Var) or depth > 32:
        return None
    n = a.shape[0]
    form = p.form(p.exact, a)
    if form is not None and all(t.kind != "dense" for t in form):
        out = []
        for t in form:
            if t.kind == "outer":
                out.append(("low", coef * t.coef, t.a, t.b))
            else:
                out.append(("diag", coef * t.coef, t.a))
        return out
    d = p.defs.get(id(a))
    if d is None:
        return None
    ins = d.inputs
    if d.prim is st.transpose_p and d.params["permutation"] == (1, 0):
        inner = _pieces(p, ins[0], coef, depth + 1)
        return None if inner is None else [(k[0], k[1], k[3], k[2]) if k[0] == "low" else k for k in inner]
    if d.prim in (ew.add_p, ew.sub_p) and all(isinstance(x, Var) and x.type == a.type for x in ins):
        first, second = _pieces(p, ins[0], coef, depth + 1), _pieces(p, ins[1], coef * (
            1 if d.prim is ew.add_p else -1), depth + 1)
        return None if first is None or second is None else first + second
    if d.prim is ew.neg_p:
        return _pieces(p, ins[0], -coef, depth + 1)
    if d.prim is ew.mul_p and any(_scalar(x) is not None for x in ins):
        c = next(_scalar(x) for x in ins if _scalar(x) is not None)
        return _pieces(p, next(x for x in ins if isinstance(x, Var)), coef * c, depth + 1)
    if d.prim is st.broadcast_in_dim_p and isinstance(ins[0], Var) and ins[0].shape == (n,) \
            and d.params["broadcast_dimensions"] in ((0,), (1,)):  # u 1^T or 1 v^T
        u = p.emit(st.reshape_p, ins[0], new_sizes=(n, 1))
        ones = p.emit(st.broadcast_in_dim_p, p.lit(1, a.dtype), shape=(n, 1), broadcast_dimensions=())
        return [("low", coef, u, ones) if d.params["broadcast_dimensions"] == (0,) else ("low", coef, ones, u)]
    if d.prim is ew.div_p and all(isinstance(x, Var) and x.type == a.type for x in ins):
        scale = _scaling_of(p, ins[1], n)  # X / s: X times 1 / s, n entries
        if scale is None:
            return None
        inner = _pieces(p, ins[0], coef, depth + 1)
        side, s = scale
        recip = p.emit(ew.div_p, p.lit(1, s.dtype), s)
        return None if inner is None else [_scaled_piece(p, piece, side, recip, n) for piece in inner]
    if d.prim is ew.mul_p and all(isinstance(x, Var) and x.type == a.type for x in ins):
        for k in (0, 1):  # diag(s) X, X diag(s) or s X (a traced scalar): s lands on the pieces' vectors
            scale = _scaling_of(p, ins[k], n)
            if scale is not None:
                inner = _pieces(p, ins[1 - k], coef, depth + 1)
                return None if inner is None else [_scaled_piece(p, piece, *scale, n) for piece in inner]
    if d.prim is st.add_diagonal_p:
        rest = _pieces(p, ins[0], coef, depth + 1)
        v = ins[1]
        diag = ("diag", coef * v.value, None) if _scalar(v) is not None else ("diag", coef, v)
        return None if rest is None else [*rest, diag]
    if d.prim is rk.ger_p:
        rest = _pieces(p, ins[0], coef, depth + 1)
        cols = [p.emit(st.reshape_p, v, new_sizes=(n, 1)) for v in ins[1:]]
        return None if rest is None else [*rest, ("low", coef * d.params.get("alpha", 1.0), *cols)]
    if d.prim is con.dot_general_p:
        dims = d.params["dims"]
        x, y = ins
        if dims.lhs_batch or len(dims.lhs_contract) != 1 or x.type.ndim != 2 or y.type.ndim != 2:
            return None
        (cx,), (cy,) = dims.lhs_contract, dims.rhs_contract
        if x.shape[cx] >= n:
            return None  # no thinner than the matrix: nothing to gain
        u = x if cx == 1 else p.emit(st.transpose_p, x, permutation=(1, 0))
        v = y if cy == 1 else p.emit(st.transpose_p, y, permutation=(1, 0))
        return [("low", coef, u, v)]
    return None


def _scaling_of(p: _Pass, b: Var, n: int) -> tuple[str, Var] | None:
    """("rows" or "cols", s (n,)) when ``b`` is a vector broadcast along the rows or the columns of an
    (n, n) matrix (a product with it scales rows or columns), ("all", s) for a 0-d s broadcast."""
    d = p.defs.get(id(b))
    if d is None or d.prim is not st.broadcast_in_dim_p or not isinstance(d.inputs[0], Var):
        return None
    s, dims = d.inputs[0], d.params["broadcast_dimensions"]
    if s.type.ndim == 0:
        return "all", s
    if s.shape == (n,) and dims in ((0,), (1,)):
        return ("rows" if dims == (0,) else "cols"), s
    return None


def _scaled_piece(p: _Pass, piece: tuple, side: str, s: Var, n: int) -> tuple:
    """A piece times diag(s) on the left (``rows``), the right (``cols``), or times the scalar s."""
    def times(v):  # v (n,) or (n, k), or None for ones: scaled entrywise by s along its rows
        if side == "all":
            if v is None:
                return p.emit(st.broadcast_in_dim_p, s, shape=(n,), broadcast_dimensions=())
            return p.emit(ew.mul_p, v, p.emit(st.broadcast_in_dim_p, s, shape=v.shape, broadcast_dimensions=()))
        if v is None:
            return s
        return p.emit(ew.mul_p, v, s if v.type.ndim == 1 else p.emit(st.broadcast_in_dim_p, s, shape=v.shape,
                                                                      broadcast_dimensions=(0,)))
    if piece[0] == "diag":
        return ("diag", piece[1], times(piece[2]))
    _, c, u, v = piece
    return ("low", c, u, times(v)) if side == "cols" else ("low", c, times(u), v)


def diagonal_plus_low_rank(program: Program) -> tuple[Program, LowRank] | None:
    """The (n, n) output of ``program`` (a Hessian of a vector) as ``diag(d) + U V^T`` with ``k < n``
    columns: a program computing d, U and V (their scalings on the vectors, n k entries, never n^2), and
    where it puts them. The pieces are read from the structure pass's forms (outer products, diagonals,
    the identity) and from products through a thin middle (``X^T diag(s) X`` with fewer rows than
    columns); None when some term is dense, or the rank is not below n."""
    (h,) = program.outputs
    if not isinstance(h, Var) or h.type.ndim != 2 or h.shape[0] != h.shape[1] or h.dtype.kind not in "fc":
        return None
    p = _forms(program)
    pieces = _pieces(p, h, 1)
    if pieces is None:
        return None
    n, dtype = h.shape[0], h.dtype
    lows = [k for k in pieces if k[0] == "low"]
    rank = sum(k[2].shape[1] for k in lows)
    if not lows or rank >= n:
        return None
    real = np.dtype(dtype).kind != "c"

    def lit(c):
        return p.lit(float(np.real(c)) if real else complex(c), dtype)

    d = None
    for _, c, v in (k for k in pieces if k[0] == "diag"):
        if v is None:
            term = p.emit(st.broadcast_in_dim_p, lit(c), shape=(n,), broadcast_dimensions=())
        else:
            term = v if c == 1 else p.emit(ew.mul_p, v, lit(c))
        d = term if d is None else p.emit(ew.add_p, d, term)
    if d is None:
        d = p.emit(st.broadcast_in_dim_p, lit(0), shape=(n,), broadcast_dimensions=())
    us = [u if c == 1 else p.emit(ew.mul_p, u, lit(c)) for _, c, u, _ in lows]
    vs = [v for *_, v in lows]
    u = us[0] if len(us) == 1 else p.emit(st.concatenate_p, *us, dimension=1)
    v = vs[0] if len(vs) == 1 else p.emit(st.concatenate_p, *vs, dimension=1)
    factors = Program(program.inputs, tuple(p.eqns), (d, u, v), program.constvars, program.constvals,
                      f"{program.name}_factors")
    return dce(factors), LowRank(0, 1, 2, rank)
