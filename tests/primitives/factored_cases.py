"""Solves at the factors (``pullback.primitives.linalg.factor_solves``): getrs, getri and potrs called on the
factors directly (so their rules in the factors, which second-order programs use, meet finite
differences too), and the composites solve, inv, slogdet, logdet that differentiate at the solve."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pullback import linalg as pla
from pullback.ir.tracer import bind
from pullback.primitives import lax
from pullback.primitives.linalg import factorizations as la
from tests.primitives.cases import Case
from tests.primitives.linalg_cases import H, spd

C = "complex128"


def well(x):
    """A well-conditioned general matrix whose pivots stay put under finite differences."""
    return x + 3 * np.eye(x.shape[-1], dtype=x.dtype)


def _factors(a):
    lu, piv, _, _ = bind(la.getrf_p, a, check=False)
    return lu, piv


def getrs(a, b, trans=0):
    return lax.getrs(*_factors(well(a)), b, trans)


def getri(a):
    return lax.getri(*_factors(well(a)))


def potrs(a, b):
    return lax.potrs(pla.cholesky(spd(a)), b)


def _op(a, trans):
    return a if trans == 0 else (a.T if trans == 1 else H(a))


CASES = []
for _dtype in ("float64", C):
    for _trans in (0, 1, 2):
        CASES.append(Case(f"getrs-{'NTC'[_trans]}-{_dtype}", lambda a, b, t=_trans: getrs(a, b, t), ((3, 3), (3, 2)),
                          _dtype, reference=lambda a, b, t=_trans: np.linalg.solve(_op(well(a), t), b)))
CASES += [
    Case("getrs-batched-f32", lambda a, b: getrs(a, b), ((2, 3, 3), (2, 3, 1)), "float32",
         reference=lambda a, b: np.linalg.solve(well(a), b)),
    Case("getri", getri, ((4, 4),), reference=lambda a: np.linalg.inv(well(a))),
    Case("getri-complex-batched", getri, ((2, 3, 3),), C, reference=lambda a: np.linalg.inv(well(a))),
    Case("potrs", potrs, ((3, 3), (3, 2)), reference=lambda a, b: np.linalg.solve(spd(a), b)),
    Case("potrs-complex", potrs, ((3, 3), (3, 2)), C, reference=lambda a, b: np.linalg.solve(spd(a), b)),
    # the composites: solve, inv, slogdet, logdet and solve(assume_a='pos')
    Case("gesv-matrix-rhs", lambda a, b: np.linalg.solve(well(a), b), ((3, 3), (3, 2)),
         reference=lambda a, b: np.linalg.solve(well(a), b)),
    Case("gesv-batched-complex", lambda a, b: np.linalg.solve(well(a), b), ((2, 3, 3), (2, 3, 2)), C,
         reference=lambda a, b: np.linalg.solve(well(a), b)),
    Case("getri_at-complex", lambda a: np.linalg.inv(well(a)), ((3, 3),), C,
         reference=lambda a: np.linalg.inv(well(a))),
    Case("getri_at-batched-f32", lambda a: np.linalg.inv(well(a)), ((2, 3, 3),), "float32",
         reference=lambda a: np.linalg.inv(well(a))),
    Case("lu_logabsdet-batched", lambda a: np.linalg.slogdet(a)[1], ((2, 3, 3),),
         reference=lambda a: np.linalg.slogdet(a)[1]),
    Case("posv", lambda a, b: pla.solve(spd(a), b, assume_a="pos"), ((3, 3), (3,)),
         reference=lambda a, b: scipy.linalg.solve(spd(a), b, assume_a="pos")),
    Case("posv-complex-batched", lambda a, b: pla.solve(spd(a), b, assume_a="pos"), ((2, 3, 3), (2, 3, 2)), C,
         reference=lambda a, b: np.linalg.solve(spd(a), b)),
    Case("po_logdet-complex", lambda a: pla.logdet(spd(a)), ((3, 3),), C,
         reference=lambda a: np.linalg.slogdet(spd(a))[1]),
]

# linear in b: the dot-product test of getrs's (every op) and potrs's transposes
_A = well(np.random.default_rng(3).standard_normal((3, 3)))
_AC = _A + 1j * np.random.default_rng(4).standard_normal((3, 3))
_S = spd(np.random.default_rng(5).standard_normal((3, 3)))
_SC = spd(_AC)
LINEAR_CASES = []
for _a, _dtype in ((_A, "float64"), (_AC, C)):
    for _trans in (0, 1, 2):
        LINEAR_CASES.append(Case(f"getrs-{'NTC'[_trans]}-{_dtype}", lambda b, a=_a, t=_trans: lax.getrs(
            *_factors(a.astype(b.dtype)), b, t), ((3, 2),), _dtype))
LINEAR_CASES += [
    Case("potrs", lambda b: lax.potrs(pla.cholesky(_S), b), ((3, 2),)),
    Case("potrs-complex", lambda b: lax.potrs(pla.cholesky(_SC), b), ((3, 2),), C),
]
