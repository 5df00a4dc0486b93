"""How a draw prints: the user's call on the user's generator, ``rs.standard_normal((3,))`` or
``np.random.randn(2, 3)``, the generator passed by reference (a keyword-only parameter). On the GPU
the draw is NumPy's, its array arguments brought to the host and its result moved to the device, so
that both backends consume the same numbers."""

from __future__ import annotations

import libcst as cst
import numpy as np

from pullback.backends import syntax as s
from pullback.backends.numpy.backend import EMITTERS
from pullback.ir.core import Literal, Opaque
from pullback.primitives.random import GLOBAL_CODE, Slot, draw_p


def emitter(to_device: str | None = None):
    """Prints the draw; ``to_device`` (``cp.asarray``), given, wraps it, and its array arguments
    come to the host (``cp.asnumpy``: NumPy's generator cannot read a device array)."""
    def emit(ctx, eqn, ins, outs):
        def value(v) -> s.Expr:
            if isinstance(v, Slot):
                on_device = to_device and not isinstance(eqn.inputs[v.index], Literal)
                return s.call("cp.asnumpy", ins[v.index]) if on_device else ins[v.index]
            if type(v) is Opaque:
                return s.dotted(v.code or ctx.objects[id(v.value)])
            if isinstance(v, tuple):
                return s.tuple_([value(e) for e in v])
            if isinstance(v, np.dtype):
                return s.dtype(v)
            return cst.Name("None") if v is None else s.number(v)

        p = eqn.params
        target = "np.random" if p["generator"].code == GLOBAL_CODE else value(p["generator"])
        call = s.call(s.attribute(s.dotted(target) if isinstance(target, str) else target, p["method"]),
                      *map(value, p["args"]), **{k: value(v) for k, v in p["kwargs"]})
        return s.call(to_device, call) if to_device else call

    return emit


EMITTERS[draw_p] = emitter()
