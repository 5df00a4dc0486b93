"""A held object's steady-state calls do once what can be done once: after the first call of a
signature, ``jvp`` checks what the function reads once and runs the program, without restaging."""

import numpy as np

import pullback as pb
from pullback.api import cache
from pullback.api import transforms as api

SCALE = 2.0


def loss(w):
    return SCALE * np.sum(np.tanh(w) ** 2) + w[0] * w[1] ** 3


def fd_hvp(w, v, eps=1e-6):
    g = pb.grad(loss)
    return (g(w + eps * v) - g(w - eps * v)) / (2 * eps)


def test_held_hvp_steady_call_checks_once_and_skips_staging(monkeypatch):
    held = pb.differentiate(pb.grad(loss))
    w, v = np.array([0.3, -0.7, 1.1]), np.array([1.0, 0.5, -2.0])
    out, hvp = held.jvp((w,), (v,))  # the first call stages, compiles and keeps a runner
    np.testing.assert_allclose(out, pb.grad(loss)(w), rtol=1e-14)
    np.testing.assert_allclose(hvp, fd_hvp(w, v), rtol=1e-6)
    checks, stages = [0], [0]
    check, stage = cache.Programs.check, api.differentiate._stage
    monkeypatch.setattr(cache.Programs, "check", lambda self, fn: (checks.__setitem__(0, checks[0] + 1),
                                                                   check(self, fn))[1])
    monkeypatch.setattr(api.differentiate, "_stage", lambda self, *a: (stages.__setitem__(0, stages[0] + 1),
                                                                       stage(self, *a))[1])
    got = [held.jvp((w,), (v * (k + 1),))[1] for k in range(3)]
    assert checks[0] == 3 and stages[0] == 0
    for k in range(3):
        np.testing.assert_allclose(got[k], fd_hvp(w, v * (k + 1)), rtol=1e-6)


def test_held_jvp_fast_path_is_not_stale_and_keeps_structure():
    global SCALE
    held = pb.differentiate(pb.grad(loss))
    w, v = np.array([0.3, -0.7, 1.1]), np.array([1.0, 0.5, -2.0])
    held.jvp((w,), (v,))
    saved = SCALE
    try:
        SCALE = 5.0  # a rebound global: the runner goes with the programs
        _, hvp = held.jvp((w,), (v,))
        np.testing.assert_allclose(hvp, fd_hvp(w, v), rtol=1e-6)
    finally:
        SCALE = saved

    def two(x, n):  # two outputs, an integer argument without a tangent
        return np.sin(x) * n, np.sum(x ** 2)

    d = pb.differentiate(two)
    x, t = np.array([0.2, 0.4]), np.array([1.0, -1.0])
    for _ in range(2):  # the first call and the runner's agree
        (a, b), (da, db) = d.jvp((x, 3), (t, 0))
        np.testing.assert_allclose(a, np.sin(x) * 3)
        np.testing.assert_allclose(da, np.cos(x) * 3 * t)
        np.testing.assert_allclose(db, np.sum(2 * x * t))
    (a, b), (da, db) = d.jvp((x, 3), (t.astype(np.float32), 0))  # another tangent type: the checked path
    np.testing.assert_allclose(da, np.cos(x) * 3 * t, rtol=1e-6)
