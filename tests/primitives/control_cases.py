"""Cases for ``scan`` and ``checkpoint``: nonlinear ones (values and JVPs) and linear ones (transposes)."""

import numpy as np

import pullback as pb
from tests.primitives.cases import Case

_M = np.array([[0.5, -0.3, 0.1], [0.2, 0.4, -0.2], [0.0, 0.3, 0.6]])


def _rnn(h0, xs):
    h, ys = pb.scan(lambda h, x: (np.tanh(_M @ h + x), np.sum(h * x)), h0, xs)
    return h, ys


def _reverse(h0, xs, a):
    h, ys = pb.scan(lambda h, x: (h * np.cos(x) + a, h ** 2), h0, xs, reverse=True)
    return h, ys


def _linear(c0, xs):
    c, ys = pb.scan(lambda c, x: (_M @ c + x, 2.0 * c - x), c0, xs)
    return c, ys


def _remat(x, y):
    return pb.checkpoint(lambda x, y: (np.sin(x) * y, np.exp(y) + x))(x, y)


def _remat_linear(x, y):
    return pb.checkpoint(lambda x, y: (_M @ x - y, 2.0 * y))(x, y)


def _cond(x, y):
    return pb.cond(np.sum(np.real(x)) > 0, lambda a, b: (np.sin(a) * b, a), lambda a, b: (b * b, np.exp(a)), x, y)


def _cond_linear(x, y):
    return pb.cond(np.sum(np.real(x)) > 0, lambda a, b: _M @ a - b, lambda a, b: 2.0 * b, x, y)


def _while(x):
    return pb.while_loop(lambda c: c[1] < 3, lambda c: (np.sin(c[0]) * 0.5 + c[0], c[1] + 1), (x, 0))[0]


CASES = [
    Case("scan-rnn", _rnn, ((3,), (4, 3))),
    Case("scan-reverse", _reverse, ((2,), (5, 2), (2,))),
    Case("scan-complex", _linear, ((3,), (4, 3)), "complex128"),
    Case("scan-f32", _reverse, ((2,), (3, 2), (2,)), "float32"),
    Case("scan-empty", _rnn, ((3,), (0, 3))),
    Case("checkpoint", _remat, ((3,), (3,))),
    Case("checkpoint-complex", _remat, ((2,), (2,)), "complex128"),
    Case("cond", _cond, ((3,), (3,))),
    Case("cond-complex", _cond, ((3,), (3,)), "complex128"),
    Case("while", _while, ((3,),)),
    Case("while-complex", _while, ((2,),), "complex128"),
]

LINEAR_CASES = [
    Case("scan-linear", _linear, ((3,), (4, 3))),
    Case("scan-linear-complex", _linear, ((3,), (2, 3)), "complex128"),
    Case("checkpoint-linear", _remat_linear, ((3,), (3,))),
    Case("cond-linear", _cond_linear, ((3,), (3,))),
]
