"""scipy.stats distributions on traced arrays (pullback/frontend/scipy/stats.py), by SciPy's names:
values against SciPy (inside and outside the support, positional and keyword arguments),
gradients in every argument against finite differences (second order for the densities), the
clear error for shape derivatives without closed form, and that the distribution objects hold
no shadowing attributes after a trace."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
from pullback.testing import check_grads

import pullback as pb
from pullback.errors import TracingError

RNG = np.random.default_rng(1)
X = 0.1 + 0.8 * RNG.random(5)  # inside every support below: (0.1, 0.9)
METHODS = ("logpdf", "pdf", "logcdf", "cdf", "logsf", "sf")
# distribution, shape parameters, loc, scale, whether the distribution functions differentiate in the shapes
CONTINUOUS = {
    "norm": (st.norm, (), 0.3, 1.7, True), "t": (st.t, (3.5,), 0.2, 1.3, False),
    "gamma": (st.gamma, (2.5,), -0.1, 0.7, False), "beta": (st.beta, (2.0, 3.0), -0.05, 1.2, False),
    "expon": (st.expon, (), 0.05, 1.3, True), "laplace": (st.laplace, (), 0.2, 0.8, True),
    "cauchy": (st.cauchy, (), 0.1, 2.0, True), "lognorm": (st.lognorm, (0.6,), -0.05, 1.2, True),
    "chi2": (st.chi2, (3.0,), -0.05, 0.9, False),
}


@pytest.mark.parametrize("name", CONTINUOUS)
def test_continuous_values_and_gradients(name):
    dist, shapes, loc, scale, shape_derivatives = CONTINUOUS[name]
    for method in METHODS:
        def fn(*args, method=method, **kwargs):  # looked up at call time: the wrapper stands in while tracing
            return getattr(dist, method)(*args, **kwargs)

        positional = pb.jit(lambda x, *p: fn(x, *p))(X, *shapes, loc, scale)
        keyword = pb.jit(lambda x, loc, scale: fn(x, *shapes, loc=loc, scale=scale))(X, loc, scale)
        np.testing.assert_allclose(positional, fn(X, *shapes, loc, scale), rtol=1e-12)
        np.testing.assert_allclose(keyword, fn(X, *shapes, loc=loc, scale=scale), rtol=1e-12)
        if method.endswith("pdf") or shape_derivatives:
            check_grads(lambda x, *p: fn(x, *p), [X, *shapes, loc, scale])
        else:
            check_grads(lambda x, loc, scale: fn(x, *shapes, loc, scale), [X, loc, scale])


@pytest.mark.parametrize("name", CONTINUOUS)
def test_log_densities_second_order(name):
    dist, shapes, loc, scale, _ = CONTINUOUS[name]
    check_grads(lambda x, *p: dist.logpdf(x, *p), [X, *shapes, loc, scale], order=2)


def test_values_outside_the_support_match_scipy():
    x = np.array([-0.5, 0.0, 0.5, 1.0, 1.5])
    with np.errstate(all="ignore"):
        for dist, params in ((st.gamma, (2.0,)), (st.beta, (2.0, 3.0)), (st.expon, ()), (st.lognorm, (0.5,))):
            for method in METHODS:
                def fn(x, dist=dist, method=method, params=params):
                    return getattr(dist, method)(x, *params)

                np.testing.assert_allclose(pb.jit(fn)(x), fn(x), rtol=1e-12)
    g = pb.grad(lambda x: np.sum(st.gamma.logcdf(x, 2.0)) + np.sum(st.beta.pdf(x, 2.0, 3.0)))(x[[0, 2, 4]])
    assert np.all(np.isfinite(g))


def test_discrete_values_and_gradients():
    k = np.arange(8.0)
    for method in ("logpmf", "pmf"):
        def pois(*args, method=method, **kwargs):
            return getattr(st.poisson, method)(*args, **kwargs)

        def binom(*args, method=method):
            return getattr(st.binom, method)(*args)

        np.testing.assert_allclose(pb.jit(lambda mu: pois(k, mu))(2.3), pois(k, 2.3), rtol=1e-12)
        np.testing.assert_allclose(pb.jit(lambda mu: pois(k, mu=mu, loc=1))(2.3), pois(k, 2.3, loc=1), rtol=1e-12)
        np.testing.assert_allclose(pb.jit(lambda p: binom(k, 10, p))(0.3), binom(k, 10, 0.3), rtol=1e-12)
        check_grads(lambda mu: pois(k, mu), [2.3], order=2)
        check_grads(lambda p: binom(k, 10, p), [0.3], order=2)  # SciPy's binom is NaN at non-integer n


def _spd(a):
    return a @ a.T + np.eye(a.shape[0])


def test_multivariate_normal_logpdf():
    x, mean, a = RNG.standard_normal((6, 3)), RNG.standard_normal(3), RNG.standard_normal((3, 3))

    def f(x, mean, a):
        return st.multivariate_normal.logpdf(x, mean, _spd(a))

    np.testing.assert_allclose(pb.jit(f)(x, mean, a), f(x, mean, a), rtol=1e-12)
    np.testing.assert_allclose(pb.jit(f)(x[0], mean, a), f(x[0], mean, a), rtol=1e-12)
    for points, kw in ((x, dict(mean=np.zeros(3), cov=2.0)), (x[:, 0], dict(cov=2.0)), (x[:, 0], {})):
        np.testing.assert_allclose(pb.jit(lambda x, kw=kw: st.multivariate_normal.logpdf(x, **kw))(points),
                                   st.multivariate_normal.logpdf(points, **kw), rtol=1e-12)
    check_grads(f, [x, mean, a], order=2)
    source = pb.source(f, x, mean, a)
    assert "potrf" in source and "trsm" in source and "inv" not in source


def test_dirichlet_logpdf():
    alpha = np.array([1.5, 2.0, 3.0])
    p = RNG.dirichlet(alpha, 4).T
    np.testing.assert_allclose(pb.jit(lambda q, a: st.dirichlet.logpdf(q, a))(p, alpha), st.dirichlet.logpdf(p, alpha),
                               rtol=1e-12)
    np.testing.assert_allclose(pb.jit(lambda q, a: st.dirichlet.logpdf(q, a))(p[:, 0], alpha),
                               st.dirichlet.logpdf(p[:, 0], alpha), rtol=1e-12)
    check_grads(lambda q, a: st.dirichlet.logpdf(q, a), [p[:2], alpha], order=2)  # the last component is 1 - sum


def test_frozen_distributions():
    mu, sigma = 0.3, 1.4

    def f(mu, sigma, a):
        return (st.norm(mu, sigma).logpdf(X), st.norm(loc=mu, scale=sigma).cdf(X), st.gamma(a, scale=sigma).logpdf(X),
                st.poisson(a).logpmf(np.arange(4.0)))

    for ours, want in zip(pb.jit(f)(mu, sigma, 2.5), f(mu, sigma, 2.5)):
        np.testing.assert_allclose(ours, want, rtol=1e-12)
    check_grads(lambda mu, sigma, a: f(mu, sigma, a), [mu, sigma, 2.5], order=2)


def test_shape_derivative_without_closed_form_is_refused():
    with pytest.raises(TracingError, match="betainc has no derivative with respect to a"):
        pb.grad(lambda df: np.sum(st.t.cdf(X, df)))(3.5)
    with pytest.raises(TracingError, match="gammainc has no derivative with respect to a"):
        pb.grad(lambda a: np.sum(st.gamma.cdf(X, a)))(2.5)


def test_distributions_hold_no_wrappers_after_a_trace():
    names = ("logpdf", "pdf", "logcdf", "cdf", "logsf", "sf", "logpmf", "pmf", "entropy")
    dists = (st.norm, st.t, st.gamma, st.beta, st.expon, st.laplace, st.cauchy, st.lognorm, st.poisson, st.binom,
             st.multivariate_normal, st.dirichlet)
    before = {(type(d), n): vars(type(d)).get(n) for d in dists for n in names}
    pb.grad(lambda x: np.sum(st.norm.logpdf(x)) + st.multivariate_normal.logpdf(x, np.zeros(5)))(X)
    assert {(type(d), n): vars(type(d)).get(n) for d in dists for n in names} == before
    assert all(not set(names) & set(vars(d)) for d in dists)
    assert st.norm.logpdf.__func__ is st.rv_continuous.logpdf and st.poisson.pmf.__func__ is st.rv_discrete.pmf
    assert type(st.multivariate_normal).logpdf.__module__ == "scipy.stats._multivariate"
    np.testing.assert_allclose(st.norm.logpdf(0.0), -0.5 * np.log(2 * np.pi))


def test_multivariate_normal_and_dirichlet_pdfs():
    x, mean, a = RNG.standard_normal((6, 3)), RNG.standard_normal(3), RNG.standard_normal((3, 3))
    alpha = np.array([1.5, 2.0, 3.0])
    p = RNG.dirichlet(alpha, 4).T

    def f(x, mean, a, q, alpha):
        return st.multivariate_normal.pdf(x, mean, _spd(a)), st.dirichlet.pdf(q, alpha)

    for got, want in zip(pb.jit(f)(x, mean, a, p, alpha), f(x, mean, a, p, alpha)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    check_grads(lambda x, mean, a, q, alpha: sum(np.sum(o) for o in f(x, mean, a, q, alpha)),
                [x, mean, a, p[:2], alpha])


K = np.array([-2.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.5, 5.0, 9.0, 10.0, 12.0])  # below, inside and above binom's support


@pytest.mark.parametrize("method", ("cdf", "sf", "logcdf", "logsf"))
def test_discrete_distribution_functions(method):
    pois, binom = getattr(st.poisson, method), getattr(st.binom, method)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(pb.jit(lambda mu: pois(K, mu))(2.3), pois(K, 2.3), rtol=1e-12)
        np.testing.assert_allclose(pb.jit(lambda mu: pois(K, mu=mu, loc=1))(2.3), pois(K, 2.3, loc=1), rtol=1e-12)
        np.testing.assert_allclose(pb.jit(lambda p: binom(K, 10, p))(0.3), binom(K, 10, 0.3), rtol=1e-12)
        k, mu = np.round(RNG.random((4, 3)) * 6), 1.1 + RNG.random((4, 1))  # broadcasting, as autograd's test
        np.testing.assert_allclose(pb.jit(lambda mu: pois(k, mu))(mu), pois(k, mu), rtol=1e-12)
        assert pb.jit(lambda mu: pois(np.zeros((0, 2)), mu))(mu[:1]).shape == (0, 2)
        assert pb.jit(lambda mu: pois(np.ones(1), mu))(np.array([2.0])).shape == (1,)
    check_grads(lambda mu: pois(K[2:], mu), [2.3], order=2)
    check_grads(lambda mu: pois(k, mu), [mu], order=2)
    check_grads(lambda p: binom(K[2:-2], 10, p), [0.3], order=2)
    g = pb.grad(lambda mu, p: np.sum(pois(K[:2], mu)) + np.sum(binom(K[[0, -1]], 10, p)), argnums=(0, 1))(2.3, 0.3)
    np.testing.assert_array_equal(g, [0.0, 0.0])  # constant outside the support: no NaN from the tails there


def test_poisson_cdf_derivative_is_minus_the_pmf():
    g = pb.grad(lambda mu: np.sum(st.poisson.cdf(K, mu)))(2.3)
    np.testing.assert_allclose(g, -np.sum(st.poisson.pmf(np.floor(K), 2.3)), rtol=1e-12)


def test_binom_tails_in_n_are_refused():
    with pytest.raises(TracingError, match="betainc has no derivative with respect to a"):
        pb.grad(lambda n: np.sum(st.binom.cdf(K, n, 0.3)))(10.0)


SINGULAR = np.diag([1.0, 1.0, 0.0, 0.0])


def test_multivariate_normal_entropy():
    mean, a = RNG.standard_normal(4), RNG.standard_normal((4, 4))
    for cov in (_spd(a), 2.5, np.array([1.0, 2.0, 3.0, 4.0]), SINGULAR, _spd(a)[:1, :1]):
        m = mean[:np.shape(cov)[0]] if np.ndim(cov) else mean
        np.testing.assert_allclose(pb.jit(lambda m, c: st.multivariate_normal.entropy(m, c))(m, cov),
                                   st.multivariate_normal.entropy(m, cov), rtol=1e-12)
    np.testing.assert_allclose(pb.jit(lambda c: st.multivariate_normal.entropy(cov=c))(_spd(a)),
                               0.5 * np.linalg.slogdet(2 * np.pi * np.e * _spd(a))[1], rtol=1e-12)
    check_grads(lambda m, a: st.multivariate_normal.entropy(m, _spd(a)), [mean, a], order=2)
    g = pb.grad(lambda c: st.multivariate_normal.entropy(None, c))(_spd(a))
    lower = np.tril(np.linalg.inv(_spd(a))) * (2 - np.eye(4)) / 2  # the lower triangle is read, as SciPy's eigh
    np.testing.assert_allclose(g, lower, rtol=1e-10)
    g = pb.grad(lambda c: st.multivariate_normal.entropy(None, c))(SINGULAR)  # masked eigenvalues: no derivative
    np.testing.assert_allclose(g, np.diag([0.5, 0.5, 0.0, 0.0]), atol=1e-12)


@pytest.mark.parametrize("method", ("logpdf", "pdf"))
def test_multivariate_normal_allow_singular(method):
    f = getattr(st.multivariate_normal, method)
    x, mean, a = RNG.standard_normal((5, 4)), RNG.standard_normal(4), RNG.standard_normal((4, 4))
    x[:3, 2:] = 0.0  # on the singular covariance's support: the first three points
    with np.errstate(divide="ignore"):
        for args in ((x, 0 * mean, SINGULAR), (x[0], 0 * mean, SINGULAR), (x, mean, _spd(a)),
                     (x[:, :1], mean[:1], 2.0)):
            np.testing.assert_allclose(pb.jit(lambda *args: f(*args, allow_singular=True))(*args),
                                       f(*args, allow_singular=True), rtol=1e-12)
    check_grads(lambda x, m, a: f(x, m, _spd(a), allow_singular=True), [x, mean, a], order=2)

    def on_support(x, m):  # autograd's test_mvn_sing_cov: x varies along the support only
        return f(np.concatenate([x[:2], m[2:]]), m, SINGULAR, allow_singular=True)

    check_grads(on_support, [x[0], np.concatenate([mean[:2], np.zeros(2)])], order=2)
    g = pb.grad(lambda x: np.sum(st.multivariate_normal.logpdf(x, cov=SINGULAR, allow_singular=True)))(x[:3])
    np.testing.assert_allclose(g, -x[:3] * [1, 1, 0, 0], atol=1e-12)  # the pseudo-inverse's gradient


def test_entropy():
    p, q = 0.1 + RNG.random((4, 3)), 0.1 + RNG.random((4, 3))
    for kw in ({}, {"base": 2.0}, {"axis": 1}, {"axis": None}, {"axis": -1, "keepdims": True}):
        def shannon(p, kw=kw):
            return st.entropy(p, **kw)

        def relative(p, q, kw=kw):
            return st.entropy(p, q, **kw)

        np.testing.assert_allclose(pb.jit(shannon)(p), shannon(p), rtol=1e-12)
        np.testing.assert_allclose(pb.jit(relative)(p, q), relative(p, q), rtol=1e-12, atol=1e-15)
        check_grads(shannon, [p], order=2)
        check_grads(relative, [p, q], order=2)
    np.testing.assert_allclose(pb.jit(lambda p: st.entropy(p, q[:, :1]))(p), st.entropy(p, q[:, :1]), rtol=1e-12)
    z = np.array([0.0, 0.5, 0.5])  # SciPy's entr and rel_entr at 0: 0, and inf where only q is 0
    np.testing.assert_allclose(pb.jit(lambda p: (st.entropy(p), st.entropy(p, [0.2, 0.8, 0.0])))(z),
                               (np.log(2), np.inf))
    assert pb.jit(lambda p: st.entropy(p))(p.astype(np.float32)).dtype == np.float32
    assert pb.jit(lambda p: st.entropy(p))(np.ones((0, 2))).shape == (2,)
    with pytest.raises(TracingError, match="nan_policy='omit' is not supported"):
        pb.jit(lambda p: st.entropy(p, nan_policy="omit"))(p)
