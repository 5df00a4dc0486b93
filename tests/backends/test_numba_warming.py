"""``compile="auto"`` with a cold Numba cache (``backends/numba_warming``): the calls run the NumPy program
while a subprocess compiles the loops into the on-disk cache, then load them; a failed subprocess leaves
the program NumPy for good, said in the log; an interpreter that exits first does not wait for it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import pullback as pb
from pullback.backends import numba_loops
from tests.backends.test_numba_loops import _compiled

pytest.importorskip("numba")

ROOT = Path(__file__).parents[2]
X = np.array([0.3, 1.0, 2.0])


def sines(x):
    """A loop of 600 small steps (``compile="auto"`` compiles it), quick to compile."""
    return np.sum(pb.scan(lambda c, _: (np.sin(c) * 0.9 + 0.1, c), x, None, length=600)[1] ** 2)


def _index_files(directory: Path) -> list[Path]:
    return list(directory.glob("__pycache__/*.nbi"))


def test_auto_compiles_in_a_subprocess_while_the_calls_run_numpy(monkeypatch, tmp_path):
    """The first call runs NumPy and, its time past ``AUTO_WARM_SECONDS``, starts a subprocess that fills
    Numba's cache; the calls meanwhile run NumPy; the first call after it has ended loads the loops, and
    a new function (a new process alike) loads them at once."""
    monkeypatch.setenv("PULLBACK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(numba_loops, "AUTO_WARM_SECONDS", 0.0)
    expected = pb.differentiate(sines, compile="numpy").value_and_grad(X)
    f = pb.differentiate(sines, compile="auto")
    results = [f.value_and_grad(X)]
    staged = f._stage("grad", (X,))
    job = staged.warming
    assert job is not None and job.process.pid != os.getpid()
    assert _compiled(staged.source) and staged._deferred and not staged.warm
    results.append(f.value_and_grad(X))  # NumPy still (or the loops, if they compiled already)
    assert job.wait(timeout=300) is True and job.process.returncode == 0
    assert _index_files(tmp_path) and numba_loops.cached(job.deferred.path, staged.source)  # compiled there ...
    results.append(f.value_and_grad(X))  # ... and this call loads them
    assert staged.warm and not staged._deferred and staged.warming is job  # one subprocess, no other
    results.append(f.value_and_grad(X))
    for got in results:
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-10)
    again = pb.differentiate(sines, compile="auto")
    np.testing.assert_allclose(again.value_and_grad(X)[1], expected[1], rtol=1e-10)
    staged = again._stage("grad", (X,))
    assert _compiled(staged.source) and not staged._deferred and staged.warming is None  # loaded at once


def test_a_failed_subprocess_leaves_the_program_numpy_for_good_and_says_so(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("PULLBACK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(numba_loops, "AUTO_WARM_SECONDS", 0.0)
    expected = pb.differentiate(sines, compile="numpy").value_and_grad(X)
    f = pb.differentiate(sines, compile="auto")
    f.value_and_grad(X)
    staged = f._stage("grad", (X,))
    job = staged.warming
    job.process.kill()  # as the OOM killer would
    with caplog.at_level(logging.WARNING, logger="pullback"):
        assert job.wait(timeout=60) is False
        for _ in range(3):
            got = f.value_and_grad(X)
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-10)
    assert [r for r in caplog.records if "subprocess failed" in r.getMessage()]
    assert job.process.returncode < 0 and not _index_files(tmp_path)
    assert staged.warming is job and staged._deferred and not staged.warm  # no second try, no compile here


def test_an_interpreter_that_exits_first_does_not_wait_and_the_subprocess_fills_the_cache(monkeypatch, tmp_path):
    """A process that ends right after starting the compile exits at once; the subprocess finishes on its
    own, and the next process finds the loops in the cache (here Numba's ``$NUMBA_CACHE_DIR``, which
    ``numba_loops.cached`` reads as Numba does)."""
    script = textwrap.dedent("""
        import sys
        from pullback.backends import numba_loops
        from tests.backends.test_numba_warming import X, pb, sines
        numba_loops.AUTO_WARM_SECONDS = 0.0

        d = pb.differentiate(sines, compile="auto")
        d.value_and_grad(X)
        staged = d._stage("grad", (X,))
        if sys.argv[1] == "first":
            assert staged.warming is not None and staged.warming.poll() is None, "it compiled already?"
            print(staged._deferred.path)
        else:
            assert staged.warming is None and not staged._deferred, "the cache lacks the loops"
    """)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))  # here too: ``cached`` reads it
    env = dict(os.environ, PULLBACK_CACHE_DIR=str(tmp_path), PULLBACK_COMPILE="auto", PYTHONPATH=str(ROOT))
    first = subprocess.run([sys.executable, "-c", script, "first"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert first.returncode == 0, first.stderr
    path = first.stdout.strip()
    source = Path(path).read_text()
    assert not list(tmp_path.glob("__pycache__/*.nbi"))
    deadline = time.monotonic() + 300
    while not numba_loops.cached(path, source) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert numba_loops.cached(path, source)
    time.sleep(0.5)  # (Numba writes the index after the code it indexes)
    again = subprocess.run([sys.executable, "-c", script, "again"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert again.returncode == 0, again.stderr


def test_where_no_subprocess_can_start_the_loops_compile_here_once_the_calls_took_the_estimate(monkeypatch, tmp_path):
    """No Python executable to start (an embedded interpreter): the calls run NumPy until they have taken
    ``numba_loops.compile_estimate`` of the module, then compile in this process."""
    monkeypatch.setenv("PULLBACK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "executable", "")
    monkeypatch.setattr(numba_loops, "AUTO_WARM_SECONDS", 0.0)
    monkeypatch.setattr(numba_loops, "AUTO_COMPILE_SECONDS_PER_FUNCTION", 1e9)
    expected = pb.differentiate(sines, compile="numpy").value_and_grad(X)
    f = pb.differentiate(sines, compile="auto")
    results = [f.value_and_grad(X) for _ in range(3)]
    staged = f._stage("grad", (X,))
    assert staged.warming is None and staged._deferred and numba_loops.compile_estimate(staged.source) >= 1e9
    monkeypatch.setattr(numba_loops, "AUTO_COMPILE_SECONDS_PER_FUNCTION", 0.0)
    results += [f.value_and_grad(X) for _ in range(2)]  # the first compiles them (the second loads them)
    assert staged.warm and not staged._deferred and staged.warming is None and _index_files(tmp_path)
    for got in results:
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-10)
