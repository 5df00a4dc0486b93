"""The Bessel functions of scipy.special (pullback/primitives/special.py) against SciPy itself:
J and I of orders 0, 1 and n on the whole real line, and every function of a real order on x > 0
(where SciPy defines J_v, Y_v, I_v and K_v for non-integral v). Orders are constants here; a
traced order, whose tangent has no closed form, is tested in tests/primitives/test_special.py. The last
gamma functions (gammasgn, rgamma) and complex erf/erfc are here too."""

from __future__ import annotations

import numpy as np
import scipy.special as sc

from tests.primitives.cases import Case

V = np.array([0.0, 0.5, 1.0, 2.5])  # real orders, broadcast against (3, 4) inputs
N = np.array([0, 1, 2, -3])  # integral orders (int64: yn of them computes in float64, as SciPy does)
K = np.array([-3.5, -1.5, 0.5, 2.5])  # gammasgn's inputs stay 0.1 from its jumps at 0, -1, -2, ...


def _between(x):
    """Within 0.4 of the points K, on either side of 0: finite differences never cross a jump of gammasgn."""
    return K + 0.4 * np.tanh(x)


def _signed(x):
    """J_n, I_n and their scaled forms of integral n on the whole line (ive's -sign(x) term included)."""
    return sc.jv(2, x), sc.jn(-1, 3 * x), sc.iv(2, x), sc.ive(1, 3 * x), sc.ive(0, x)


def _real_order(x):
    """Every function of a real order on x > 0 (none of them in cupyx.scipy.special)."""
    return sc.jv(V, x), sc.yv(V, x), sc.iv(V, x), sc.ive(V, x), sc.kv(V, x), sc.kve(V, x)


def _y_and_k(x):
    """Y of integral order, and Y and K of orders 0 and 1, on x > 0."""
    return sc.yn(N, x), sc.yn(2, x), sc.y0(x), sc.y1(x), sc.k0(x), sc.k1(x), sc.k0e(x), sc.k1e(x)


CASES: list[Case] = []
for _dt in ("float64", "float32"):
    CASES += [
        Case(f"bessel-j01-{_dt}", lambda x: (sc.j0(x), sc.j1(x), sc.j1(3 * x)), ((3, 4),), _dt),
        Case(f"bessel-signed-{_dt}", _signed, ((3, 4),), _dt),
        Case(f"bessel-real-order-{_dt}", _real_order, ((3, 4),), _dt, True),
        Case(f"bessel-y-k-{_dt}", _y_and_k, ((3, 4),), _dt, True),
        Case(f"gammasgn-rgamma-{_dt}", lambda x: (sc.gammasgn(_between(x)), sc.rgamma(3 * x),
                                                   sc.rgamma(x) * sc.gammasgn(_between(x))), ((3, 4),), _dt),
    ]
for _dt in ("complex128", "complex64"):
    CASES.append(Case(f"erf-erfc-{_dt}", lambda z: (sc.erf(z), sc.erfc(z), sc.erf(2 * z) - sc.erfc(z)), ((3, 4),), _dt))
CASES += [
    Case("bessel-scalar", lambda x: (sc.jv(1.5, x), sc.yn(1, x), sc.k1e(x), sc.iv(0, x), sc.rgamma(x)), ((),),
         "float64", True),
    Case("bessel-size1", lambda x: (sc.jv(V, x), sc.kve(1, x), sc.j1(x), sc.y0(x), sc.gammasgn(x + 0.1)), ((1, 1),),
         "float64", True),
    Case("bessel-empty", lambda x: (sc.jv(V[:, None], x), sc.yn(2, x), sc.k0(x), sc.ive(1, x), sc.erf(x)), ((0,),),
         "float64", True),
    Case("erf-complex-scalar", lambda z: sc.erf(z) * sc.erfc(z), ((),), "complex128"),
]
