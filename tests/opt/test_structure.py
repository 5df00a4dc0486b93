"""The structure-aware rewrites (pullback/opt/structure.py), one at a time: each program
is traced, rewritten, compiled and compared with NumPy on random inputs, and the cubic work the
rule removes is counted."""

from __future__ import annotations

import numpy as np
import pullback.linalg as pl
import pytest

import pullback as pb
from pullback.ad.cse import cse
from pullback.backends.compiler import compile_program
from pullback.backends.numpy import backend as numpy_backend
from pullback.ir.verify import verify
from pullback.opt.simplify import simplify
from pullback.opt.structure import structure
from pullback.primitives import lax
from pullback.primitives import structural as st
from pullback.primitives.linalg import factorizations as la

DTYPES = [np.float64, np.complex128]


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _factor(rng, n, dtype):
    return (np.tril(_random(rng, (n, n), dtype)) + 3 * np.eye(n)).astype(dtype)


def _rewritten(fn, *args):
    program = cse(simplify(pb.make_ir(fn)(*args)))  # as optimize runs it: after simplify and CSE
    new = structure(program)
    verify(new)
    run, _ = compile_program(new, numpy_backend)
    return new, run(*args)


def _matrix_solves(program) -> int:
    """Triangular products and solves of matrices (not vectors), potri and symmetrisations."""
    return sum(1 for e in program.eqns if (e.prim in (la.trsm_p, la.trmm_p) and min(e.inputs[1].shape) > 1)
               or e.prim in (la.potri_p, st.add_transpose_p))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("left", [True, False])
def test_triangular_solve_of_an_outer_product_is_a_vector_solve(dtype, trans, left):
    rng = np.random.default_rng(trans + 3 * left)
    n = 5
    l, u, v = _factor(rng, n, dtype), _random(rng, n, dtype), _random(rng, n, dtype)

    def f(l, u, v):
        return lax.trsm(l, np.outer(u, v), left=left, lower=True, trans=trans)

    program, got = _rewritten(f, l, u, v)
    op = {0: l, 1: l.T, 2: l.conj().T}[trans]
    want = np.linalg.solve(op, np.outer(u, v)) if left else np.outer(u, v) @ np.linalg.inv(op)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert _matrix_solves(program) == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alphas", [(1.0, 1.0), (2.0, -0.25)])
def test_triangular_product_of_an_outer_product_and_cancellation(dtype, alphas):
    """T^{-1} (T (u v^T)) is u v^T: the product and solve of the same factor cancel (their BLAS
    alphas multiplying it)."""
    rng = np.random.default_rng(1)
    n = 4
    l, u, v = _factor(rng, n, dtype), _random(rng, n, dtype), _random(rng, n, dtype)

    def f(l, u, v):
        return lax.trsm(l, lax.trmm(l, np.outer(u, v), lower=True, trans=2, alpha=alphas[0]), lower=True, trans=2,
                        alpha=alphas[1])

    program, got = _rewritten(f, l, u, v)
    np.testing.assert_allclose(got, alphas[0] * alphas[1] * np.outer(u, v), rtol=1e-12, atol=1e-12)
    assert not any(e.prim in (la.trsm_p, la.trmm_p) for e in program.eqns)


def _cholesky_cotangent(l, lbar, folded: bool = False):
    """What reverse mode through potrf does with Lbar: sym(L^{-H} Phi(L^H Lbar) L^{-1}); ``folded``: the
    half in the outer solve's alpha, as ``transforms/readers.py`` prints it."""
    m = lax.trmm(l, lbar, left=True, lower=True, trans=2)
    phi = lax.add_diagonal(lax.tril(m), lax.mul(lax.diagonal(m), -0.5))
    x = lax.trsm(l, lax.trsm(l, phi, left=False, lower=True), left=True, lower=True, trans=2,
                 alpha=0.5 if folded else 1.0)
    s = lax.add_transpose(x) if l.dtype.kind != "c" else lax.add(x, lax.H(x))
    return s if folded else lax.mul(s, 0.5)


def _phi_reference(l, lbar):
    m = l.conj().T @ lbar
    phi = np.tril(m) - 0.5 * np.diag(np.diag(m))
    li = np.linalg.inv(l)
    x = li.conj().T @ phi @ li
    return 0.5 * (x + x.conj().T)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("folded", [False, True])
def test_lower_form_phi_and_sandwich_give_potri_and_a_rank_one_term(dtype, folded):
    """Lbar = diag(1/L_ii) - tril(a z^H) with L^H a = z: the lower part of L^H Lbar is I - z z^H
    (tril(U tril(M)) = tril(U M), the outer product through U, U U^{-1} cancelling, diag(U)/diag(L)
    the identity), so the cotangent is (potri(L) - a a^H) / 2."""
    rng = np.random.default_rng(2)
    n = 6
    x = _random(rng, (n, n), dtype)
    k = x @ x.conj().T / n + np.eye(n)
    l = np.linalg.cholesky(k)
    z = _random(rng, n, dtype)

    def f(k, z):
        l = np.linalg.cholesky(k)  # its diagonal is real
        a = lax.reshape(pl.solve_triangular(l, z, lower=True, trans=2), (n, 1))
        zc = lax.conj(lax.reshape(z, (n, 1)))
        d = lax.div(1.0, lax.real(lax.diagonal(l))).astype(l.dtype)
        lbar = lax.add_diagonal(lax.tril(lax.neg(lax.matmul(a, lax.mT(zc)))), d)
        return _cholesky_cotangent(l, lbar, folded)

    program, got = _rewritten(f, k, z)
    a = np.linalg.solve(l.conj().T, z)
    lbar = np.diag(1 / np.diag(l).real) - np.tril(np.outer(a, z.conj()))
    np.testing.assert_allclose(got, _phi_reference(l, lbar), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, 0.5 * (np.linalg.inv(l @ l.conj().T) - np.outer(a, a.conj())), rtol=1e-10,
                               atol=1e-12)
    kept = [e.prim for e in program.eqns if e.prim in (la.potrf_p, la.trsm_p, la.trmm_p, la.potri_p)]
    assert kept == [la.potrf_p, la.trsm_p, la.potri_p]


@pytest.mark.parametrize("case", ["diagonal", "not_hermitian"])
def test_structure_that_does_not_reduce_is_left_alone(case):
    """A diagonal that is not 1/diag(L) (its sandwich is dense), or an outer product whose lower
    part is not Hermitian: nothing to gain, the program keeps its solves and stays right."""
    rng = np.random.default_rng(3)
    n = 5
    l = _factor(rng, n, np.float64)
    u, v, d = rng.standard_normal((3, n))

    def f(l, u, v, d):
        uu = lax.reshape(u, (n, 1))
        vv = lax.reshape(v if case == "not_hermitian" else u, (n, 1))
        lbar = lax.add_diagonal(lax.tril(lax.matmul(uu, lax.mT(vv))), d)
        return _cholesky_cotangent(l, lbar)

    program, got = _rewritten(f, l, u, v, d)
    lbar = np.tril(np.outer(u, v if case == "not_hermitian" else u)) + np.diag(d)
    np.testing.assert_allclose(got, _phi_reference(l, lbar), rtol=1e-10, atol=1e-12)
    assert _matrix_solves(program) == 4  # trmm, two trsm and the symmetrisation: unchanged


def test_equal_outer_products_up_to_scale_merge():
    """0.5 z and z are one vector: z (0.5 z)^T + (0.5 z) z^T is one rank-1 term z z^T."""
    rng = np.random.default_rng(4)
    n = 4
    l = _factor(rng, n, np.float64)
    l[np.diag_indices(n)] = np.abs(np.diag(l))
    y = rng.standard_normal(n)

    def f(l, y):
        z = lax.reshape(pl.solve_triangular(l, y, lower=True), (n, 1))
        w = lax.reshape(pl.solve_triangular(l, lax.mul(y, 0.5), lower=True), (n, 1))
        zw = lax.add(lax.matmul(z, lax.mT(w)), lax.matmul(w, lax.mT(z)))
        x = lax.trsm(l, lax.trsm(l, lax.mul(zw, 0.5), left=False, lower=True), left=True, lower=True, trans=1)
        return lax.trsm(l, lax.trsm(l, zw, left=False, lower=True), left=True, lower=True, trans=1), x

    program, (got, _) = _rewritten(f, l, y)
    li = np.linalg.inv(l)
    z = li @ y
    np.testing.assert_allclose(got, li.T @ np.outer(z, z) @ li, rtol=1e-12, atol=1e-12)
    assert _matrix_solves(program) == 0
