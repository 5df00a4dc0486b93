"""autograd.misc: ``flatten`` (a container of arrays and scalars to one vector and back) is
public API, built here on NumPy and pullback's trees; the rest are internals (see _internal.py)."""

import numpy as np

from autograd._internal import module_getattr
from pullback.tree import flatten as _leaves
from pullback.tree import unflatten as _rebuild

__getattr__ = module_getattr(__name__)


def flatten(value):
    """``(vector, unflatten)``: the leaves raveled and concatenated, as autograd.misc.flatten."""
    leaves, tree = _leaves(value)
    shapes = [np.shape(leaf) for leaf in leaves]
    scalars = [not isinstance(leaf, np.ndarray) and np.ndim(leaf) == 0 for leaf in leaves]
    vector = np.concatenate([np.ravel(leaf) for leaf in leaves]) if leaves else np.zeros(0)

    def unflatten(v):
        out, start = [], 0
        for shape, scalar in zip(shapes, scalars):
            size = int(np.prod(shape))
            piece = np.reshape(v[start:start + size], shape)
            out.append(piece[()] if scalar else piece)
            start += size
        return _rebuild(tree, out)

    return vector, unflatten
