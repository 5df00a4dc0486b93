"""Products in every operand rank NumPy allows: ``matmul`` for ranks 1..4 with broadcast,
size-0 and size-1 batch axes; ``dot``, ``inner``, ``outer``, ``tensordot`` and ``vdot``
with 0-d and 1-d operands; ``einsum``'s interleaved form and 0-d operands. Values and
shapes against NumPy, derivatives against finite differences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb
from pullback.tree import flatten
from tests import sample
from tests.primitives.cases import make_arg

M, K, N = 2, 3, 4
BATCHES = {0: [()], 1: [(2,), (1,), (0,)], 2: [(3, 2), (1, 2), (3, 1), (0, 2)]}


def _matmul_shapes():
    """(a shape, b shape) for every pair of ranks 1..4 and batch shapes that broadcast."""
    for ra, rb in itertools.product(range(1, 5), repeat=2):
        for ba, bb in itertools.product(BATCHES[max(ra - 2, 0)], BATCHES[max(rb - 2, 0)]):
            try:
                np.broadcast_shapes(ba, bb)
            except ValueError:
                continue
            yield (K,) if ra == 1 else ba + (M, K), (K,) if rb == 1 else bb + (K, N)


MATMUL_SHAPES = list(_matmul_shapes())


def _same(ours, want, tol=1e-12):
    ours, want = flatten(ours)[0], flatten(want)[0]
    assert len(ours) == len(want)
    for o, w in zip(ours, want):
        w = np.asarray(w)
        assert np.shape(o) == w.shape and np.asarray(o).dtype == w.dtype, (np.shape(o), w.shape)
        np.testing.assert_allclose(o, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul_values_match_numpy(sa, sb, rng):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    _same(pb.jit(lambda a, b: (a @ b, np.matmul(a, b)))(a, b), (a @ b, a @ b))


@pytest.mark.parametrize("ra,rb", list(itertools.product(range(1, 5), repeat=2)))
def test_matmul_derivatives(ra, rb, rng):
    """First order for every rank pair (the batch axes of the first non-empty broadcasting pair)."""
    sa, sb = next((sa, sb) for sa, sb in MATMUL_SHAPES if (len(sa), len(sb)) == (ra, rb) and 0 not in sa + sb
                  and (sa[:-2] != sb[:-2] or ra < 3 or rb < 3))
    check_grads(lambda a, b: a @ b, [rng.standard_normal(sa), rng.standard_normal(sb)])


@pytest.mark.parametrize("sa,sb", [((2, 1, M, K), (K,)), ((K,), (2, K, N)), ((K,), (K,)), ((1, M, K), (3, K, N))],
                         ids=str)
def test_matmul_complex_second_order(sa, sb, rng):
    a, b = make_arg(rng, sa, "complex128", False), make_arg(rng, sb, "complex128", False)
    check_grads(lambda a, b: (a @ b) * (a @ b), [a, b], order=2)


def test_matmul_size_zero_batch_gradients_have_input_shapes(rng):
    a, b = rng.standard_normal((0, M, K)), rng.standard_normal(K)
    out, vjp_fn = pb.vjp(lambda a, b: a @ b, a, b)
    assert out.shape == (0, M)
    a_bar, b_bar = vjp_fn(np.ones((0, M)))
    assert a_bar.shape == a.shape and np.array_equal(b_bar, np.zeros(K))


def test_matmul_of_stacked_matrices_and_a_vector_prints_as_at(rng):
    src = pb.source(lambda a, b: (a @ b, b @ a.mT), rng.standard_normal((2, M, K)), rng.standard_normal(K))
    assert "a @ b" in src and "tensordot" not in src


def test_matmul_errors():
    with pytest.raises(pb.TracingError, match="not have enough dimensions"):
        pb.make_ir(lambda a: a @ a[0, 0])(np.ones((3, 3)))
    with pytest.raises(pb.TracingError, match="size mismatch"):
        pb.make_ir(lambda a: a @ a[0])(np.ones((2, 3, 4)))


SHAPES = [(), (K,), (M, K), (N, M, K)]
PRODUCTS = {
    "dot": np.dot, "inner": np.inner, "outer": np.outer, "vdot": np.vdot,
    "tensordot0": lambda a, b: np.tensordot(a, b, 0), "tensordot1": lambda a, b: np.tensordot(a, b, 1),
    "tensordot-axes": lambda a, b: np.tensordot(a, b, axes=([-1], [-1])),
}


def _product_cases():
    for (name, fn), sa, sb in itertools.product(PRODUCTS.items(), SHAPES, [(), (K,), (K, M), (M, K), (N, K, M)]):
        try:
            fn(np.ones(sa), np.ones(sb))
        except (ValueError, IndexError):
            continue
        yield name, sa, sb


PRODUCT_CASES = [pytest.param(*c, id="-".join(map(str, c))) for c in _product_cases()]


# the default run: each product with each rank of its first operand, the second's rotating (tests/sample.py)
@pytest.mark.parametrize("name,sa,sb", sample.sample(PRODUCT_CASES, key=lambda p: (p.values[0], len(p.values[1]))))
def test_products_of_every_rank_match_numpy(name, sa, sb, rng):
    fn = PRODUCTS[name]
    a, b = make_arg(rng, sa, "complex128", False), make_arg(rng, sb, "complex128", False)
    a, b = np.asarray(a), np.asarray(b)
    _same(pb.jit(fn)(a, b), fn(a, b))
    check_grads(fn, [a, b])


def test_einsum_interleaved_scalar_and_optimize(rng):
    a, b, c = (np.float64(v) for v in rng.standard_normal(3))
    x, y = rng.standard_normal((M, K)), rng.standard_normal((K, N))

    def f(a, b, c, x, y):
        return (np.einsum(",,", a, b, c), np.einsum(",ij,->ji", a, x, b), np.einsum("i,", x[0], c),
                np.einsum(x, [0, 1], y, [1, 2], [0, 2]), np.einsum(x, [0, 1], y, [1, 2]),
                np.einsum(x, [Ellipsis, 1], [1, Ellipsis]), np.einsum(x, [0, 1], x, [0, 1]),
                np.einsum("ij,jk", x, y, optimize="optimal"), np.einsum("ij,jk->", x, y, optimize=False))

    _same(pb.jit(f)(a, b, c, x, y), f(a, b, c, x, y))
    check_grads(f, [a, b, c, x, y], order=2)


def test_einsum_complex_interleaved(rng):
    x, y = make_arg(rng, (M, K), "complex128", False), make_arg(rng, (K,), "complex128", False)

    def f(x, y):
        return np.einsum(x, [0, 1], y, [1]), np.einsum(np.complex128(2j), [], x, [0, 1], [1, 0])

    _same(pb.jit(f)(x, y), f(x, y))
    check_grads(f, [x, y])


def test_einsum_interleaved_bad_subscript():
    with pytest.raises(pb.TracingError, match="subscripts must be"):
        pb.make_ir(lambda x: np.einsum(x, ["i", "j"]))(np.ones((2, 2)))


EINSUM_BROADCASTS = [("ij,ij->ij", (1, 4), (3, 4)), ("ij,jk->ik", (3, 1), (4, 2)), ("...i,...i->...", (1, 3), (5, 3)),
                     ("ij,ij->", (3, 1), (3, 4)), ("bij,bjk->bik", (1, 2, 3), (4, 3, 2)), ("ii,ij->j", (1, 1), (3, 3)),
                     ("i,i", (1,), (4,))]


@pytest.mark.parametrize("spec,sa,sb", EINSUM_BROADCASTS, ids=[c[0] for c in EINSUM_BROADCASTS])
def test_einsum_broadcasts_size_one_axes(spec, sa, sb, rng):
    """An index of size 1 in one operand and n in another broadcasts, as NumPy's einsum does."""
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)

    def f(a, b):
        return np.einsum(spec, a, b)

    _same(pb.jit(f)(a, b), f(a, b))
    check_grads(f, [a, b])


def test_einsum_refuses_sizes_that_do_not_broadcast():
    with pytest.raises(pb.TracingError, match="size of index 'j' differs"):
        pb.jit(lambda a, b: np.einsum("ij,ij->i", a, b))(np.ones((2, 3)), np.ones((2, 2)))


def _chains(A, B, C, D, u, v):
    return (np.linalg.multi_dot([A, B]), np.linalg.multi_dot([A, B, C]), np.linalg.multi_dot([A, B, C, D]),
            np.linalg.multi_dot([u, A, B, C, D, v]), np.linalg.multi_dot([u, A, B, C]),
            np.linalg.multi_dot((A, B, C, D, v)), np.linalg.multi_dot([u, A, B]), np.linalg.multi_dot([u, u]))


def test_multi_dot(rng):
    """Any number of operands, a 1-d first or last one, NumPy's values; the cheapest order is taken."""
    args = [rng.standard_normal(s) for s in ((3, 4), (4, 6), (6, 2), (2, 5), (3,), (5,))]
    _same(pb.jit(_chains)(*args), _chains(*args))
    check_grads(_chains, args)
    src = pb.jit(lambda a, b, c: np.linalg.multi_dot([a, b, c])).source(*args[:3])
    assert "b @ c" in src  # (3x4)(4x6)(6x2): a (b c) takes 72 multiplications, (a b) c 108
    with pytest.raises(pb.TracingError, match="at least two"):
        pb.jit(lambda a: np.linalg.multi_dot([a]))(args[0])
