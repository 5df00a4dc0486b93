"""``first_call="auto"`` under threads: several threads call one ``pb.grad(f)`` of a long flat program
at once, while the walk (``api.eager``) gives way to the compiled gradient. Every call's gradient is the
compiled program's and central differences', no call raises, the calls after the switch run compiled, and
the gradient is traced and compiled once, whichever threads cross the walk's budget together."""

from __future__ import annotations

import threading

import numpy as np

import pullback as pb
from pullback.api import eager

# Thue-Morse's sequence has no block three times in a row, so no run of equal steps for the reroller
# to fold into a loop: the program stays flat, as an unrolled loop of varying steps does.
STEPS = [bin(k).count("1") % 2 for k in range(400)]


def varying_chain(x):
    for b in STEPS:
        if b:
            x = x + 0.01 * np.sin(x)
        else:
            x = x - 0.01 * np.cos(x)
    return np.sum(x * x)


def _central(fn, x, eps=1e-6):
    e = np.eye(x.size) * eps
    return np.array([(fn(x + d) - fn(x - d)) / (2 * eps) for d in e])


def test_threads_share_one_walk_then_one_compile(monkeypatch, pullback_log):
    # the walk gives way after a few calls' walks (about 20 ms of them), not after seconds
    monkeypatch.setattr(eager, "COMPILE_SECONDS_PER_EQUATION", 20e-6)
    xs = [np.linspace(0.1, 0.9, 3) + 0.05 * i for i in range(6)]
    compiled = pb.differentiate(varying_chain, first_call="compiled")
    want = [compiled.grad(x) for x in xs]
    pullback_log.clear()  # (the reference's own trace and compile)
    g = pb.grad(varying_chain)
    got: list[list] = [[] for _ in xs]
    errors: list[BaseException] = []
    start = threading.Barrier(len(xs))

    def calls(i):
        try:
            start.wait()
            for _ in range(12):
                got[i].append(g(xs[i]))
        except BaseException as e:  # noqa: BLE001  (reported below, with the thread's argument)
            errors.append(e)

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for i in range(len(xs)):
        assert len(got[i]) == 12
        for grad in got[i]:
            np.testing.assert_allclose(grad, want[i], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(want[0], _central(varying_chain, xs[0]), rtol=1e-6)
    walked = [line for line in pullback_log if line.startswith("served varying_chain's gradient eagerly")]
    traced = [line.split(",")[1] for line in pullback_log if line.startswith("traced varying_chain, stage ")]
    compiled = [line for line in pullback_log if line.startswith("compiled varying_chain_grad")]
    assert traced == [" stage primal", " stage grad"], traced
    assert len(compiled) == 1, compiled
    assert walked and len(walked) < 12 * len(xs)  # some calls walked, the later ones ran compiled
    assert "1202 equations walked" in walked[0]  # 400 steps of 3 equations, and the loss
    assert all(key[0] != "grad" or key in g.__self__._stages for key in g.__self__._walked)
