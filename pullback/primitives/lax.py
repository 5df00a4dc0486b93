"""Strict array operations, one per primitive: what JVP and transpose rules are
written in. Unlike the front end's (``frontend.numpy``) they neither promote nor broadcast; a Python
scalar operand becomes a Literal of the other operand's dtype. Trivial
applications (reshape to the same shape, an identity transpose) bind nothing."""

from __future__ import annotations

import numpy as np

from pullback.ad import emit
from pullback.ad import ops as ad_ops
from pullback.ad.emit import record as bind  # ``ir.tracer.bind``, leaner for the rules' operations
from pullback.ir.core import Literal
from pullback.ir.tracer import PYTHON_SCALARS, Tracer
from pullback.ir.types import ArrayType
from pullback.primitives import contractions as con
from pullback.primitives import cumulative as cum
from pullback.primitives import elementwise as ew
from pullback.primitives import reductions as red
from pullback.primitives import special as sp
from pullback.primitives import structural as st


def _pair(x, y):
    if type(x) is not Tracer and isinstance(x, PYTHON_SCALARS):  # (a tracer first: the common case, no call)
        x = Literal.of(x, y.dtype)
    if type(y) is not Tracer and isinstance(y, PYTHON_SCALARS):
        y = Literal.of(y, x.dtype)
    return x, y


# Operations on literals alone are folded rather than bound (here and in ``simplify``).
FOLD = {
    ew.add_p: np.add, ew.sub_p: np.subtract, ew.mul_p: np.multiply, ew.div_p: np.divide, ew.pow_p: np.power,
    ew.neg_p: np.negative, ew.log_p: np.log, ew.exp_p: np.exp, ew.sqrt_p: np.sqrt, ew.conj_p: np.conj,
    ew.floor_p: np.floor, ew.ceil_p: np.ceil, ew.trunc_p: np.trunc, ew.rint_p: np.rint, ew.log10_p: np.log10,
    ew.log2_p: np.log2, ew.exp2_p: np.exp2, ew.arcsin_p: np.arcsin, ew.arccos_p: np.arccos, ew.arctan_p: np.arctan,
    ew.arcsinh_p: np.arcsinh, ew.arccosh_p: np.arccosh, ew.arctanh_p: np.arctanh, ew.cbrt_p: np.cbrt,
    ew.sinc_p: np.sinc, ew.floor_divide_p: np.floor_divide, ew.rem_p: np.remainder, ew.fmod_p: np.fmod,
    ew.arctan2_p: np.arctan2, ew.hypot_p: np.hypot, ew.isnan_p: np.isnan, ew.isinf_p: np.isinf,
    ew.isfinite_p: np.isfinite, ew.clip_p: np.clip, ew.sign_p: np.sign, ew.log1p_p: np.log1p, ew.expm1_p: np.expm1,
    ew.sin_p: np.sin, ew.cos_p: np.cos, ew.tan_p: np.tan, ew.tanh_p: np.tanh, ew.sinh_p: np.sinh, ew.cosh_p: np.cosh,
    ew.abs_p: np.abs, ew.real_p: np.real, ew.imag_p: np.imag, ew.angle_p: np.angle, ew.max_p: np.maximum,
    ew.min_p: np.minimum, ew.fmax_p: np.fmax, ew.fmin_p: np.fmin, ew.copysign_p: np.copysign,
    ew.logaddexp_p: np.logaddexp, ew.logaddexp2_p: np.logaddexp2, ew.eq_p: np.equal, ew.ne_p: np.not_equal,
    ew.lt_p: np.less, ew.le_p: np.less_equal, ew.gt_p: np.greater, ew.ge_p: np.greater_equal,
    ew.and_p: np.bitwise_and, ew.or_p: np.bitwise_or, ew.xor_p: np.bitwise_xor, ew.not_p: np.invert,
}


def _scipy_special(name: str):
    import scipy.special

    return getattr(scipy.special, name)


FOLD.update({p: _scipy_special(name) for p, name in sp.SCIPY_NAMES.items()})
FOLD[ew.logistic_p] = _scipy_special("expit")


def _apply(prim, *xs):
    for x in xs:  # a loop, not all() of a generator: this runs for every equation a rule records
        if type(x) is not Literal:
            return emit.apply(prim, *xs)
    if prim in FOLD:
        value = FOLD[prim](*(np.asarray(x.value, x.dtype) for x in xs))
        return Literal.of(value, value.dtype)
    return bind(prim, *xs)


def _binary(prim):
    def op(x, y):  # the common cases (a tracer and a tracer, literal or Python float or int) in one call
        if type(x) is Tracer:
            if type(y) is Tracer or type(y) is Literal:
                return emit.apply2(prim, x, y)
            if type(y) is float or type(y) is int:
                return emit.apply2(prim, x, Literal.of(y, x.ssa.type.dtype))
        elif type(y) is Tracer:
            if type(x) is Literal:
                return emit.apply2(prim, x, y)
            if type(x) is float or type(x) is int:
                return emit.apply2(prim, Literal.of(x, y.ssa.type.dtype), y)
        return _apply(prim, *_pair(x, y))

    return op


def _unary(prim):
    def op(x):
        return emit.apply1(prim, x) if type(x) is Tracer else _apply(prim, x)

    return op


add, sub, mul, div, pow = (_binary(p) for p in (ew.add_p, ew.sub_p, ew.mul_p, ew.div_p, ew.pow_p))
maximum, minimum = _binary(ew.max_p), _binary(ew.min_p)
eq, ne, lt, le, gt, ge = (_binary(p) for p in (ew.eq_p, ew.ne_p, ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p))
neg, exp, log, log1p, expm1, sqrt = (_unary(p) for p in (ew.neg_p, ew.exp_p, ew.log_p, ew.log1p_p, ew.expm1_p,
                                                         ew.sqrt_p))
sin, cos, tan, tanh, sinh, cosh = (_unary(p) for p in (ew.sin_p, ew.cos_p, ew.tan_p, ew.tanh_p, ew.sinh_p,
                                                       ew.cosh_p))
abs, sign, logistic = _unary(ew.abs_p), _unary(ew.sign_p), _unary(ew.logistic_p)
floor, ceil, trunc, rint = (_unary(p) for p in (ew.floor_p, ew.ceil_p, ew.trunc_p, ew.rint_p))
isnan, isinf, isfinite = (_unary(p) for p in (ew.isnan_p, ew.isinf_p, ew.isfinite_p))
log10, log2, exp2, cbrt, sinc, angle = (_unary(p) for p in (ew.log10_p, ew.log2_p, ew.exp2_p, ew.cbrt_p, ew.sinc_p,
                                                            ew.angle_p))
arcsin, arccos, arctan = (_unary(p) for p in (ew.arcsin_p, ew.arccos_p, ew.arctan_p))
arcsinh, arccosh, arctanh = (_unary(p) for p in (ew.arcsinh_p, ew.arccosh_p, ew.arctanh_p))
floor_divide, rem, fmod = (_binary(p) for p in (ew.floor_divide_p, ew.rem_p, ew.fmod_p))
arctan2, hypot, copysign = (_binary(p) for p in (ew.arctan2_p, ew.hypot_p, ew.copysign_p))
logaddexp, logaddexp2, fmax, fmin = (_binary(p) for p in (ew.logaddexp_p, ew.logaddexp2_p, ew.fmax_p, ew.fmin_p))

# scipy.special (pullback.primitives.special)
gammaln, gamma, digamma, erf, erfc, erfinv, erfcinv, erfcx = (_unary(p) for p in (
    sp.gammaln_p, sp.gamma_p, sp.digamma_p, sp.erf_p, sp.erfc_p, sp.erfinv_p, sp.erfcinv_p, sp.erfcx_p))
ndtr, ndtri, log_ndtr, i0, i1, i0e, i1e = (_unary(p) for p in (
    sp.ndtr_p, sp.ndtri_p, sp.log_ndtr_p, sp.i0_p, sp.i1_p, sp.i0e_p, sp.i1e_p))
entr, logit, log_expit = _unary(sp.entr_p), _unary(sp.logit_p), _unary(sp.log_expit_p)
xlogy, xlog1py, beta, betaln, gammainc, gammaincc = (_binary(p) for p in (
    sp.xlogy_p, sp.xlog1py_p, sp.beta_p, sp.betaln_p, sp.gammainc_p, sp.gammaincc_p))

j0, j1, y0, y1, k0, k1, k0e, k1e = (_unary(p) for p in (
    sp.j0_p, sp.j1_p, sp.y0_p, sp.y1_p, sp.k0_p, sp.k1_p, sp.k0e_p, sp.k1e_p))
gammasgn, rgamma = _unary(sp.gammasgn_p), _unary(sp.rgamma_p)
# Bessel functions of order v (the first operand)
jv, yv, yn, iv, ive, kv, kve = (_binary(p) for p in (sp.jv_p, sp.yv_p, sp.yn_p, sp.iv_p, sp.ive_p, sp.kv_p,
                                                    sp.kve_p))


def betainc(a, b, x):
    a, b = (Literal.of(v, x.dtype) if isinstance(v, PYTHON_SCALARS) else v for v in (a, b))
    return _apply(sp.betainc_p, a, b, x)


def stop_gradient(x):
    """``x``, with a zero derivative."""
    return bind(sp.stop_gradient_p, x)


def polygamma(n, x):
    """``polygamma(n, x)``, computed in float64 as SciPy does (a float32 ``x`` is converted there and back)."""
    wide = convert(x, np.float64)
    n = Literal.of(n, wide.dtype) if isinstance(n, PYTHON_SCALARS) else convert(n, np.float64)
    return convert(_apply(sp.polygamma_p, n, wide), x.dtype)


def clip(x, lo, hi):
    lo, hi = (Literal.of(b, x.dtype) if isinstance(b, PYTHON_SCALARS) else b for b in (lo, hi))
    return _apply(ew.clip_p, x, lo, hi)


def round(x, decimals: int = 0):
    return bind(ew.round_p, x, decimals=decimals)


def nan_to_num(x, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
    return bind(ew.nan_to_num_p, x, nan=nan, posinf=posinf, neginf=neginf)


def integer_pow(x, y: int):
    return x if y == 1 else bind(ew.integer_pow_p, x, y=y)


def real(x):
    return bind(ew.real_p, x) if x.dtype.kind == "c" else x


def imag(x):
    return bind(ew.imag_p, x)


def conj(x):
    """Complex conjugate; the identity on real values (so rules can conjugate unconditionally)."""
    return _apply(ew.conj_p, x) if x.dtype.kind == "c" else x


def select(pred, on_true, on_false):
    like = on_false if isinstance(on_true, PYTHON_SCALARS) else on_true
    if isinstance(on_true, PYTHON_SCALARS):
        on_true = Literal.of(on_true, like.dtype)
    if isinstance(on_false, PYTHON_SCALARS):
        on_false = Literal.of(on_false, like.dtype)
    return bind(ew.select_p, pred, on_true, on_false)


def convert(x, dtype):
    dtype = np.dtype(dtype)
    return x if x.dtype == dtype else bind(st.convert_element_type_p, x, new_dtype=dtype)


def full(shape, value, dtype):
    return bind(st.broadcast_in_dim_p, Literal.of(value, dtype), shape=tuple(shape), broadcast_dimensions=())


def zeros(t: ArrayType):
    return full(t.shape, 0, t.dtype)


def broadcast_in_dim(x, shape, dims):
    shape, dims = tuple(shape), tuple(dims)
    if x.shape == shape and dims == tuple(range(len(shape))):
        return x
    return bind(st.broadcast_in_dim_p, x, shape=shape, broadcast_dimensions=dims)


def reshape(x, shape):
    shape = tuple(shape)
    return x if x.shape == shape else bind(st.reshape_p, x, new_sizes=shape)


def transpose(x, perm):
    perm = tuple(perm)
    return x if perm == tuple(range(len(perm))) else bind(st.transpose_p, x, permutation=perm)


def slice(x, start_indices, limit_indices, strides):
    return bind(st.slice_p, x, start_indices=tuple(start_indices), limit_indices=tuple(limit_indices),
                strides=tuple(strides))


def pad(x, shape, start_indices, limit_indices, strides):
    return bind(st.pad_p, x, shape=tuple(shape), start_indices=tuple(start_indices),
                limit_indices=tuple(limit_indices), strides=tuple(strides))


def concatenate(xs, dimension: int):
    return xs[0] if len(xs) == 1 else bind(st.concatenate_p, *xs, dimension=dimension)


def diagonal(x, offset: int = 0):
    return bind(st.diagonal_p, x, offset=offset)


def diag_embed(x, shape, offset: int = 0):
    return bind(st.diag_embed_p, x, shape=tuple(shape), offset=offset)


def add_transpose(x):
    """``x + x.T`` for a square matrix ``x``."""
    return bind(st.add_transpose_p, x)


def add_diagonal(x, v):
    """``x + diag_embed(v)`` for a square matrix ``x``."""
    return bind(st.add_diagonal_p, x, v)


def tril(x, k: int = 0):
    return bind(st.tril_p, x, k=k)


def triu(x, k: int = 0):
    return bind(st.triu_p, x, k=k)


def reduce_sum(x, axes):
    axes = tuple(axes)
    return bind(red.reduce_sum_p, x, axes=axes) if axes else x


def reduce_max(x, axes):
    axes = tuple(axes)
    return bind(red.reduce_max_p, x, axes=axes) if axes else x


def reduce_prod(x, axes):
    axes = tuple(axes)
    return bind(cum.reduce_prod_p, x, axes=axes) if axes else x


def cumsum(x, axis: int, reverse: bool = False):
    return bind(cum.cumsum_p, x, axis=axis, reverse=reverse)


def cumprod(x, axis: int, reverse: bool = False):
    return bind(cum.cumprod_p, x, axis=axis, reverse=reverse)


def slice_axis(x, axis: int, start: int, limit: int, stride: int = 1):
    """``x[..., start:limit:stride, ...]`` along one axis."""
    starts, limits, strides = [0] * x.ndim, list(x.shape), [1] * x.ndim
    starts[axis], limits[axis], strides[axis] = start, limit, stride
    return slice(x, starts, limits, strides)


def dot_general(x, y, dims: con.DotDims):
    return bind(con.dot_general_p, x, y, dims=dims)


# --- matrices ---------------------------------------------------------------------------------


def mT(x):
    """Swap the last two axes."""
    n = x.ndim
    return transpose(x, (*range(n - 2), n - 1, n - 2))


def H(x):
    """Conjugate transpose of the last two axes."""
    return conj(mT(x))


def matmul(a, b):
    """(..., m, k) @ (..., k, n) with equal batch axes."""
    nb = a.ndim - 2
    batch = tuple(range(nb))
    return dot_general(a, b, con.DotDims((nb + 1,), (nb,), batch, batch))


def trsm(a, b, *, left: bool = True, lower: bool = True, trans=0, unit_diagonal: bool = False, check: bool = False,
         alpha: float = 1.0):
    """X with op(A) X = alpha B (left) or X op(A) = alpha B (alpha a real Python number, BLAS's)."""
    from pullback.primitives.linalg import factorizations as linalg

    return bind(linalg.trsm_p, a, b, left=left, lower=lower, trans=linalg.Trans(trans), unit_diagonal=unit_diagonal,
                check=check, **({} if alpha == 1.0 else {"alpha": float(alpha)}))


def ger(a, x, y):
    """``a + outer(x, y)`` (no conjugate), in a's buffer when it is dead."""
    from pullback.primitives.linalg import rank_update

    return bind(rank_update.ger_p, a, x, y)


def trmm(a, b, *, left: bool = True, lower: bool = True, trans=0, unit_diagonal: bool = False, alpha: float = 1.0):
    """alpha op(T) B (left) or alpha B op(T) (alpha a real Python number, BLAS's)."""
    from pullback.primitives.linalg import factorizations as linalg

    return bind(linalg.trmm_p, a, b, left=left, lower=lower, trans=linalg.Trans(trans), unit_diagonal=unit_diagonal,
                **({} if alpha == 1.0 else {"alpha": float(alpha)}))


def permute(x, perm):
    from pullback.primitives.linalg import factorizations as linalg

    return bind(linalg.permute_p, x, perm)


def unpermute(x, perm):
    from pullback.primitives.linalg import factorizations as linalg

    return bind(linalg.unpermute_p, x, perm)


def slice_last2(x, rows: tuple[int, int], cols: tuple[int, int]):
    """x[..., r0:r1, c0:c1]."""
    nb = x.ndim - 2
    return slice(x, (0,) * nb + (rows[0], cols[0]), x.shape[:nb] + (rows[1], cols[1]), (1,) * x.ndim)


# --- indexing (pullback.primitives.indexing) ----------------------------------------------------


def iota(dtype, shape, dimension: int):
    return bind(st.iota_p, dtype=np.dtype(dtype), shape=tuple(shape), dimension=dimension)


def gather(x, idx, index, unique_indices: bool = False):
    """``x[key]``; a key without index arrays is a slice and a reshape."""
    from pullback.primitives import indexing as ix

    if ix.is_advanced(index):
        return bind(ix.gather_p, x, *idx, index=tuple(index), unique_indices=unique_indices)
    starts, limits, strides, shape = [], [], [], []
    for e in index:
        if isinstance(e, ix.NewAxis):
            shape.append(1)
        elif isinstance(e, ix.Int):
            starts.append(e.value), limits.append(e.value + 1), strides.append(1)
        else:
            starts.append(e.start), limits.append(e.stop), strides.append(e.step)
            shape.append(len(e))
    if (tuple(starts), tuple(limits), tuple(strides)) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        x = slice(x, starts, limits, strides)
    return reshape(x, shape)


def scatter_add(x, updates, idx, index, unique_indices: bool = False):
    """A copy of ``x`` with ``np.add.at(out, key, updates)``."""
    from pullback.primitives import indexing as ix

    return bind(ix.scatter_add_p, x, updates, *idx, index=tuple(index), unique_indices=unique_indices)


def scatter(x, updates, idx, index, unique_indices: bool = False):
    """A copy of ``x`` with ``out[key] = updates``."""
    from pullback.primitives import indexing as ix

    return bind(ix.scatter_p, x, updates, *idx, index=tuple(index), unique_indices=unique_indices)


def dynamic_slice(x, starts, axes, sizes, check: bool = True):
    """``x[..., s:s + size, ...]`` along ``axes`` from traced 0-d integer ``starts``."""
    from pullback.primitives import indexing as ix

    return bind(ix.dynamic_slice_p, x, *starts, axes=tuple(axes), sizes=tuple(sizes), check=check)


def dynamic_update_slice(x, update, starts, axes, sizes, check: bool = True):
    """A copy of ``x`` with ``update`` written in the window of ``dynamic_slice``."""
    from pullback.primitives import indexing as ix

    return bind(ix.dynamic_update_slice_p, x, update, *starts, axes=tuple(axes), sizes=tuple(sizes), check=check)


def scatter_winners(shape, idx, index):
    """Where ``out[key] = updates`` repeats indices, True for the write NumPy keeps: each
    update writes its own position, and reads back whose position stayed."""
    from pullback.primitives import indexing as ix

    upd = ix.indexed_shape(tuple(shape), tuple(index), [i.shape for i in idx])
    pos = reshape(iota(ix.INDEX_DTYPE, (int(np.prod(upd, dtype=np.int64)),), 0), upd)
    written = scatter(full(shape, -1, ix.INDEX_DTYPE), pos, idx, index)
    return eq(gather(written, idx, index), pos)


def take_along_axis(x, indices, axis: int, unique_indices: bool = False):
    """``np.take_along_axis`` for equal ranks: an index array per axis, ``arange`` on the others
    (``unique_indices``: ``indices`` is a permutation along ``axis``)."""
    from pullback.primitives import indexing as ix

    idx = [indices if a == axis else iota(ix.INDEX_DTYPE, [n if i == a else 1 for i, n in enumerate(indices.shape)], a)
           for a in range(x.ndim)]
    return gather(x, idx, [ix.Operand(a) for a in range(x.ndim)], unique_indices)


def fft(x, kind, axes, lengths, norm):
    """The ``kind`` transform over ``axes`` of lengths ``lengths`` (see ``primitives.fft``)."""
    from pullback.primitives import fft as fft_

    return bind(fft_.fft_p, x, kind=fft_.FftKind(kind), axes=tuple(axes), lengths=tuple(lengths),
                norm=fft_.FftNorm(norm))


def convolve(a, b, mode, method="auto"):
    """SciPy's N-d ``convolve(a, b, mode, method)`` of equal-rank operands (see ``primitives.signal``)."""
    from pullback.primitives import signal

    return bind(signal.convolve_p, a, b, mode=signal.ConvMode(mode), method=signal.ConvMethod(method))


def correlate(a, b, mode, method="auto"):
    """SciPy's N-d ``correlate(a, b, mode, method)``: ``convolve(a, flip(conj(b)), mode)``."""
    from pullback.primitives import signal

    return bind(signal.correlate_p, a, b, mode=signal.ConvMode(mode), method=signal.ConvMethod(method))


def gbsv(ab, b, lower: int, upper: int):
    """``A^{-1} b`` for the banded ``A`` stored as ``ab[upper + i - j, j]`` (SciPy's ``solve_banded``)."""
    from pullback.primitives.linalg import banded

    return bind(banded.gbsv_p, ab, b, lower=lower, upper=upper)


def band_transpose(ab, lower: int, upper: int):
    """The band storage of ``A^T`` (``upper`` diagonals below, ``lower`` above) from ``A``'s."""
    from pullback.primitives.linalg import banded

    return bind(banded.band_transpose_p, ab, lower=lower, upper=upper)


def getrs(lu, piv, b, trans=0):
    """``op(A)^{-1} b`` from getrf's packed factors and pivots (see ``primitives.factored``)."""
    from pullback.primitives.linalg import factor_solves as factored
    from pullback.primitives.linalg import factorizations as linalg

    return bind(factored.getrs_p, lu, piv, b, trans=linalg.Trans(trans))


def getri(lu, piv):
    """``A^{-1}`` from getrf's packed factors and pivots."""
    from pullback.primitives.linalg import factor_solves as factored

    return bind(factored.getri_p, lu, piv)


def potrs(l, b):
    """``(L L^H)^{-1} b`` from the lower Cholesky factor ``l``."""
    from pullback.primitives.linalg import factor_solves as factored

    return bind(factored.potrs_p, l, b)


# the interpreters' (ad/) own array operations: zeros and sums of tangents, batch axes moved and stacked
ad_ops.register(zeros=zeros, full=full, add=add, reshape=reshape, transpose=transpose, concatenate=concatenate,
                broadcast_in_dim=broadcast_in_dim, slice_axis=slice_axis)
