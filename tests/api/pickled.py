"""Module-level functions for tests/api/test_pickle.py: pickle finds functions by module and name, so a
spawned worker imports them from here."""

import numpy as np

import pullback as pb


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosen_with_aux(x):
    return rosen(x), {"residual": 1.0 - x[:-1]}


def rosen_rows(X):
    return pb.vmap(rosen)(X)


@pb.jit
def decorated(x):
    return rosen(x)
