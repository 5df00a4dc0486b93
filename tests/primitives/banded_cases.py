"""Cases for ``pullback.primitives.linalg.banded`` (``scipy.linalg.solve_banded`` and the storage
transpose its derivatives use), collected by the forward, JVP and transpose suites."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pullback.primitives import lax
from tests.primitives.cases import Case

C = "complex128"


def dense(ab, lower: int, upper: int):
    """The n x n matrix of the storage ``ab[upper + i - j, j] = A[i, j]``."""
    n = ab.shape[1]
    a = np.zeros((n, n) + ab.shape[2:], ab.dtype)
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            a[i, j] = ab[upper + i - j, j]
    return a


def banded(a, lower: int, upper: int):
    """The storage of ``a``'s band (zeros in the corners)."""
    n = a.shape[0]
    ab = np.zeros((lower + upper + 1, n) + a.shape[2:], a.dtype)
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            ab[upper + i - j, j] = a[i, j]
    return ab


def band_transpose(ab, lower, upper):
    return banded(np.swapaxes(dense(ab, lower, upper), 0, 1), upper, lower)


def _solve(lower: int, upper: int):
    def solve(ab, b):  # a dominant diagonal: well conditioned
        return scipy.linalg.solve_banded((lower, upper), ab + 6 * (np.arange(lower + upper + 1) == upper)[:, None], b)

    return solve


CASES: list[Case] = [
    Case("solve_banded-tridiagonal", _solve(1, 1), ((3, 5), (5,))),
    Case("solve_banded-1-2-matrix", _solve(1, 2), ((4, 5), (5, 2))),
    Case("solve_banded-diagonal", _solve(0, 0), ((1, 4), (4,))),
    Case("solve_banded-2-0-complex", _solve(2, 0), ((3, 4), (4, 3)), C),
    Case("solve_banded-0-3-f32", _solve(0, 3), ((4, 4), (4,)), "float32"),
    Case("solve_banded-size-1", _solve(1, 1), ((3, 1), (1,))),  # SciPy divides by ab[u, 0]
    Case("band_transpose", lambda ab: lax.band_transpose(ab, 1, 2), ((4, 5),),
         reference=lambda ab: band_transpose(ab, 1, 2)),
    Case("band_transpose-wide-band", lambda ab: lax.band_transpose(ab, 3, 1), ((5, 3, 2),), C,
         reference=lambda ab: band_transpose(ab, 3, 1)),
]

_rng = np.random.default_rng(41)
AB = _rng.standard_normal((4, 5)) + 6 * (np.arange(4) == 2)[:, None]  # l = 1, u = 2
ABC = AB + 0.5j * _rng.standard_normal((4, 5))

LINEAR_CASES: list[Case] = [
    Case("gbsv", lambda b: scipy.linalg.solve_banded((1, 2), AB, b), ((5, 2),)),
    Case("gbsv-complex", lambda b: scipy.linalg.solve_banded((1, 2), ABC, b), ((5,),), C),
    Case("band_transpose", lambda ab: lax.band_transpose(ab, 2, 1), ((4, 5),)),
    Case("band_transpose-complex", lambda ab: lax.band_transpose(ab, 0, 2), ((3, 4, 2),), C),
]
