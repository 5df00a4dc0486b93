"""Checks for derivatives, public so users can test their own functions the way
pullback tests its rules.

- ``check_jvp``: forward mode against central finite differences (run in float64);
- ``check_transpose``: the dot-product test ``<T x, y> = <x, T^T y>`` for a linear function;
- ``check_vjp``: reverse mode consistent with forward mode, ``<J t, c> = <t, J^T c>``;
- ``check_vjp_numerically``: reverse mode alone against finite differences (a ``custom_vjp`` rule);
- ``check_grads``: all of the above, to first or second order.

Inner products are real: ``<X, Y> = Re sum(conj(X) Y)``, the one pullback transposes under.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from pullback.api import transforms as api
from pullback.tree import flatten, unflatten


def _tolerance(dtypes) -> tuple[float, float]:
    low = any(np.dtype(d) in (np.float32, np.complex64) for d in dtypes)
    return (2e-3, 2e-3) if low else (1e-6, 1e-7)


def _random_like(rng: np.random.Generator, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return (rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape)).astype(x.dtype)
    if x.dtype.kind == "f":
        return rng.standard_normal(x.shape).astype(x.dtype)
    return np.zeros(x.shape, x.dtype)


def _inexact(x) -> bool:
    return np.asarray(x).dtype.kind in "fc"


def _leaves(out) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in flatten(out)[0]]


__all__ = [  # the public names, re-exported at pullback.testing
    "inner", "numerical_jvp", "check_jvp", "check_transpose", "check_vjp", "check_vjp_numerically", "check_grads",
    "Copy", "counting_copies", "copies",
]


def inner(xs, ys) -> float:
    """``Re sum(conj(x) y)`` over matching leaves, in double precision."""
    total = 0.0
    for x, y in zip(_leaves(xs), _leaves(ys)):
        if _inexact(x) and _inexact(y):
            total += float(np.real(np.vdot(x.astype(np.complex128), y.astype(np.complex128))))
    return total


def _close(actual, expected, rtol: float, atol: float, what: str) -> None:
    for a, e in zip(_leaves(actual), _leaves(expected)):
        if not (_inexact(a) and _inexact(e)):
            continue
        scale = max(1.0, float(np.max(np.abs(e), initial=0.0)))
        if not np.allclose(a, e, rtol=rtol, atol=atol * scale, equal_nan=True):
            err = float(np.max(np.abs(a - e), initial=0.0))
            raise AssertionError(f"{what}: max abs error {err:.3g} (rtol {rtol}, atol {atol * scale:.3g})\n"
                                 f"got      {a}\nexpected {e}")


def _upcast(x):
    x = np.asarray(x)
    return x.astype(np.result_type(x.dtype, np.float64)) if _inexact(x) else x


def numerical_jvp(f: Callable, args: Sequence, tangents: Sequence, eps: float = 1e-6):
    """Central differences of ``f`` (run as plain NumPy, in float64) along ``tangents``."""
    xs = [_upcast(a) for a in args]
    ts = [_upcast(t) if _inexact(a) else None for a, t in zip(args, tangents)]
    plus = f(*[x + eps * t if t is not None else x for x, t in zip(xs, ts)])
    minus = f(*[x - eps * t if t is not None else x for x, t in zip(xs, ts)])
    diffs = [(p - m) / (2 * eps) if _inexact(p) else p for p, m in zip(_leaves(plus), _leaves(minus))]
    return diffs


def check_jvp(f: Callable, args: Sequence, *, seed: int = 0, eps: float | None = None,
              rtol: float | None = None, atol: float | None = None) -> None:
    """pullback's JVP of ``f`` at ``args`` against central finite differences (in float64;
    where ``f`` itself computes in single precision, with a step that single precision resolves)."""
    rng = np.random.default_rng(seed)
    tangents = [_random_like(rng, a) for a in args]
    out, out_t = api.jvp(f, args, tangents)
    r, a = _tolerance([np.asarray(x).dtype for x in [*args, *_leaves(out)]])
    expected = numerical_jvp(f, args, tangents, eps or (1e-6 if r < 1e-4 else 1e-3))
    _close(out_t, expected, rtol or r, atol or a, "JVP vs finite differences")


def check_transpose(f_linear: Callable, args: Sequence, *, seed: int = 0,
                    rtol: float | None = None, atol: float | None = None) -> None:
    """The dot-product test for a function linear in all its arguments:
    ``<f(x), y> = <x, f^T(y)>`` for random ``x`` and ``y``, with ``f^T`` pullback's transpose."""
    rng = np.random.default_rng(seed)
    xs = [_random_like(rng, a) for a in args]
    out, vjp_fn = api.vjp(f_linear, *xs)
    ys = [_random_like(rng, o) for o in _leaves(out)]
    y_tree = flatten(out)[1]


    cts = vjp_fn(unflatten(y_tree, ys))
    lhs, rhs = inner(out, ys), inner(xs, cts)
    r, a = _tolerance([np.asarray(x).dtype for x in args])
    scale = max(1.0, abs(lhs))
    if abs(lhs - rhs) > (rtol or r) * abs(lhs) + (atol or a) * scale:
        raise AssertionError(f"dot-product test failed: <f(x), y> = {lhs!r} but <x, f^T(y)> = {rhs!r}")


def check_vjp(f: Callable, args: Sequence, *, seed: int = 0,
              rtol: float | None = None, atol: float | None = None) -> None:
    """Reverse mode consistent with forward mode: ``<J t, c> = <t, J^T c>``."""
    rng = np.random.default_rng(seed)
    tangents = [_random_like(rng, a) for a in args]
    out, out_t = api.jvp(f, args, tangents)
    _, vjp_fn = api.vjp(f, *args)
    cts_out = [_random_like(rng, o) for o in _leaves(out)]

    cts_in = vjp_fn(unflatten(flatten(out)[1], cts_out))
    lhs, rhs = inner(out_t, cts_out), inner(tangents, cts_in)
    r, a = _tolerance([np.asarray(x).dtype for x in args])
    scale = max(1.0, abs(lhs))
    if abs(lhs - rhs) > (rtol or r) * abs(lhs) + (atol or a) * scale:
        raise AssertionError(f"VJP inconsistent with JVP: <J t, c> = {lhs!r} but <t, J^T c> = {rhs!r}")


def check_vjp_numerically(f: Callable, args: Sequence, *, seed: int = 0, eps: float = 1e-6,
                          rtol: float | None = None, atol: float | None = None) -> None:
    """Reverse mode alone against central finite differences: ``<t, J^T c>`` against the
    derivative of ``<f(x + h t), c>`` in h. For functions with reverse mode only (a ``custom_vjp``)."""
    rng = np.random.default_rng(seed)
    tangents = [_random_like(rng, a) for a in args]
    out, vjp_fn = api.vjp(f, *args)
    cts_out = [_random_like(rng, o) for o in _leaves(out)]
    cts_in = vjp_fn(unflatten(flatten(out)[1], cts_out))
    exact = inner(tangents, cts_in)
    numeric = inner(numerical_jvp(f, args, tangents, eps), cts_out)
    r, a = _tolerance([np.asarray(x).dtype for x in args])
    r, a = max(r, 1e-6), max(a, 1e-7)
    scale = max(1.0, abs(exact))
    if abs(exact - numeric) > (rtol or r) * abs(numeric) + (atol or a) * scale:
        raise AssertionError(f"VJP vs finite differences: <t, J^T c> = {exact!r}, finite differences {numeric!r}")


def check_grads(f: Callable, args: Sequence, order: int = 1, *, modes: Sequence[str] = ("fwd", "rev"),
                seed: int = 0, rtol: float | None = None, atol: float | None = None) -> None:
    """``check_jvp`` and ``check_vjp``; with ``order=2`` also of the directional derivative
    ``x -> J(x) t``, i.e. second derivatives through pullback's own derivative programs.
    ``modes=("rev",)`` checks reverse mode alone against finite differences (a function with a
    ``custom_vjp`` rule has no forward mode), to first order."""
    if order not in (1, 2):
        raise ValueError("order must be 1 or 2")
    if "fwd" not in modes:
        check_vjp_numerically(f, args, seed=seed, rtol=rtol, atol=atol)
        return
    check_jvp(f, args, seed=seed, rtol=rtol, atol=atol)
    if "rev" not in modes:
        return
    check_vjp(f, args, seed=seed, rtol=rtol, atol=atol)
    if order == 2:
        rng = np.random.default_rng(seed + 1)
        tangents = [_random_like(rng, a) for a in args]

        def directional(*xs):
            return api.jvp(f, xs, tangents)[1]

        check_jvp(directional, args, seed=seed, rtol=rtol or 1e-5, atol=atol or 1e-6)
        check_vjp(directional, args, seed=seed, rtol=rtol, atol=atol)


# --- hidden copies at the SciPy LAPACK/BLAS boundary ------------------------------------------------

@dataclass(frozen=True)
class Copy:
    """An array argument that f2py copied on its way into a SciPy LAPACK/BLAS routine."""

    routine: str
    argument: str
    shape: tuple[int, ...]
    hidden: bool  # True: the layout forced it (a C-ordered matrix where Fortran order is read);
    # False: the routine works on a copy anyway (``overwrite_*`` off), whatever the layout
    reordered: bool = False  # the copy transposes memory (a C-ordered matrix to Fortran order): a strided
    # pass, several times a plain copy's cost, where the F-view of the transpose copies as it lies

    def __str__(self) -> str:
        kind = ("hidden" if self.hidden else "copy") + (", reordered" if self.reordered else "")
        return f"{self.routine}({self.argument}: {'x'.join(map(str, self.shape))}, {kind})"


_TYPECODES = {"f": np.float32, "d": np.float64, "F": np.complex64, "D": np.complex128, "i": np.int32}


def _signature(fn) -> tuple[list[str], dict[str, np.dtype], set[str]]:
    """An f2py routine's argument names in order, its arrays' dtypes, and its ``overwrite_*`` options,
    read from the docstring f2py writes (``lu,piv,info = dgetrf(a,[overwrite_a])``, ``a : input rank-2
    array('d') ...``)."""
    doc = fn.__doc__ or ""
    head = doc.split("\n", 1)[0]
    names = [n.strip(" []") for n in head[head.index("(") + 1: head.rindex(")")].split(",") if n.strip(" []")]
    arrays = {}
    for line in doc.splitlines():
        name, _, rest = line.partition(" : ")
        if "array('" in rest and name.strip() in names:
            code = rest.split("array('", 1)[1][0]
            if code in _TYPECODES:
                arrays[name.strip()] = np.dtype(_TYPECODES[code])
    return names, arrays, {n[len("overwrite_"):] for n in names if n.startswith("overwrite_")}


def _counting(name: str, fn, record: list[Copy]):
    names, arrays, overwritable = _signature(fn)
    routine = name

    def wrapper(*args, **kwargs):
        bound = dict(zip(names, args)) | kwargs
        for name, dtype in arrays.items():
            x = bound.get(name)
            if not isinstance(x, np.ndarray) or x.ndim == 0:
                continue
            kept = name not in overwritable or bool(bound.get(f"overwrite_{name}", 0))  # else copied anyway
            if x.flags.f_contiguous and x.dtype == dtype and kept:
                continue  # f2py reads it in place
            reordered = x.ndim >= 2 and min(x.shape[-2:]) > 1 and not x.flags.f_contiguous
            record.append(Copy(routine, name, x.shape, kept, reordered))
        return fn(*args, **kwargs)

    wrapper.__name__ = routine
    wrapper.__doc__ = fn.__doc__
    return wrapper


@contextmanager
def counting_copies() -> Iterator[list[Copy]]:
    """Within this block, every array argument that SciPy's LAPACK/BLAS wrappers copy is recorded: one
    not in Fortran order (or of another dtype) is copied by f2py before the routine sees it (*hidden*
    copies), and one the routine would overwrite unless ``overwrite_*`` is set is copied anyway. The list
    yielded fills as the block runs. (Generated code looks its routines up on ``scipy.linalg.lapack``
    and ``scipy.linalg.blas`` at each call, so those module attributes are what is wrapped.)"""
    import scipy.linalg.blas
    import scipy.linalg.lapack

    record: list[Copy] = []
    saved = []
    for module in (scipy.linalg.lapack, scipy.linalg.blas):
        for name, fn in list(vars(module).items()):
            if type(fn).__name__ == "fortran" and "(" in (fn.__doc__ or "").split("\n", 1)[0]:
                saved.append((module, name, fn))
                setattr(module, name, _counting(name, fn, record))
    try:
        yield record
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def copies(fn: Callable, *args, min_size: int = 0) -> list[Copy]:
    """The copies of arrays of at least ``min_size`` elements that SciPy's LAPACK/BLAS wrappers make in
    one call ``fn(*args)`` (compile first: a first call prints and compiles the program)."""
    with counting_copies() as record:
        fn(*args)
    return [c for c in record if int(np.prod(c.shape)) >= min_size]
