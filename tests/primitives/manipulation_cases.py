"""NumPy's array-manipulation functions on traced arrays, against NumPy itself (real and
complex, empty and size-1 axes); the same cases get JVP and VJP checks in test_rules."""

from __future__ import annotations

import numpy as np

from tests.primitives.cases import Case

C3 = np.arange(3.0) - 1


def _both(name, fn, shapes, dtypes=("float64", "complex128")):
    return [Case(f"{name}-{dt}", fn, shapes, dt) for dt in dtypes]


CASES: list[Case] = [
    *_both("vstack", lambda x, y: (np.vstack([x, y]), np.vstack((y, y, 2.0 * y)), np.vstack([x[0], C3])),
           ((2, 3), (3,))),
    *_both("hstack", lambda x, y: (np.hstack([x, x[:, :1]]), np.hstack((y, C3, y[:0])), np.hstack([y])),
           ((2, 3), (3,))),
    *_both("column_stack-dstack", lambda x, y: (np.column_stack([y, x.T, C3]), np.dstack([x, x]), np.dstack((y, y))),
           ((2, 3), (3,))),
    *_both("stack-concatenate", lambda x, y: (np.stack([x, x], axis=1), np.concatenate([x, y], axis=None),
                                              np.concatenate([x, [[1.0, 2.0, 3.0]], x[:0]]),
                                              np.stack([y, C3], axis=-1), np.concatenate((x, x), dtype=np.complex128)),
           ((2, 3), (3,))),
    *_both("atleast", lambda s, y, x: (np.atleast_1d(s), np.atleast_2d(y), np.atleast_3d(x),
                                       *np.atleast_3d(s, y), *np.atleast_2d(s, x), np.atleast_1d(y)),
           ((), (3,), (2, 3))),
    *_both("ravel-append", lambda x, y: (np.ravel(x), np.append(x, y), np.append(x, x[:1], axis=0),
                                         np.append(y, [1.0, 2.0])), ((2, 3), (3,))),
    *_both("repeat", lambda x: (np.repeat(x, 2), np.repeat(x, 3, axis=1), np.repeat(x, [1, 0, 2], axis=-1),
                                np.repeat(x, [2, 2], axis=0), x.repeat(0, axis=0), np.repeat(x, [1], axis=0),
                                np.repeat(x, [0, 0, 0], axis=1)), ((2, 3),)),
    *_both("tile-kron", lambda x, y: (np.tile(x, 2), np.tile(x, (2, 1, 3)), np.tile(y, (2, 1)), np.tile(x, (0, 2)),
                                      np.kron(x, y), np.kron(y, x), np.kron(x, x[:, :2])), ((2, 3), (3,))),
    *_both("roll", lambda x: (np.roll(x, 1), np.roll(x, -4, axis=1), np.roll(x, (1, 2), axis=(0, 1)),
                              np.roll(x, (1, 1), axis=(1, 1)), np.roll(x, 3, axis=0), np.roll(x[:, :0], 2, axis=1)),
           ((2, 3),)),
    *_both("flip-rot90", lambda x: (np.flip(x), np.flip(x, 1), np.flip(x, (0, 2)), np.flipud(x), np.fliplr(x),
                                    np.rot90(x), np.rot90(x, 2), np.rot90(x, -1, axes=(2, 0)), np.rot90(x, 4)),
           ((2, 3, 4),)),
    *_both("split", lambda x: (*np.split(x, 2), *np.split(x, [1, 3, 2, -1, 9], axis=1),
                               *np.array_split(x, 3, axis=1), *np.hsplit(x, 4), *np.vsplit(x, [1]),
                               *np.array_split(x, 5, axis=0)), ((4, 4),)),
    *_both("dsplit", lambda x: (*np.dsplit(x, 2), *np.hsplit(x[0, 0], [1])), ((1, 2, 4),)),
    *_both("pad", lambda x: (np.pad(x, 1), np.pad(x, ((1, 0), (2, 3)), constant_values=((1.5, 2.0), (3.0, 4.0))),
                             np.pad(x, (2,), mode="edge"), np.pad(x, ((0, 0), (5, 7)), mode="reflect"),
                             np.pad(x, (1, 4), mode="symmetric"), np.pad(x, ((3, 1), (7, 2)), mode="wrap"),
                             np.pad(x, [[1, 1]], constant_values=2.5), np.pad(x[:1], 2, mode="reflect")),
           ((2, 3),)),
    *_both("select", lambda x, y: (np.select([x.real > 0, y.real > 0], [x, y]),
                                   np.select([x.real > 0.5], [y], default=x), np.select([y.real < 0], [2 * y], -1.0)),
           ((2, 3), (3,))),
    *_both("cross", lambda a, b: (np.cross(a, b), np.cross(a.T, b, axisa=0), np.cross(a, b, axisc=0),
                                  np.cross(a[:, None, :], b[None], axis=-1)), ((4, 3), (3,))),
    *_both("trapezoid-meshgrid", lambda y, x: (np.trapezoid(y), np.trapezoid(y, dx=0.5, axis=0),
                                               np.trapezoid(y, x[:3].real, axis=0), *np.meshgrid(x, y[0]),
                                               *np.meshgrid(x, y[:, 0], x[:2], indexing="ij"),
                                               *np.meshgrid(x, x, sparse=True)), ((3, 4), (5,))),
    *_both("broadcast_arrays-expand", lambda x, y: (*np.broadcast_arrays(x, y, 1.0), np.expand_dims(y, (0, 2)),
                                                    np.squeeze(x[:1]), np.expand_dims(x, -1)), ((2, 3), (3,))),
    Case("manipulation-f32", lambda x: (np.pad(x, 1, mode="reflect"), np.hstack([x, 1.0]), np.repeat(x, [1, 3]),
                                        np.rot90(x[None]), np.roll(x, 1), np.kron(x, x)), ((2,),), "float32"),
    Case("manipulation-empty", lambda x: (np.vstack([x, x]), np.tile(x, 2), np.flip(x), np.roll(x, 1, axis=1),
                                          np.pad(x, ((0, 0), (1, 1)), mode="edge"), *np.array_split(x, 2)),
         ((0, 3),)),
    Case("manipulation-size1", lambda x: (np.pad(x, 3, mode="reflect"), np.pad(x, 2, mode="symmetric"),
                                          np.pad(x, 2, mode="wrap"), np.repeat(x, 3), np.roll(x, 5), np.cross(
                                              np.broadcast_to(x, (3,)), np.broadcast_to(-x, (3,)) + C3)), ((1,),)),
]
