"""Cases for the linear algebra of ``pullback.primitives.linalg_extra`` (det, the general
eigenproblem, ...), collected by the forward, JVP and transpose suites."""

from __future__ import annotations

import numpy as np

from pullback import linalg as pla
from tests.primitives.cases import Case

C = "complex128"

CASES: list[Case] = [
    Case("det", lambda x: pla.det(x), ((4, 4),), reference=np.linalg.det),
    Case("det-batched-f32", lambda x: np.linalg.det(x), ((2, 3, 3),), "float32", reference=np.linalg.det),
    Case("det-complex", lambda x: pla.det(x), ((3, 3),), C, reference=np.linalg.det),
]
