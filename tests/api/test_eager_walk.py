"""The eager walk's bookkeeping (``api.eager``): signatures keyed by type codes with each input's activity,
values without a tangent (integers, booleans) inactive downstream, kernels of several outputs whose
cotangents arrive for some of them, and outputs and residuals taken from a kernel's pool as slices or
one by one. Values and gradients against the compiled program and central differences."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from pullback.api import eager
from tests.api.test_eager import _assert_same, _both, _central

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import kalman_filter as kf  # noqa: E402


def _mul(a, b):
    return a * b  # one line, so the three calls below differ only in which operands are active


def test_activity_is_part_of_the_signature():
    def f(x, y):
        total = 0.0
        for _ in range(6):
            x = np.sin(_mul(x, y)) + _mul(y, y) + _mul(x, x) * 0.1
            total = total + np.sum(x)
        return total

    x, y = np.linspace(0.1, 0.5, 3), np.linspace(0.3, 0.7, 3)
    before = eager.built[0]
    (value, grad), want = _both(f, x, y, argnums=0, reroll=False)
    # mul(x, y), mul(y, y) (forward only) and mul(x, x) at one line: three kernels, not one
    muls = [key for key in eager.KERNELS if key[0].name == "mul" and key[2] is not None
            and key[2].lineno == _mul.__code__.co_firstlineno + 1 and key[2].filename == __file__]
    assert len(muls) == 3
    assert eager.built[0] - before <= 12  # a few per distinct signature, not per step
    _assert_same((value, grad), want)
    np.testing.assert_allclose(grad, _central(f, (x, y), 0), rtol=1e-6, atol=1e-8)
    (value, grads), want = _both(f, x, y, argnums=(0, 1), reroll=False)
    _assert_same((value, grads), want)
    np.testing.assert_allclose(grads[1], _central(f, (x, y), 1), rtol=1e-6, atol=1e-8)


def test_values_without_a_tangent_stay_inactive():
    def f(x):
        for _ in range(5):
            big = x > 0.4  # a boolean: computed from x, but it has no tangent
            n = np.sum(big)  # an integer from it
            x = np.where(big, x * 1.5, np.cos(x)) + n * 0.01
        return np.sum(x * x)

    x = np.linspace(0.1, 0.9, 5)
    (value, grad), want = _both(f, x, reroll=False)
    _assert_same((value, grad), want)
    np.testing.assert_allclose(grad, _central(f, (x,), 0), rtol=1e-6, atol=1e-8)
    mine = [key for key in eager.KERNELS if key[2] is not None and key[2].filename == __file__]
    gt = [key for key in mine if key[0].name == "gt"]
    where = [key for key in mine if key[0].name == "select"]
    # the comparison's input is active, its output is not: where's condition is inactive (the code's low
    # bit), its branches active
    assert gt and all(key[3] & 1 for key in gt)
    assert where and all(key[3] & 1 == 0 and key[4] & 1 and key[5] & 1 for key in where)


def test_several_outputs_some_without_a_cotangent():
    def f(x, which):
        total = 0.0
        for k in range(4):
            S = np.outer(x, x) + np.diag(x + k + 1.0)
            w, v = np.linalg.eigh(S)
            total = total + (np.sum(w * w) if which == "w" else np.sum(v ** 2 @ x) if which == "v"
                             else np.sum(w) + np.sum(v ** 2 @ x))
        return total

    x = np.array([0.3, 0.5, 0.9])
    for which in ("w", "v", "both"):
        g = lambda x, which=which: f(x, which)  # noqa: E731
        (value, grad), want = _both(g, x, reroll=False)
        _assert_same((value, grad), want, rtol=1e-10)
        np.testing.assert_allclose(grad, _central(g, (x,), 0), rtol=1e-6, atol=1e-7)


def test_outputs_and_residuals_by_slice_or_one_by_one():
    assert eager._run(()) == slice(0, 0)
    assert eager._run((3,)) == slice(3, 4)
    assert eager._run((2, 3, 4)) == slice(2, 5)
    assert eager._run((2, 4)) is None
    assert eager._run((1, 0)) is None
    A, B, v = kf.simulate(4)
    args = (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))
    (value, grads), want = _both(kf.kalman_nll_unrolled, *args, argnums=(0, 1, 2, 3), reroll=False)
    _assert_same((value, grads), want, rtol=1e-10)
    mine = [k for key, k in eager.KERNELS.items() if key[2] is not None and key[2].filename == kf.__file__]
    # the filter's kernels take both ways: a dot's residuals are its inputs swapped (one by one), a
    # Cholesky factorisation returns two outputs (a slice)
    assert any(k.res_at is None for k in mine) and any(k.res_at is not None and k.wrt for k in mine)
    assert any(k.out_at is not None and len(k.outs) > 1 for k in mine)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, _central(kf.kalman_nll_unrolled, args, i), rtol=1e-6, atol=1e-7)
