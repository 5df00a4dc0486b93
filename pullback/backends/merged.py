"""The comment above a factorisation that serves several of the user's calls: which calls were merged.

The passes that bring spellings to one form (``transforms.canonical``), CSE and the shared inverse
(``transforms.shared_inverse``) leave one ``getrf`` (or ``potrf``, ``geqrf``, ...) per matrix; its readers
come from the user's lines that asked for it. When those are several lines, the printed factorisation
says so, as ``# one LU of A serves solve (line 6), slogdet (line 7)``, so that a reader of the gradient
sees where the second factorisation went."""

from __future__ import annotations

from pullback.ir import sourcemap
from pullback.ir.core import Eqn, Program
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import matrix_functions as lx

FACTORISATIONS = {la.getrf_p: "LU", la.potrf_p: "Cholesky factorisation", la.geqrf_p: "QR factorisation",
                  la.syevd_p: "eigendecomposition", la.gesvd_p: "SVD"}

# the user's calls that would each factorise the matrix, by the equation they print (a derivative's own
# use of the factors, getri for slogdet's, potri for a Cholesky factor's, is no call of its own; nor is a
# solve with factors the user made, cho_solve or solve_triangular: nothing was merged into those)
CALLS = {fa.gesv_p: "solve", fa.getri_at_p: "inv", fa.lu_logabsdet_p: "slogdet", lx.det_p: "det",
         fa.posv_p: "solve", fa.po_logdet_p: "logdet", fa.po_inv_p: "inv"}
# the factorisation itself, where the user asked for it by name
OWN = {la.getrf_p: "lu_factor", la.potrf_p: "cholesky", la.geqrf_p: "qr", la.syevd_p: "eigh", la.gesvd_p: "svd"}


def _line(eqn: Eqn) -> tuple[str, int] | None:
    src = eqn.source
    if src is None:
        return None
    stmt = sourcemap.statement_at(src.filename, src.lineno)
    return src.filename, stmt.first if stmt is not None else src.lineno


def notes(program: Program, matrix_name) -> dict[int, str]:
    """Equation index -> the comment for a factorisation whose factors serve the user's calls on
    several lines (``matrix_name``: the printed name of an operand)."""
    facts = [(i, e) for i, e in enumerate(program.eqns) if e.prim in FACTORISATIONS]
    if not facts:
        return {}
    owner = {id(v): i for i, e in facts for v in e.outputs}
    lines: dict[int, dict[tuple[str, int], str]] = {}  # factorisation -> user line -> the call there
    for e in program.eqns:
        for i in {owner[id(a)] for a in e.inputs if id(a) in owner}:
            line = _line(e)
            if line is None:
                continue
            name = CALLS.get(e.prim)
            if name is not None:
                lines.setdefault(i, {}).setdefault(line, name)
    out: dict[int, str] = {}
    for i, e in facts:
        calls = lines.get(i, {})
        own = _line(e)
        if calls and own is not None:  # the factorisation's own line, unless a merged call's
            calls.setdefault(own, OWN[e.prim])
        if len({f for f, _ in calls}) != 1 or len(calls) < 2:  # one file's lines, at least two
            continue
        described = [f"{name} (line {n})" for (_, n), name in sorted(calls.items())]
        out[i] = f"# one {FACTORISATIONS[e.prim]} of {matrix_name(e.inputs[0])} serves {', '.join(described)}"
    return out
