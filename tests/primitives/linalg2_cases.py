"""Cases for the linear algebra of ``pullback.primitives.linalg.matrix_functions`` (det, the general
eigenproblem, ...), collected by the forward, JVP and transpose suites."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pullback import linalg as pla
from tests.primitives.cases import Case
from tests.primitives.linalg_cases import phase, spd

C = "complex128"


ROTATION = 3 * np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # a complex pair


def np_eig(a):
    """NumPy's eig, complex, with pullback's eigenvector phase."""
    w, v = np.linalg.eig(a)
    c = np.result_type(a.dtype, np.complex64)
    return w.astype(c), phase(v.astype(c))[0]


def np_eigh(a, UPLO="L"):
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    return w, phase(v)[0]


CASES: list[Case] = [
    Case("det", lambda x: pla.det(x), ((4, 4),), reference=np.linalg.det),
    Case("det-batched-f32", lambda x: np.linalg.det(x), ((2, 3, 3),), "float32", reference=np.linalg.det),
    Case("det-complex", lambda x: pla.det(x), ((3, 3),), C, reference=np.linalg.det),
    Case("qr-wide", lambda x: np.linalg.qr(x), ((3, 5),), reference=lambda x: tuple(np.linalg.qr(x))),
    Case("qr-wide-batched-complex", lambda x: pla.qr(x), ((2, 2, 4),), C, reference=lambda x: tuple(np.linalg.qr(x))),
    Case("eigh-upper", lambda x: np.linalg.eigh(x, UPLO="U"), ((4, 4),), reference=lambda x: np_eigh(x, "U")),
    Case("eigvalsh-upper-complex", lambda x: np.linalg.eigvalsh(x, UPLO="U"), ((3, 3),), C,
         reference=lambda x: np.linalg.eigvalsh(x, UPLO="U")),
    Case("pinv-tall", lambda x: np.linalg.pinv(x), ((4, 3),), reference=np.linalg.pinv),
    Case("pinv-wide-batched-complex", lambda x: pla.pinv(x), ((2, 2, 3),), C, reference=np.linalg.pinv),
    Case("pinv-f32", lambda x: pla.pinv(x), ((3, 3),), "float32", reference=np.linalg.pinv),
    Case("eig", lambda x: np.linalg.eig(x), ((4, 4),), reference=np_eig),
    Case("eig-rotation", lambda x: pla.eig(x + ROTATION), ((3, 3),), reference=lambda x: np_eig(x + ROTATION)),
    Case("eig-batched-complex", lambda x: pla.eig(x), ((2, 3, 3),), C, reference=np_eig),
    Case("eigvals-f32", lambda x: np.linalg.eigvals(x), ((3, 3),), "float32",
         reference=lambda x: np.linalg.eigvals(x).astype(np.complex64)),
    Case("expm", lambda x: pla.expm(x), ((3, 3),), reference=scipy.linalg.expm),
    Case("expm-batched-complex", lambda x: pla.expm(x), ((2, 3, 3),), C, reference=scipy.linalg.expm),
    Case("expm_frechet", lambda a, e: pla.expm_frechet(a, e), ((3, 3), (3, 3)),
         reference=lambda a, e: tuple(scipy.linalg.expm_frechet(a, e))),
    Case("sqrtm", lambda x: pla.sqrtm(spd(x)), ((3, 3),), reference=lambda x: scipy.linalg.sqrtm(spd(x))),
    Case("sqrtm-complex", lambda x: pla.sqrtm(x + 3 * np.eye(3)), ((3, 3),), C,
         reference=lambda x: scipy.linalg.sqrtm(x + 3 * np.eye(3))),
    Case("solve_sylvester", lambda a, b, q: pla.solve_sylvester(a, b, q), ((3, 3), (2, 2), (3, 2)),
         reference=scipy.linalg.solve_sylvester),
    Case("solve_sylvester-complex", lambda a, b, q: pla.solve_sylvester(a, b, q), ((2, 2), (2, 2), (2, 2)), C,
         reference=scipy.linalg.solve_sylvester),
    Case("lstsq", lambda a, b: np.linalg.lstsq(a, b)[:2], ((5, 3), (5, 2)),
         reference=lambda a, b: np.linalg.lstsq(a, b)[:2]),
]

_rng = np.random.default_rng(21)
A3, B2 = _rng.standard_normal((3, 3)), _rng.standard_normal((2, 2))
A3C = A3 + 1j * _rng.standard_normal((3, 3))

LINEAR_CASES: list[Case] = [
    Case("expm_frechet", lambda e: pla.expm_frechet(A3, e, compute_expm=False), ((3, 3),)),
    Case("expm_frechet-complex", lambda e: pla.expm_frechet(A3C, e, compute_expm=False), ((3, 3),), C),
    Case("trsyl", lambda q: pla.solve_sylvester(A3, B2, q), ((3, 2),)),
    Case("trsyl-complex", lambda q: pla.solve_sylvester(A3C, B2, q), ((3, 2),), C),
]
