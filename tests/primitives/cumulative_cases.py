"""Cases for cumulative sums and products and the product reduction, shared by the
forward, JVP and transpose suites."""

from __future__ import annotations

import numpy as np

from pullback.primitives import lax
from tests.primitives.cases import Case

CASES = [
    Case("cumsum", lambda x: (np.cumsum(x), np.cumsum(x, axis=0), x.cumsum(-1)), ((3, 4),)),
    Case("cumsum-f32", lambda x: np.cumsum(x, axis=1), ((2, 3),), "float32"),
    Case("cumsum-complex", lambda x: np.cumsum(x, axis=0), ((3, 2),), "complex128"),
    Case("cumsum-reverse", lambda x: lax.cumsum(x, 1, reverse=True), ((3, 4),),
         reference=lambda x: np.cumsum(x[:, ::-1], axis=1)[:, ::-1]),
    Case("cumprod", lambda x: (np.cumprod(x), np.cumprod(x, axis=0), x.cumprod(1)), ((3, 4),)),
    Case("cumprod-zeros", lambda x: np.cumprod(x * (np.arange(4.0) != 1), axis=-1), ((2, 4),),
         reference=lambda x: np.cumprod(x * (np.arange(4.0) != 1), axis=-1)),
    Case("cumprod-complex", lambda x: np.cumprod(x, axis=1), ((2, 3),), "complex128"),
    Case("cumprod-reverse", lambda x: lax.cumprod(x, 0, reverse=True), ((4, 2),),
         reference=lambda x: np.cumprod(x[::-1], axis=0)[::-1]),
    Case("prod", lambda x: (np.prod(x), np.prod(x, axis=1), x.prod(axis=(0, 2), keepdims=True)), ((2, 3, 2),)),
    Case("prod-f32", lambda x: np.prod(x, axis=0), ((3, 2),), "float32"),
    Case("prod-complex", lambda x: np.prod(x, axis=-1), ((2, 3),), "complex128"),
]

LINEAR_CASES = [
    Case("cumsum", lambda x: (np.cumsum(x), np.cumsum(x, axis=1)), ((3, 4),)),
    Case("cumsum-complex", lambda x: np.cumsum(x, axis=0), ((3, 4),), "complex128"),
    Case("cumsum-reverse", lambda x: lax.cumsum(x, 0, reverse=True), ((3, 2),)),
]
