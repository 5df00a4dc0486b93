"""Sums of rows at repeated indices (the transpose of a gather ``U[rows]``) print in the fastest
NumPy form for their shape (``numpy_indexing._row_sums``): ``np.add.at`` for few rows,
``np.bincount`` for a vector or per column of a narrow matrix, a COO product otherwise. Each form
against ``np.add.at`` itself, with negative indices (which bincount and the sparse constructor
refuse: the printed fallback is ``np.add.at``) and float32."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb


def gathered(U, rows, w):
    return np.sum(U[rows] * w)


def oracle(U, rows, w):
    out = np.zeros_like(U)
    np.add.at(out, rows, w)
    return out


CASES = [  # (n, k or None for a vector, nnz, the form in the source)
    (300, None, 1000, "np.bincount"),
    (300, 2, 1000, "np.bincount"),
    (300, 10, 6000, "scipy.sparse.coo_array"),
    (2000, 3, 1000, "scipy.sparse.coo_array"),  # n > nnz: bincount's n-long sums per column cost more
    (300, 10, 150, "np.add.at"),
]


@pytest.mark.parametrize("n,k,nnz,form", CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_row_sums(n, k, nnz, form, dtype, rng):
    shape = (n,) if k is None else (n, k)
    U = rng.standard_normal(shape).astype(dtype)
    rows = rng.integers(0, n, nnz)
    w = rng.standard_normal((nnz, *shape[1:])).astype(dtype)
    src = pb.differentiate(gathered).source(U, rows, w)
    others = {"np.bincount", "scipy.sparse.coo_array"} - {form}
    assert form in src and not any(o in src for o in others)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    g = pb.grad(gathered)(U, rows, w)
    assert g.dtype == dtype
    np.testing.assert_allclose(g, oracle(U, rows, w), rtol=tol, atol=tol)
    negative = rows - n  # the same rows, spelled from the end: the np.add.at fallback runs
    np.testing.assert_allclose(pb.grad(gathered)(U, negative, w), oracle(U, rows, w), rtol=tol, atol=tol)


def test_out_of_range_index_raises(rng):
    U, w = rng.standard_normal((300, 10)), rng.standard_normal((6000, 10))
    rows = rng.integers(0, 300, 6000)
    rows[17] = 300
    with pytest.raises(IndexError):
        pb.grad(gathered)(U, rows, w)


def test_complex_keeps_add_at(rng):
    U = rng.standard_normal((300, 3)) + 1j * rng.standard_normal((300, 3))
    rows, w = rng.integers(0, 300, 1000), rng.standard_normal((1000, 3))

    def f(U, rows, w):
        return np.sum(np.real(U[rows]) * w) + np.sum(np.imag(U[rows]) ** 2)

    src = pb.differentiate(f).source(U, rows, w)
    assert "np.add.at" in src and "bincount" not in src and "coo_array" not in src


def accumulated(x, rows, u):
    y = x * 2.0
    np.add.at(y, rows, u)
    return np.sum(y ** 2)


@pytest.mark.parametrize("k,nnz", [(10, 6000), (2, 1000), (None, 1000)])
def test_user_add_at(k, nnz, rng):
    """``np.add.at`` in the user's own code takes the same forms, with NumPy's errors and wrapping."""
    shape = (300,) if k is None else (300, k)
    x, u = rng.standard_normal(shape), rng.standard_normal((nnz, *shape[1:]))
    rows = rng.integers(-300, 300, nnz)
    y = 2.0 * x
    np.add.at(y, rows, u)
    np.testing.assert_allclose(pb.grad(accumulated)(x, rows, u), 4.0 * y, rtol=1e-12, atol=1e-12)
    rows[5] = 300
    with pytest.raises(IndexError):
        pb.grad(accumulated)(x, rows, u)
