"""Cross-country mode (pullback/opt/contraction_order.py): each chain of contractions in
Jacobian programs is evaluated in its cheapest order; values against NumPy, flops against the
matrix-chain optimum (a formula)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pullback as pb
from pullback.ad.dce import dce
from pullback.api.transforms import Staged
from pullback.opt.contraction_order import program_flops, reorder_contractions


def chain_flops(dims: list[int]) -> int:
    """Fewest multiply-adds of a matrix chain with these dimensions (the textbook DP, an independent oracle)."""
    n = len(dims) - 1
    best = [[0] * n for _ in range(n)]
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            best[i][j] = min(best[i][k] + best[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1] for k in range(i, j))
    return best[0][n - 1]


def test_a_chain_100x_cheaper_in_the_other_order_is_printed_in_it(rng):
    A, B, C = rng.standard_normal((1, 400)), rng.standard_normal((400, 400)), rng.standard_normal((400, 400))
    f = pb.differentiate(lambda x: A @ (B @ (C @ x)))
    x = rng.standard_normal(400)
    naive = 400 * 400 * 400 + 400 * 400  # jacfwd as traced: A @ (B @ C)
    program = f.ir(x, stage="jacfwd")
    assert program_flops(program) == chain_flops([1, 400, 400, 400]) <= naive / 100
    source = f.source(x, program="jacfwd")
    assert "dot = A @ B" in source and "dot @ C" in source
    np.testing.assert_allclose(f.jacfwd(x), A @ B @ C, rtol=1e-10)


@pytest.mark.parametrize("mode", ["jacfwd", "jacrev", "jacobian"])
@pytest.mark.parametrize("wide", [True, False], ids=["reverse wins", "forward wins"])
def test_both_modes_end_in_the_cheap_order(mode, wide, rng):
    """Output 2 x input 300 (reverse order wins) and output 300 x input 2 (forward wins)."""
    n = 300
    A = rng.standard_normal((2, n) if wide else (n, n))
    B = rng.standard_normal((n, n))
    C = rng.standard_normal((n, n) if wide else (n, 2))
    x = rng.standard_normal(C.shape[1])
    f = pb.differentiate(lambda x: A @ (B @ (C @ x)))
    dims = [A.shape[0], n, n, C.shape[1]]
    program = f.ir(x, stage=mode)
    # every equation but the chain (a transpose of the result at most) is free or O(n^2)
    assert program_flops(program) <= chain_flops(dims) + 2 * n * n
    np.testing.assert_allclose(getattr(f, mode)(x), A @ B @ C, rtol=1e-10)


def test_diagonal_factors_are_applied_to_the_small_side(rng):
    """Laue's example 7: the Jacobian of A tanh(B tanh(C x)) is A diag(u) B diag(v) C; with A of
    2 rows, ((A u) B v) C costs 2 n^2 per product instead of n^3."""
    n = 200
    A, B, C = rng.standard_normal((2, n)), rng.standard_normal((n, n)) / 10, rng.standard_normal((n, n)) / 10
    x = rng.standard_normal(n)
    f = pb.differentiate(lambda x: A @ np.tanh(B @ np.tanh(C @ x)))
    v = 1 - np.tanh(C @ x) ** 2
    u = 1 - np.tanh(B @ np.tanh(C @ x)) ** 2
    np.testing.assert_allclose(f.jacfwd(x), A @ np.diag(u) @ B @ np.diag(v) @ C, rtol=1e-10)
    assert program_flops(f.ir(x, stage="jacfwd")) < 20 * n * n


def _run(program, args):
    return Staged(program)(*args)


@settings(max_examples=25, deadline=None)
@given(dims=st.lists(st.sampled_from([0, 1, 2, 3, 7, 16, 40]), min_size=4, max_size=8),
       splits=st.lists(st.integers(0, 7), min_size=8, max_size=8),
       transpose=st.booleans(), scale=st.booleans())
def test_random_chains_keep_their_values_and_never_cost_more(dims, splits, transpose, scale):
    rng = np.random.default_rng(len(dims) * 100 + sum(dims))
    mats = [rng.standard_normal((a, b)) for a, b in zip(dims[:-1], dims[1:])]
    u = rng.standard_normal(dims[1])

    def product(ms, sp):
        if len(ms) == 1:
            return ms[0]
        k = sp[0] % (len(ms) - 1) + 1
        return product(ms[:k], sp[1:]) @ product(ms[k:], sp[1:])

    def f(*ms):
        ms = list(ms)
        if scale:
            ms[0] = ms[0] * u  # a diagonal factor: A diag(u)
        if transpose:  # the same chain, read through its transpose
            return product([m.T for m in ms[::-1]], splits).T
        return product(ms, splits)

    program = pb.make_ir(f)(*mats)
    new = dce(reorder_contractions(program))
    assert program_flops(new) <= program_flops(program)
    want = f(*mats)
    np.testing.assert_allclose(_run(new, mats), want, rtol=1e-10, atol=1e-10)
    if not scale:
        opt = chain_flops(dims)
        # the result is the optimum, or the original order where it was within 10% of it
        assert sum(e.prim.name == "dot_general" for e in new.eqns) == len(mats) - 1
        assert program_flops(new) <= opt / 0.9 + 1


@pytest.mark.parametrize("shape", [(3, 40), (40, 3)])
def test_jacobian_takes_the_mode_with_fewer_flops(shape, rng):
    A = rng.standard_normal(shape)
    x = rng.standard_normal(shape[1])
    f = pb.differentiate(lambda x: np.tanh(A @ np.sin(x)) * np.sum(x ** 2))
    flops = {mode: program_flops(f.ir(x, stage=mode)) for mode in ("jacfwd", "jacrev", "jacobian")}
    assert flops["jacobian"] == min(flops["jacfwd"], flops["jacrev"])
    np.testing.assert_allclose(f.jacobian(x), f.jacfwd(x), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_other_dtypes_and_batched_products(dtype, rng):
    """A batch of chains (a batch axis shared by every operand, kept) with a transpose and a
    scaling inside, complex and single precision."""
    def draw(*shape):
        x = rng.standard_normal(shape)
        return (x + 1j * rng.standard_normal(shape) if dtype == np.complex128 else x).astype(dtype)

    A, B, C, u = draw(3, 1, 30), draw(3, 30, 30), draw(3, 30, 30), draw(3, 30)

    def f(A, B, C, u):
        return A @ (np.swapaxes(B, 1, 2) @ (C * u[:, None, :]))

    program = pb.make_ir(f)(A, B, C, u)
    new = dce(reorder_contractions(program))
    assert program_flops(new) < program_flops(program) / 10
    rtol = 1e-4 if dtype == np.float32 else 1e-12
    expected = f(A, B, C, u)  # entries near zero cancel: their error is relative to the largest
    np.testing.assert_allclose(_run(new, (A, B, C, u)), expected, rtol=rtol, atol=rtol * np.abs(expected).max())


def test_a_long_chain_is_read_without_recursion_and_kept(rng):
    """Beyond GREEDY_MAX operands the order is kept; reading the chain must not recurse per link."""
    mats = [rng.standard_normal((2, 2)) for _ in range(1500)]

    def f(x):
        for m in mats:
            x = m @ x
        return x

    x = rng.standard_normal((2, 2))
    program = pb.make_ir(f)(x)
    assert reorder_contractions(program) is program
    np.testing.assert_allclose(_run(program, (x,)), f(x), rtol=1e-8)
