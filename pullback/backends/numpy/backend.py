"""The NumPy/SciPy backend: how each primitive prints as Python.

An emitter takes ``(ctx, eqn, ins, outs)`` — the equation, its inputs as
expressions and its outputs as names — and returns an expression (assigned to
the outputs) or a list of statements that bind the outputs themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import numpy as np

from pullback.backends import layout
from pullback.backends import syntax as s
from pullback.backends.stacked import stack_p
from pullback.backends.syntax import Expr
from pullback.errors import TracingError
from pullback.ir.core import Eqn, Literal, Primitive, Var
from pullback.primitives import contractions as con
from pullback.primitives import cumulative as cum
from pullback.primitives import elementwise as ew
from pullback.primitives import fft as fft_
from pullback.primitives import reductions as red
from pullback.primitives import structural as st
from pullback.primitives.custom import custom_lin_p

IMPORTS = {"np": "numpy", "scipy": "scipy"}

# Matrix products of at least this many multiply-adds go through SciPy's BLAS in programs
# that call SciPy's LAPACK: NumPy and SciPy each bundle an OpenBLAS with its own thread
# pool, and alternating between them makes the pools fight for the cores (2x slower eigh
# gradients; a 3 x 2048 by 2048 x 2048 product took 30 ms instead of 3).
ONE_BLAS_MIN_WORK = 1 << 20


class Context:
    """What an emitter may ask of the code generator."""

    def __init__(self, fresh: Callable[[str], str] | None = None):
        self.modules: set[str] = set()
        self.reusable: frozenset[int] = frozenset()  # inputs whose buffers the current equation may overwrite
        self.one_blas = False  # print large matrix products with SciPy's BLAS (see configure)
        self.fresh = fresh or (lambda hint: hint)  # a new local name, unique in the function
        self.where = ""  # the current equation's user file:line, sanitised for use in messages
        self.fortran: frozenset[int] = frozenset()  # operands known to be F-ordered (see ``layout``)
        self.unused: frozenset[int] = frozenset()  # results nothing reads (OPTIONAL_RESULTS may go unassigned)
        self.objects: dict[int, str] = {}  # id(object used by reference) -> its keyword-only parameter
        self.helpers: set[str] = set()  # the compiled loops' functions the module defines (``numba_loops.HELPERS``)

    def use(self, module: str) -> None:
        """Record that the generated code needs ``import module``."""
        self.modules.add(module)


def configure(ctx: Context, program) -> None:
    """Program-wide printing choices, made before the first equation is printed."""
    linalg = numpy_linalg.LINALG
    ctx.one_blas = any([not numpy_linalg.uses_numpy(e) for e in program.eqns if e.prim in linalg])


Emitter = Callable[[Context, Eqn, list[Expr], list[cst.Name]], "Expr | list[cst.BaseStatement]"]
EMITTERS: dict[Primitive, Emitter] = {}
FORTRAN: dict[Primitive, layout.Rule] = {}  # which printed results are F-ordered (see ``layout``)
OPTIONAL_RESULTS: dict[Primitive, frozenset[int]] = {}  # results an emitter leaves unassigned when unused


def empty(t) -> Expr:
    """An uninitialised array of type ``t`` (a loop's stacked results, filled one step at a time)."""
    return s.call("np.empty", s.ints(t.shape), dtype=s.dtype(t.dtype))


def zeros(t) -> Expr:
    """An array of zeros of type ``t`` (the stacked results of a loop that may run fewer steps than it
    has rows: a shorter last block of ``checkpoint=True``)."""
    return s.call("np.zeros", s.ints(t.shape), dtype=s.dtype(t.dtype))


def emits(*prims: Primitive):
    def register(fn):
        for p in prims:
            EMITTERS[p] = fn
        return fn

    return register


def _function(prim: Primitive, path: str) -> None:
    EMITTERS[prim] = lambda ctx, eqn, ins, outs: s.call(path, *ins)
    FORTRAN[prim] = layout.elementwise


def _operator(prim: Primitive, op: str) -> None:
    EMITTERS[prim] = lambda ctx, eqn, ins, outs: s.binop(ins[0], op, ins[1])
    FORTRAN[prim] = layout.elementwise


for _p, _path in [
    (ew.exp_p, "np.exp"), (ew.log_p, "np.log"), (ew.log1p_p, "np.log1p"), (ew.expm1_p, "np.expm1"),
    (ew.sqrt_p, "np.sqrt"), (ew.sin_p, "np.sin"), (ew.cos_p, "np.cos"), (ew.tan_p, "np.tan"),
    (ew.tanh_p, "np.tanh"), (ew.sinh_p, "np.sinh"), (ew.cosh_p, "np.cosh"), (ew.abs_p, "np.abs"),
    (ew.sign_p, "np.sign"), (ew.conj_p, "np.conj"), (ew.max_p, "np.maximum"), (ew.min_p, "np.minimum"),
    (ew.select_p, "np.where"), (ew.floor_p, "np.floor"), (ew.ceil_p, "np.ceil"), (ew.trunc_p, "np.trunc"),
    (ew.rint_p, "np.rint"), (ew.isnan_p, "np.isnan"), (ew.isinf_p, "np.isinf"), (ew.isfinite_p, "np.isfinite"),
    (ew.log10_p, "np.log10"), (ew.log2_p, "np.log2"), (ew.exp2_p, "np.exp2"), (ew.arcsin_p, "np.arcsin"),
    (ew.arccos_p, "np.arccos"), (ew.arctan_p, "np.arctan"), (ew.arcsinh_p, "np.arcsinh"),
    (ew.arccosh_p, "np.arccosh"), (ew.arctanh_p, "np.arctanh"), (ew.cbrt_p, "np.cbrt"), (ew.sinc_p, "np.sinc"),
    (ew.angle_p, "np.angle"), (ew.fmod_p, "np.fmod"), (ew.arctan2_p, "np.arctan2"), (ew.hypot_p, "np.hypot"),
    (ew.logaddexp_p, "np.logaddexp"), (ew.logaddexp2_p, "np.logaddexp2"), (ew.fmax_p, "np.fmax"),
    (ew.fmin_p, "np.fmin"), (ew.copysign_p, "np.copysign"), (ew.clip_p, "np.clip"),
]:
    _function(_p, _path)

for _p, _op in [
    (ew.add_p, "+"), (ew.sub_p, "-"), (ew.mul_p, "*"), (ew.div_p, "/"), (ew.pow_p, "**"),
    (ew.eq_p, "=="), (ew.ne_p, "!="), (ew.lt_p, "<"), (ew.le_p, "<="), (ew.gt_p, ">"), (ew.ge_p, ">="),
    (ew.and_p, "&"), (ew.or_p, "|"), (ew.xor_p, "^"),
    (ew.floor_divide_p, "//"), (ew.rem_p, "%"),
]:
    _operator(_p, _op)


# Elementwise operations that can write into an operand: an augmented assignment for the
# first operand where Python has one, else the ufunc with ``out=``.
IN_PLACE: dict[Primitive, tuple[str | None, str | None]] = {
    ew.add_p: ("+=", "np.add"), ew.sub_p: ("-=", "np.subtract"), ew.mul_p: ("*=", "np.multiply"),
    ew.div_p: ("/=", "np.divide"), ew.pow_p: ("**=", "np.power"), ew.integer_pow_p: ("**=", None),
    ew.max_p: (None, "np.maximum"),
    ew.min_p: (None, "np.minimum"), ew.neg_p: (None, "np.negative"), ew.exp_p: (None, "np.exp"),
    ew.log_p: (None, "np.log"), ew.log1p_p: (None, "np.log1p"), ew.expm1_p: (None, "np.expm1"),
    ew.sqrt_p: (None, "np.sqrt"), ew.sin_p: (None, "np.sin"), ew.cos_p: (None, "np.cos"),
    ew.tan_p: (None, "np.tan"), ew.tanh_p: (None, "np.tanh"), ew.sinh_p: (None, "np.sinh"),
    ew.cosh_p: (None, "np.cosh"), ew.sign_p: (None, "np.sign"), ew.conj_p: (None, "np.conj"),
    ew.floor_p: (None, "np.floor"), ew.ceil_p: (None, "np.ceil"), ew.trunc_p: (None, "np.trunc"),
    ew.rint_p: (None, "np.rint"), ew.log10_p: (None, "np.log10"), ew.log2_p: (None, "np.log2"),
    ew.exp2_p: (None, "np.exp2"), ew.arcsin_p: (None, "np.arcsin"), ew.arccos_p: (None, "np.arccos"),
    ew.arctan_p: (None, "np.arctan"), ew.arcsinh_p: (None, "np.arcsinh"), ew.arccosh_p: (None, "np.arccosh"),
    ew.arctanh_p: (None, "np.arctanh"), ew.cbrt_p: (None, "np.cbrt"), ew.clip_p: (None, "np.clip"),
    st.add_diagonal_p: ("+=", None),  # only the diagonal changes: x[np.diag_indices(n)] += v
}
FORTRAN.update({ew.neg_p: layout.elementwise, ew.not_p: layout.elementwise, ew.integer_pow_p: layout.elementwise,
                st.convert_element_type_p: layout.elementwise, st.transpose_p: layout.flipped})

_AUG = {"+=": cst.AddAssign, "-=": cst.SubtractAssign, "*=": cst.MultiplyAssign, "/=": cst.DivideAssign,
        "**=": cst.PowerAssign}


def in_place(eqn: Eqn, ins: list[Expr], k: int, where: str = "", ctx: Context | None = None) -> list[cst.BaseStatement]:
    """``a *= b`` or ``np.exp(a, out=a)``: the result overwrites operand ``k`` (the statements; a
    backend may need several, as CuPy's complex ``add.at``). ``where``: the user's line, for messages;
    ``ctx``: the printer's (NumPy's sums of rows choose their form with it)."""
    aug, ufunc = IN_PLACE[eqn.prim]
    if eqn.prim in numpy_indexing.UPDATES:
        return numpy_indexing.in_place(eqn, ins, where, ctx)
    if eqn.prim is st.add_diagonal_p:  # x.flat strides over any layout (a dead buffer may be F-ordered)
        n = eqn.outputs[0].shape[0]
        diagonal = s.subscript(s.attribute(ins[0], "flat"), [s.slice_(None, None, n + 1)])
        return [s.statement(cst.AugAssign(diagonal, cst.AddAssign(), ins[1]))]
    if eqn.prim is ew.integer_pow_p:  # ``x **= 2``: NumPy squares as ``x * x`` does
        return [s.statement(cst.AugAssign(ins[0], cst.PowerAssign(), s.number(eqn.params["y"])))]
    if aug is not None and k == 0:
        return [s.statement(cst.AugAssign(ins[0], _AUG[aug](), ins[1]))]
    return [s.statement(s.call(ufunc, *ins, out=ins[k]))]


@emits(st.add_diagonal_p)
def _add_diagonal(ctx, eqn, ins, outs):
    """A copy with the diagonal updated: one pass over x, not a dense diagonal matrix and a sum. The copy
    is C-contiguous, so its diagonal is the strided view ``y.reshape(-1)[::n + 1]``: no index arrays
    (``np.diag_indices`` costs more than the update itself at small n, as in a loop's body)."""
    n = eqn.outputs[0].shape[0]
    diagonal = s.subscript(s.method(outs[0], "reshape", s.number(-1)), [s.slice_(None, None, n + 1)])
    return [s.assign(outs, s.method(ins[0], "copy")), s.statement(cst.AugAssign(diagonal, cst.AddAssign(), ins[1]))]


# Matrices at least this large are symmetrised tile by tile, so that both operands of each
# addition fit in cache (x + x.T reads x.T across rows: 2x slower at n = 2048).
BLOCKED_MIN_N = 512
TILE = 64


@emits(st.add_transpose_p)
def _add_transpose(ctx, eqn, ins, outs):
    (x,), (y,) = ins, outs
    n = eqn.outputs[0].shape[0]
    if n < BLOCKED_MIN_N or not isinstance(x, cst.Name):
        return s.binop(x, "+", s.attribute(x, "T"))
    i, j = s.name(ctx.fresh("i")), s.name(ctx.fresh("j"))

    add = s.call("np.add", s.subscript(x, [_tile(i), _tile(j)]), s.attribute(s.subscript(x, [_tile(j), _tile(i)]), "T"),
                 out=s.subscript(y, [_tile(i), _tile(j)]))
    inner = cst.For(target=j, iter=s.call("range", s.number(0), s.number(n), s.number(TILE)),
                    body=cst.IndentedBlock([s.statement(add)]))
    outer = cst.For(target=i, iter=s.call("range", s.number(0), s.number(n), s.number(TILE)),
                    body=cst.IndentedBlock([inner]))
    return [s.assign([y], s.call("np.empty_like", x)), outer]


def _tile(start: cst.Name) -> cst.Slice:
    """``start:start + TILE``."""
    return cst.Slice(lower=start, upper=s.binop(start, "+", s.number(TILE)))


@emits(ew.not_p)
def _not(ctx, eqn, ins, outs):
    """``~x``; a 0-d boolean may be a Python ``bool`` at run time (a branch's literal result, a scalar
    argument), whose ``~`` is integer inversion (``~True == -2``): ``np.logical_not`` there."""
    if eqn.inputs[0].type.ndim == 0 and eqn.inputs[0].dtype == np.bool_:
        return s.call("np.logical_not", ins[0])
    return cst.UnaryOperation(cst.BitInvert(), s.atomic(ins[0]))


@emits(ew.neg_p)
def _neg(ctx, eqn, ins, outs):
    return s.neg(ins[0])


@emits(ew.integer_pow_p)
def _integer_pow(ctx, eqn, ins, outs):
    return s.binop(ins[0], "**", s.number(eqn.params["y"]))


@emits(ew.logistic_p)
def _logistic(ctx, eqn, ins, outs):
    ctx.use("scipy.special")
    return s.call("scipy.special.expit", *ins)


@emits(ew.round_p)
def _round(ctx, eqn, ins, outs):
    decimals = eqn.params["decimals"]
    return s.call("np.round", ins[0], *([s.number(decimals)] if decimals else []))


@emits(ew.nan_to_num_p)
def _nan_to_num(ctx, eqn, ins, outs):
    """Only the replacements that differ from NumPy's defaults are spelled out."""
    p = eqn.params
    kw = {k: s.number(p[k]) for k in ("nan", "posinf", "neginf") if p[k] is not None and (k != "nan" or p[k] != 0)}
    return s.call("np.nan_to_num", ins[0], **kw)


@emits(ew.real_p, ew.imag_p)
def _real_imag(ctx, eqn, ins, outs):
    return s.attribute(ins[0], eqn.prim.name)


@emits(st.broadcast_in_dim_p)
def _broadcast_in_dim(ctx, eqn, ins, outs):
    if not eqn.params["shape"] and isinstance(eqn.inputs[0], Literal):
        # a 0-d fill (a loop's ``nll = 0.0``): the number, a NumPy scalar of its dtype (``np.float64(0.0)``
        # divides by zero as NumPy does, and has a dtype); arrays elsewhere (CuPy's device, Dask's graph)
        value = ins[0].with_changes(lpar=[], rpar=[]) if getattr(ins[0], "lpar", None) else ins[0]  # ``(1+0j)``
        return s.call(s.dtype(eqn.inputs[0].dtype), value)
    return broadcast_array(ctx, eqn, ins, outs)


def broadcast_array(ctx, eqn, ins, outs):
    """``broadcast_in_dim`` as an array, a 0-d one too."""
    (x,), (operand,) = ins, eqn.inputs
    shape, dims = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    if isinstance(operand, Literal):
        dt = s.dtype(operand.dtype)
        if operand.value in (0, 1) and not isinstance(operand.value, bool):
            # float64 is the default of NumPy's zeros and ones, and of CuPy's and Dask's (which print this)
            kwargs = {} if operand.dtype == np.float64 else {"dtype": dt}
            return s.call("np.zeros" if operand.value == 0 else "np.ones", s.ints(shape), **kwargs)
        return s.call("np.full", s.ints(shape), x, dtype=dt)
    trailing = tuple(range(len(shape) - len(dims), len(shape)))
    if dims != trailing:  # NumPy aligns trailing axes; put the others in place first
        expanded = [1] * len(shape)
        for size, d in zip(operand.shape, dims):
            expanded[d] = size
        x = s.method(x, "reshape", *map(s.number, expanded))
        if tuple(expanded) == tuple(shape):  # only unit axes added: the reshape is it (sizes alone agree when empty)
            return x
    return s.call("np.broadcast_to", x, s.ints(shape))


@emits(st.reshape_p)
def _reshape(ctx, eqn, ins, outs):
    shape = eqn.params["new_sizes"]
    return s.method(ins[0], "reshape", *map(s.number, shape) if shape else [s.ints(())])


@emits(st.transpose_p)
def _transpose(ctx, eqn, ins, outs):
    perm = eqn.params["permutation"]
    n = len(perm)
    if perm == tuple(reversed(range(n))) and n == 2:
        return s.attribute(ins[0], "T")
    if n > 2 and perm == (*range(n - 2), n - 1, n - 2):
        return s.attribute(ins[0], "mT")
    return s.method(ins[0], "transpose", *map(s.number, perm))


@emits(st.slice_p)
def _slice(ctx, eqn, ins, outs):
    p = eqn.params
    return s.subscript(ins[0], _slice_index(eqn.inputs[0].shape, p["start_indices"], p["limit_indices"], p["strides"]))


def _slice_index(shape, starts, limits, strides) -> list[cst.Slice]:
    index = [numpy_indexing.slice_expr(*args) for args in zip(shape, starts, limits, strides)]
    while len(index) > 1 and _full(index[-1]):
        index.pop()
    return index


def _full(sl: cst.Slice) -> bool:
    return sl.lower is None and sl.upper is None and sl.step is None


@emits(st.concatenate_p)
def _concatenate(ctx, eqn, ins, outs):
    return s.call("np.concatenate", s.tuple_(ins), axis=s.number(eqn.params["dimension"]))


@emits(stack_p)
def _stack(ctx, eqn, ins, outs):
    """``np.stack``; of scalars ``np.array``, as written for them, and at a fifth of the cost (0.2 us for
    two scalars against 1.6 for ``np.stack``, 0.7 for the reshapes and concatenation of the IR: a step of
    RK4 stacks eight pairs)."""
    if all(a.type.ndim == 0 for a in eqn.inputs):
        return s.call("np.array", s.tuple_(ins))
    return stacked_arrays(ctx, eqn, ins, outs)


def stacked_arrays(ctx, eqn, ins, outs):
    """``np.stack((a, b), axis=k)``, ``axis`` omitted when 0."""
    axis = eqn.params["axis"]
    return s.call("np.stack", s.tuple_(ins), **({"axis": s.number(axis)} if axis else {}))


@emits(st.diagonal_p)
def _diagonal(ctx, eqn, ins, outs):
    offset = eqn.params["offset"]
    kw = {"offset": s.number(offset)} if offset else {}
    if eqn.inputs[0].type.ndim > 2:
        kw |= {"axis1": s.number(-2), "axis2": s.number(-1)}
    return s.method(ins[0], "diagonal", **kw)  # the method: np.diagonal's dispatch costs 8x the view


@emits(st.diag_embed_p)
def _diag_embed(ctx, eqn, ins, outs):
    (m, n), k = eqn.params["shape"], eqn.params["offset"]
    (operand,), (out,) = eqn.inputs, eqn.outputs
    length = operand.shape[-1]
    if operand.type.ndim == 1 and m == n == length + abs(k):  # np.diag's square: not when the diagonal is cut off
        return s.call("np.diag", ins[0], *([s.number(k)] if k else []))
    idx = s.call("np.arange", s.number(length))
    rows = s.binop(idx, "+", s.number(-k)) if k < 0 else idx
    cols = s.binop(idx, "+", s.number(k)) if k > 0 else idx
    return [  # d[..., i, i + k] = x
        s.assign(outs, s.call("np.zeros", s.ints(out.shape), dtype=s.dtype(out.dtype))),
        _store(s.subscript(outs[0], [cst.Ellipsis(), rows, cols]), ins[0]),
    ]


def _store(target: cst.BaseAssignTargetExpression, value: Expr) -> cst.SimpleStatementLine:
    return s.statement(cst.Assign([cst.AssignTarget(target)], value))


@emits(st.pad_p)
def _pad(ctx, eqn, ins, outs):
    out = eqn.outputs[0]
    p = eqn.params
    index = _slice_index(out.shape, p["start_indices"], p["limit_indices"], p["strides"])
    return [  # zeros, then the operand written where the slice it transposes read
        s.assign(outs, s.call("np.zeros", s.ints(out.shape), dtype=s.dtype(out.dtype))),
        _store(s.subscript(outs[0], index), ins[0]),
    ]


@emits(st.tril_p, st.triu_p)
def _triangle(ctx, eqn, ins, outs):
    k = eqn.params["k"]
    return s.call(f"np.{eqn.prim.name}", ins[0], *([s.number(k)] if k else []))


@emits(st.convert_element_type_p)
def _convert(ctx, eqn, ins, outs):
    return s.method(ins[0], "astype", s.dtype(eqn.params["new_dtype"]))


@emits(st.iota_p)
def _iota(ctx, eqn, ins, outs):
    shape, dim = eqn.params["shape"], eqn.params["dimension"]
    r = s.call("np.arange", s.number(shape[dim]), dtype=s.dtype(eqn.params["dtype"]))
    if len(shape) == 1:
        return r
    expanded = [1] * len(shape)
    expanded[dim] = shape[dim]
    r = s.method(r, "reshape", *map(s.number, expanded))
    return r if tuple(expanded) == tuple(shape) else s.call("np.broadcast_to", r, s.ints(shape))


@emits(st.linspace_p)
def _linspace(ctx, eqn, ins, outs):
    p = eqn.params
    dt = {} if p["dtype"] == np.float64 else {"dtype": s.dtype(p["dtype"])}
    return s.call("np.linspace", s.number(p["start"]), s.number(p["stop"]), s.number(p["num"]), **dt)


@emits(st.eye_p)
def _eye(ctx, eqn, ins, outs):
    (n, m), k = eqn.params["shape"], eqn.params["k"]
    args = [s.number(n)] + ([s.number(m)] if m != n or k else []) + ([s.number(k)] if k else [])
    return s.call("np.eye", *args, dtype=s.dtype(eqn.params["dtype"]))


@emits(st.shaped_p)
def _shaped(ctx, eqn, ins, outs):
    """The NumPy call that made the array while tracing, again (``np.tri(3)``)."""
    def value(v):
        if v is None:
            return cst.Name("None")
        return s.dtype(v) if isinstance(v, np.dtype) else s.ints(v) if isinstance(v, tuple) else s.number(v)

    p = eqn.params
    return s.call(f"np.{p['function']}", *map(value, p["args"]), **{k: value(v) for k, v in p["kwargs"]})


@emits(red.reduce_sum_p, red.reduce_max_p, red.reduce_min_p, cum.reduce_prod_p, red.reduce_and_p, red.reduce_or_p)
def _reduce(ctx, eqn, ins, outs):
    func = {"reduce_sum": "np.sum", "reduce_max": "np.max", "reduce_min": "np.min", "reduce_prod": "np.prod",
            "reduce_and": "np.all", "reduce_or": "np.any"}[eqn.prim.name]
    axes = eqn.params["axes"]
    if len(axes) == eqn.inputs[0].type.ndim:
        return s.call(func, ins[0])
    return s.call(func, ins[0], axis=s.number(axes[0]) if len(axes) == 1 else s.ints(axes))


@emits(cum.cumsum_p, cum.cumprod_p)
def _cumulative(ctx, eqn, ins, outs):
    """``np.cumsum(x, axis=k)``; in reverse, on the flipped axis: ``np.cumsum(x[::-1])[::-1]``."""
    axis, reverse = eqn.params["axis"], eqn.params["reverse"]
    flip = [s.slice_(None, None, None)] * axis + [s.slice_(None, None, -1)]
    x = s.subscript(ins[0], flip) if reverse else ins[0]
    kw = {"axis": s.number(axis)} if eqn.inputs[0].type.ndim > 1 else {}
    out = s.call(f"np.{eqn.prim.name}", x, **kw)
    return s.subscript(out, flip) if reverse else out


@emits(con.dot_general_p)
def _dot_general(ctx, eqn, ins, outs, alpha: float = 1.0):
    """A contraction; ``alpha`` (a scaled product, ``scaled_product_p``) goes into gemm's alpha where the
    product is one gemm, and scales the result otherwise."""
    lhs, rhs = eqn.inputs
    a, b = ins
    d: con.DotDims = eqn.params["dims"]
    nb = len(d.lhs_batch)
    batch = tuple(range(nb))
    if d.lhs_batch == batch and d.rhs_batch == batch and len(d.lhs_contract) == 1:
        (lc,), (rc,) = d.lhs_contract, d.rhs_contract
        ln, rn = lhs.type.ndim - nb, rhs.type.ndim - nb
        # a @ b contracts a's last axis with b's first (vector) or second-to-last axis
        if ln in (1, 2) and rn in (1, 2) and (nb == 0 or (ln == 2 and rn == 2)):
            if lc == nb + ln - 2 and ln == 2:
                a = _matrix_transpose(a, nb)
            elif lc != nb + ln - 1:
                a = None
            if rc == nb + rn - 1 and rn == 2:
                b = _matrix_transpose(b, nb)
            elif rc != nb:
                b = None
            if a is not None and b is not None:
                work = eqn.outputs[0].type.size * lhs.shape[lc]
                blas_dtype = lhs.dtype != np.float16  # BLAS has no half precision
                if ctx.one_blas and blas_dtype and nb == 0 and ln == rn == 2 and (
                        work >= ONE_BLAS_MIN_WORK or alpha != 1.0):
                    return _gemm(ctx, eqn, a, b, alpha)
                product = s.binop(a, "@", b)
                return product if alpha == 1.0 else s.binop(s.number(alpha), "*", product)
    ln, rn = lhs.type.ndim, rhs.type.ndim
    if not nb and ((rn == 1 and d.lhs_contract == (ln - 1,)) or (ln == 1 and rn > 2 and d.rhs_contract == (rn - 2,))):
        return s.binop(ins[0], "@", ins[1])  # a stack of matrices times a vector, or a vector times one
    if not nb:
        if not d.lhs_contract:
            return s.call("np.multiply.outer", *ins)
        return s.call("np.tensordot", *ins, axes=s.tuple_([s.ints(d.lhs_contract), s.ints(d.rhs_contract)]))
    return s.call("np.einsum", cst.SimpleString(repr(_einsum_spec(lhs.type.ndim, rhs.type.ndim, d))), *ins)


def _gemm(ctx: Context, eqn: Eqn, a: Expr, b: Expr, alpha: float = 1.0) -> Expr:
    """``a @ b`` as SciPy's gemm: (a b)^T = b^T a^T in column-major terms, read back through ``.T``.
    Each operand goes in as the F-ordered view of its transpose (``x.T`` of a C-ordered ``x``) or,
    F-ordered already, as itself with its ``trans`` flag set: no copy either way."""
    from pullback.backends.numpy.linalg import blas

    def f_view(x: Expr, position: int) -> tuple[Expr, int]:  # (the F-ordered array, trans flag) for x^T
        transposed = isinstance(x, cst.Attribute) and x.attr.value == "T"
        if (position in ctx.fortran) != transposed:  # x is F-ordered: itself, transposed by BLAS
            return x, 1
        return (x.value if transposed else s.attribute(x, "T")), 0

    (bt, trans_b), (at, trans_a) = f_view(b, 1), f_view(a, 0)
    flags = {name: s.number(1) for name, flag in (("trans_a", trans_b), ("trans_b", trans_a)) if flag}
    return s.attribute(s.call(blas(ctx, "gemm", eqn.inputs[0].dtype), s.number(float(alpha)), bt, at, **flags), "T")


# ``alpha (a . b)``: a matrix product whose only reader scaled or negated it, made while printing (``scaled_products``)
scaled_product_p = Primitive("scaled_product", registered=False)
EMITTERS[scaled_product_p] = lambda ctx, eqn, ins, outs: _dot_general(ctx, eqn, ins, outs, eqn.params["alpha"])


def scaled_products(program, ctx: Context):
    """``program`` with each real scaling or negation of a matrix product that nothing else reads made one
    ``scaled_product``, printed as gemm with the scalar in BLAS's alpha (no pass over the result, no
    temporary), in programs that call SciPy's BLAS anyway (``one_blas``): ``A_bar = dgemm(-1.0, ...)``, not
    ``A_bar = dgemm(1.0, ...); A_bar_1 = -A_bar``."""
    from collections import Counter

    from pullback.ir.core import Params, Program, Var

    if not ctx.one_blas:
        return program
    products = {id(e.outputs[0]): e for e in program.eqns if e.prim is con.dot_general_p and _plain_matrix_product(e)}
    if not products:
        return program
    readers = Counter(id(a) for e in program.eqns for a in e.inputs if isinstance(a, Var))
    readers.update(id(a) for a in program.outputs if isinstance(a, Var))
    fold: dict[int, tuple[Eqn, float]] = {}  # id(scaling equation) -> (its product, alpha)
    for e in program.eqns:
        scaled = _real_scaling(e)
        d = products.get(id(scaled[0])) if scaled is not None else None
        if d is not None and readers[id(scaled[0])] == 1 and d.outputs[0].type == e.outputs[0].type:
            fold[id(e)] = (d, scaled[1])
    if not fold:
        return program
    gone = {id(d) for d, _ in fold.values()}
    eqns = []
    for e in program.eqns:
        if id(e) in gone:
            continue
        if id(e) in fold:
            d, alpha = fold[id(e)]
            e = Eqn(scaled_product_p, d.inputs, e.outputs, Params({**d.params, "alpha": alpha}), d.source)
        eqns.append(e)
    return Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals, program.name)


# the backend's print-time rewrites of a whole program, in order (``codegen``): (program, ctx) -> program
PREPARE: list = [scaled_products]


def _plain_matrix_product(e: Eqn) -> bool:
    """A product of two matrices, one axis contracted, that BLAS's gemm computes."""
    d: con.DotDims = e.params["dims"]
    a, b = e.inputs
    return (not d.lhs_batch and len(d.lhs_contract) == 1 and isinstance(a, Var) and isinstance(b, Var)
            and a.type.ndim == b.type.ndim == 2 and a.dtype == b.dtype and a.dtype.kind in "fc"
            and a.dtype != np.float16)


def _real_scaling(e: Eqn):
    """``(x, c)`` for ``-x`` (c = -1) or ``x * c`` with a real literal ``c``, else None."""
    if e.prim is ew.neg_p:
        return e.inputs[0], -1.0
    if e.prim is ew.mul_p:
        x, y = e.inputs
        x, y = (y, x) if isinstance(x, Literal) else (x, y)
        if isinstance(y, Literal) and not isinstance(y.value, bool) and complex(y.value).imag == 0:
            return x, float(complex(y.value).real)
    return None


def _matrix_transpose(x: Expr, nb: int) -> Expr:
    return s.attribute(x, "mT" if nb else "T")


def _einsum_spec(ln: int, rn: int, d: con.DotDims) -> str:
    """Subscripts for a contraction, from letters we choose (never user text)."""
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    lhs = [""] * ln
    rhs = [""] * rn
    for i, j in zip(d.lhs_batch + d.lhs_contract, d.rhs_batch + d.rhs_contract):
        lhs[i] = rhs[j] = next(letters)
    for spec in (lhs, rhs):
        for i, c in enumerate(spec):
            if not c:
                spec[i] = next(letters)
    out = [lhs[i] for i in d.lhs_batch]
    out += [lhs[i] for i in con.free_axes(ln, d.lhs_contract, d.lhs_batch)]
    out += [rhs[i] for i in con.free_axes(rn, d.rhs_contract, d.rhs_batch)]
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


@emits(fft_.fft_p)
def _fft(ctx, eqn, ins, outs):
    """``np.fft.fft(x, n=8, axis=0, norm="ortho")``; several axes as ``fft2`` (the last two) or
    ``fftn``; ``n``/``s``, ``axis``/``axes`` and ``norm`` printed only where not NumPy's default."""
    p, (x,) = eqn.params, eqn.inputs
    kind, axes, lengths, norm = p["kind"], p["axes"], p["lengths"], p["norm"]
    ndim = x.type.ndim
    default = [x.shape[a] for a in axes]
    if kind is fft_.FftKind.REAL_INVERSE:
        default[-1] = 2 * (default[-1] - 1)
    kw = {}
    if len(axes) == 1:
        func = kind.value
        if lengths[0] != default[0]:
            kw["n"] = s.number(lengths[0])
        if axes[0] != ndim - 1:
            kw["axis"] = s.number(axes[0])
    else:
        two = axes == (ndim - 2, ndim - 1)
        func = kind.value + ("2" if two else "n")
        if list(lengths) != default:
            kw["s"] = s.ints(lengths)
        if not two and (axes != tuple(range(ndim)) or "s" in kw):
            kw["axes"] = s.ints(axes)
    if norm is not fft_.FftNorm.BACKWARD:
        kw["norm"] = cst.SimpleString(repr(norm.value))
    return s.call(f"np.fft.{func}", ins[0], **kw)


@emits(custom_lin_p)
def _custom_lin(ctx, eqn, ins, outs):
    """A custom_vjp's linear map has no forward evaluation (its transpose is the user's bwd): only a
    forward-mode program prints it."""
    raise TracingError("forward-mode differentiation (jvp) of a custom_vjp function is not supported, "
                       "as in JAX: give it a custom_jvp rule for forward mode")


# families whose emitters live in modules of their own register them on import
import pullback.backends.numpy.banded  # noqa: E402,F401
import pullback.backends.numpy.random  # noqa: E402,F401
import pullback.backends.numpy.signal  # noqa: E402,F401
import pullback.backends.numpy.special  # noqa: E402,F401
from pullback.backends.numpy import indexing as numpy_indexing  # noqa: E402
from pullback.backends.numpy import linalg as numpy_linalg  # noqa: E402
