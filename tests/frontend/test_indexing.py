"""Indexing, index assignment and ordering on traced arrays, against NumPy (values),
NumPy's scatter (gradients of slices), finite differences (first and second order), and
the errors where NumPy's semantics cannot be traced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pullback.testing import check_grads

import pullback as pb
from pullback.frontend.numpy import indexing

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4))
Z = X + 1j * RNG.standard_normal((3, 4))
I = np.array([2, 0, 2, 1])


def _same(ours, want):
    ours, want = (ours, want) if isinstance(want, tuple) else ((ours,), (want,))
    for o, w in zip(ours, want):
        w = np.asarray(w)
        assert np.shape(o) == w.shape and np.asarray(o).dtype == w.dtype, (np.shape(o), w.shape)
        np.testing.assert_allclose(o, w, rtol=1e-12, atol=1e-12)


# --- slices: every (start, stop, step) on short axes --------------------------------------

BOUNDS = [None, *range(-6, 7)]
STEPS = [None, 1, -1, 2, -2, 3, -3]


@pytest.mark.parametrize("n", range(5))
def test_every_slice_matches_numpy_values_and_gradients(n):
    """Every slice s of a length-n axis: pullback's reading of s addresses NumPy's entries; then
    values of x[s] and gradients of sum(w_s * x[s]) for each distinct reading, all compiled at once,
    the gradient's oracle being NumPy's own scatter, np.add.at(g, np.arange(n)[s], w_s)."""
    distinct = {}
    for s in (slice(a, b, c) for a in BOUNDS for b in BOUNDS for c in STEPS):
        (e,) = indexing.parse(np.empty(n), s).index
        assert list(range(e.start, e.stop, e.step)) == list(range(n)[s]), (n, s, e)
        distinct.setdefault(e, s)
    slices = list(distinct.values())
    x = RNG.standard_normal(n)
    ws = [RNG.standard_normal(len(range(n)[s])) for s in slices]

    def values(x):
        return tuple(x[s] for s in slices)

    def loss(x):
        return sum(np.sum(w * x[s]) for w, s in zip(ws, slices))

    for s, got, want in zip(slices, pb.jit(values)(x), values(x)):
        assert got.shape == want.shape and np.array_equal(got, want), (n, s, got, want)
    want = np.zeros(n)
    for w, s in zip(ws, slices):
        np.add.at(want, np.arange(n)[s], w)
    np.testing.assert_allclose(pb.grad(loss)(x), want, rtol=1e-12, atol=1e-12)


def test_negative_step_from_before_the_start_is_empty():
    x = np.arange(3.0)
    f = pb.jit(lambda x: (x[-5::-1], x[-4:-5:-1], x[5::-2]))
    _same(f(x), (x[-5::-1], x[-4:-5:-1], x[5::-2]))
    np.testing.assert_array_equal(pb.grad(lambda x: np.sum(x[-5::-1]) + np.sum(x[1::-1]))(x), [1.0, 1.0, 0.0])


# --- advanced indexing ----------------------------------------------------------------------

KEYS = [
    I, [0, -1], (I, 1), (slice(None), I), (I, slice(1, 3), None), ([0, 1], [1, 2]), (Ellipsis, [3, 0]),
    (np.array([[0, 2], [1, 1]]), np.array([1, 3])), (np.array([[0], [2]]), slice(None, None, -1)),
    (None, I, None, [1, 1, 0, 3]), (I, None, 2), (1, slice(None), ), (-1, [3, 3, 0]), np.array([], dtype=int),
    X > 0, (X[:, 0] > 0, slice(1, 3)), (slice(None), X[0] > 0), (np.array(1), [0, 2]), ([[0, 1]], Ellipsis, None),
]


@pytest.mark.parametrize("key", KEYS, ids=range(len(KEYS)))
@pytest.mark.parametrize("x", [X, Z], ids=["real", "complex"])
def test_read_matches_numpy(key, x):
    _same(pb.jit(lambda x: x[key])(x), x[key])


@pytest.mark.parametrize("key", KEYS, ids=range(len(KEYS)))
def test_assignment_matches_numpy(key):
    shape = X[key].shape
    v = RNG.standard_normal(shape)

    def f(x, v):
        y = x * 1.0
        y[key] = v
        y[key] *= 2.0
        z = x.copy()
        z[key] = 0.5  # a scalar everywhere in the indexed shape
        z[key] += v.sum(axis=0) if v.ndim else v  # broadcast along the last axes
        return y, z

    _same(pb.jit(f)(X, v), f(X, v))


@pytest.mark.parametrize("key", KEYS[:12], ids=range(12))
def test_assignment_gradients(key):
    v = RNG.standard_normal(X[key].shape) + 0j
    z = Z.copy()

    def f(x, v):
        y = x * 1.0
        y[key] = v * x[key]
        return np.sin(y) * y

    check_grads(f, [z, v], order=2)


def test_repeated_indices_keep_the_last_write_and_its_gradient():
    idx = np.array([1, 0, 1, 1])

    def f(x, v):
        y = x.copy()
        y[idx] = v
        return y

    x, v = np.zeros(3), np.array([1.0, 2.0, 3.0, 4.0])
    _same(pb.jit(f)(x, v), f(x, v))
    _, vjp = pb.vjp(f, x, v)
    x_bar, v_bar = vjp(np.array([10.0, 20.0, 30.0]))
    np.testing.assert_array_equal(x_bar, [0.0, 0.0, 30.0])
    np.testing.assert_array_equal(v_bar, [0.0, 10.0, 0.0, 20.0])  # y[0] = v[1], y[1] = v[3]


def test_repeated_traced_indices_keep_the_last_write_and_its_gradient():
    def f(x, v):
        y = x.copy()
        y[np.argmax(x[:, :3], axis=1)] = v  # traced positions, repeated below
        return y

    x = np.array([[0.0, 5.0, 1.0, 0.0], [0.0, 6.0, 1.0, 2.0], [9.0, 1.0, 0.0, 3.0]])  # argmax rows: 1, 1, 0
    v = RNG.standard_normal((3, 4))
    _same(pb.jit(f)(x, v), f(x, v))
    ct = RNG.standard_normal((3, 4))
    _, vjp = pb.vjp(f, x, v)
    v_bar = vjp(ct)[1]
    np.testing.assert_array_equal(v_bar, np.stack([np.zeros(4), ct[1], ct[0]]))
    check_grads(f, [x, v], order=2)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_keys_read_and_assign_like_numpy(data):
    """Random mixtures of ints, slices, None, integer arrays (with repeats) and '...'."""
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="shape")
    x = np.arange(float(np.prod(shape))).reshape(shape) + 0.5
    key, axis = [], 0
    while axis < len(shape):
        n = shape[axis]
        kind = data.draw(st.sampled_from(["int", "slice", "array", "none"]))
        if kind == "none":
            key.append(None)
            continue
        if kind == "int":
            key.append(data.draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            b = st.none() | st.integers(-n - 2, n + 2)
            key.append(slice(data.draw(b), data.draw(b), data.draw(st.sampled_from([None, 1, -1, 2, -2]))))
        else:
            key.append(np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=4)), dtype=np.int64))
        axis += 1
    key = tuple(key)
    try:
        want = x[key]
    except IndexError:  # index arrays that do not broadcast: pullback refuses the key too
        with pytest.raises(pb.TracingError, match="broadcast"):
            pb.make_ir(lambda x: x[key])(x)
        return
    _same(pb.jit(lambda x: x[key])(x), want)
    v = np.arange(want.size, dtype=float).reshape(want.shape) * 10

    def f(x, v):
        y = x.copy()
        y[key] = v
        return y

    _same(pb.jit(f)(x, v), f(x, v))


# --- index assignment semantics ---------------------------------------------------------------


def test_assignment_never_mutates_the_callers_array_and_aliases_follow():
    x = X.copy()

    def f(x):
        alias = x
        x[0] = 1.0
        return alias  # the same object: it sees the assignment, as in NumPy

    np.testing.assert_array_equal(pb.jit(f)(x)[0], np.ones(4))
    np.testing.assert_array_equal(x, X)


def test_copy_is_not_a_view_and_assigning_into_it_leaves_the_original():
    def f(x):
        y = x[1:].copy()
        y[0] = 0.0
        z = np.copy(x)
        z[:, 0] = 7.0
        w = x.flatten()
        w[0] = 3.0
        return x, y, z, w

    _same(pb.jit(f)(X), f(X.copy()))


def test_assignment_casts_to_the_arrays_dtype():
    def f(x, k):
        y = x.astype(np.float32)
        y[0] = 1e-50  # rounds to 0 in float32
        y[1, :2] = k  # an integer array
        return y

    k = np.array([3, 4])
    _same(pb.jit(f)(X, k), f(X, k))


def test_traced_mask_assignment_is_where():
    def f(x):
        y = x.copy()
        y[y > 0] = 0.0
        y[x[:, 0] < 0] = x[0, 1]  # a row mask and a traced scalar
        return y

    _same(pb.jit(f)(X), f(X.copy()))
    check_grads(f, [X], order=2)


def test_at_set_add_get_return_new_arrays():
    idx = np.array([1, 1, 0])

    def f(x, v):
        a = x.at[idx, 2].set(v)
        b = x.at[idx, 2].add(v)  # repeats accumulate
        c = x.at[1:, ::2].get()
        d = x[1:].at[0].set(0.0)  # a view may be updated functionally
        return a, b, c, d, x

    v = np.array([1.0, 2.0, 3.0])
    a, b, c, d, x = pb.jit(f)(X, v)
    want_a, want_b = X.copy(), X.copy()
    want_a[idx, 2] = v
    np.add.at(want_b, (idx, 2), v)
    want_d = X[1:].copy()
    want_d[0] = 0
    _same((a, b, c, d, x), (want_a, want_b, X[1:, ::2], want_d, X))
    check_grads(pb.jit(lambda x, v: f(x, v)[:2]), [X, v], order=2)  # NumPy has no .at: differences of the jit


def test_np_add_at_rebinds_and_accumulates():
    idx = np.array([0, 2, 0, 0])

    def f(x, v):
        y = x * 2.0
        np.add.at(y, (idx, slice(1, 3)), v)
        np.subtract.at(y, idx, 1.0)
        return y

    v = RNG.standard_normal((4, 2))
    _same(pb.jit(f)(X, v), f(X, v))
    check_grads(f, [X, v], order=2)
    assert "np.add.at(" in pb.jit(f).source(X, v)


def test_in_place_sort_and_ordering_functions():
    def f(x):
        y = x * 1.0
        y.sort(axis=1)
        return y, x.argsort(axis=0), x.argmax(), x.argmin(axis=1, keepdims=True), np.argmax(x, axis=0)

    _same(pb.jit(f)(X), f(X))
    check_grads(lambda x: np.sort(x, axis=0) * np.sort(x, axis=None).reshape(3, 4), [X], order=2)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_empty_and_size_one_axes(n):
    x = RNG.standard_normal((n, 2))

    def f(x):
        y = x.copy()
        y[np.arange(n)[::-1], 1] = 5.0
        return y, x[np.array([], dtype=int)], np.sort(x, axis=0), np.argsort(x, axis=0), x[[0] * n] if n else x

    _same(pb.jit(f)(x), f(x))


def test_constant_arrays_at_traced_positions():
    c = np.arange(4.0) ** 2
    x = np.array([3.0, 1.0, 2.0, 0.0])
    _same(pb.jit(lambda x: np.take_along_axis(c, np.argsort(x), 0) * x)(x), c[np.argsort(x)] * x)


C = np.arange(12.0).reshape(3, 4)


def _gathers_from_constants(x):
    """NumPy arrays (one made here, one read from the module) indexed by integers computed in the trace."""
    c = np.array([1.0, 5.0, 2.0, 7.0])
    k, ks = np.argmax(x), np.argsort(x)
    return (c[k] * x, np.take(c, k) * x, C.ravel()[k] * x, C[k % 3] * x, c[ks] * x, np.take(c, ks) * x,
            C[:, k] * x[:3], C[1, ks] * x, c.take(ks) * x, C[1:, ks][:, ::-1] @ x, np.arange(4.0)[ks] * x)


def test_constant_arrays_indexed_by_traced_integers():
    x = np.array([0.3, 2.2, -0.5, 1.0])
    _same(pb.jit(_gathers_from_constants)(x), _gathers_from_constants(x))
    check_grads(_gathers_from_constants, [x])


def test_index_arrays_are_read_when_tracing():
    idx = np.array([0, 1])
    f = pb.jit(lambda x: x[idx])
    np.testing.assert_array_equal(f(X), X[[0, 1]])
    assert "x[idx]" in f.source(X)  # the program's copy keeps the user's name
    idx[:] = [2, 2]  # a distinct key when traced: a later repeat must not reach the compiled program
    np.testing.assert_array_equal(f(X), X[[0, 1]])


def test_take_modes():
    idx = np.array([[5, -1], [0, 9]])

    def f(x):
        return (np.take(x, idx, mode="wrap"), np.take(x, idx, axis=1, mode="clip"), np.take(x, [-1, 0]),
                np.take(x, np.argsort(x[0]), axis=1, mode="clip"))

    _same(pb.jit(f)(X), f(X))


def test_printed_code_is_numpys_indexing():
    idx = np.array([2, 0, 1])

    def f(x, v):
        y = np.exp(x)
        y[idx, 1:3] = v
        return y[idx, None, ::-1]

    src = pb.jit(f).source(X, np.ones((3, 2)))
    assert "y[idx, 1:3] = v" in src  # y is dead afterwards: written in place, no copy
    assert "[idx, None, ::-1]" in src
    grad = pb.differentiate(lambda x: np.sum(np.sin(x[I]))).source(X)
    assert "x_bar = np.zeros((3, 4))\n" in grad and "np.add.at(x_bar, I, " in grad
    assert ".copy()" not in grad  # the gradient accumulates in its own buffer
    want = np.zeros_like(X)
    np.add.at(want, I, np.cos(X[I]))
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(np.sin(x[I])))(X), want)


# --- errors -----------------------------------------------------------------------------------------


def _error(f, *args, match):
    with pytest.raises(pb.TracingError, match=match) as e:
        pb.make_ir(f)(*args)
    assert "test_indexing.py:" in str(e.value)


def test_errors():
    _error(lambda x: x[x > 0], X, match="data-dependent shape.*np.where")
    _error(lambda x: x[:, [0, 4]], X, match="index 4 is out of bounds for axis 1 with size 4")
    _error(lambda x: x[3], X, match="out of bounds")
    _error(lambda x: x[0, 0, 0], X, match="too many indices")
    _error(lambda x: x[X[0] > 0], X, match="boolean index")

    def write_view(x):
        v = x[0]
        v[1] = 0.0

    _error(write_view, X, match="assignment into a view")

    def write_transpose(x):
        x.T[0] = 1.0

    _error(write_transpose, X, match="assignment into a view")

    def stale(x):
        y = x * 1.0
        row = y[0]
        y[0] = 5.0
        return row + 1

    _error(stale, X, match="used after an assignment")

    def stale_copy(x):
        y = x * 1.0
        row = y[0]
        y[0] = 5.0
        return row.copy()

    _error(stale_copy, X, match="used after an assignment")

    def complex_into_real(x):
        x[0] = 1j

    _error(complex_into_real, X, match="complex value into a real array")

    def shape_mismatch(x):
        x[0] = np.ones(3)

    _error(shape_mismatch, X, match="could not broadcast")

    def add_at_view(x):
        np.add.at(x[1:], [0], 1.0)

    _error(add_at_view, X, match="assignment into a view")


def test_a_gather_by_scalar_positions_is_a_view_to_memory_planning():
    """x[i] with a traced 0-d i prints as NumPy basic indexing (a view of x): no operation may
    then write into it in place, or the caller's x would change."""
    x = RNG.standard_normal((2, 300, 300))
    keep = x.copy()

    def f(x):
        t = x[np.argmax(x[:, 0, 0])]
        return np.exp(t) + 1.0

    np.testing.assert_allclose(pb.jit(f)(x), f(x))
    np.testing.assert_array_equal(x, keep)


def test_repeats_in_constant_keys_are_found_when_tracing():
    """Gradients of reads scatter with += where constant indices are distinct, np.add.at where they repeat."""
    distinct = pb.differentiate(lambda x: np.sum(x[np.array([2, 0, 1]), 1:] ** 2)).source(X)
    repeated = pb.differentiate(lambda x: np.sum(x[np.array([2, 0, 2]), 1:] ** 2)).source(X)
    assert "np.add.at" not in distinct and "+=" in distinct
    assert "np.add.at" in repeated


def test_assignment_into_0d_values():
    def f(x):
        t = x.sum(axis=(0, 1), keepdims=True).reshape(()).copy()  # a NumPy scalar in the generated code
        t[...] = 2.0 * t
        u = x[0, :1].copy().reshape(()).copy()
        u[()] += t
        return t, u

    _same(pb.jit(f)(X), f(X))
    check_grads(f, [X], order=2)
