"""The transforms' lean recording (``ad.emit``) records what ``bind`` records, and leaves the collector on."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import pullback as pb
from pullback.ad import emit
from pullback.ad.jvp import jvp
from pullback.errors import TracingError
from pullback.ir.core import Literal, Var
from pullback.ir.tracer import Tracer, bind, new_trace
from pullback.ir.types import ArrayType
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import lax
from pullback.primitives import structural as st

F64 = np.dtype("float64")


def _last(builder):
    e = builder.eqns[-1]
    return e.prim, e.inputs, tuple(v.type for v in e.outputs), dict(e.params), e.source


def test_lean_paths_record_what_bind_records():
    x_t, m_t = ArrayType((3,), F64), ArrayType((3, 4), F64)
    with new_trace(replay=True) as b:
        x, y, m = Tracer(Var(x_t), b), Tracer(Var(x_t), b), Tracer(Var(m_t), b)
        half = Literal.of(0.5, F64)
        cases = [
            (lambda: emit.apply2(ew.mul_p, x, y), lambda: bind(ew.mul_p, x, y)),
            (lambda: emit.apply2(ew.lt_p, x, half), lambda: bind(ew.lt_p, x, half)),  # bool out
            (lambda: emit.apply1(ew.sin_p, x), lambda: bind(ew.sin_p, x)),
            (lambda: emit.apply(ew.clip_p, x, half, y), lambda: bind(ew.clip_p, x, half, y)),
            (lambda: emit.record(con.dot_general_p, x, m, dims=con.DotDims((0,), (0,))),
             lambda: bind(con.dot_general_p, x, m, dims=con.DotDims((0,), (0,)))),
            (lambda: emit.record(st.reshape_p, m, new_sizes=(4, 3)), lambda: bind(st.reshape_p, m, new_sizes=(4, 3))),
        ]
        for lean, full in cases:
            for _ in range(2):  # the second time from the remembered types
                a = lean()
                got = _last(b)
                c = full()
                assert got == _last(b)
                assert a.ssa is not c.ssa and a.view is None if c.view is None else a.view[0] is c.view[0]
        # a remembered answer is used only for the very operand types it was found for
        z = Tracer(Var(ArrayType((5,), F64)), b)
        assert lax.sin(x).shape == (3,) and lax.sin(z).shape == (5,)
        assert lax.mul(z, 2.0).shape == (5,) and lax.mul(2, x).shape == (3,)


def test_a_shape_error_reads_as_binds():
    with new_trace(replay=True) as b:
        x, y = Tracer(Var(ArrayType((3,), F64)), b), Tracer(Var(ArrayType((4,), F64)), b)
        with pytest.raises(TracingError) as lean:
            lax.add(x, y)
        with pytest.raises(TracingError) as full:
            bind(ew.add_p, x, y)
    assert str(lean.value).split(": ", 1)[1] == str(full.value).split(": ", 1)[1]  # (each at its own line)


def test_jvp_leaves_the_collector_as_it_was():
    program = pb.make_ir(lambda x: np.sum(np.sin(x) * x))(np.ones(3))
    assert gc.isenabled()
    jvp(program, [True])
    assert gc.isenabled()
    gc.disable()
    try:
        jvp(program, [True])
        assert not gc.isenabled()
    finally:
        gc.enable()
