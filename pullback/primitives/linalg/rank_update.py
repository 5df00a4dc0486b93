"""Rank-1 updates, ``A + alpha x y^T`` (BLAS ``ger``; ``geru`` for complex: no conjugate): the outer
product is added into A's buffer, never materialised as an n x n array of its own. Structure-aware
simplification prints the rank-1 terms of gradients (the GP's ``K^{-1} - a a^T``) with it; the real
scalar ``alpha`` (1 unless given) is BLAS's, so that a vector's scaling folds into the call.
"""

from __future__ import annotations

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.primitives import contractions as con

ger_p = Primitive("ger")

# from this many elements on, simplification writes ``A + outer(x, y)`` as ger (an allocation below
# that is cheap, and the sum reads as the user wrote it)
MIN_SIZE = 1 << 16


def _ger(a, x, y, *, alpha: float = 1.0):
    """A (m, n) plus alpha times the outer product of x (m,) and y (n,), all of one float or complex dtype."""
    if not isinstance(alpha, int | float) or isinstance(alpha, bool):
        raise ShapeError(f"ger's alpha must be a real Python number, got {alpha!r}")
    if a.type.ndim != 2 or x.type.ndim != 1 or y.type.ndim != 1 or (x.shape[0], y.shape[0]) != a.shape:
        raise ShapeError(f"ger needs A (m, n), x (m,), y (n,); got {a.shape}, {x.shape}, {y.shape}")
    if a.dtype.kind not in "fc" or not a.dtype == x.dtype == y.dtype:
        raise ShapeError(f"ger needs operands of one float or complex dtype, got {a.dtype}, {x.dtype}, {y.dtype}")
    return a.type


shape_rules[ger_p] = _ger


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import Zero, jvp_rules  # noqa: E402
from pullback.ad.transpose import Linear, transpose_rules  # noqa: E402
from pullback.ir.tracer import bind  # noqa: E402
from pullback.primitives import lax  # noqa: E402


def _ger_jvp(primals, tangents, **alpha):
    """d(A + a x y^T) = dA + a dx y^T + a x dy^T: rank-1 updates of dA (outer products when dA is zero)."""
    (a, x, y), (da, dx, dy) = primals, tangents
    out = bind(ger_p, a, x, y, **alpha)
    t = None if isinstance(da, Zero) else da
    scale = alpha.get("alpha", 1.0)
    for u, v in ((dx, y), (x, dy)):
        if isinstance(u, Zero) or isinstance(v, Zero):
            continue
        if t is None:
            t = lax.dot_general(u if scale == 1.0 else lax.mul(u, scale), v, con.DotDims((), ()))
        else:
            t = bind(ger_p, t, u, v, **alpha)
    return out, (Zero(a.ssa.type) if t is None else t)


def _ger_t(ct, a, x, y, *, alpha: float = 1.0):
    """Linear in A and one of the vectors: <C, a dx y^T> = <a C conj(y), dx>, <C, a x dy^T> = <a C^T conj(x), dy>
    (a real)."""
    if isinstance(x, Linear) and isinstance(y, Linear):
        raise TypeError("ger is not linear in both vectors at once")
    if not isinstance(a, Linear):
        raise TypeError("ger is affine, not linear, in its vectors alone")
    ct_x = lax.dot_general(ct, lax.conj(y), con.DotDims((1,), (0,))) if isinstance(x, Linear) else None
    ct_y = lax.dot_general(ct, lax.conj(x), con.DotDims((0,), (0,))) if isinstance(y, Linear) else None
    if alpha != 1.0:
        ct_x, ct_y = (None if c is None else lax.mul(c, alpha) for c in (ct_x, ct_y))
    return ct, ct_x, ct_y


jvp_rules[ger_p] = _ger_jvp
transpose_rules[ger_p] = _ger_t


# --- batching ---------------------------------------------------------------------------

from pullback.ad.batch import at_front, batch_rules, batch_size  # noqa: E402


def _ger_batch(args, dims, *, alpha: float = 1.0):
    """A batch of rank-1 updates, A + alpha x[..., :, None] * y[..., None, :] (ger takes one matrix)."""
    size = batch_size(args, dims)
    a, x, y = (at_front(v, d, size) for v, d in zip(args, dims))
    x = x if alpha == 1.0 else lax.mul(x, alpha)
    shape = a.shape
    outer = lax.mul(lax.broadcast_in_dim(x, shape, (0, 1)), lax.broadcast_in_dim(y, shape, (0, 2)))
    return lax.add(a, outer), 0


batch_rules[ger_p] = _ger_batch
