"""No one outside a trace sees pullback: other threads, an interrupted trace, a forked child, and
anyone inspecting or pickling NumPy's and SciPy's functions while traces run."""

import inspect
import multiprocessing
import os
import pickle
import random
import signal
import sys
import threading
import time

import numpy as np
import pytest
import scipy.linalg
import scipy.special
import scipy.stats
from scipy.special import logsumexp

import pullback as pb
from pullback.ir import tracer
from tests.frontend.test_construct import _namespace, _same_objects

SIGNATURE = inspect.signature(logsumexp)


def _traces_for(seconds: float, stop: threading.Event, errors: list) -> None:
    """Trace fresh functions (a new closure each time, so every call traces) until told to stop."""
    k = 0
    deadline = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < deadline:
        k += 1
        scale = float(k)
        try:
            g = pb.grad(lambda x, scale=scale: np.sum(x * scale) + logsumexp(np.array([x[0], 1.0])))(np.ones(2))
            want = scale + np.exp(1.0) / (np.exp(1.0) + np.e)
            assert abs(g[0] - want) < 1e-12 and g[1] == scale
        except Exception as e:  # noqa: BLE001  (reported by the test)
            errors.append(e)
            return


def _plain_numpy_and_scipy(errors: list) -> None:
    """What a thread that never traces does: each result and object must be NumPy's and SciPy's own."""
    try:
        assert np.mean(np.arange(5.0)) == 2.0
        assert np.sum([1.0, 2.0]) == 3.0
        assert np.array([1, 2.5]).dtype == np.float64
        assert logsumexp(np.zeros(2)) == np.log(2.0)
        assert scipy.special.logsumexp(np.zeros(2)) == np.log(2.0)
        c = scipy.linalg.cho_factor(np.eye(2) * 4.0)
        np.testing.assert_allclose(scipy.linalg.cho_solve(c, np.ones(2)), [0.25, 0.25])
        assert pickle.loads(pickle.dumps(scipy.linalg.cho_solve)) is scipy.linalg.cho_solve
        assert inspect.signature(logsumexp) == SIGNATURE
        assert scipy.stats.norm.logpdf(0.0) == -0.5 * np.log(2 * np.pi)
        np.testing.assert_array_equal(np.r_[1.0, [2.0]], [1.0, 2.0])
    except Exception as e:  # noqa: BLE001
        errors.append(e)


def _stress(seconds: float) -> list:
    errors: list = []
    stop = threading.Event()
    tracers = [threading.Thread(target=_traces_for, args=(seconds, stop, errors)) for _ in range(2)]
    for t in tracers:
        t.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not errors:
        _plain_numpy_and_scipy(errors)
    stop.set()
    for t in tracers:
        t.join()
    return errors


def test_threads_that_do_not_trace_see_numpy_and_scipy_unchanged():
    """The issue's repro: one thread traces fresh functions, another calls NumPy and SciPy."""
    errors = _stress(1.5)
    assert not errors, errors[0]


@pytest.mark.slow
def test_threads_soak():
    errors = _stress(30.0)
    assert not errors, errors[0]


def test_signature_and_pickling_inside_the_trace_itself():
    seen = {}

    def f(x):
        seen["signature"] = inspect.signature(logsumexp)
        seen["pickled"] = pickle.loads(pickle.dumps(scipy.linalg.cho_solve))
        return logsumexp(x)

    pb.grad(f)(np.zeros(3))
    assert seen["signature"] == SIGNATURE and seen["pickled"] is scipy.linalg.cho_solve


def _interrupt_after(n_events: int):
    """A tracing hook raising KeyboardInterrupt at the ``n_events``-th line or call event, anywhere
    (pullback's code, NumPy's, the user's)."""
    count = [0]

    def hook(frame, event, arg):
        count[0] += 1
        if count[0] == n_events:
            raise KeyboardInterrupt
        return hook

    return hook


def _first_call(k: float):
    def f(x):
        a = np.array([x[0] * k, x[1]])
        return logsumexp(a) + np.sum(np.r_[x, x] ** 2) + scipy.stats.norm.logpdf(x).sum()

    return f


@pytest.mark.parametrize("seed", range(3))
def test_an_interrupt_anywhere_in_a_trace_leaves_nothing_behind(seed):
    """KeyboardInterrupt at random points of first calls (tracing, transforming, compiling): the next
    trace works, nothing is left tracing on this thread, and NumPy and SciPy are as they were."""
    before = _namespace()
    rng = random.Random(seed)
    x = np.array([0.5, -1.0])
    want = pb.grad(_first_call(2.0))(x)
    interrupted = 0
    for _ in range(6):
        sys.settrace(_interrupt_after(rng.randrange(1, 4000)))
        try:
            pb.grad(_first_call(2.0))(x)
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            sys.settrace(None)
        assert not tracer.tracing()
        np.testing.assert_allclose(pb.grad(_first_call(2.0))(x), want, rtol=1e-12)
    assert interrupted > 0
    assert _same_objects(before, _namespace())


def test_a_signal_during_first_calls_leaves_nothing_behind():
    """A real SIGALRM raising KeyboardInterrupt at an arbitrary moment of a run of first calls."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    x = np.array([0.5, -1.0])
    try:
        for delay in (0.003, 0.011, 0.029):
            signal.setitimer(signal.ITIMER_REAL, delay)
            try:
                for k in range(200):
                    pb.grad(_first_call(float(k)))(x)
            except KeyboardInterrupt:
                pass
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert not tracer.tracing()
            np.testing.assert_allclose(pb.grad(_first_call(3.0))(x), pb.grad(_first_call(3.0))(x))
    finally:
        signal.signal(signal.SIGALRM, old)
    errors: list = []
    _plain_numpy_and_scipy(errors)
    assert not errors, errors[0]


def _child_traces(queue) -> None:
    x = np.array([0.5, -1.0])
    g = pb.grad(_first_call(2.0))(x)
    errors: list = []
    _plain_numpy_and_scipy(errors)
    queue.put((g.tolist(), [repr(e) for e in errors]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_child_forked_while_another_thread_traces_traces_normally():
    stop, errors = threading.Event(), []
    busy = threading.Thread(target=_traces_for, args=(30.0, stop, errors))
    busy.start()
    try:
        time.sleep(0.05)
        ctx = multiprocessing.get_context("fork")
        for _ in range(3):
            queue = ctx.Queue()
            child = ctx.Process(target=_child_traces, args=(queue,))
            child.start()
            g, child_errors = queue.get(timeout=60)
            child.join(60)
            assert child.exitcode == 0 and not child_errors, child_errors
            np.testing.assert_allclose(g, pb.grad(_first_call(2.0))(np.array([0.5, -1.0])))
    finally:
        stop.set()
        busy.join()
    assert not errors, errors[0]
