"""No hidden copies (issue 16): every matrix the generated code hands SciPy's LAPACK/BLAS is in the
order the routine reads, so f2py copies nothing behind the program's back. Counted by
``pullback.testing.copies``; the gradients' values are checked against central differences of the
plain NumPy function, and the layout-dependent printings (a triangular solve, a product, a
Cholesky factor, inverse or rank-1 update of an F-ordered LAPACK result) against SciPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from pullback.testing import copies, counting_copies, numerical_jvp
from scipy.linalg import blas, lapack

import pullback as pb
from benchmarks.gp_recipes import nll_cho_solve, nll_cholesky, nll_solve
from examples import sparse_gp
from pullback import linalg as pla

RNG = np.random.default_rng(16)
N = 256  # large enough for the memory plan's in-place calls (overwrite_*) and SciPy's BLAS products


def general(n):
    return RNG.standard_normal((n, n)) + n ** 0.5 * np.eye(n)


def spd(n):
    x = RNG.standard_normal((n, n))
    return x @ x.T / n + np.eye(n)


def distinct(n):
    """Symmetric, eigenvalues 1, 2, ..., n: eigenvectors differentiable far from degeneracy."""
    q = np.linalg.qr(RNG.standard_normal((n, n)))[0]
    k = (q * np.arange(1.0, n + 1)) @ q.T
    return (k + k.T) / 2


# --- the counter ---------------------------------------------------------------------------------

def test_the_counter_sees_what_f2py_copies():
    a = general(8)
    with counting_copies() as record:
        lapack.dgetrf(np.asfortranarray(a), overwrite_a=1)  # read in place
        lapack.dgetrf(a.T, overwrite_a=1)  # the F-view: in place
        lapack.dgetrf(a, overwrite_a=1)  # C-ordered, to be overwritten: a hidden copy
        lapack.dgetrf(a)  # copied anyway (to be overwritten): not hidden
        lapack.dgetrf(a.T)  # copied anyway, F-ordered or not
        blas.dgemm(1.0, a, a.T)  # an input read in place only if F-ordered
        blas.dgemm(1.0, a.T, a.T, trans_a=1)
    assert [(c.routine, c.argument, c.hidden, c.reordered) for c in record] == [
        ("dgetrf", "a", True, True), ("dgetrf", "a", False, True), ("dgetrf", "a", False, False),
        ("dgemm", "a", True, True)]
    assert type(lapack.dgetrf).__name__ == "fortran"  # the wrappers are gone


# --- the gradients ---------------------------------------------------------------------------------

W = RNG.standard_normal((N, N))


def eigh_loss(K, W):
    w, v = np.linalg.eigh(K)
    return np.sum(w * np.arange(N)) + np.sum(W * v * v)  # v * v: free of the eigenvectors' signs


def svd_loss(A, W):
    u, s, vh = np.linalg.svd(A)
    return np.sum(s) + np.sum(W * u * u) + np.sum(W * vh * vh)


def qr_loss(A, W):
    q, r = np.linalg.qr(A)
    return np.sum(W * q) + np.sum(W * r)


CASES = {
    "gp cholesky": (nll_cholesky, lambda: (spd(N), RNG.standard_normal(N)), (0, 1)),
    "gp cho_solve": (nll_cho_solve, lambda: (spd(N), RNG.standard_normal(N)), (0, 1)),
    "gp solve(pos)": (nll_solve, lambda: (spd(N), RNG.standard_normal(N)), (0, 1)),
    "gp solve(pos), blocked mirror": (nll_solve, lambda: (spd(600), RNG.standard_normal(600)), (0,)),
    "inv": (lambda A, W: np.sum(W * np.linalg.inv(A)), lambda: (general(N), W), (0,)),
    "solve": (lambda A, B, W: np.sum(W * np.linalg.solve(A, B)), lambda: (general(N), W.T.copy(), W), (0, 1)),
    "det": (np.linalg.det, lambda: (general(N) / N ** 0.5,), (0,)),
    "slogdet": (lambda A: np.linalg.slogdet(A)[1], lambda: (general(N),), (0,)),
    "cholesky": (lambda K, W: np.sum(W * np.linalg.cholesky(K)), lambda: (spd(N), W), (0,)),
    "eigh": (eigh_loss, lambda: (distinct(N), W), (0,)),
    "svd": (svd_loss, lambda: (general(N), W), (0,)),
    "qr": (qr_loss, lambda: (general(N), W), (0,)),
}


def _direction(a):
    """A random direction; symmetric for a symmetric matrix (factorisations read one triangle of it)."""
    t = RNG.standard_normal(np.shape(a))
    return (t + t.T) / 2 if t.ndim == 2 and np.array_equal(a, a.T) else t


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_copy_nothing_behind_the_programs_back(name):
    f, make, argnums = CASES[name]
    args = make()
    g = pb.value_and_grad(f, argnums=argnums)
    expected_value = f(*args)
    value, grads = g(*args)  # compiles
    hidden = [c for c in copies(g, *args) if c.hidden]
    assert hidden == [], ", ".join(map(str, hidden))
    np.testing.assert_allclose(value, expected_value, rtol=1e-9)
    tangents = [_direction(a) if k in argnums else np.zeros(np.shape(a)) for k, a in enumerate(args)]
    grads = grads if len(argnums) > 1 else (grads,)
    exact = sum(np.vdot(gr, tangents[k]) for gr, k in zip(grads, argnums))
    numeric = np.sum(numerical_jvp(f, args, tangents, 1e-6)[0])
    np.testing.assert_allclose(exact, numeric, rtol=1e-5, atol=1e-6 * max(1.0, abs(numeric)))


def test_sparse_gp_copies_nothing():
    """The 15 MB copy was the n x u kernel block handed to gemm in the wrong order."""
    m, u = 3000, 40
    X = RNG.uniform(-3, 3, (m, 2))
    y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(m)
    args = (X[:u].copy(), 0.1, 0.2, -2.0, X, y)
    value, grads = sparse_gp.bound.value_and_grad(*args)
    assert [c for c in copies(sparse_gp.bound.value_and_grad, *args) if c.hidden] == []
    np.testing.assert_allclose(value, sparse_gp.sgp_bound(*args), rtol=1e-9)
    t = RNG.standard_normal((u, 2))
    numeric = numerical_jvp(lambda Z: sparse_gp.sgp_bound(Z, *args[1:]), [args[0]], [t], 1e-6)[0]
    np.testing.assert_allclose(np.vdot(grads[0], t), numeric, rtol=1e-5)


# --- printings that depend on an operand's order ------------------------------------------------------
# getri's inverse is F-ordered, its .T C-ordered: each kind of operand reaches each printing.

def _operand(x, fortran: bool):
    """inv(x) as LAPACK leaves it (F-ordered), or its transpose (C-ordered)."""
    inv = np.linalg.inv(x)
    return inv if fortran else inv.T


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("a_fortran", [False, True])
@pytest.mark.parametrize("b_fortran", [False, True])
@pytest.mark.parametrize("trans, lower, side", [(0, True, "left"), (1, False, "left"), (2, True, "right"),
                                                (2, False, "left"), (1, True, "right")])
def test_triangular_solves_and_products_in_either_order(dtype, a_fortran, b_fortran, trans, lower, side):
    n = 40
    A, B = general(n).astype(dtype), general(n).astype(dtype)
    if np.dtype(dtype).kind == "c":
        A, B = A + 1j * RNG.standard_normal((n, n)), B + 1j * RNG.standard_normal((n, n))

    def f(A, B):
        a, b = _operand(A, a_fortran), _operand(B, b_fortran)
        return (pla.solve_triangular(a, b, trans=trans, lower=lower, side=side),
                pla.trmm(a, b, trans=trans, lower=lower, side=side))

    compiled = pb.differentiate(f)
    x, y = compiled(A, B)
    a, b = _operand(A, a_fortran), _operand(B, b_fortran)
    t = np.tril(a) if lower else np.triu(a)
    op = {0: t, 1: t.T, 2: t.conj().T}[trans]
    expected_x = scipy.linalg.solve(op, b) if side == "left" else scipy.linalg.solve(op.T, b.T).T
    np.testing.assert_allclose(x, expected_x, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(y, op @ b if side == "left" else b @ op, rtol=1e-9, atol=1e-11)
    # a conjugate transpose of an F-ordered triangle has no BLAS flag: that one copy is allowed
    allowed = int(np.dtype(dtype).kind == "c" and trans == 2 and a_fortran != b_fortran) * 2
    assert sum(c.routine[1:] in ("trsm", "trmm") and c.argument == "a" for c in copies(compiled, A, B)) <= allowed


@pytest.mark.parametrize("a_fortran", [False, True])
@pytest.mark.parametrize("b_fortran", [False, True])
def test_products_read_either_order(a_fortran, b_fortran):
    n = 128  # SciPy's gemm, in a program that calls LAPACK
    A, B = general(n), general(n)

    def f(A, B):
        return _operand(A, a_fortran) @ _operand(B, b_fortran), _operand(A, a_fortran).T @ _operand(B, b_fortran)

    compiled = pb.jit(f)
    out = compiled(A, B)
    a, b = _operand(A, a_fortran), _operand(B, b_fortran)
    np.testing.assert_allclose(out[0], a @ b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out[1], a.T @ b, rtol=1e-9, atol=1e-12)
    assert "dgemm" in pb.source(compiled, A, B)
    assert [c for c in copies(compiled, A, B) if c.hidden] == []


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("n", [30, 600])  # potri's triangle mirrored at once, and by blocks
def test_cholesky_inverse_and_rank_one_update_of_a_fortran_ordered_matrix(dtype, n):
    K = spd(n).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = RNG.standard_normal((n, n)) + 1j * RNG.standard_normal((n, n))
        K = x @ x.conj().T / n + np.eye(n)
    v = RNG.standard_normal(n).astype(dtype)

    def f(K, v):
        S = np.linalg.inv(K)  # F-ordered
        L = pla.cholesky(S)
        return L, pla.cholesky_inverse(L), pla.ger(S, v, v), pla.solve(S, v, assume_a="pos")

    compiled = pb.differentiate(f)
    L, Kinv_inv, updated, x = compiled(K, v)
    S = np.linalg.inv(K)
    np.testing.assert_allclose(L, np.linalg.cholesky(np.tril(S) + np.tril(S, -1).conj().T), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(Kinv_inv, np.linalg.inv(L @ L.conj().T), rtol=1e-7, atol=1e-9)
    expected = S + np.outer(v, v)  # entries that cancel to near zero are held to the result's scale
    np.testing.assert_allclose(updated, expected, rtol=1e-12, atol=1e-13 * np.abs(expected).max())
    np.testing.assert_allclose(S @ x, v, rtol=1e-7, atol=1e-9)
    assert [c for c in copies(compiled, K, v) if c.hidden] == []
