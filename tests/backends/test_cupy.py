"""The CuPy backend. The printed source is checked everywhere (it parses, imports only
NumPy and CuPy, and names the cuSOLVER/cuBLAS calls); the tests marked ``gpu`` run the
CuPy programs against the CPU ones and skip where CuPy or a GPU is missing."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import pullback as pb
from pullback import linalg as pla
from pullback.primitives import random as rnd
from pullback.primitives.linalg import factorizations as la
from tests import sample
from tests.primitives.cases import make_arg
from tests.primitives.test_forward import CASES

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

ALLOWED_NUMPY = {"np.linalg.LinAlgError", "np.ndindex"}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return inner and f"{inner}.{node.attr}"
    return None


class _Bound(ast.NodeVisitor):
    """Names in source order: each ``del`` must unbind a name bound before it (a result an emitter
    left unassigned, deleted anyway, is a NameError only a GPU run would show)."""

    def __init__(self, fn: ast.FunctionDef):
        self.bound = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for stmt in fn.body:
            self.visit(stmt)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.bound.add(node.id)
        elif isinstance(node.ctx, ast.Del):
            assert node.id in self.bound, f"del {node.id} before any assignment"


def check_cupy_source(source: str) -> set[str]:
    """Parse, check the imports, every ``np.`` use and that every ``del`` unbinds a bound name; return
    the dotted names called."""
    tree = ast.parse(source)
    compile(tree, "<cupy>", "exec")
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef):
            _Bound(fn)
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imports <= {"numpy", "cupy", "cupyx.scipy.linalg", "cupyx.scipy.special", "cupyx.scipy.signal"}, imports
    assert "scipy.linalg.lapack" not in source and "scipy.linalg.blas" not in source
    host = {id(n.func) for n in ast.walk(tree)  # np.ones(()), np.full((), c): a host scalar, cuBLAS's alpha
            if isinstance(n, ast.Call) and _dotted(n.func) in ("np.ones", "np.full") and ast.unparse(n.args[0]) == "()"}
    drawn = {id(a) for n in ast.walk(tree)  # cp.asarray(rs.standard_normal(3, dtype=np.float32)): a host draw
             if isinstance(n, ast.Call) and _dotted(n.func) == "cp.asarray" for arg in n.args for a in ast.walk(arg)}
    names = {_dotted(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and id(n) not in host | drawn}
    outer = {n for n in names if n and n.startswith("np.") and not any(n.startswith(a) for a in ALLOWED_NUMPY)}
    assert {n for n in outer if n not in {"np.linalg"}} == set(), outer
    return {_dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)} - {None}


def _grad_fn(case):
    """A real scalar of all the case's float outputs, so that reverse mode meets every rule."""
    def loss(*args):
        outs = case.fn(*args)
        total = 0.0
        for o in outs if isinstance(outs, tuple) else (outs,):
            if o.dtype.kind == "c":
                total = total + np.sum(np.real(o) * 0.5 + np.imag(o) * 0.25)
            elif o.dtype.kind == "f":
                total = total + np.sum(o)
        return total
    return loss


PRINTED = sample.cases(CASES, salt=3)  # tests/primitives/test_forward.py checks that the sample has every primitive


@pytest.mark.parametrize("case", PRINTED)
def test_every_primitive_and_its_gradient_print_for_cupy(case, rng):
    args = [make_arg(rng, s, case.dtype, case.positive) for s in case.shapes]
    from pullback.backends.cupy.backend import lacks

    if any(lacks(e) for e in pb.make_ir(case.fn)(*args).eqns):  # CuPy lacks the routine: a clear error
        with pytest.raises(NotImplementedError, match="no CuPy emitter"):
            pb.jit(case.fn).source(*args, device="cuda")
        return
    check_cupy_source(pb.jit(case.fn).source(*args, device="cuda"))
    inexact = _inexact(args)
    if inexact:
        check_cupy_source(pb.differentiate(_grad_fn(case), argnums=inexact).source(*args, device="cuda"))


def _inexact(args) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.inexact))


class _DeviceArray:
    """Stands in for a CuPy array where CuPy cannot run: what the dispatcher looks at."""

    __module__ = "cupy"
    __cuda_array_interface__: dict = {}
    shape, dtype = (3,), np.dtype(np.float64)


def test_mixing_devices_is_a_clear_error():
    with pytest.raises(TypeError, match="mix NumPy \\(CPU\\) and CuPy \\(GPU\\) arrays"):
        pb.jit(lambda a, b: a + b)(np.ones(3), _DeviceArray())


LINALG_CALLS = {
    "cholesky": {"cp.cuda.cusolver.dpotrf", "cp.cuda.cusolver.dpotrf_bufferSize", "cp.tril"},
    "solve": {"cupyx.scipy.linalg.lu_solve", "cp.cuda.cusolver.dgetrf"},
    "eigh": {"cp.linalg.eigh"},
    "svd": {"cp.linalg.svd"},
    "qr": {"cp.linalg.qr"},
}


@pytest.mark.parametrize("name", sorted(LINALG_CALLS))
def test_gradients_name_cusolver_and_cublas_calls(name, rng):
    a = rng.standard_normal((5, 5))
    spd = a @ a.T + 5 * np.eye(5)
    fns = {
        "cholesky": lambda x: np.sum(pla.cholesky(x) ** 2),
        "solve": lambda x: np.sum(pla.solve(x, np.ones(5)) ** 2),
        "eigh": lambda x: np.sum(pla.eigh(x)[1][:, -1] ** 2 * np.arange(5.0)) + np.sum(pla.eigh(x)[0]),
        "svd": lambda x: np.sum(pla.svd(x)[1]) + np.sum(pla.svd(x)[0][:, 0] * np.arange(5.0)),
        "qr": lambda x: np.sum(pla.qr(x)[1] ** 2) + np.sum(pla.qr(x)[0] * np.arange(5.0)),
    }
    calls = check_cupy_source(pb.differentiate(fns[name]).source(spd, device="cuda"))
    assert LINALG_CALLS[name] <= calls, LINALG_CALLS[name] - calls
    assert "inv" not in {c.rsplit(".", 1)[-1] for c in calls}


def test_cupy_source_of_the_gp_gradient(rng):
    import gp_regression

    X, y = gp_regression.synthetic_data(30)
    source = gp_regression.neg_log_marginal_likelihood.source(np.zeros(3), X, y, program="grad", device="cuda")
    calls = check_cupy_source(source)
    assert {"cp.cuda.cusolver.dpotrf", "cp.cuda.cublas.dtrsm", "cp.exp"} <= calls
    assert "if info:" in source  # the checked Cholesky reads info back once


@pytest.mark.parametrize("n", [5, 100])
def test_the_cupy_program_deletes_no_handle_nor_scalar(n, rng):
    """Issue 29 item 7: no ``del`` of a library handle or of cuBLAS's 0-d host alpha; a cuSOLVER workspace
    is freed where its matrix weighs ``codegen.DEL_BYTES`` (100 x 100 float64), not for a 5 x 5 one."""
    a = rng.standard_normal((n, n))
    spd = a @ a.T + n * np.eye(n)
    source = pb.differentiate(lambda x: np.sum(pla.solve(x, np.ones(n)) ** 2) + np.sum(pla.cholesky(x))).source(
        spd, device="cuda")
    check_cupy_source(source)
    assert "cp.cuda.cublas.dtrsm" in source and "cp.cuda.cusolver.dpotrf" in source
    assert not re.search(r"^\s*del .*\b(one|alpha|handle)(_\d+)?\b", source, re.M)
    assert len(re.findall(r"^\s*del work(_\d+)?$", source, re.M)) == (2 if n == 100 else 0)  # potrf's, getrf's


def test_unchecked_factorisations_do_not_read_info_back(rng):
    a = rng.standard_normal((4, 4))
    source = pb.jit(lambda x: pla.cholesky_ex(x)).source(a @ a.T + np.eye(4), device="cuda")
    check_cupy_source(source)
    assert "if info" not in source and "int(info)" not in source


def test_a_step_count_on_the_device_is_read_back_for_range(rng):
    """``checkpoint=True`` over 13 steps (blocks of 4, the last of 1) counts a block's steps on the device:
    ``range`` takes ``int(steps)``, one read back per loop (CuPy arrays have no ``__index__``)."""
    W = 0.5 * rng.standard_normal((3, 3))

    def f(h0):
        h, _ = pb.scan(lambda h, _: (np.sin(W @ h) + 0.5 * h, None), h0, None, length=13, checkpoint=True)
        return np.sum(h ** 2)

    source = pb.differentiate(f).source(rng.standard_normal(3), device="cuda")
    check_cupy_source(source)
    assert "for _ in range(int(steps)):" in source and "range(int(steps) - 1, -1, -1)" in source
    assert "range(steps" not in source


def test_unknown_device_is_an_error(rng):
    with pytest.raises(ValueError, match="device must be"):
        pb.jit(np.sin).source(np.ones(3), device="tpu")


# --- on a GPU ----------------------------------------------------------------------------------

def _cupy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except Exception as e:  # no driver
        pytest.skip(f"no CUDA device ({e})")
    return cupy


def _tol(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _close(got, want, dtype):
    tol = _tol(dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(want), initial=0.0))))


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gpu_forward_jvp_and_vjp_agree_with_cpu(case, rng):
    cp = _cupy()
    args = [make_arg(rng, s, case.dtype, case.positive) for s in case.shapes]
    f = pb.jit(case.fn)
    if any(e.prim in (la.syevd_p, la.gesvd_p) and e.inputs[0].dtype.kind != "c" for e in f.ir(*args).eqns):
        pytest.skip("real eigen/singular vectors keep each library's signs (LAPACK, cuSOLVER): "
                    "test_gpu_spectral_sign_invariant compares them")
    # a case that draws reseeds its generator when traced: each device's run gets its own trace
    fresh = any(e.prim is rnd.draw_p for e in f.ir(*args).eqns)
    try:
        gpu = (pb.jit(case.fn) if fresh else f)(*_on_gpu(cp, args))
    except NotImplementedError as e:  # CuPy has no routine for it, as printing said
        assert "has no CuPy emitter" in str(e)
        pytest.skip(str(e))
    cpu = (pb.jit(case.fn) if fresh else f)(*args)
    cpu, gpu = (cpu, gpu) if isinstance(cpu, tuple) else ((cpu,), (gpu,))
    for c, g in zip(cpu, gpu):
        _close(cp.asnumpy(g), c, case.dtype)
    inexact = _inexact(args)
    if not inexact:
        return
    tangents = [make_arg(rng, np.shape(a), case.dtype, False) if i in inexact else a for i, a in enumerate(args)]
    jvps = _both(lambda *a: _leaves(pb.jvp(case.fn, a[:len(args)], a[len(args):])), [*args, *tangents], cp)
    g = pb.differentiate(_grad_fn(case), argnums=inexact)
    for cpu_out, gpu_out in (jvps, _both(g.grad, args, cp)):
        for c, gg in zip(cpu_out, gpu_out):
            _close(cp.asnumpy(gg), np.asarray(c), case.dtype)


def _both(fn, args, cp) -> tuple[list, list]:
    """``fn`` on the CPU and on the GPU; where the CPU refuses (forward mode through a custom_vjp), the GPU
    must refuse with the same error."""
    try:
        cpu = fn(*args)
    except pb.TracingError as e:
        with pytest.raises(pb.TracingError) as gpu:
            fn(*_on_gpu(cp, args))
        assert str(gpu.value) == str(e)
        return [], []
    return cpu, fn(*_on_gpu(cp, args))


@pytest.mark.gpu
def test_gpu_spectral_sign_invariant():
    """Real eigh and svd on the GPU against the CPU through what does not depend on the vectors'
    signs (values, projectors, reconstructions), with their gradients."""
    cp = _cupy()
    rng = np.random.default_rng(0)
    a, x = rng.standard_normal((5, 5)), rng.standard_normal((6, 4))

    def spectral(a, x):
        w, v = np.linalg.eigh(a + a.T)
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        return w, v[:, :2] @ v[:, :2].T, s, (u * s) @ vh, u[:, :1] @ vh[:1]

    f = pb.jit(spectral)
    for c, g in zip(f(a, x), f(cp.asarray(a), cp.asarray(x))):
        _close(cp.asnumpy(g), c, np.float64)
    g = pb.differentiate(lambda a, x: sum(np.sum(o * np.cos(o)) for o in spectral(a, x)), argnums=(0, 1))
    for c, gg in zip(g.grad(a, x), g.grad(cp.asarray(a), cp.asarray(x))):
        _close(cp.asnumpy(gg), c, np.float64)


def _on_gpu(cp, args):
    return [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]


def _leaves(x):
    return [leaf for item in x for leaf in _leaves(item)] if isinstance(x, tuple | list) else [x]


@pytest.mark.gpu
def test_gpu_seed_applications_agree_with_cpu():
    cp = _cupy()
    import bayesian_linear_regression as blr
    import gp_regression
    import kalman_filter
    import sparse_gp

    rng = np.random.default_rng(0)
    X, y = gp_regression.synthetic_data(200)
    Xs = rng.uniform(-3, 3, (500, 2))
    ys = np.sin(Xs[:, 0]) * np.cos(Xs[:, 1]) + 0.1 * rng.standard_normal(500)
    x = rng.uniform(-1, 1, 50)
    A, B, v = kalman_filter.simulate()
    runs = [
        (gp_regression.neg_log_marginal_likelihood.value_and_grad, (np.array([0.1, -0.2, -2.0]), X, y)),
        (sparse_gp.bound.value_and_grad, (Xs[:20].copy(), 0.0, 0.0, -2.0, Xs, ys)),
        (pb.value_and_grad(blr.blr_lq, argnums=(0, 2, 3)), (blr.features(x), 1 - 2 * x, -2.0, 0.5)),
        (pb.value_and_grad(blr.blr_cholesky, argnums=(0, 2, 3)), (blr.features(x), 1 - 2 * x, -2.0, 0.5)),
        (kalman_filter.nll.value_and_grad, (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))),
    ]
    for fn, args in runs:
        cpu, gpu = _leaves(fn(*args)), _leaves(fn(*_on_gpu(cp, args)))
        assert len(cpu) == len(gpu)
        for c, g in zip(cpu, gpu):
            _close(cp.asnumpy(g), np.asarray(c), np.float64)


@pytest.mark.gpu
def test_gpu_bad_input_errors_match_cpu():
    cp = _cupy()
    bad = np.diag([1.0, 2.0, -1.0, 4.0])
    f = pb.jit(pla.cholesky)
    with pytest.raises(pb.LinAlgError, match="leading minor of order 3") as cpu:
        f(bad)
    with pytest.raises(pb.LinAlgError, match="leading minor of order 3") as gpu:
        f(cp.asarray(bad))
    assert str(cpu.value).split("(")[0] == str(gpu.value).split("(")[0]
    l, info = pb.jit(pla.cholesky_ex)(cp.asarray(bad))
    assert int(info) == 3
    with pytest.raises(TypeError, match="mix NumPy"):
        pb.jit(lambda a, b: a + b)(np.ones(3), cp.ones(3))


def test_what_cupyx_lacks_prints_another_way(rng):
    """What the GPU run found, checked in the printed source: cupyx picks no method for 2-D
    convolutions, its yn is nan at negative orders, and CuPy's add.at takes no complex values."""
    import scipy.signal
    import scipy.special as sc

    a, b = rng.standard_normal((4, 3)), rng.standard_normal((2, 2))
    source = pb.jit(lambda a, b: scipy.signal.convolve(a, b)).source(a, b, device="cuda")
    check_cupy_source(source)
    assert "method='direct'" in source
    big = rng.standard_normal((300, 300))
    assert "method='fft'" in pb.jit(lambda a, b: scipy.signal.convolve(a, b)).source(big, big, device="cuda")
    x = np.abs(rng.standard_normal(3)) + 0.5
    source = pb.jit(lambda x: sc.yn(-3, x) + sc.yn(2, x)).source(x, device="cuda")
    assert "-cupyx.scipy.special.yn(3, x)" in source and "yn(2, x)" in source
    orders = np.array([0, 1, -3])
    source = pb.jit(lambda x: sc.yn(orders, x)).source(x, device="cuda")
    assert "cp.where" in source and "cp.abs" in source
    idx = np.array([0, 0, 2])
    z = rng.standard_normal(4) + 1j * rng.standard_normal(4)

    def add_at(z, v):
        out = z.copy()
        np.add.at(out, idx, v)
        return out

    source = pb.jit(add_at).source(z, z[:3], device="cuda")
    check_cupy_source(source)
    assert "cp.add.at(accumulated.real, idx, v.real)" in source
    assert "cp.add.at(accumulated.imag, idx, v.imag)" in source
