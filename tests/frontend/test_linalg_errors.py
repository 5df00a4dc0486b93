"""Bad arguments to linear algebra raise the error NumPy (SciPy) raises on the same concrete
input, as a subclass that is also a TracingError, with a message naming the user's call and
file:line (issue 13): wrong ranks, non-square matrices, right-hand sides that do not fit,
float16. Integer matrices are computed in float64, as NumPy does."""

import numpy as np
import pullback.linalg as pla
import pytest
import scipy.linalg as sl

import pullback as pb

E3, ONES3, ONES23, ONES4 = np.eye(3), np.ones(3), np.ones((2, 3)), np.ones(4)
HALF3, INT3 = np.eye(3, dtype=np.float16), np.eye(3, dtype=np.int64)
RANK = "1-dimensional array given. Array must be at least two-dimensional"
SQUARE = "Last 2 dimensions of the array must be square"
HALF = "array type float16 is unsupported in linalg"
FIT = "incompatible shapes"
LinAlg = np.linalg.LinAlgError


def lu_solve_np(a, b):
    return sl.lu_solve(sl.lu_factor(a), b)


# (id, traced function, arguments, NumPy/SciPy on the same input or None, expected type, message fragments)
CASES = [
    ("inv-non-square", lambda a: np.linalg.inv(a), (ONES23,), np.linalg.inv, LinAlg,
     ["numpy.linalg.inv", SQUARE, "(2, 3)"]),
    ("inv-vector", lambda a: np.linalg.inv(a), (ONES3,), np.linalg.inv, LinAlg, ["numpy.linalg.inv", RANK]),
    ("inv-float16", lambda a: np.linalg.inv(a), (HALF3,), np.linalg.inv, TypeError, ["numpy.linalg.inv", HALF]),
    ("pla-inv-non-square", lambda a: pla.inv(a), (ONES23,), sl.inv, LinAlg, ["pullback.linalg.inv", SQUARE]),
    ("solve-rows", lambda a, b: np.linalg.solve(a, b), (E3, ONES4), np.linalg.solve, ValueError,
     ["numpy.linalg.solve", FIT, "a (3, 3) does not fit b (4,)"]),
    ("solve-matrix-rows", lambda a, b: np.linalg.solve(a, b), (E3, np.ones((4, 2))), np.linalg.solve, ValueError,
     ["numpy.linalg.solve", FIT, "(4, 2)"]),
    ("solve-batch", lambda a, b: np.linalg.solve(a, b), (np.stack([E3, E3]), np.ones((3, 3, 1))), np.linalg.solve,
     ValueError, ["numpy.linalg.solve", FIT, "batch axes"]),
    ("solve-0d-b", lambda a, b: np.linalg.solve(a, b), (E3, np.float64(1.0)), np.linalg.solve, ValueError,
     ["numpy.linalg.solve", FIT, "b ()"]),
    ("solve-non-square", lambda a, b: np.linalg.solve(a, b), (ONES23, np.ones(2)), np.linalg.solve, LinAlg,
     ["numpy.linalg.solve", SQUARE]),
    ("solve-vector-a", lambda a, b: np.linalg.solve(a, b), (ONES3, ONES3), np.linalg.solve, LinAlg,
     ["numpy.linalg.solve", RANK]),
    ("solve-float16-b", lambda a, b: np.linalg.solve(a, b), (E3, np.ones(3, np.float16)), np.linalg.solve, TypeError,
     ["numpy.linalg.solve", HALF]),
    ("pla-solve-scalar-b", lambda a: pla.solve(a, 1.0), (E3,), lambda a: sl.solve(a, 1.0), ValueError,
     ["pullback.linalg.solve", FIT, "b ()"]),
    ("pla-solve-pos-rows", lambda a, b: pla.solve(a, b, assume_a="pos"), (E3, ONES4),
     lambda a, b: sl.solve(a, b, assume_a="pos"), ValueError, ["pullback.linalg.solve", FIT]),
    ("svd-vector", lambda a: np.linalg.svd(a), (ONES3,), np.linalg.svd, LinAlg, ["numpy.linalg.svd", RANK]),
    ("svd-values-vector", lambda a: np.linalg.svd(a, compute_uv=False), (ONES3,),
     lambda a: np.linalg.svd(a, compute_uv=False), LinAlg, ["numpy.linalg.svd", RANK]),
    ("svd-float16", lambda a: np.linalg.svd(a), (HALF3,), np.linalg.svd, TypeError, ["numpy.linalg.svd", HALF]),
    ("det-vector", lambda a: np.linalg.det(a), (ONES3,), np.linalg.det, LinAlg, ["numpy.linalg.det", RANK]),
    ("det-non-square", lambda a: np.linalg.det(a), (ONES23,), np.linalg.det, LinAlg, ["numpy.linalg.det", SQUARE]),
    ("slogdet-vector", lambda a: np.linalg.slogdet(a), (ONES3,), np.linalg.slogdet, LinAlg,
     ["numpy.linalg.slogdet", RANK]),
    ("slogdet-non-square", lambda a: np.linalg.slogdet(a), (ONES23,), np.linalg.slogdet, LinAlg,
     ["numpy.linalg.slogdet", SQUARE]),
    ("slogdet-scalar", lambda a: np.linalg.slogdet(a), (np.float64(2.0),), np.linalg.slogdet, LinAlg,
     ["numpy.linalg.slogdet", "0-dimensional array given"]),
    ("cholesky-vector", lambda a: np.linalg.cholesky(a), (ONES3,), np.linalg.cholesky, LinAlg,
     ["numpy.linalg.cholesky", RANK]),
    ("cholesky-non-square", lambda a: np.linalg.cholesky(a), (ONES23,), np.linalg.cholesky, LinAlg,
     ["numpy.linalg.cholesky", SQUARE]),
    ("cholesky-float16", lambda a: np.linalg.cholesky(a), (HALF3,), np.linalg.cholesky, TypeError,
     ["numpy.linalg.cholesky", HALF]),
    ("qr-vector", lambda a: np.linalg.qr(a), (ONES3,), np.linalg.qr, LinAlg, ["numpy.linalg.qr", RANK]),
    ("qr-float16", lambda a: np.linalg.qr(a), (HALF3,), np.linalg.qr, TypeError, ["numpy.linalg.qr", HALF]),
    ("eigh-vector", lambda a: np.linalg.eigh(a), (ONES3,), np.linalg.eigh, LinAlg, ["numpy.linalg.eigh", RANK]),
    ("eigh-non-square", lambda a: np.linalg.eigh(a), (ONES23,), np.linalg.eigh, LinAlg,
     ["numpy.linalg.eigh", SQUARE]),
    ("eigvalsh-non-square", lambda a: np.linalg.eigvalsh(a), (ONES23,), np.linalg.eigvalsh, LinAlg,
     ["numpy.linalg.eigvalsh", SQUARE]),
    ("eigh-float16", lambda a: np.linalg.eigh(a), (HALF3,), np.linalg.eigh, TypeError, ["numpy.linalg.eigh", HALF]),
    ("lu-vector", lambda a: pla.lu(a), (ONES3,), sl.lu, ValueError, ["pullback.linalg.lu", RANK]),
    ("lu_factor-vector", lambda a: pla.lu_factor(a), (ONES3,), None, ValueError, ["pullback.linalg.lu_factor", RANK]),
    ("lu_factor-float16", lambda a: pla.lu_factor(a), (HALF3,), None, TypeError,
     ["pullback.linalg.lu_factor", HALF]),
    ("lu_solve-rows", lambda a, b: pla.lu_solve(pla.lu_factor(a), b), (E3, ONES4), lu_solve_np, ValueError,
     ["pullback.linalg.lu_solve", FIT, "lu (3, 3) does not fit b (4,)"]),
    ("cho_solve-rows", lambda c, b: pla.cho_solve((c, True), b), (E3, ONES4), lambda c, b: sl.cho_solve((c, True), b),
     ValueError, ["pullback.linalg.cho_solve", FIT, "c (3, 3)"]),
    ("cho_solve-vector-c", lambda c, b: pla.cho_solve((c, True), b), (ONES3, ONES3),
     lambda c, b: sl.cho_solve((c, True), b), ValueError,
     ["pullback.linalg.cho_solve", "1-dimensional factored matrix"]),
    ("cho_solve-non-square", lambda c, b: pla.cho_solve((c, True), b), (ONES23, np.ones(2)),
     lambda c, b: sl.cho_solve((c, True), b), ValueError, ["pullback.linalg.cho_solve", "must be square"]),
    ("cho_factor-non-square", lambda a: pla.cho_factor(a)[0], (ONES23,), lambda a: sl.cho_factor(a)[0], ValueError,
     ["pullback.linalg.cho_factor", SQUARE]),
    ("solve_triangular-rows", lambda a, b: pla.solve_triangular(a, b), (E3, ONES4), sl.solve_triangular,
     ValueError, ["pullback.linalg.solve_triangular", FIT]),
    ("solve_triangular-right", lambda a, b: pla.solve_triangular(a, b, side="right"), (E3, np.ones((2, 4))), None,
     ValueError, ["pullback.linalg.solve_triangular", "(..., k, 3)"]),
    ("solve_triangular-vector", lambda a, b: pla.solve_triangular(a, b), (ONES3, ONES3), sl.solve_triangular,
     ValueError, ["pullback.linalg.solve_triangular", RANK]),
    ("solve_triangular-non-square", lambda a, b: pla.solve_triangular(a, b), (ONES23, np.ones(2)),
     sl.solve_triangular, ValueError, ["pullback.linalg.solve_triangular", SQUARE]),
    ("solve_triangular-float16", lambda a, b: pla.solve_triangular(a, b), (HALF3, np.ones(3, np.float16)), None,
     TypeError, ["pullback.linalg.solve_triangular", HALF]),
    ("cholesky_inverse-vector", lambda a: pla.cholesky_inverse(a), (ONES3,), None, ValueError,
     ["pullback.linalg.cholesky_inverse", "1-dimensional factor"]),
    ("cholesky_inverse-non-square", lambda a: pla.cholesky_inverse(a), (ONES23,), None, ValueError,
     ["pullback.linalg.cholesky_inverse", "must be square"]),
    ("eig-non-square", lambda a: np.linalg.eig(a), (ONES23,), np.linalg.eig, LinAlg, ["numpy.linalg.eig", SQUARE]),
    ("expm-vector", lambda a: pla.expm(a), (ONES3,), None, ValueError, ["pullback.linalg.expm", RANK]),
    ("logdet-non-square", lambda a: pla.logdet(a), (ONES23,), None, ValueError, ["pullback.linalg.logdet", SQUARE]),
]


@pytest.mark.parametrize("fn, args, reference, expected, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_arguments_raise_numpys_error_naming_the_call(fn, args, reference, expected, fragments):
    with pytest.raises(expected) as e:
        pb.jit(fn)(*args)
    message = str(e.value)
    for fragment in fragments:
        assert fragment in message
    assert "test_linalg_errors.py:" in message  # the user's file:line
    assert isinstance(e.value, pb.TracingError)
    if reference is not None:  # NumPy/SciPy refuse the same concrete input with a type pullback's error has
        with pytest.raises(Exception) as ref:
            reference(*args)
        assert isinstance(e.value, type(ref.value)), (type(ref.value), ref.value)


def test_concrete_calls_name_pullback_linalg():
    """Outside any trace, pullback.linalg's functions compile themselves; errors still name them."""
    with pytest.raises(
            ValueError, match=r"pullback\.linalg\.solve: incompatible shapes: a \(3, 3\) does not fit b \(\)"):
        pla.solve(E3, 1.0)
    with pytest.raises(np.linalg.LinAlgError, match=r"pullback\.linalg\.svd: 1-dimensional"):
        pla.svd(ONES3)
    with pytest.raises(ValueError, match="pullback.linalg.lu_solve: incompatible shapes"):
        pla.lu_solve(pla.lu_factor(E3), ONES4)


def test_errors_inside_grad_name_the_numpy_call_and_line():
    def loss(a, b):
        return np.sum(np.linalg.solve(a, b))

    with pytest.raises(ValueError, match=r"test_linalg_errors\.py:\d+: numpy\.linalg\.solve: incompatible") as e:
        pb.grad(loss)(E3, ONES4)
    assert isinstance(e.value, pb.TracingError)


@pytest.mark.parametrize("fn, np_fn", [
    (lambda a: np.linalg.inv(a), np.linalg.inv),
    (lambda a: np.linalg.det(a), np.linalg.det),
    (lambda a: np.linalg.cholesky(a), np.linalg.cholesky),
    (lambda a: np.linalg.eigh(a)[0], np.linalg.eigvalsh),
    (lambda a: np.linalg.solve(a, np.arange(3)), lambda a: np.linalg.solve(a, np.arange(3))),
], ids=["inv", "det", "cholesky", "eigh", "solve"])
def test_integer_matrices_are_computed_in_float64(fn, np_fn):
    a = INT3 * 2 + np.ones((3, 3), np.int64)  # SPD
    out = pb.jit(fn)(a)
    want = np_fn(a)
    assert out.dtype == want.dtype == np.float64
    np.testing.assert_allclose(out, want, rtol=1e-12)
