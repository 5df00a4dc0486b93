"""scipy.special on traced arrays (pullback/frontend/scipy/special.py) against SciPy itself. Each
case maps its standard-normal inputs into the function's domain, so finite differences may probe
any direction; arguments without a derivative (gammainc's ``a``, betainc's ``a`` and ``b``) are
constants here and are tested in tests/primitives/test_special.py."""

from __future__ import annotations

import numpy as np
import scipy.special as sc

from tests.primitives.cases import Case

A = np.array([0.7, 1.5, 2.5, 4.0])  # shape parameters, broadcast against (3, 4) inputs
B = np.array([3.0, 0.8, 1.2, 2.0])


def _unit(x):
    """Into (-0.9, 0.9)."""
    return 0.9 * np.tanh(x)


def _prob(x):
    """Into (0.05, 0.95)."""
    return 0.5 + 0.45 * np.tanh(x)


CASES: list[Case] = []
for _dt in ("float64", "float32"):
    CASES += [
        Case(f"gammaln-gamma-{_dt}", lambda x: (sc.gammaln(x), sc.gamma(x), sc.gammaln(-x)), ((3, 4),), _dt, True),
        Case(f"digamma-{_dt}", lambda x: (sc.digamma(x), sc.psi(2 * x)), ((3, 4),), _dt, True),
        Case(f"polygamma-{_dt}", lambda x: (sc.polygamma(1, x), sc.polygamma(3, x), sc.polygamma(np.arange(1, 5), x)),
             ((3, 4),), _dt, True),
        Case(f"erf-erfc-{_dt}", lambda x: (sc.erf(x), sc.erfc(x), sc.erfcx(x)), ((3, 4),), _dt),
        Case(f"erfinv-{_dt}", lambda x: (sc.erfinv(_unit(x)), sc.erfcinv(1 + _unit(x))), ((3, 4),), _dt),
        Case(f"ndtr-{_dt}", lambda x: (sc.ndtr(x), sc.log_ndtr(3 * x - 4), sc.ndtri(_prob(x))), ((3, 4),), _dt),
        Case(f"bessel-{_dt}", lambda x: (sc.i0(x), sc.i1(x), sc.i0e(3 * x), sc.i1e(3 * x)), ((3, 4),), _dt),
        Case(f"xlogy-{_dt}", lambda x, y: (sc.xlogy(x, y), sc.xlog1py(x, y), sc.xlogy(2, y), sc.entr(y)),
             ((3, 4), (4,)), _dt, True),
        Case(f"logistic-{_dt}", lambda x: (sc.logit(_prob(x)), sc.log_expit(3 * x), sc.expit(x)), ((3, 4),), _dt),
        Case(f"beta-{_dt}", lambda a, b: (sc.beta(a, b), sc.betaln(a, b), sc.betaln(a, 2.5)), ((3, 4), (4,)), _dt,
             True),
        Case(f"gammainc-{_dt}", lambda x: (sc.gammainc(A, x), sc.gammaincc(A, 2 * x), sc.gammainc(1.5, x)),
             ((3, 4),), _dt, True),
        Case(f"betainc-{_dt}", lambda x: (sc.betainc(A, B, _prob(x)), sc.betainc(2.0, 0.5, _prob(x))), ((3, 4),), _dt),
        Case(f"logsumexp-{_dt}", lambda x: (sc.logsumexp(x), sc.logsumexp(x, axis=1), sc.logsumexp(x, axis=0,
                                            keepdims=True)), ((3, 4),), _dt),
        Case(f"softmax-{_dt}", lambda x: (sc.softmax(x), sc.softmax(x, axis=-1), sc.log_softmax(x, axis=0),
                                          sc.log_softmax(x)), ((3, 4),), _dt),
    ]
CASES += [
    Case("logsumexp-b", lambda a, b: (sc.logsumexp(a, b=b), sc.logsumexp(a, axis=-1, b=b + 1),
                                      *sc.logsumexp(a, axis=0, b=b - 1, return_sign=True)), ((3, 4), (4,)), "float64",
         True),
    Case("logsumexp-size1", lambda a: (sc.logsumexp(a, axis=1), sc.softmax(a, axis=1)), ((3, 1),)),
    Case("integers", lambda x: (sc.gammaln((4 * x).astype(np.int64)), sc.polygamma(2, (4 * x).astype(np.int32)),
                                sc.logsumexp((4 * x).astype(np.int64)), sc.xlogy(2, x)), ((5,),), "float64", True),
    Case("polygamma-orders", lambda x: sc.polygamma(np.arange(4), x), ((3, 4),), "float64", True),
    Case("multigammaln", lambda a: (sc.multigammaln(a + 2, 3), sc.multigammaln(a + 1, 1)), ((4,),), "float64", True),
    Case("multigammaln-f32", lambda a: sc.multigammaln(a + 2, 2), ((4,),), "float32", True),
]
