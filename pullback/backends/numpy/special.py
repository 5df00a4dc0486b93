"""How the special-function primitives print: as the ``scipy.special`` call of the same name
(``cupyx.scipy.special`` on the GPU, for the functions it has: see cupy_backend.py)."""

from __future__ import annotations

import functools

import numpy as np
import scipy.special

from pullback.backends import syntax as s
from pullback.backends.numpy.backend import EMITTERS
from pullback.ir.core import Literal
from pullback.primitives import special as sp


@functools.cache
def _int_order_keeps_dtype(name: str, dtype: np.dtype) -> bool:
    """Whether SciPy's ``name(1, x)``, with a Python int order, computes in ``x``'s dtype: ``yn`` of a
    float32 ``x`` would take its float64 integer-order loop instead, so there the order stays a float."""
    with np.errstate(all="ignore"):
        return np.asarray(getattr(scipy.special, name)(1, np.ones((), dtype))).dtype == dtype


def order_expr(a, expr, name: str, dtype: np.dtype, device_array: bool):
    """An order as the integer a person writes (``polygamma(1, x)``, ``jv(2, x)``, not ``1.0``) where
    that keeps SciPy's dtype; CuPy's polygamma broadcasts its arguments with ``cupy.broadcast_arrays``,
    which takes arrays only."""
    if not isinstance(a, Literal):
        return expr
    integral = float(a.value).is_integer() and _int_order_keeps_dtype(name, dtype)
    n = s.number(int(a.value)) if integral else expr
    return s.call("cp.asarray", n) if device_array else n


def emitter(module: str, name: str):
    """An emitter printing ``module.name(*ins)``."""
    def emit(ctx, eqn, ins, outs):
        ctx.use(module)
        if eqn.prim in sp.ORDERS:
            device_array = module.startswith("cupyx") and eqn.prim is sp.polygamma_p
            ins = [order_expr(eqn.inputs[0], ins[0], name, eqn.inputs[1].dtype, device_array), ins[1]]
        return s.call(f"{module}.{name}", *ins)

    return emit


for _p, _name in sp.SCIPY_NAMES.items():
    EMITTERS[_p] = emitter("scipy.special", _name)


# Simplification removes stop_gradient from every optimised program; printed anyway, a copy (never an alias
# that memory planning would not know of).
EMITTERS[sp.stop_gradient_p] = lambda ctx, eqn, ins, outs: s.method(ins[0], "copy")
