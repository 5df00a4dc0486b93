"""How convolution and correlation print: as ``scipy.signal.convolve``/``correlate``
(``cupyx.scipy.signal`` on the GPU, which has both with the same arguments), ``mode`` and
``method`` spelled out only where they are not SciPy's defaults."""

from __future__ import annotations

import libcst as cst

from pullback.backends import syntax as s
from pullback.backends.numpy.backend import EMITTERS
from pullback.primitives import signal as sg


def emitter(module: str, method_of=None):
    """An emitter printing ``module.convolve(a, b, mode='valid')`` (or ``correlate``); ``method_of(eqn)``,
    given, picks the method printed."""
    def emit(ctx, eqn, ins, outs):
        ctx.use(module)
        mode, method = eqn.params["mode"], (method_of or (lambda e: e.params["method"]))(eqn)
        kw = {}
        if mode is not sg.ConvMode.FULL:
            kw["mode"] = cst.SimpleString(repr(mode.value))
        if method is not sg.ConvMethod.AUTO:
            kw["method"] = cst.SimpleString(repr(method.value))
        return s.call(f"{module}.{eqn.prim.name}", *ins, **kw)

    return emit


EMITTERS[sg.convolve_p] = EMITTERS[sg.correlate_p] = emitter("scipy.signal")
