"""Error types and messages: TracingError is a TypeError; unsupported functions and shape
errors name the function the user called (not a primitive) and the user's file:line."""


import numpy as np
import pytest
import scipy.special

import pullback as pb
from pullback.errors import ConcretizationError, TracingError
from tests.ir.test_tracer import _line_of


def _message(fn, *args) -> str:
    with pytest.raises(TracingError) as e:
        pb.jit(fn)(*args)
    return str(e.value)


def test_tracing_errors_are_type_errors():
    assert issubclass(TracingError, TypeError) and issubclass(ConcretizationError, TracingError)

    def f(x):
        return x if bool(x > 0) else -x  # bool() asks for the value (an ``if`` alone is converted)

    with pytest.raises(TypeError, match="bool"):
        pb.grad(f)(1.0)


def test_escaped_tracer_returned_keeps_its_message():
    kept = []
    pb.jit(lambda x: kept.append(x) or x)(1.0)
    with pytest.raises(TracingError, match="escaped"):
        pb.jit(lambda y: kept[0])(2.0)


def _escaped() -> tuple:
    """A value traced in ``f`` and kept in a list, the argument kept likewise, and the line making the value."""
    kept = []

    def f(x):
        y = np.sin(x) * 2.0
        kept.append(y)
        kept.append(x)
        return np.sum(y)

    pb.grad(f)(np.ones(3))
    return kept[0], kept[1], _line_of(f, "y = np.sin(x)")


# each uses an escaped tracer t: outside any trace, or in another one
ESCAPED_USES = {
    "arithmetic": lambda t: t + np.ones(3),
    "reflected_arithmetic": lambda t: np.ones(3) * t,
    "ufunc": lambda t: np.sin(t),
    "array_function": lambda t: np.sum(t),
    "method": lambda t: t.sum(),
    "property": lambda t: t.T,
    "index": lambda t: t[0],
    "asarray": lambda t: np.asarray(t),
    "float": lambda t: float(t[0]),
    "bool": lambda t: bool(t[0] > 0),
    "str": str,
    "print": print,
    "copy": lambda t: t.copy(),
    "in_another_trace": lambda t: pb.jit(lambda y: y * t)(np.ones(3)),
    "returned_by_another_trace": lambda t: pb.jit(lambda y: t)(np.ones(3)),
    "argument_of_a_transform": lambda t: pb.jit(lambda y: y * 2.0)(t),
}


@pytest.mark.parametrize("use", ESCAPED_USES.values(), ids=ESCAPED_USES.keys())
def test_escaped_tracer_names_where_it_was_made(use):
    t, _, made = _escaped()
    with pytest.raises(TracingError, match="used after its trace ended") as e:
        use(t)
    message = str(e.value)
    assert f"created at {made}" in message and "return it from the function instead" in message
    assert message.startswith(__file__)  # and where it was used
    assert "escaped" in repr(t)  # a repr for debuggers, which does not raise


def test_escaped_argument_is_named():
    _, x, _ = _escaped()
    with pytest.raises(TracingError, match=r"the traced argument x\) was used after its trace ended"):
        float(x[0])


def test_unsupported_scipy_special_ufunc_is_named_by_its_module():
    def f(x):
        return scipy.special.struve(1.0, x)

    msg = _message(f, np.ones(3))
    assert "scipy.special.struve is not supported" in msg and "numpy.struve" not in msg
    assert _line_of(f, "scipy.special.struve") in msg


def test_unsupported_numpy_ufunc_and_method_are_named():
    def f(x):
        return np.spacing(x)

    msg = _message(f, np.ones(3))
    assert "numpy.spacing is not supported" in msg and _line_of(f, "np.spacing") in msg

    def g(x):
        return np.multiply.accumulate(x)

    msg = _message(g, np.ones(3))
    assert "numpy.multiply.accumulate is not supported" in msg and _line_of(g, "accumulate") in msg


def test_unsupported_linalg_function_is_named():
    def f(a):
        return np.linalg.cond(a)

    msg = _message(f, np.eye(3))
    assert "numpy.linalg.cond is not supported" in msg and _line_of(f, "cond") in msg


@pytest.mark.parametrize("fn, text, primitive", [
    (lambda x: np.dot(x, np.ones(4)), "numpy.dot: size mismatch", "dot_general"),
    (lambda x: np.linalg.cholesky(x[:, :2]), "numpy.linalg.cholesky: ", "potrf"),
    (lambda x: np.linalg.solve(x, np.ones(4)), "numpy.linalg.solve: ", "permute"),
])
def test_shape_errors_name_the_numpy_function(fn, text, primitive):
    msg = _message(fn, np.ones((3, 3)))
    assert text in msg and not msg.split(": ", 2)[1].startswith(primitive)
    assert _line_of(fn, "lambda x") in msg


def test_shape_error_inside_a_list_built_argument_names_the_function():
    def f(x):
        return np.dot([x, x], np.ones(4))

    msg = _message(f, 1.0)
    assert "numpy.dot: size mismatch" in msg and _line_of(f, "np.dot") in msg


def test_shape_error_of_the_matmul_operator_names_it():
    def f(x):
        return x @ np.ones(4)

    msg = _message(f, np.ones((3, 3)))
    assert "size mismatch" in msg and "dot_general" not in msg and _line_of(f, "x @") in msg


def test_python_loop_on_an_argument_is_a_loop_of_traced_length():
    def f(x, n):
        for _ in range(n):
            x = np.sin(x)
        return np.sum(x)

    np.testing.assert_allclose(pb.jit(f)(np.ones(2), 3), np.sum(np.sin(np.sin(np.sin(np.ones(2))))), rtol=1e-14)
    np.testing.assert_allclose(pb.grad(f)(np.ones(2), 2), np.cos(np.sin(1.0)) * np.cos(1.0) * np.ones(2))
    np.testing.assert_allclose(pb.grad(f, static_argnums=(1,))(np.ones(2), 2),
                               np.cos(np.sin(1.0)) * np.cos(1.0) * np.ones(2))


def test_array_methods_pullback_lacks_and_unknown_attributes_name_the_line():
    """``x.tolist()`` is a conversion (a ConcretizationError); an ndarray method pullback does not trace
    and an attribute no array has are AttributeErrors; all three at the user's line."""
    def to_list(x):
        return np.sum(x.tolist())

    def partition(x):
        return x.partition(1)

    def misspelt(x):
        return x.sume()

    with pytest.raises(ConcretizationError, match="tolist") as e:
        pb.jit(to_list)(np.ones(3))
    assert _line_of(to_list, "x.tolist()") in str(e.value)
    with pytest.raises(AttributeError, match="ndarray.partition is not supported") as e:
        pb.jit(partition)(np.ones(3))
    assert _line_of(partition, "x.partition") in str(e.value)
    with pytest.raises(AttributeError, match="no attribute 'sume'") as e:
        pb.jit(misspelt)(np.ones(3))
    assert _line_of(misspelt, "x.sume") in str(e.value)
    probed = []
    pb.jit(lambda x: probed.append(hasattr(x, "__array_interface__")) or x)(np.ones(2))
    assert probed == [False]


def test_small_array_attributes_and_fill():
    def f(x):
        y = x * 1.0
        y.fill(x[0])
        return y * (x.itemsize + x.nbytes)

    x = np.array([2.0, 3.0])
    np.testing.assert_allclose(pb.jit(f)(x), [2.0 * 24, 2.0 * 24])
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(f(x)))(x), [48.0, 0.0])


def test_argument_errors_of_pullback_linalg_name_the_line():
    def f(a):
        return np.linalg.norm(a, ord="fro", axis=(0, 0))

    with pytest.raises(ValueError) as e:
        pb.jit(f)(np.eye(2))
    assert _line_of(f, "np.linalg.norm") in str(e.value)


def _log_ratio(x):
    y = np.log(x)
    return np.sum(y / x)


def test_floating_point_warnings_of_generated_code_name_the_users_line():
    """``divide by zero`` in the generated forward (``np.log(x)``) and backward (``1 / x``) passes is
    reported at the user's statement each came from; NumPy's errstate still rules (ignore, raise,
    the user's own handler), and warnings filters apply (an error filter raises)."""
    import warnings

    g, x = pb.grad(_log_ratio), np.array([0.0, 1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g(x)
    places = {(w.filename, w.lineno) for w in caught}
    assert places == {(__file__, int(_line_of(_log_ratio, "np.log(x)").rsplit(":", 1)[1])),
                      (__file__, int(_line_of(_log_ratio, "y / x").rsplit(":", 1)[1]))}
    assert all(issubclass(w.category, RuntimeWarning) and "divide by zero encountered" in str(w.message)
               for w in caught)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g(x)
    assert not caught
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        g(x)
    seen = []
    with np.errstate(divide="call", invalid="call", call=lambda err, flag: seen.append(err)):
        g(x)
    assert "divide by zero" in seen
    with warnings.catch_warnings(), pytest.raises(RuntimeWarning, match="divide by zero"):
        warnings.simplefilter("error")
        g(x)
    assert np.geterr()["divide"] == "warn"  # the user's state is as it was
