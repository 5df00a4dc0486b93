"""How the special-function primitives print: as the ``scipy.special`` call of the same name
(``cupyx.scipy.special`` on the GPU, which has every one of them)."""

from __future__ import annotations

from pullback.backends import syntax as s
from pullback.backends.numpy_backend import EMITTERS
from pullback.ir.core import Literal
from pullback.primitives import special as sp


def _order(a, expr, device_array: bool):
    """polygamma's order as the integer a person writes (``polygamma(1, x)``, not ``1.0``); CuPy's
    polygamma broadcasts its arguments with ``cupy.broadcast_arrays``, which takes arrays only."""
    if not isinstance(a, Literal):
        return expr
    n = s.number(int(a.value)) if float(a.value).is_integer() else expr
    return s.call("cp.asarray", n) if device_array else n


def emitter(module: str, name: str):
    """An emitter printing ``module.name(*ins)``."""
    def emit(ctx, eqn, ins, outs):
        ctx.use(module)
        if eqn.prim is sp.polygamma_p:
            ins = [_order(eqn.inputs[0], ins[0], module.startswith("cupyx")), ins[1]]
        return s.call(f"{module}.{name}", *ins)

    return emit


for _p, _name in sp.SCIPY_NAMES.items():
    EMITTERS[_p] = emitter("scipy.special", _name)


# Simplification removes stop_gradient from every optimised program; printed anyway, a copy (never an alias
# that memory planning would not know of).
EMITTERS[sp.stop_gradient_p] = lambda ctx, eqn, ins, outs: s.method(ins[0], "copy")
