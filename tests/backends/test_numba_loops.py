"""Loops compiled by Numba (``backends/numba_loops``): the compiled programs against the NumPy ones and
finite differences, the choice of ``compile="auto"``, loops that stay NumPy and say so, the
fallback when Numba refuses a body, and compiled loops reused by another process."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pullback as pb
from pullback.backends import numba_loops
from tests.primitives.test_scan import _loop_pair
from tests.regressions.test_random_programs import examples, programs

numba = pytest.importorskip("numba")


def lotka_volterra(theta, x0, steps=100, h=0.01):
    """RK4 steps of the Lotka-Volterra equations; the loss is the squared trajectory."""
    a, b, c, d = theta[0], theta[1], theta[2], theta[3]

    def f(x):
        return np.stack([a * x[0] - b * x[0] * x[1], c * x[0] * x[1] - d * x[1]])

    def step(x, _):
        k1 = f(x)
        k2 = f(x + 0.5 * h * k1)
        k3 = f(x + 0.5 * h * k2)
        k4 = f(x + h * k3)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return x, x

    _, xs = pb.scan(step, x0, None, length=steps)
    return np.sum(xs ** 2)


def _compiled(src: str) -> int:
    """How many loops of the printed module Numba compiles (elementwise chains aside: numba_chains)."""
    return src.count('\n@numba.njit(cache=True, error_model="numpy")\ndef loop')


THETA, X0 = np.array([1.0, 0.5, 0.3, 0.8]), np.array([1.0, 1.0])


def test_the_rk4_gradient_compiles_both_loops_and_matches_numpy_and_finite_differences():
    f = pb.differentiate(lotka_volterra, argnums=(0, 1), compile="numba")
    value, grads = f.value_and_grad(THETA, X0)
    value_np, grads_np = pb.differentiate(lotka_volterra, argnums=(0, 1), compile="numpy").value_and_grad(THETA, X0)
    np.testing.assert_allclose(value, value_np, rtol=1e-12)
    for g, g_np in zip(grads, grads_np):
        np.testing.assert_allclose(g, g_np, rtol=1e-10)
    _matches_finite_differences(f.grad(THETA, X0), lambda t, x: lotka_volterra(t, x), (THETA, X0))
    src = f.source(THETA, X0)
    assert _compiled(src) == 2  # the forward loop and the backward one
    assert "import numba" in src and "for t in range(99, -1, -1):" in src
    assert "del " not in src.split("def lotka_volterra_grad")[0]  # Numba has no del
    assert isinstance(value, np.floating)  # results are NumPy's, as without Numba


def _matches_finite_differences(grads, fun, args, eps=1e-6):
    """Central differences of ``fun`` (run by NumPy, as ``pb.scan`` runs outside a trace) along a random
    direction against the gradient's inner product with it."""
    direction = [np.random.default_rng(0).standard_normal(np.shape(a)) for a in args]
    plus = fun(*[a + eps * d for a, d in zip(args, direction)])
    minus = fun(*[a - eps * d for a, d in zip(args, direction)])
    assert np.isclose(sum(np.sum(g * d) for g, d in zip(grads, direction)), (plus - minus) / (2 * eps), rtol=1e-6)


def heat(u0, kappa, steps=50):
    """Explicit steps of the heat equation on a ring, by fori_loop."""
    def body(_, u):
        return u + kappa * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return np.sum(pb.fori_loop(0, steps, body, u0) ** 2)


def test_fori_loop_of_the_heat_equation():
    u0 = np.sin(np.linspace(0, 2 * np.pi, 32, endpoint=False)) + 1.5
    f = pb.differentiate(heat, argnums=(0, 1), compile="numba")
    got = f.value_and_grad(u0, 0.2)
    want = pb.differentiate(heat, argnums=(0, 1), compile="numpy").value_and_grad(u0, 0.2)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-10)
    src = f.source(u0, 0.2)
    assert _compiled(src) == 2
    # each step loops over the grid, np.roll's parts and their transposes' pads read by index, the range
    # cut at the wrap-around (entries 0 and 31 of 32) so that no loop tests its index
    loops = src.split("\ndef heat_grad")[0]
    assert "np.concatenate" not in loops and "np.zeros" not in loops and " if " not in loops
    assert loops.count("in range(1, 31):") == 2  # one forward, one in the transposed step
    _matches_finite_differences(got[1], heat, (u0, 0.2))


def test_a_while_loop_compiles_forward():
    def halvings(x):
        return pb.while_loop(lambda c: c[0] > 1e-3, lambda c: (c[0] * 0.5, c[1] + c[0]), (x, 0.0 * x))[1]

    f = pb.jit(halvings, compile="numba")
    assert float(f(np.float64(3.0))) == pytest.approx(float(pb.jit(halvings, compile="numpy")(np.float64(3.0))))
    assert "while " in f.source(np.float64(3.0)) and _compiled(f.source(np.float64(3.0)))


def test_auto_compiles_many_small_steps_and_leaves_short_or_large_loops_to_numpy():
    assert _compiled(pb.differentiate(lotka_volterra, compile="auto").source(THETA, X0))
    short = pb.differentiate(lambda t, x: lotka_volterra(t, x, steps=3), compile="auto")
    assert not _compiled(short.source(THETA, X0))

    def big(W, h0):  # a few steps of large matrix products: NumPy's BLAS calls are the cost, not dispatch
        return np.sum(pb.scan(lambda h, _: (np.tanh(W @ h), None), h0, None, length=3000)[0])

    W = np.eye(200) * 0.5
    assert not _compiled(pb.differentiate(big, compile="auto").source(W, np.ones((200, 200))))


def test_a_loop_numba_cannot_compile_stays_numpy_and_says_so(caplog):
    def cholesky_steps(A, x0):
        def step(x, _):
            return np.linalg.solve(np.linalg.cholesky(A) + np.eye(2), x), np.sum(x)
        return np.sum(pb.scan(step, x0, None, length=5)[1])

    f = pb.differentiate(cholesky_steps, compile="numba")
    A = np.array([[2.0, 0.5], [0.5, 1.0]])
    with caplog.at_level(logging.INFO, logger="pullback"):
        src = f.source(A, np.ones(2))
    assert not _compiled(src)
    assert "# the scan loop at test_numba_loops.py:" in src and "stays NumPy: Numba cannot compile" in src
    assert any("stays NumPy" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(f.grad(A, np.ones(2)),
                               pb.differentiate(cholesky_steps, compile="numpy").grad(A, np.ones(2)))


def test_a_body_numba_refuses_runs_as_numpy_and_says_so(caplog):
    def batched(A, x0):  # a batched product prints as np.einsum, which Numba does not compile
        return np.sum(pb.scan(lambda x, _: (np.tanh(np.einsum("bij,bj->bi", A, x)), None), x0, None, length=4)[0])

    A, x0 = np.full((2, 3, 3), 0.1), np.ones((2, 3))
    f = pb.jit(batched, compile="numba")
    with caplog.at_level(logging.WARNING, logger="pullback"):
        got = f(A, x0)
    np.testing.assert_allclose(got, pb.jit(batched, compile="numpy")(A, x0), rtol=1e-12)
    assert any("Numba could not compile" in r.getMessage() for r in caplog.records)
    assert not _compiled(f.source(A, x0))  # the program that runs now
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pullback"):
        np.testing.assert_allclose(f(A, x0), got)  # the cached runner: no second attempt
    assert not caplog.records


@pytest.mark.parametrize("bad", ["fast", "NUMBA", None.__class__.__name__, 1])
def test_compile_option_is_checked(bad):
    with pytest.raises(ValueError, match="'auto', 'numba', 'numpy'"):
        pb.differentiate(lotka_volterra, compile=bad)
    with pytest.raises(ValueError, match="'auto', 'numba', 'numpy'"):
        pb.jit(lotka_volterra, compile=bad)


def test_the_option_survives_pickling():
    import pickle

    f = pickle.loads(pickle.dumps(pb.differentiate(lotka_volterra, compile="numba")))
    assert f.compile == "numba"


def test_compiled_loops_are_reused_by_another_process(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, pullback as pb
        from tests.backends.test_numba_loops import lotka_volterra, THETA, X0
        f = pb.differentiate(lotka_volterra, compile="numba")
        f.grad(THETA, X0)
        names = f._stage("grad", (THETA, X0))._fn.__globals__
        loops = [v for k, v in names.items() if k.startswith("loop")]
        print(sum(sum(l.stats.cache_hits.values()) for l in loops), sum(sum(l.stats.cache_misses.values())
              for l in loops))
    """)
    env = {**os.environ, "PULLBACK_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.getcwd()}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
            for _ in range(2)]
    first, second = (tuple(map(int, r.stdout.split())) for r in runs)
    assert first == (0, 2)  # both loops compiled
    assert second == (2, 0)  # and loaded from the cache by the next process
    assert len(list(tmp_path.glob("*.py"))) == 1  # the printed module, named by its source's hash


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PULLBACK_CACHE_DIR", str(tmp_path))
    path = numba_loops.module_file("x = 1\n", "f")
    assert os.path.dirname(path) == str(tmp_path) and open(path).read() == "x = 1\n"
    assert numba_loops.module_file("x = 1\n", "f") == path


@given(programs(dtypes=("float64",), smooth=True, max_ops=4), st.integers(0, 2**16))
@examples(25, sampled=2)
def test_random_loop_bodies_compile_and_match_numpy(p, seed):
    """Each generated body compiles (no fallback; or it stays NumPy, saying which primitive Numba lacks)
    and gives NumPy's values and gradients."""
    looped, _, args = _loop_pair(p)
    with np.errstate(all="ignore"):
        expected = pb.jit(looped, compile="numpy")(*args)
    if not np.all(np.isfinite(expected)):
        return
    wrt = tuple(range(len(args)))
    fast = pb.differentiate(looped, argnums=wrt, compile="numba")
    slow = pb.differentiate(looped, argnums=wrt, compile="numpy")
    np.testing.assert_allclose(fast(*args), expected, rtol=1e-9, atol=1e-10)
    g = fast.grad(*args)
    for a, b in zip(g, slow.grad(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
    for stage in ("primal", "grad"):  # read after the calls: a body Numba refused would print as NumPy now
        src = fast.source(*args, program=stage)
        assert _compiled(src) or "stays NumPy: Numba cannot compile" in src, f"the {stage} loop stayed NumPy"
    rng = np.random.default_rng(seed)
    direction = [rng.standard_normal(np.shape(a)) for a in args]
    eps = 1e-6
    plus = slow(*[a + eps * d for a, d in zip(args, direction)])
    minus = slow(*[a - eps * d for a, d in zip(args, direction)])
    fd = (plus - minus) / (2 * eps)
    assert np.isclose(sum(np.sum(gi * d) for gi, d in zip(g, direction)), fd, rtol=1e-5, atol=1e-6)


def test_the_readme_shows_the_program_the_example_prints():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    printed = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if b.startswith("import numba\n"
                                                                                            "import numpy as np\n"))
    example = Path(__file__).parents[2] / "examples" / "compiled_loops.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
    assert printed.strip() in out


def test_without_a_cache_directory_to_write_the_loops_stay_numpy(monkeypatch, tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("PULLBACK_CACHE_DIR", str(blocked / "sub"))  # under a file: cannot be made
    f = pb.differentiate(lotka_volterra, compile="numba")
    with caplog.at_level(logging.WARNING, logger="pullback"):
        value = f(THETA, X0)
    assert value == pytest.approx(lotka_volterra(THETA, X0))
    assert not _compiled(f.source(THETA, X0)) and any("running it as NumPy" in r.getMessage() for r in caplog.records)


def test_a_division_by_zero_in_a_compiled_loop_is_inf_as_in_numpy():
    def f(x):
        return pb.fori_loop(0, 600, lambda i, c: c / (c - c) + c, x)

    with np.errstate(all="ignore"):
        want = pb.jit(f, compile="numpy")(np.float64(2.0))
    got = pb.jit(f, compile="numba")
    assert np.isnan(want) and np.isnan(got(np.float64(2.0))) and _compiled(got.source(np.float64(2.0)))


def test_clip_of_a_0d_carry_stays_numpy_saying_why():
    """Found by the random loop bodies: Numba cannot type ``np.clip`` of the scalar it passes for a 0-d
    carry; the loop stays NumPy up front, with the reason printed, rather than failing at its first call."""
    def looped(c0):
        def body(c, x):
            return np.clip(c, -1.0, 1.0) * 0.5 + x, c
        return pb.scan(body, c0, np.linspace(0.0, 1.0, 5))[0]

    x = np.array(0.54784675)
    f = pb.differentiate(looped, compile="numba")
    want = x
    for t in np.linspace(0.0, 1.0, 5):
        want = np.clip(want, -1.0, 1.0) * 0.5 + t
    np.testing.assert_allclose(f(x), want, rtol=1e-12)
    assert "stays NumPy: Numba cannot compile clip of a 0-d value" in f.source(x, program="primal")


def test_a_reshape_to_0d_in_a_gradient_loop_compiles():
    """Found by the random loop bodies (--runslow): the derivative of ``np.ravel`` of a 0-d carry reshapes
    a one-element array to 0-d, which Numba types only as an index, ``x[0]``; as ``x.reshape(())`` the
    loop failed at its first call and ran as NumPy."""
    def looped(c0):
        def step(c, _):
            return c * 0.5 + 0.1 * np.tanh(np.sum(np.ravel(c))), np.sum(np.ravel(c))
        c, ys = pb.scan(step, c0, None, length=6)
        return np.sum(c) + np.sum(ys * np.arange(1.0, 7.0))

    _scalar_loop_compiles(looped, absent=".reshape(())")


def test_a_product_and_a_broadcast_of_a_0d_value_in_a_gradient_loop_compile():
    """Found by the random loop bodies (--runslow): the derivative of ``r @ r`` for ``r = np.ravel(c)`` of a
    0-d carry broadcasts ``c`` and takes outer products with a 0-d cotangent; Numba's scalars take neither
    ``np.broadcast_to`` nor ``np.multiply.outer``, so they print as ``np.full`` and ``*``."""
    def looped(c0):
        def step(c, _):
            r = np.ravel(c)
            return -c * 0.5 + 0.1 * np.dot(r, r), -c
        c, ys = pb.scan(step, c0, None, length=4)
        return np.sum(c) + np.sum(ys)

    _scalar_loop_compiles(looped, absent="multiply.outer")


def _scalar_loop_compiles(looped, absent: str) -> None:
    """A 0-d carry's loop and its gradient's both compile, without ``absent`` in the printed source, and
    give NumPy's gradient and finite differences'."""
    x = np.array(0.54784675)
    f = pb.differentiate(looped, compile="numba")
    g = f.grad(x)
    np.testing.assert_allclose(g, pb.differentiate(looped, compile="numpy").grad(x), rtol=1e-12)
    _matches_finite_differences([g], looped, (x,))
    src = f.source(x, program="grad")  # after the call: a loop Numba refused would print as NumPy now
    assert _compiled(src) == 2 and absent not in src


def test_expit_in_a_loop_compiles_as_its_formula():
    """Found by the random loop bodies (--runslow, more examples): Numba compiles no ``scipy.special``;
    inside a compiled loop expit prints as ``1.0 / (1.0 + np.exp(-x))``, which is how SciPy computes it."""
    import scipy.special

    def looped(c0):
        def step(c, _):
            return c * 0.5 + 0.1 * np.tanh(scipy.special.expit(-c)), scipy.special.expit(-c)
        c, ys = pb.scan(step, c0, None, length=6)
        return np.sum(c) + np.sum(ys * np.arange(1.0, 7.0))

    x = np.array(0.54784675)
    f = pb.differentiate(looped, compile="numba")
    value, g = f.value_and_grad(x)
    want = pb.differentiate(looped, compile="numpy").value_and_grad(x)
    np.testing.assert_allclose(value, want[0], rtol=1e-14)
    np.testing.assert_allclose(g, want[1], rtol=1e-13)
    _matches_finite_differences([g], looped, (x,))
    for stage in ("primal", "grad"):  # after the calls: a loop Numba refused would print as NumPy now
        src = f.source(x, program=stage)
        assert _compiled(src) and "1.0 / (1.0 + np.exp(-" in src and "import scipy" not in src


def _kalman(T: int, dh: int = 2, dv: int = 3):
    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    import kalman_filter as kf

    rng = np.random.default_rng(dh)
    A = 0.9 * np.eye(dh) + 0.05 * rng.standard_normal((dh, dh))
    B = rng.standard_normal((dv, dh))
    v = rng.standard_normal((T, dv))
    return kf.kalman_nll, (A, B, np.log(0.09), np.log(0.01), v, np.zeros(dh), np.eye(dh))


def test_a_kalman_filter_compiles_its_factorisations_and_solves_both_ways():
    """The Cholesky factor and the triangular solves of each step, and the products and solves of the
    transposed (backward) step, print as small compiled functions: both loops compile, and give NumPy's
    LAPACK values and gradients."""
    nll, args = _kalman(8)
    argnums = (0, 1, 2, 3)
    f = pb.differentiate(nll, argnums=argnums, compile="numba")
    value, grads = f.value_and_grad(*args)
    want_value, want = pb.differentiate(nll, argnums=argnums, compile="numpy").value_and_grad(*args)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    _matches_finite_differences(grads, lambda *a: nll(*a, *args[4:]), args[:4])
    src = f.source(*args)  # after the calls: a loop Numba refused would print as NumPy now
    loops = [part for part in src.split("\ndef ") if part.startswith("loop")]
    assert len(loops) == 2 and "scipy" not in src.split("\ndef kalman_nll_grad")[0]
    assert "cholesky_lower(" in loops[0] and "solve_triangular(" in loops[1] and "triangular_product(" in loops[1]


def test_auto_leaves_a_kalman_filter_of_wide_matrices_to_lapack():
    """``auto`` compiles the loops of small steps, judged by a step's arrays (not the loop's stacked
    records: 100 steps of 17 x 17 are steps of 289 numbers), and leaves to LAPACK the loops that factorise
    matrices wider than ``AUTO_MAX_FACTOR_N`` (the observations' covariance here)."""
    nll, args = _kalman(100, dh=2)
    assert _compiled(pb.differentiate(nll, argnums=(0, 1), compile="auto").source(*args))
    nll, args = _kalman(100, dh=numba_loops.AUTO_MAX_FACTOR_N + 1)
    assert _compiled(pb.differentiate(nll, argnums=(0, 1), compile="auto").source(*args))
    nll, args = _kalman(100, dh=2, dv=numba_loops.AUTO_MAX_FACTOR_N + 1)
    assert not _compiled(pb.differentiate(nll, argnums=(0, 1), compile="auto").source(*args))


def test_a_cast_of_a_0d_value_in_a_gradient_loop_compiles():
    """Found by the random loop bodies (--runslow, more examples): the derivative of ``np.maximum`` of a 0-d
    carry casts comparisons of scalars to float, ``gt.astype(np.float64)``, which Numba's scalars lack."""
    def looped(c0):
        def step(c, _):
            out = np.maximum(c, 0.5 * c)
            return c * 0.5 + 0.1 * np.tanh(out), out
        c, ys = pb.scan(step, c0, None, length=6)
        return np.sum(c) + np.sum(ys * np.arange(1.0, 7.0))

    _scalar_loop_compiles(looped, absent=".astype(")


def test_a_compiled_loops_parameter_that_starts_a_carry_is_named_as_the_carry():
    """The function Numba compiles for a loop is a scope of its own: the parameter that only starts the
    carry ``h`` is ``h`` itself (``def loop(W, h, xs)``), no ``h = h_1`` copying it first."""
    def f(W, h0, xs):
        def step(h, x):
            h = np.tanh(W @ h + x)
            return h, h
        _, hs = pb.scan(step, np.sin(h0), xs)
        return np.sum(hs ** 2)

    rng = np.random.default_rng(3)
    args = (0.5 * rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal((200, 3)))
    d = pb.differentiate(f, argnums=(0, 1), compile="numba")
    src = d.source(*args)
    kernel = src.split("def loop(", 1)[1].split("\n\n\n", 1)[0]
    params = kernel.split(")", 1)[0].split(", ")
    assert "h" in params, kernel
    before_loop = kernel.split("for t in range(", 1)[0]
    assert not re.search(r"\n\s+h = ", before_loop), kernel
    value, grads = d.value_and_grad(*args)
    value_np, grads_np = pb.differentiate(f, argnums=(0, 1), compile="numpy").value_and_grad(*args)
    np.testing.assert_allclose(value, value_np, rtol=1e-12)
    for g, g_np in zip(grads, grads_np):
        np.testing.assert_allclose(g, g_np, rtol=1e-10, atol=1e-12)
    direction = [rng.standard_normal((3, 3)), rng.standard_normal(3)]
    eps = 1e-6
    plus = f(args[0] + eps * direction[0], args[1] + eps * direction[1], args[2])
    minus = f(args[0] - eps * direction[0], args[1] - eps * direction[1], args[2])
    fd = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(sum(np.sum(g * u) for g, u in zip(grads, direction)), fd, rtol=1e-6)
