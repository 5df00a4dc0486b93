"""``np.stack`` printed as written (``backends.stacked``): the IR's reshapes and concatenation print as
``np.stack`` of the pieces, along any axis, in values and in their transposes; values and gradients
are NumPy's and the finite differences' on every dtype, for unit and empty axes, on NumPy, CuPy
(printed) and Dask."""

import re

import numpy as np
import pytest
from pullback.testing import check_grads, check_vjp_numerically

import pullback as pb


def _weights(shape, dtype):
    w = np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape)
    return (w + 0.25j * w[::-1]).astype(dtype) if np.dtype(dtype).kind == "c" else w.astype(dtype)


def _loss(stack, shape, dtype):
    """A real loss of a stacked value that reads each of its entries differently."""
    w = _weights(shape, dtype)

    def loss(a, b, c):
        s = stack(np.sin(a), b * c, np.cos(c))
        return np.sum(np.real(s * np.conj(s) * w) + np.real(s * w))

    return loss


STACKS = {  # (stack of three pieces of shape ``piece``, the stacked shape)
    "stack": (lambda x, y, z: np.stack([x, y, z]), (2, 3), (3, 2, 3)),
    "stack_axis1": (lambda x, y, z: np.stack([x, y, z], axis=1), (2, 3), (2, 3, 3)),
    "stack_last": (lambda x, y, z: np.stack((x, y, z), axis=-1), (2, 3), (2, 3, 3)),
    "vstack": (lambda x, y, z: np.vstack([x, y, z]), (4,), (3, 4)),
    "unit_pieces": (lambda x, y, z: np.stack([x, y, z], axis=1), (1,), (1, 3)),
    "empty_pieces": (lambda x, y, z: np.stack([x, y, z], axis=1), (0, 2), (0, 3, 2)),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("name", list(STACKS))
def test_stack_prints_as_np_stack_with_numpys_values_and_gradients(name, dtype):
    stack, piece, stacked = STACKS[name]
    rng = np.random.default_rng(0)
    args = [(rng.standard_normal(piece) + (0.5j * rng.standard_normal(piece) if np.dtype(dtype).kind == "c" else 0))
            .astype(dtype) for _ in range(3)]
    loss = _loss(stack, stacked, dtype)
    f = pb.differentiate(loss, argnums=(0, 1, 2))
    src = f.source(*args)
    axis = {"stack": None, "vstack": None, "stack_last": 2}.get(name, 1)
    call = "np.stack((sin, mul, cos))" if axis is None else f"np.stack((sin, mul, cos), axis={axis})"
    if 0 not in piece:  # (an empty stack's value and gradient fold to constants)
        assert call in src, src
        assert "np.concatenate" not in src, src
        # (the transpose's slices of unit pieces, (1, 1) to (1,), stay reshapes: ``printed.unit_indices``)
        assert ".reshape(" not in src or name == "unit_pieces", src
    value, grads = f.value_and_grad(*args)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(value, loss(*args), rtol=tol)
    assert all(g.dtype == dtype and g.shape == piece for g in grads)
    if dtype != np.float32:
        check_grads(loss, args)
    check_vjp_numerically(loss, args, rtol=1e-2 if dtype == np.float32 else None,
                          atol=1e-2 if dtype == np.float32 else None)


def test_scalars_stacked_and_their_cotangents():
    """``np.array`` and ``np.hstack`` of scalars stack them, printed as ``np.array`` of them (a fifth of
    ``np.stack``'s cost); the gradient of entries read from a vector (``x[0]``, ``x[1]``: slices of it)
    stacks their cotangents, ``x_bar = np.array(...)``."""
    def f(x):
        v = np.array([x[0] * x[1], x[1] ** 2, np.sin(x[2])])
        h = np.hstack([x[2] * x[0], np.exp(x[1])])
        return np.sum(v ** 3) + np.sum(h * v[:2])

    x = np.array([0.3, -0.7, 1.1])
    d = pb.differentiate(f)
    src = d.source(x)
    assert src.count("np.array((") == 3 and re.search(r"x_bar = np\.array\(\(\w+, \w+, \w+\)\)\n", src), src
    assert "np.stack" not in src
    assert "np.concatenate" not in src and ".reshape(" not in src
    value, g = d.value_and_grad(x)
    np.testing.assert_allclose(value, f(x), rtol=1e-14)
    eps = 1e-6
    fd = [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-7)


def test_a_piece_read_elsewhere_keeps_its_reshape():
    """A unit-axis reshape another operation reads too is printed for it; the stack reads the piece."""
    def f(x, y):
        r = x[None, :]
        return np.sum(np.stack([x, y]) ** 2) + np.sum(r * np.ones((2, 3)))

    x, y = np.arange(3.0), np.ones(3)
    src = pb.jit(f).source(x, y)
    assert "np.stack((x, y))" in src and "np.concatenate" not in src
    np.testing.assert_allclose(pb.jit(f)(x, y), f(x, y), rtol=1e-14)


def test_stacks_print_for_cupy_and_run_on_dask():
    da = pytest.importorskip("dask.array")

    def f(x, y):
        return np.sum(np.stack([np.sin(x), x * y], axis=1) ** 2)

    x, y = np.linspace(0.1, 1.0, 6), np.linspace(-1.0, 1.0, 6)
    cuda = pb.differentiate(f, argnums=(0, 1)).source(x, y, device="cuda")
    assert "cp.stack((sin, mul), axis=1)" in cuda and "cp.concatenate" not in cuda
    dask_src = pb.source(f, x, y, backend="dask")
    assert "da.stack((sin, mul), axis=1)" in dask_src and "concatenate" not in dask_src
    d = pb.differentiate(f, argnums=(0, 1), backend="dask")
    value, grads = d.value_and_grad(da.from_array(x, chunks=3), da.from_array(y, chunks=3))
    np.testing.assert_allclose(value, f(x, y), rtol=1e-13)
    np.testing.assert_allclose(grads[0], 2 * np.sin(x) * np.cos(x) + 2 * x * y ** 2, rtol=1e-13)
    np.testing.assert_allclose(grads[1], 2 * x ** 2 * y, rtol=1e-13)

    def moments(x):  # scalars stacked: ``cp.stack`` and ``da.stack`` (``np.array`` on NumPy)
        m = np.array([np.sum(x), np.sum(x ** 2)])
        return np.sum(m * m)

    assert "cp.stack((total, total_1))" in pb.differentiate(moments).source(x, device="cuda")
    assert "da.stack((total, total_1))" in pb.source(moments, x, backend="dask")
    assert "np.array((total, total_1))" in pb.source(moments, x)
    value, g = pb.differentiate(moments, backend="dask").value_and_grad(da.from_array(x, chunks=3))
    np.testing.assert_allclose(value, moments(x), rtol=1e-13)
    np.testing.assert_allclose(g, 2 * np.sum(x) + 4 * np.sum(x ** 2) * x, rtol=1e-13)


def test_stacks_in_a_loop_compiled_by_numba():
    """A scan whose step stacks vectors, its loops compiled by Numba (``np.stack`` of arrays compiles):
    the value and gradient of the NumPy loop's."""
    pytest.importorskip("numba")

    def f(w, x0):
        def step(x, _):
            return np.tanh(w * np.stack([x[0] * x[1], x[0] - x[1]]) + 0.1), None

        x, _ = pb.scan(step, x0, None, length=20)
        return np.sum(x ** 2)

    w, x0 = np.array([[0.9, -0.4], [0.3, 0.7]]), np.array([[0.2, -0.1], [0.5, 0.3]])
    numba = pb.differentiate(f, argnums=(0, 1), compile="numba")
    plain = pb.differentiate(f, argnums=(0, 1), compile="numpy")
    assert "np.stack((" in plain.source(w, x0)
    compiled = numba.source(w, x0)
    loop = compiled.split("def loop(")[1].split("\n\n\n")[0]  # the forward loop, compiled
    assert "@numba.njit" in compiled and "stacked = np.stack((" in loop and "stacked_steps[t] = stacked" in loop
    (v1, g1), (v2, g2) = numba.value_and_grad(w, x0), plain.value_and_grad(w, x0)
    np.testing.assert_allclose(v1, v2, rtol=1e-13)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    check_grads(lambda w, x0: f(w, x0), [w, x0])


def test_elementwise_work_on_a_unit_piece_stacks_the_piece():
    """``-x.reshape(1, 3)`` read by the concatenation alone stacks as ``-x`` (an elementwise operation of one
    array commutes with the reshape: the tutorial's ``theta_bar = np.stack((neg_1, ...))``); not where the
    reshape has another reader, which the concatenation then keeps."""
    def f(a, b):
        return np.concatenate([-a.reshape(1, 3), 2.0 * b.reshape(1, 3), np.sin(a).reshape(1, 3)])

    def g(a, b):
        r = a.reshape(1, 3)
        return np.concatenate([-r, b.reshape(1, 3)]), r

    a, b = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -3.0])
    src = pb.jit(f).source(a, b)
    assert "neg = -a\n" in src and "mul = 2.0 * b\n" in src and "np.stack((neg, mul, sin))" in src
    assert "reshape" not in src.split("\n", 5)[-1]  # (past the comment quoting f's line)
    np.testing.assert_array_equal(pb.jit(f)(a, b), f(a, b))
    src = pb.jit(g).source(a, b)
    assert "np.stack" not in src and "np.concatenate((neg, reshaped), axis=0)" in src
    for x, y in zip(pb.jit(g)(a, b), g(a, b)):
        np.testing.assert_array_equal(x, y)
