"""The eager first call (``api.eager``): the gradient by walking the primal program equation by equation
equals the compiled program's and central differences; ``first_call="auto"`` compiles once the
walks have taken as long as compiling should; kernels are built once per signature."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

import pullback as pb
from pullback import linalg as pla
from pullback.api import eager
from pullback.ir.core import Var
from tests.regressions.test_random_programs import _loss_of, examples, programs

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import kalman_filter as kf  # noqa: E402


def _both(fn, *args, argnums=0, **options):
    """(eager, compiled) value and gradient of ``fn`` at ``args``."""
    eager_f = pb.differentiate(fn, argnums=argnums, first_call="eager", **options)
    compiled_f = pb.differentiate(fn, argnums=argnums, first_call="compiled", **options)
    return eager_f.value_and_grad(*args), compiled_f.value_and_grad(*args)


def _leaves(tree) -> list:
    if isinstance(tree, tuple | list):
        return [x for t in tree for x in _leaves(t)]
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _leaves(tree[k])]
    return [tree]


def _assert_same(got, want, rtol=1e-12):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def _central(fn, args, i, eps=1e-6):
    """The gradient of ``fn`` in argument ``i`` by central differences, entry by entry."""
    x = np.asarray(args[i], float)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = eps
        plus = fn(*args[:i], x + e if x.shape else float(x + e), *args[i + 1:])
        minus = fn(*args[:i], x - e if x.shape else float(x - e), *args[i + 1:])
        g[k] = (plus - minus) / (2 * eps)
    return g


def test_unrolled_kalman_filter_against_compiled_and_central_differences():
    A, B, v = kf.simulate(6)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    (value, grads), want = _both(kf.kalman_nll_unrolled, *args, argnums=(0, 1, 2, 3), reroll=False)
    _assert_same((value, grads), want, rtol=1e-10)
    assert np.isclose(value, kf.kalman_nll_unrolled(*args))
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, _central(kf.kalman_nll_unrolled, args, i), rtol=1e-6, atol=1e-7)


def test_elementwise_chain():
    def chain(x):
        for _ in range(50):
            x = np.sin(x) * 0.9 + 0.1 * x
        return np.sum(x)

    x = np.linspace(0.1, 0.9, 3)
    got, want = _both(chain, x, reroll=False)
    _assert_same(got, want)
    np.testing.assert_allclose(got[1], _central(chain, (x,), 0), rtol=1e-7)


@examples(30, 8)
@given(programs(dtypes=("float64", "float32", "complex128"), constants=True))
def test_random_programs_as_compiled(p):
    loss = p.traced(_loss_of(p, 0))
    nums = tuple(range(len(p.arguments)))
    with np.errstate(all="ignore"):
        got, want = _both(loss, *p.arguments, argnums=nums)
    tol = 2e-4 if p.dtype == "float32" else 1e-9
    for g, w in zip(_leaves(got), _leaves(want)):
        assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, equal_nan=True)


def test_float32_complex_integer_and_literal_operands():
    def f(x, z, n):
        y = x * np.float32(2.5) + n  # an integer operand, a literal
        return np.sum(np.abs(z * y[:2]) ** 2) + np.sum(np.exp(-y)) + np.float32(3.0)

    x = np.array([0.5, -1.0, 2.0], np.float32)
    z = np.array([1.0 + 2.0j, -0.5j], np.complex64)
    n = np.array([1, 2, 3])
    got, want = _both(f, x, z, n, argnums=(0, 1))
    _assert_same(got, want, rtol=1e-5)
    assert got[1][0].dtype == np.float32 and got[1][1].dtype == np.complex64


def test_complex_gradient_against_central_differences():
    def f(z, w):
        return np.sum(np.real(z * np.conj(z) * w) + np.imag(z * w))

    z = np.array([1.0 + 2.0j, -0.5 + 0.25j])
    w = np.array([0.3 - 1.0j, 2.0 + 0.5j])
    got, want = _both(f, z, w, argnums=0)
    _assert_same(got, want)
    real = _central(lambda a, b: f(a + 1j * b, w), (z.real, z.imag), 0)
    imag = _central(lambda a, b: f(a + 1j * b, w), (z.real, z.imag), 1)
    np.testing.assert_allclose(got[1], real + 1j * imag, rtol=1e-7)  # d/dRe + i d/dIm, as the compiled program
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


W = np.array([[1.0, 0.5], [-0.25, 2.0]])  # a captured array


def test_captured_arrays_constants_pytrees_several_argnums_and_aux():
    def f(params, x, scale=2.0):
        h = np.tanh(W @ x + params["b"])
        out = np.sum(h * params["w"][0]) * scale + np.sum(np.eye(2) @ x)  # an array made while tracing
        return out, {"h": h}

    params = {"w": (np.array([0.5, -1.5]),), "b": np.array([0.1, 0.2])}
    x = np.array([0.3, -0.7])
    got, want = _both(f, params, x, argnums=(0, 1), has_aux=True)
    _assert_same(got, want)
    (value, aux), (g_params, g_x) = got
    assert set(g_params) == {"w", "b"} and isinstance(g_params["w"], tuple) and set(aux) == {"h"}
    np.testing.assert_allclose(g_x, _central(lambda x: f(params, x)[0], (x,), 0), rtol=1e-7)


def test_draws_give_the_compiled_programs_numbers():
    def f(x, rng):
        noise = rng.standard_normal(3)
        return np.sum(np.sin(x + noise) * rng.uniform(size=3))

    x = np.array([0.1, 0.2, 0.3])
    got = pb.differentiate(lambda x: f(x, RNG), first_call="eager")
    want = pb.differentiate(lambda x: f(x, RNG), first_call="compiled")
    want.value_and_grad(x)  # compiled first: both calls below then draw from the same state
    RNG.bit_generator.state = np.random.default_rng(7).bit_generator.state
    a = got.value_and_grad(x)
    RNG.bit_generator.state = np.random.default_rng(7).bit_generator.state
    b = want.value_and_grad(x)
    _assert_same(a, b)
    RNG.bit_generator.state = np.random.default_rng(7).bit_generator.state
    assert np.isclose(a[0], f(x, RNG))


RNG = np.random.default_rng(7)


def test_linalg_error_names_the_users_line():
    def f(S):
        L = pla.cholesky(S)  # the line the error names
        return np.sum(L)

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(pb.LinAlgError, match=rf"test_eager.py:{line}"):
        pb.differentiate(f, first_call="eager").value_and_grad(np.array([[1.0, 2.0], [2.0, 1.0]]))


def test_auto_walks_until_the_walks_have_taken_as_long_as_compiling_should(monkeypatch, caplog):
    monkeypatch.setattr(eager, "MIN_EQUATIONS", 10)
    monkeypatch.setattr(eager, "MIN_REPEATS", 2)
    monkeypatch.setattr(eager, "COMPILE_SECONDS_PER_EQUATION", 1e3)  # a compile far dearer than any walk

    def chain(x):
        for _ in range(20):
            x = np.cos(x) * 0.5 + x
        return np.sum(x)

    f = pb.differentiate(chain, reroll=False)
    x = np.array([0.2, 0.4])
    with caplog.at_level(logging.INFO, logger="pullback"):
        first = f.value_and_grad(x)
        second = f.value_and_grad(x)
    assert caplog.text.count(".chain's gradient eagerly (auto): 61 equations walked") == 2
    assert not any(key[0] == "grad" for key in f._stages)  # no compiled gradient yet
    (spent, _), = f._walked.values()
    assert spent > 0
    _assert_same(first, second)
    monkeypatch.setattr(eager, "COMPILE_SECONDS_PER_EQUATION", spent / 61 / 2)  # the walks have paid for it
    third = f.value_and_grad(x)
    assert any(key[0] == "grad" for key in f._stages)
    _assert_same(first, third)
    assert f.value_and_grad(x)[0] == third[0]


def test_auto_compiles_programs_of_few_repeats_without_building_kernels(monkeypatch):
    monkeypatch.setattr(eager, "MIN_EQUATIONS", 10)
    monkeypatch.setattr(eager, "MIN_REPEATS", 200)  # more than the chain's 61 equations per signature

    def chain(x):
        for _ in range(20):
            x = np.cos(x) * 0.5 + x
        return np.sum(x)

    f = pb.differentiate(chain, reroll=False)
    x = np.array([0.3, 0.6, 0.9, 1.2, 1.5])  # (a shape no other test's kernels have)
    before = eager.built[0]
    got = f.value_and_grad(x)
    assert eager.built[0] == before and not f._walked  # the walk's first pass counted the signatures: compiled
    assert any(key[0] == "grad" for key in f._stages)
    _assert_same(got, pb.differentiate(chain, reroll=False, first_call="eager").value_and_grad(x))


def test_no_young_collection_scans_the_program_and_frozen_objects_stay_frozen():
    def chain(x):
        for _ in range(300):
            x = np.sin(x) * 0.9 + 0.1 * x
        return np.sum(x)

    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        got = pb.differentiate(chain, reroll=False, first_call="eager").value_and_grad(x)
    finally:
        gc.callbacks.remove(count)
    assert collections == []  # its objects went to the oldest generation: none scanned young
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        again = pb.differentiate(chain, reroll=False, first_call="eager").value_and_grad(x)
        assert gc.get_freeze_count() > frozen // 2  # (less only by those freed meanwhile: not unfrozen)
    finally:
        gc.unfreeze()
    _assert_same(got, again)


def test_auto_compiles_short_programs_and_loops_at_once():
    f = pb.differentiate(lambda x: np.sum(np.sin(x)))
    f.value_and_grad(np.ones(2))
    assert any(key[0] == "grad" for key in f._stages)


def test_kernels_are_built_once_per_signature():
    def chain(x):
        for _ in range(40):
            x = np.sin(x) * 0.9 + 0.1 * x
        return np.sum(x)

    x = np.array([0.05, 0.15, 0.25])  # shape (3,): (shapes are in the signature) no other test's kernels
    f = pb.differentiate(chain, reroll=False, first_call="eager")
    before = eager.built[0]
    f.value_and_grad(x)
    n = eager.built[0] - before
    program = f.ir(x, stage="primal")
    signatures = {(e.prim, e.params, e.source, tuple(a.type if isinstance(a, Var) else a for a in e.inputs))
                  for e in program.eqns}
    assert len(program.eqns) > 150 and n <= len(signatures) <= 6  # the first step's and the others', at most
    f.value_and_grad(x + 1.0)
    assert eager.built[0] - before == n  # nothing built again


def test_unrolled_slices_share_one_kernel():
    def f(v):
        total = 0.0
        for t in range(v.shape[0]):
            total = total + np.sum(np.sin(v[t]))
        return total

    v = np.linspace(0.0, 1.0, 84).reshape(28, 3)
    before = eager.built[0]
    got, want = _both(f, v, reroll=False)
    assert eager.built[0] - before <= 6  # not one per row
    _assert_same(got, want)


def test_bad_option():
    with pytest.raises(ValueError, match="first_call"):
        pb.differentiate(np.sin, first_call="lazy")


def test_function_forms_static_and_keyword_arguments(caplog):
    def f(x, n, *, scale):
        for _ in range(n):
            x = np.tanh(x) * scale + x
        return np.sum(x ** 2)

    x = np.array([0.3, -0.2])
    with caplog.at_level(logging.INFO, logger="pullback"):
        got = pb.value_and_grad(f, static_argnums=1, first_call="eager")(x, 5, scale=0.5)
    assert "gradient eagerly (eager)" in caplog.text
    want = pb.value_and_grad(f, static_argnums=1, first_call="compiled")(x, 5, scale=0.5)
    _assert_same(got, want)
    np.testing.assert_allclose(pb.grad(f, static_argnums=1, first_call="eager")(x, 5, scale=0.5), want[1])
    np.testing.assert_allclose(got[1], _central(lambda x: f(x, 5, scale=0.5), (x,), 0), rtol=1e-7)


def test_warnings_name_the_users_line():
    def f(x):
        y = np.log(x)  # the line the warnings name
        return np.sum(y)

    line = f.__code__.co_firstlineno + 1
    with pytest.warns(RuntimeWarning, match="divide by zero") as caught:
        pb.differentiate(f, first_call="eager").value_and_grad(np.array([0.0, 1.0]))
    assert {(Path(w.filename).name, w.lineno) for w in caught} == {("test_eager.py", line)}
