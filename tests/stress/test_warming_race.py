"""``compile="auto"`` with a cold Numba cache while threads keep calling: the calls race the warming
subprocess (``backends/numba_warming``) to its end and the switch to the compiled loops that follows.
Every call, before the switch, across it and after it, gives the NumPy program's value and gradient;
none raises; one subprocess is started and the program ends compiled."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pullback as pb
from pullback.backends import numba_loops
from tests.backends.test_numba_loops import _compiled
from tests.backends.test_numba_warming import X, sines

pytest.importorskip("numba")


@pytest.mark.slow  # a Numba compile in a subprocess: 5 to 15 s on the shared machine
def test_calls_from_threads_race_the_warming_subprocess_and_the_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("PULLBACK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(numba_loops, "AUTO_WARM_SECONDS", 0.0)
    xs = [X + 0.1 * i for i in range(4)]
    want = [pb.differentiate(sines, compile="numpy").value_and_grad(x) for x in xs]
    f = pb.differentiate(sines, compile="auto")
    f.value_and_grad(xs[0])  # starts the subprocess
    staged = f._stage("grad", (X,))
    job = staged.warming
    assert job is not None and _compiled(staged.source) and not staged.warm
    got: list[list] = [[] for _ in xs]  # per thread: (whether the program was compiled before the call, result)
    errors: list[BaseException] = []
    start = threading.Barrier(len(xs))

    def calls(i):
        try:
            start.wait()
            deadline, after = time.monotonic() + 300, 0
            while after < 5 and time.monotonic() < deadline:
                warm = staged.warm
                got[i].append((warm, f.value_and_grad(xs[i])))
                after += warm
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(330)
    assert not errors, errors
    assert staged.warm and not staged._deferred and staged.warming is job and job.result is True
    for i, results in enumerate(got):
        assert [warm for warm, _ in results].count(True) >= 5  # each thread ran the compiled loops
        assert not results[0][0]  # and the NumPy program first, while the subprocess ran
        for _, (value, grad) in results:
            np.testing.assert_allclose(value, want[i][0], rtol=1e-12)
            np.testing.assert_allclose(grad, want[i][1], rtol=1e-10)
