"""``python -m benchmarks.profile_lines [--device cuda] [--n 2048 8192]``: where the time of
the printed GP gradient goes, statement by statement (the device is synchronised after each
statement, so GPU times are each statement's own)."""

from __future__ import annotations

import argparse
import ast
import time

import numpy as np

from benchmarks.cases import gp_regression


def profile(source: str, namespace: dict, args: tuple, sync, repeats: int = 3, top: int = 25) -> None:
    tree = ast.parse(source)
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef)][-1]  # after any fused kernels
    fn.body = [s for st in fn.body for s in (st, ast.parse(f"_tick({st.lineno})").body[0])]
    ast.fix_missing_locations(tree)
    spent: dict[int, float] = {}
    last = [0.0]

    def tick(line: int) -> None:
        sync()
        now = time.perf_counter()
        spent[line] = spent.get(line, 0.0) + now - last[0]
        last[0] = now

    ns = dict(namespace, _tick=tick)
    exec(compile(tree, "<profiled>", "exec"), ns)
    f = ns[fn.name]
    f(*args)
    spent.clear()
    for _ in range(repeats):
        sync()
        last[0] = time.perf_counter()
        f(*args)
    lines = source.splitlines()
    print(f"total {sum(spent.values()) / repeats * 1e3:.2f} ms")
    for line, t in sorted(spent.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{t / repeats * 1e3:8.2f} ms  {lines[line - 1].strip()[:110]}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_lines")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--n", type=int, nargs="+", default=[2048])
    opts = parser.parse_args(argv)
    fn = gp_regression.neg_log_marginal_likelihood
    for n in opts.n:
        X, y = gp_regression.synthetic_data(n)
        args = (np.array([0.1, -0.2, -2.0]), X, y)
        source = fn.source(*args, device=opts.device)
        if opts.device == "cuda":
            import cupy
            import cupyx.scipy.linalg
            import cupyx.scipy.special  # noqa: F401

            namespace, sync = {"np": np, "cp": cupy, "cupyx": cupyx}, cupy.cuda.Device().synchronize
            args = tuple(cupy.asarray(a) for a in args)
        else:
            import scipy.linalg

            namespace, sync = {"np": np, "scipy": scipy}, lambda: None
        print(f"--- n = {n}, {opts.device}")
        profile(source, namespace, args, sync)


if __name__ == "__main__":
    main()
