"""The Gaussian-process likelihood's gradient is the expert's recipe (issue 16): potrf, two
triangular solves of vectors (potrs), potri and one rank-1 term, K_bar = (K^{-1} - a a^H) / 2
with a = K^{-1} y, whether the user writes it through cholesky + solve_triangular or through
cho_factor + cho_solve; nothing else of O(n^3)."""

from __future__ import annotations

import re

import numpy as np
import pullback.linalg as pl
import pytest
import scipy.linalg
from pullback.testing import check_grads

import pullback as pb


def nll_triangular(K, y):
    L = np.linalg.cholesky(K)
    z = pl.solve_triangular(L, y, lower=True)
    return 0.5 * np.real(np.vdot(z, z)) + np.sum(np.log(np.real(np.diag(L))))


def nll_cho_solve(K, y):
    c = pl.cho_factor(K, lower=True)
    a = pl.cho_solve(c, y)
    return 0.5 * np.real(np.vdot(y, a)) + np.sum(np.log(np.real(np.diag(c[0]))))


def nll_cho_factor_default(K, y):  # SciPy's default: the upper factor (issue 28)
    c = scipy.linalg.cho_factor(K)
    a = scipy.linalg.cho_solve(c, y)
    return 0.5 * np.real(np.vdot(y, a)) + np.sum(np.log(np.real(np.diag(c[0]))))


def nll_upper_triangular(K, y):  # U^H z = y with SciPy's upper cholesky
    U = scipy.linalg.cholesky(K)
    z = scipy.linalg.solve_triangular(U, y, trans="C")
    return 0.5 * np.real(np.vdot(z, z)) + np.sum(np.log(np.real(np.diag(U))))


def nll_real(K, y):  # the spelling of the issue, for real data
    L = np.linalg.cholesky(K)
    z = pl.solve_triangular(L, y, lower=True)
    return 0.5 * z @ z + np.sum(np.log(np.diag(L)))


SPELLINGS = [nll_triangular, nll_cho_solve, nll_cho_factor_default, nll_upper_triangular]


def _problem(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n))
    y = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((n, n))
        y = y + 1j * rng.standard_normal(n)
    k = x @ x.conj().T / n + np.eye(n)
    return k.astype(dtype), y.astype(dtype)


def _expert(k, y):
    """0.5 (K^{-1} - a a^H), a = K^{-1} y (the gradient as dL = Re tr(G^H dK))."""
    inv = np.linalg.inv(k.astype(np.complex128 if k.dtype.kind == "c" else np.float64))
    a = inv @ y
    return 0.5 * (inv - np.outer(a, a.conj()))


def _calls(source: str) -> dict[str, int]:
    """LAPACK/BLAS calls (by routine, dtype prefix dropped) and dense NumPy products in ``source``."""
    counts: dict[str, int] = {}
    for name in re.findall(r"(?:lapack|blas)\.[sdcz](\w+)\(", source):
        counts[name] = counts.get(name, 0) + 1
    for line in source.splitlines():
        if " @ " in line and not line.lstrip().startswith("#"):
            counts["@"] = counts.get("@", 0) + 1
    return counts


@pytest.mark.parametrize("fn", [*SPELLINGS, nll_real])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_the_gradient_prints_the_expert_call_sequence(fn, dtype):
    if fn is nll_real and np.dtype(dtype).kind == "c":
        pytest.skip("z @ z is not a real loss for complex z")
    k, y = _problem(6, dtype)
    source = pb.differentiate(fn).source(k, y)
    calls = _calls(source)
    assert calls.pop("potrf") == 1 and calls.pop("potri") == 1
    # the two solves of vectors (potrs, spelled as two triangular solves): z = L^{-1} y and a = L^{-H} z;
    # real: trsv of the vectors themselves, one line each; complex: trsm of (n, 1) columns
    if np.dtype(dtype).kind == "f":
        assert calls.pop("trsv") == 2 and "reshape" not in source
    else:
        assert calls.pop("trsm") == 2
        assert re.findall(r"trsm\(1\.0, \w+(?:\.T)?, (\w+)\.T", source)  # of (n, 1) vectors:
        for rhs in re.findall(r"trsm\(1\.0, \w+(?:\.T)?, (\w+)\.T", source):
            assert re.search(rf"{rhs} = .*reshape\(6, 1\)|{rhs} = .*trsm", source), rhs
    assert calls.pop("ger", 0) + calls.pop("geru", 0) == 1  # the rank-1 update, into potri's buffer
    assert calls.pop("@", 0) <= 1  # the value's dot product; no matrix product
    assert not calls, calls  # no trmm, gemm, syrk, no other trsm
    assert "np.tril" not in source and "add_transpose" not in source


@pytest.mark.parametrize("fn", SPELLINGS)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("n", [1, 7])
def test_values_and_gradients(fn, dtype, n):
    k, y = _problem(n, dtype, seed=n)
    value, grad = pb.differentiate(fn).value_and_grad(k, y)
    l = np.linalg.cholesky(k)
    want = 0.5 * np.real(np.vdot(y, np.linalg.solve(k, y))) + np.sum(np.log(np.real(np.diag(l))))
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grad, _expert(k, y), rtol=1e-10, atol=1e-12)
    # cholesky reads one triangle of K: finite differences along Hermitian directions only
    check_grads(lambda a, y: fn((a + a.conj().T) / 2, y), (k, y), order=1)


@pytest.mark.parametrize("fn", SPELLINGS)
def test_float32(fn):
    k, y = _problem(8, np.float32, seed=3)
    value, grad = pb.differentiate(fn).value_and_grad(k, y)
    assert grad.dtype == np.float32
    np.testing.assert_allclose(grad, _expert(k, y), rtol=2e-4, atol=2e-5)


def test_second_order_through_the_recipe():
    """The recipe is the gradient program; differentiating again still matches finite differences."""
    k, y = _problem(4, np.float64, seed=5)
    check_grads(lambda a, y: nll_real((a + a.T) / 2, y), (k, y), order=2)
