"""Threads that make the first call of one signature together: the program is traced and compiled once,
the other threads waiting for it. Before the fix ``differentiate._stage`` checked ``_stages`` and built
without a lock, and ``Staged.runner`` compiled on first use without one, so each thread that found no
program traced, differentiated and compiled its own (the results were right; the work was repeated per
thread, which under ``first_call="auto"`` was every thread crossing the walk's budget together)."""

from __future__ import annotations

import threading
import time

import numpy as np

import pullback as pb


def chain(x):
    for k in range(30):
        x = np.sin(x) * (1.0 + 0.01 * k) + 0.1 * x  # 150 equations: too few to roll into a loop
    return np.sum(x)


def _together(call, want, threads: int = 4) -> None:
    """``call()`` in ``threads`` threads released at once (the first call of a signature for all of them),
    each result ``want``."""
    got, start = [], threading.Barrier(threads)

    def run():
        start.wait()
        got.append(call())

    running = [threading.Thread(target=run) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join(60)
    assert len(got) == threads
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-12)


def test_concurrent_first_calls_trace_and_compile_once(pullback_log):
    f = pb.differentiate(chain, first_call="compiled")
    x = np.linspace(0.1, 0.9, 3)
    want = pb.differentiate(chain, first_call="compiled").grad(x)
    pullback_log.clear()  # (the reference's own trace and compile)
    _together(lambda: f.grad(x), want)
    traced = [line.split(",")[1] for line in pullback_log if line.startswith("traced chain, stage ")]
    compiled = [line for line in pullback_log if line.startswith("compiled chain_grad")]
    assert traced == [" stage primal", " stage grad"], traced
    assert len(compiled) == 1, compiled


def test_concurrent_first_calls_of_a_vmap_trace_once():
    """``vmap`` keeps its own programs: before its lock, each thread that found none traced its own."""
    traces = [0]

    def row_loss(x):
        traces[0] += 1  # (run by each trace, never by the compiled program)
        time.sleep(0.02)  # (the other threads run meanwhile: each finds no program unless the build is locked)
        return chain(x)

    xs = np.linspace(0.1, 0.9, 12).reshape(4, 3)
    want = np.array([chain(x) for x in xs])
    pb.vmap(row_loss)(xs)
    once, traces[0] = traces[0], 0
    mapped = pb.vmap(row_loss)
    _together(lambda: mapped(xs), want)
    assert traces[0] == once, (traces[0], once)
