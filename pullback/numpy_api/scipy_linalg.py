"""``scipy.linalg`` functions by their SciPy names on traced arrays, where pullback.linalg has
the same function with SciPy's signature: SciPy converts its arguments with ``np.asarray``, so
while a trace runs these names stand in for SciPy's (``construct.implements_attribute``). The
other scipy.linalg functions still refuse, naming the pullback.linalg function to use."""

from __future__ import annotations

import scipy.linalg

from pullback.numpy_api.construct import implements_attribute


@implements_attribute(scipy.linalg, "expm", "scipy.linalg.expm")
def expm(A):
    from pullback import linalg

    return linalg.expm(A)


@implements_attribute(scipy.linalg, "sqrtm", "scipy.linalg.sqrtm")
def sqrtm(A, disp=True, blocksize=64):
    from pullback import linalg
    from pullback.numpy_api import unsupported

    if not disp:
        unsupported("scipy.linalg.sqrtm with disp=False")
    return linalg.sqrtm(A)


@implements_attribute(scipy.linalg, "solve_sylvester", "scipy.linalg.solve_sylvester")
def solve_sylvester(a, b, q):
    from pullback import linalg

    return linalg.solve_sylvester(a, b, q)


@implements_attribute(scipy.linalg, "solve_banded", "scipy.linalg.solve_banded")
def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    from pullback import linalg

    return linalg.solve_banded(l_and_u, ab, b)
