"""Elementwise fusion (pullback/backends/fusion.py). The CuPy backend prints each fused group as a
``@cp.fuse()`` kernel; here the same grouping runs through the NumPy backend with plain kernels
(``FUSE = ""``), so that every fused program is run and compared with the unfused one on the CPU:
the grouping and the order it prints in must compute the same values. The GPU test in
test_cupy.py runs the fused CuPy programs themselves."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import numpy as np
from hypothesis import given

import pullback as pb
from pullback.backends.compiler import compile_program
from pullback.backends.numpy import backend as numpy_backend
from tests.regressions.test_random_programs import _loss_of, examples, programs

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

FUSING = types.ModuleType("fusing_numpy")
FUSING.__dict__.update(vars(numpy_backend))
FUSING.FUSE = ""  # kernels printed as plain functions


def _both(program, args):
    plain, _ = compile_program(program, numpy_backend)
    fused, source = compile_program(program, FUSING)
    with np.errstate(all="ignore"):
        return plain(*args), fused(*args), source


def _leaves(x):
    return [leaf for item in x for leaf in _leaves(item)] if isinstance(x, tuple | list) else [np.asarray(x)]


def _same(a, b):
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=0, equal_nan=True)


def _kernels(source: str) -> list[ast.FunctionDef]:
    tree = ast.parse(source)
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)][:-1]


def test_gp_gradient_fused_computes_the_same():
    import gp_regression

    X, y = gp_regression.synthetic_data(40)
    args = (np.array([0.1, -0.2, -2.0]), X, y)
    program = gp_regression.neg_log_marginal_likelihood.ir(*args)
    plain, fused, source = _both(program, args)
    _same(plain, fused)
    kernels = _kernels(source)
    assert len(kernels) >= 3
    # each kernel is elementwise arithmetic only: operators and ufuncs, no reductions or reshapes
    for k in kernels:
        calls = {ast.unparse(c.func) for c in ast.walk(k) if isinstance(c, ast.Call)}
        assert calls <= {"np.exp", "np.log", "np.sqrt", "np.maximum", "np.minimum", "np.abs", "np.sign"}, calls


def test_cupy_gp_gradient_prints_fused_kernels():
    import gp_regression

    X, y = gp_regression.synthetic_data(30)
    source = gp_regression.neg_log_marginal_likelihood.source(np.zeros(3), X, y, program="grad", device="cuda")
    kernels = _kernels(source)
    assert kernels and all(ast.unparse(k.decorator_list[0]) == "cp.fuse()" for k in kernels)
    main = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)][-1]
    called = {ast.unparse(c.func) for c in ast.walk(main) if isinstance(c, ast.Call)}
    assert {k.name for k in kernels} <= called


def test_a_value_read_between_group_members_is_printed_after_the_kernel():
    """``s`` reads the group (through a reduction), ``w`` reads ``s``: both wait for the kernel;
    ``q`` reads only inputs and keeps its place."""
    def f(x, y):
        a = np.exp(x) * 2.0
        s = np.sum(a)
        q = y @ y.T
        b = a * a - 1.0
        w = s * b[0]
        return b + q, w

    x, y = np.linspace(0, 1, 9).reshape(3, 3), np.arange(9.0).reshape(3, 3)
    program = pb.make_ir(f)(x, y)
    plain, fused, source = _both(program, (x, y))
    _same(plain, fused)
    _same(fused, f(x, y))
    assert _kernels(source)


@given(programs(max_ops=8))
@examples(40)
def test_random_programs_and_gradients_fused_compute_the_same(p):
    _check(pb.make_ir(p)(*p.inputs), p.inputs)
    if p.dtype != "float32":
        loss = _loss_of(p, 0)
        _check(pb.differentiate(loss, argnums=tuple(range(len(p.inputs)))).ir(*p.inputs), p.inputs)


def _check(program, args):
    plain, fused, _ = _both(program, args)
    _same(plain, fused)


def test_a_group_reading_only_broadcasts_keeps_its_shape():
    """Every operand a broadcast of a scalar: the kernel's result must still have the full shape."""
    def f(s, t, x):
        a = np.broadcast_to(s, (3, 4)) * np.broadcast_to(t, (3, 4))
        return np.exp(a) + 1.0, x @ x.T

    args = (np.array(0.5), np.array(2.0), np.ones((3, 2)))
    plain, fused, _ = _both(pb.make_ir(f)(*args), args)
    _same(plain, fused)
    _same(fused, f(*args))
