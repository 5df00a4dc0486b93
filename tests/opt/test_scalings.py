"""collect_scalings: arithmetic moved onto the small operands of broadcasts, same values."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb
from pullback.backends.compiler import compile_program
from pullback.backends.numpy import backend as numpy_backend
from pullback.opt.scalings import collect_scalings
from pullback.primitives import elementwise as ew

FUNCTIONS = [
    (lambda x, u, v: (x - x * u[:, None]) * u[:, None], 1),
    (lambda x, u, v: (x + u[:, None] * x) * v[:, None] / 2.0, 2),  # the division by 2.0 is not a broadcast
    (lambda x, u, v: x * u[:, None] * v[:, None] * u[:, None], 1),
    (lambda x, u, v: x * (2.0 - u[:, None]) + v[:, None] * u[:, None], 2),
    (lambda x, u, v: (x * u[None, :3]) * v[:, None], 2),  # different broadcasts: kept apart
    (lambda x, u, v: (u[:, None] * x - x * v[:, None]) * u[:, None], 1),  # x factored out of the difference
    (lambda x, u, v: x * u[:, None] + x * v[None, :], 3),  # different broadcasts: kept apart
]


@pytest.mark.parametrize("k", range(len(FUNCTIONS)))
def test_same_values_fewer_full_size_operations(k, rng):
    fn, full_size = FUNCTIONS[k]
    x, u, v = rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal(3)
    program = pb.make_ir(fn)(x, u, v)
    collected = pb.verify(collect_scalings(program))
    ops = [e for e in collected.eqns if e.prim in (ew.add_p, ew.sub_p, ew.mul_p, ew.div_p) and e.outputs[0].shape]
    assert sum(e.outputs[0].shape == (3, 3) for e in ops) == full_size
    got, _ = compile_program(collected, numpy_backend)
    np.testing.assert_allclose(got(x, u, v), fn(x, u, v), rtol=1e-13)


def test_the_logistic_hessian_with_labels_scales_X_once(rng):
    """Laue's form sum log(1 + exp(-y X w)): the batched JVP subtracts two scalings of X, which
    become one, as in the hand-written X^T diag(s (1 - s)) X."""
    X, y, w = rng.standard_normal((6, 4)), np.sign(rng.standard_normal(6)), rng.standard_normal(4)
    f = pb.differentiate(lambda w, X, y: np.sum(np.logaddexp(0.0, -y * (X @ w))))
    program = f.ir(w, X, y, stage="hessian")
    arithmetic = (ew.add_p, ew.sub_p, ew.mul_p, ew.div_p)
    full = [e for e in program.eqns if e.prim in arithmetic and e.outputs[0].type.ndim == 2]
    assert len(full) == 1
    s = 1 / (1 + np.exp(-y * (X @ w)))
    np.testing.assert_allclose(f.hessian(w, X, y), X.T @ ((s * (1 - s))[:, None] * X), rtol=1e-12)
