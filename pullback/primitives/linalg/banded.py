"""Banded matrices in LAPACK's (and ``scipy.linalg.solve_banded``'s) diagonal-ordered storage:
``ab[u + i - j, j] = A[i, j]`` for an ``n x n`` matrix ``A`` with ``l`` diagonals below the main
one and ``u`` above, ``ab`` of shape ``(l + u + 1, n)``; the corners of ``ab`` outside the band
are never read.

- ``gbsv``: ``x = A^{-1} b`` (SciPy's ``solve_banded``), linear in ``b``. dx = A^{-1}(db - dA x)
  with ``dA x`` the banded product of the tangent storage; the transpose in ``b`` is a solve with
  ``A^H``, whose storage is ``band_transpose`` of ``ab`` (conjugated).
- ``band_transpose``: the storage of ``A^T`` (``u`` diagonals below, ``l`` above) from ``A``'s,
  zeros in its corners; trailing axes ride along. A permutation of the band's entries: linear,
  its transpose the storage transpose back. It also gives the banded product without forming
  ``A``: row ``r`` of ``band_transpose(ab * x)`` holds ``A[i, j] x[j]`` at column ``i`` for the
  diagonal ``j - i = u - (l + u - r)``, so ``A x = sum(band_transpose(ab * x), axis=0)``.
"""

from __future__ import annotations

from pullback.ir.core import Primitive, ShapeError, shape_rules

gbsv_p = Primitive("gbsv")
band_transpose_p = Primitive("band_transpose")


def _band(ab, lower: int, upper: int, name: str) -> int:
    for k, v in (("lower", lower), ("upper", upper)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ShapeError(f"{name}: {k} must be a non-negative int, got {v!r}")
    if ab.type.ndim < 2 or ab.shape[0] != lower + upper + 1:
        raise ShapeError(f"{name}: the band storage needs l + u + 1 = {lower + upper + 1} rows, got shape {ab.shape}")
    if ab.dtype.kind not in "fc":
        raise ShapeError(f"{name}: needs a float or complex band, got {ab.dtype.name}")
    return ab.shape[1]


def _gbsv(ab, b, *, lower: int, upper: int):
    n = _band(ab, lower, upper, "solve_banded")
    if ab.type.ndim != 2 or b.type.ndim not in (1, 2) or b.shape[0] != n or b.dtype != ab.dtype:
        raise ShapeError(f"solve_banded: band {ab.type} and right-hand side {b.type} do not fit")
    return b.type


def _band_transpose(ab, *, lower: int, upper: int):
    _band(ab, lower, upper, "band_transpose")
    return ab.type


shape_rules[gbsv_p] = _gbsv
shape_rules[band_transpose_p] = _band_transpose


def band_shift(row: int, lower: int) -> int:
    """``band_transpose`` moves row ``l + u - row`` of ``ab`` to ``row`` of the result, read from
    ``shift`` columns to the right: ``out[row, j] = ab[l + u - row, j + shift]``."""
    return row - lower


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import Zero, deflinear, jvp_rules  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.primitives import lax  # noqa: E402


def band_matmul(ab, x, lower: int, upper: int):
    """``A x`` from the storage ``ab`` of ``A``: one product with the band, one storage
    transpose, one sum (never the dense ``A``); ``x`` a vector or a matrix."""
    shape = (lower + upper + 1, *x.shape)
    products = lax.mul(lax.broadcast_in_dim(ab, shape, (0, 1)), lax.broadcast_in_dim(x, shape, range(1, 1 + x.ndim)))
    return lax.reduce_sum(lax.band_transpose(products, lower, upper), (0,))


def _gbsv_jvp(primals, tangents, *, lower: int, upper: int):
    """dx = A^{-1} (db - dA x): one more banded solve, with the same band."""
    (ab, b), (dab, db) = primals, tangents
    x = lax.gbsv(ab, b, lower, upper)
    rhs = None if isinstance(db, Zero) else db
    if not isinstance(dab, Zero):
        term = band_matmul(dab, x, lower, upper)
        rhs = lax.neg(term) if rhs is None else lax.sub(rhs, term)
    return x, lax.gbsv(ab, rhs, lower, upper)


def _gbsv_t(ct, ab, b, *, lower: int, upper: int):
    """b -> A^{-1} b transposes to c -> A^{-H} c: a solve with the storage of A^H, which has the
    band's widths swapped."""
    if isinstance(ab, Linear):
        raise TypeError("solve_banded is linear in b only")
    return None, lax.gbsv(lax.conj(lax.band_transpose(ab, lower, upper)), ct, upper, lower)


def _band_transpose_t(ct, ab, *, lower: int, upper: int):
    """A permutation of the band's entries (zeros into the corners): its transpose moves them back."""
    return (lax.band_transpose(ct, upper, lower),)


jvp_rules[gbsv_p] = _gbsv_jvp
transpose_rules[gbsv_p] = _gbsv_t
deflinear(band_transpose_p)
transpose_rules[band_transpose_p] = _band_transpose_t


# --- batching: per batch element (see ``batch.per_element``) --------------------------------------

from pullback.ad.batch import per_element  # noqa: E402

for _p in (gbsv_p, band_transpose_p):
    per_element(_p)

