"""NumPy's array-manipulation functions on traced arrays: argument forms and errors against
NumPy itself, np.pad's modes at widths beyond the array, second derivatives, and the
printed source (slices and concatenations, as a person would write them)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb
from pullback.errors import TracingError

X = np.arange(12.0).reshape(3, 4) / 7 - 0.5
V = np.linspace(-1, 1, 4)


def assert_same(fn, *args, rtol=1e-12):
    """pullback's compiled ``fn`` returns what NumPy's returns: values, shapes, dtypes, containers."""
    want, ours = fn(*args), pb.jit(fn)(*args)
    if isinstance(want, list | tuple):
        assert type(ours) is type(want) and len(ours) == len(want)
    else:
        want, ours = [want], [ours]
    for o, w in zip(ours, want):
        assert np.shape(o) == np.shape(w) and np.asarray(o).dtype == np.asarray(w).dtype, (np.shape(o), np.shape(w))
        np.testing.assert_allclose(o, w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("fn", [
    lambda x: np.concatenate([x, np.ones((1, 4)), [[1.0, 2.0, 3.0, 4.0]]]),
    lambda x: np.concatenate([x, x], axis=None),
    lambda x: np.concatenate([x, x[:1]], dtype=np.complex64),
    lambda x: np.concatenate([x, X.astype(np.float32)], axis=-1, dtype=np.float32, casting="unsafe"),
    lambda x: np.concatenate(([x[0], x[1]], x[:2])),
    lambda x: np.stack([x, np.zeros((3, 4)), x], axis=-1),
    lambda x: np.stack((x[0], 2.0 * x[1]), axis=1, dtype=np.complex128),
    lambda x: np.vstack([x[0], [1, 2, 3, 4], 5.0 * x[1]]),
    lambda x: np.vstack(x),
    lambda x: np.hstack([x[0], 1.0, np.int64(3)], dtype=np.float32, casting="same_kind"),
    lambda x: np.hstack((x, x)),
    lambda x: np.column_stack((x[0], x.T, 1.0 * x[1])),
    lambda x: np.dstack((x, x[:, :, None])),
    lambda x: (np.atleast_1d(x[0, 0]), *np.atleast_2d(x[0], 1.0), np.atleast_3d(x)),
    lambda x: (np.ravel(x), np.ravel(x, order="F"), np.ravel(x[0, 0]), x.ravel("F"), x.flatten(order="F")),
    lambda x: (np.append(x, 1.0), np.append(x, [[1.0, 2.0, 3.0, 4.0]], axis=0), np.append(x[0], x)),
    lambda x: (x.repeat(2), x.repeat([1, 0, 3], axis=0), np.repeat(x[0, 0], 3), np.repeat(x, np.array([2]), 1)),
    lambda x: (np.tile(x, ()), np.tile(x[0, 0], 3), np.tile(x, [2]), np.tile(x[0], (2, 1, 1))),
    lambda x: (np.kron(x, 2.0), np.kron(x[0, 0], x), np.kron(x[0], np.eye(2))),
    lambda x: (np.roll(x, -1), np.roll(x, [1, -2], axis=[0, 1]), np.roll(x, 2, axis=(0, 1)), np.roll(x, 0)),
    lambda x: (np.flip(x, -1), np.flip(x, ()), np.rot90(x, 3), np.rot90(x, axes=(1, 0)), np.rot90(x, -2)),
    lambda x: np.split(x, [1], axis=-1),
    lambda x: np.array_split(x, 2),
    lambda x: np.split(x, [], axis=1),
    lambda x: np.hsplit(x[0], 2),
    lambda x: np.select([x > 0, x < -0.2], [x, 2 * x], default=np.ones(4)),
    lambda x: np.select([x > 0], [1.0], default=x),
    lambda x: (np.cross(x[:, :3], x[0, 1:]), np.cross(x[:3, :3], x[:3, 1:], axisa=0, axisb=0)),
    lambda x: (np.trapezoid(x, x[0]), np.trapezoid(x, x, axis=0), np.trapezoid(x[0], dx=0.1)),
    lambda x: np.meshgrid(x[0], x[1, :2], x[2, :3]),
    lambda x: np.meshgrid(x[0], sparse=True, indexing="ij"),
    lambda x: np.broadcast_arrays(x, x[:1], 2.0),
    lambda x: (np.pad(x, {1: 2}, mode="wrap"), np.pad(x, {-2: (0, 1), 1: (2, 0)}, constant_values=-1.0)),
    lambda x: (np.expand_dims(x, ()), np.squeeze(x, ()), np.squeeze(x[:1, None], axis=None), x[:, :1].squeeze(-1)),
    lambda x: (np.squeeze(x[0, 0], axis=0), np.expand_dims(x, (-1, 0)), np.squeeze(x[None, :, None], (0, 2))),
])
def test_argument_forms_match_numpy(fn):
    assert_same(fn, X)


def test_complex_and_float32_keep_their_dtype():
    z = X + 1j * X[::-1]
    assert_same(lambda z: (np.pad(z, 1, constant_values=1 + 2j), np.kron(z, z[0]), np.cross(z[:, :3], z[1, :3])), z)
    f = X.astype(np.float32)
    assert_same(lambda x: (np.pad(x, 2, mode="symmetric"), np.select([x > 0], [x]), np.vstack([x, x])), f, rtol=1e-6)


def test_pad_empty_mode_keeps_the_array_inside():
    ours = pb.jit(lambda x: np.pad(x, ((1, 2), (0, 3)), mode="empty"))(X)
    assert ours.shape == (6, 7)
    np.testing.assert_array_equal(ours[1:4, :4], X)


def test_tuple_repeats_and_row_stack():
    assert_same(lambda x: np.repeat(x, (1, 2, 3), axis=0), X)
    if hasattr(np, "row_stack"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert_same(lambda x: np.row_stack([x, x[0]]), X)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
def test_pad_modes_at_every_width(mode):
    """Widths past the array's length: NumPy reflects, mirrors and wraps periodically."""
    for n in (1, 2, 3):
        x = np.arange(1.0, n + 1)[:, None] * np.array([1.0, -2.0])
        widths = [((b, a), (1, 2)) for b in range(0, 2 * n + 2, 2) for a in (0, 1, 2 * n + 1)]
        assert_same(lambda x, widths=widths: tuple(np.pad(x, w, mode=mode) for w in widths), x)


def _raises(fn, *args):
    """The exception NumPy raises for ``fn(*args)``; pullback must raise the same kind, as a TracingError."""
    with pytest.raises(Exception) as numpy_error:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            fn(*args)
    kind = type(numpy_error.value)
    if issubclass(kind, np.exceptions.AxisError):
        kind = np.exceptions.AxisError
    with pytest.raises(kind) as ours:
        pb.jit(fn)(*args)
    assert isinstance(ours.value, TracingError)
    assert "test_manipulation.py" in str(ours.value)  # the user's line is named
    return ours.value


@pytest.mark.parametrize("fn", [
    lambda x: np.expand_dims(x, (0, 0)),
    lambda x: np.expand_dims(x, 3),
    lambda x: np.squeeze(x, 0),
    lambda x: np.concatenate([x, x[0]]),
    lambda x: np.concatenate([x, x[:, :2]]),
    lambda x: np.concatenate([x[0, 0], x[0, 0]]),
    lambda x: np.concatenate([x, x], axis=2),
    lambda x: np.concatenate([x, x], dtype=np.int64),
    lambda x: np.stack([x, x[:2]]),
    lambda x: np.stack([x, x], axis=-4),
    lambda x: np.vstack([x, x[0, :3]]),
    lambda x: np.split(x, 2),
    lambda x: np.array_split(x, 0),
    lambda x: np.hsplit(x[0, 0], 2),
    lambda x: np.vsplit(x[0], 2),
    lambda x: np.dsplit(x, 2),
    lambda x: np.repeat(x, -1),
    lambda x: np.repeat(x, [1, 2], axis=0),
    lambda x: np.tile(x, -2),
    lambda x: np.flipud(x[0, 0]),
    lambda x: np.fliplr(x[0]),
    lambda x: np.flip(x, 2),
    lambda x: np.rot90(x, axes=(0, 0)),
    lambda x: np.rot90(x, axes=(0, 1, 2)),
    lambda x: np.rot90(x, axes=(0, 2)),
    lambda x: np.roll(x, (1, 2), axis=(0, 1, 0)),
    lambda x: np.pad(x, -1),
    lambda x: np.pad(x, 1.5),
    lambda x: np.pad(x, ((1, 2, 3),)),
    lambda x: np.pad(x[:0], 1, mode="edge"),
    lambda x: np.pad(x, 1, mode="edge", constant_values=3),
    lambda x: np.pad(x, 1, mode="nonsense"),
    lambda x: np.select([x > 0], [x, x]),
    lambda x: np.select([x], [x]),
    lambda x: np.cross(x, x),
    lambda x: np.meshgrid(x[0], indexing="yx"),
    lambda x: np.cross(x[:, None, :3], x[:2, None, 1:]),
    lambda x: np.broadcast_arrays(x, x[:2]),
    lambda x: np.reshape(x, (5, -1)),
])
def test_errors_match_numpy(fn):
    _raises(fn, X)


def test_repeated_axis_is_numpys_value_error():
    err = _raises(lambda x: np.expand_dims(x, (0, 0)), X)
    assert "repeated axis" in str(err)


def test_cross_of_2_vectors_warns_or_raises_as_numpy_does():
    a, b = X[:, :2], X[::-1, 2:]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            np.cross(a, X[:, :3])
    except ValueError as e:  # NumPy 2.5 on
        with pytest.raises(ValueError) as ours:
            pb.jit(lambda a: np.cross(a, X[:, :3]))(a)
        assert str(e).replace("2 and 3", "") in str(ours.value).replace("2 and 3", "")
        return
    with pytest.warns(DeprecationWarning, match="2-dimensional vectors"):
        ours = pb.jit(lambda a, b: (np.cross(a, b), np.cross(a, X[:, :3])))(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        want = (np.cross(a, b), np.cross(a, X[:, :3]))
    for o, w in zip(ours, want):
        np.testing.assert_allclose(o, w, rtol=1e-14)


@pytest.mark.parametrize("fn, args", [
    (lambda x: np.sin(np.pad(x, ((1, 2), (3, 0)), mode="reflect")) * np.roll(np.pad(x, ((1, 2), (3, 0)), "wrap"), 1),
     (X,)),
    (lambda x: np.repeat(x, [2, 0, 1], axis=0) ** 2 + np.tile(np.flip(x), (1, 2))[:, :4] ** 3, (X,)),
    (lambda a, b: np.cross(a, b * a) ** 2, (X[:, :3], X[0, 1:])),
    (lambda x: np.kron(x, np.rot90(x)) ** 2, (X[:2, :3],)),
    (lambda x: np.trapezoid(np.exp(x), V ** 3, axis=-1), (X,)),
    (lambda x: np.select([x.real > 0], [x * x], default=np.conj(x) * 2), (X + 1j * X[::-1],)),
    (lambda x: np.vstack(np.array_split(x * x, 2, axis=1)[::-1]), (X + 0.3j,)),
])
def test_second_order(fn, args):
    check_grads(fn, args, order=2)


def _code(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_printed_pad_is_borders_around_the_array():
    src = pb.source(lambda x: np.pad(x, ((0, 0), (2, 1)), mode="reflect"), X)
    lines = _code(src)
    concat = [line for line in lines if "np.concatenate(" in line]
    assert len(concat) == 1 and "x," in concat[0] and "axis=1" in concat[0]  # (left, x, right)
    assert not any(name in "\n".join(lines) for name in ("np.pad", "np.take", "for ", "arange"))
    assert sum("[" in line and "=" in line for line in lines) == 2  # one slice per border


def test_printed_roll_and_split_gradients_are_concatenations():
    """The gradient of a roll, or of a split, is the cotangents' pieces concatenated: no
    zero-padded copies summed, no index arrays, no loops."""
    for f in (lambda x: np.sum(np.roll(x, 1, axis=0) * X),
              lambda x: sum(np.sum(np.sin(p)) for p in np.split(x, [1, 3], axis=1))):
        code = _code(pb.differentiate(f).source(X))
        grad = [line for line in code if line.startswith("x_bar =")]
        assert len(grad) == 1 and grad[0].startswith("x_bar = np.concatenate(")
        assert not any(name in "\n".join(code) for name in ("np.zeros", "np.take", "for ", "arange", "np.array("))


@pytest.mark.parametrize("axis, start", [(0, 0), (2, 0), (0, 3), (1, -1), (-1, 1), (2, 2)])
def test_rollaxis_matches_numpy(axis, start):
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    np.testing.assert_array_equal(pb.jit(lambda x: np.rollaxis(x, axis, start))(x), np.rollaxis(x, axis, start))
    check_grads(lambda x: np.rollaxis(x, axis, start), [x])


def test_result_type_of_tracers():
    x32 = np.ones(2, np.float32)
    assert pb.jit(lambda x: np.zeros(2, np.result_type(x, np.float64)) + x)(x32).dtype == np.float64
    assert pb.jit(lambda x, s: x * np.ones(2, np.result_type(x, s)))(x32, 2.0).dtype == np.float32
