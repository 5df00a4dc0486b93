"""NumPy on traced arrays: ufuncs, array functions, operators and indexing,
lowered to primitives with NumPy's promotion (NEP 50: Python scalars are weak)
and broadcasting made explicit (``broadcast_in_dim``).

This module holds the core (promotion, broadcasting, the dispatch tables and the
basic vocabulary); the submodules add families of NumPy functions and register them
with ``implements`` / ``implements_ufunc``."""

from __future__ import annotations

import builtins
import math
import string
import sys
from collections.abc import Callable

import numpy as np
import scipy.special

from pullback.errors import ArgumentError, ArgumentTypeError, AxisError, ConcretizationError, TracingError
from pullback.frontend import eyes
from pullback.frontend.numpy import integers
from pullback.ir.core import Literal
from pullback.ir.tracer import PYTHON_SCALARS, Tracer, bind, current_builder, located, refuse_masked, user_frame
from pullback.ir.types import DTYPES, canonical_dtype, is_complex, is_inexact
from pullback.primitives import contractions as con
from pullback.primitives import elementwise as ew
from pullback.primitives import reductions as red
from pullback.primitives import structural as st
from pullback.primitives.lax import FOLD

ARRAYS = (Tracer, np.ndarray, np.generic)


def unsupported(what: str):
    raise TracingError(located(f"{what} is not supported on traced values by pullback"))


def numpy_checks(func: Callable, *standins, **options) -> None:
    """Raise what NumPy raises for ``options`` it does not take (a ``kind``, ``order``, ``casting``
    or ``mode`` it does not know, a cast its ``casting`` rule forbids), by asking NumPy: ``func`` on
    ``standins``, empty arrays of the operands' dtypes (see ``standin``), costs nothing. pullback so
    takes exactly the spellings NumPy's converters take (prefixes, either case, None), and refuses
    the others with NumPy's exception type and message, at the user's line."""
    try:
        func(*standins, **options)
    except np.exceptions.AxisError as e:
        raise AxisError(located(str(e))) from None
    except ValueError as e:
        raise ArgumentError(located(str(e))) from None
    except TypeError as e:
        raise ArgumentTypeError(located(str(e))) from None


def standin(x) -> np.ndarray:
    """An empty array of ``x``'s dtype (a Python scalar's: NumPy's default), for ``numpy_checks``."""
    return np.empty(0, x.dtype if isinstance(x, Tracer | np.ndarray | np.generic) else np.asarray(x).dtype)


def refuse_conversion(x: Tracer):
    """``np.asarray`` of a tracer: name the SciPy function that asked, and its pullback.linalg equivalent;
    ``np.ma`` asking means a masked array met a tracer (``masked * x``, ``np.ma.masked_array(x, mask)``)."""
    frame, scipy_frames = sys._getframe(1), []
    user = user_frame(1)
    while frame is not None and frame is not user:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("scipy."):
            scipy_frames.append(frame)
        elif module.startswith("numpy.ma."):
            refuse_masked()
        frame = frame.f_back
    named = next(filter(None, map(_scipy_function, reversed(scipy_frames))), None)
    if user is not None and "__pullback_call__" not in user.f_code.co_freevars:
        raise ConcretizationError(located(
            f"a traced value {x.ssa.type} reached NumPy or SciPy from code whose source pullback cannot read "
            f"({user.f_code.co_filename}), so the calls in it are not seen by pullback (np.array of a list, "
            f"scipy.special.logsumexp, scipy.linalg, random draws): define the function in a file or a notebook "
            f"cell, or use what NumPy dispatches itself (np.stack, np.concatenate)"))
    if named is None:
        hint = (" (to index a NumPy array by traced positions, use np.take_along_axis(a, positions, axis), "
                "which pullback traces)") if x.dtype.kind == "i" else ""
        raise ConcretizationError(located(
            f"a traced value {x.ssa.type} cannot be converted to a NumPy array (np.asarray/np.array); "
            f"keep it symbolic, or compute it outside the traced function{hint}"
        ))
    module, func = named
    try:
        from pullback.frontend import linalg
        equivalent = getattr(linalg, func, None)
    except ImportError:
        equivalent = None
    advice = f"use pullback.linalg.{func} instead" if equivalent else "pullback.linalg has no equivalent of it yet"
    raise ConcretizationError(located(
        f"{module}.{func} calls np.asarray on a traced value, so it cannot be traced; {advice}"
    ))


def _scipy_function(frame) -> tuple[str, str] | None:
    """(public module, function) that a SciPy frame runs: its own function, or the one a
    decorator's wrapper closes over (SciPy wraps functions that convert arguments first)."""
    module = _public(frame.f_globals["__name__"])
    if hasattr(sys.modules.get(module), frame.f_code.co_name):
        return module, frame.f_code.co_name
    for value in frame.f_locals.values():
        name, owner = getattr(value, "__name__", None), getattr(value, "__module__", None) or ""
        if callable(value) and owner.startswith("scipy.") and hasattr(sys.modules.get(_public(owner)), name or "_"):
            return _public(owner), name
    return None


def _public(module: str) -> str:
    """``scipy.linalg._decomp_cholesky`` -> ``scipy.linalg``."""
    return ".".join(p for p in module.split(".") if not p.startswith("_"))


# --- promotion and broadcasting --------------------------------------------------

_WEAK_REP = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}


def _is_weak(x) -> bool:
    return type(x) in PYTHON_SCALARS or (isinstance(x, Tracer) and x.weak)


def result_dtype(*xs) -> np.dtype:
    """NumPy's result dtype: arrays and NumPy scalars are strong, Python scalars (by exact type:
    ``np.float64`` subclasses ``float``) and tracers of Python scalar arguments weak (NEP 50).

    Remembered by the operands' dtypes and weak kinds where one is strong: a weak scalar's value does not
    change the result then (NEP 50), and an unrolled loop asks the same few questions at every step."""
    key = tuple([_WEAK_OF_TYPE[t] if t in PYTHON_SCALARS else (
        (_WEAK_OF_KIND[x.ssa.type.dtype.kind] if x.weak else x.ssa.type.dtype) if t is Tracer
        else x.dtype) for x in xs for t in (type(x),)])
    found = _RESULT_DTYPES.get(key)
    if found is not None:
        return found
    found = _result_dtype(xs)
    found = _CANONICAL.get(found, found)  # the one object per dtype, which the fast paths compare by identity
    if builtins.any([type(k) is not _Weak for k in key]):  # a strong operand: the values do not matter
        if len(_RESULT_DTYPES) > 4096:
            _RESULT_DTYPES.clear()
        _RESULT_DTYPES[key] = found
    return found


class _Weak:
    """A weak operand of a kind in ``result_dtype``'s keys (never equal to a dtype, as a type can be)."""

    __slots__ = ()


_WEAK_OF_TYPE = {t: _Weak() for t in PYTHON_SCALARS}
_WEAK_OF_KIND = {kind: _WEAK_OF_TYPE[type(rep)] for kind, rep in _WEAK_REP.items()}
_RESULT_DTYPES: dict[tuple, np.dtype] = {}
_CANONICAL = {d: d for d in DTYPES}


def _result_dtype(xs) -> np.dtype:
    reps = []
    for x in xs:
        if type(x) in PYTHON_SCALARS:
            reps.append(x)
        elif _is_weak(x):
            reps.append(_WEAK_REP[x.dtype.kind])
        else:
            reps.append(x.dtype)
    return canonical_dtype(np.result_type(*reps))


def _check_operand(x):
    if not isinstance(x, ARRAYS + PYTHON_SCALARS):
        unsupported(f"an operand of type {type(x).__name__}")
    return x


def astype(x, dtype):
    dtype = canonical_dtype(dtype)
    if isinstance(x, PYTHON_SCALARS) and not (isinstance(x, np.generic) and eyes.derived(x)):
        return Literal.of(x, dtype)  # (``np.sum(w)`` of an array the trace made: the program's, ``eyes``)
    if x.dtype == dtype:
        return x
    return bind(st.convert_element_type_p, x, new_dtype=dtype)


def _shape_of(x) -> tuple[int, ...]:
    """``np.shape(x)``, read directly from a tracer or an array: ``np.shape`` of a tracer dispatches through
    ``__array_function__`` (the whole lowering machinery, for an attribute), at every operation traced."""
    t = type(x)
    return x.shape if t is Tracer or t is np.ndarray or t is Literal else np.shape(x)


def broadcast_to(x, shape):
    shape = tuple(shape)
    if isinstance(x, Literal) or _shape_of(x) == shape:
        return x
    nd = len(shape) - x.ndim
    if nd < 0:
        raise ArgumentError(located(f"cannot broadcast shape {x.shape} to {shape}"))
    return bind(st.broadcast_in_dim_p, x, shape=shape, broadcast_dimensions=tuple(range(nd, len(shape))))


def _shape(*xs) -> tuple[int, ...]:
    try:
        shapes = [_shape_of(x) for x in xs if not isinstance(x, PYTHON_SCALARS)]
        if shapes and shapes.count(shapes[0]) == len(shapes):  # the common case: no broadcasting
            return shapes[0]
        return np.broadcast_shapes(*shapes)
    except ValueError:
        shapes = " ".join(str(np.shape(x)) for x in xs if not isinstance(x, PYTHON_SCALARS))
        raise ArgumentError(located(f"operands could not be broadcast together with shapes {shapes}")) from None


def _weak_result(out, xs):
    if isinstance(out, Tracer):
        for x in xs:  # a loop, not all() of a generator: this runs at every operation traced
            if not _is_weak(x):
                return out
        out.weak = True
    return out


def elementwise(prim, *xs, dtype: np.dtype | None = None):
    """Bind ``prim`` after promoting ``xs`` to one dtype and broadcasting them to one shape."""
    if dtype is None and xs[1:] and not xs[2:]:  # two strong tracers of one float type (most operations): as they are
        a, b = xs
        if type(a) is Tracer and type(b) is Tracer and not a.weak and not b.weak:
            t = a.ssa.type
            if t is b.ssa.type and t.dtype.kind in "fc" and t.dtype in _CANONICAL:
                return bind(prim, a, b)
    shape = None
    for x in xs:  # the common case, without calls: tracers of one shape and Python scalars
        kind = type(x)
        if kind is Tracer:
            if shape is None:
                shape = x.ssa.type.shape
            elif x.ssa.type.shape != shape:
                break
        elif kind not in PYTHON_SCALARS and (kind is not np.float64 or eyes.derived(x)):
            break  # (a float64 a NumPy function made of no array the trace made is a literal as a float is: ``astype``)
    else:
        if shape is not None:  # (Python scalars alone are folded below)
            if dtype is None:
                dtype = _one_inexact(xs) or result_dtype(*xs)
            supported = dtype in _CANONICAL  # ``astype``'s check: then a Python scalar is made a literal at once
            args = [(x if (x.ssa.type.dtype is dtype or x.ssa.type.dtype == dtype) else astype(x, dtype))
                    if type(x) is Tracer else Literal.of(x, dtype) if supported else astype(x, dtype) for x in xs]
            out = bind(prim, *args)
            for x in xs:  # ``_weak_result``, inline
                if not (type(x) in PYTHON_SCALARS or (type(x) is Tracer and x.weak)):
                    break
            else:
                out.weak = True
            if not shape and dtype.kind in "iu":
                integers.record(prim, xs, out)
            return out
    for x in xs:
        _check_operand(x)
    dtype = result_dtype(*xs) if dtype is None else dtype
    if prim in FOLD and builtins.all([type(x) in PYTHON_SCALARS for x in xs]):
        # Python scalars alone (a spacing ``2.0 * h`` inside a composition): computed now, and a
        # Python scalar again, weak as Python's own arithmetic would leave it
        with np.errstate(all="ignore"):
            return FOLD[prim](*(np.asarray(x, dtype) for x in xs)).item()
    shape = _shape(*xs)
    args = [broadcast_to(astype(x, dtype), shape) for x in xs]
    out = _weak_result(bind(prim, *args), xs)
    if not shape and dtype.kind in "iu":  # integer scalars keep their affine forms (``it * b``)
        integers.record(prim, xs, out)
    return out


def _one_inexact(xs) -> np.dtype | None:
    """``result_dtype(*xs)`` where it needs no table: strong tracers of one float or complex dtype, beside
    Python ints and floats (weak: NEP 50 gives the arrays' dtype); None for any other operands."""
    d = None
    for x in xs:
        kind = type(x)
        if kind is Tracer:
            if x.weak:
                return None
            t = x.ssa.type.dtype
            if d is None:
                d = t
            elif t is not d and t != d:
                return None
        elif kind is not float and kind is not int:
            return None
    return _CANONICAL.get(d, d) if d is not None and d.kind in "fc" else None


def _inexact(x) -> np.dtype:
    if type(x) is Tracer and not x.weak and x.ssa.type.dtype.kind in "fc":  # (``result_dtype``'s answer)
        return _CANONICAL.get(x.ssa.type.dtype, x.ssa.type.dtype)
    d = result_dtype(x)
    return d if is_inexact(d) else np.dtype(np.float64)


def _float_unary(prim):
    return lambda x: elementwise(prim, x, dtype=_inexact(x))


def _same_unary(prim):
    return lambda x: elementwise(prim, x)


def _binary(prim):
    return lambda a, b: elementwise(prim, a, b)


add = _binary(ew.add_p)
subtract = _binary(ew.sub_p)
multiply = _binary(ew.mul_p)
maximum = _binary(ew.max_p)
minimum = _binary(ew.min_p)
equal = _binary(ew.eq_p)
not_equal = _binary(ew.ne_p)
less = _binary(ew.lt_p)
less_equal = _binary(ew.le_p)
greater = _binary(ew.gt_p)
greater_equal = _binary(ew.ge_p)
negative = _same_unary(ew.neg_p)
sign = _same_unary(ew.sign_p)


def divide(a, b):
    d = result_dtype(a, b)
    return elementwise(ew.div_p, a, b, dtype=d if is_inexact(d) else np.dtype(np.float64))


def power(a, b):
    if isinstance(b, int) and not isinstance(b, bool) and isinstance(a, Tracer):
        if b == 1:
            return a
        return _weak_result(bind(ew.integer_pow_p, astype(a, result_dtype(a, b)), y=b), (a, b))
    d = result_dtype(a, b)
    return elementwise(ew.pow_p, a, b, dtype=d if is_inexact(d) else np.dtype(np.float64))


def square(x):
    return power(x, 2)


def reciprocal(x):
    return divide(1, x) if is_inexact(result_dtype(x)) else unsupported("np.reciprocal of integers")


def absolute(x):
    return _weak_result(bind(ew.abs_p, x), (x,)) if isinstance(x, Tracer) else elementwise(ew.abs_p, x)


def real(x):
    return elementwise(ew.real_p, x) if is_complex(result_dtype(x)) else x


def imag(x):
    if is_complex(result_dtype(x)):
        return elementwise(ew.imag_p, x)
    return _weak_result(zeros_like(x), (x,))  # a Python float's .imag is a Python float


def conj(x):
    return elementwise(ew.conj_p, x) if is_complex(result_dtype(x)) else x


def where(condition, x=None, y=None):
    if x is None or y is None:
        unsupported("np.where with one argument (data-dependent shape)")
    cond = condition if result_dtype(condition) == np.bool_ else not_equal(condition, 0)
    dtype = result_dtype(x, y)
    shape = _shape(cond, x, y)
    args = [broadcast_to(astype(a, d), shape) for a, d in ((cond, np.dtype(bool)), (x, dtype), (y, dtype))]
    return bind(ew.select_p, *args)


UFUNCS: dict[np.ufunc, Callable] = {
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.divide: divide, np.power: power,
    np.maximum: maximum, np.minimum: minimum, np.negative: negative, np.positive: lambda x: x,
    np.equal: equal, np.not_equal: not_equal, np.less: less, np.less_equal: less_equal,
    np.greater: greater, np.greater_equal: greater_equal,
    np.exp: _float_unary(ew.exp_p), np.log: _float_unary(ew.log_p), np.log1p: _float_unary(ew.log1p_p),
    np.expm1: _float_unary(ew.expm1_p), np.sqrt: _float_unary(ew.sqrt_p), np.sin: _float_unary(ew.sin_p),
    np.cos: _float_unary(ew.cos_p), np.tan: _float_unary(ew.tan_p), np.tanh: _float_unary(ew.tanh_p),
    np.sinh: _float_unary(ew.sinh_p), np.cosh: _float_unary(ew.cosh_p),
    scipy.special.expit: _float_unary(ew.logistic_p),
    np.absolute: absolute, np.sign: sign, np.conjugate: conj, np.square: square, np.reciprocal: reciprocal,
    np.matmul: lambda a, b: matmul(a, b),
}


# ufunc methods other than calls, by (ufunc, method): ``np.add.at`` is (np.add, "at")
UFUNC_METHODS: dict[tuple[np.ufunc, str], Callable] = {}


def refuse_masked_operands(values) -> None:
    """A masked array meeting a tracer in a NumPy call is refused, as it is as an argument or a
    constant (``ir.tracer.refuse_subclass``): NumPy's own functions would ignore its mask too."""
    for v in values:
        if isinstance(v, np.ma.MaskedArray):
            refuse_masked()
        if type(v) in (list, tuple):
            refuse_masked_operands(v)


def ufunc_options(kwargs: dict) -> dict:
    """The ufunc keyword arguments that are options, not arrays (for ``numpy_checks``)."""
    return {k: v for k, v in kwargs.items() if k in ("casting", "order", "dtype", "subok", "signature")}


def array_ufunc(ufunc, method, inputs, kwargs):
    for x in inputs:  # tracers alone (the common case) hold no masked array: checked without a call
        if type(x) is not Tracer:
            refuse_masked_operands(inputs)
            break
    if kwargs:
        refuse_masked_operands(kwargs.values())
    name = _ufunc_names.get(ufunc) or ufunc_name(ufunc)
    if method != "__call__":
        if (ufunc, method) in UFUNC_METHODS:
            return _strong(UFUNC_METHODS[ufunc, method](*inputs, **kwargs))
        unsupported(f"{name}.{method}")
    if kwargs:
        numpy_checks(ufunc, *map(standin, inputs), **ufunc_options(kwargs))
        unsupported(f"{name} with keyword arguments {sorted(kwargs)}")
    impl = UFUNCS.get(ufunc)
    if impl is None:
        unsupported(name)
    out = lowering(name, impl, inputs, {})
    return out if type(out) is Tracer and not out.weak else _strong(out)


def _strong(out):
    """NumPy's functions return NumPy objects, strongly typed even when computed from Python
    scalars (NEP 50: ``np.sin(0.5)`` is a float64 scalar, which promotes float32 arrays); only
    Python's operators keep Python scalars weak."""
    if isinstance(out, Tracer):
        return Tracer(out.ssa, out.builder) if out.weak else out
    if type(out) in (tuple, list):
        return type(out)(map(_strong, out))
    return out


_UFUNC_MODULES = (np, scipy.special, np.linalg)
_ufunc_names: dict = {}


def ufunc_name(ufunc) -> str:
    """The public name of a ufunc, ``numpy.arctan2`` or ``scipy.special.gammaln``: found in the
    namespaces users call ufuncs from (``__name__`` alone does not say which module)."""
    name = _ufunc_names.get(ufunc)
    if name is None:
        for module in _UFUNC_MODULES:
            if getattr(module, ufunc.__name__, None) is ufunc:
                name = f"{module.__name__}.{ufunc.__name__}"
                break
        else:
            name = next((f"{m.__name__}.{k}" for m in _UFUNC_MODULES for k, v in vars(m).items() if v is ufunc),
                        ufunc.__name__)
        _ufunc_names[ufunc] = name
    return name


def lowering(name: str, impl: Callable, args, kwargs):
    """``impl(*args, **kwargs)``, lowering the user's ``name``: shape errors from ``bind`` name it
    (the outermost function the user called, not those it is implemented with)."""
    builder = current_builder()
    if builder.lowering is not None:
        return impl(*args, **kwargs)
    builder.lowering = name
    try:
        return impl(*args, **kwargs)
    finally:
        builder.lowering = None


# --- structure ----------------------------------------------------------------------


def _lift(x):
    """A Python scalar as a 0-d NumPy array, a (nested) list as an array (stacked if it holds
    tracers), so structural ops can treat them as arrays."""
    if isinstance(x, list | tuple):
        return stack([_lift(e) for e in x]) if _holds_tracer(x) else np.asarray(x)
    return np.asarray(x) if isinstance(x, PYTHON_SCALARS) else x


def _holds_tracer(x) -> bool:
    return isinstance(x, Tracer) or (isinstance(x, list | tuple) and builtins.any(map(_holds_tracer, x)))


def _axis(axis: int, ndim: int) -> int:
    if not isinstance(axis, int | np.integer) or not -ndim <= axis < ndim:
        raise AxisError(located(f"axis {axis} is out of bounds for an array of rank {ndim}"))
    return int(axis) % ndim


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = tuple(_axis(a, ndim) for a in (axis if isinstance(axis, tuple | list) else (axis,)))
    if len(set(axes)) != len(axes):
        raise ArgumentError(located(f"repeated axis in {axis}"))
    return tuple(sorted(axes))


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    a = _lift(a)
    shape = newshape if shape is None else shape
    if order not in ("C", "c", None):
        numpy_checks(np.reshape, standin(a), 0, order=order)
        unsupported(f"reshape with order={order!r}")
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(int(s) for s in shape)
    if shape.count(-1) == 1:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or a.size % known:
            raise ArgumentError(located(f"cannot reshape array of shape {a.shape} into {shape}"))
        shape = tuple(a.size // known if s == -1 else s for s in shape)
    if math.prod(shape) != a.size or builtins.any(s < 0 for s in shape):
        raise ArgumentError(located(f"cannot reshape array of shape {a.shape} into {shape}"))
    return a if shape == a.shape else bind(st.reshape_p, a, new_sizes=shape)


def transpose(a, axes=None):
    if axes is None and type(a) is Tracer:  # ``a.T`` of a vector or matrix, without the general checks
        shape = a.ssa.type.shape
        if not shape[1:]:  # 0-d or 1-d: its own transpose
            return a
        if not shape[2:]:
            return bind(st.transpose_p, a, permutation=(1, 0))
    a = _lift(a)
    perm = tuple(reversed(range(a.ndim))) if axes is None else tuple(_axis(x, a.ndim) for x in axes)
    if sorted(perm) != list(range(a.ndim)):
        raise TracingError(located(f"axes {axes} don't match an array of rank {a.ndim}"))
    return a if perm == tuple(range(a.ndim)) else bind(st.transpose_p, a, permutation=perm)


def swapaxes(a, axis1, axis2):
    perm = list(range(a.ndim))
    i, j = _axis(axis1, a.ndim), _axis(axis2, a.ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def matrix_transpose(x):
    if x.ndim < 2:
        raise TracingError(located(f"matrix transpose needs at least 2 axes, got shape {x.shape}"))
    return swapaxes(x, -1, -2)


def moveaxis(a, source, destination):
    src = [_axis(s, a.ndim) for s in (source if isinstance(source, tuple | list) else (source,))]
    dst = [_axis(d, a.ndim) for d in (destination if isinstance(destination, tuple | list) else (destination,))]
    order = [i for i in range(a.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def squeeze(a, axis=None):
    if a.ndim == 0 and axis is not None:  # NumPy accepts axis 0 (or -1) of a 0-d array
        _axes(axis, 1)
        return a
    axes = [i for i, n in enumerate(a.shape) if n == 1] if axis is None else _axes(axis, a.ndim)
    if builtins.any(a.shape[i] != 1 for i in axes):
        raise ArgumentError(located(f"cannot squeeze axes {axis} of shape {a.shape}: size is not 1"))
    return reshape(a, tuple(n for i, n in enumerate(a.shape) if i not in axes))


def expand_dims(a, axis):
    a = _lift(a)
    axis = axis if isinstance(axis, tuple | list) else (axis,)
    out_ndim = a.ndim + len(axis)
    new = _axes(axis, out_ndim)  # raises NumPy's ValueError for a repeated axis
    it = iter(a.shape)
    return reshape(a, tuple(1 if i in new else next(it) for i in range(out_ndim)))


def broadcast_to_(array, shape, subok=False):
    array = _lift(array)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if _shape(array, np.broadcast_to(0, shape)) != shape:
        raise ArgumentError(located(f"cannot broadcast shape {array.shape} to {shape}"))
    return broadcast_to(array, shape)


def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None:
        unsupported("np.concatenate with out=")
    arrays = [_lift(a) for a in arrays]
    if not arrays:
        raise ArgumentError(located("need at least one array to concatenate"))
    if axis is None:
        arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
    if builtins.any(a.ndim == 0 for a in arrays):
        raise ArgumentError(located("zero-dimensional arrays cannot be concatenated"))
    numpy_checks(np.concatenate, [standin(a) for a in arrays], dtype=dtype, casting=casting)
    dt = canonical_dtype(dtype) if dtype is not None else result_dtype(*arrays)
    ax = _axis(axis, arrays[0].ndim)
    first = arrays[0]
    for i, a in enumerate(arrays[1:], 1):
        if a.ndim != first.ndim:
            raise ArgumentError(located(
                f"all the input arrays must have same number of dimensions, but the array at index 0 has "
                f"{first.ndim} dimension(s) and the array at index {i} has {a.ndim} dimension(s)"))
        for d, (m, n) in enumerate(zip(first.shape, a.shape)):
            if d != ax and m != n:
                raise ArgumentError(located(
                    f"all the input array dimensions except for the concatenation axis must match exactly, but "
                    f"along dimension {d}, the array at index 0 has size {m} and the array at index {i} has size {n}"))
    arrays = [astype(a, dt) for a in arrays]
    return arrays[0] if len(arrays) == 1 and isinstance(arrays[0], Tracer) else bind(
        st.concatenate_p, *arrays, dimension=ax
    )


def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    arrays = [_lift(a) for a in arrays]
    if not arrays:
        raise ArgumentError(located("need at least one array to stack"))
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ArgumentError(located(f"all input arrays must have the same shape, got {sorted(shapes)}"))
    ax = _axis(axis, arrays[0].ndim + 1)
    return concatenate([expand_dims(a, ax) for a in arrays], axis=ax, out=out, dtype=dtype, casting=casting)


def diagonal(a, offset=0, axis1=0, axis2=1):
    i, j = _axis(axis1, a.ndim), _axis(axis2, a.ndim)
    if i == j:
        raise TracingError(located("axis1 and axis2 cannot be the same"))
    rest = [k for k in range(a.ndim) if k not in (i, j)]
    return bind(st.diagonal_p, transpose(a, (*rest, i, j)), offset=int(offset))


def diag(v, k=0):
    if v.ndim == 1:
        n = v.shape[0] + builtins.abs(int(k))
        return bind(st.diag_embed_p, v, shape=(n, n), offset=int(k))
    if v.ndim == 2:
        return diagonal(v, k)
    raise TracingError(located("np.diag needs a 1-d or 2-d array"))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def tril(m, k=0):
    return bind(st.tril_p, m, k=int(k))


def triu(m, k=0):
    return bind(st.triu_p, m, k=int(k))


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    if order != "K":  # any layout holds the same values
        numpy_checks(np.empty_like, standin(a), order=order)
    dtype = canonical_dtype(a.dtype if dtype is None else dtype)
    shape = a.shape if shape is None else ((shape,) if isinstance(shape, int) else tuple(shape))
    if isinstance(fill_value, Tracer | np.ndarray):  # an array broadcasts, a constant one too
        return broadcast_to_(astype(fill_value, dtype), shape)
    if not isinstance(fill_value, PYTHON_SCALARS + (np.generic,)):
        unsupported(f"np.full_like with a fill value of type {type(fill_value).__name__}")
    return bind(st.broadcast_in_dim_p, Literal.of(fill_value, dtype), shape=shape, broadcast_dimensions=())


def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    """``np.full`` of a traced fill value (NumPy's dispatch does not see it: found where the user calls it)."""
    fill_value = _lift(fill_value)
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    return full_like(fill_value, fill_value, fill_value.dtype if dtype is None else dtype, shape=shape)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None):
    return full_like(a, 0, dtype, order, shape=shape)


def ones_like(a, dtype=None, order="K", subok=True, shape=None):
    return full_like(a, 1, dtype, order, shape=shape)


# --- reductions -----------------------------------------------------------------------


def _keep_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """The shape of a reduction of ``shape`` over ``axes``."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdims or i not in axes)


def _keep(out, a, axes, keepdims):
    return reshape(out, _keep_shape(a.shape, axes, True)) if keepdims else out


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    if out is not None or initial is not None or where is not None:
        unsupported("np.sum with out=, initial= or where=")
    a = _lift(a)
    if dtype is None and a.dtype.kind in "bi":
        dtype = np.int64  # NumPy sums bools and small ints in the default int
    a = astype(a, a.dtype if dtype is None else dtype)
    axes = _axes(axis, a.ndim)
    res = bind(red.reduce_sum_p, a, axes=axes) if axes else a
    return _keep(res, a, axes, keepdims)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    a = _lift(a)
    half = dtype is None and a.dtype == np.float16  # NumPy accumulates float16 in float32
    if dtype is None:
        dtype = np.dtype(np.float32) if half else a.dtype if is_inexact(a.dtype) else np.dtype(np.float64)
    axes = _axes(axis, a.ndim)
    count = math.prod(a.shape[i] for i in axes)
    total = sum(astype(a, dtype), axis=axes, keepdims=keepdims, out=out, where=where)
    res = divide(total, astype(count, dtype).value if count else float("nan"))
    return astype(res, np.float16) if half else res


def _extremum(prim, name):
    def reduce(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        """``initial`` (a static scalar) joins every reduction: the result over an empty axis
        (NumPy's norms take ``max(..., initial=0)``), at least ``initial`` elsewhere."""
        if out is not None or where is not None:
            unsupported(f"np.{name} with out= or where=")
        a = _lift(a)
        axes = _axes(axis, a.ndim)
        if initial is not None and (isinstance(initial, Tracer) or np.ndim(initial) or is_complex(a.dtype)):
            unsupported(f"np.{name} with initial= other than a real scalar")
        if builtins.any(a.shape[i] == 0 for i in axes):
            if initial is None:
                raise ArgumentError(located(f"zero-size array to reduction operation {name} which has no identity"))
            return full_like(a, initial, shape=_keep_shape(a.shape, axes, keepdims))
        if axes and is_complex(a.dtype):  # NumPy's lexicographic order
            from pullback.frontend.numpy.ufuncs import complex_extremum
            return complex_extremum(a, axes, keepdims, largest=name == "max")
        res = _keep(bind(prim, a, axes=axes) if axes else a, a, axes, keepdims)
        if initial is None or initial == (-np.inf if name == "max" else np.inf):  # changes nothing here
            return res
        return (maximum if name == "max" else minimum)(res, a.dtype.type(initial))

    return reduce


max = _extremum(red.reduce_max_p, "max")
min = _extremum(red.reduce_min_p, "min")


def _logical(prim, name):
    def reduce(a, axis=None, out=None, keepdims=False, *, where=None):
        if out is not None or where is not None:
            unsupported(f"np.{name} with out= or where=")
        a = _lift(a)
        truth = a if a.dtype == np.bool_ else not_equal(a, 0)
        axes = _axes(axis, truth.ndim)
        return _keep(bind(prim, truth, axes=axes) if axes else truth, truth, axes, keepdims)

    return reduce


all = _logical(red.reduce_and_p, "all")
any = _logical(red.reduce_or_p, "any")


# --- contractions -------------------------------------------------------------------------


def _promote_pair(a, b):
    a, b = _lift(a), _lift(b)
    d = result_dtype(a, b)
    return astype(a, d), astype(b, d)


def dot_general(a, b, dims: con.DotDims):
    return bind(con.dot_general_p, a, b, dims=dims)


def matmul(a, b):
    """NumPy's matmul: a 1-d operand is a vector contracted directly (no batch axes to
    broadcast); otherwise the batch axes broadcast and the last two axes multiply."""
    a, b = _promote_pair(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise TracingError(located("matmul: input operand does not have enough dimensions (use * for scalars)"))
    k_a, k_b = a.shape[-1], b.shape[-2] if b.ndim > 1 else b.shape[0]
    if k_a != k_b:
        raise TracingError(located(f"matmul: size mismatch in its core dimension: {a.shape} @ {b.shape}"))
    if a.ndim <= 2 and b.ndim <= 2 or a.ndim == 1 or b.ndim == 1:
        return dot_general(a, b, con.DotDims((a.ndim - 1,), (builtins.max(b.ndim - 2, 0),)))
    batch = _shape(np.broadcast_to(0, a.shape[:-2]), np.broadcast_to(0, b.shape[:-2]))
    a = broadcast_to(a, batch + a.shape[-2:])
    b = broadcast_to(b, batch + b.shape[-2:])
    nb = len(batch)
    return dot_general(a, b, con.DotDims((nb + 1,), (nb,), tuple(range(nb)), tuple(range(nb))))


# matmul's contraction by the operands' ranks, for vectors and matrices (one object each: a DotDims is immutable)
_MATMUL_DIMS = {(na, nb): con.DotDims((na - 1,), (builtins.max(nb - 2, 0),)) for na in (1, 2) for nb in (1, 2)}


def matmul_operator(a, b):
    """``a @ b`` on a tracer. Two tracers of one dtype, vectors or matrices whose core sizes agree (nearly
    every ``@`` traced) are bound at once: promoting, lifting and checking them would change nothing. Any other
    operands go through ``matmul``, lowered as ``@`` (its checks name the operator)."""
    if type(a) is Tracer and type(b) is Tracer:
        ta, tb = a.ssa.type, b.ssa.type
        sa, sb = ta.shape, tb.shape
        dims = _MATMUL_DIMS.get((len(sa), len(sb)))
        if dims is not None and (ta.dtype is tb.dtype or ta.dtype == tb.dtype) and sa[-1] == sb[dims.rhs_contract[0]]:
            return bind(con.dot_general_p, a, b, dims=dims)
    return lowering("@", matmul, (a, b), {})


def dot(a, b, out=None):
    if out is not None:
        unsupported("np.dot with out=")
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return multiply(a, b)
    a, b = _promote_pair(a, b)
    return dot_general(a, b, con.DotDims((a.ndim - 1,), (builtins.max(b.ndim - 2, 0),)))


def multi_dot(arrays, *, out=None):
    """NumPy's chained ``dot`` in the order of fewest scalar multiplications (its dynamic programme over
    the shapes); a 1-d first operand is a row, a 1-d last one a column, dropped from the result again."""
    if out is not None:
        unsupported("np.linalg.multi_dot with out=")
    n = len(arrays)
    if n < 2:
        raise ArgumentError(located("np.linalg.multi_dot: expecting at least two arrays"))
    if n == 2:
        return dot(arrays[0], arrays[1])
    ops = [_lift(a) for a in arrays]
    first, last = ops[0].ndim, ops[-1].ndim
    if first == 1:
        ops[0] = reshape(ops[0], (1, -1))
    if last == 1:
        ops[-1] = reshape(ops[-1], (-1, 1))
    if builtins.any(a.ndim != 2 for a in ops):
        raise TracingError(located("np.linalg.multi_dot: only the first and last arrays may be 1-d, the others 2-d"))
    dims = [ops[0].shape[0]] + [a.shape[1] for a in ops]
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):  # cost[i][j]: the fewest multiplications for ops[i] ... ops[j]
        for i in range(n - length):
            j = i + length
            cost[i][j], split[i][j] = builtins.min(
                (cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k) for k in range(i, j))

    def chain(i: int, j: int):
        return ops[i] if i == j else dot(chain(i, split[i][j]), chain(split[i][j] + 1, j))

    result = chain(0, n - 1)
    if first == 1 and last == 1:
        return reshape(result, ())
    return reshape(result, (-1,)) if first == 1 or last == 1 else result


def vdot(a, b):
    a, b = _promote_pair(a, b)
    return dot(reshape(conj(a), (-1,)), reshape(b, (-1,)))


def inner(a, b):
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return multiply(a, b)
    a, b = _promote_pair(a, b)
    return dot_general(a, b, con.DotDims((a.ndim - 1,), (b.ndim - 1,)))


def outer(a, b, out=None):
    a, b = _promote_pair(a, b)
    return dot_general(reshape(a, (-1,)), reshape(b, (-1,)), con.DotDims((), ()))


def tensordot(a, b, axes=2):
    a, b = _promote_pair(a, b)
    if isinstance(axes, int | np.integer):
        ax_a, ax_b = tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    else:
        ax_a, ax_b = ((x,) if isinstance(x, int) else tuple(x) for x in axes)
    return dot_general(a, b, con.DotDims(tuple(_axis(x, a.ndim) for x in ax_a), tuple(_axis(x, b.ndim) for x in ax_b)))


def einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe", optimize=True):
    """Contract pairwise with ``dot_general``, in the order ``np.einsum_path`` picks
    (``optimize`` is accepted; the greedy order is always used)."""
    if out is not None:
        unsupported("np.einsum with out=")
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_subscripts((subscripts, *operands))
    ops = [_lift(x) for x in operands]
    numpy_checks(np.einsum, ",".join("i" * len(ops)) + "->", *map(standin, ops), dtype=dtype, order=order,
                 casting=casting)
    d = result_dtype(*ops) if dtype is None else canonical_dtype(dtype)
    ops = [astype(x, d) for x in ops]
    ins, outs = _parse_einsum(subscripts.replace(" ", ""), [x.ndim for x in ops])
    sizes: dict[str, int] = {}
    for spec, x in zip(ins, ops):
        for c, n in zip(spec, x.shape):
            m = sizes.setdefault(c, n)
            if m != n and 1 not in (m, n):
                raise TracingError(located(f"einsum: size of index {c!r} differs between operands ({m} vs {n})"))
            sizes[c] = builtins.max(m, n)
    terms = [_einsum_broadcast(*_einsum_unary(x, spec), sizes) for x, spec in zip(ops, ins)]
    if len(terms) > 1:
        dummies = [np.broadcast_to(np.zeros((), d), x.shape) for x, _ in terms]
        path = np.einsum_path(",".join(s for _, s in terms) + "->" + outs, *dummies, optimize="greedy")[0][1:]
    else:
        path = []
    for group in path:  # usually a pair; scalars may come in larger groups
        picked = [terms.pop(i) for i in sorted(group, reverse=True)][::-1]
        keep = set(outs).union(*(s for _, s in terms))
        x, sx = picked[0]
        for k, (y, sy) in enumerate(picked[1:], 2):
            x, sx = _contract(x, sx, y, sy, keep.union(*(s for _, s in picked[k:])))
        terms.append((x, sx))
    x, spec = terms[0]
    x, spec = _sum_out(x, spec, set(outs))
    return transpose(x, [spec.index(c) for c in outs])


def _interleaved_subscripts(args: tuple) -> tuple[str, list]:
    """``einsum(a, [0, 1], b, [1, 2], [0, 2])`` as ``einsum("ab,bc->ac", a, b)``."""
    def letters(sublist) -> str:
        try:
            return "".join("..." if i is Ellipsis else string.ascii_letters[i] for i in sublist)
        except (TypeError, IndexError):
            raise TracingError(located(f"einsum: subscripts must be ints in [0, 52) or ..., got {sublist!r}")) from None

    operands, specs = list(args[0:-1:2] if len(args) % 2 else args[0::2]), list(args[1::2])
    out = "->" + letters(args[-1]) if len(args) % 2 else ""
    return ",".join(letters(s) for s in specs) + out, operands


def _parse_einsum(subscripts: str, ndims: list[int]) -> tuple[list[str], str]:
    lhs, _, rhs = subscripts.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(ndims):
        raise TracingError(located(f"einsum: {len(ins)} operand specs for {len(ndims)} operands"))
    used = set(lhs) - set(",.")
    spare = iter(c for c in string.ascii_letters if c not in used)
    ell = ""
    if "." in lhs:
        n_ell = builtins.max(nd - len(s.replace("...", "")) for s, nd in zip(ins, ndims) if "..." in s)
        ell = "".join(next(spare) for _ in range(n_ell))
    expanded = []
    for s, nd in zip(ins, ndims):
        if "..." in s:
            k = nd - len(s.replace("...", ""))
            s = s.replace("...", ell[len(ell) - k:] if k else "")
        if len(s) != nd:
            raise TracingError(located(f"einsum: spec {s!r} does not match an operand of rank {nd}"))
        expanded.append(s)
    if "->" in subscripts:
        out = rhs.replace("...", ell)
    else:
        counts = "".join(expanded)
        out = ell + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in ell))
    return expanded, out


def _einsum_unary(x, spec: str):
    """Take diagonals for indices repeated within one operand."""
    while len(set(spec)) != len(spec):
        c = next(c for c in spec if spec.count(c) > 1)
        i = spec.index(c)
        j = spec.index(c, i + 1)
        x = diagonal(x, 0, i, j)
        spec = "".join(s for k, s in enumerate(spec) if k not in (i, j)) + c
    return x, spec


def _einsum_broadcast(x, spec: str, sizes: dict[str, int]):
    """An axis of size 1 where the index is longer in another operand broadcasts, as in NumPy: the
    operand does not depend on that index, so the axis is dropped from it."""
    ones = [i for i, c in enumerate(spec) if x.shape[i] == 1 and sizes[c] > 1]
    if not ones:
        return x, spec
    return (reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in ones)),
            "".join(c for i, c in enumerate(spec) if i not in ones))


def _sum_out(x, spec: str, keep: set[str]):
    axes = tuple(i for i, c in enumerate(spec) if c not in keep)
    if not axes:
        return x, spec
    return sum(x, axis=axes), "".join(c for c in spec if c in keep)


def _contract(a, sa: str, b, sb: str, keep: set[str]):
    a, sa = _sum_out(a, sa, keep | set(sb))
    b, sb = _sum_out(b, sb, keep | set(sa))
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b), sa + sb
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    dims = con.DotDims(
        tuple(sa.index(c) for c in contract), tuple(sb.index(c) for c in contract),
        tuple(sa.index(c) for c in batch), tuple(sb.index(c) for c in batch),
    )
    spec = "".join(batch) + "".join(c for c in sa if c not in sb) + "".join(c for c in sb if c not in sa)
    return dot_general(a, b, dims), spec


# --- indexing: pullback.frontend.numpy.indexing ------------------------------------------------------


def getitem(x, key):
    """``x[key]`` with NumPy's indexing, for families that slice (the implementation lives in
    ``frontend.numpy.indexing``, which imports this module)."""
    from pullback.frontend.numpy import indexing

    return indexing.getitem(x, key)


# --- array functions ------------------------------------------------------------------------

FUNCTIONS: dict[Callable, Callable] = {
    np.sum: sum, np.mean: mean, np.all: all, np.any: any, np.max: max, np.amax: max, np.min: min, np.amin: min,
    np.reshape: reshape, np.transpose: transpose, np.swapaxes: swapaxes, np.moveaxis: moveaxis,
    np.squeeze: squeeze, np.expand_dims: expand_dims, np.broadcast_to: broadcast_to_,
    np.concatenate: concatenate, np.stack: stack, np.diagonal: diagonal, np.diag: diag, np.trace: trace,
    np.tril: tril, np.triu: triu, np.where: where, np.dot: dot, np.vdot: vdot, np.inner: inner, np.outer: outer,
    np.tensordot: tensordot, np.einsum: einsum, np.real: real, np.imag: imag, np.conj: conj,
    np.conjugate: conj, np.zeros_like: zeros_like, np.ones_like: ones_like, np.full_like: full_like,
    np.empty_like: zeros_like, np.full: full,  # an empty array holds any values: zeros are some
    np.shape: lambda a: a.shape, np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
    np.astype: lambda x, dtype, copy=True: astype(x, dtype), np.copy: lambda a, *args, **kw: a,
    np.matrix_transpose: matrix_transpose, np.matmul: matmul,
}


def implements(*funcs: Callable) -> Callable:
    """Register the decorated function as the traced implementation of NumPy's ``funcs``."""
    def register(impl):
        for f in funcs:  # NumPy's function even if imported while construct's wrapper stands in for it
            FUNCTIONS[getattr(f, "__pullback_wraps__", f)] = impl
        return impl

    return register


def implements_ufunc(*ufuncs) -> Callable:
    """Register the decorated function as the traced implementation of the ufuncs."""
    def register(impl):
        for u in ufuncs:
            UFUNCS[u] = impl
        return impl

    return register


# NumPy functions that make their operands arrays first (np.asarray), so that a Python scalar
# operand is strong (NEP 50 weakness is the ufuncs'): the positions of those operands
_COERCING = {np.outer: slice(None), np.inner: slice(None), np.vdot: slice(None), np.kron: slice(None),
             np.dot: slice(0, 2), np.tensordot: slice(0, 2), np.einsum: slice(1, None)}
# NumPy functions returning a Python scalar's own attribute (``np.real(2.0)`` is ``2.0``): weak still
_PASS_THROUGH = frozenset({np.real, np.imag})


def _strong_operand(x):
    if type(x) in PYTHON_SCALARS:
        return np.asarray(x)
    return Tracer(x.ssa, x.builder) if isinstance(x, Tracer) and x.weak else x


_function_names: dict = {}  # NumPy's function -> its name in errors (``numpy.diag``), made once


def array_function(func, args, kwargs):
    for x in args:  # tracers alone (the common case) hold no masked array: checked without a call
        if type(x) is not Tracer:
            refuse_masked_operands((*args, *kwargs.values()))
            break
    else:
        if kwargs:
            refuse_masked_operands(kwargs.values())
    impl = FUNCTIONS.get(func)
    name = _function_names.get(func)
    if name is None:
        name = _function_names[func] = f"{func.__module__}.{func.__name__}"
    if impl is None:
        unsupported(name)
    if func in _COERCING:
        operands = range(len(args))[_COERCING[func]]
        args = tuple(_strong_operand(a) if i in operands else a for i, a in enumerate(args))
    out = lowering(name, impl, args, kwargs)
    return out if func in _PASS_THROUGH or (type(out) is Tracer and not out.weak) else _strong(out)


Tracer._numpy_api = sys.modules[__name__]

# The families of NumPy functions beyond the core register themselves on import.
from pullback.frontend.numpy import _families  # noqa: E402,F401
