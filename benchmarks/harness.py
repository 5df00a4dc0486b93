"""Timing, memory and reporting shared by the benchmark cases.

Times are medians and minima over repeats after a warm-up call, all implementations of a
case measured in the same run. Peak memory is the high-water mark of a fresh process
running one implementation twice, minus that of a process that only builds the inputs.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Case:
    """One benchmark: inputs per size, implementations, and the reference to compare with."""

    name: str
    sizes: list
    quick_sizes: list
    setup: Callable  # size -> args
    implementations: dict[str, Callable]  # name -> fn(*args); the first is the reference
    unit: str = "ms"
    repeats: int = 5
    memory: bool = True
    notes: list[str] = field(default_factory=list)
    skip: Callable = lambda impl, size: False  # noqa: E731  (too slow to be worth measuring)


def available(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except Exception:
        return False


def timeit(fn: Callable, args, repeats: int, number: int = 1) -> tuple[float, float]:
    fn(*args)  # warm-up: tracing and compiling for the staged implementations
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(number):
            fn(*args)
        times.append((time.perf_counter() - t) / number)
    return float(np.median(times)), float(np.min(times))


def max_rss_mb() -> float:
    """Peak resident memory of this address space (Linux keeps ru_maxrss across exec, so a
    child would report its parent's; /proc's VmHWM is the address space's own)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_memory_mb(case: str, impl: str, size) -> float:
    def run(which: str) -> float:
        out = subprocess.run([sys.executable, "-m", "benchmarks", "--child", case, which, json.dumps(size)],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])["maxrss_mb"]

    return run(impl) - run("")


def child(case: Case, impl: str, size) -> None:
    args = case.setup(size)
    if impl:
        case.implementations[impl](*args)
        case.implementations[impl](*args)
    print(json.dumps({"maxrss_mb": max_rss_mb()}))


def close(a, b, rtol: float) -> bool:
    a_leaves = a if isinstance(a, tuple | list) else [a]
    b_leaves = b if isinstance(b, tuple | list) else [b]
    return all(np.allclose(np.asarray(x, dtype=complex), np.asarray(y, dtype=complex), rtol=rtol, atol=rtol)
               for x, y in zip(a_leaves, b_leaves))


def traced_peak_mb(fn, args) -> float:
    """The high-water mark of NumPy's allocations (tracemalloc) during one call, in MB."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2 ** 20


def append_results(heading: str, description: str, table: str) -> None:
    """Append a section to benchmarks/RESULTS.md: its heading, what was run (the load average at the
    end of the run added), and the table."""
    load = os.getloadavg()[0]
    with open(os.path.join(os.path.dirname(__file__), "RESULTS.md"), "a") as f:
        f.write(f"\n## {heading}\n\n{description}; load average {load:.1f} at the end of the run.\n\n{table}\n")


def replace_section(results, heading: str, section: list[str]) -> None:
    """Replace (or add) one benchmark's section of a results file (``results``, a Path), keeping the rest:
    the section runs from ``heading`` to the next ``## `` heading."""
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    block = "\n".join(section) + "\n"
    pattern = re.compile(re.escape(heading) + r".*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: block + "\n", text, count=1)
    else:
        marker = "## Discussion"
        text = text.replace(marker, block + "\n" + marker, 1) if marker in text else text.rstrip("\n") + "\n\n" + block
    results.write_text(text)


def median_ms(fn, args, repeats: int = 21) -> float:
    """The median time of ``fn(*args)`` in ms, after one warm-up call (JAX's results waited for)."""
    out = fn(*args)
    if hasattr(out, "block_until_ready"):
        out.block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn(*args)
        if hasattr(out, "block_until_ready"):
            out.block_until_ready()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3
