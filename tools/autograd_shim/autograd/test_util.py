"""autograd.test_util on pullback: forward mode (``pb.jvp``) and reverse mode (``pb.vjp``)
against central finite differences of the function run as plain NumPy, recursively to the
requested order, as autograd's own check does (same step, same ``scalar_close`` tolerances;
random directions from the global ``numpy.random`` state the tests seed)."""

from __future__ import annotations

from itertools import product

import numpy as np

import pullback as pb
from pullback.tree import flatten, unflatten

TOL = 1e-6
RTOL = 1e-6
EPS = 1e-6


def scalar_close(a, b):
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def _leaves(tree):
    return flatten(tree)[0]


def _randn_like(tree):
    """A random vector of ``tree``'s space; integer and boolean leaves get zeros (no tangent)."""
    leaves, treedef = flatten(tree)
    out = []
    for leaf in leaves:
        a = np.asarray(leaf)
        if a.dtype.kind == "c":
            v = (np.asarray(np.random.randn(*a.shape)) + 1j * np.asarray(np.random.randn(*a.shape))).astype(a.dtype)
        elif a.dtype.kind == "f":
            v = np.asarray(np.random.randn(*a.shape)).astype(a.dtype)
        else:
            v = np.zeros(a.shape, a.dtype)
        out.append(v[()] if a.ndim == 0 and not isinstance(leaf, np.ndarray) else v)
    return unflatten(treedef, out)


def _axpy(a, x, y):
    """``a * x + y`` leafwise (inexact leaves; others are taken from ``y``)."""
    xs, treedef = flatten(x)
    ys = flatten(y)[0]
    return unflatten(treedef, [yy + a * xx if np.asarray(yy).dtype.kind in "fc" else yy for xx, yy in zip(xs, ys)])


def inner_prod(x, y) -> float:
    total = 0.0
    for a, b in zip(_leaves(x), _leaves(y)):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind in "fc" and b.dtype.kind in "fc":
            total += float(np.real(np.vdot(a.astype(np.complex128), b.astype(np.complex128))))
    return total


def make_numerical_jvp(f, x):
    """``(f(x + v eps/2) - f(x - v eps/2)) / eps``, with ``f`` run as plain NumPy."""

    def jvp(v):
        diff = _axpy(-1.0, f(_axpy(-EPS / 2, v, x)), f(_axpy(EPS / 2, v, x)))
        leaves, treedef = flatten(diff)
        return unflatten(treedef, [np.asarray(d) / EPS if np.asarray(d).dtype.kind in "fc" else d for d in leaves])

    return jvp


def _same_space(x, y, what):
    xs, ys = _leaves(x), _leaves(y)
    assert len(xs) == len(ys), f"{what}: {len(xs)} outputs, expected {len(ys)}"
    for a, b in zip(xs, ys):
        assert np.shape(a) == np.shape(b), f"{what}: shape {np.shape(a)}, expected {np.shape(b)}"


def check_equivalent(x, y):
    _same_space(x, y, "value")
    v = _randn_like(x)
    assert scalar_close(inner_prod(x, v), inner_prod(y, v)), f"Value mismatch:\nx: {x}\ny: {y}"


def _jvp(f, x, v):
    return pb.jvp(f, (x,), (v,))


def _vjp(f, x):
    y, vjp_fn = pb.vjp(f, x)
    return y, (lambda g: vjp_fn(g)[0])


CONVENTION = "[differs from NumPy]"


def _mismatch(kind: str, f, x, exact_of, numeric_of) -> str:
    """The failure message; it says so when the derivative is that of pullback's own values
    (finite differences of ``pb.jit(f)``), which then differ from NumPy's (e.g. a sign or phase
    convention of eigen- or singular vectors, or a symmetric matrix read from both triangles)."""
    exact, numeric = exact_of(), numeric_of(f)
    try:
        own = numeric_of(pb.jit(f))
    except Exception:
        own = None
    prefix = f"{CONVENTION} " if own is not None and scalar_close(exact, own) else ""
    return f"{prefix}Derivative ({kind}) check failed:\nanalytic: {exact}\nnumeric:  {numeric}"


def check_jvp(f, x):
    v = _randn_like(x)
    exact = _jvp(f, x, v)[1]
    numeric = make_numerical_jvp(f, x)(v)
    _same_space(exact, numeric, "JVP")
    w = _randn_like(numeric)
    if not scalar_close(inner_prod(exact, w), inner_prod(numeric, w)):
        raise AssertionError(_mismatch("JVP", f, x, lambda: inner_prod(exact, w),
                                       lambda g: inner_prod(make_numerical_jvp(g, x)(v), w)))


def check_vjp(f, x):
    y, vjp = _vjp(f, x)
    x_v, y_v = _randn_like(x), _randn_like(y)
    ct = vjp(y_v)
    _same_space(ct, x, "VJP")
    exact = inner_prod(x_v, ct)
    numeric = inner_prod(y_v, make_numerical_jvp(f, x)(x_v))
    if not scalar_close(numeric, exact):
        raise AssertionError(_mismatch("VJP", f, x, lambda: exact,
                                       lambda g: inner_prod(y_v, make_numerical_jvp(g, x)(x_v))))


def _check(f, x, modes, order):
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:
            v = _randn_like(x)
            _check(lambda xv: _jvp(f, xv[0], xv[1])[1], (x, v), modes, order - 1)
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:
            v = _randn_like(f(x))
            _check(lambda xv: _vjp(f, xv[0])[1](xv[1]), (x, v), modes, order - 1)


def check_grads(fun, argnum=0, modes=("fwd", "rev"), order=2):
    assert all(m in ("fwd", "rev") for m in modes)

    def checker(*args, **kwargs):
        nums = (argnum,) if isinstance(argnum, int) else tuple(argnum)

        def unary_f(x):
            xs = (x,) if isinstance(argnum, int) else tuple(x)
            full = list(args)
            for i, xi in zip(nums, xs):
                full[i] = xi
            return fun(*full, **kwargs)

        x = args[argnum] if isinstance(argnum, int) else tuple(args[i] for i in argnum)
        _check(unary_f, x, modes, order)

    return checker


def combo_check(fun, *args, **kwargs):
    """All combinations of the given arguments and keyword arguments."""

    def _combo_check(*arg_lists, **kwarg_lists):
        kwarg_key_vals = [[(k, x) for x in xs] for k, xs in kwarg_lists.items()]
        for _args in product(*arg_lists):
            for _kwargs in product(*kwarg_key_vals):
                check_grads(fun, *args, **kwargs)(*_args, **dict(_kwargs))

    return _combo_check
