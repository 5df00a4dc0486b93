"""``python -m benchmarks.function_forms``: the per-call cost of ``pb.grad(f)(x)`` (a cached
function form) against a held ``differentiate`` object's ``grad``, and the Hessian-vector
product ``pb.jvp(pb.grad(f), (x,), (v,))`` against a held object's."""

from __future__ import annotations

import time

import numpy as np

import pullback as pb


def best_us(call, n: int = 5000, repeats: int = 5) -> float:
    call()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            call()
        times.append(time.perf_counter() - t)
    return min(times) / n * 1e6


def main() -> None:
    x, v = np.array([0.5, -1.0, 2.0]), np.ones(3)

    def f(x):
        return np.sum(np.sin(x) * x)

    held = pb.differentiate(f)
    g = pb.grad(f)
    hvp_held = pb.differentiate(g)
    rows = [
        ("grad", best_us(lambda: held.grad(x)), best_us(lambda: pb.grad(f)(x))),
        ("Hessian-vector product", best_us(lambda: hvp_held.jvp((x,), (v,)), 1000),
         best_us(lambda: pb.jvp(pb.grad(f), (x,), (v,)), 1000)),
    ]
    print("| call | held object, us | function form, us | ratio |")
    print("|---|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
