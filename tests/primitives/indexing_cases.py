"""Indexing cases (gather, scatter, scatter_add, ordering) shared by the forward, JVP and
transpose suites. Index arrays are closed-over constants or computed in the trace
(``argsort``); duplicates are included on purpose."""

from __future__ import annotations

import numpy as np

from tests.primitives.cases import Case

I = np.array([2, 0, 2, 1])  # repeats 2
J = np.array([[1, 3], [0, 0]])
M = np.array([[True, False, True, True], [False, False, False, True], [True, True, False, False]])


def _set(x):
    y = x.copy()
    y[I, 1] = x[:, 0].sum()
    y[1:, ::2] = 2.0 * x[:2, 1:3]
    y[J % 3, :2] = x[0, 0]
    return y


def _augmented(x, v):
    y = x * 1.0
    y[I] += v
    y[:, J] *= 2
    y[M] -= 1.0
    return y


def _add_at(x, v):
    y = x * 1.0
    np.add.at(y, (I, slice(1, 3)), v)
    return y


def _sorted_rows(x):
    y = x.copy()
    y.sort(axis=0)
    return y, np.sort(x), np.sort(x, axis=None)


def _set_by_argsort(x, v):
    """Traced index arrays: scatter with positions from argsort (a permutation: no repeats)."""
    y = x * 1.0
    y[np.argsort(x[:, 0])] = v
    return y


def _set_traced_repeats(x, v):
    """Traced indices with repeats: the last write stays."""
    y = x * 1.0
    y[np.argmax(x[:, :3], axis=1)] = v
    return y


C = np.random.default_rng(3).standard_normal((5, 4))


def _starts(x):
    """Traced starts: one the trace cannot bound (checked when the program runs), one ``% 3`` bounds
    to 0..2 (unchecked)."""
    return np.argmax(x[:4, 0]), np.argmax(x[0]) % 3


def _windows(x):
    s, k = _starts(x)
    return x[s:s + 2], x[:, k:k + 2], x[s:s + 2, k:k + 2], x[s:s + 2, 1], x[None, s + 1:s + 3, ::-1]


def _windows_of_constant(x):
    s, k = _starts(x)
    return C[s:s + 2] * x[:2], x[s:s + 2] * C[k:k + 2]


def _windows_of_other(x, y):
    """Starts from one operand, windows of the other (unbatched starts when ``x`` is not batched)."""
    s, k = _starts(x)
    return y[s:s + 2] * 2.0, y[:, k:k + 2]


def _window_set(x):
    s, k = _starts(x)
    y = x * 1.0
    y[s:s + 2] = 2.0 * x[1:3]
    y[:, k:k + 2] += x[:, :2]
    y[s:s + 2, 0] = 0.5
    z = np.zeros_like(x)
    z[s + 1:s + 3] = x[:2] ** 2
    w = x * 1.0
    w[s:s + 2] = C[:2]
    return y, z, w


def _window_set_other(x, y):
    s, k = _starts(x)
    z = y * 1.0
    z[s:s + 2, k:k + 2] = y[:2, :2] * 3.0
    z[s:s + 2] = 0.0
    return z


CASES = [
    Case("dynamic_slice", _windows, ((5, 4),)),
    Case("dynamic_slice-constant", _windows_of_constant, ((5, 4),)),
    Case("dynamic_slice-other", _windows_of_other, ((5, 4), (5, 4))),
    Case("dynamic_slice-complex", _windows_of_other, ((5, 4), (5, 4)), "complex128"),
    Case("dynamic_update_slice", _window_set, ((5, 4),)),
    Case("dynamic_update_slice-other", _window_set_other, ((5, 4), (5, 4))),
    Case("gather", lambda x: (x[I], x[:, I], x[I, 1:3, None], x[[0, 1], [1, 2]], x[J % 3], x[-1, J], x[I, None, 2:]),
         ((3, 4),)),
    Case("gather-complex", lambda x: (x[I, ::-1], x[..., [3, 0]], x[M]), ((3, 4),), "complex128"),
    Case("gather-f32-empty", lambda x: (x[np.array([], dtype=int)], x[:, [0]], x[[-1, 0, -1]]), ((3, 1),),
         "float32"),
    Case("gather-3d-separated", lambda x: (x[I[:2], :, [0, 1]], x[:, J, 1], x[[1], ..., [2]]), ((3, 4, 3),)),
    Case("gather-traced", lambda x: (x[np.argsort(x[:, 0])], x[np.argmax(x, axis=0), 1], x[:, np.argmin(x[0])]),
         ((3, 4),)),
    Case("scatter", _set, ((3, 4),)),
    Case("scatter-complex", _set, ((3, 4),), "complex128"),
    Case("scatter-augmented", _augmented, ((3, 4), (4,))),
    Case("scatter-traced", _set_by_argsort, ((3, 4), (4,))),
    Case("scatter-traced-repeats", _set_traced_repeats, ((3, 4), (4,))),
    Case("scatter_add", _add_at, ((3, 4), (4, 2)), "complex128"),
    Case("take", lambda x: (np.take(x, I), np.take(x, J, axis=1), np.take(x, [5, -1], axis=1, mode="wrap"),
                            x.take([7, -3], axis=0, mode="clip")), ((3, 4),)),
    Case("take_along_axis", lambda x: (np.take_along_axis(x, np.argsort(x, axis=1), axis=1),
                                       np.take_along_axis(x, np.array([[1], [0]]), axis=0),
                                       np.take_along_axis(x, I, axis=None)),
         ((3, 4),)),
    Case("sort", _sorted_rows, ((3, 4),)),
    Case("sort-f32", lambda x: np.sort(x, axis=-1), ((2, 5),), "float32"),
    Case("sort-complex", lambda x: np.sort(x), ((5,),), "complex128"),
    Case("argsort-argmax-argmin", lambda x: (np.argsort(x), x.argsort(axis=0), np.argmax(x), x.argmax(axis=1),
                                             np.argmin(x, axis=0, keepdims=True), x.argmin(), 1.0 * x),
         ((3, 4),)),
]

P = np.array([2, 0, 1])


def _window_set_linear(x):
    """Linear in x: the starts (argmax of |x|) are the same at every multiple of x."""
    s, k = np.argmax(np.abs(x[:4, 0])), np.argmax(np.abs(x[0])) % 3
    y = x * 1.0
    y[s:s + 2] = 3.0 * x[1:3]
    y[:, k:k + 2] = x[0, 0]
    z = np.zeros_like(x)
    z[s:s + 2, k:k + 2] = x[:2, :2]
    w = x * 1.0
    w[s:s + 2] = 0.0
    return y, z, w


def _windows_linear(x):
    s, k = np.argmax(np.abs(x[:4, 0])), np.argmax(np.abs(x[0])) % 3
    return x[s:s + 2], x[:, k:k + 2] * C[:, :2], x[s:s + 2, k:k + 2]


LINEAR_CASES = [
    Case("dynamic_slice", _windows_linear, ((5, 4),)),
    Case("dynamic_slice-complex", _windows_linear, ((5, 4),), "complex128"),
    Case("dynamic_update_slice", _window_set_linear, ((5, 4),)),
    Case("dynamic_update_slice-complex", _window_set_linear, ((5, 4),), "complex128"),
    Case("gather", lambda x: (x[I], x[:, J], x[I, 1:3, None], x[M]), ((3, 4),)),
    Case("gather-complex", lambda x: (x[I, ::-1], x[[1], ..., [2]]), ((3, 4),), "complex128"),
    Case("scatter", _set, ((3, 4),)),
    Case("scatter-complex", lambda x, v: _set_by_index(x, v), ((3, 4), (4,)), "complex128"),
    Case("scatter-unique", lambda x, v: _set_unique(x, v), ((3, 4), (3, 2))),
    Case("scatter-scalar", lambda x, s: _set_scalar(x, s), ((3, 4), ()), "complex128"),
    Case("scatter_add", _add_at, ((3, 4), (4, 2)), "complex128"),
    Case("scatter_add-unique", lambda x, v: _add_unique(x, v), ((3, 4), (3, 2))),
    Case("scatter_add-scalar", lambda x, s: _add_scalar(x, s), ((3, 4), ())),
]


def _set_by_index(x, v):
    y = x.copy()
    y[I] = 0.0
    y[I, 2] = v
    return y


def _set_unique(x, v):
    y = x.copy()
    y[P, 1:3] = v
    return y


def _set_scalar(x, s):
    y = x.copy()
    y[I, 0] = s
    return y


def _add_unique(x, v):
    y = x.copy()
    np.add.at(y, (P, slice(2, None)), v)
    return y


def _add_scalar(x, s):
    y = x.copy()
    np.add.at(y, I, s)
    return y
