"""Simplification knows triangular values: ``np.tril`` of a value that is lower triangular by construction
(a triangle, a diagonal, their sums and scalings, a triangular factor times or solved against one) is the
value itself, as in the tangent of a Cholesky factor, ``L Phi(...)``, that each solve with L would take
the triangle of."""

import numpy as np
import pytest

import pullback as pb
from pullback.opt.simplify import simplify
from pullback.primitives import lax

RNG = np.random.default_rng(7)


def _triangles(f, *args) -> int:
    program = pb.verify(simplify(pb.make_ir(f)(*args)))
    return sum(e.prim.name in ("tril", "triu") for e in program.eqns)


L = np.tril(RNG.standard_normal((4, 4))) + 4 * np.eye(4)
X = RNG.standard_normal((4, 4))
v = RNG.standard_normal(4)


@pytest.mark.parametrize("name, f, reference, triangles", [
    # L tril(X) is lower: its triangle is itself (one triangle left, tril(X)'s)
    ("product", lambda L, X: lax.tril(lax.trmm(L, lax.tril(X))), lambda L, X: L @ np.tril(X), 1),
    # solved against L, on the right; with a diagonal added, negated and scaled
    ("solve", lambda L, X: lax.tril(lax.trsm(L, -2.0 * (lax.tril(X) + np.diag(np.diagonal(X))), left=False)),
     lambda L, X: -2.0 * (np.tril(X) + np.diag(np.diagonal(X))) @ np.linalg.inv(L), 1),
    # tril(X) has zeros above the diagonal, so a wider triangle keeps it whole
    ("wider", lambda L, X: lax.tril(lax.tril(X), 1), lambda L, X: np.tril(X), 1),
    # not triangular: L^T tril(X) is full, tril(X, 1) is not lower, L X is full
    ("transposed", lambda L, X: lax.tril(lax.trmm(L, lax.tril(X), trans=1)), lambda L, X: np.tril(L.T @ np.tril(X)), 2),
    ("narrower", lambda L, X: lax.tril(lax.tril(X, 1)), lambda L, X: np.tril(X), 2),
    ("full", lambda L, X: lax.tril(lax.trmm(L, X)), lambda L, X: np.tril(L @ X), 1),
    ("upper", lambda L, X: lax.triu(lax.trmm(L, lax.triu(X), lower=False)), lambda L, X: np.triu(L) @ np.triu(X), 1),
])
def test_a_triangle_of_a_triangular_value_is_the_value(name, f, reference, triangles):
    assert _triangles(f, L, X) == triangles
    np.testing.assert_allclose(pb.jit(f)(L, X), reference(L, X), rtol=1e-12, atol=1e-12)
