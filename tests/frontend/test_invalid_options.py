"""Options NumPy and SciPy refuse are refused as they refuse them (issue 25).

Each entry of ``OPTIONS`` calls one function pullback implements with one option (``kind``,
``order``, ``casting``, ``mode``, ``norm``, ``ord``, ``method``, a LAPACK driver, ...) set to a
value. On a NumPy array and on a tracer (``pb.jit``) the same value must give the same outcome:
the same exception type (pullback's errors subclass NumPy's ``ValueError``/``TypeError``), or the
same result; or, for a value NumPy takes that pullback does not compute, pullback's "is not
supported". ``test_invalid_option`` runs each entry with a value its function refuses;
``test_option_values`` draws entries and values from ``VALUES`` (hypothesis; the default run is
a small derandomised sample, ``--runslow`` more).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import scipy.linalg
import scipy.signal
import scipy.special
import scipy.stats
from hypothesis import given
from hypothesis import strategies as st

import pullback as pb
from pullback.errors import TracingError
from tests.regressions.test_random_programs import examples

V4 = np.array([0.5, -1.5, 2.0, 1.0])
X23 = np.arange(1.0, 7.0).reshape(2, 3)
A = np.array([[3.0, 0.5, 0.2], [0.1, 2.5, 0.3], [0.4, 0.2, 4.0]])
S = A @ A.T

# name -> (function of the operand and the option's value, the operand, a value the function refuses)
OPTIONS: dict[str, tuple[Callable, np.ndarray, object]] = {
    "sort-kind": (lambda a, v: np.sort(a, kind=v), V4, "bogus"),
    "sort-order": (lambda a, v: np.sort(a, order=v), V4, "x"),
    "argsort-kind": (lambda a, v: np.take_along_axis(a, np.argsort(a, kind=v), 0), V4, "bogus"),
    "method_sort-kind": (lambda a, v: np.sort(a.copy(), kind=v), V4, "x"),
    "reshape-order": (lambda a, v: np.reshape(a, (3, 2), order=v), X23, "Q"),
    "method_reshape-order": (lambda a, v: a.reshape((3, 2), order=v), X23, "CC"),
    "ravel-order": (lambda a, v: np.ravel(a, order=v), X23, "Q"),
    "flatten-order": (lambda a, v: a.flatten(order=v), X23, ""),
    "copy-order": (lambda a, v: np.copy(a, order=v), X23, "Q"),
    "method_copy-order": (lambda a, v: a.copy(order=v), X23, "Q"),
    "zeros_like-order": (lambda a, v: a + np.zeros_like(a, order=v), X23, "Q"),
    "ones_like-order": (lambda a, v: a * np.ones_like(a, order=v), X23, 1),
    "full_like-order": (lambda a, v: a + np.full_like(a, 2.0, order=v), X23, "Q"),
    "astype-casting": (lambda a, v: a.astype(np.float32, casting=v), X23, "bogus"),
    "astype-order": (lambda a, v: a.astype(np.float32, order=v), X23, "Q"),
    "concatenate-casting": (lambda a, v: np.concatenate([a, a], casting=v), X23, "bogus"),
    "concatenate-dtype-casting": (lambda a, v: np.concatenate([a, a], dtype=np.float32, casting=v), X23, "safe"),
    "stack-casting": (lambda a, v: np.stack([a, a], casting=v), X23, "bogus"),
    "vstack-casting": (lambda a, v: np.vstack([a, a], casting=v), X23, "bogus"),
    "hstack-casting": (lambda a, v: np.hstack([a, a], casting=v), X23, None),
    "einsum-casting": (lambda a, v: np.einsum("ij->i", a, casting=v), X23, "bogus"),
    "einsum-dtype-casting": (lambda a, v: np.einsum("ij->i", a, dtype=np.float32, casting=v), X23, "safe"),
    "einsum-order": (lambda a, v: np.einsum("ij->i", a, order=v), X23, "Q"),
    "ufunc-casting": (lambda a, v: np.add(a, a, casting=v), X23, "bogus"),
    "ufunc-order": (lambda a, v: np.exp(a, order=v), X23, "Q"),
    "clip-casting": (lambda a, v: np.clip(a, 0.0, 1.0, casting=v), V4, "bogus"),
    "take-mode": (lambda a, v: np.take(a, [0, 3, -1], mode=v), V4, "bogus"),
    "method_take-mode": (lambda a, v: a.take([1, 2], mode=v), V4, "r"),
    "pad-mode": (lambda a, v: np.pad(a, 1, mode=v), V4, "bogus"),
    "meshgrid-indexing": (lambda a, v: np.meshgrid(a, a[:2], indexing=v)[0], V4, "bogus"),
    "round-decimals": (lambda a, v: np.round(a, v), V4, 1.5),
    "nan_to_num-nan": (lambda a, v: np.nan_to_num(a, nan=v), V4, "x"),
    "diff-n": (lambda a, v: np.diff(a, v), V4, -1),
    "linspace-num": (lambda a, v: np.linspace(a, 2 * a, v), V4, -1),
    "gradient-edge_order": (lambda a, v: np.gradient(a, edge_order=v), V4, 3),
    "var-ddof-correction": (lambda a, v: np.var(a, ddof=1, correction=v), V4, 1),
    "fft-norm": (lambda a, v: np.fft.fft(a, norm=v), V4, "bogus"),
    "rfft-norm": (lambda a, v: np.fft.rfft(a, norm=v), V4, "Ortho"),
    "irfft-norm": (lambda a, v: np.fft.irfft(a, norm=v), V4, "bogus"),
    "fft2-norm": (lambda a, v: np.fft.fft2(a, norm=v), X23, "bogus"),
    "fft-n": (lambda a, v: np.fft.fft(a, n=v), V4, 0),
    "norm-ord-vector": (lambda a, v: np.linalg.norm(a, ord=v), V4, "fro"),
    "norm-ord-matrix": (lambda a, v: np.linalg.norm(a, ord=v), A, 3),
    "qr-mode": (lambda a, v: np.linalg.qr(a, mode=v)[0], A, "bogus"),
    "eigh-UPLO": (lambda a, v: np.linalg.eigh(a, UPLO=v)[0], S, "Q"),
    "scipy_convolve-mode": (lambda a, v: scipy.signal.convolve(a, a, mode=v), V4, "bogus"),
    "scipy_convolve-method": (lambda a, v: scipy.signal.convolve(a, a, method=v), V4, "bogus"),
    "scipy_correlate-mode": (lambda a, v: scipy.signal.correlate(a, a, mode=v), V4, "bogus"),
    "scipy_solve-assume_a": (lambda a, v: scipy.linalg.solve(a, a[0], assume_a=v), S, "bogus"),
    "scipy_qr-mode": (lambda a, v: scipy.linalg.qr(a, mode=v)[-1], A, "bogus"),
    "scipy_svd-lapack_driver": (lambda a, v: scipy.linalg.svd(a, lapack_driver=v)[1], A, "bogus"),
    "scipy_lstsq-lapack_driver": (lambda a, v: scipy.linalg.lstsq(a, a[0], lapack_driver=v)[0], A, "bogus"),
    "scipy_eigh-driver": (lambda a, v: scipy.linalg.eigh(a, driver=v)[0], S, "bogus"),
    "scipy_norm-ord": (lambda a, v: scipy.linalg.norm(a, ord=v), A, "bogus"),
    "scipy_entropy-nan_policy": (lambda a, v: scipy.stats.entropy(np.abs(a), nan_policy=v), V4, "bogus"),
    "scipy_entropy-base": (lambda a, v: scipy.stats.entropy(np.abs(a), base=v), V4, -1.0),
}

# spellings the converters take or refuse (prefixes, case, empty), other options' values, non-strings
VALUES = ["bogus", "", "q", "Q", "quick", "h", "m", "S", "stable", "mergesort", "C", "c", "F", "f", "A", "a", "K",
          "k", "CC", "clip", "wrap", "raise", "r", "same_kind", "safe", "no", "equiv", "unsafe", "same_value",
          "ortho", "forward", "backward", "Ortho", "full", "same", "valid", "direct", "fft", "auto", "economic", "raw",
          "reduced", "complete", "gesvd", "gesdd", "gelsy", "evd", "evx", "gv", "xy", "ij", "edge", "reflect", "fro",
          "nuc", "L", "U", "pos", "sym", "propagate", "omit", None, 0, 1, 2, 3, 5, -1, 1.5, np.inf, True, b"q"]

# what may differ in pullback's outcome: a value NumPy takes and pullback does not compute
NOT_SUPPORTED = "is not supported"


def _outcome(fn: Callable, a):
    try:
        with np.errstate(all="ignore"):
            return np.asarray(fn(a)), None
    except Exception as e:  # noqa: BLE001  (whatever NumPy raises is the oracle)
        return None, e


def _builtin(error: BaseException) -> type:
    """The built-in exception class NumPy's or SciPy's error is (its most specific one). An
    AttributeError is NumPy's accident (a string method called on a number): any error will do."""
    if isinstance(error, AttributeError):
        return Exception
    return next(c for c in type(error).__mro__ if c.__module__ == "builtins")


def check_option(name: str, value) -> None:
    fn, a, _ = OPTIONS[name]
    expected, refused = _outcome(lambda a: fn(a, value), a)
    got, error = _outcome(pb.jit(lambda a: fn(a, value)), a)
    if refused is not None:
        assert error is not None, f"{name}={value!r}: NumPy raises {refused!r}, pullback returns {got}"
        assert isinstance(error, _builtin(refused)), f"{name}={value!r}: NumPy raises {refused!r}, pullback {error!r}"
        return
    if error is not None:
        assert isinstance(error, TracingError) and NOT_SUPPORTED in str(error), (
            f"{name}={value!r}: NumPy returns, pullback raises {error!r}")
        return
    assert got.shape == expected.shape and got.dtype == expected.dtype, f"{name}={value!r}"
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9, err_msg=f"{name}={value!r}")


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_invalid_option(name):
    fn, a, invalid = OPTIONS[name]
    with pytest.raises(Exception):  # noqa: B017,PT011  (the oracle says which; check_option compares)
        fn(a, invalid)
    check_option(name, invalid)


@examples(600, sampled=60)
@given(st.sampled_from(sorted(OPTIONS)), st.sampled_from(VALUES))
def test_option_values(name, value):
    check_option(name, value)


@pytest.mark.parametrize("kind", ["stable", "mergesort", "m", "S"])
def test_sort_kind_spellings_numpy_reads_as_stable(kind):
    """np.argsort reads every kind starting 'm' or 's' as a stable sort: ties keep their order."""
    x = np.random.default_rng(0).integers(0, 3, 200).astype(float)  # ties a quicksort reorders
    assert (np.argsort(x) != np.argsort(x, kind="stable")).any()
    np.testing.assert_array_equal(pb.jit(lambda x: np.argsort(x, kind=kind))(x), np.argsort(x, kind="stable"))


@pytest.mark.parametrize("assume_a", ["diagonal", "upper triangular", "lower triangular", "pos", "sym", "her"])
@pytest.mark.parametrize("lower", [False, True])
def test_inverse_reads_what_assume_a_names(assume_a, lower):
    """scipy.linalg.inv with a structured assume_a reads only that part of a (one triangle, the
    diagonal), as scipy.linalg.solve of the identity with that assume_a does (not the whole matrix)."""
    a = S + np.triu(A, 1)  # neither symmetric nor triangular
    expected = scipy.linalg.solve(a, np.eye(3), assume_a=assume_a, lower=lower)
    np.testing.assert_allclose(pb.jit(lambda a: scipy.linalg.inv(a, assume_a=assume_a, lower=lower))(a), expected,
                               rtol=1e-10)
    g = pb.grad(lambda a: np.sum(scipy.linalg.inv(a, assume_a=assume_a, lower=lower) ** 2))(a)
    assert g.shape == a.shape
