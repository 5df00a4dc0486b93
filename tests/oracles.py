"""Independent oracles the tests share: central differences of a NumPy function."""

import numpy as np


def central_differences(f, args, i, eps=1e-6):
    """The gradient of the scalar ``f(*args)`` in its argument ``i`` by central differences, entry by entry."""
    x = np.asarray(args[i], dtype=float)
    fd = np.zeros(x.shape)
    for j in range(x.size):
        e = np.zeros(x.shape)
        e.flat[j] = eps
        hi, lo = list(args), list(args)
        hi[i], lo[i] = x + e, x - e
        fd.flat[j] = (f(*hi) - f(*lo)) / (2 * eps)
    return fd
