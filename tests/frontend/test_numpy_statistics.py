"""Statistics, products, cumulative operations, differences and ranges: values against
NumPy (empty and size-1 axes, float32, complex, integers), derivatives against finite
differences to second order, and the derivatives of products at exact zeros against the
analytic formula."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb
from pullback.tree import flatten
from tests.primitives.cases import make_arg


def _assert_matches(fn, *args):
    """pullback's compiled ``fn`` equals NumPy's, in value, shape and dtype."""
    with np.errstate(all="ignore"):
        want = fn(*args)
        ours = pb.jit(fn)(*args)
    ours, want = flatten(ours)[0], flatten(want)[0]
    assert len(ours) == len(want)
    for o, w in zip(ours, want):
        w = np.asarray(w)
        assert np.shape(o) == w.shape
        assert np.asarray(o).dtype == w.dtype, (np.asarray(o).dtype, w.dtype)
        tol = 1e-5 if w.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(o, w, rtol=tol, atol=tol)


SHAPES = [(3, 4), (1, 4), (3, 1), (0, 3), (2, 3, 2)]
DTYPES = ["float64", "float32", "complex128"]


def _axes_of(shape):
    return [None, 0, -1] + ([(0, 2)] if len(shape) == 3 else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_moments_and_products_match_numpy(shape, dtype, rng):
    x = make_arg(rng, shape, dtype, False)

    def f(x):  # every axis and keepdims in one program
        out = [x.std(), x.prod(axis=0), x.cumsum(), x.cumprod(axis=-1), np.var(x, correction=1)]
        for axis in _axes_of(shape):
            for keepdims in (False, True):
                out += [np.var(x, axis=axis, keepdims=keepdims), np.std(x, axis=axis, ddof=1, keepdims=keepdims),
                        np.prod(x, axis=axis, keepdims=keepdims)]
            if axis is None or isinstance(axis, int):
                out += [np.cumsum(x, axis=axis), np.cumprod(x, axis=axis)]
        return tuple(out)

    _assert_matches(f, x)


def test_dtype_arguments_and_integers_match_numpy(rng):
    x = rng.standard_normal((3, 4))
    _assert_matches(lambda x: (np.var(x, dtype=np.float32), np.std(x, axis=1, dtype=np.complex128),
                               np.prod(x, dtype=np.float32), np.cumsum(x, dtype=np.complex128)), x)
    k = np.arange(1, 7).reshape(2, 3)
    # integer input: sums and products in int64, moments in float64, next to a traced float
    _assert_matches(lambda x, k: (np.cumsum(k), np.prod(k, axis=0), np.cumprod(k > 2, axis=1), np.var(k) * x[0, 0],
                                  np.diff(k > 2), np.average(k, weights=k)), x, k)


def test_diff_matches_numpy(rng):
    x = rng.standard_normal((3, 5))
    _assert_matches(lambda x: (np.diff(x), np.diff(x, 2, axis=0), np.diff(x, 0), np.diff(x, 3),
                               np.diff(x, prepend=0.0), np.diff(x, axis=0, append=x[:1]),
                               np.diff(x, prepend=x[0, 0], append=np.float32(2))), x)
    _assert_matches(lambda x: (np.diff(x), np.diff(x, 5)), x[0].astype(np.complex64))
    _assert_matches(lambda x: np.ediff1d(x, to_begin=x[0, :2], to_end=-1.0), x)
    _assert_matches(lambda x: (np.diff(x[:, :1]), np.diff(x[:0], axis=0), np.ediff1d(x[0])), x)


@pytest.mark.parametrize("num,endpoint", [(5, True), (5, False), (1, True), (1, False), (0, True), (2, True)])
def test_linspace_matches_numpy(num, endpoint, rng):
    a, b = rng.standard_normal(3), rng.standard_normal((2, 1))
    _assert_matches(lambda a, b: (np.linspace(a[0], b[0, 0], num, endpoint),
                                  np.linspace(a, b, num, endpoint, axis=-1),
                                  np.linspace(0.0, a, num, endpoint, retstep=True),
                                  np.linspace(a, 2, num, endpoint, axis=1, dtype=np.float32)), a, b)


def test_linspace_complex_and_float32_bounds(rng):
    z = make_arg(rng, (2,), "complex128", False)
    _assert_matches(lambda z: np.linspace(z[0], z[1], 4), z)
    _assert_matches(lambda x: np.linspace(x, 1.0, 3), np.float32(0.25))


def test_average_matches_numpy(rng):
    x, w = rng.standard_normal((3, 4)), rng.random((3, 4)) + 0.5
    _assert_matches(lambda x, w: (np.average(x), np.average(x, axis=0), np.average(x, weights=w),
                                  np.average(x, axis=1, weights=w[0], returned=True),
                                  np.average(x, axis=(0, 1), weights=w, keepdims=True),
                                  np.average(x, axis=0, returned=True)), x, w)


# --- derivatives ------------------------------------------------------------------------------------


GRAD_FUNCTIONS = [
    ("var", lambda x: np.var(x, axis=0, ddof=1) + np.var(x)),
    ("std", lambda x: np.std(x, axis=-1, keepdims=True) * x),
    ("prod", lambda x: (np.prod(x, axis=1), x.prod())),
    ("cumsum", lambda x: np.cumsum(x, axis=0) * np.cumsum(x)[:4]),
    ("cumprod", lambda x: (np.cumprod(x, axis=1), x.cumprod())),
    ("diff", lambda x: np.diff(x, 2, axis=-1, prepend=x[:, :1]) ** 2),
    ("average", lambda x: np.average(x, axis=1, weights=x[0] ** 2 + 1)),
    ("linspace", lambda x: np.linspace(x[0], x[1] ** 2, 5, axis=1, retstep=True)),
    ("ediff1d", lambda x: np.ediff1d(x, to_begin=x[0, :1]) ** 2),
]


COMPLEX_TOO = {"var", "std", "prod", "cumprod", "linspace"}


@pytest.mark.parametrize("name,dtype", [(n, d) for n, _ in GRAD_FUNCTIONS for d in ("float64", "complex128")
                                        if d == "float64" or n in COMPLEX_TOO])
def test_derivatives_to_second_order(name, dtype, rng):
    fn = dict(GRAD_FUNCTIONS)[name]
    x = make_arg(rng, (3, 4), dtype, False)
    with np.errstate(all="ignore"):
        check_grads(fn, [x], order=2)


def test_derivatives_float32(rng):
    x = make_arg(rng, (3, 4), "float32", True)
    check_grads(lambda x: (np.std(x, axis=0), np.prod(x, axis=1), np.cumprod(x, axis=0)), [x])


def _prod_gradient(x):
    """d prod(x) / dx_k = prod_{j != k} x_j."""
    return np.array([np.prod(np.delete(x, k)) for k in range(x.size)])


def _cumprod_jacobian(x):
    """d y_i / dx_k = prod_{j <= i, j != k} x_j for k <= i, else 0."""
    n = x.size
    return np.array([[np.prod(np.delete(x[:i + 1], k)) if k <= i else 0.0 for k in range(n)] for i in range(n)])


ZEROS = [np.array([2.0, 0.0, 3.0, -1.5]), np.array([0.0, 2.0, 0.0, 3.0]), np.array([1.5, -2.0, 0.5, 0.0]),
         np.array([0.0, 0.0, 0.0, 0.0])]


@pytest.mark.parametrize("x", ZEROS, ids=str)
def test_product_derivatives_at_zeros_are_exact(x, rng):
    assert np.array_equal(pb.grad(np.prod)(x), _prod_gradient(x))
    t, c = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    jac = _cumprod_jacobian(x)
    np.testing.assert_allclose(pb.jvp(np.cumprod, (x,), (t,))[1], jac @ t, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(pb.vjp(np.cumprod, x)[1](c)[0], jac.T @ c, rtol=1e-14, atol=1e-14)
    reversed_ = pb.vjp(lambda x: np.cumprod(x[::-1])[::-1], x)[1](c)[0]
    np.testing.assert_allclose(reversed_, _cumprod_jacobian(x[::-1]).T[::-1, ::-1] @ c, rtol=1e-14, atol=1e-14)


def test_product_derivatives_at_zeros_second_order():
    x = np.array([0.0, 2.0, 0.0, 3.0])
    check_grads(lambda x: (np.prod(x), np.cumprod(x), np.prod(x.reshape(2, 2), axis=0)), [x], order=2)


def test_prod_hessian_at_zeros_is_exact():
    """d^2 prod(x) / dx_k dx_l = prod_{j != k, l} x_j (k != l), 0 on the diagonal."""
    x = np.array([0.0, 2.0, 0.0, 3.0, -1.0])
    n = x.size
    hessian = np.array([[0.0 if k == l else np.prod(np.delete(x, [k, l])) for l in range(n)] for k in range(n)])
    for k in range(n):
        e = np.eye(n)[k]
        np.testing.assert_allclose(pb.jvp(pb.grad(np.prod), (x,), (e,))[1], hessian[k], atol=1e-14)


def test_cumprod_jacobian_complex_with_zeros(rng):
    x = make_arg(rng, (5,), "complex128", False)
    x[[1, 3]] = 0
    t = make_arg(rng, (5,), "complex128", False)
    np.testing.assert_allclose(pb.jvp(np.cumprod, (x,), (t,))[1], _cumprod_jacobian(x) @ t, rtol=1e-13, atol=1e-13)


def test_cumsum_transpose_is_the_reversed_cumulative_sum(rng):
    """Reverse mode of a cumulative sum prints as one reversed cumulative sum."""
    src = pb.source(pb.grad(lambda x: np.sum(np.cumsum(x, axis=1) ** 2)), rng.standard_normal((2, 3)))
    assert "np.cumsum(" in src and "[:, ::-1], axis=1)[:, ::-1]" in src
    c = rng.standard_normal((2, 3))
    _, vjp_fn = pb.vjp(lambda x: np.cumsum(x, axis=1), np.zeros((2, 3)))
    np.testing.assert_allclose(vjp_fn(c)[0], np.cumsum(c[:, ::-1], axis=1)[:, ::-1])


def test_printed_forms_read_like_numpy(rng):
    x = rng.standard_normal((3, 4))
    src = pb.source(lambda x: (np.prod(x, axis=0), np.cumsum(x), np.cumprod(x, axis=1), x.std()), x)
    assert "np.prod(x, axis=0)" in src and "np.cumprod(x, axis=1)" in src and "np.cumsum(" in src


def test_item_and_errors_name_the_user_line():
    with pytest.raises(pb.ConcretizationError, match=r"x.item\(\)"):
        pb.make_ir(lambda x: x.item())(np.ones(3))
    with pytest.raises(pb.TracingError, match="axis 2 is out of bounds"):
        pb.make_ir(lambda x: np.cumsum(x, axis=2))(np.ones((2, 3)))
    with pytest.raises(pb.TracingError, match="order must be non-negative"):
        pb.make_ir(lambda x: np.diff(x, -1))(np.ones(3))
    with pytest.raises(pb.TracingError, match="length of weights"):
        pb.make_ir(lambda x: np.average(x, axis=0, weights=x[0]))(np.ones((2, 3)))


def test_products_over_all_axis_combinations_match_numpy(rng):
    x = rng.standard_normal((2, 3, 2))
    for r in range(4):
        for axes in itertools.combinations(range(3), r):
            _assert_matches(lambda x, axes=axes: (np.prod(x, axis=axes), np.var(x, axis=axes)), x)
    assert math.isclose(pb.jit(np.prod)(x), np.prod(x))


def test_var_method_matches_numpy():
    """``x.var()`` is NumPy's method (the tracer's IR value lives in ``ssa``, not ``var``)."""
    x = np.random.default_rng(3).standard_normal((3, 4))
    got = pb.jit(lambda x: (x.var(), x.var(axis=0, ddof=1), x.var(1, keepdims=True)))(x)
    for g, w in zip(got, (x.var(), x.var(axis=0, ddof=1), x.var(1, keepdims=True))):
        np.testing.assert_allclose(g, w, rtol=1e-13)
    np.testing.assert_allclose(pb.grad(lambda x: x.var())(x), 2 * (x - x.mean()) / x.size, atol=1e-15)


GRADIENT_FORMS = [((), {}), ((0.5,), {}), ((0.5, 2.0), {}), (("coords",), {"axis": 0}), ((), {"edge_order": 2}),
                  (("coords", 1.5), {"edge_order": 2}), ((), {"axis": 1}), ((), {"axis": (1, 0)})]


@pytest.mark.parametrize("form", GRADIENT_FORMS, ids=str)
def test_np_gradient_matches_numpy_and_finite_differences(form):
    rng = np.random.default_rng(0)
    f, coords = rng.standard_normal((5, 4)), np.cumsum(rng.random(5)) + 0.1
    args, kw = form
    args = tuple(coords if a == "coords" else a for a in args)
    got, want = pb.jit(lambda f: np.gradient(f, *args, **kw))(f), np.gradient(f, *args, **kw)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    check_grads(lambda f: np.gradient(f, *args, **kw), [f], order=2)


def test_std_over_one_element_has_zero_derivative():
    """The function is constant there (autograd's replay found NaN from sqrt at 0)."""
    np.testing.assert_array_equal(pb.grad(lambda x: np.std(x, axis=0).sum())(np.ones((1, 3))), np.zeros((1, 3)))
    assert pb.grad(np.std)(2.0) == 0.0
    np.testing.assert_array_equal(pb.jit(lambda x: np.std(x, axis=0))(np.array([[np.inf, 1.0]])),
                                  np.std(np.array([[np.inf, 1.0]]), axis=0))
    check_grads(np.std, [0.3 + 0.1j], order=2)
    check_grads(lambda z: np.std(z, axis=0), [np.array([[0.2 - 0.5j, 1.0 + 1j]])], order=2)


QUANTILE_METHODS = ["linear", "lower", "higher", "nearest", "midpoint", "hazen", "weibull", "median_unbiased",
                    "normal_unbiased", "interpolated_inverted_cdf"]


def _order_statistics(a):
    out = [np.median(a), np.median(a, axis=0), np.median(a, axis=(0, 1), keepdims=True),
           np.median(a, axis=1, keepdims=True)]
    for m in QUANTILE_METHODS:
        out += [np.quantile(a, 0.3, method=m), np.quantile(a, [0.0, 0.25, 1.0], axis=1, method=m),
                np.percentile(a, 37.5, axis=0, method=m, keepdims=True),
                np.percentile(a, [[10, 90]], axis=-1, method=m), np.quantile(a, 1, method=m)]
    return tuple(out)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_median_quantile_percentile_match_numpy(dtype, rng):
    a = (rng.standard_normal((4, 5)) * 4).astype(dtype)
    _assert_matches(_order_statistics, a)
    _assert_matches(lambda a: (np.median(a[0]), np.quantile(a[:, 0], 0.5), np.median(a[:1, :1])), a)


def test_order_statistics_derivatives(rng):
    a = rng.standard_normal((4, 5))  # distinct values: the sort's order holds in a neighbourhood
    check_grads(_order_statistics, [a])
    np.testing.assert_allclose(pb.grad(np.median)(np.array([3.0, 1.0, 2.0, 4.0])), [0.5, 0, 0.5, 0])


def _covariances(x, y, w):
    return (np.cov(x), np.cov(x, rowvar=False), np.cov(x[0]), np.cov(x, y), np.cov(x, bias=True), np.cov(x, ddof=2),
            np.cov(x, aweights=w), np.cov(x, fweights=[1, 2, 1, 3, 1]),
            np.cov(x, fweights=[1, 2, 1, 3, 1], aweights=w, ddof=1), np.corrcoef(x), np.corrcoef(x, y),
            np.corrcoef(x[0]), np.corrcoef(x, rowvar=False), np.cov(x + 1j * x[::-1]), np.corrcoef(x + 1j * x[::-1]))


def test_cov_and_corrcoef(rng):
    x, y, w = rng.standard_normal((4, 5)), rng.standard_normal((2, 5)), rng.uniform(0.5, 2, 5)
    _assert_matches(_covariances, x, y, w)
    check_grads(_covariances, [x, y, w])


def test_order_statistics_refusals():
    with pytest.raises(pb.TracingError, match="range"):
        pb.jit(lambda a: np.quantile(a, 1.5))(np.ones(3))
    with pytest.raises(pb.TracingError, match="np.quantile of a traced q"):
        pb.jit(lambda a, q: np.quantile(a, q))(np.ones(3), 0.5)
    with pytest.raises(pb.TracingError, match="real numbers"):
        pb.jit(np.median)(np.ones(3, complex))
