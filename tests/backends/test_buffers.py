"""NumPy arrays made inside the traced function (``np.zeros``, ``np.empty``, ``np.arange``, ...) and
filled with traced values by index assignment: values against NumPy run eagerly, derivatives against
finite differences, every name bound to the array seeing the writes, the printed program showing the
preallocation and the writes, and the refusals (arrays read from scope, views of held arrays)."""

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb


def _same(ours, want):
    ours, want = (ours, want) if isinstance(want, tuple) else ((ours,), (want,))
    assert len(ours) == len(want)
    for o, w in zip(ours, want):
        assert np.shape(o) == np.shape(w) and np.asarray(o).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(o, w, rtol=1e-13, atol=1e-14)


def trajectory(x):
    traj = np.zeros((4, 2))
    y = x
    for t in range(4):
        y = np.sin(y) + 0.1 * t
        traj[t] = y
    return traj


def scattered(x):
    z = np.empty(5)
    z[:] = 0.0  # a concrete write first: still NumPy's until a traced value arrives
    z[[0, 3]] = x
    z[1] += x[0] * 2
    z[-1:] = [x[1] ** 2]
    w = np.arange(4.0)  # not all one value: its values are a constant
    w[2] = x[1]
    n = np.zeros((2, 3), dtype=np.float32)  # cast to the array's dtype, as NumPy's assignment does
    n[1, ::2] = x
    return z * np.arange(5.0), w, n


def _fill(buf, x):
    buf[2] = x[1] * 3


def aliases(x):
    z = np.ones(3)
    w = z
    z[0] = x[0]
    _fill(z, x)  # written by a function of the user's: seen here
    rows = [r for r in w]
    return np.sum(w * w), w.T, w[:2], np.stack(rows), z.sum(), np.cumsum(w), w


def reshaped(x):
    z = np.zeros(6).reshape(2, 3)  # a view of an array nothing else holds: the array itself
    z[0, :2] = x
    k = np.argmax(x)  # a traced position in a NumPy array
    m = np.zeros(2)
    m[k] = 1.0
    return z.T @ z, m * x


@pytest.mark.parametrize("f", [trajectory, scattered, aliases, reshaped])
def test_values_and_derivatives(f):
    x = np.array([0.3, 1.2])
    _same(pb.jit(f)(x), f(x))
    check_grads(lambda x: tuple(o for o in pb.tree.flatten(f(x))[0] if np.asarray(o).dtype == np.float64), [x])


def test_the_program_shows_the_preallocation_and_the_writes():
    src = pb.differentiate(lambda x: np.sum(trajectory(x) ** 2)).source(np.ones(2))
    assert "traj = np.zeros((4, 2))\n" in src
    assert "traj[0] = " in src and "traj[3] = " in src
    lines = [line.strip() for line in src.splitlines()]
    at = lines.index("traj = np.zeros((4, 2))")
    assert lines[at - 1].startswith("# test_buffers.py:") and lines[at - 1].endswith("traj = np.zeros((4, 2))")


def test_arrays_read_from_scope_and_views_of_held_arrays_are_refused():
    out = np.zeros(2)

    def into_global(x):
        out[0] = x[0]
        return out

    def into_view(x):
        z = np.zeros(4)
        v = z[:2]
        v[0] = x[0]
        return z

    with pytest.raises(pb.TracingError, match="reads from its scope.*copy") as e:
        pb.jit(into_global)(np.ones(2))
    assert "test_buffers.py:" in str(e.value)
    assert out.tolist() == [0.0, 0.0]
    with pytest.raises(pb.TracingError, match="view .* of a NumPy array") as e:
        pb.jit(into_view)(np.ones(2))
    assert "test_buffers.py:" in str(e.value)


def test_the_arrays_themselves_are_left_as_they_were():
    kept = []

    def f(x):
        z = np.zeros(3)
        kept.append(z)
        z[1] = x[0]
        return z

    np.testing.assert_array_equal(pb.jit(f)(np.array([5.0])), [0.0, 5.0, 0.0])
    assert kept[0].tolist() == [0.0, 0.0, 0.0]  # the trace's array: the program, not NumPy, holds the writes


def test_bodies_of_loops_cannot_write_into_arrays_outside_them():
    """A pb.scan body writing into an array of the function around it (a NumPy array it made, or a
    traced one) would change what is outside the body: refused, at the user's line."""
    def numpy_array(x):
        buf = np.zeros(2)

        def body(c, xi):
            buf[0] = xi
            return c + xi, c

        return pb.scan(body, 0.0, x)[0], buf

    def traced_array(x):
        buf = x * 1.0

        def body(c, xi):
            buf[0] = xi
            return c + xi, c

        return pb.scan(body, 0.0, x)[0], buf

    for f in (numpy_array, traced_array):
        with pytest.raises(pb.TracingError, match="cannot change what is outside it") as e:
            pb.jit(f)(np.array([0.3, 0.5]))
        assert "test_buffers.py:" in str(e.value)


def test_vmap_and_jacobians_of_a_filled_array():
    x = np.array([0.3, 0.5])
    np.testing.assert_allclose(pb.vmap(trajectory)(np.stack([x, 2 * x])), np.stack([trajectory(x), trajectory(2 * x)]))
    np.testing.assert_allclose(pb.jacfwd(trajectory)(x), pb.jacrev(trajectory)(x))
