"""np.array, np.asarray, np.r_, np.c_ and Python lists of traced values given to NumPy functions:
values against NumPy, derivatives against finite differences, and NumPy left as it was."""

import threading

import numpy as np
import pytest
import scipy.linalg
import scipy.special
import scipy.stats
from pullback.testing import check_grads

import pullback as pb
from pullback.errors import TracingError

A = np.array([0.3, -1.2])


def nested(a, b):
    return np.array([[a, 2.0], [b, a * b]])


def mixed(a, v):  # rows from a tracer, a NumPy array, and a list of scalars and tracers
    return np.asarray([v, A, [a, 1.0]])


def as_tuples(a, b):
    return np.asanyarray(((a, b), (b, -a)))


@pytest.mark.parametrize("f, args", [
    (nested, (1.5, 3.0)),
    (mixed, (0.7, np.array([2.0, -0.5]))),
    (as_tuples, (0.4, 1.1)),
    (lambda a, b: np.r_[a, b, [1.0, 2.0], np.ones(2)], (1.0, 2.0)),
    (lambda a, b: np.r_[np.array([a, b]), A, 3.0:5.0], (1.0, 2.0)),
    (lambda a, v: np.c_[v, np.array([a, 2 * a]), A], (0.5, np.array([1.0, 2.0]))),
    (lambda a, b: np.mean([a, b, 2 * a]), (1.0, 4.0)),
    (lambda a, b: np.linalg.norm([a, b]), (3.0, 4.0)),
    (lambda a, b: np.max([a, b]), (1.0, 4.0)),
    (lambda a, b: np.sum([[a, b], [b, 1.0]], axis=0), (1.0, 4.0)),
    (lambda v: np.stack([v, [1.0, 2.0]], axis=1), (np.array([3.0, 4.0]),)),
    (lambda v, a: np.concatenate([v, [a, a * a]]), (np.array([3.0, 4.0]), 0.5)),
    (lambda v, a: np.dot([a, 1.0], v), (np.array([3.0, 4.0]), 0.5)),
    (lambda t, v: np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]) @ v, (0.3, np.array([1.0, 2.0]))),
    # constant lists beside them are arrays too, as NumPy makes them
    (lambda x: np.where([True, False], [x[0], x[1]], 0.0), (np.array([1.0, 2.0]),)),
    (lambda x: np.einsum("i,i", [x[0], x[1]], x) + np.dot([1.0, 2.0], [x[1], x[0]]), (np.array([1.0, 2.0]),)),
    (lambda x: np.sum([x, x * x], axis=(0,)), (np.array([1.0, 2.0]),)),
])
def test_values_and_derivatives(f, args):
    np.testing.assert_allclose(pb.jit(f)(*args), f(*args))
    check_grads(f, args, order=2)


def test_gradient_of_a_built_matrix():
    # sum of squares of [[a, 2], [b, a b]]: d/da = 2a + 2a b^2, d/db = 2b + 2a^2 b
    ga, gb = pb.grad(lambda a, b: np.sum(nested(a, b) ** 2), argnums=(0, 1))(1.5, 3.0)
    assert (ga, gb) == pytest.approx((2 * 1.5 + 2 * 1.5 * 9, 2 * 3 + 2 * 2.25 * 3))


@pytest.mark.parametrize("make, expected", [
    (lambda x: np.array([x, 2.0]), np.float64),  # NumPy's array coercion: Python floats are float64
    (lambda x: np.array([x, np.float32(2)]), np.float32),
    (lambda x: np.array([x, 2]), np.float64),  # ... and Python ints int64
    (lambda x: np.array([x, np.float64(2)]), np.float64),  # NumPy scalars are strong
    (lambda x: np.array([x, 2.0], dtype=np.float32), np.float32),
    (lambda x: np.array([x, 1j]), np.complex128),
    (lambda x: np.array([[x, x], np.ones(2, np.float32)]), np.float32),
])
def test_dtypes_follow_numpy(make, expected):
    x = np.float32(1.5)
    assert make(x).dtype == expected  # NumPy's own answer
    out = pb.jit(make)(np.ones((), np.float32) * x)
    assert out.dtype == expected
    np.testing.assert_array_equal(out, make(x))


def test_python_int_and_bool_inputs():
    f = lambda i, b: np.array([i, b, 3])  # noqa: E731
    out = pb.jit(f)(2, True)
    assert out.dtype == f(2, True).dtype == np.int64
    np.testing.assert_array_equal(out, f(2, True))


def _namespace():
    """Every attribute of NumPy's and SciPy's namespaces pullback knows, the code of each function
    among them, and the attributes of the classes whose methods it implements."""
    from pullback.frontend.construct import ATTRIBUTES

    spaces = {m.__name__: dict(vars(m)) for m in (np, np.linalg, np.random, scipy.special, scipy.linalg, scipy.stats)}
    spaces.update({f"class {owner.__name__}": dict(vars(owner)) for owner, _ in ATTRIBUTES if isinstance(owner, type)})
    spaces["code"] = {f"{m}.{k}": v.__code__ for m, space in list(spaces.items()) for k, v in space.items()
                      if hasattr(v, "__code__")}
    return spaces


def _same_objects(before, after):
    return all(before[m].keys() == after[m].keys() and all(after[m][k] is v for k, v in before[m].items())
               for m in before)


def test_numpy_and_scipy_are_never_changed():
    """Tracing changes no module attribute, function code or class: seen from inside the traced
    function itself (where the old mechanism patched them) and after."""
    before = _namespace()
    seen = {}

    def f(a):
        seen["during"] = _namespace()
        return np.sum(np.array([a, a])) + scipy.special.logsumexp(np.array([a, 1.0])) + scipy.stats.norm.logpdf(a)

    pb.grad(f)(1.0)
    assert _same_objects(before, seen["during"]) and _same_objects(before, _namespace())


def test_an_exception_in_the_trace_leaves_nothing_behind():
    before = _namespace()

    def f(a):
        np.array([a, 1.0])
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        pb.jit(f)(1.0)
    assert _same_objects(before, _namespace())


def test_other_threads_see_numpy_during_a_trace():
    results = {}
    started, done = threading.Event(), threading.Event()

    def other():
        started.wait(5)
        results["array"] = np.array([1, 2.5])
        results["mean"] = np.mean([1.0, 2.0])
        results["r_"] = np.r_[1.0, [2.0, 3.0]]
        done.set()

    def f(a):
        started.set()
        done.wait(5)
        return np.array([a, 1.0])

    t = threading.Thread(target=other)
    t.start()
    np.testing.assert_array_equal(pb.jit(f)(2.0), [2.0, 1.0])
    t.join()
    np.testing.assert_array_equal(results["array"], [1, 2.5])
    assert results["mean"] == 1.5
    np.testing.assert_array_equal(results["r_"], [1.0, 2.0, 3.0])


def test_ragged_list_is_a_tracing_error():
    with pytest.raises(TracingError, match="different shapes"):
        pb.jit(lambda v, a: np.array([v, [a]]))(np.ones(2), 1.0)


def test_asarray_of_a_tracer_itself_is_the_tracer():
    np.testing.assert_array_equal(pb.jit(lambda x: np.asarray(x) + 1)(np.ones(2)), np.full(2, 2.0))


def test_zeros_stay_numpy():
    def f(a):
        z = np.zeros(2)
        assert type(z) is np.ndarray
        return np.array([a, 1.0]) + z

    np.testing.assert_array_equal(pb.jit(f)(3.0), [3.0, 1.0])


def test_np_array_of_a_tracer_in_user_code_is_a_copy_and_scipy_still_refuses():
    x = np.array([1.0, 2.0, 3.0])
    out = pb.jit(lambda x: (np.array(x) * 2, np.asarray(x, np.float32), np.array(x, dtype=complex)))(x)
    np.testing.assert_array_equal(out[0], 2 * x)
    assert out[1].dtype == np.float32 and out[2].dtype == np.complex128
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(np.array(x) ** 2))(x), 2 * x)
    with pytest.raises(pb.TracingError, match="scipy.linalg.logm calls np.asarray on a traced value"):
        pb.jit(lambda x: scipy.linalg.logm(x))(np.eye(2))


def test_np_append_of_lists_holding_tracers():
    x = np.array([1.0, 2.0])
    got = pb.jit(lambda x: np.append([[x[0], 1.0]], [[2.0, x[1]]], axis=0))(x)
    np.testing.assert_array_equal(got, np.append([[1.0, 1.0]], [[2.0, 2.0]], axis=0))


def test_scipy_names_bound_before_the_trace_reach_pullback():
    """``from scipy.special import logsumexp`` and a bound ``scipy.stats.norm.pdf`` are SciPy's
    function objects, which no module attribute reaches: the converted code finds them by identity."""
    import scipy.special
    import scipy.stats
    from scipy.special import logsumexp

    pdf = scipy.stats.norm.pdf
    codes = (logsumexp.__code__, pdf.__func__.__code__)
    x = np.random.default_rng(0).standard_normal(5)
    np.testing.assert_allclose(pb.grad(lambda x: logsumexp(x))(x), np.exp(x) / np.exp(x).sum(), rtol=1e-12)
    np.testing.assert_allclose(pb.grad(lambda x: pdf(x, 0.5, 2.0).sum())(x),
                               -(x - 0.5) / 4 * scipy.stats.norm.pdf(x, 0.5, 2.0), rtol=1e-12)
    assert (logsumexp.__code__, pdf.__func__.__code__) == codes
    np.testing.assert_allclose(logsumexp(x), np.log(np.exp(x).sum()), rtol=1e-14)


def test_numpy_functions_bound_before_the_trace_take_lists_of_tracers():
    """``app = np.append`` held from before the trace still reaches pullback with lists of tracers
    (found by identity where the converted code calls it), and NumPy's is unchanged."""
    app, mean = np.append, np.mean
    code = np.append._implementation.__code__

    def f(a, b):
        return np.sum(app([[a, 2.0]], [[b, a * b]], axis=0) ** 2) + mean([a, b])

    a, b = 1.5, 2.0
    np.testing.assert_allclose(pb.grad(f, argnums=(0, 1))(a, b),
                               (2 * a + 2 * a * b * b + 0.5, 2 * b + 2 * a * a * b + 0.5), rtol=1e-14)
    assert np.append._implementation.__code__ is code
    np.testing.assert_array_equal(app([1.0], [2.0]), [1.0, 2.0])


def test_full_empty_like_and_scalar_types_of_traced_values():
    """``np.full`` of a traced fill value (NumPy's dispatch does not look at it), ``np.empty_like`` and
    NumPy's scalar types as constructors: values and dtypes as NumPy's, derivatives by finite differences."""
    def f(x, s):
        a = np.full((2, 3), x[0])
        b = np.full(3, s, dtype=np.float32)
        c = np.full_like(np.ones(3), x[1])
        d = np.float32(x[0]) * np.float64(s)
        return a, b, c, d, np.complex128(x), np.float64(s) * np.ones(2, np.float32), np.float64([x[0], s])

    x = np.array([1.5, 2.5, 3.0])
    for ours, want in zip(pb.jit(f)(x, 2.0), f(x, 2.0)):
        assert ours.dtype == np.asarray(want).dtype and ours.shape == np.shape(want)
        np.testing.assert_allclose(ours, want)
    check_grads(lambda x, s: (np.full((2, 3), x[0] * s), np.full_like(x, s), np.float64(x[1]) * np.complex128(x)),
                [x, 2.0])
    assert pb.jit(lambda x: np.empty_like(x) * 0 + x)(x).tolist() == x.tolist()
    assert pb.grad(lambda x: np.sum(np.empty_like(x, shape=(2,)) + x[:2]))(x).tolist() == [1, 1, 0]
