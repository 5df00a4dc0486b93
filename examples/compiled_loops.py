"""A loop of many small steps, its gradient's two loops compiled by Numba (``compile="numba"``):
``python examples/compiled_loops.py`` prints the program and times it against the NumPy one."""

import time

import numpy as np

import pullback as pb


def cubic_decay(k, x0):
    def step(x, _):
        x = x - 0.01 * k * x ** 3
        return x, x
    _, xs = pb.scan(step, x0, None, length=1000)
    return np.sum(xs)


if __name__ == "__main__":
    k, x0 = 0.5, np.ones(3)
    for mode in ("numpy", "numba"):
        f = pb.differentiate(cubic_decay, argnums=(0, 1), compile=mode)
        f.value_and_grad(k, x0)
        start = time.perf_counter()
        for _ in range(100):
            f.value_and_grad(k, x0)
        print(f"compile={mode!r}: {(time.perf_counter() - start) * 1e4:.0f} us per value and gradient")
    print(f.source(k, x0))
