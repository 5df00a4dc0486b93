"""Every rule with any operand constant (issue 26).

A rule may see, for each operand, a tracer of an input, a tracer of a constant (a float array the
function reads from its scope, ``Builder.read``), a NumPy array made inside the function, or a Python
scalar. The registry-wide test runs every case of ``tests/primitives/*_cases.py`` (the forward, JVP
and linear cases) with its operands made constant one at a time, each in every way it can be, and
checks the value against NumPy (or the all-traced program, for cases that bind primitives), forward
and reverse mode against finite differences in the operands still traced, and ``vmap`` over them
against a loop. The plain tests below are the crashes this found, each named for what it checks; the
last test does the same for the front end's functions of several operands (NumPy's, SciPy's and
pullback.linalg's names), which the cases do not all reach.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import scipy.linalg
import scipy.signal
import scipy.special
import scipy.stats
from pullback.testing import check_jvp, check_vjp, check_vjp_numerically

import pullback as pb
from pullback import linalg as pla
from tests import sample
from tests.ad.test_rules import JVP_CASES, LINEAR_CASES, REVERSE_ONLY
from tests.primitives.cases import make_arg, primitives


def constant_at(fn: Callable, i: int, value, how: str) -> Callable:
    """``fn`` of the other operands, its ``i``-th being ``value``: read from this closure ('captured':
    a float array becomes a traced constant), copied into a new array inside the function ('made': a
    NumPy array while tracing) or given as it is ('scalar': a Python scalar)."""
    if how == "made":
        def f(*xs):
            return fn(*xs[:i], np.array(value), *xs[i:])
    else:
        def f(*xs):
            return fn(*xs[:i], value, *xs[i:])
    return f


def _unique(cases):
    seen, out = set(), []
    for c in cases:
        if (c.name, c.dtype) not in seen:
            seen.add((c.name, c.dtype))
            out.append(c)
    return out


CASES = _unique([*JVP_CASES, *LINEAR_CASES])
# an array made inside the traced function is NumPy's and cannot take traced values (docs/sharp-bits.md,
# "Views and index assignment"): these cases write traced values into a copy of their first operand
WRITES_INTO_FIRST = ("scatter",)
CONSTANT = sample.cases(CASES, ids=lambda c: f"{c.name}-{c.dtype}", salt=3)


def _binds(case, args) -> bool:
    """Whether ``case`` binds pullback's primitives itself (it runs in a trace only)."""
    try:
        with np.errstate(all="ignore"):
            case.fn(*args)
    except pb.TracingError:
        return True
    return False


def _ways(case, i: int, x, binds: bool) -> list[str]:
    ways = ["captured"] if len(case.shapes) == 1 else ["captured", "made"]  # one operand: no input left to trace
    if i == 0 and case.name.startswith(WRITES_INTO_FIRST):
        ways = ["captured"]
    # a primitive's operands are arrays: Python scalars are for NumPy's names, which lift them
    return ways + (["scalar"] if np.ndim(x) == 0 and not binds else [])


def _expected(case, args, binds: bool):
    """NumPy's value (the case's reference), or for a case that binds primitives without a reference,
    the all-traced program's (test_forward checks it against NumPy)."""
    with np.errstate(all="ignore"):
        if binds and case.reference is None:
            return pb.jit(case.fn)(*args)
        return (case.reference or case.fn)(*args)


def _leaves(x) -> list:
    return list(x) if isinstance(x, tuple | list) else [x]


def _assert_same(got, want) -> None:
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert np.shape(g) == w.shape and np.asarray(g).dtype == w.dtype, (np.shape(g), np.asarray(g).dtype, w)
        tol = 1e-5 if w.dtype in (np.float32, np.complex64) else 1e-9
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)


def _batched_equals_loop(f: Callable, rest: list) -> None:
    stacked = [np.stack([np.asarray(x) * (1.0 + 0.1 * k) for k in range(3)]) for x in rest]
    with np.errstate(all="ignore"):
        got = pb.vmap(f)(*stacked)
        loop = [pb.jit(f)(*[s[k] for s in stacked]) for k in range(3)]
    for j, g in enumerate(_leaves(got)):
        want = np.stack([np.asarray(_leaves(out)[j]) for out in loop])
        tol = 1e-4 if want.dtype in (np.float32, np.complex64) else 1e-9
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("case", CONSTANT)
def test_rules_with_each_operand_constant(case, rng):
    args = [make_arg(rng, s, case.dtype, case.positive) for s in case.shapes]
    binds = _binds(case, args)
    for i, x in enumerate(args):
        for how in _ways(case, i, x, binds):
            value = x.item() if how == "scalar" else x
            f = constant_at(case.fn, i, value, how)
            rest = args[:i] + args[i + 1:]
            with np.errstate(all="ignore"):
                _assert_same(pb.jit(f)(*rest), _expected(case, [*args[:i], value, *args[i + 1:]], binds))
            if not rest or case.dtype == "float32":  # finite differences run in float64; the constant stays float32
                continue
            with np.errstate(all="ignore"):
                if case.name.startswith(REVERSE_ONLY):
                    check_vjp_numerically(pb.jit(f), rest)
                else:
                    check_jvp(pb.jit(f), rest)
                    check_vjp(pb.jit(f), rest)
            if not case.name.startswith("draw"):  # a draw is made once for a whole batch, not once per member
                _batched_equals_loop(f, rest)


def test_the_sample_meets_every_primitive():
    """Every primitive of the cases is in a program of the default run's sample (tests/sample.py)."""
    every = set().union(*map(primitives, CASES))
    assert every - set().union(*map(primitives, sample.kept(CONSTANT))) == set()


# --- what the registry-wide test found -----------------------------------------------------------------

A_INT = np.array([[3, 1], [1, 2]])  # an integer array read from the scope stays NumPy's while tracing


@pytest.mark.parametrize("solve", [np.linalg.solve, scipy.linalg.solve, pla.solve], ids=["numpy", "scipy", "pullback"])
@pytest.mark.parametrize("make", ["captured-int", "made", "list"])
def test_solve_with_a_constant_matrix(solve, make):
    """pullback.linalg's compositions trace their helpers even where every operand is constant (the LU
    of a constant matrix was computed eagerly, its ``info`` a Python int that broadcasting refused)."""
    def loss(b):
        if make == "captured-int":
            a = A_INT
        else:
            a = np.array([[3.0, 1.0], [1.0, 2.0]]) if make == "made" else [[3.0, 1.0], [1.0, 2.0]]
        return np.sum(solve(a, b) ** 2)

    b = np.array([1.0, -2.0])
    x = np.linalg.solve(A_INT, b)
    np.testing.assert_allclose(pb.jit(loss)(b), np.sum(x ** 2))
    np.testing.assert_allclose(pb.grad(loss)(b), np.linalg.solve(A_INT.T, 2 * x))  # A^{-T} (2 x)


def test_an_integer_matrix_changed_in_place_is_seen():
    """The constant matrix is the program's, read at every call, not factorised once while tracing."""
    a = np.array([[3, 1], [1, 2]])
    solve = pb.jit(lambda b: np.linalg.solve(a, b))
    b = np.array([1.0, -2.0])
    solve(b)
    a[0, 0] = 5
    np.testing.assert_allclose(solve(b), np.linalg.solve(a, b))


def test_a_traced_value_reaches_pullback_wherever_numpy_does_not_look():
    """``np.full_like(a, v)`` dispatches on ``a`` alone: a constant ``a`` with a traced fill value is still
    pullback's (NumPy's own full_like copied the tracer into an array)."""
    def f(v):
        return np.sum(np.full_like(np.ones(3), v) * np.arange(3.0))

    assert pb.jit(f)(2.0) == 6.0
    assert pb.grad(f)(2.0) == 3.0


def test_constant_arrays_where_numpy_takes_scalars():
    """A 0-d (or broadcastable) array made in the function fills like a scalar (``full_like``) and is
    prepended like one (``diff``), as a traced one is."""
    def f(x):
        return np.full_like(x, np.array([1.0, 2.0])) * x + np.diff(x, prepend=np.array(0.5))[:, None]

    x = np.array([[1.0, 3.0], [2.0, 0.5]])
    np.testing.assert_allclose(pb.jit(f)(x), f(x))
    check_jvp(f, [x])


def test_blas_scales_traced_or_arrays():
    """``alpha`` of gemm and syrk may be traced (never compared with 1 in Python) or an array, outside a
    trace too (arrays passed by keyword are the compiled program's arguments, not its cache key)."""
    a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    np.testing.assert_allclose(pla.gemm(a, b, alpha=np.float64(0.5)), 0.5 * a @ b)
    np.testing.assert_allclose(pla.syrk(a, alpha=np.array(2.0)), 2 * a @ a.T)
    check_jvp(lambda s: pla.gemm(a, b, alpha=s) + pla.syrk(a, alpha=s), [np.float64(0.5)])
    check_vjp(lambda s: pla.gemm(a, b, alpha=s) + pla.syrk(a, alpha=s), [np.float64(0.5)])


W = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("index", [
    lambda x: np.arange(5.0)[np.argsort(x)],
    lambda x: np.ones((3, 5))[:, np.argmax(x)],
    lambda x: W[:, np.argmax(x[:4])],
    lambda x: W[np.argmax(x[:3]), 1:],
], ids=["made", "made-sliced", "captured-sliced", "captured-row"])
def test_constants_at_traced_positions(index):
    """A constant indexed by traced positions, a slice in the key or not, is pullback's gather of the
    constant (NumPy asked the tracer for an integer)."""
    x = np.array([0.3, 2.0, 1.0, 0.5, 0.1])
    np.testing.assert_array_equal(pb.jit(lambda x: index(x) * x[0])(x), index(x) * x[0])
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(index(x) * x[0]))(x)[0], np.sum(index(x)))


def test_captured_array_advanced_indexed_beside_a_slice_is_read_at_every_call():
    """``W[:, [1, 2]]`` is advanced indexing, the program's (as ``W[[1, 2]]`` is), not frozen when traced."""
    w = np.arange(6.0).reshape(2, 3)
    f = pb.jit(lambda x: w[:, [2, 0]] * x)
    np.testing.assert_array_equal(f(1.0), w[:, [2, 0]])
    w[0, 2] = 10.0
    np.testing.assert_array_equal(f(1.0), w[:, [2, 0]])


# --- NumPy's, SciPy's and pullback.linalg's names -------------------------------------------------------
# The cases above hold every primitive; these hold the front end's functions of several operands, whose
# own code mixes them (lifting, promotion, broadcasting, SciPy's argument conventions). Each operand in
# turn is made constant, the way rotating in the default run (all ways with --runslow).

_R = np.random.default_rng(3)


def _m(*shape):
    return _R.standard_normal(shape)


def _pos(*shape):
    return np.abs(_R.standard_normal(shape)) + 0.5


def _unit(*shape):
    return 0.2 + 0.6 * _R.random(shape)


def _sym(a):
    """The symmetric part: the Cholesky-based names read one triangle, finite differences move both."""
    return (a + np.swapaxes(a, -1, -2)) / 2


_SPD = _m(3, 3) @ _m(3, 3).T / 3 + np.eye(3)
_TRI = np.tril(_m(3, 3)) + 3 * np.eye(3)
_BANDED = np.array([[0.0, 1.0, 1.0], [4.0, 4.0, 4.0], [1.0, 1.0, 0.0]]) + 0.1 * _m(3, 3)

# name, function, operands, the operands it has no derivative in (orders of Bessel functions, ...)
NAMES = [
    ("append", np.append, [_m(3), _m(2)], ()),
    ("clip", np.clip, [_m(4), -_pos(4), _pos(4)], ()),
    ("concatenate", lambda a, b: np.concatenate([a, b]), [_m(3), _m(2)], ()),
    ("column_stack", lambda a, b: np.column_stack([a, b]), [_m(3), _m(3)], ()),
    ("cross", np.cross, [_m(3), _m(3)], ()),
    ("dot", np.dot, [_m(3, 4), _m(4)], ()),
    ("einsum", lambda a, b: np.einsum("ij,jk->ik", a, b), [_m(2, 3), _m(3, 4)], ()),
    ("kron", np.kron, [_m(2, 2), _m(2, 3)], ()),
    ("linspace", lambda a, b: np.linspace(a, b, 4), [_m(2), 0.5], ()),
    ("lstsq", lambda a, b: np.linalg.lstsq(a, b)[0], [_m(4, 3), _m(4)], ()),
    ("outer", np.outer, [_m(3), _m(2)], ()),
    ("select", lambda a, b: np.select([a > 0, b < 0], [a, b], 0.5), [_m(4), _m(4)], ()),
    ("tensordot", lambda a, b: np.tensordot(a, b, 1), [_m(2, 3), _m(3, 2)], ()),
    ("trapezoid", np.trapezoid, [_m(5), np.cumsum(_pos(5))], ()),
    ("vdot", np.vdot, [_m(3), _m(3)], ()),
    ("where", lambda a, b: np.where(a > 0, a, b), [_m(4), 0.5], ()),
    ("average", lambda a, w: np.average(a, axis=0, weights=w), [_m(4, 2), _pos(4)], ()),
    ("full_like", np.full_like, [_m(3), 0.5], ()),
    ("gradient", np.gradient, [_m(5), np.cumsum(_pos(5))], ()),
    ("diff", lambda a, b: np.diff(a, prepend=b), [_m(4), 0.5], ()),
    ("ediff1d", lambda a, b: np.ediff1d(a, to_end=b), [_m(4), _m(2)], ()),
    ("meshgrid", lambda a, b: np.meshgrid(a, b)[0] * np.meshgrid(a, b)[1], [_m(3), _m(2)], ()),
    ("solve", np.linalg.solve, [_SPD, _m(3, 2)], ()),
    ("arctan2", np.arctan2, [_m(3), _pos(3)], ()),
    ("hypot", np.hypot, [_m(3), _m(3)], ()),
    ("logaddexp", np.logaddexp, [_m(3), 0.5], ()),
    ("fmod", np.fmod, [_m(3), _pos(3)], ()),
    ("power", np.power, [_pos(3), _m(3)], ()),
    ("divide", np.divide, [1.5, _pos(3)], ()),
    ("xlogy", scipy.special.xlogy, [_pos(3), _pos(3)], ()),
    ("betainc", scipy.special.betainc, [_pos(3), _pos(3), _unit(3)], (0, 1)),
    ("gammainc", scipy.special.gammainc, [_pos(3), _pos(3)], (0,)),
    ("jv", scipy.special.jv, [_pos(3), _pos(3)], (0,)),
    ("kve", scipy.special.kve, [_pos(3), _pos(3)], (0,)),
    ("logsumexp", lambda a, b: scipy.special.logsumexp(a, b=b), [_m(4), _pos(4)], ()),
    ("scipy.linalg.solve", lambda a, b: scipy.linalg.solve(_sym(a), b, assume_a="pos"), [_SPD, _m(3)], ()),
    ("scipy.linalg.solve_triangular", lambda a, b: scipy.linalg.solve_triangular(a, b, lower=True),
     [_TRI, _m(3)], ()),
    ("scipy.linalg.cho_solve", lambda a, b: scipy.linalg.cho_solve(scipy.linalg.cho_factor(_sym(a)), b),
     [_SPD, _m(3)], ()),
    ("scipy.linalg.lu_solve", lambda a, b: scipy.linalg.lu_solve(scipy.linalg.lu_factor(a), b),
     [_m(3, 3) + 3 * np.eye(3), _m(3)], ()),
    ("scipy.linalg.lstsq", lambda a, b: scipy.linalg.lstsq(a, b)[0], [_m(4, 3), _m(4)], ()),
    ("scipy.linalg.solve_sylvester", scipy.linalg.solve_sylvester,
     [_m(2, 2) + 3 * np.eye(2), _m(3, 3) + 3 * np.eye(3), _m(2, 3)], ()),
    ("scipy.linalg.solve_banded", lambda ab, b: scipy.linalg.solve_banded((1, 1), ab, b), [_BANDED, _m(3)], ()),
    ("scipy.signal.convolve", scipy.signal.convolve, [_m(5), _m(3)], ()),
    ("scipy.signal.correlate", lambda a, b: scipy.signal.correlate(a, b, mode="same"), [_m(5), _m(3)], ()),
    ("scipy.stats.norm.logpdf", scipy.stats.norm.logpdf, [_m(4), _m(4), _pos(4)], ()),
    ("scipy.stats.t.cdf", scipy.stats.t.cdf, [_m(4), 3.5, 0.2, 1.3], (1,)),
    ("scipy.stats.gamma.logpdf", scipy.stats.gamma.logpdf, [_pos(4), 2.5, -0.1, 0.7], ()),
    ("scipy.stats.multivariate_normal.logpdf",
     lambda x, mu, c: scipy.stats.multivariate_normal.logpdf(x, mu, _sym(c)), [_m(4, 3), _m(3), _SPD], ()),
    ("scipy.stats.dirichlet.logpdf", lambda x, a: scipy.stats.dirichlet.logpdf(x / np.sum(x), a),
     [np.array([0.2, 0.3, 0.5]), _pos(3)], ()),
    ("scipy.stats.entropy", scipy.stats.entropy, [_unit(4), _unit(4)], ()),
    ("pullback.linalg.gemm", lambda a, b, s: pla.gemm(a, b, alpha=s), [_m(2, 3), _m(3, 2), 0.5], ()),
    ("pullback.linalg.ger", lambda a, x, y, s: pla.ger(a, x, y, alpha=s), [_m(3, 2), _m(3), _m(2), 0.5], ()),
    ("pullback.linalg.syrk", lambda a, s: pla.syrk(a, alpha=s), [_m(3, 2), 0.5], ()),
    ("pullback.linalg.trmm", lambda a, b, s: pla.trmm(a, b, alpha=s), [_TRI, _m(3, 2), 0.5], ()),
    ("pullback.linalg.expm_frechet", lambda a, e: pla.expm_frechet(a, e)[1], [0.3 * _m(3, 3), _m(3, 3)], ()),
    ("operators", lambda a, b: (a @ b, a ** 2 / b[0], b[0] - a, a % b[0], a // b[0]), [_pos(3, 3), _pos(3)], ()),
]


@sample.grid("name")
@pytest.mark.parametrize("how", ["captured", "made"])
@pytest.mark.parametrize("name, fn, args, fixed", [pytest.param(*n, id=n[0]) for n in NAMES])
def test_names_with_each_operand_constant(name, fn, args, fixed, how):
    """Each operand in turn constant (a Python scalar stays one: both ways give it as it is): values
    against NumPy's and SciPy's, forward and reverse mode in the others against finite differences."""
    for i in range(len(args)):
        f = constant_at(fn, i, args[i], how if isinstance(args[i], np.ndarray) else "scalar")
        rest = args[:i] + args[i + 1:]
        _assert_same(pb.jit(f)(*rest), fn(*args))
        if any(j in fixed for j in range(len(args)) if j != i):
            continue
        check_jvp(f, rest)
        check_vjp(f, rest)
