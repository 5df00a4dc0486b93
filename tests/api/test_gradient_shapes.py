"""Gradients keep their inputs' shapes and dtypes at the edges (issue 25).

hypothesis draws one operation from ``EDGES`` with edge-case arguments: empty axes, size-1 axes,
0-d arrays and Python scalars, offsets, shifts, slice bounds and FFT lengths beyond the size. The
gradient of a real loss of the result must have each input's shape and dtype, and its inner
product with a random direction must match central finite differences (float64, complex128; an
empty input's gradient is empty, so zero). A case NumPy itself refuses is dropped.

``EDGES`` is the table to extend: an entry draws its parameters and argument shapes and returns
the function of the arguments. ``PULLBACK_HYPOTHESIS_EXAMPLES=N`` runs N fresh examples (the long
run); the default run is derandomised, 100 examples (``--runslow``: 400). Each failure a long run
found keeps its minimal case in ``REGRESSIONS``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import scipy.signal
import scipy.special
from hypothesis import assume, given, note
from hypothesis import strategies as st
from pullback.testing import inner

import pullback as pb
from tests.regressions.test_random_programs import _describe, _value, examples

DIMS = st.sampled_from([0, 1, 2, 3])
OFFSETS = st.integers(-4, 4)


def shapes(min_ndim: int = 0, max_ndim: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(DIMS, min_size=min_ndim, max_size=max_ndim).map(tuple)


def axis_of(draw, ndim: int, none: bool = False):
    choices = [*range(-ndim, ndim)] + ([None] if none or not ndim else [])
    return draw(st.sampled_from(choices))


def two_axes(draw, ndim: int) -> tuple[int, int]:
    a = draw(st.integers(0, ndim - 1))
    b = draw(st.sampled_from([b for b in range(ndim) if b != a]))
    return a - ndim * draw(st.booleans()), b


def broadcastable(draw, shape: tuple) -> tuple:
    """A shape that broadcasts with ``shape``: a suffix of it, some axes made 1."""
    tail = shape[len(shape) - draw(st.integers(0, len(shape))):]
    return tuple(1 if draw(st.booleans()) else n for n in tail)


EDGES: dict[str, tuple[Callable, str]] = {}


def edge(case: Callable | None = None, *, kinds: str = "fc") -> Callable:
    """Register ``case(draw) -> (function, argument shapes)``, for arguments of the dtype ``kinds``
    (f real, c complex)."""
    if case is None:
        return lambda case: edge(case, kinds=kinds)
    EDGES[case.__name__] = (case, kinds)
    return case


# --- diagonals and triangles: offsets beyond the size ----------------------------------------------


@edge
def diagonal(draw):
    shape, k = draw(shapes(2)), draw(OFFSETS)
    a1, a2 = two_axes(draw, len(shape))
    return (lambda x: np.diagonal(x, k, a1, a2)), [shape]


@edge
def trace(draw):
    shape, k = draw(shapes(2)), draw(OFFSETS)
    a1, a2 = two_axes(draw, len(shape))
    return (lambda x: np.trace(x, k, a1, a2)), [shape]


@edge
def diag(draw):
    shape, k = draw(shapes(1, 2)), draw(OFFSETS)
    return (lambda x: np.diag(x, k)), [shape]


@edge
def triangle(draw):
    shape, k, which = draw(shapes(2)), draw(OFFSETS), draw(st.sampled_from([np.tril, np.triu]))
    return (lambda x: which(x, k)), [shape]


# --- structure -------------------------------------------------------------------------------------


@edge
def transpose(draw):
    shape = draw(shapes())
    axes = draw(st.permutations(range(len(shape))))
    return (lambda x: np.transpose(x, axes)), [shape]


@edge
def moveaxis(draw):
    shape = draw(shapes(1))
    a, b = axis_of(draw, len(shape)), axis_of(draw, len(shape))
    return (lambda x: np.moveaxis(x, a, b)), [shape]


@edge
def reshape(draw):
    shape = draw(shapes())
    size = int(np.prod(shape))
    new = draw(st.sampled_from([(-1,), (size, 1), (1, -1), (1, size, 1)] + ([(0, -1)] if not size else [])))
    return (lambda x: np.reshape(x, new)), [shape]


@edge
def squeeze_expand(draw):
    shape = draw(shapes())
    axis = draw(st.integers(-len(shape) - 1, len(shape)))
    return (lambda x: np.squeeze(np.expand_dims(x, axis))), [shape]


@edge
def broadcast(draw):
    shape = draw(shapes(0, 2))
    lead = draw(shapes(0, 2))
    return (lambda x: np.broadcast_to(x, lead + shape) * 1.0), [shape]


@edge
def slicing(draw):
    shape = draw(shapes(1))
    bound = st.one_of(st.none(), st.integers(-5, 5))
    sl = slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3])))
    axis = draw(st.integers(0, len(shape) - 1))
    return (lambda x: x[(slice(None),) * axis + (sl,)]), [shape]


@edge
def integer_index(draw):
    shape = draw(shapes(1))
    shape = (max(shape[0], 1),) + shape[1:]
    i = draw(st.integers(-shape[0], shape[0] - 1))
    return (lambda x: x[i]), [shape]


@edge
def flip_roll(draw):
    shape, shift = draw(shapes(1)), draw(st.integers(-5, 5))
    axis = axis_of(draw, len(shape), none=True)
    which = draw(st.sampled_from(["flip", "roll"]))
    return ((lambda x: np.flip(x, axis)) if which == "flip" else (lambda x: np.roll(x, shift, axis))), [shape]


@edge
def rot90(draw):
    shape, k = draw(shapes(2)), draw(OFFSETS)
    return (lambda x: np.rot90(x, k)), [shape]


@edge
def repeat_tile(draw):
    shape, r = draw(shapes()), draw(st.integers(0, 3))
    axis = axis_of(draw, len(shape), none=True)
    reps = tuple(draw(st.lists(st.integers(0, 2), min_size=1, max_size=3)))
    which = draw(st.booleans())
    return ((lambda x: np.repeat(x, r, axis)) if which else (lambda x: np.tile(x, reps))), [shape]


@edge
def pad(draw):
    shape = draw(shapes(1))
    widths = [(draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in shape]
    mode = draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    return (lambda x: np.pad(x, widths, mode)), [shape]


@edge
def join(draw):
    shape = draw(shapes(1))
    axis = axis_of(draw, len(shape))
    other = tuple(draw(DIMS) if i % len(shape) == axis % len(shape) else n for i, n in enumerate(shape))
    which = draw(st.sampled_from(["concatenate", "stack", "append"]))
    if which == "stack":
        return (lambda a, b: np.stack([a, b], axis)), [shape, shape]
    if which == "append":
        return (lambda a, b: np.append(a, b, axis)), [shape, other]
    return (lambda a, b: np.concatenate([a, b], axis)), [shape, other]


@edge
def split(draw):
    shape, n = draw(shapes(1)), draw(st.integers(1, 4))
    axis, part = axis_of(draw, len(shape)), draw(st.integers(0, 3))
    return (lambda x: np.array_split(x, n, axis)[part % n]), [shape]


@edge
def take(draw):
    shape = draw(shapes(1))
    axis = axis_of(draw, len(shape), none=True)
    indices = draw(st.lists(st.integers(-5, 5), max_size=4))
    mode = draw(st.sampled_from(["clip", "wrap"]))
    if mode == "wrap" and not (np.prod(shape) if axis is None else shape[axis]):
        mode = "clip"  # NumPy's wrap on an empty axis does not return
    return (lambda x: np.take(x, indices, axis, mode=mode)), [shape]


@edge
def advanced_index(draw):
    shape = draw(shapes(1))
    n = shape[0]
    rows = draw(st.lists(st.integers(-n, n - 1), max_size=4)) if n else []
    return (lambda x: x[np.array(rows, dtype=np.int64)]), [shape]


@edge
def index_assignment(draw):
    shape = draw(shapes(1))
    n = shape[0]
    rows = draw(st.lists(st.integers(-n, n - 1), max_size=3, unique=True)) if n else []
    value_shape = (len(rows),) + shape[1:]

    def assign(x, v):
        y = x * 1.0
        y[np.array(rows, dtype=np.int64)] = v * 2.0
        return y

    return assign, [shape, value_shape if draw(st.booleans()) else shape[1:]]


@edge
def stacking(draw):
    shape = draw(shapes(0, 2))
    fn = draw(st.sampled_from([np.vstack, np.hstack, np.dstack, np.column_stack, np.atleast_2d]))
    if fn is np.atleast_2d:
        return fn, [shape]
    return (lambda a, b: fn([a, b])), [shape, shape]


@edge
def convolve(draw):
    a, b = draw(shapes(1, 1)), draw(shapes(1, 1))
    mode = draw(st.sampled_from(["full", "same", "valid"]))
    fn = draw(st.sampled_from([scipy.signal.convolve, scipy.signal.correlate]))
    return (lambda x, y: fn(x, y, mode=mode)), [a, b]


@edge(kinds="f")
def trapezoid_average(draw):
    shape = draw(shapes(1))
    axis = axis_of(draw, len(shape))
    fn = draw(st.sampled_from([np.trapezoid, lambda x, axis: np.average(x, axis=axis)]))
    return (lambda x: fn(x, axis=axis)), [shape]


# --- reductions and cumulative operations -----------------------------------------------------------


@edge
def reduction(draw):
    shape = draw(shapes())
    axis, keepdims = axis_of(draw, len(shape), none=True), draw(st.booleans())
    if len(shape) > 1 and draw(st.booleans()):
        axis = tuple(draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True)))
    fn = draw(st.sampled_from([np.sum, np.mean, np.prod, np.var, np.std]))
    return (lambda x: fn(x, axis=axis, keepdims=keepdims)), [shape]


@edge(kinds="f")
def extremum(draw):
    shape = draw(shapes())
    axis, keepdims = axis_of(draw, len(shape), none=True), draw(st.booleans())
    fn = draw(st.sampled_from([np.max, np.min, scipy.special.logsumexp]))
    return (lambda x: fn(x, axis=axis, keepdims=keepdims)), [shape]


@edge
def cumulative(draw):
    shape = draw(shapes())
    axis = axis_of(draw, len(shape), none=True)
    fn = draw(st.sampled_from([np.cumsum, np.cumprod]))
    return (lambda x: fn(x, axis)), [shape]


@edge
def diff(draw):
    shape, n = draw(shapes(1)), draw(st.integers(0, 4))
    axis = axis_of(draw, len(shape))
    return (lambda x: np.diff(x, n, axis)), [shape]


@edge
def norm(draw):
    shape = draw(shapes(1, 2))
    ords = [None, 1, 2, np.inf, -np.inf] + (["fro", "nuc", -1, -2] if len(shape) == 2 else [0.5, 3, 0])
    ord_ = draw(st.sampled_from(ords))
    return (lambda x: np.linalg.norm(x, ord_)), [shape]


@edge(kinds="f")
def sort(draw):
    shape = draw(shapes(1))
    axis = axis_of(draw, len(shape), none=True)
    return (lambda x: np.sort(x, axis)), [shape]


# --- products: empty contractions ------------------------------------------------------------------


def matmul_shapes(draw) -> list:
    m, k, n = draw(DIMS), draw(DIMS), draw(DIMS)
    return [draw(st.sampled_from([(k,), (m, k), (2, m, k)])), draw(st.sampled_from([(k,), (k, n), (1, k, n)]))]


@edge
def matmul(draw):
    return np.matmul, matmul_shapes(draw)


@edge(kinds="f")
def matmul_of_extremum(draw):
    first = draw(st.sampled_from([lambda a: np.minimum(a, a), lambda a: np.maximum(a, 0.5 * a)]))
    return (lambda a, b: first(a) @ b), matmul_shapes(draw)


@edge
def products(draw):
    k = draw(DIMS)
    a, b = draw(shapes(0, 1)) + (k,), draw(shapes(0, 1)) + (k,)
    which = draw(st.sampled_from(["outer", "kron", "inner", "vdot", "dot"]))
    if which == "dot" and len(b) == 2:
        b = b[::-1]
    if which == "vdot":
        b = a
    if which in ("outer", "kron"):
        a, b = draw(shapes(0, 2)), draw(shapes(0, 2))
    return getattr(np, which), [a, b]


@edge
def tensordot(draw):
    a = draw(shapes())
    n = draw(st.integers(0, len(a)))
    b = a[len(a) - n:] + draw(shapes(0, 2))
    return (lambda x, y: np.tensordot(x, y, n)), [a, b]


@edge
def einsum(draw):
    i, j, k = draw(DIMS), draw(DIMS), draw(DIMS)
    spec, shs = draw(st.sampled_from([
        ("ij,jk->ik", [(i, j), (j, k)]), ("ij,ij->", [(i, j), (i, j)]), ("ii->i", [(i, i)]), ("ij->", [(i, j)]),
        ("i,j->ij", [(i,), (j,)]), ("ijk,kj->i", [(i, j, k), (k, j)]), ("ii", [(i, i)]),
    ]))
    return (lambda *xs: np.einsum(spec, *xs)), shs


# --- elementwise with broadcasting --------------------------------------------------------------------


def pair(draw) -> list:
    a = draw(shapes())
    b = broadcastable(draw, a)
    return [b, a] if draw(st.booleans()) else [a, b]


@edge
def arithmetic(draw):
    return draw(st.sampled_from([np.add, np.subtract, np.multiply, lambda a, b: a / (b * b + 1.0)])), pair(draw)


@edge(kinds="f")
def comparison(draw):
    fn = draw(st.sampled_from([np.maximum, np.minimum, np.hypot, np.arctan2, lambda a, b: np.where(a > b, a, b * 2.0),
                               lambda a, b: np.clip(a, -b * b, b * b)]))
    return fn, pair(draw)


# --- linear algebra on 0x0 and 1x1 matrices --------------------------------------------------------


def spd(a):
    n = a.shape[-1]
    return a @ np.swapaxes(a, -1, -2).conj() + n * np.eye(n) + np.eye(n)


@edge
def linalg(draw):
    n, batch = draw(st.integers(0, 2)), draw(st.sampled_from([(), (0,), (2,)]))
    fn = draw(st.sampled_from([
        lambda a: np.linalg.cholesky(spd(a)), lambda a: np.linalg.inv(spd(a)), lambda a: np.linalg.det(spd(a)),
        lambda a: np.linalg.slogdet(spd(a))[1], lambda a: np.linalg.solve(spd(a), a),
        lambda a: np.linalg.eigh(spd(a))[0], lambda a: np.linalg.svd(spd(a), compute_uv=False),
        lambda a: np.linalg.qr(spd(a))[1],
    ]))
    return fn, [batch + (n, n)]


# --- FFT: lengths beyond the size ------------------------------------------------------------------


def fft_of(draw, fns: list):
    shape = draw(shapes(1))
    n = draw(st.one_of(st.none(), st.integers(1, 5)))
    axis, fn = axis_of(draw, len(shape)), draw(st.sampled_from(fns))
    return (lambda x: fn(x, n, axis)), [shape]


@edge
def fft(draw):
    return fft_of(draw, [np.fft.fft, np.fft.ifft, np.fft.hfft])


@edge(kinds="f")
def fft_real(draw):
    return fft_of(draw, [np.fft.rfft, np.fft.irfft, np.fft.ihfft])


# --- the property ----------------------------------------------------------------------------------


def _inputs(draw, arg_shapes: list, dtype: str, rng) -> list:
    """Arrays of ``arg_shapes``; a 0-d one is sometimes a Python scalar."""
    out = []
    for shape in arg_shapes:
        x = _value(rng, shape, dtype)
        if not shape and draw(st.booleans()):
            x = x[()].item()
        out.append(x)
    return out


def _loss(fn: Callable, w, w_imag) -> Callable:
    def loss(*xs):
        out = fn(*xs)
        return np.sum(np.real(out) * w) + np.sum(np.imag(out) * w_imag)

    return loss


def check_gradient_shapes(fn: Callable, xs: list, dtype: str, seed: int = 0, eps: float = 1e-6) -> None:
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*xs))
    rng = np.random.default_rng(seed)
    w, w_imag = rng.standard_normal(out.shape), rng.standard_normal(out.shape)
    loss = _loss(fn, w, w_imag)
    grads = pb.grad(loss, argnums=tuple(range(len(xs))))(*xs)
    for i, (g, x) in enumerate(zip(grads, xs)):
        assert np.shape(g) == np.shape(x), f"gradient {i}: shape {np.shape(g)}, input {np.shape(x)}"
        assert np.asarray(g).dtype == np.asarray(x).dtype, f"gradient {i}: dtype {np.asarray(g).dtype}, input " \
                                                            f"{np.asarray(x).dtype}"
    if dtype == "float32":
        return
    ts = [_value(rng, np.shape(x), dtype) for x in xs]
    exact = inner(list(grads), ts)
    with np.errstate(all="ignore"):
        plus = loss(*[x + eps * t for x, t in zip(xs, ts)])
        minus = loss(*[x - eps * t for x, t in zip(xs, ts)])
    numeric = float((plus - minus) / (2 * eps))
    scale = 1.0 + sum(float(np.sum(np.abs(g) * np.abs(t))) for g, t in zip(grads, ts))
    assert abs(exact - numeric) <= 1e-5 * scale, f"<grad, t> = {exact!r}, finite differences {numeric!r}"


def _parameters(fn: Callable) -> dict:
    """The values a case's function closes over (its parameters), for the failure report."""
    cells = getattr(fn, "__closure__", None) or ()
    return {n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, cells)} if cells else {}


def _numpy_takes(fn: Callable, xs: list) -> bool:
    """Whether NumPy computes ``fn`` here with a finite result (cases it refuses are not pullback's)."""
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*xs))
    except (ValueError, TypeError, IndexError, ZeroDivisionError, np.linalg.LinAlgError):
        return False
    return out.dtype.kind in "fc" and bool(np.all(np.isfinite(out)))


@examples(400, sampled=100)
@given(st.sampled_from(sorted(EDGES)), st.data())
def test_gradient_has_the_input_shape(name, data):
    case, kinds = EDGES[name]
    dtype = data.draw(st.sampled_from([d for d in ("float64", "complex128", "float32") if np.dtype(d).kind in kinds]))
    fn, arg_shapes = data.draw(st.composite(lambda draw: case(draw))(), label=name)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    xs = _inputs(data.draw, arg_shapes, dtype, rng)
    note(f"{name}{_parameters(fn)} of {[_describe(x) for x in xs]}")
    assume(_numpy_takes(fn, xs))
    check_gradient_shapes(fn, xs, dtype)


# --- regressions the long run found (each fixed at its root) --------------------------------------------

REAL, ALL = ("float64", "float32"), ("float64", "complex128", "float32")
REGRESSIONS = {  # name: (function, argument shapes, dtypes)
    # the printed diag_embed was np.diag's square even where the diagonal was cut off: (3, 3), (1, 1)
    "trace_offset_beyond": (lambda x: np.trace(x, -3), [(0, 0)], ALL),
    "diagonal_offset_beyond": (lambda x: np.diagonal(x, 1), [(0, 0)], ALL),
    "diag_of_empty_matrix": (lambda x: np.diag(x, 2), [(0, 0)], ALL),
    # the printed broadcast of (0,) to (0, 0) was a reshape to (0, 1): sizes were compared, 0 == 0
    "sum_of_empty_rows": (lambda x: np.sum(x, axis=-1), [(0, 0)], ALL),
    # max over an empty axis, with NumPy's initial=0
    "norm_1_of_empty_matrix": (lambda x: np.linalg.norm(x, 1), [(0, 0)], ALL),
    "norm_inf_of_empty_vector": (lambda x: np.linalg.norm(x, np.inf), [(0,)], ALL),
    "norm_2_of_empty_matrix": (lambda x: np.linalg.norm(x, 2), [(3, 0)], ALL),
    "logsumexp_of_empty_axis": (lambda x: scipy.special.logsumexp(x, axis=-2), [(0, 0)], REAL),
    # np.take clipping into an empty axis, with an empty result
    "take_clip_from_empty_axis": (lambda x: np.take(x, [0], axis=-2, mode="clip"), [(0, 0)], ALL),
    # issue 25's report
    "matmul_after_minimum_empty_inner": (lambda a, b: np.minimum(a, a) @ b, [(2, 0), (0, 2)], REAL),
}


@pytest.mark.parametrize("name, dtype", [(name, d) for name, (_, _, dtypes) in REGRESSIONS.items() for d in dtypes])
def test_edge_regressions(name, dtype):
    fn, arg_shapes, _ = REGRESSIONS[name]
    xs = [_value(np.random.default_rng(0), shape, dtype) for shape in arg_shapes]
    check_gradient_shapes(fn, xs, dtype)
