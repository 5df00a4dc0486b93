"""Signs and scalings in BLAS's alpha (issue 28): a matrix product that only a negation or a scaling reads
prints as one gemm with the scalar as alpha, in programs that call SciPy's BLAS anyway, so the printed
gradients make no separate pass over the result (``np.negative``, ``-x``, ``x * c``) after a product.
Values against NumPy's closed forms: d sum(W o A^{-1}) / dA = -A^{-T} W A^{-T}, d sum(W o A^{-1} B) / dA =
-(A^{-T} W) (A^{-1} B)^T, and the product 0.5 (A @ B) with its transpose."""

from __future__ import annotations

import re

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb

RNG = np.random.default_rng(28)


def general(n):
    return RNG.standard_normal((n, n)) + n ** 0.5 * np.eye(n)


def separate_scalings(source: str) -> list[str]:
    """Lines that negate or scale a whole array on their own."""
    return [line.strip() for line in source.splitlines()
            if re.fullmatch(r"\s*\w+ = (-\w+|np\.negative\(\w+\)|\w+ \* -?[\d.]+|-?[\d.]+ \* \w+)", line)
            or re.fullmatch(r"\s*\w+ \*= -?[\d.]+", line)]


@pytest.mark.parametrize("n", [64, 300])
def test_inv_and_solve_gradients_negate_in_alpha(n):
    A, B, W = general(n), RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
    inv = pb.differentiate(lambda A, W: np.sum(W * np.linalg.inv(A)))
    solve = pb.differentiate(lambda A, B, W: np.sum(W * np.linalg.solve(A, B)))
    for f, args in ((inv, (A, W)), (solve, (A, B, W))):
        source = f.source(*args)
        assert "dgemm(-1.0," in source and separate_scalings(source) == [], source
    X = np.linalg.inv(A)
    np.testing.assert_allclose(inv.grad(A, W), -X.T @ W @ X.T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(solve.grad(A, B, W), -(X.T @ W) @ (X @ B).T, rtol=1e-9, atol=1e-12)


def test_a_product_read_elsewhere_keeps_its_scaling():
    """The product is needed unscaled too: one product, then the scaling (no second product)."""
    A, W = general(64), RNG.standard_normal((64, 64))

    def f(A, W):
        P = np.linalg.inv(A) @ W
        return np.sum(P * W) + np.sum(np.sin(-P))

    value, _ = pb.value_and_grad(f)(A, W)
    np.testing.assert_allclose(value, f(A, W), rtol=1e-12)
    check_grads(f, (A, W), order=1, modes=("rev",))
