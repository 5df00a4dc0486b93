"""Elementwise chains compiled by Numba (``backends/numba_chains``): random programs (empty and size-1
axes, 0-d values and Python scalars, float32, complex128) compiled against the NumPy program, NumPy
itself and finite differences; the Gaussian mixture's gradient as three loops with no temporary of its
largest shape but the one it keeps; ``auto``'s choice; what stays NumPy and says so."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

import pullback as pb
from pullback.backends import numba_chains
from pullback.log import logger
from tests.regressions.test_random_programs import _assert_close, _loss_of, _tolerance, examples, programs

numba = pytest.importorskip("numba")


def _chains(src: str) -> int:
    return len(re.findall(r'@numba\.njit\(cache=True, error_model="numpy"\)\ndef chain', src))


def mixture(means, log_sd, logits, X):
    """A diagonal Gaussian mixture's log-likelihood (benchmarks/small_steps.py)."""
    z = (X[:, None, :] - means[None, :, :]) / np.exp(log_sd)[None, :, :]
    per = -0.5 * np.sum(z ** 2, axis=2) - np.sum(log_sd, axis=1)[None, :] - 4 * np.log(2 * np.pi)
    log_w = logits - scipy.special.logsumexp(logits)
    return np.sum(scipy.special.logsumexp(per + log_w[None, :], axis=1))


def _mixture_args(n=5000):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((3, 8)), 0.1 * rng.standard_normal((3, 8)), rng.standard_normal(3),
            rng.standard_normal((n, 8)))


@pytest.mark.parametrize("mode", ["auto", "numba"])
def test_the_mixture_gradient_is_three_loops_with_one_temporary_of_its_largest_shape(mode):
    args = _mixture_args()
    f = pb.differentiate(mixture, argnums=(0, 1, 2), compile=mode)
    value, grads = f.value_and_grad(*args)
    value_np, grads_np = pb.differentiate(mixture, argnums=(0, 1, 2), compile="numpy").value_and_grad(*args)
    np.testing.assert_allclose(value, value_np, rtol=1e-12)
    assert isinstance(value, np.floating)
    for g, g_np in zip(grads, grads_np):
        np.testing.assert_allclose(g, g_np, rtol=1e-10, atol=1e-12)
    direction = [np.random.default_rng(1).standard_normal(a.shape) for a in args[:3]]
    eps = 1e-6
    plus = mixture(*[a + eps * d for a, d in zip(args[:3], direction)], args[3])
    minus = mixture(*[a - eps * d for a, d in zip(args[:3], direction)], args[3])
    assert np.isclose(sum(np.sum(g * d) for g, d in zip(grads, direction)), (plus - minus) / (2 * eps), rtol=1e-6)
    src = f.source(*args)
    assert _chains(src) >= 3
    assert "for k in range(8):" in src
    # the forward pass keeps z (5000 x 3 x 8) for the backward one; nothing else of that shape is made:
    # the backward chain sums its products over the 5000 rows inside its loop
    assert src.count("(5000, 3, 8)") == 1 and "np.empty((5000, 3, 8)" in src
    assert "np.sum(" not in src.split("def chain_2")[1].split("return")[0]


@given(programs(dtypes=("float64", "float32", "complex128"), max_ops=5), st.integers(0, 2**16))
@examples(30, sampled=6)
def test_random_chains_compile_and_match_numpy_and_finite_differences(p, seed):
    """Each generated program, and its loss's gradient, under ``compile="numba"`` (every chain of two
    operations compiled) against the NumPy program, against NumPy itself, and (float64, complex128)
    against central differences; no chain falls back to NumPy."""
    with np.errstate(all="ignore"):
        expected = p(*p.inputs)
    warnings: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = warnings.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        fast = pb.jit(p.traced(), compile="numba")
        with np.errstate(all="ignore"):
            out = fast(*p.arguments)
            slow = pb.jit(p.traced(), compile="numpy")(*p.arguments)
        tol = _tolerance(p.dtype)
        assert np.shape(out) == np.shape(expected) and np.asarray(out).dtype == np.asarray(expected).dtype
        _assert_close(out, slow, tol, "value against the NumPy program")
        _assert_close(out, expected, tol, "value against NumPy")
        if p.dtype == "float32" or not np.all(np.isfinite(expected)):
            return
        loss = p.traced(_loss_of(p, seed))
        xs = p.arguments
        wrt = tuple(range(len(xs)))
        compiled = pb.differentiate(loss, argnums=wrt, compile="numba")
        with np.errstate(all="ignore"):
            grads = compiled.grad(*xs)
            grads_np = pb.differentiate(loss, argnums=wrt, compile="numpy").grad(*xs)
        for g, g_np in zip(grads, grads_np):
            _assert_close(g, g_np, 1e-9, "gradient against the NumPy program")
        if not all(np.all(np.isfinite(g)) for g in grads):
            return
        rng = np.random.default_rng(seed)
        ts = [rng.standard_normal(np.shape(x)) * (1 + 1j if np.iscomplexobj(x) else 1) for x in xs]
        eps = 1e-6
        with np.errstate(all="ignore"):
            plus = loss(*[x + eps * t for x, t in zip(xs, ts)])
            minus = loss(*[x - eps * t for x, t in zip(xs, ts)])
        exact = sum(float(np.sum(np.real(np.conj(g) * t))) for g, t in zip(grads, ts))
        scale = 1.0 + sum(float(np.sum(np.abs(g) * np.abs(t))) for g, t in zip(grads, ts))
        if np.isfinite(plus) and np.isfinite(minus):
            assert abs(exact - (plus - minus) / (2 * eps)) <= 1e-5 * scale
    finally:
        logger.removeHandler(handler)
    assert not [r for r in warnings if "Numba could not compile" in r.getMessage()], warnings[0].getMessage()


# Steps of a random chain: (name, function of the running value and an operand, kinds it takes); each
# keeps values moderate (no overflow, no branch cut crossed by finite differences).
STEPS = [
    ("add", lambda a, b: a + b, "fc"), ("sub", lambda a, b: b - a, "fc"), ("mul", lambda a, b: a * b, "fc"),
    ("div", lambda a, b: a / (2.5 + b * b), "f"), ("div_c", lambda a, b: a / (3.0 + b), "c"),
    ("scale", lambda a, b: 0.5 * a - 1.0, "fc"), ("neg", lambda a, b: -a, "fc"), ("square", lambda a, b: a ** 2, "fc"),
    ("tanh", lambda a, b: np.tanh(a), "f"), ("sin", lambda a, b: np.sin(a), "fc"),
    ("exp", lambda a, b: np.exp(0.3 * a), "fc"), ("log", lambda a, b: np.log(1.0 + a * a), "f"),
    ("sqrt", lambda a, b: np.sqrt(2.0 + a * a), "f"), ("where", lambda a, b: np.where(a > b, a, 0.5 * b), "f"),
    ("maximum", lambda a, b: np.maximum(a, b + 0.25), "f"),
]
SHAPES = [(4, 3), (2, 1, 3), (1, 5), (6,), (0, 3), (3, 0), (1,), (2, 3, 2)]


@st.composite
def chains(draw):
    """A function of x, y (y's shape broadcasts to x's: size-1 and missing axes) and a scalar c (0-d or a
    Python float), ``steps`` elementwise steps, each reading x, y, c or the running value, then perhaps a
    reduction; with its arguments."""
    dtype = draw(st.sampled_from(["float64", "float32", "complex128"]))
    kind = np.dtype(dtype).kind
    shape = draw(st.sampled_from(SHAPES))
    y_shape = tuple(draw(st.sampled_from([1, n])) for n in shape[draw(st.integers(0, len(shape))):])
    steps = draw(st.lists(st.sampled_from([s for s in STEPS if kind in s[2]]), min_size=2, max_size=7))
    reads = draw(st.lists(st.sampled_from(["x", "y", "c", "v"]), min_size=len(steps), max_size=len(steps)))
    empty = 0 in shape
    ends = ["none", "sum_all"] + [f"sum_{k}" for k in range(len(shape))] + (
        [f"max_{k}" for k in range(len(shape)) if shape[k]] + ([] if empty else ["max_all"]) if kind == "f" else [])
    end = draw(st.sampled_from(ends))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))

    def value(s):
        v = rng.uniform(-1.5, 1.5, s) + (1j * rng.uniform(-1.5, 1.5, s) if kind == "c" else 0)
        return np.asarray(v).astype(dtype)

    c = value(()) if draw(st.booleans()) else float(rng.uniform(0.5, 1.5))

    def fn(x, y, c):
        v = x
        for (_, step, _), read in zip(steps, reads):
            v = step(v, {"x": x, "y": y, "c": c, "v": v}[read])
        if end == "sum_all":
            return np.sum(v)
        if end == "max_all":
            return np.max(v)
        if end != "none":
            return (np.sum if end.startswith("sum") else np.max)(v, axis=int(end.split("_")[1]))
        return v

    fn.__qualname__ = f"chain[{dtype}{list(shape)}, y{list(y_shape)}: {', '.join(s[0] for s in steps)}; {end}]"
    return fn, (value(shape), value(y_shape), c)


@given(chains(), st.integers(0, 2**16))
@examples(40, sampled=8)
def test_random_elementwise_chains_against_numpy_and_finite_differences(case, seed):
    """Random chains under ``compile="numba"``: values against NumPy (dtype and shape too), gradients
    (float64, complex128) against the NumPy program and central differences, and the chain compiled
    (not fallen back to NumPy) wherever it has elements."""
    fn, args = case
    expected = fn(*args)
    dtype = args[0].dtype
    tol = 2e-4 if dtype == np.float32 else 1e-9
    jitted = pb.jit(fn, compile="numba")
    out = jitted(*args)
    assert np.shape(out) == np.shape(expected) and np.asarray(out).dtype == np.asarray(expected).dtype
    _assert_close(out, expected, tol, fn.__qualname__)
    if args[0].size:
        assert _chains(jitted.source(*args)) >= 1
    if dtype == np.float32 or not args[0].size:
        return
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(np.shape(expected))

    def loss(x, y, c):
        return np.sum(np.real(fn(x, y, c)) * w)

    wrt = (0, 1) if np.ndim(args[2]) == 0 and not isinstance(args[2], np.ndarray) else (0, 1, 2)
    grads = pb.differentiate(loss, argnums=wrt, compile="numba").grad(*args)
    grads_np = pb.differentiate(loss, argnums=wrt, compile="numpy").grad(*args)
    for g, g_np in zip(grads, grads_np):
        _assert_close(g, g_np, 1e-9, "gradient against the NumPy program")
    ts = [rng.standard_normal(np.shape(args[k])) * (1 + 1j if np.iscomplexobj(args[k]) else 1) for k in wrt]
    eps = 1e-6
    moved = [list(args), list(args)]
    for k, t in zip(wrt, ts):
        moved[0][k], moved[1][k] = args[k] + eps * t, args[k] - eps * t
    numeric = (loss(*moved[0]) - loss(*moved[1])) / (2 * eps)
    exact = sum(float(np.sum(np.real(np.conj(g) * t))) for g, t in zip(grads, ts))
    scale = 1.0 + sum(float(np.sum(np.abs(g) * np.abs(t))) for g, t in zip(grads, ts))
    assert abs(exact - numeric) <= 1e-5 * scale, f"{fn.__qualname__}: <grad, t> = {exact}, differences {numeric}"


def _values(x, y):
    """Nine operations over x's shape."""
    t = np.tanh(x) * 2.0 - y
    u = t * t + 1.5 * x
    return np.maximum(u, 0.5) / (1.0 + x * x)


def _chain_of_many(x, y):
    """The nine operations, ending in a row sum and a maximum."""
    v = _values(x, y)
    return np.sum(v, axis=1), np.max(v)


@pytest.mark.parametrize("shape", [(400, 300), (4, 3), (0, 3), (1, 5), (7, 1)])
def test_a_chain_with_reductions_matches_numpy(shape):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(shape), rng.standard_normal(shape[-1:])
    f = pb.jit(_chain_of_many, compile="numba")
    if 0 in shape:  # NumPy's max of nothing is an error; the sum alone
        g = pb.jit(lambda x, y: np.sum(_values(x, y), axis=1), compile="numba")
        np.testing.assert_array_equal(g(x, y), np.zeros(0))
        return
    rows, top = f(x, y)
    np.testing.assert_allclose(rows, _chain_of_many(x, y)[0], rtol=1e-12)
    np.testing.assert_allclose(top, _chain_of_many(x, y)[1], rtol=1e-12)
    assert isinstance(top, np.float64)
    assert _chains(f.source(x, y)) == 1


def test_a_nan_propagates_through_a_compiled_maximum_as_in_numpy():
    x = np.arange(12.0).reshape(3, 4)
    x[1, 2] = np.nan

    def f(x):
        y = x * 2.0 + 1.0
        return np.max(y, axis=1), np.min(y - 3.0)

    rows, low = pb.jit(f, compile="numba")(x)
    expected_rows, expected_low = f(x)
    np.testing.assert_array_equal(rows, expected_rows)  # (equal_nan by default)
    assert np.isnan(low) and np.isnan(expected_low)


def test_float32_chains_keep_their_dtype():
    x = np.linspace(-1, 1, 60, dtype=np.float32).reshape(6, 10)
    f = pb.jit(lambda x: np.sum(x * x * 0.5 + x, axis=0), compile="numba")
    out = f(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.sum(x * x * 0.5 + x, axis=0), rtol=1e-5)
    assert _chains(f.source(x)) == 1


def test_complex_chains():
    rng = np.random.default_rng(2)
    z = rng.standard_normal((5, 4)) + 1j * rng.standard_normal((5, 4))
    f = pb.jit(lambda z: np.sum(np.exp(z) * z - 2j * z, axis=1), compile="numba")
    np.testing.assert_allclose(f(z), np.sum(np.exp(z) * z - 2j * z, axis=1), rtol=1e-12)
    assert _chains(f.source(z)) == 1


def test_auto_compiles_long_chains_over_moderate_arrays_only():
    big, small = np.random.default_rng(0).standard_normal((300, 200)), np.ones((3, 4))

    def long(x):
        return np.sum((x * 2.0 - 1.0) * x + 0.5 * x, axis=1)

    def short(x):
        return x * 2.0

    def transcendental(x):
        return np.exp(x) * 2.0 + 1.0

    auto = {name: pb.jit(fn, compile="auto") for name, fn in
            [("long", long), ("short", short), ("transcendental", transcendental)]}
    assert _chains(auto["long"].source(big)) == 1
    assert _chains(auto["long"].source(small)) == 0  # 12 elements: 5 us of dispatch saved a call
    assert _chains(auto["short"].source(big)) == 0
    src = auto["transcendental"].source(big)  # NumPy's vectorised exp, and 2 operations left: 37 us saved
    assert "exp = np.exp(x)" in src and _chains(src) == 0  # a call, under AUTO_MIN_PROGRAM_SAVED_US
    huge = np.random.default_rng(1).standard_normal((600, 500))
    src = auto["transcendental"].source(huge)  # 300,000 elements: the loop for the rest saves 190 us
    assert "exp = np.exp(x)" in src and _chains(src) == 1 and "= np.exp(" not in src.split("def transcendental")[0]
    src = pb.jit(transcendental, compile="numba").source(big)  # forced: the exp in the loop too
    assert _chains(src) == 1 and "np.exp(x[i, j])" in src
    assert _chains(pb.jit(long, compile="numpy").source(big)) == 0


def test_auto_compiles_at_most_a_few_chains_a_program():
    """A long unrolled program has many chains; ``auto`` compiles the ``AUTO_MAX_CHAINS`` that save most (each
    compile costs a fraction of a second of the first call), ``numba`` every one; the values are NumPy's."""
    x = np.random.default_rng(0).standard_normal((300, 200))

    def many(x):
        total = 0.0
        for k in range(8):  # eight chains of different shapes (a row sum ends each), none merging
            y = x[: 300 - k]
            total = total + np.sum(np.sum((y * 2.0 - 1.0) * y + 0.5 * y, axis=1) * (k + 1.0))
        return total

    auto, forced = pb.jit(many, compile="auto"), pb.jit(many, compile="numba")
    assert _chains(auto.source(x)) == numba_chains.AUTO_MAX_CHAINS < _chains(forced.source(x))
    np.testing.assert_allclose(auto(x), many(x), rtol=1e-12)


def test_auto_leaves_a_chain_of_very_many_operations_to_numpy():
    """LLVM's time grows faster than the function: a sum of 150 products (as an unrolled loop's cotangent
    of a matrix every step reads) saves a call's dispatch as one chain, but took minutes to compile, so
    ``auto`` leaves chains over ``AUTO_MAX_OPERATIONS`` to NumPy; ``numba`` compiles them."""
    xs = np.random.default_rng(0).standard_normal((75, 8, 8))
    w = np.random.default_rng(1).standard_normal((8, 8))

    def long_sum(xs, w):
        total = xs[0] * w
        for k in range(1, 75):
            total = total + xs[k] * w
        return total

    assert 2 * 75 - 1 > numba_chains.AUTO_MAX_OPERATIONS
    auto = pb.jit(long_sum, compile="auto")
    assert _chains(auto.source(xs, w)) == 0
    np.testing.assert_allclose(auto(xs, w), long_sum(xs, w), rtol=1e-12)
    numba_chains.AUTO_MAX_OPERATIONS, kept = 10**6, numba_chains.AUTO_MAX_OPERATIONS
    try:  # without the cap the model takes it: the test would not see the cap go
        assert _chains(pb.jit(long_sum, compile="auto").source(xs, w)) == 1
    finally:
        numba_chains.AUTO_MAX_OPERATIONS = kept


def test_an_operation_numba_cannot_compile_stays_numpy_and_says_so(caplog):
    x = np.linspace(0.1, 0.9, 20).reshape(4, 5)

    def f(x):
        return np.sum(scipy.special.expit(x * 3.0 - 1.0) * x + 2.0, axis=1)

    jitted = pb.jit(f, compile="numba")
    with caplog.at_level(logging.INFO, logger="pullback"):
        src = jitted.source(x)
    assert "# logistic at test_numba_chains.py:" in src and "stays NumPy: Numba cannot compile it" in src
    assert any("logistic" in r.getMessage() and "stays NumPy" in r.getMessage() for r in caplog.records)
    assert "scipy.special.expit" in src and _chains(src) == 2  # the chains before and after it
    np.testing.assert_allclose(jitted(x), f(x), rtol=1e-12)


def test_views_join_a_chain_as_indices():
    """A broadcast along a leading axis (not NumPy's implicit one) is read at an index, not materialised."""
    x, s = np.ones((50, 3, 8)), np.arange(150.0).reshape(50, 3)

    def f(x, s):
        return np.sum(x * s[:, :, None] * 2.0 - x, axis=0)

    jitted = pb.jit(f, compile="numba")
    np.testing.assert_allclose(jitted(x, s), f(x, s), rtol=1e-12)
    src = jitted.source(x, s)
    assert _chains(src) == 1 and "np.broadcast_to" not in src


def test_the_view_map_of_unit_axes():
    from pullback.ir.core import Eqn, Params, Var
    from pullback.ir.types import ArrayType
    from pullback.primitives import structural

    x, out = Var(ArrayType((3, 1, 4), np.dtype("float64"))), Var(ArrayType((1, 3, 4), np.dtype("float64")))
    eqn = Eqn(structural.reshape_p, (x,), (out,), Params({"new_sizes": (1, 3, 4)}))
    assert numba_chains.view_map(eqn) == (1, None, 2)
    other = Var(ArrayType((4, 3), np.dtype("float64")))
    eqn = Eqn(structural.reshape_p, (x,), (other,), Params({"new_sizes": (4, 3)}))
    assert numba_chains.view_map(eqn) is None  # a reshape that moves entries: not an index


def test_the_readme_shows_the_program_the_example_prints(tmp_path):
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    printed = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if b.startswith("import numba\n")
                   and "def chain(" in b)
    example = Path(__file__).parents[2] / "examples" / "compiled_chains.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd(), "PULLBACK_CACHE_DIR": str(tmp_path)}).stdout
    assert printed.strip() in out


def test_an_axis_only_summed_over_counts_with_an_underscore():
    def f(x):
        return np.sum(np.broadcast_to(x, (3, 4)) * 2.0 + 1.0, axis=0)

    x = np.arange(4.0)
    jitted = pb.jit(f, compile="numba")
    np.testing.assert_allclose(jitted(x), f(x), rtol=1e-15)
    src = jitted.source(x)
    assert "for _ in range(3):" in src and "for j in range(4):" in src
