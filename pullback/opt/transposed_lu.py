"""LU of A^T for a row-major A: the factorisation LAPACK can make from A's own buffer.

NumPy's arrays are row-major and LAPACK's column-major, so ``getrf(A)`` on a C-ordered A starts
with f2py's transposing copy to Fortran order (a strided, cache-unfriendly pass: 70 of the 160 ms
that getrf takes at n = 1024), where ``getrf(A.T)`` copies A's buffer as it lies, since the F-view
``A.T`` *is* A^T in Fortran order. The expert factorises A^T = P^T L U and uses its factors
transposed: A x = b is A^T's transposed solve, A^{-1} = (A^T)^{-1} transposed, det A = det A^T.

So where every reader of getrf's factors is one of those, the program factorises ``transpose(A)``
and the readers change to match (CuPy's getrf makes the same column-major copy, and gains alike):

    getrs[trans=N] lu piv b      ->  getrs[trans=T] lu piv b       (T -> N; C -> N for real A)
    gesv A lu piv info b         ->  gesv[trans=T] A^T lu piv info b
    X = getri lu piv             ->  X = transpose(getri lu piv)
    X = getri_at A lu piv info   ->  X = transpose(getri_at A^T lu piv info)
    lu_logabsdet A lu piv, det A lu piv  ->  the same of A^T

Each rewritten equation states a true fact about the matrix it is given, so the program means what
it meant (and differentiates as it did); the simplifier then cancels the transposes against the
readers' (``A_bar = -X^T W X^T`` reads getri's result as it comes). Not rewritten: a factorisation
whose factors or permutation anything else reads (``lu_factor``'s returned factors, ``scipy.linalg.lu``,
a loop or branch), batched or rectangular ones, complex ones solved with A^H, and a matrix that is
LAPACK's own column-major result already (an inverse or a solution: its F-view is the transposed
copy).

Before::

    lu, piv, perm, info = getrf A
    x = gesv A lu piv info b

After::

    At = transpose A
    lu, piv, perm, info = getrf At
    x = gesv[trans=T] At lu piv info b
"""

from __future__ import annotations

from pullback.ir.core import WITH_BODIES, Eqn, Params, Program, Var
from pullback.opt.census import primitives
from pullback.primitives import structural as st
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import matrix_functions as lx
from pullback.primitives.linalg.factorizations import Trans

# results that are LAPACK's own column-major arrays in every backend (getrf of their F-view would
# be the transposing copy)
COLUMN_MAJOR = frozenset({fa.getrs_p, fa.getri_p, fa.getri_at_p, fa.gesv_p, fa.potrs_p, fa.posv_p})
# readers of the factors (lu, piv) that have a form for the factors of A^T, and the operand that is A
READERS = {fa.getrs_p: None, fa.getri_p: None, fa.gesv_p: 0, fa.getri_at_p: 0, fa.lu_logabsdet_p: 0, lx.det_p: 0}
_FLIP = {Trans.N: Trans.T, Trans.T: Trans.N, Trans.C: Trans.N}


def transposed_lu(program: Program) -> Program:
    """``program`` with each getrf whose readers allow it factorising A^T (see the module docstring);
    ``program`` itself when there is none."""
    if la.getrf_p not in primitives(program):
        return program
    readers: dict[int, list[Eqn]] = {}
    for e in program.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                readers.setdefault(id(a), []).append(e)
    returned = {id(a) for a in program.outputs}
    producer = {id(v): e for e in program.eqns for v in e.outputs}
    chosen = {id(e): Var(e.inputs[0].type) for e in program.eqns if _applies(e, readers, returned, producer)}
    if not chosen:
        return program
    factors: dict[int, Var] = {}  # id(lu or piv) of a chosen getrf -> its new operand A^T
    for e in program.eqns:
        if id(e) in chosen:
            factors[id(e.outputs[0])] = factors[id(e.outputs[1])] = chosen[id(e)]
    eqns: list[Eqn] = []
    for e in program.eqns:
        at = chosen.get(id(e))
        if at is not None:
            eqns += [Eqn(st.transpose_p, e.inputs, (at,), Params({"permutation": (1, 0)}), e.source),
                     Eqn(e.prim, (at,), e.outputs, e.params, e.source)]
            continue
        at = next((factors[id(a)] for a in e.inputs if isinstance(a, Var) and id(a) in factors), None)
        eqns += [e] if at is None else _reader(e, at)
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


def _applies(e: Eqn, readers: dict[int, list[Eqn]], returned: set[int], producer: dict[int, Eqn]) -> bool:
    if e.prim is not la.getrf_p or e.inputs[0].type.ndim != 2 or not isinstance(e.inputs[0], Var):
        return False
    a = e.inputs[0]
    m, n = a.shape
    if m != n or _column_major(a, producer):
        return False
    lu, piv, perm, _ = e.outputs
    if id(perm) in readers or returned & {id(lu), id(piv), id(perm)}:
        return False
    for r in (*readers.get(id(lu), ()), *readers.get(id(piv), ())):
        if r.prim not in READERS or r.prim in WITH_BODIES:
            return False
        if r.prim is fa.getrs_p and r.params["trans"] == Trans.C and a.dtype.kind == "c":
            return False  # A^H is conj(A^T), which getrs cannot apply without conjugating both sides
        k = READERS[r.prim]
        if k is not None and r.inputs[k] is not a:
            return False
    return True


def _column_major(a: Var, producer: dict[int, Eqn]) -> bool:
    """Whether ``a`` is held in column-major order: LAPACK's result, or the transpose of a row-major
    value (this pass's own ``A^T``, so that it does not undo itself)."""
    made = producer.get(id(a))
    if made is None or made.prim in COLUMN_MAJOR:
        return made is not None
    if made.prim is st.transpose_p and made.params["permutation"] == (1, 0) and isinstance(made.inputs[0], Var):
        return not _column_major(made.inputs[0], producer)
    return False


def _reader(e: Eqn, at: Var) -> list[Eqn]:
    """``e``, which reads factors of ``at`` = A^T where it read A's, rewritten to mean what it meant."""
    if e.prim is fa.getrs_p:
        return [Eqn(e.prim, e.inputs, e.outputs, Params({**e.params, "trans": _FLIP[e.params["trans"]]}), e.source)]
    ins = tuple(at if k == READERS[e.prim] else a for k, a in enumerate(e.inputs))
    if e.prim is fa.gesv_p:
        trans = _FLIP[e.params.get("trans", Trans.N)]
        params = Params({**e.params, "trans": trans}) if trans != Trans.N else Params(
            {k: v for k, v in e.params.items() if k != "trans"})
        return [Eqn(e.prim, ins, e.outputs, params, e.source)]
    if e.prim in (fa.getri_p, fa.getri_at_p):  # the inverse of A^T, transposed
        (x,) = e.outputs
        xt = Var(x.type)
        return [Eqn(e.prim, ins, (xt,), e.params, e.source),
                Eqn(st.transpose_p, (xt,), (x,), Params({"permutation": (1, 0)}), e.source)]
    return [Eqn(e.prim, ins, e.outputs, e.params, e.source)]  # |det A^T| = |det A|, det A^T = det A
