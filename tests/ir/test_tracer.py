import inspect
import threading

import numpy as np
import pytest
import scipy.linalg

import pullback as pb
from pullback.ir.core import Literal


def _line_of(fn, text: str) -> str:
    """``file:line`` of the line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return f"{inspect.getsourcefile(fn)}:{start + i}"
    raise AssertionError(text)


def test_control_flow_on_traced_value_names_user_line():
    """A ``return`` from inside a loop on a traced value is not converted (tests/frontend/test_control_flow.py
    converts the rest): the refusal names the line."""
    def f(x):
        while True:
            if x.sum() > 0:
                return x
            x = x * 2

    with pytest.raises(pb.TracingError, match="bool") as e:
        pb.make_ir(f)(np.ones(3))
    assert _line_of(f, "if x.sum() > 0") in str(e.value)


def test_unsupported_numpy_function_is_named():
    def f(x):
        return np.unique(x)

    with pytest.raises(pb.TracingError, match="numpy.unique") as e:
        pb.make_ir(f)(np.ones(3))
    assert _line_of(f, "np.unique") in str(e.value)


def test_unsupported_ufunc_is_named():
    def f(x):
        return np.heaviside(x, x)

    with pytest.raises(pb.TracingError, match="numpy.heaviside") as e:
        pb.make_ir(f)(np.ones(3))
    assert _line_of(f, "heaviside") in str(e.value)


def test_scipy_function_calling_asarray_is_named():
    def f(a):
        return scipy.linalg.logm(a)

    with pytest.raises(TypeError, match=r"scipy\.linalg\.logm calls np\.asarray") as e:
        pb.make_ir(f)(np.eye(3))
    assert _line_of(f, "scipy.linalg.logm") in str(e.value)
    assert isinstance(e.value, pb.TracingError)


_asarray = np.asarray  # bound before any trace


def test_np_asarray_bound_before_the_trace_reaches_pullback():
    """``np.asarray(x)`` in the user's code returns ``x`` (tests/frontend/test_construct.py), also through a
    name bound before the trace: the converted code finds NumPy's function by identity."""
    def f(x):
        return _asarray(x) + 1

    np.testing.assert_array_equal(pb.jit(f)(np.ones(3)), np.full(3, 2.0))


def test_np_asarray_of_tracer_in_code_without_source_is_a_clear_type_error():
    """Code pullback cannot convert (no source: ``exec``) calls NumPy's own ``np.asarray``, which
    cannot hold a tracer, and says so at the user's line."""
    namespace = {"np": np}
    exec(compile("def f(x):\n    return np.asarray(x) + 1\n", "<no source>", "exec"), namespace)
    with pytest.raises(TypeError, match="source pullback cannot read") as e:
        pb.make_ir(namespace["f"])(np.ones(3))
    assert "<no source>:2" in str(e.value) and "np.stack" in str(e.value)


def test_shape_mismatch_names_user_line():
    def f(x, y):
        z = x * 2
        return z + y

    with pytest.raises(pb.TracingError, match=r"could not be broadcast together with shapes \(3,\) \(4,\)") as e:
        pb.make_ir(f)(np.ones(3), np.ones(4))
    assert _line_of(f, "return z + y") in str(e.value)


def test_matmul_size_mismatch_names_user_line():
    def f(a, b):
        return a @ b

    with pytest.raises(pb.TracingError, match="size mismatch") as e:
        pb.make_ir(f)(np.ones((2, 3)), np.ones((4, 2)))
    assert _line_of(f, "a @ b") in str(e.value)


def test_indexing_with_a_traced_mask_is_refused():
    with pytest.raises(pb.TracingError, match="data-dependent shape"):
        pb.make_ir(lambda x: x[x > 0])(np.ones(3))


def test_closed_over_arrays_become_named_constants():
    A = np.arange(6.0).reshape(2, 3)

    def f(x):
        return A @ x

    prog = pb.verify(pb.make_ir(f)(np.ones(3)))
    assert len(prog.constvars) == 1 and prog.constvals[0] is A
    assert prog.constvars[0].hint == "A"
    assert "constants(A: f64[2,3])" in str(prog)


def test_python_scalars_are_weak_literals():
    prog = pb.make_ir(lambda x: 2.0 * x + 1)(np.ones(3, np.float32))
    assert all(e.outputs[0].dtype == np.float32 for e in prog.eqns)
    lits = [a for e in prog.eqns for a in e.inputs if isinstance(a, Literal)]
    assert [lit.value for lit in lits] == [2.0, 1.0]


def test_python_scalar_arguments_are_weakly_typed_inputs():
    f = pb.jit(lambda x, s: x * s)
    out = f(np.ones(3, np.float32), 2.5)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, 2.5)
    assert pb.make_ir(lambda s, t: s * t)(2, 3.0).out_types[0].dtype == np.float64


def test_static_argnums_are_baked_in_and_keyed():
    calls = []

    def f(x, n):
        calls.append(n)
        return x * n

    g = pb.jit(f, static_argnums=1)
    np.testing.assert_allclose(g(np.ones(2), 3), 3)
    np.testing.assert_allclose(g(np.ones(2), 4), 4)
    np.testing.assert_allclose(g(np.ones(2), 3), 3)
    assert calls == [3, 4]


def test_properties_and_tuple_unpacking():
    def f(x):
        n, m = x.shape
        rows = [r * i for i, r in enumerate(x)]
        return rows[-1] * (n + m + x.ndim + x.size + len(x))

    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(pb.jit(f)(x), f(x))


def test_output_structure_is_kept():
    out = pb.jit(lambda x: {"a": x, "b": [x * 2, (x.sum(),)]})(np.ones(2))
    assert set(out) == {"a", "b"} and isinstance(out["b"], list) and isinstance(out["b"][1], tuple)


def test_jit_inside_trace_inlines():
    inner = pb.jit(lambda x: np.exp(x) * 2)
    prog = pb.make_ir(lambda x: inner(x) + 1)(np.ones(3))
    assert [e.prim.name for e in prog.eqns] == ["exp", "mul", "add"]


def test_tracing_is_thread_local():
    errors = []

    def work(i):
        try:
            x = np.full(3, float(i))
            for _ in range(20):
                assert np.allclose(pb.jit(lambda x: np.sin(x) * x)(x), np.sin(x) * x)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_names_come_from_assignment_targets():
    def f(x, y):
        t = x * y
        z = np.log(t)
        return z

    prog = pb.make_ir(f)(np.ones(2), np.ones(2))
    assert [v.hint for e in prog.eqns for v in e.outputs] == ["t", "z"]
