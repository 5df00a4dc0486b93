"""Canonical forms before structure (issue 28): every spelling of the Gaussian likelihood
``0.5 y^T A^{-1} y + 0.5 log det A`` (A = K, or K + s I) reaches one factorisation and the gradient
prints the expert's recipe: one potrf, two triangular solves of vectors, potri and one rank-1 update;
no getrf, getri, trmm, no matrix product. Spellings are generated: the factor's front-end name x
upper/lower x the quadratic form (triangular solve, cho_solve, solve(assume_a='pos')) x the log
determinant (the factor's diagonal, slogdet, det, pullback.linalg.logdet) x jitter x call order.
Oracles: NumPy's inverse and slogdet, finite differences, the hand-written expert's memory."""

from __future__ import annotations

import itertools
import re
import tracemalloc

import numpy as np
import pullback.linalg as pl
import pytest
import scipy.linalg
from pullback.testing import check_grads, copies

import pullback as pb
from benchmarks.gp_recipes import expert

FACTORS = {  # name -> (factor(A, lower) -> (c, lower)), the lower flags it takes
    "np.linalg.cholesky": (lambda A, lower: (np.linalg.cholesky(A), True), (True,)),
    "scipy.linalg.cholesky": (lambda A, lower: (scipy.linalg.cholesky(A, lower=lower), lower), (False, True)),
    "scipy.linalg.cholesky()": (lambda A, lower: (scipy.linalg.cholesky(A), False), (False,)),  # SciPy's default
    "scipy.linalg.cho_factor()": (lambda A, lower: scipy.linalg.cho_factor(A), (False,)),  # the spelling
    "scipy.linalg.cho_factor": (lambda A, lower: scipy.linalg.cho_factor(A, lower=lower), (False, True)),
    "pullback.linalg.cholesky": (lambda A, lower: (pl.cholesky(A, lower=lower), lower), (False, True)),
}


def _triangular(A, c, low, y):
    z = scipy.linalg.solve_triangular(c, y, lower=low, trans=0 if low else "T")  # L z = y, or U^T z = y
    return z @ z


QUADRATIC = {
    "solve_triangular": _triangular,
    "cho_solve": lambda A, c, low, y: y @ scipy.linalg.cho_solve((c, low), y),
    "solve(pos)": lambda A, c, low, y: y @ scipy.linalg.solve(A, y, assume_a="pos"),
}

LOGDET = {
    "diag": lambda A, c: 2 * np.sum(np.log(np.diag(c))),
    "slogdet": lambda A, c: np.linalg.slogdet(A)[1],
    "log det": lambda A, c: np.log(np.linalg.det(A)),
    "scipy det": lambda A, c: np.log(scipy.linalg.det(A)),
    "pullback.linalg.logdet": lambda A, c: pl.logdet(A),
}


def make(factor: str, lower: bool, quadratic: str, logdet: str, jitter: bool, logdet_first: bool):
    fac, quad, ld = FACTORS[factor][0], QUADRATIC[quadratic], LOGDET[logdet]

    def nll(K, y):
        A = K + 0.1 * np.eye(K.shape[0]) if jitter else K
        c, low = fac(A, lower)
        if logdet_first:
            d = ld(A, c)
            q = quad(A, c, low, y)
        else:
            q = quad(A, c, low, y)
            d = ld(A, c)
        return 0.5 * q + 0.5 * d

    nll.__name__ = f"nll_{abs(hash((factor, lower, quadratic, logdet, jitter, logdet_first)))}"
    return nll


SPELLINGS = [
    pytest.param(f, lo, q, ld, j, o, id=f"{f}-{'lower' if lo else 'upper'}-{q}-{ld}-{'jitter' if j else 'K'}-"
                                         f"{'logdet first' if o else 'solve first'}")
    for f, (_, lowers) in FACTORS.items() for lo in lowers for q in QUADRATIC for ld in LOGDET
    for j, o in itertools.product((False, True), (False, True))
    if not (q == "solve(pos)" and ld != "diag" and f != "np.linalg.cholesky")  # the factor then unused: once
]


def _problem(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n))
    return x @ x.T / n + np.eye(n), rng.standard_normal(n)


def _oracle(k, y, jitter: bool):
    a = k + 0.1 * np.eye(len(k)) if jitter else k
    inv = np.linalg.inv(a)
    alpha = inv @ y
    return 0.5 * y @ alpha + 0.5 * np.linalg.slogdet(a)[1], 0.5 * (inv - np.outer(alpha, alpha))


def calls(source: str) -> dict[str, int]:
    """LAPACK/BLAS calls by routine (dtype prefix dropped), and lines with a NumPy product ``@``."""
    counts: dict[str, int] = {}
    for name in re.findall(r"(?:lapack|blas)\.[sdcz](\w+)\(", source):
        counts[name] = counts.get(name, 0) + 1
    counts["@"] = sum(" @ " in line and not line.lstrip().startswith("#") for line in source.splitlines())
    return counts


@pytest.mark.parametrize("factor, lower, quadratic, logdet, jitter, logdet_first", SPELLINGS)
def test_every_spelling_prints_the_recipe(factor, lower, quadratic, logdet, jitter, logdet_first):
    fn = make(factor, lower, quadratic, logdet, jitter, logdet_first)
    k, y = _problem(7, seed=1)
    g = pb.differentiate(fn)
    source = g.source(k, y)
    c = calls(source)
    assert c.pop("potrf", 0) == 1, source  # one factorisation
    assert c.pop("potri", 0) == 1, source
    assert c.pop("trsm", 0) + c.pop("trsv", 0) + 2 * c.pop("potrs", 0) <= 2, source  # two solves of vectors
    assert c.pop("ger", 0) + c.pop("syr", 0) == 1, source  # the rank-1 update into potri's buffer
    assert c.pop("@") <= 1, source  # the value's dot product; no matrix product
    assert not {k: v for k, v in c.items() if v}, (c, source)  # no getrf, getri, trmm, gemm, syrk
    value, grad = g.value_and_grad(k, y)
    want_value, want_grad = _oracle(k, y, jitter)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("factor, lower, quadratic, logdet, jitter, logdet_first",
                         [s for s in SPELLINGS if s.values[4] and s.values[5]])
def test_gradients_by_finite_differences(factor, lower, quadratic, logdet, jitter, logdet_first):
    """Along symmetric directions only (the factorisations read one triangle of A)."""
    fn = make(factor, lower, quadratic, logdet, jitter, logdet_first)
    k, y = _problem(4, seed=2)
    check_grads(lambda a, y: fn((a + a.T) / 2, y), (k, y), order=1)


def _peak(fn, *args) -> float:
    fn(*args)
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("factor, lower", [("scipy.linalg.cho_factor()", False), ("scipy.linalg.cholesky()", False),
                                           ("np.linalg.cholesky", True), ("scipy.linalg.cho_factor", True)])
@pytest.mark.parametrize("quadratic, logdet", [("cho_solve", "diag"), ("solve_triangular", "slogdet"),
                                               ("solve(pos)", "slogdet")])
def test_as_lean_as_the_expert(factor, lower, quadratic, logdet):
    """No more n x n buffers than the expert's one (potrf's factor, overwritten by potri, then the
    gradient) beside the result, and nothing copied behind the program's back."""
    n = 256
    k, y = _problem(n, seed=3)
    g = pb.value_and_grad(make(factor, lower, quadratic, logdet, False, False))
    assert [c for c in copies(g, k, y) if c.hidden] == []
    ours, theirs = _peak(g, k, y), _peak(expert, k, y)
    assert ours <= theirs + 0.25 * n * n * 8, (ours / (n * n * 8), theirs / (n * n * 8))


def lu_solve_beside_cholesky(A, b):
    return np.sum(np.linalg.solve(A, b)) + np.linalg.slogdet(A)[1] + np.sum(np.log(np.diag(np.linalg.cholesky(A))))


def test_an_lu_solve_keeps_its_factorisation():
    """The LU solve's derivative sees all of dA (its gradient -(A^{-T} 1) x^T is not symmetric), so its
    getrf is not replaced by the Cholesky factor; the value and gradient are the NumPy oracle's."""
    k, b = _problem(6, seed=4)
    g = pb.differentiate(lu_solve_beside_cholesky)
    source = g.source(k, b)
    assert calls(source).get("getrf") == 1 and calls(source).get("potrf") == 1, source
    value, grad = g.value_and_grad(k, b)
    inv = np.linalg.inv(k)
    x = inv @ b
    np.testing.assert_allclose(value, x.sum() + 1.5 * np.linalg.slogdet(k)[1], rtol=1e-12)
    want = -np.outer(inv.T @ np.ones(6), x) + inv.T + 0.5 * inv
    np.testing.assert_allclose(grad, want, rtol=1e-10, atol=1e-12)


def test_the_sign_of_a_merged_slogdet():
    """slogdet's sign from the Cholesky factor is +1 (no getrf), as NumPy's for a positive definite A."""
    def f(A):
        L = np.linalg.cholesky(A)
        sign, logdet = np.linalg.slogdet(A)
        return sign * logdet + np.sum(L)

    k, _ = _problem(5, seed=5)
    source = pb.differentiate(f).source(k)
    assert "getrf" not in source and calls(source).get("potrf") == 1, source
    value, _ = pb.value_and_grad(f)(k)
    np.testing.assert_allclose(value, np.prod(np.linalg.slogdet(k)) + np.linalg.cholesky(k).sum(), rtol=1e-12)
