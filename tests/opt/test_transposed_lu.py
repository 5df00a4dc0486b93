"""LU of A^T for a row-major A (``pullback.opt.transposed_lu``, issue 28): getrf reads the F-view of
every matrix it factorises, so f2py copies A's buffer as it lies instead of transposing it, whatever
LU spelling reads the factors; the readers' transposed forms give NumPy's values. Oracles: NumPy's
and SciPy's own inv, solve, det, slogdet, lu_solve, and central finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from pullback.testing import check_grads, copies

import pullback as pb
from pullback.opt.pipeline import optimize
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la

RNG = np.random.default_rng(28)
N = 40


def general(n, dtype="float64"):
    a = RNG.standard_normal((n, n)) + n ** 0.5 * np.eye(n)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal((n, n))
    return a.astype(dtype)


def spelling(name: str, n: int):
    """(A, B) -> a real loss reading A's factors one way or another, at size n."""
    W = np.resize(np.linspace(-1.0, 1.0, 7 * n), (n, n))
    lu_solve = scipy.linalg.lu_solve
    losses = {
        "solve": lambda A, B: np.sum(W[:, :3] * np.linalg.solve(A, B)),
        "solve, vector": lambda A, B: np.sum(W[0] * np.linalg.solve(A, B[:, 0])),
        "inv": lambda A, B: np.sum(W * np.linalg.inv(A)),
        "slogdet": lambda A, B: np.linalg.slogdet(A)[1],
        "det": lambda A, B: np.linalg.det(A / n ** 0.5),
        "lu_solve": lambda A, B: np.sum(W[:, :3] * lu_solve(scipy.linalg.lu_factor(A), B)),
        "lu_solve, trans=1": lambda A, B: np.sum(W[:, :3] * lu_solve(scipy.linalg.lu_factor(A), B, trans=1)),
        "lu_solve, trans=2": lambda A, B: np.sum(W[:, :3] * lu_solve(scipy.linalg.lu_factor(A), B, trans=2)),
        "inv + slogdet + solve": lambda A, B: (np.sum(W * np.linalg.inv(A)) + np.linalg.slogdet(A)[1]
                                               + np.sum(np.linalg.solve(A, B))),
    }
    return losses[name]


NAMES = ["solve", "solve, vector", "inv", "slogdet", "det", "lu_solve", "inv + slogdet + solve"]
# lu_solve with trans=1 or 2 is not yet brought to getrs (``opt.canonical``): it differentiates through
# the factors, whose readers (triangular solves and products) have no form for A^T's
THROUGH_FACTORS = ["lu_solve, trans=1", "lu_solve, trans=2"]


def getrfs(program) -> list:
    return [e for e in program.eqns if e.prim is la.getrf_p]


@pytest.mark.parametrize("name", NAMES)
def test_getrf_reads_the_fortran_view(name):
    """One getrf, of A^T (not of the input itself), and no reordering copy of the factorised matrix (counted
    at n = 300, where products and in-place updates print as they do at scale)."""
    A, B = general(N), RNG.standard_normal((N, 3))
    program = pb.differentiate(spelling(name, N)).ir(A, B)
    (getrf,) = getrfs(program)
    assert getrf.inputs[0] is not program.inputs[0]
    n = 300
    A, B = general(n), RNG.standard_normal((n, 3))
    grad = pb.value_and_grad(spelling(name, n))
    grad(A, B)
    found = copies(grad, A, B, min_size=n * n)
    assert [str(c) for c in found if c.routine.endswith("getrf") and c.reordered] == []


@pytest.mark.parametrize("name", NAMES + THROUGH_FACTORS)
def test_values_and_gradients(name):
    f = spelling(name, N)
    A, B = general(N), RNG.standard_normal((N, 3))
    value, _ = pb.value_and_grad(f)(A, B)
    np.testing.assert_allclose(value, f(A, B), rtol=1e-10)
    check_grads(f, (A, B), order=1, modes=("rev",))


def test_complex_solves_with_the_conjugate_transpose_keep_a_factors():
    """A^H is conj(A^T): getrs cannot apply it to A^T's factors without conjugating, so a complex
    matrix solved both ways (the gradient of a solve) is factorised as it stands; values are NumPy's."""
    A = general(6, "complex128")
    b = RNG.standard_normal(6) + 1j * RNG.standard_normal(6)

    def f(A, b):
        return np.sum(np.abs(np.linalg.solve(A, b)) ** 2)

    program = pb.differentiate(f).ir(A, b)
    (getrf,) = getrfs(program)
    assert getrf.inputs[0] is program.inputs[0]
    check_grads(f, (A, b), order=1, modes=("rev",))


def test_returned_factors_are_the_matrix_own():
    """lu_factor's factors, returned, are A's (SciPy's), not A^T's."""
    A = general(8)

    def f(A):
        lu, piv = scipy.linalg.lu_factor(A)
        return lu, np.sum(lu)

    lu, _ = pb.jit(f)(A)
    np.testing.assert_allclose(lu, scipy.linalg.lu_factor(A)[0], rtol=1e-12)


def test_the_rewrite_is_stable():
    """Optimising again leaves the factorisation of A^T as it is (no flip back to A)."""
    A = general(8)
    program = pb.differentiate(spelling("inv + slogdet + solve", 8)).ir(A, RNG.standard_normal((8, 3)))
    again = optimize(program)
    for p in (program, again):
        (getrf,) = getrfs(p)
        assert getrf.inputs[0] is not p.inputs[0]
        assert sum(e.prim is fa.gesv_p and e.params.get("trans") == la.Trans.T for e in p.eqns) == 1


def test_gp_with_inv_and_slogdet_prints_the_lu_experts_recipe():
    """``0.5 y^T inv(K) y + 0.5 slogdet(K)``: getrf of K's F-view, getri in place (``overwrite_lu``), the
    products with y as matrix-vector products in one line each (no ``reshape`` to a column and back),
    the scaling in place and one rank-1 update in place: the expert's calls and buffers, with the
    expert's values (``benchmarks.gp_recipes.expert_lu``)."""
    from benchmarks.gp_recipes import expert_lu, nll_inv_slogdet, problem

    n = 300  # the memory plan's in-place calls
    K, y = problem(n)
    f = pb.differentiate(nll_inv_slogdet)
    source = f.source(K, y)
    assert "dgetrf(K_T)" in source and "overwrite_lu=1" in source and "reshape" not in source
    assert source.count("scipy.linalg.") == 3 and "dger(" in source and "overwrite_a=1" in source
    assert sum(line.strip().endswith("@ y") for line in source.splitlines()) == 3  # value, and a, b of the update
    value, grad = f.value_and_grad(K, y)
    want_value, want_grad = expert_lu(K, y)
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-8, atol=1e-12)
    assert [str(c) for c in copies(f.value_and_grad, K, y, min_size=n * n)] == ["dgetrf(a: 300x300, copy)"]


def test_the_transposed_solve_differentiates_again():
    """A gradient holding ``gesv(trans=T)`` (the pass's form of ``solve``) differentiated again by the
    Hessian: its JVP rule (``op(A)^{-1} (db - op(dA) x)``), with constant and traced operands, against
    central differences of NumPy's gradient ``(A^{-T} g, -A^{-T} g x^T)``, g = 2x."""
    from pullback.primitives.linalg import factor_solves as fa

    rng = np.random.default_rng(3)
    A, b = rng.standard_normal((4, 4)) + 4 * np.eye(4), rng.standard_normal(4)

    def f(A, b):
        return np.sum(np.linalg.solve(A, b) ** 2)

    def numpy_grad(A, b):
        x = np.linalg.solve(A, b)
        lam = np.linalg.solve(A.T, 2 * x)
        return -np.outer(lam, x), lam

    d = pb.differentiate(f, argnums=(0, 1))
    assert any(e.prim is fa.gesv_p and e.params.get("trans") for e in d._stage("hessian", (A, b)).program.eqns)
    H = d.hessian(A, b)
    eps = 1e-6
    for i, (shape, which) in enumerate([((4, 4), 0), ((4,), 1)]):
        for k in range(int(np.prod(shape))):
            e = np.zeros(shape)
            e.flat[k] = eps
            args_p, args_m = [A, b], [A, b]
            args_p[which], args_m[which] = args_p[which] + e, args_m[which] - e
            fd = [(gp - gm) / (2 * eps) for gp, gm in zip(numpy_grad(*args_p), numpy_grad(*args_m))]
            for j in range(2):  # d grad_j / d arg_i, entry k of arg_i
                got = H[j][i].reshape(*H[j][i].shape[:H[j][i].ndim - len(shape)], -1)[..., k]
                np.testing.assert_allclose(got, fd[j], rtol=1e-5, atol=1e-7)
