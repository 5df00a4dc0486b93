"""Elementwise chains compiled by Numba (``compile="auto"``): a robust loss over 5000 x 8 residuals, its
gradient's chains of elementwise operations (and the sums that end them) each one loop over the
elements. ``python examples/compiled_chains.py`` prints the program and times it against the NumPy one."""

import time

import numpy as np

import pullback as pb


def pseudo_huber(x, y, scale):
    r = (x - y) / scale
    return np.sum(scale ** 2 * (np.sqrt(1.0 + r * r) - 1.0), axis=1)


def worst_row(x, y, scale):
    return np.max(pseudo_huber(x, y, scale))


if __name__ == "__main__":
    x, y = np.random.default_rng(0).standard_normal((2, 5000, 8))
    scale = np.full(8, 0.5)
    for mode in ("numpy", "auto"):
        f = pb.differentiate(worst_row, argnums=(0, 2), compile=mode)
        f.value_and_grad(x, y, scale)
        start = time.perf_counter()
        for _ in range(100):
            f.value_and_grad(x, y, scale)
        print(f"compile={mode!r}: {(time.perf_counter() - start) * 1e4:.0f} us per value and gradient")
    print(f.source(x, y, scale))
