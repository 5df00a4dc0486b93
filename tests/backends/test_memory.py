"""Memory planning must not change results, never mutate the caller's arrays, and never
overwrite a value that is still needed (directly or through a view)."""

import re

import numpy as np

import pullback as pb
from pullback import linalg as pla
from pullback.backends import memory

N = 300  # 90,000 elements: above memory.MIN_SIZE, so buffers are reused
assert N * N >= memory.MIN_SIZE


def test_user_inputs_are_never_mutated():
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    A = X @ X.T / N + np.eye(N)
    copies = [a.copy() for a in (X, Y, A)]

    def f(X, Y, A):
        L = pla.cholesky(A)
        Z = pla.solve_triangular(L, np.exp(X) * Y, lower=True)
        return np.sum(np.tanh(Z) - X)

    src = pb.differentiate(f, argnums=(0, 1, 2)).source(X, Y, A)
    assert "out=" in src or "*=" in src or "overwrite_" in src  # the plan did reuse buffers
    pb.value_and_grad(f, argnums=(0, 1, 2))(X, Y, A)
    pb.jit(f)(X, Y, A)
    for a, c in zip((X, Y, A), copies):
        np.testing.assert_array_equal(a, c)


def test_values_used_after_a_would_be_in_place_op_keep_their_content():
    x = np.random.default_rng(1).standard_normal((N, N))

    def f(x):
        t = x * 2.0
        u = np.exp(t)  # t's last direct use, but the view tt below is still alive
        tt = t.T
        return u + tt, t[0]

    want = f(x)
    got = pb.jit(f)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_planned_and_unplanned_code_agree():
    from pullback.backends import codegen
    from pullback.backends.numpy import backend as numpy_backend

    rng = np.random.default_rng(2)
    A, b = rng.standard_normal((N, N)), rng.standard_normal(N)

    def f(A, b):
        return np.sum(np.linalg.solve(A @ A.T + np.eye(N), b) ** 2)

    program = pb.differentiate(f, argnums=(0, 1)).ir(A, b, stage="grad")
    outs = []
    for in_place in (True, False):
        gen = codegen.generate(program, numpy_backend, in_place=in_place)
        ns: dict = {}
        exec(compile(gen.source, "<planned>", "exec"), ns)
        outs.append(ns[gen.function_name](A, b, **gen.constants))
    for planned, plain in zip(outs[0], outs[1]):
        np.testing.assert_array_equal(planned, plain)


def test_plan_respects_views_inputs_and_outputs():
    x = np.ones((N, N))

    def f(x):
        t = x + 1.0
        v = t.T  # a view: t's buffer stays live while v is
        w = np.exp(t)
        return w + v

    program = pb.make_ir(f)(x)
    plan = memory.plan(program)
    exp_index = next(i for i, e in enumerate(program.eqns) if e.prim.name == "exp")
    assert exp_index not in plan  # t is still read through v
    assert all(0 not in plan.get(i, ()) or program.eqns[i].inputs[0] is not program.inputs[0]
               for i in range(len(program.eqns)))


def _peak_bytes(fn, *args) -> int:
    """The most memory NumPy held at once during ``fn(*args)``, beyond what it held before (tracemalloc)."""
    import tracemalloc

    fn(*args)  # warm: the first call compiles
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn(*args)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def _chain(x, y):
    t = np.tanh(x * 2.0 + 1.0) * y
    return np.exp(-t) / (1.0 + y) - 0.5 * t


def _made(src: str) -> list[str]:
    """The statements of a printed program that make a new array from an operation."""
    return [line.strip() for line in src.splitlines() if re.match(r"\s+\w+ = .*[-+*/(]", line)]


def test_an_elementwise_chain_over_moderate_arrays_allocates_once(monkeypatch):
    """Between CHAIN_MIN_SIZE and MIN_SIZE elements, an operation continuing a chain writes into the
    buffer its operand's operation made: the primal program makes three arrays (t, read twice; the value
    being built; 1 + y) and holds no more at once; its gradient makes 7 where it made 22, and both hold
    at least one array fewer at their peak (tracemalloc) than with a fresh array per operation."""
    n = 8192
    assert memory.CHAIN_MIN_SIZE <= n < memory.MIN_SIZE
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n), rng.uniform(0.5, 1.5, n)
    size = x.nbytes

    def programs():
        return (pb.jit(_chain, compile="numpy"),
                pb.differentiate(lambda x, y: np.sum(_chain(x, y)), argnums=(0, 1), compile="numpy"))

    primal, grad = programs()
    src, grad_src = primal.source(x, y), grad.source(x, y)
    assert _made(src) == ["mul = x * 2.0", "neg = -mul", "add = 1.0 + y"], src  # each reads a value still needed
    assert len(_made(grad_src)) <= 7, grad_src
    np.testing.assert_allclose(primal(x, y), _chain(x, y), rtol=1e-14)
    chained, chained_grad = _peak_bytes(primal, x, y), _peak_bytes(grad.grad, x, y)
    assert chained <= 3.2 * size, chained / size  # the three arrays made, no more
    monkeypatch.setattr(memory, "CHAIN_MIN_SIZE", memory.MIN_SIZE)  # the plan before chains: fresh arrays
    fresh_primal, fresh_grad = programs()
    assert len(_made(fresh_grad.source(x, y))) >= 3 * len(_made(grad_src))
    assert _peak_bytes(fresh_primal, x, y) >= chained + size // 2  # one array more at least
    assert _peak_bytes(fresh_grad.grad, x, y) >= chained_grad + size // 2
    for a, b in zip(fresh_grad.grad(x, y), grad.grad(x, y)):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def test_a_dead_operand_is_squared_in_place():
    x = np.random.default_rng(1).standard_normal(90_000)
    src = pb.jit(lambda x: np.sum((x * 3.0 - 1.0) ** 2), compile="numpy").source(x)
    assert "**= 2" in src
    np.testing.assert_allclose(pb.jit(lambda x: np.sum((x * 3.0 - 1.0) ** 2))(x), np.sum((x * 3.0 - 1.0) ** 2))
