"""Reductions over a set of axes (``keepdims`` is a reshape in the tracer)."""

from __future__ import annotations

from pullback.ir.core import Primitive, ShapeError, shape_rules
from pullback.ir.types import ArrayType


def _reduce_rule(kinds: str):
    def rule(x, *, axes: tuple[int, ...]):
        ndim = x.type.ndim
        if list(axes) != sorted(set(axes)) or any(not 0 <= a < ndim for a in axes):
            raise ShapeError(f"reduction axes {axes} must be increasing axes of a rank-{ndim} operand")
        if x.dtype.kind not in kinds:
            raise ShapeError(f"reduction does not accept dtype {x.dtype.name}")
        return ArrayType(tuple(n for i, n in enumerate(x.shape) if i not in axes), x.dtype)

    return rule


reduce_sum_p = Primitive("reduce_sum")
reduce_max_p = Primitive("reduce_max")
reduce_min_p = Primitive("reduce_min")
shape_rules[reduce_sum_p] = _reduce_rule("ifc")
shape_rules[reduce_max_p] = shape_rules[reduce_min_p] = _reduce_rule("bif")
# np.all / np.any of booleans: True and False are their identities, so empty axes are fine
reduce_and_p = Primitive("reduce_and")
reduce_or_p = Primitive("reduce_or")
shape_rules[reduce_and_p] = shape_rules[reduce_or_p] = _reduce_rule("b")


# --- differentiation rules --------------------------------------------------------------

from pullback.ad.jvp import defjvp, deflinear, defzero  # noqa: E402
from pullback.ad.transpose import transpose_rules  # noqa: E402
from pullback.primitives import lax  # noqa: E402

deflinear(reduce_sum_p)


def _kept(ndim, axes):
    return tuple(i for i in range(ndim) if i not in axes)


def _extremum_jvp(t, x, ans, axes):
    """The tangent at the extremal entries, averaged over ties."""
    at = lax.convert(lax.eq(x, lax.broadcast_in_dim(ans, x.shape, _kept(x.ndim, axes))), x.dtype)
    return lax.div(lax.reduce_sum(lax.mul(t, at), axes), lax.reduce_sum(at, axes))


defjvp(reduce_max_p, _extremum_jvp)
defzero(reduce_and_p)
defzero(reduce_or_p)
defjvp(reduce_min_p, _extremum_jvp)
transpose_rules[reduce_sum_p] = lambda ct, x, *, axes: (lax.broadcast_in_dim(ct, x.shape, _kept(x.ndim, axes)),)


# --- batching rules ---------------------------------------------------------------------

from pullback.ad.batch import unary_axes  # noqa: E402

for _p in (reduce_sum_p, reduce_max_p, reduce_min_p, reduce_and_p, reduce_or_p):
    unary_axes(_p, "axes", removed=True)
