"""``python -m benchmarks [--quick]``: run every case and write benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.cases import all_cases

RESULTS = Path(__file__).parent / "RESULTS.md"


def first_call_child(impl: str) -> None:
    """Time the first call (trace, transform, print, compile, run) in a fresh process."""
    from benchmarks import cases

    args = cases.gp_data(256)
    if impl == "pullback":
        fn = cases.gp_regression.neg_log_marginal_likelihood.value_and_grad
    else:
        fn = cases.gp_case().implementations[impl]
    t = time.perf_counter()
    fn(*args)
    first = time.perf_counter() - t
    t = time.perf_counter()
    fn(*args)
    print(json.dumps({"first_ms": first * 1e3, "second_ms": (time.perf_counter() - t) * 1e3}))


def first_call_rows(impls: list[str]) -> list[str]:
    rows = ["| implementation | first call, ms | second call, ms |", "|---|---|---|"]
    for impl in impls:
        out = subprocess.run([sys.executable, "-m", "benchmarks", "--first-call", impl], capture_output=True,
                             text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(f"| {impl} | {r['first_ms']:.0f} | {r['second_ms']:.1f} |")
    return rows


def run_case(case: harness.Case, quick: bool) -> list[str]:
    scale = 1e6 if case.unit == "us" else 1e3
    reference = next(iter(case.implementations))
    rows = [f"| size | implementation | median, {case.unit} | min, {case.unit} | ratio to {reference} "
            "| peak memory over inputs, MB |", "|---|---|---|---|---|---|"]
    for size in case.quick_sizes if quick else case.sizes:
        args = case.setup(size)
        results = {name: fn(*args) for name, fn in case.implementations.items() if not case.skip(name, size)}
        reference = next(iter(results.values()))
        base = None
        for name, fn in case.implementations.items():
            if case.skip(name, size):
                continue
            if case.unit == "us" or name == next(iter(results)):
                ok = ""
            else:
                ok = "" if _agrees(results[name], reference) else " (disagrees!)"
            number = 2000 if case.unit == "us" else 1
            med, best = harness.timeit(fn, args, case.repeats, number)
            base = base or med
            mem = f"{harness.peak_memory_mb(case.name, name, size):.0f}" if case.memory else ""
            label = "" if size is None else "x".join(map(str, size)) if isinstance(size, tuple) else str(size)
            rows.append(f"| {label} | {name}{ok} | {med * scale:.1f} | {best * scale:.1f} | {med / base:.2f} | {mem} |")
            print(rows[-1], flush=True)
    return rows


def _agrees(a, b) -> bool:
    """Value and gradient leaves agree (implementations return (value, gradient(s)))."""
    def leaves(x):
        if isinstance(x, tuple | list):
            return [leaf for item in x for leaf in leaves(item)]
        return [np.asarray(x.detach() if hasattr(x, "detach") else x, dtype=complex)]

    la, lb = leaves(a), leaves(b)
    return len(la) == len(lb) and all(np.allclose(x, y, rtol=1e-6, atol=1e-8 * max(1.0, np.abs(y).max(initial=0)))
                                      for x, y in zip(la, lb))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a run under a few minutes")
    parser.add_argument("--only", help="run the cases whose name contains this text")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="where to write the table (default: %(default)s); the discussion appended is "
                             "the file beside this one named for it (RESULTS-gpu.md: discussion-gpu.md)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--first-call", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = all_cases()
    if args.child:
        name, impl, size = args.child
        size = json.loads(size)
        harness.child(cases[name], impl, tuple(size) if isinstance(size, list) else size)
        return
    if args.first_call:
        first_call_child(args.first_call)
        return
    flags = (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only else "")
    lines = ["# Benchmark results", "",
             f"`python -m benchmarks{flags}` on {platform.machine()}, "
             f"{platform.python_version()}, NumPy {np.__version__}; float64. Medians and minima over repeats "
             "after a warm-up, every implementation of a case in the same run; peak memory is a fresh "
             "process's high-water mark minus that of one that only builds the inputs.", ""]
    peers = [p for p, ok in (("JAX", harness.available("jax")), ("PyTorch", harness.available("torch")),
                             ("autograd", harness.available("autograd"))) if not ok]
    if peers:
        lines += [f"Skipped (not installed): {', '.join(peers)}.", ""]
    if not any(name.startswith("GPU") for name in cases):
        lines += ["GPU cases skipped: no CuPy or no CUDA device on this machine.", ""]
    for case in cases.values():
        if args.only and args.only not in case.name:
            continue
        print(f"\n## {case.name}", flush=True)
        lines += [f"## {case.name}", "", *case.notes, "", *run_case(case, args.quick), ""]
    if not args.only or "first" in args.only:
        impls = ["pullback"] + [i for i in ("JAX jit", "PyTorch") if i in all_cases()[
            "GP negative log likelihood, value and gradient"].implementations]
        lines += ["## first call of the GP gradient, n = 256 (fresh process)", "", *first_call_rows(impls), ""]
    discussion = Path(__file__).parent / (args.out.stem.replace("RESULTS", "discussion") + ".md")
    if discussion.exists():
        lines += [discussion.read_text()]
    args.out.write_text("\n".join(lines))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
