"""Cases for custom_jvp and custom_vjp calls (their rules are tested in tests/frontend/test_custom.py)."""

import numpy as np

import pullback as pb
from tests.primitives.cases import Case

_M = np.array([[0.5, -0.3, 0.1], [0.2, 0.4, -0.2], [0.0, 0.3, 0.6]])


@pb.custom_jvp
def _softplus(x):
    return np.log1p(np.exp(x))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), t / (1.0 + np.exp(-x))


@pb.custom_vjp
def _times_m(x):
    return _M @ x


_times_m.defvjp(lambda x: (_M @ x, None), lambda _, g: (_M.T @ g,))


@pb.custom_vjp
def _scaled_sin(x, a):
    return np.sin(x) * a


_scaled_sin.defvjp(lambda x, a: (np.sin(x) * a, (x, a)),
                   lambda res, g: (g * res[1] * np.cos(res[0]), np.sum(g * np.sin(res[0]))))

CASES = [
    Case("custom-jvp", _softplus, ((4,),)),
    Case("custom-vjp", _scaled_sin, ((3,), ())),
]

LINEAR_CASES = [
    Case("custom-vjp-linear", _times_m, ((3,),)),
]
