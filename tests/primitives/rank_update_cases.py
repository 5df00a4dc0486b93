"""ger: A + x y^T, real and complex (no conjugate), float32, a tall and a wide A, a size-1 axis."""

from __future__ import annotations

import numpy as np

from pullback import linalg as pla
from tests.primitives.cases import Case

_X = np.array([0.3, -1.2, 0.7])
_Y = np.array([1.1, -0.4])


def _ger(a, x, y):
    return a + np.outer(x, y)


CASES = [
    Case("ger", pla.ger, ((3, 2), (3,), (2,)), reference=_ger),
    Case("ger-wide", pla.ger, ((2, 4), (2,), (4,)), reference=_ger),
    Case("ger-row", pla.ger, ((1, 3), (1,), (3,)), reference=_ger),
    Case("ger-complex", pla.ger, ((3, 3), (3,), (3,)), "complex128", reference=_ger),
    Case("ger-float32", pla.ger, ((3, 2), (3,), (2,)), "float32", reference=_ger),
    Case("ger-alpha", lambda a, x, y: pla.ger(a, x, y, alpha=-0.5), ((3, 2), (3,), (2,)),
         reference=lambda a, x, y: a - 0.5 * np.outer(x, y)),
]

# linear in A together with one of the vectors
LINEAR_CASES = [
    Case("ger-a-x", lambda a, x: pla.ger(a, x, _Y), ((3, 2), (3,))),
    Case("ger-a-y", lambda a, y: pla.ger(a, _X, y), ((3, 2), (2,))),
    Case("ger-a-x-complex", lambda a, x: pla.ger(a, x, _Y * (1 - 2j)), ((3, 2), (3,)), "complex128"),
    Case("ger-a-y-complex", lambda a, y: pla.ger(a, _X * (0.5 + 1j), y), ((3, 2), (2,)), "complex128"),
]
