"""One factorisation per matrix whatever the spelling (issue 28, item 5), for the LU, QR, eigh and
SVD families (the Cholesky family: ``test_cholesky_spellings``). Programs are generated: the front-end
names (NumPy's, SciPy's, pullback.linalg's), the calls mixed in one program, their order and a jitter
term. Each asserts the LAPACK calls of the gradient program against the expert's minimum (one getrf,
at most one inverse, one getrs per direction of a solve; one geqrf, syevd or gesvd) and its values
against NumPy/SciPy; a sample also against finite differences, and the n x n buffers at n = 256.

Oracles: NumPy's inverse (x = A^{-1} b, d sum(x) / dA = -(A^{-T} 1) x^T, d log|det A| / dA = A^{-T},
d sum(W o A^{-1}) / dA = -A^{-T} W A^{-T}), NumPy's and SciPy's factorisations for the values, central
finite differences for the rest."""

from __future__ import annotations

import itertools
import tracemalloc
from collections import Counter

import numpy as np
import pullback.linalg as pl
import pytest
import scipy.linalg
from pullback.testing import check_grads

import pullback as pb
from pullback.ir.core import Program

# --- the LU family -------------------------------------------------------------------------------

SOLVES = {  # A, b -> A^{-1} b
    "np.linalg.solve": np.linalg.solve,
    "scipy.linalg.solve": scipy.linalg.solve,
    "scipy lu_factor + lu_solve": lambda A, b: scipy.linalg.lu_solve(scipy.linalg.lu_factor(A), b),
    "pullback lu_factor + lu_solve": lambda A, b: pl.lu_solve(pl.lu_factor(A), b),
    "inv(A) @ b": lambda A, b: np.linalg.inv(A) @ b,
    None: None,
}
LOGDETS = {  # A -> log |det A|
    "np.linalg.slogdet": lambda A: np.linalg.slogdet(A)[1],
    "log|np.linalg.det|": lambda A: np.log(np.abs(np.linalg.det(A))),
    "log|scipy.linalg.det|": lambda A: np.log(np.abs(scipy.linalg.det(A))),
    None: None,
}
INVERSES = {"np.linalg.inv": np.linalg.inv, "scipy.linalg.inv": scipy.linalg.inv, None: None}


def lu_program(solve, logdet, inverse, jitter: bool, logdet_first: bool):
    sv, ld, iv = SOLVES[solve], LOGDETS[logdet], INVERSES[inverse]

    def f(A, b, W):
        M = A + 0.5 * np.eye(A.shape[0]) if jitter else A
        terms = []
        if ld is not None and logdet_first:
            terms.append(ld(M))
        if sv is not None:
            terms.append(np.sum(sv(M, b)))
        if iv is not None:
            terms.append(np.sum(W * iv(M)))
        if ld is not None and not logdet_first:
            terms.append(ld(M))
        return sum(terms[1:], terms[0])

    f.__name__ = "lu_spelling"
    return f


LU_SPELLINGS = [
    pytest.param(s, ld, iv, j, o, id=f"{s}-{ld}-{iv}-{'jitter' if j else 'A'}-{'logdet first' if o else 'solve first'}")
    for s, ld, iv in itertools.product(SOLVES, LOGDETS, INVERSES)
    if [s, ld, iv].count(None) <= 1  # at least two calls share the matrix
    for j, o in itertools.product((False, True), (False, True))
    if ld is not None or not o  # (the order matters only with a log determinant)
]


def _general(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n)) + n ** 0.5 * np.eye(n), rng.standard_normal(n),
            rng.standard_normal((n, n)))


def lu_oracle(A, b, W, solve, logdet, inverse, jitter: bool):
    M = A + 0.5 * np.eye(len(A)) if jitter else A
    inv = np.linalg.inv(M)
    value, grad = 0.0, np.zeros_like(A)
    if solve is not None:
        x = inv @ b
        value += x.sum()
        grad -= np.outer(inv.T @ np.ones(len(A)), x)
    if logdet is not None:
        value += np.linalg.slogdet(M)[1]
        grad += inv.T
    if inverse is not None:
        value += np.sum(W * inv)
        grad -= inv.T @ W @ inv.T
    return value, grad


def counts(program: Program) -> Counter:
    """Equations by primitive name, sub-programs (branches) included."""
    from pullback.ir.core import sub_programs

    found: Counter = Counter()

    def walk(p: Program) -> None:
        for e in p.eqns:
            found[e.prim.name] += 1
            for body in sub_programs(e):
                walk(body)

    walk(program)
    return found


def matrix_products(program: Program, n: int) -> int:
    """Products of two n x n matrices (n^3 work)."""
    return sum(e.prim.name == "dot_general" and all(getattr(a, "shape", ()) == (n, n) for a in e.inputs)
               for e in program.eqns)


@pytest.mark.parametrize("solve, logdet, inverse, jitter, logdet_first", LU_SPELLINGS)
def test_lu_spellings_factor_once(solve, logdet, inverse, jitter, logdet_first):
    """One getrf; one inverse where a log determinant or an inverse asks for A^{-1} (none for solves
    alone: getrs then); getrs once per direction; nothing through the factors (no trsm, trmm), and
    n x n products only for the inverse's own -A^{-T} W A^{-T}."""
    f = lu_program(solve, logdet, inverse, jitter, logdet_first)
    n = 6
    A, b, W = _general(n, seed=1)
    g = pb.differentiate(f)
    program = g.ir(A, b, W)
    c = counts(program)
    source = g.source(A, b, W)
    assert c["getrf"] == 1, source
    wants_inverse = logdet is not None or inverse is not None or solve == "inv(A) @ b"
    assert c["getri"] + c["getri_at"] == (1 if wants_inverse else 0), source
    assert c["gesv"] + c["getrs"] <= (2 if solve not in (None, "inv(A) @ b") else 0), source
    assert c["trsm"] == c["trmm"] == c["potrf"] == c["det"] == 0, source  # det: only where a value needs it
    assert matrix_products(program, n) == (2 if inverse is not None else 0), source
    if [solve, logdet, inverse].count(None) == 0 or (solve not in (None, "inv(A) @ b") and logdet is not None):
        assert "# one LU of " in source, source  # the merged calls are named
    value, grad = g.value_and_grad(A, b, W)
    want_value, want_grad = lu_oracle(A, b, W, solve, logdet, inverse, jitter)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("solve, logdet, inverse, jitter, logdet_first",
                         [p for p in LU_SPELLINGS if p.values[3] and not p.values[4]])
def test_lu_spellings_by_finite_differences(solve, logdet, inverse, jitter, logdet_first):
    f = lu_program(solve, logdet, inverse, jitter, logdet_first)
    A, b, W = _general(4, seed=2)
    check_grads(f, (A, b, W), order=1)


def _peak(fn, *args) -> float:
    fn(*args)
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("solve, logdet, inverse", [("np.linalg.solve", "np.linalg.slogdet", None),
                                                    ("scipy lu_factor + lu_solve", "log|np.linalg.det|", None),
                                                    (None, "np.linalg.slogdet", "np.linalg.inv"),
                                                    ("inv(A) @ b", "np.linalg.slogdet", None)])
def test_lu_spellings_as_lean_as_the_expert(solve, logdet, inverse):
    """The expert's n x n buffers: getrf's copy of A, which getri overwrites with A^{-1} and a rank-1
    update turns into the gradient (one); the inverse's cotangent adds X^T W and its product (two);
    and getri's workspace (LAPACK's optimal lwork, 64 n entries: a quarter of a buffer at n = 256)."""
    n = 256
    A, b, W = _general(n, seed=3)
    g = pb.differentiate(lu_program(solve, logdet, inverse, False, False)).value_and_grad
    buffers = _peak(g, A, b, W) / (n * n * 8)
    assert buffers <= 1 + 2 * (inverse is not None) + 0.25 + 0.05, buffers


# --- QR, eigh, SVD -------------------------------------------------------------------------------

Q_OF = {  # A -> Q (square A: every mode's Q is n x n)
    "np.linalg.qr": lambda A: np.linalg.qr(A)[0],
    "np.linalg.qr complete": lambda A: np.linalg.qr(A, mode="complete")[0],
    "scipy.linalg.qr": lambda A: scipy.linalg.qr(A)[0],
    "scipy.linalg.qr economic": lambda A: scipy.linalg.qr(A, mode="economic")[0],
}
R_OF = {
    "np.linalg.qr": lambda A: np.linalg.qr(A)[1],
    "np.linalg.qr r": lambda A: np.linalg.qr(A, mode="r"),
    "scipy.linalg.qr": lambda A: scipy.linalg.qr(A)[1],
    "scipy.linalg.qr r": lambda A: scipy.linalg.qr(A, mode="r")[0],
}
VECTORS_OF = {  # symmetric A -> V (squared entries: free of the sign convention)
    "np.linalg.eigh": lambda A: np.linalg.eigh(A)[1],
    "scipy.linalg.eigh": lambda A: scipy.linalg.eigh(A)[1],
}
VALUES_OF = {
    "np.linalg.eigh": lambda A: np.linalg.eigh(A)[0],
    "np.linalg.eigvalsh": np.linalg.eigvalsh,
    "scipy.linalg.eigh": lambda A: scipy.linalg.eigh(A)[0],
    "scipy.linalg.eigvalsh": scipy.linalg.eigvalsh,
    "scipy.linalg.eigh(eigvals_only=True)": lambda A: scipy.linalg.eigh(A, eigvals_only=True),
}
U_OF = {
    "np.linalg.svd": lambda A: np.linalg.svd(A)[0],
    "np.linalg.svd reduced": lambda A: np.linalg.svd(A, full_matrices=False)[0],
    "scipy.linalg.svd": lambda A: scipy.linalg.svd(A)[0],
}
S_OF = {
    "np.linalg.svd": lambda A: np.linalg.svd(A)[1],
    "np.linalg.svd(compute_uv=False)": lambda A: np.linalg.svd(A, compute_uv=False),
    "scipy.linalg.svdvals": scipy.linalg.svdvals,
    "scipy.linalg.svd(compute_uv=False)": lambda A: scipy.linalg.svd(A, compute_uv=False),
}


def pair_program(first, second, first_of, second_of, squared: bool, second_first: bool):
    fa, fb = first_of[first], second_of[second]

    def f(A, W):
        parts = [lambda: np.sum(W * (fa(A) ** 2 if squared else fa(A))), lambda: np.sum(np.sin(fb(A)))]
        if second_first:
            parts.reverse()
        values = [p() for p in parts]
        return values[0] + values[1]

    f.__name__ = "pair_spelling"
    return f


FAMILIES = {  # name -> (first's spellings, second's, the factorisation, squared first, symmetric A)
    "qr": (Q_OF, R_OF, "geqrf", False, False),
    "eigh": (VECTORS_OF, VALUES_OF, "syevd", True, True),
    "svd": (U_OF, S_OF, "gesvd", True, False),
}

PAIRS = [pytest.param(family, a, b, o, id=f"{family}-{a}-{b}-{'values first' if o else 'vectors first'}")
         for family, (first, second, *_) in FAMILIES.items() for a in first for b in second for o in (False, True)]


def _matrix(n: int, symmetric: bool, seed: int):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n)) + (0 if symmetric else np.eye(n))
    return (A + A.T) / 2 + np.diag(np.arange(n)) if symmetric else A, rng.standard_normal((n, n))


@pytest.mark.parametrize("family, first, second, second_first", PAIRS)
def test_decompositions_run_once(family, first, second, second_first):
    """Vectors from one spelling and values from another: one decomposition, the value NumPy's."""
    first_of, second_of, lapack, squared, symmetric = FAMILIES[family]
    f = pair_program(first, second, first_of, second_of, squared, second_first)
    A, W = _matrix(5, symmetric, seed=4)
    g = pb.differentiate(f)
    c = counts(g.ir(A, W))
    assert c[lapack] == 1, g.source(A, W)
    np.testing.assert_allclose(g.value_and_grad(A, W)[0], f(A, W), rtol=1e-10)  # f on arrays: NumPy, SciPy


@pytest.mark.parametrize("family, first, second, second_first", [p for p in PAIRS if not p.values[3]][::2])
def test_decompositions_by_finite_differences(family, first, second, second_first):
    first_of, second_of, _, squared, symmetric = FAMILIES[family]
    f = pair_program(first, second, first_of, second_of, squared, second_first)
    A, W = _matrix(4, symmetric, seed=5)
    if symmetric:  # eigh reads one triangle: along symmetric directions
        check_grads(lambda a, w: f((a + a.T) / 2, w), (A, W), order=1)
    else:
        check_grads(f, (A, W), order=1)


@pytest.mark.parametrize("inverse", ["np.linalg.inv", "scipy.linalg.inv"])
@pytest.mark.parametrize("factor", [np.linalg.cholesky, lambda K: scipy.linalg.cho_factor(K)[0]], ids=["cholesky",
                                                                                                  "cho_factor"])
def test_inv_of_a_cholesky_factorised_matrix_is_potri(inverse, factor):
    """inv(K) beside a Cholesky factor of K: potri of that factor, no getrf; the gradient is inv's, for
    all of dK (NumPy's inv reads all of K), beside the factor's."""
    iv = INVERSES[inverse]

    def f(K, W):
        c = factor(K)
        return np.sum(W * iv(K)) + np.sum(np.log(np.abs(np.diag(c))))

    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 5))
    K, W = x @ x.T / 5 + np.eye(5), rng.standard_normal((5, 5))
    g = pb.differentiate(f)
    c = counts(g.ir(K, W))
    assert c["getrf"] == 0 and c["getri"] + c["getri_at"] == 0 and c["potrf"] == 1 and c["po_inv"] == 1, g.source(K, W)
    value, grad = g.value_and_grad(K, W)
    inv = np.linalg.inv(K)
    np.testing.assert_allclose(value, np.sum(W * inv) + 0.5 * np.linalg.slogdet(K)[1], rtol=1e-12)
    log_diag = pb.grad(lambda K: np.sum(np.log(np.abs(np.diag(factor(K))))))(K)  # the factor alone (tested elsewhere)
    np.testing.assert_allclose(grad, -inv.T @ W @ inv.T + log_diag, rtol=1e-10, atol=1e-12)
