"""scan and fori_loop: values against Python loops, derivatives against the unrolled program and
finite differences, and the printed code a loop whatever the number of steps."""

import os
import sys
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pullback.testing import check_grads

import pullback as pb
from pullback.demo import rnn_loss as rnn  # h = tanh(W h + U x) by pb.scan: sum(h) + sum of sum(h**2)
from tests.regressions.test_random_programs import examples, programs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import kalman_filter as kf  # noqa: E402

RNG = np.random.default_rng(0)


def rnn_unrolled(W, U, h0, xs):
    h, total = h0, 0.0
    for x in xs:
        h = np.tanh(W @ h + U @ x)
        total = total + np.sum(h ** 2)
    return np.sum(h) + total


def rnn_args(T=6, n=3, m=2):
    return (0.5 * RNG.standard_normal((n, n)), RNG.standard_normal((n, m)), RNG.standard_normal(n),
            RNG.standard_normal((T, m)))


def test_scan_runs_concretely_like_a_python_loop():
    carry, ys = pb.scan(lambda c, x: (c + x, c * x), 1.0, np.arange(4.0))
    assert carry == 7.0
    np.testing.assert_array_equal(ys, [0.0, 1.0, 4.0, 12.0])


def test_scan_values_and_gradients_match_unrolled():
    args = rnn_args()
    np.testing.assert_allclose(pb.jit(rnn)(*args), rnn_unrolled(*args), rtol=1e-13)
    g = pb.grad(rnn, argnums=(0, 1, 2, 3))(*args)
    g_unrolled = pb.grad(rnn_unrolled, argnums=(0, 1, 2, 3))(*args)
    for a, b in zip(g, g_unrolled):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_scan_second_order_against_finite_differences():
    W, U, h0, xs = rnn_args(T=4)
    check_grads(lambda W, h0: rnn(W, U, h0, xs), (W, h0), order=2)


def test_scan_jvp_and_vjp_against_finite_differences():
    check_grads(rnn, rnn_args(T=3), order=1)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_pytrees_reverse_and_length(reverse):
    def f(a, xs):
        def step(carry, x):
            p, q = carry["p"], carry["q"]
            new = {"p": p * np.cos(x["u"]) + q, "q": q * 0.9 + a * x["v"]}
            return new, (new["p"] * 2.0, [new["q"]])

        init = {"p": a, "q": np.ones(2)}
        out, (ys1, [ys2]) = pb.scan(step, init, xs, reverse=reverse)
        return np.sum(out["p"]) + np.sum(out["q"]) + np.sum(ys1 ** 2) + np.sum(ys2)

    def unrolled(a, xs):
        p, q, ys1, ys2 = a, np.ones(2), [], []
        order = range(len(xs["u"]))[::-1] if reverse else range(len(xs["u"]))
        for t in order:
            p, q = p * np.cos(xs["u"][t]) + q, q * 0.9 + a * xs["v"][t]
            ys1.append(p * 2.0)
            ys2.append(q)
        return np.sum(p) + np.sum(q) + sum(np.sum(y ** 2) for y in ys1) + sum(np.sum(y) for y in ys2)

    a, xs = RNG.standard_normal(2), {"u": RNG.standard_normal((5, 2)), "v": RNG.standard_normal((5, 2))}
    np.testing.assert_allclose(pb.jit(f)(a, xs), unrolled(a, xs), rtol=1e-13)
    np.testing.assert_allclose(pb.grad(f)(a, xs), pb.grad(unrolled)(a, xs), rtol=1e-12)


def test_scan_without_xs_uses_length():
    def f(x):
        c, _ = pb.scan(lambda c, _: (np.sin(c) * 0.9 + 0.1 * c, None), x, length=7)
        return c

    def unrolled(x):
        for _ in range(7):
            x = np.sin(x) * 0.9 + 0.1 * x
        return x

    x = np.array([0.3, -1.2])
    np.testing.assert_allclose(pb.jit(f)(x), unrolled(x), rtol=1e-14)
    np.testing.assert_allclose(pb.jit(lambda x: pb.grad(lambda y: np.sum(f(y)))(x))(x),
                               pb.grad(lambda y: np.sum(unrolled(y)))(x), rtol=1e-13)


def test_scan_of_zero_steps_returns_the_initial_carry_as_a_copy():
    def f(x, xs):
        c, ys = pb.scan(lambda c, x: (c * x, c), x, xs)
        return c, ys

    x = np.ones(3)
    c, ys = pb.jit(f)(x, np.empty((0, 3)))
    np.testing.assert_array_equal(c, x)
    assert ys.shape == (0, 3)
    assert not np.shares_memory(c, x)
    g = pb.grad(lambda x, xs: np.sum(f(x, xs)[0]))(x, np.empty((0, 3)))
    np.testing.assert_array_equal(g, np.ones(3))


def test_scan_complex_and_float32():
    def f(z, xs):
        c, _ = pb.scan(lambda c, x: (c * x + np.conj(c) * 0.5j, None), z, xs)
        return np.sum(np.abs(c) ** 2)

    z = RNG.standard_normal(2) + 1j * RNG.standard_normal(2)
    xs = 0.5 * (RNG.standard_normal((4, 2)) + 1j * RNG.standard_normal((4, 2)))
    check_grads(f, (z, xs), order=1)
    x32 = RNG.standard_normal(3).astype(np.float32)
    out = pb.grad(lambda x: np.sum(pb.scan(lambda c, x: (c * np.float32(0.5) + x, None), x,
                                           np.ones((3, 3), np.float32))[0]))(x32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.full(3, 0.125), rtol=1e-6)


def test_the_gradient_prints_two_loops_whatever_the_length():
    sources = [pb.differentiate(rnn, argnums=(0, 1)).source(*rnn_args(T=T)) for T in (3, 300)]
    assert abs(len(sources[0].splitlines()) - len(sources[1].splitlines())) <= 3  # CSE may merge a fill or two
    assert "for t in range(300):" in sources[1]
    assert "for t in range(299, -1, -1):" in sources[1]
    assert "np.empty((300, 3)" in sources[1]  # residuals stacked in arrays allocated once


def test_loop_invariant_cotangents_are_summed_not_stacked():
    src = pb.differentiate(rnn, argnums=(0,)).source(*rnn_args(T=50))
    assert "(50, 3, 3)" not in src  # W's cotangent accumulates in the carry of the backward loop


def test_kalman_filter_scan_against_finite_differences():
    A, B, v = kf.simulate(T=20)  # (against the unrolled filter: tests/examples/test_applications.py)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    check_grads(lambda A, B: kf.kalman_nll(A, B, *args[2:]), (A, B), order=1)


def test_kalman_filter_over_10000_steps_compiles_in_under_a_second():
    A, B, v = kf.simulate(T=10_000)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    f = pb.differentiate(kf.kalman_nll, argnums=(0, 1, 2, 3))
    start = time.perf_counter()
    f.source(*args)
    assert time.perf_counter() - start < 5.0  # typically 0.1 s; generous for loaded CI machines
    value, _ = f.value_and_grad(*args)
    assert np.isfinite(value)


def test_fori_loop():
    def f(x):
        return pb.fori_loop(1, 5, lambda i, c: c * np.cos(c) + i, x)

    def unrolled(x):
        for i in range(1, 5):
            x = x * np.cos(x) + i
        return x

    x = np.array([0.2, 0.4])
    np.testing.assert_allclose(pb.jit(f)(x), unrolled(x), rtol=1e-14)
    np.testing.assert_allclose(f(x), unrolled(x), rtol=1e-14)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(f(x)))(x), pb.grad(lambda x: np.sum(unrolled(x)))(x),
                               rtol=1e-13)


def test_fori_loop_with_traced_bounds_is_a_while_loop():
    f = pb.jit(lambda x, n: pb.fori_loop(0, n, lambda i, c: c * 0.5 + i, x))
    assert f(1.0, np.int64(3)) == ((1.0 * 0.5 + 0) * 0.5 + 1) * 0.5 + 2
    assert "while lt:" in f.source(1.0, np.int64(3))
    with pytest.raises(pb.TracingError, match="integers"):
        pb.jit(lambda x, n: pb.fori_loop(0, n, lambda i, c: c + 1.0, x))(1.0, 3.0)


def test_carry_that_changes_dtype_is_refused():
    with pytest.raises(pb.TracingError, match="carry component 0"):
        pb.jit(lambda x: pb.scan(lambda c, x: (c + x, None), np.float32(0), x)[0])(np.ones(3))


def test_body_closing_over_traced_values_and_arrays():
    M = RNG.standard_normal((2, 2))

    def f(a, x):
        b = np.exp(a)
        c, _ = pb.scan(lambda c, _: (M @ c * b, None), x, length=3)
        return np.sum(c)

    a, x = 0.3, RNG.standard_normal(2)
    check_grads(f, (a, x), order=2)


def test_ir_shows_the_body_under_the_equation():
    text = str(pb.make_ir(rnn)(*rnn_args(T=2)))
    assert "scan[body=<body>" in text and "program step(" in text


# --- random loop bodies ----------------------------------------------------------------------

T_STEPS = 3


def _loop_pair(p):
    """A scan over ``p`` and the same loop unrolled: the carry is p's first input; the loop's xs are
    T steps of its second (if any); the new carry mixes the old one with p's output."""
    inputs = [np.asarray(x) for x in p.inputs]
    xs = np.stack([inputs[1] * (1.0 + 0.1 * t) for t in range(T_STEPS)]) if len(inputs) > 1 else None
    rest = inputs[2:]

    def step(c, x, *others):
        out = p(c, *([x] if x is not None else []), *others)
        return c * 0.5 + 0.1 * np.tanh(np.sum(out)), np.sum(out)

    def looped(c0, xs=None, *others):
        c, ys = pb.scan(lambda c, x: step(c, x, *others), c0, xs, length=T_STEPS)
        out = np.sum(c) + np.sum(ys * np.arange(1.0, T_STEPS + 1))
        return np.real(out) + 0.5 * np.imag(out)

    def unrolled(c0, xs=None, *others):
        c, total = c0, 0.0
        for t in range(T_STEPS):
            c, y = step(c, xs[t] if xs is not None else None, *others)
            total = total + y * (t + 1.0)
        out = np.sum(c) + total
        return np.real(out) + 0.5 * np.imag(out)

    return looped, unrolled, (inputs[0],) if xs is None else (inputs[0], xs, *rest)


@given(programs(dtypes=("float64", "complex128"), smooth=True, max_ops=4), st.integers(0, 2**16))
@examples(25, sampled=8)
def test_random_loop_bodies_match_the_unrolled_program(p, seed):
    looped, unrolled, args = _loop_pair(p)
    with np.errstate(all="ignore"):
        expected = unrolled(*args)
    if not np.all(np.isfinite(expected)):
        return
    np.testing.assert_allclose(pb.jit(looped)(*args), expected, rtol=1e-9, atol=1e-9)
    wrt = tuple(range(len(args)))
    g = pb.grad(looped, argnums=wrt)(*args)
    g_u = pb.grad(unrolled, argnums=wrt)(*args)
    for a, b in zip(g, g_u):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9)
    rng = np.random.default_rng(seed)
    tangents = tuple(rng.standard_normal(np.shape(args[i])) * (1 + 1j if np.iscomplexobj(args[i]) else 1)
                     for i in wrt)

    def on(f):
        return lambda *xs: f(*[xs[wrt.index(i)] if i in wrt else a for i, a in enumerate(args)])

    primals = tuple(args[i] for i in wrt)
    _, t_loop = pb.jvp(on(looped), primals, tangents)
    _, t_unrolled = pb.jvp(on(unrolled), primals, tangents)
    np.testing.assert_allclose(t_loop, t_unrolled, rtol=1e-8, atol=1e-9)


# --- checkpoint ------------------------------------------------------------------------------


def _step_rnn(W):
    def step(h, x):
        a = np.tanh(W @ h + x)
        return np.sin(a) * a, None

    return step


def test_kalman_gradient_takes_one_triangle_per_step_and_copies_only_the_carries():
    """The factor L is read by three triangular solves (two for K, one for w); each solve's JVP takes the
    triangle of L's tangent, which is L Phi(..), lower triangular already: simplified before the step is
    transposed, none is left, and the backward step takes one triangle, Phi's in the Cholesky rule (four
    before). The forward loop copies the two carries the backward one reads (mu_h, S_hh) into arrays; every
    other residual is made afresh each step and kept in a list, uncopied."""
    A, B, v = kf.simulate(T=40)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    src = pb.differentiate(kf.kalman_nll, argnums=(0, 1, 2, 3)).source(*args, program="grad")
    forward, backward = src.split("for t in range(40):")[1].split("for t in range(39, -1, -1):")
    assert backward.count("np.tril(") == 1 and "np.tril(" not in forward
    assert sum("= np.empty((40," in line for line in src.splitlines()) == 2
    assert _stacks(src, 40) > 2  # the others: lists
    assert "mu_h_steps = np.empty((40, 2)" in src and "S_hh_steps = np.empty((40, 2, 2)" in src


def _stacks(src: str, length: int) -> int:
    """The per-step stores a printed loop of ``length`` steps allocates: arrays, or lists of each step's array."""
    return sum(f"= np.empty(({length}," in line or f"= [None] * {length}" in line for line in src.splitlines())


def test_checkpointed_scan_stores_only_the_carry_and_matches():
    W = 0.5 * RNG.standard_normal((3, 3))
    h0, xs = RNG.standard_normal(3), RNG.standard_normal((6, 3))

    def f(h0, xs, remat):
        step = _step_rnn(W)
        h, _ = pb.scan(pb.checkpoint(step) if remat else step, h0, xs)
        return np.sum(h ** 2)

    g = pb.grad(lambda h0, xs: f(h0, xs, True), argnums=(0, 1))(h0, xs)
    g_plain = pb.grad(lambda h0, xs: f(h0, xs, False), argnums=(0, 1))(h0, xs)
    for a, b in zip(g, g_plain):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    check_grads(lambda h0, xs: f(h0, xs, True), (h0, xs), order=2)
    src = pb.differentiate(lambda h0, xs: f(h0, xs, True)).source(h0, xs)
    assert _stacks(src, 6) == 1  # the carry alone; the plain scan stacks three residuals
    plain = pb.differentiate(lambda h0, xs: f(h0, xs, False)).source(h0, xs)
    assert _stacks(plain, 6) > 1


def test_checkpoint_of_a_function_recomputes_in_the_backward_pass():
    def f(x):
        y = pb.checkpoint(lambda x: np.sin(np.cos(x)) * x)(x)
        return np.sum(y)

    x = RNG.standard_normal(4)
    np.testing.assert_allclose(pb.grad(f)(x), pb.grad(lambda x: np.sum(np.sin(np.cos(x)) * x))(x), rtol=1e-14)
    check_grads(f, (x,), order=2)
    src = pb.differentiate(f).source(x)
    assert src.count("= np.cos(x)") == 2  # once forward, once again in the backward pass
    assert pb.checkpoint(np.sin)(0.5) == np.sin(0.5)  # outside a trace it just runs


@pytest.mark.parametrize("k, reverse", [(True, False), (3, True), (4, False), (20, False)])
def test_scan_checkpointing_every_k_steps(k, reverse):
    W = 0.5 * RNG.standard_normal((3, 3))
    h0, xs = RNG.standard_normal(3), RNG.standard_normal((10, 3))

    def f(h0, xs, k):
        def step(h, x):
            a = np.tanh(W @ h + x)
            return np.sin(a) * a, np.sum(a)

        h, ys = pb.scan(step, h0, xs, reverse=reverse, checkpoint=k)
        return np.sum(h ** 2) + np.sum(ys * np.arange(10.0))

    np.testing.assert_allclose(pb.jit(lambda h0, xs: f(h0, xs, k))(h0, xs), f(h0, xs, None), rtol=1e-14)
    g = pb.grad(lambda h0, xs: f(h0, xs, k), argnums=(0, 1))(h0, xs)
    g_plain = pb.grad(lambda h0, xs: f(h0, xs, None), argnums=(0, 1))(h0, xs)
    for a, b in zip(g, g_plain):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    if k is True:  # blocks of 4, the last of 2: one loop over 3 blocks; no array of 10 intermediate states
        src = pb.differentiate(lambda h0, xs: f(h0, xs, k)).source(h0, xs)
        assert _stacks(src, 10) == 0 and "np.empty((3, 3)" in src
        loops = [line.strip().split(" in ")[1] for line in src.splitlines() if line.lstrip().startswith("for ")]
        assert loops == ["range(3):", "range(steps):", "range(2, -1, -1):", "range(steps):",
                         "range(steps - 1, -1, -1):"], loops
        assert sum("np.tanh(" in line and not line.lstrip().startswith("#") for line in src.splitlines()) == 2



@pytest.mark.parametrize("reverse", [False, True])
def test_checkpointing_a_prime_number_of_steps_prints_the_step_once(reverse):
    """13 steps in blocks of 4 (no divisor of 13 near its square root): one loop over the 4 blocks, in
    each a loop of min(4, 13 - 4 i) steps, so the step prints once forward, once recomputed and once
    transposed (not again for a tail block). Values, JVP and gradient match the plain scan; the
    gradient matches finite differences; nothing is stored per step of the 13."""
    W = 0.5 * RNG.standard_normal((3, 3))
    h0 = RNG.standard_normal(3)

    def f(h0, W, checkpoint):
        h, _ = pb.scan(lambda h, _: (np.sin(W @ h) + 0.5 * h, None), h0, None, length=13, reverse=reverse,
                       checkpoint=checkpoint)
        return np.sum(h ** 2)

    args = (h0, W)
    ck = pb.differentiate(lambda h0, W: f(h0, W, True), argnums=(0, 1))
    plain = pb.differentiate(lambda h0, W: f(h0, W, None), argnums=(0, 1))
    (v, g), (v_p, g_p) = ck.value_and_grad(*args), plain.value_and_grad(*args)
    np.testing.assert_allclose(v, v_p, rtol=1e-14)
    for a, b in zip(g, g_p):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    t = RNG.standard_normal(3)
    np.testing.assert_allclose(pb.jvp(lambda h0: f(h0, W, True), (h0,), (t,))[1],
                               pb.jvp(lambda h0: f(h0, W, None), (h0,), (t,))[1], rtol=1e-12)
    check_grads(lambda h0, W: f(h0, W, True), args, order=1)
    src = ck.source(*args)
    loops = [line.strip() for line in src.splitlines() if line.lstrip().startswith("for ")]
    up, down = ("range(4):", "range(steps):"), ("range(3, -1, -1):", "range(steps - 1, -1, -1):")
    forward, backward = (down, up) if reverse else (up, down)
    assert [line.split(" in ")[1] for line in loops] == [*forward, backward[0], forward[1], backward[1]], loops
    assert "steps = np.minimum(4, " in src
    assert sum("np.sin(" in line and not line.lstrip().startswith("#") for line in src.splitlines()) == 2
    assert _stacks(src, 13) == 0 and "np.empty((4, 3)" in src  # a carry per block; a block's steps in lists


def _forced_oscillator(theta, u0, forcing, dt, checkpoint, reverse=False):
    """RK4 on du/dt = (u1, -k u0 - c u1 + f_t) with a forcing f_t per step (xs), the states stacked (ys)."""
    k, c = theta[0], theta[1]

    def field(u, f):
        return np.stack([u[1], -k * u[0] - c * u[1] + f])

    def step(u, f):
        k1 = field(u, f)
        k2 = field(u + 0.5 * dt * k1, f)
        k3 = field(u + 0.5 * dt * k2, f)
        k4 = field(u + dt * k3, f)
        u = u + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return u, (u, np.sum(u ** 2))

    u, (path, energy) = pb.scan(step, u0, forcing, reverse=reverse, checkpoint=checkpoint)
    return np.sum(u ** 2) + np.sum(path[:, 0] * np.arange(1.0, 1.0 + len(forcing))) + np.sum(np.sin(energy))


def _forced_oscillator_unrolled(theta, u0, forcing, dt, reverse=False):
    k, c = theta
    u, path, energy = np.asarray(u0, float), [None] * len(forcing), [None] * len(forcing)
    for t in (range(len(forcing) - 1, -1, -1) if reverse else range(len(forcing))):
        f = forcing[t]
        ks = []
        for scale in (0.0, 0.5, 0.5, 1.0):
            v = u + scale * dt * ks[-1] if ks else u
            ks.append(np.array([v[1], -k * v[0] - c * v[1] + f]))
        u = u + dt / 6.0 * (ks[0] + 2.0 * ks[1] + 2.0 * ks[2] + ks[3])
        path[t], energy[t] = u, np.sum(u ** 2)
    path = np.array(path)
    return np.sum(u ** 2) + np.sum(path[:, 0] * np.arange(1.0, 1.0 + len(forcing))) + np.sum(np.sin(energy))


@pytest.mark.parametrize("reverse", [False, True])
def test_checkpointing_a_prime_number_of_steps_with_xs_and_ys(reverse):
    """RK4 over 29 forcing values (xs) stacking its states (ys), ``checkpoint=True``: blocks of 6, the last
    of 5, as one loop over the 5 blocks reading their 6 rows of the forcing (padded with zeros to 30) and
    writing their 6 rows of the states, each a loop of ``min(6, 29 - 6 i)`` steps; the step printed once
    forward, once recomputed and once transposed. Value against the unrolled NumPy loop, gradient against
    its central differences and the plain scan's, forward mode against the plain scan's."""
    theta, u0, forcing, dt = np.array([2.0, 0.3]), np.array([1.0, 0.0]), np.sin(np.arange(29.0)), 0.05

    def ck(theta, u0, forcing):
        return _forced_oscillator(theta, u0, forcing, dt, True, reverse)

    def plain(theta, u0, forcing):
        return _forced_oscillator(theta, u0, forcing, dt, None, reverse)

    d = pb.differentiate(ck, argnums=(0, 1, 2))
    value, grads = d.value_and_grad(theta, u0, forcing)
    np.testing.assert_allclose(value, _forced_oscillator_unrolled(theta, u0, forcing, dt, reverse), rtol=1e-13)
    args, eps = [theta, u0, forcing], 1e-6
    for i, g in enumerate(grads):
        fd = np.zeros_like(args[i])
        for j in range(args[i].size):
            e = np.zeros_like(args[i])
            e.flat[j] = eps
            hi, lo = list(args), list(args)
            hi[i], lo[i] = args[i] + e, args[i] - e
            fd.flat[j] = (_forced_oscillator_unrolled(*hi, dt, reverse)
                          - _forced_oscillator_unrolled(*lo, dt, reverse)) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    for a, b in zip(grads, pb.grad(plain, argnums=(0, 1, 2))(theta, u0, forcing)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    tangents = [RNG.standard_normal(a.shape) for a in args]
    np.testing.assert_allclose(pb.jvp(ck, args, tangents)[1], pb.jvp(plain, args, tangents)[1], rtol=1e-12)
    src = d.source(theta, u0, forcing)
    loops = [line.strip().split(" in ")[1] for line in src.splitlines() if line.lstrip().startswith("for ")]
    up, down = ("range(5):", "range(steps):"), ("range(4, -1, -1):", "range(steps - 1, -1, -1):")
    forward, backward = (down, up) if reverse else (up, down)
    assert loops == [*forward, backward[0], forward[1], backward[1]], loops
    assert "forcing_padded[:29] = forcing" in src and "forcing_block = forcing_blocks[t]" in src
    assert "np.zeros((6, 2)" in src and _stacks(src, 29) == 0  # a block's states; nothing kept per step of 29
    # the field's four calls, forward, recomputed and transposed (twice as many with a tail block printing
    # them again), quoted above their lines (once more where the transposed step reads the residuals)
    assert 3 * 4 <= sum(line.strip().startswith("# ") and "np.stack([u[1]" in line for line in src.splitlines()) < 16


# --- cond, switch, while_loop -----------------------------------------------------------------


def _branchy(x, y):
    z = pb.cond(np.sum(x) > 0, lambda a, b: np.sin(a) * b, lambda a, b: np.cos(a) + b * b, x, y)
    return np.sum(z * x)


def _branchy_numpy(x, y):
    z = np.sin(x) * y if np.sum(x) > 0 else np.cos(x) + y * y
    return np.sum(z * x)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_differentiates_the_branch_taken(sign):
    x, y = sign * np.abs(RNG.standard_normal(3)), RNG.standard_normal(3)
    np.testing.assert_allclose(pb.jit(_branchy)(x, y), _branchy_numpy(x, y), rtol=1e-14)
    check_grads(_branchy, (x, y), order=2)
    g = pb.grad(_branchy, argnums=(0, 1))(x, y)
    g_np = pb.grad(lambda x, y: np.sum((np.sin(x) * y if sign > 0 else np.cos(x) + y * y) * x), argnums=(0, 1))(x, y)
    for a, b in zip(g, g_np):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_cond_prints_if_else_and_runs_one_branch():
    src = pb.differentiate(_branchy).source(np.ones(2), np.ones(2))
    assert "if gt:" in src and "else:" in src
    assert pb.cond(True, lambda: 1.0, lambda: 2.0) == 1.0  # known predicate: chosen when tracing


def test_switch_clamps_the_index_like_jax():
    branches = [lambda x: x * 2.0, lambda x: np.sin(x), lambda x: x ** 3]

    def f(i, x):
        return pb.switch(i, branches, x)

    x = np.array([0.3, 0.5])
    for i in (-1, 0, 1, 2, 7):
        expected = branches[min(max(i, 0), 2)](x)
        np.testing.assert_allclose(pb.jit(f)(np.int64(i), x), expected, rtol=1e-15)
        np.testing.assert_allclose(pb.grad(lambda x, i=i: np.sum(f(np.int64(i), x)))(x),
                                   pb.grad(lambda x, i=i: np.sum(branches[min(max(i, 0), 2)](x)))(x), rtol=1e-14)


def test_cond_branches_must_agree():
    with pytest.raises(pb.TracingError, match="same structure"):
        pb.jit(lambda x: pb.cond(x[0] > 0, lambda x: x, lambda x: x[:1], x))(np.ones(2))


def test_while_loop_forward_and_reverse_mode():
    def f(x):
        return pb.while_loop(lambda c: c[1] < 5, lambda c: (np.sin(c[0]) + c[0], c[1] + 1), (x, 0))[0]

    def unrolled(x):
        for _ in range(5):
            x = np.sin(x) + x
        return x

    x = np.array([0.5, 0.1])
    np.testing.assert_allclose(pb.jit(f)(x), unrolled(x), rtol=1e-15)
    np.testing.assert_allclose(f(x), unrolled(x), rtol=1e-15)
    t = RNG.standard_normal(2)
    np.testing.assert_allclose(pb.jvp(f, (x,), (t,))[1], pb.jvp(unrolled, (x,), (t,))[1], rtol=1e-13)
    assert "while lt:" in pb.jit(f).source(x)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(f(x)))(x), pb.grad(lambda x: np.sum(unrolled(x)))(x),
                               rtol=1e-13)


def test_while_loop_with_a_value_dependent_trip_count():
    def newton_sqrt(a):
        def body(c):
            x, _ = c
            return 0.5 * (x + a / x), x

        return pb.while_loop(lambda c: np.abs(c[0] - c[1]) > 1e-12, body, (a, a + 1.0))[0]

    a = np.float64(7.0)
    np.testing.assert_allclose(pb.jit(newton_sqrt)(a), np.sqrt(7.0), rtol=1e-14)
    # the derivative through the converged iteration: 1 / (2 sqrt a)
    np.testing.assert_allclose(pb.jvp(newton_sqrt, (a,), (1.0,))[1], 0.5 / np.sqrt(7.0), rtol=1e-8)


def test_the_benchmarks_hand_written_kalman_gradient_is_right():
    from benchmarks.loops import data, grad_numpy

    args = data(3, 15)
    value, grads = grad_numpy(*args)
    value_pb, grads_pb = kf.nll.value_and_grad(*args)
    np.testing.assert_allclose(value, value_pb, rtol=1e-13)
    for a, b in zip(grads, grads_pb):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_checkpoint_returning_one_value_twice_and_an_operand():
    """Regression: results printed in place shared one name, and the del after one's last use ended the other."""
    def f(x):
        y = np.sin(x)
        a, b, c = pb.checkpoint(lambda y: (np.exp(y), np.exp(y), y))(y)
        u = a * 2.0
        return u + b + c + y

    x = RNG.standard_normal(3)
    np.testing.assert_allclose(pb.jit(f)(x), 3 * np.exp(np.sin(x)) + 2 * np.sin(x), rtol=1e-15)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(f(x)))(x), (3 * np.exp(np.sin(x)) + 2) * np.cos(x),
                               rtol=1e-14)


def test_checkpointed_kalman_with_a_tail_block():
    A, B, v = kf.simulate(T=37)  # blocks of 7: 5 blocks and a tail of 2
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    _, g = kf.nll.value_and_grad(*args)
    _, g_ck = pb.differentiate(lambda *a: kf.kalman_nll(*a, checkpoint=True), argnums=(0, 1, 2, 3)
                               ).value_and_grad(*args)
    for a, b in zip(g, g_ck):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_an_unnamed_invariant_and_its_sum_are_named_from_its_expression():
    """``0.01 * k``, read by every step and named by no one, is hoisted as ``mul_k``; the backward loop
    sums the cotangent of its broadcast as ``mul_k_bar_sum``, not in a ``carry``."""
    def cubic_decay(k, x0):
        def step(x, _):
            x = x - 0.01 * k * x ** 3
            return x, x
        _, xs = pb.scan(step, x0, None, length=50)
        return np.sum(xs)

    k, x0 = 0.5, np.array([1.0, 0.5, -0.8])
    d = pb.differentiate(cubic_decay, argnums=(0, 1), compile="numpy")
    src = d.source(k, x0)
    assert "mul_k = 0.01 * k\n" in src and "carry" not in src, src
    assert "mul_k_bar_sum = mul_k_bar_sum + " in src or "mul_k_bar_sum = mul_k_bar_sum - " in src, src
    _, (gk, gx) = d.value_and_grad(k, x0)
    eps = 1e-6
    np.testing.assert_allclose(gk, (cubic_decay(k + eps, x0) - cubic_decay(k - eps, x0)) / (2 * eps), rtol=1e-6)
    fd = [(cubic_decay(k, x0 + eps * e) - cubic_decay(k, x0 - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(gx, fd, rtol=1e-6)
