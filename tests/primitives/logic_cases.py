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
