"""Elementwise math (pullback/frontend/numpy/ufuncs.py) against NumPy: rounding, remainders,
inverse trigonometric and hyperbolic functions, other log bases, NaN-aware and complex
extrema, clip. Inputs are mapped into each function's domain by the case itself, so finite
differences may probe any direction."""

from __future__ import annotations

import numpy as np

from tests.primitives.cases import Case


def _unit(x):
    """Into (-0.9, 0.9): inside the domain of arcsin, arccos and arctanh."""
    return 0.9 * np.tanh(x)


def _away_from_zero(x):
    return x + np.sign(x) + (x == 0)


CASES: list[Case] = []
for _dt in ("float64", "float32", "complex128"):
    CASES += [
        Case(f"log10-log2-{_dt}", lambda x: (np.log10(x), np.log2(x)), ((3, 4),), _dt, True),
        Case(f"exp2-{_dt}", np.exp2, ((3, 4),), _dt),
        Case(f"arcsin-arccos-{_dt}", lambda x: (np.arcsin(_unit(x)), np.arccos(_unit(x))), ((3, 4),), _dt),
        Case(f"arctan-arcsinh-{_dt}", lambda x: (np.arctan(x), np.arcsinh(x)), ((3, 4),), _dt),
        Case(f"arccosh-{_dt}", lambda x: np.arccosh(x + 1), ((3, 4),), _dt, True),
        Case(f"arctanh-{_dt}", lambda x: np.arctanh(_unit(x)), ((3, 4),), _dt),
        Case(f"sinc-{_dt}", np.sinc, ((3, 4),), _dt),
    ]
for _dt in ("float64", "float32"):
    CASES += [
        Case(f"arctan2-{_dt}", np.arctan2, ((3, 4), (4,)), _dt),
        Case(f"hypot-{_dt}", np.hypot, ((3, 4), (3, 4)), _dt),
        Case(f"logaddexp-{_dt}", lambda x, y: (np.logaddexp(x, y), np.logaddexp2(x, 3 * y)), ((3, 4), (3, 4)), _dt),
        Case(f"cbrt-{_dt}", np.cbrt, ((5,),), _dt),
        Case(f"remainder-{_dt}", lambda x, y: (x % _away_from_zero(y), np.mod(3 * x, 0.7), 2.5 % _away_from_zero(y)),
             ((6,), (6,)), _dt),
    ]
CASES += [
    Case("rounding", lambda x: (np.floor(3 * x), np.ceil(3 * x), np.trunc(3 * x), np.rint(3 * x), np.round(x, 2),
                                np.around(10 * x, -1), x.round(1)), ((3, 4),)),
    Case("rounding-complex", lambda z: (np.rint(3 * z), np.round(z, 1)), ((4,),), "complex128"),
    Case("rounding-integers", lambda x: (np.floor((3 * x).astype(np.int64)), np.rint((3 * x).astype(np.int32)),
                                         np.round((30 * x).astype(np.int64), -1)), ((5,),)),
    Case("fabs", lambda x: (np.fabs(x), np.fabs((3 * x).astype(np.int64))), ((5,),)),
    Case("fabs-f32", np.fabs, ((5,),), "float32"),
    Case("floor_divide", lambda x, y: (x // _away_from_zero(y), np.floor_divide(3 * x, 0.7), 2 // _away_from_zero(y)),
         ((6,), (6,))),
    Case("floor_divide-integers", lambda x: ((7 * x).astype(np.int64) // 3, (7 * x).astype(np.int64) % -3,
                                             *divmod((7 * x).astype(np.int64), 4)), ((6,),)),
    Case("divmod", lambda x, y: divmod(x, _away_from_zero(y)) + np.divmod(2 * x, 0.3), ((6,), (6,))),
    Case("fmod", lambda x, y: (np.fmod(x, _away_from_zero(y)), np.fmod(3 * x, -0.7)), ((6,), (6,))),
    Case("copysign", lambda x, y: (np.copysign(x, y), np.copysign(x, -1.0)), ((6,), (6,))),
    Case("fmax-fmin", lambda x, y: (np.fmax(x, y), np.fmin(x, y), np.fmax(x, 0.1), np.fmin(0.2, y)), ((3, 4), (4,))),
    Case("angle", lambda z: (np.angle(z), np.angle(z, deg=True)), ((3, 4),), "complex128"),
    Case("angle-real", lambda x: (np.angle(x), np.angle(x, deg=True)), ((5,),)),
    Case("angle-f32", np.angle, ((5,),), "complex64"),
    Case("degrees", lambda x: (np.deg2rad(x), np.rad2deg(x), np.radians(x), np.degrees(x)), ((5,),)),
    Case("degrees-f32", lambda x: (np.deg2rad(x), np.rad2deg(x)), ((5,),), "float32"),
    Case("isnan-isinf-isfinite", lambda x: (np.isnan(x), np.isinf(np.exp(800 * x)), np.isfinite(np.log(x)),
                                            np.isnan((3 * x).astype(np.int64)), np.isfinite((3 * x).astype(np.int64))),
         ((6,),)),
    Case("isnan-complex", lambda z: (np.isnan(z), np.isfinite(z), np.isinf(z)), ((3,),), "complex128"),
    Case("nan_to_num", lambda x: (np.nan_to_num(x), np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0)), ((5,),)),
    Case("nan_to_num-complex", lambda z: np.nan_to_num(z, nan=1.5), ((5,),), "complex128"),
    Case("clip", lambda x, lo: (np.clip(x, -0.5, 0.5), np.clip(x, lo, None), np.clip(x, None, lo), x.clip(-0.2, 0.3),
                                x.clip(max=0.1), np.clip(x, a_min=lo, a_max=lo + 1)), ((3, 4), (4,))),
    Case("clip-f32", lambda x: np.clip(x, -0.5, 0.5), ((3, 4),), "float32"),
    Case("max-min-complex", lambda z: (np.max(z), np.min(z, axis=0), z.max(axis=1, keepdims=True),
                                       np.amin(z, axis=(0, 1))), ((3, 4),), "complex128"),
    Case("max-min-complex64", lambda z: (z.max(), z.min(axis=-1)), ((2, 3),), "complex64"),
    Case("maximum-minimum-complex", lambda z, w: (np.maximum(z, w), np.minimum(z, w), np.maximum(z, 0.5 + 0j),
                                                  np.clip(z, -0.5 - 1j, 0.5 + 1j)), ((3, 4), (4,)), "complex128"),
]
