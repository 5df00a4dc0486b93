"""np.all / np.any (reduce_and, reduce_or): boolean reductions with no tangent."""

from __future__ import annotations

import numpy as np

from tests.primitives.cases import Case

CASES = [
    Case("all-any", lambda x: (np.all(x > 0), x.any(), np.any(x > 0.5, axis=0), x.all(axis=1, keepdims=True),
                               np.all(x[:0] > 0, axis=0), np.any(x[:, :0], axis=1)), ((3, 4),)),
    # with a differentiable output beside them, so the JVP/VJP checks see the rules
    Case("all-any-gate", lambda x: np.where(np.all(x > -10, axis=0), x, 0.0) + np.any(x > 0), ((3, 4),)),
]

_M = np.random.default_rng(5).standard_normal((3, 4)) > 0


def _logic(x, y):
    a, b = x > 0, y > 0
    return (a & b, a | b, a ^ b, ~a, a & _M, _M | b, np.logical_and(x, y), np.logical_or(a, 0.0),
            np.logical_xor(a, b), np.logical_not(x), np.iscomplex(x), np.isreal(x))


def _bits(x):
    k = (x * 10).astype(np.int64)
    return (k & 6, 3 | k, k ^ k[::-1], ~k, np.bitwise_and(k, 5), np.invert(k))


CASES += [
    Case("logic", _logic, ((3, 4), (4,))),
    Case("logic-complex", lambda z: (np.iscomplex(z), np.isreal(z.real), np.logical_not(z)), ((3,),), "complex128"),
    Case("bitwise", _bits, ((3, 4),)),
    # logic gating a differentiable value, so the JVP/VJP checks see the rules
    Case("logic-gate", lambda x, y: np.where(((x > 0) & (y < 1)) | ~(x > 2) ^ (y > 0), x * y, 0.0),
         ((3, 4), (4,))),
]
