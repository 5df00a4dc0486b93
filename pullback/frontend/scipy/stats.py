"""``scipy.stats`` distributions on traced arrays, called by SciPy's own names:
``scipy.stats.norm.logpdf(x, loc, scale)``, ``scipy.stats.gamma.cdf(x, a, scale=s)``,
``scipy.stats.multivariate_normal.logpdf(x, mean, cov)``.

SciPy's distributions are objects (``scipy.stats.norm`` is an instance of ``norm_gen``, an
``rv_continuous``) whose methods convert their arguments with ``np.asarray``; while a trace runs
each method below is shadowed on the distribution's class (``construct.implements_attribute``) by
one that calls the composition here on traced arguments, so frozen distributions
(``scipy.stats.norm(mu, sigma).logpdf(x)``, which call a fresh ``norm_gen``) trace too; a frozen
``multivariate_normal`` does not (it computes by itself). Arguments are SciPy's (positional or keyword), all of
them differentiable, computed in float64 as SciPy does. A continuous distribution is its
standard form at ``z = (x - loc) / scale``, the density divided by ``scale``; outside the
support the density is 0 and the distribution function 0 or 1, as in SciPy (the formulas see a
point inside the support there, so no NaN reaches a derivative). Derivatives SciPy's special
functions have no closed form for (the t, gamma and beta distribution functions in their shape
parameters) raise pullback's error naming the argument."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.special as sc
import scipy.stats

from pullback.errors import ArgumentError, TracingError
from pullback.frontend.construct import implements_attribute
from pullback.frontend.numpy import astype
from pullback.ir.tracer import Tracer, located

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LN2 = math.log(2)
_METHODS = ("logpdf", "pdf", "logcdf", "cdf", "logsf", "sf")


def _f64(x):
    return astype(x, np.float64) if isinstance(x, Tracer) else np.asarray(x, np.float64)


def _arguments(public: str, names: tuple[str, ...], defaults: dict, args, kwargs) -> list:
    """SciPy's arguments by name, positional or keyword, defaults filled in."""
    if len(args) > len(names):
        raise TracingError(located(f"{public} takes at most {len(names)} arguments ({', '.join(names)})"))
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in values:
            raise TracingError(located(f"{public} got an unexpected or repeated argument {k!r}"))
        values[k] = v
    missing = [n for n in names if n not in values and n not in defaults]
    if missing:
        raise TracingError(located(f"{public} is missing the argument(s) {', '.join(missing)}"))
    return [_f64(values.get(n, defaults.get(n))) for n in names]


class _Continuous:
    """A location-scale family: its standard form's log density, distribution functions and support."""

    def __init__(self, logpdf: Callable, cdf: Callable, sf: Callable, logcdf: Callable | None = None,
                 logsf: Callable | None = None, support: tuple[float, float] = (-np.inf, np.inf),
                 open_below: bool = False):
        self.logpdf, self.cdf, self.sf = logpdf, cdf, sf
        self.logcdf = logcdf or (lambda z, *shapes: np.log(cdf(z, *shapes)))
        self.logsf = logsf or (lambda z, *shapes: np.log(sf(z, *shapes)))
        self.support = support
        self.open_below = open_below  # the lower end of the support is not in it (lognorm at 0)


# value outside the support: (below, above)
_OUTSIDE = {"logpdf": (-np.inf, -np.inf), "pdf": (0.0, 0.0), "cdf": (0.0, 1.0), "sf": (1.0, 0.0),
            "logcdf": (-np.inf, 0.0), "logsf": (0.0, -np.inf)}


def _method(dist, family: _Continuous, method: str, shapes: tuple[str, ...]):
    public = f"scipy.stats.{dist.name}.{method}"
    names = ("x", *shapes, "loc", "scale")

    def call(*args, **kwargs):
        x, *params, loc, scale = _arguments(public, names, {"loc": 0.0, "scale": 1.0}, args, kwargs)
        z = (x - loc) / scale
        lo, hi = family.support
        below = (z <= lo if family.open_below else z < lo) if np.isfinite(lo) else None
        above = z > hi if np.isfinite(hi) else None
        inside = lo + 0.5 if not np.isfinite(hi) else (lo + hi) / 2  # stands in for points outside the support
        for outside in (below, above):
            z = z if outside is None else np.where(outside, inside, z)
        if method in ("logpdf", "pdf"):
            value = family.logpdf(z, *params) - np.log(scale)
            value = np.exp(value) if method == "pdf" else value
        else:
            value = getattr(family, method)(z, *params)
        low_value, high_value = _OUTSIDE[method]
        if above is not None:
            value = np.where(above, high_value, value)
        if below is not None:
            value = np.where(below, low_value, value)
        return value

    return public, call


def _register(dist, family: _Continuous, shapes: tuple[str, ...] = ()) -> None:
    for method in _METHODS:
        public, call = _method(dist, family, method, shapes)
        implements_attribute(type(dist), method, public)(call)


# --- the families ------------------------------------------------------------------------------

_register(scipy.stats.norm, _Continuous(
    logpdf=lambda z: -0.5 * z**2 - _LOG_SQRT_2PI, cdf=lambda z: sc.ndtr(z), sf=lambda z: sc.ndtr(-z),
    logcdf=lambda z: sc.log_ndtr(z), logsf=lambda z: sc.log_ndtr(-z)))


def _t_logpdf(z, df):
    return (sc.gammaln((df + 1) / 2) - sc.gammaln(df / 2) - 0.5 * np.log(df * np.pi)
            - (df + 1) / 2 * np.log1p(z**2 / df))


def _t_tail(z, df):
    """P(T > |z|) = I_{df / (df + z^2)}(df / 2, 1 / 2) / 2 (DLMF 8.17.2 and the t distribution's
    relation to the beta; the shape derivative is betainc's in a, which raises)."""
    return 0.5 * sc.betainc(df / 2, 0.5, df / (df + z**2))


_register(scipy.stats.t, _Continuous(
    logpdf=_t_logpdf, cdf=lambda z, df: np.where(z > 0, 1 - _t_tail(z, df), _t_tail(z, df)),
    sf=lambda z, df: np.where(z > 0, _t_tail(z, df), 1 - _t_tail(z, df))), ("df",))
_register(scipy.stats.gamma, _Continuous(
    logpdf=lambda z, a: sc.xlogy(a - 1, z) - z - sc.gammaln(a), cdf=lambda z, a: sc.gammainc(a, z),
    sf=lambda z, a: sc.gammaincc(a, z), support=(0.0, np.inf)), ("a",))
# I_x(a, b) = 1 - I_{1-x}(b, a) (DLMF 8.17.4): the upper tail without cancellation
_register(scipy.stats.beta, _Continuous(
    logpdf=lambda z, a, b: sc.xlogy(a - 1, z) + sc.xlog1py(b - 1, -z) - sc.betaln(a, b),
    cdf=lambda z, a, b: sc.betainc(a, b, z), sf=lambda z, a, b: sc.betainc(b, a, 1 - z),
    support=(0.0, 1.0)), ("a", "b"))
# the chi-squared is the gamma of shape df / 2 and scale 2
_register(scipy.stats.chi2, _Continuous(
    logpdf=lambda z, df: sc.xlogy(df / 2 - 1, z) - z / 2 - df / 2 * np.log(2.0) - sc.gammaln(df / 2),
    cdf=lambda z, df: sc.gammainc(df / 2, z / 2), sf=lambda z, df: sc.gammaincc(df / 2, z / 2),
    support=(0.0, np.inf)), ("df",))
_register(scipy.stats.expon, _Continuous(
    logpdf=lambda z: -z, cdf=lambda z: -np.expm1(-z), sf=lambda z: np.exp(-z),
    logcdf=lambda z: np.log(-np.expm1(-z)), logsf=lambda z: -z, support=(0.0, np.inf)))


def _laplace_logcdf(z):
    return np.where(z < 0, z - _LN2, np.log1p(-0.5 * np.exp(-np.abs(z))))


_register(scipy.stats.laplace, _Continuous(
    logpdf=lambda z: -np.abs(z) - _LN2,
    cdf=lambda z: np.where(z < 0, 0.5 * np.exp(-np.abs(z)), 1 - 0.5 * np.exp(-np.abs(z))),
    sf=lambda z: np.where(z > 0, 0.5 * np.exp(-np.abs(z)), 1 - 0.5 * np.exp(-np.abs(z))),
    logcdf=_laplace_logcdf, logsf=lambda z: _laplace_logcdf(-z)))
_register(scipy.stats.cauchy, _Continuous(
    logpdf=lambda z: -np.log(np.pi) - np.log1p(z**2), cdf=lambda z: 0.5 + np.arctan(z) / np.pi,
    sf=lambda z: 0.5 - np.arctan(z) / np.pi))
_register(scipy.stats.lognorm, _Continuous(
    logpdf=lambda z, s: -np.log(s * z) - _LOG_SQRT_2PI - np.log(z)**2 / (2 * s**2),
    cdf=lambda z, s: sc.ndtr(np.log(z) / s), sf=lambda z, s: sc.ndtr(-np.log(z) / s),
    logcdf=lambda z, s: sc.log_ndtr(np.log(z) / s), logsf=lambda z, s: sc.log_ndtr(-np.log(z) / s),
    support=(0.0, np.inf), open_below=True), ("s",))


# --- discrete -----------------------------------------------------------------------------------


def _discrete(dist, shapes: tuple[str, ...], logpmf: Callable) -> None:
    names = ("k", *shapes, "loc")
    for method in ("logpmf", "pmf"):
        public = f"scipy.stats.{dist.name}.{method}"

        def call(*args, public=public, method=method, **kwargs):
            k, *params, loc = _arguments(public, names, {"loc": 0.0}, args, kwargs)
            value = logpmf(k - loc, *params)
            return np.exp(value) if method == "pmf" else value

        implements_attribute(type(dist), method, public)(call)


_discrete(scipy.stats.poisson, ("mu",), lambda k, mu: sc.xlogy(k, mu) - sc.gammaln(k + 1) - mu)
_discrete(scipy.stats.binom, ("n", "p"), lambda k, n, p: sc.gammaln(n + 1) - sc.gammaln(k + 1)
          - sc.gammaln(n - k + 1) + sc.xlogy(k, p) + sc.xlog1py(n - k, -p))


def _discrete_tails(dist, shapes: tuple[str, ...], cdf: Callable, sf: Callable, upper: Callable | None = None) -> None:
    """``cdf``/``sf``/``logcdf``/``logsf`` of a distribution on the integers ``0 .. upper(*shapes)``
    (unbounded above without ``upper``), from its tails at an integer ``k`` inside the support:
    SciPy's ``k`` is floored (the distribution function is a step function: ``k`` has a zero
    derivative) and outside the support the value is 0 or 1, as in SciPy (the tails see ``k = 0``
    there, so no NaN reaches a derivative)."""
    names = ("k", *shapes, "loc")
    for method in ("logcdf", "cdf", "logsf", "sf"):
        public = f"scipy.stats.{dist.name}.{method}"

        def call(*args, public=public, method=method, **kwargs):
            k, *params, loc = _arguments(public, names, {"loc": 0.0}, args, kwargs)
            k = np.floor(k - loc)
            below = k < 0
            above = None if upper is None else k >= upper(*params)
            inside = np.where(below, 0.0, k) if above is None else np.where(below | above, 0.0, k)
            value = (cdf if method.endswith("cdf") else sf)(inside, *params)
            value = np.log(value) if method.startswith("log") else value
            low_value, high_value = _OUTSIDE[method]
            if above is not None:
                value = np.where(above, high_value, value)
            return np.where(below, low_value, value)

        implements_attribute(type(dist), method, public)(call)


# P(K <= k) = Q(k + 1, mu), the regularised upper incomplete gamma function (DLMF 8.4.10): its
# derivative in mu is -mu^k e^-mu / k!, minus the pmf at k
_discrete_tails(scipy.stats.poisson, ("mu",), lambda k, mu: sc.gammaincc(k + 1, mu),
                lambda k, mu: sc.gammainc(k + 1, mu))
# P(K <= k) = I_{1-p}(n - k, k + 1) (DLMF 8.17.5), for 0 <= k < n; its derivative in p is betainc's in x
# (closed form); in n it is betainc's in a, which raises
_discrete_tails(scipy.stats.binom, ("n", "p"), lambda k, n, p: sc.betainc(n - k, k + 1, 1 - p),
                lambda k, n, p: sc.betainc(k + 1, n - k, p), upper=lambda n, p: n)


# --- multivariate -------------------------------------------------------------------------------


def _mvn_parameters(mean, cov, x=None):
    """SciPy's ``_process_parameters_psd``: the dimension, the mean (a vector) and ``cov`` as a
    matrix (a scalar times the identity, a vector on the diagonal)."""
    cov = _f64(cov)
    d = cov.shape[0] if cov.ndim else np.size(mean) if mean is not None else 1  # SciPy's dimension
    if cov.ndim < 2:
        cov = np.diag(np.broadcast_to(cov, (d,)))
    mean = np.zeros(d) if mean is None else np.reshape(_f64(mean), (d,))
    return d, mean, cov


@implements_attribute(type(scipy.stats.multivariate_normal), "logpdf", "scipy.stats.multivariate_normal.logpdf")
def multivariate_normal_logpdf(x, mean=None, cov=1, allow_singular=False):
    """``-(d log 2 pi + log det C + |L^-1 (x - mean)|^2) / 2`` through the Cholesky factor
    ``C = L L^T`` and one triangular solve for all points (never an inverse). ``x`` holds points
    along its last axis (a 1-d ``x`` is one point, or points of dimension 1 when ``cov`` is).
    With ``allow_singular=True``, SciPy's pseudo-determinant and pseudo-inverse instead (below)."""
    from pullback.frontend import linalg

    d, mean, cov = _mvn_parameters(mean, cov)
    points = np.reshape(_f64(x), (-1, d))  # SciPy's layout: points along the first axes, coordinates along the last
    diff = points - mean
    if allow_singular:
        return _squeeze(_singular_logpdf(diff, cov))
    factor = linalg.cholesky(cov, lower=True) if isinstance(cov, Tracer) else np.linalg.cholesky(cov)
    solved = linalg.solve_triangular(factor, np.swapaxes(diff, 0, 1), 0, True)
    mahalanobis = np.sum(solved**2, axis=0)
    log_det = 2 * np.sum(np.log(np.diagonal(factor)))
    out = -0.5 * (mahalanobis + log_det) - d * _LOG_SQRT_2PI
    return _squeeze(out)


def _psd_spectrum(cov, vectors: bool):
    """SciPy's ``_PSD``: the eigenvalues (and vectors) of ``cov`` (its lower triangle, as SciPy's
    eigh reads), which of them count (``s > eps``, ``_eigvalsh_to_eps``: ``1e6`` float64 ulps
    times the largest ``|s|``), and ``eps``. Eigenvalues below the cutoff are masked, never
    dropped (the rank is a value, not a shape); they contribute no derivative, as in SciPy's
    formulas, which do not see them."""
    from pullback.frontend import linalg

    s, u = linalg.eigh(cov) if vectors else (linalg.eigvalsh(cov), None)
    eps = 1e6 * np.finfo(np.float64).eps * np.max(np.abs(s))
    kept = s > eps
    return s, u, kept, eps


def _masked_log(s, kept):
    """``log s`` where kept, 0 elsewhere (no NaN reaches a derivative from the masked values)."""
    return np.where(kept, np.log(np.where(kept, s, 1.0)), 0.0)


def _singular_logpdf(diff, cov):
    """``-(r log 2 pi + log pdet C + |diff U|^2) / 2`` with ``U = V diag(s^+)^(1/2)`` from ``C = V diag(s) V^T``,
    ``r`` the number of eigenvalues above the cutoff and ``s^+`` their reciprocals (0 for the others);
    ``-inf`` off the support: where ``diff`` has a component of norm ``1e3 eps`` or more along the
    eigenvectors of the masked eigenvalues (SciPy's ``_support_mask``)."""
    s, u, kept, eps = _psd_spectrum(cov, vectors=True)
    scale = np.where(kept, 1.0 / np.sqrt(np.where(kept, s, 1.0)), 0.0)
    mahalanobis = np.sum((diff @ (u * scale)) ** 2, axis=-1)
    rank = np.sum(kept.astype(np.float64))
    out = -0.5 * (rank * 2 * _LOG_SQRT_2PI + np.sum(_masked_log(s, kept)) + mahalanobis)
    residual = np.sqrt(np.sum((diff @ (u * ~kept)) ** 2, axis=-1))
    return np.where(residual < 1e3 * eps, out, -np.inf)


@implements_attribute(type(scipy.stats.multivariate_normal), "entropy", "scipy.stats.multivariate_normal.entropy")
def multivariate_normal_entropy(mean=None, cov=1):
    """``(r (log 2 pi + 1) + log pdet C) / 2``, SciPy's formula: the pseudo-determinant over the
    ``r`` eigenvalues above SciPy's cutoff (a singular ``C`` has a finite entropy on its support).
    Only eigenvalues are computed; ``d log s_i = v_i^T dC v_i`` needs no eigenvalue gaps."""
    _, _, cov = _mvn_parameters(mean, cov)
    s, _, kept, _ = _psd_spectrum(cov, vectors=False)
    rank = np.sum(kept.astype(np.float64))
    return 0.5 * (rank * (2 * _LOG_SQRT_2PI + 1) + np.sum(_masked_log(s, kept)))


def _squeeze(out):
    """SciPy's ``_squeeze_output``: every axis of length 1 goes."""
    return np.reshape(out, tuple(n for n in out.shape if n != 1))


@implements_attribute(type(scipy.stats.dirichlet), "logpdf", "scipy.stats.dirichlet.logpdf")
def dirichlet_logpdf(x, alpha):
    """``sum((alpha - 1) log x) - ln B(alpha)``, ``ln B = sum(gammaln(alpha)) - gammaln(sum(alpha))``,
    with SciPy's layout: the components along the first axis of ``x``, which may omit the last
    (it is then ``1 - sum``)."""
    x, alpha = _f64(x), _f64(alpha)
    if x.shape[0] + 1 == alpha.shape[0]:
        x = np.concatenate([x, 1 - np.sum(x, axis=0, keepdims=True)], axis=0)
    log_b = np.sum(sc.gammaln(alpha)) - sc.gammaln(np.sum(alpha))
    alpha = np.reshape(alpha, alpha.shape + (1,) * (x.ndim - 1))
    return _squeeze(np.sum(sc.xlogy(alpha - 1, x), axis=0) - log_b)


@implements_attribute(type(scipy.stats.multivariate_normal), "pdf", "scipy.stats.multivariate_normal.pdf")
def multivariate_normal_pdf(x, mean=None, cov=1, allow_singular=False):
    return np.exp(multivariate_normal_logpdf(x, mean, cov, allow_singular))


@implements_attribute(type(scipy.stats.dirichlet), "pdf", "scipy.stats.dirichlet.pdf")
def dirichlet_pdf(x, alpha):
    return np.exp(dirichlet_logpdf(x, alpha))


@implements_attribute(scipy.stats, "entropy", "scipy.stats.entropy")
def entropy(pk, qk=None, base=None, axis=0, *, nan_policy="propagate", keepdims=False):
    """SciPy's ``entropy``: ``-sum(p log p)`` of ``pk`` normalised along ``axis``, or with ``qk``
    (normalised too, the two broadcast) the relative entropy ``sum(p log(p / q))`` as
    ``xlogy(p, p) - xlogy(p, q)`` (SciPy's ``rel_entr``: 0 where ``p`` is, ``inf`` where only ``q``
    is 0); divided by ``log(base)``."""
    from pullback.frontend.numpy import unsupported

    if nan_policy not in ("propagate", "raise", "omit"):
        raise ArgumentError(located("scipy.stats.entropy: nan_policy must be one of {'propagate', 'raise', 'omit'}"))
    if nan_policy != "propagate":
        unsupported(f"scipy.stats.entropy with nan_policy={nan_policy!r}")
    if base is not None and base <= 0:
        raise ArgumentError(located("scipy.stats.entropy: `base` must be a positive number or `None`."))
    pk = pk if isinstance(pk, Tracer) else np.asarray(pk)
    if qk is not None:
        qk = qk if isinstance(qk, Tracer) else np.asarray(qk)
        shape = np.broadcast_shapes(np.shape(pk), np.shape(qk))
        pk, qk = np.broadcast_to(pk, shape), np.broadcast_to(qk, shape)
        qk = qk / np.sum(qk, axis=axis, keepdims=True)
    pk = pk / np.sum(pk, axis=axis, keepdims=True)
    terms = sc.entr(pk) if qk is None else sc.xlogy(pk, pk) - sc.xlogy(pk, qk)
    total = np.sum(terms, axis=axis, keepdims=keepdims)
    return total if base is None else total / math.log(base)
