import ast
import inspect
import linecache
import traceback

import numpy as np
import pytest

import pullback as pb
from tests.conftest import check_golden


def loss(x, y):
    t = x * y
    z = np.log(t)
    return z.sum() + np.exp(-x).mean()


def test_generated_source_golden():
    check_golden("source_loss.py.txt", pb.source(loss, np.ones(3), np.ones(3)))


def test_source_is_registered_with_linecache_and_inspect():
    f = pb.jit(loss)
    f(np.ones(3), np.ones(3))
    compiled = f._staging._stage("primal", (np.ones(3), np.ones(3)))._fn
    src = inspect.getsource(compiled)
    assert src.startswith("def loss(x, y):")
    assert "".join(linecache.getlines(compiled.__code__.co_filename)) == compiled.__pullback_source__


def _generated() -> set[str]:
    import gc  # here: an import line above ``loss`` would move the lines the golden source cites

    gc.collect()  # a compiled function and its namespace are a cycle
    return {name for name in linecache.cache if name.startswith("<pullback:")}


def test_generated_sources_leave_linecache_with_their_programs():
    before = _generated()
    for k in range(30):
        pb.grad(lambda x: k * np.sum(np.sin(x)))(np.ones(3))  # noqa: B023  (called at once)
        pb.jit(lambda x: k * np.cos(x)).source(np.ones(3))  # noqa: B023
    assert _generated() <= before
    f = pb.jit(lambda x: np.cos(x) * 3.0)
    source = f.source(np.ones(3))
    (name,) = _generated() - before  # while its program lives, a traceback can show it
    assert "".join(linecache.getlines(name)) == source
    del f
    assert _generated() <= before


def test_runtime_error_traceback_shows_the_generated_line():
    def matmul(a, b):
        return a @ b

    f = pb.jit(matmul)
    f(np.ones((2, 2)), np.ones((2, 2)))
    compiled = f._staging._stage("primal", (np.ones((2, 2)), np.ones((2, 2))))._fn
    with pytest.raises(ValueError) as e:
        compiled(np.ones((2, 3)), np.ones((2, 3)))  # shapes the program was not traced for
    text = "".join(traceback.format_exception(e.value))
    assert "<pullback:matmul:" in text and "dot = a @ b" in text


def test_compiled_once_per_signature():
    traces = []

    def f(x):
        traces.append(x.shape)
        return x * 2

    g = pb.jit(f)
    for _ in range(3):
        g(np.ones(3))
    g(np.ones(4))
    g(np.ones(3, np.float32))
    g(np.ones(3))
    assert traces == [(3,), (4,), (3,)]


def test_generated_code_runs_without_pullback():
    src = pb.source(loss, np.ones(3), np.ones(3))
    assert "pullback" not in src
    ns: dict = {}
    exec(compile(src, "<saved>", "exec"), ns)
    x, y = np.arange(1.0, 4.0), np.arange(2.0, 5.0)
    np.testing.assert_allclose(ns["loss"](x, y), loss(x, y))


SECRET = np.array([[123456.789, np.nan], [np.inf, -1e308]])


def test_hostile_names_and_values_produce_safe_source():
    ñp = SECRET  # sanitises to a name that would shadow `np`
    scipy = np.full((2, 2), 7.25)

    def 函数_très_long_name_that_keeps_going_and_going_and_going_and_going(λ, lambda_, np_):
        if_ = λ * ñp + scipy  # NaN and inf flow through
        class_ = if_ * float("inf") + lambda_ * 1e308
        np = class_ - np_ * float("nan")  # a local named np
        return np, if_, class_

    f = 函数_très_long_name_that_keeps_going_and_going_and_going_and_going
    f.__name__ = "x'); import os  #\n"  # a hostile name must become an identifier
    args = (np.ones((2, 2)), np.full((2, 2), 3.0), np.ones((2, 2)))
    src = pb.source(f, *args)
    ast.parse(src)
    code = "\n".join(line.split("#")[0] for line in src.splitlines())  # the code, without comments
    assert "123456" not in code and "7.25" not in code and "import os" not in code
    assert code.isascii()
    names = {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
    assert all(len(n) <= 40 for n in names)
    assert "np_" in names or "np_1" in names
    with np.errstate(invalid="ignore", over="ignore"):
        want = f(*args)
        got = pb.jit(f)(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_huge_constants_travel_through_the_namespace():
    big = np.full((300, 300), 1.5)
    src = pb.source(lambda x: big @ x, np.ones(300))
    assert len(src) < 500 and "1.5" not in src


def test_functions_without_source_still_get_readable_names():
    ns: dict = {"np": np}
    exec(compile("def g(x):\n    y = np.sin(x)\n    return (y * y).sum()\n", "<stdin>", "exec"), ns)
    src = pb.differentiate(ns["g"]).source(np.ones(3))
    ast.parse(src)
    assert "def g_grad(x):" in src and "x_bar" in src and "#" not in src.split("def")[1]
    np.testing.assert_allclose(pb.grad(ns["g"])(np.ones(3)), 2 * np.sin(1.0) * np.cos(1.0))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_0d_loop_seed_prints_as_a_number_of_its_dtype(dtype):
    """A loop's 0-d carry starting from 0.0 prints ``total = np.float64(0.0)`` (``np.float32`` for a float32
    sum: a NumPy scalar keeps the dtype, and divides by zero as NumPy does), not ``np.zeros((), ...)``."""
    def f(w, xs):
        def step(total, x):
            return total + np.sum(np.tanh(w * x)), None
        total, _ = pb.scan(step, dtype(0.0), xs)
        return total

    xs = np.random.default_rng(5).standard_normal((20, 3)).astype(dtype)
    w = dtype(0.7)
    d = pb.differentiate(f)
    src = d.source(w, xs)
    name = np.dtype(dtype).name
    assert f"total = np.{name}(0.0)\n" in src and "np.zeros(()" not in src, src
    value, grad = d.value_and_grad(w, xs)
    assert np.asarray(value).dtype == dtype
    np.testing.assert_allclose(value, f(w, xs), rtol=1e-6 if dtype is np.float32 else 1e-13)
    if dtype is np.float64:
        eps = 1e-6
        np.testing.assert_allclose(grad, (f(w + eps, xs) - f(w - eps, xs)) / (2 * eps), rtol=1e-7)
