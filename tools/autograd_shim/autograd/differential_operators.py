"""autograd's differential operators on pullback.

Each operator builds a ``pullback.differentiate`` over *all* the positional arguments (pullback
cannot close over the tracers of an enclosing trace, so nested operators must see them as inputs);
ints, bools, strings and None are static arguments, keyword arguments are bound with
``functools.partial``. Complex conventions are translated: autograd's VJP of a complex function
is ``conj(J^T conj(g))`` in pullback's terms (pullback transposes under ``Re <X, Y>``, autograd
returns ``du/dx - i du/dy`` for a real loss), and autograd's ``grad`` keeps the real part of a
complex output."""

from __future__ import annotations

import functools

import numpy as np

import pullback as pb
from pullback.ir.tracer import Tracer
from pullback.tree import flatten, unflatten


def _as_tuple(argnum):
    return (argnum,) if isinstance(argnum, int) else tuple(argnum)


def _is_dynamic(a) -> bool:
    """Arrays, inexact scalars and containers of them are traced; anything else (ints, types,
    strings, None, empty containers) is bound by closure."""
    leaves = flatten(a)[0]
    return bool(leaves) and all(isinstance(v, np.ndarray | np.inexact | float | complex | Tracer)
                                and not isinstance(v, bool) for v in leaves)


def _differentiate(fun, argnum, args, kwargs) -> tuple[pb.differentiate, tuple]:
    """``pb.differentiate`` over the dynamic arguments (the others are closed over) and those
    arguments; ``argnum`` is renumbered among them."""
    nums = _as_tuple(argnum)
    dyn = [i for i, a in enumerate(args) if i in nums or _is_dynamic(a)]

    def f(*dyn_args):
        full = list(args)
        for i, v in zip(dyn, dyn_args):
            full[i] = v
        return fun(*full, **kwargs)

    f.__name__ = getattr(fun, "__name__", "f").replace("<lambda>", "f")
    new = dyn.index(argnum) if isinstance(argnum, int) else tuple(dyn.index(i) for i in argnum)
    return pb.differentiate(f, argnums=new), tuple(args[i] for i in dyn)


def _is_complex(a) -> bool:
    if isinstance(a, complex):
        return True
    dtype = getattr(a, "dtype", None)
    return dtype is not None and np.dtype(dtype).kind == "c"


def _size_one_to_scalar(y):
    """autograd's grad takes any output of size 1 (shape (1,), (1, 1), ...); pullback's, a scalar."""
    shape = getattr(y, "shape", ())
    return np.reshape(y, ()) if shape and int(np.prod(shape)) == 1 else y


def _conj_tree(tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [np.conj(v) if _is_complex(v) else v for v in leaves])


def _conj_where_complex(tree, like):
    """Conjugate the leaves of ``tree`` whose counterpart in ``like`` is complex."""
    leaves, treedef = flatten(tree)
    like_leaves = flatten(like)[0]
    return unflatten(treedef, [np.conj(v) if _is_complex(w) else v for v, w in zip(leaves, like_leaves)])


def _wrt(args, argnum):
    return args[argnum] if isinstance(argnum, int) else tuple(args[i] for i in argnum)


def _shape(a) -> tuple:
    return tuple(getattr(a, "shape", np.shape(a) if not isinstance(a, Tracer) else a.shape))


def _ones_like(a):
    return np.ones(_shape(a), dtype=getattr(a, "dtype", np.result_type(a)))


def _zeros_like(a):
    if isinstance(a, Tracer):
        return np.zeros(a.shape, a.dtype)
    leaves, treedef = flatten(a)
    return unflatten(treedef, [np.zeros_like(np.asarray(v)) for v in leaves])


# --- reverse mode ------------------------------------------------------------------------------


def value_and_grad(fun, argnum=0):
    def value_and_gradfun(*args, **kwargs):
        def scalar_fun(*a, **kw):
            return _size_one_to_scalar(fun(*a, **kw))

        scalar_fun.__name__ = getattr(fun, "__name__", "f")
        d, dyn_args = _differentiate(scalar_fun, argnum, args, kwargs)
        value, g = d.value_and_grad(*dyn_args)
        return value, _conj_where_complex(g, _wrt(args, argnum))

    return value_and_gradfun


def grad(fun, argnum=0):
    vg = value_and_grad(fun, argnum)

    @functools.wraps(fun)
    def gradfun(*args, **kwargs):
        return vg(*args, **kwargs)[1]

    return gradfun


def make_vjp(fun, argnum=0):
    """``make_vjp(fun)(*args) -> (vjp, ans)`` with autograd's complex convention."""

    def maker(*args, **kwargs):
        d, dyn_args = _differentiate(fun, argnum, args, kwargs)
        ans, pb_vjp = d.vjp(*dyn_args)

        def vjp(g):
            cts = pb_vjp(_conj_tree(g))
            cts = cts[0] if isinstance(argnum, int) else cts
            return _conj_where_complex(cts, _wrt(args, argnum))

        return vjp, ans

    return maker


def elementwise_grad(fun, argnum=0):
    def gradfun(*args, **kwargs):
        vjp, ans = make_vjp(fun, argnum)(*args, **kwargs)
        return vjp(_ones_like(ans))

    return gradfun


def holomorphic_grad(fun, argnum=0):
    def gradfun(*args, **kwargs):
        x = _wrt(args, argnum)
        if not _is_complex(x):
            raise TypeError("holomorphic_grad needs a complex input")
        return elementwise_grad(fun, argnum)(*args, **kwargs)

    return gradfun


def vector_jacobian_product(fun, argnum=0):
    def vjp_fun(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return make_vjp(fun, argnum)(*args, **kwargs)[0](vector)

    return vjp_fun


tensor_jacobian_product = vector_jacobian_product


def jacobian(fun, argnum=0):
    """Rows of the Jacobian by VJPs against the output's standard basis, shape ``out + in``."""

    def jacfun(*args, **kwargs):
        vjp, ans = make_vjp(fun, argnum)(*args, **kwargs)
        x = _wrt(args, argnum)
        out_shape, in_shape = _shape(ans), _shape(x)
        size = int(np.prod(out_shape))
        dtype = getattr(ans, "dtype", np.result_type(ans))
        if size == 0:
            return np.zeros(out_shape + in_shape)
        rows = [vjp(np.eye(size, dtype=dtype)[i].reshape(out_shape)) for i in range(size)]
        return np.reshape(np.stack(rows), out_shape + in_shape)

    return jacfun


def hessian(fun, argnum=0):
    return jacobian(jacobian(fun, argnum), argnum)


# --- forward mode ------------------------------------------------------------------------------


def make_jvp(fun, argnum=0):
    """``make_jvp(fun)(*args)(v) -> (ans, jvp)``."""

    def maker(*args, **kwargs):
        d, dyn_args = _differentiate(fun, argnum, args, kwargs)
        nums = _as_tuple(d.argnums)

        def jvp(v):
            vs = (v,) if isinstance(argnum, int) else tuple(v)
            tangents = [_zeros_like(a) for a in dyn_args]
            for i, t in zip(nums, vs):
                tangents[i] = t
            return d.jvp(dyn_args, tangents)

        return jvp

    return maker


def deriv(fun, argnum=0):
    def derivfun(*args, **kwargs):
        return make_jvp(fun, argnum)(*args, **kwargs)(_ones_like(_wrt(args, argnum)))[1]

    return derivfun


def hessian_tensor_product(fun, argnum=0):
    fun_grad = grad(fun, argnum)

    def vector_dot_grad(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return np.tensordot(fun_grad(*args, **kwargs), vector, len(_shape(vector)))

    return grad(vector_dot_grad, argnum)


hessian_vector_product = hessian_tensor_product


def make_hvp(fun, argnum=0):
    return make_vjp(grad(fun, argnum), argnum)


def checkpoint(fun):
    """Recomputation is a memory strategy; values and derivatives are those of ``fun``."""
    return fun


def _absent(name):
    def absent(*args, **kwargs):
        raise NotImplementedError(f"autograd.{name} has no pullback equivalent")

    absent.__name__ = name
    return absent


grad_and_aux = _absent("grad_and_aux")
grad_named = _absent("grad_named")
multigrad_dict = _absent("multigrad_dict")
make_ggnvp = _absent("make_ggnvp")
