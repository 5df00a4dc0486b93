"""The values a trace's arrays take at the arguments the function is being traced with.

NumPy and SciPy make a few decisions from values (SciPy's ``sqrtm`` of a real matrix is complex or
real by its eigenvalues); the front end follows the first call's case and checks it at run time.
"""

from __future__ import annotations

import numpy as np

from pullback.ad.dce import dce
from pullback.backends.compiler import compile_program
from pullback.ir.core import Program, effectful
from pullback.ir.tracer import Tracer


def example_value(x: Tracer):
    """The value ``x`` takes at the arguments the function is being traced with, or None where that
    is not known (an enclosing trace's values, a transform's trace). For the rare decisions NumPy and
    SciPy make from values: the program is then specialised to the first call's case, and checks it
    at run time."""
    builder = x.builder
    if not builder.examples:
        return None
    # an input that is a tracer of an enclosing trace (a nested grad), or one captured from it, has
    # the value the enclosing trace's example gives it
    outer = dict(builder.examples)
    outer.update({id(inner): tracer for inner, tracer in (builder.captures or {}).values()})
    inputs = builder.inputs + tuple(inner for inner, _ in (builder.captures or {}).values())
    program = dce(Program(inputs, tuple(builder.eqns), (x.ssa,), *builder.constants()))
    if any(map(effectful, program.eqns)):  # running it would draw from the user's generators
        return None
    values = []
    for v in program.inputs:
        used = any(a is v for e in program.eqns for a in e.inputs) or program.outputs[0] is v
        found = outer.get(id(v)) if used else np.zeros(v.type.shape, v.type.dtype)
        if isinstance(found, Tracer):
            found = example_value(found)
        if found is None:
            return None
        values.append(found)
    try:
        fn, _ = compile_program(program)
        return np.asarray(fn(*values))
    except Exception:
        return None
