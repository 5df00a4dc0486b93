"""Cases for ``pullback.primitives.signal`` (``scipy.signal.convolve``/``correlate``), collected by
the forward, JVP and transpose suites: each mode, 1-d and 2-d, odd and even lengths, the second
operand longer than the first ('same' keeps the first's shape; 'valid' swaps), real and complex."""

from __future__ import annotations

import numpy as np
import scipy.signal

from tests.primitives.cases import Case

C = "complex128"
# odd and even lengths, in2 longer than in1 (1-d, and 2-d along every axis), 2-d
SHAPES = (((5,), (2,)), ((3,), (6,)), ((4, 3), (2, 2)), ((3, 4), (5, 6)))


def _case(name: str, mode: str, sa, sb, dtype="float64", method="auto") -> Case:
    f = getattr(scipy.signal, name)
    return Case(f"{name}-{mode}-{sa}-{sb}-{dtype}", lambda a, b: f(a, b, mode, method), (sa, sb), dtype)


CASES: list[Case] = [_case(n, m, sa, sb) for n in ("convolve", "correlate") for m in ("full", "same", "valid")
                     for sa, sb in SHAPES]
CASES += [
    _case("convolve", "same", (4, 5), (3, 2), C), _case("correlate", "valid", (6,), (4,), C, "direct"),
    _case("convolve", "full", (7,), (3,), "float32", "fft"), _case("correlate", "same", (1, 1), (1, 1), "float32"),
]

_rng = np.random.default_rng(31)


def _fixed(shape):
    return _rng.standard_normal(shape) + 1j * _rng.standard_normal(shape)


LINEAR_CASES: list[Case] = []
for _name in ("convolve", "correlate"):
    _f = getattr(scipy.signal, _name)
    for _mode in ("full", "same", "valid"):
        for _i, (_sa, _sb) in enumerate(SHAPES[:3]):
            _a, _b = _fixed(_sa), _fixed(_sb)
            _tag = f"{_name}-{_mode}-{_sa}-{_sb}"
            LINEAR_CASES += [  # linear in each operand (real operands with a real fixed one)
                Case(f"{_tag}-in1", lambda x, b=_b.real, f=_f, m=_mode: f(x, b, m), (_sa,)),
                Case(f"{_tag}-in2", lambda y, a=_a.real, f=_f, m=_mode: f(a, y, m), (_sb,)),
            ]
            if _i == 0:  # complex: correlate is conjugate-linear in in2 (real-linear: its transpose conjugates)
                LINEAR_CASES += [
                    Case(f"{_tag}-in1-complex", lambda x, b=_b, f=_f, m=_mode: f(x, b, m), (_sa,), C),
                    Case(f"{_tag}-in2-complex", lambda y, a=_a, f=_f, m=_mode: f(a, y, m), (_sb,), C),
                ]
