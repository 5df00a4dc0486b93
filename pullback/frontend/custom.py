"""``custom_jvp`` and ``custom_vjp``: a function with a derivative rule of the user's own, with
JAX's decorators and semantics.

The function is traced into a program where it is called. Its rule is traced only when a
derivative is taken (so a rule may call the function itself). A ``custom_jvp`` rule's tangent
part is transposed for reverse mode like any other code, so it must be linear in the tangents, as
in JAX. A ``custom_vjp`` rule is staged the way pullback stages all reverse mode, linearize then
transpose: ``fwd`` runs in the forward pass and returns the residuals, and ``bwd``, the transpose
of the linear map from input tangents to output tangents, runs in the backward pass (see
``primitives.custom``). Outside a trace the decorated function simply runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from pullback.errors import TracingError
from pullback.ir.core import Literal, Program, SourceInfo
from pullback.ir.tracer import Tracer, bind, call_user, is_python_scalar, located, trace_closed, tracing
from pullback.primitives.control import close
from pullback.primitives.custom import custom_jvp_call_p, custom_vjp_call_p
from pullback.tree import flatten, unflatten


def _dtype(x):
    return x.dtype if isinstance(x, Tracer) else np.asarray(x).dtype


def _shape(x) -> tuple[int, ...]:
    """A primal's shape, read off the tracer itself: the bwd rule runs when the primal's trace has ended."""
    return x.shape if isinstance(x, Tracer) else np.shape(x)


class _Call:
    """One call's arguments split into static (``nondiff_argnums``) and traced leaves."""

    def __init__(self, args: tuple, nondiff: tuple[int, ...]):
        self.nondiff = nondiff
        self.static = [args[i] for i in nondiff]
        self.dynamic = [a for i, a in enumerate(args) if i not in nondiff]
        self.trees, self.leaves, self.operands = [], [], []
        for a in self.dynamic:
            leaves, tree = flatten(a)
            self.leaves += [x if isinstance(x, Tracer) else np.asarray(x) for x in leaves]  # for tracing
            self.operands += [Literal.of(x, np.asarray(x).dtype) if is_python_scalar(x) else x for x in leaves]
            self.trees.append(tree)

    def structured(self, leaves) -> list:
        it = iter(_user(x) for x in leaves)
        return [unflatten(t, it) for t in self.trees]

    def args(self, leaves) -> tuple:
        """The full argument tuple with these leaves for the traced arguments."""
        return self._rejoin(self.structured(leaves))

    def _rejoin(self, dynamic) -> tuple:
        it_s, it_d = iter(self.static), iter(dynamic)
        return tuple(next(it_s) if i in self.nondiff else next(it_d)
                     for i in range(len(self.static) + len(self.dynamic)))

    def body(self, fun: Callable, name: str) -> tuple[Program, list, Any]:
        """``fun`` traced: its closed program (consts first), the operands for the consts, its output tree."""
        program, captures, out_tree = trace_closed(
            lambda *dynamic: call_user(fun, *self._rejoin(dynamic)), self.structured(self.leaves), name=name,
            arg_names=[f"arg{i}" for i in range(len(self.dynamic))], scope=fun)
        program, values = close(program)
        return program, [*values, *captures], out_tree


def _user(x):
    """What a user's function sees: a Python scalar operand as the Python scalar it was."""
    return x.value if isinstance(x, Literal) else x


def _flat_out(out, tree, what: str) -> list:
    leaves, got = flatten(out)
    if got != tree:
        raise TracingError(located(f"{what} is not structured as the function's output"))
    return leaves


class custom_jvp:
    """``f`` with a JVP rule of one's own: ``@f.defjvp`` on ``rule(primals, tangents) ->
    (primal_out, tangent_out)``. ``nondiff_argnums``: arguments passed to the rule first, as
    Python values, neither traced nor differentiated.

    >>> @pb.custom_jvp
    ... def log1pexp(x):
    ...     return np.log(1.0 + np.exp(x))
    >>> @log1pexp.defjvp
    ... def log1pexp_jvp(primals, tangents):
    ...     (x,), (x_dot,) = primals, tangents
    ...     return log1pexp(x), (1 - 1 / (1 + np.exp(x))) * x_dot
    >>> pb.grad(lambda x: np.sum(log1pexp(x)))(np.array([0.0, 50.0])).tolist()
    [0.5, 1.0]
    """

    def __init__(self, fun: Callable, nondiff_argnums: tuple[int, ...] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable) -> Callable:
        self.jvp = jvp
        return jvp

    def __call__(self, *args):
        if self.jvp is None:
            raise AttributeError(f"no JVP rule for the custom_jvp function {self.__name__}: define one with defjvp")
        if not tracing():
            return self.fun(*args)
        call = _Call(args, self.nondiff_argnums)
        body, consts, out_tree = call.body(self.fun, self.__name__)
        user = self.jvp

        def rule(primals, tangents):
            out, t_out = user(*call.static, tuple(call.structured(primals)), tuple(call.structured(tangents)))
            return (_flat_out(out, out_tree, "the JVP rule's primal output"),
                    _flat_out(t_out, out_tree, "the JVP rule's tangent output"))

        outs = bind(custom_jvp_call_p, *consts, *call.operands, body=body, rule=rule, num_consts=len(consts))
        return unflatten(out_tree, outs)


class custom_vjp:
    """``f`` with a VJP rule of one's own: ``f.defvjp(fwd, bwd)``, ``fwd(*args) -> (out, residuals)``,
    ``bwd(residuals, out_cotangent) -> (one cotangent per argument)`` (None for a zero one). Reverse
    mode only: forward mode through ``f`` raises, as in JAX.

    >>> @pb.custom_vjp
    ... def clip_gradient(x):  # the identity, whose cotangent is clipped to [-1, 1]
    ...     return x
    >>> clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (np.clip(g, -1.0, 1.0),))
    >>> pb.grad(lambda x: np.sum(3.0 * clip_gradient(x)))(np.zeros(2)).tolist()
    [1.0, 1.0]
    """

    def __init__(self, fun: Callable, nondiff_argnums: tuple[int, ...] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise AttributeError(f"no VJP rule for the custom_vjp function {self.__name__}: define one with defvjp")
        if not tracing():
            return self.fun(*args)
        call = _Call(args, self.nondiff_argnums)
        body, consts, out_tree = call.body(self.fun, self.__name__)
        fwd, bwd_user, name = self.fwd, self.bwd, self.__name__

        def rule(primals):
            out, res = fwd(*call.args(primals))
            res_leaves, res_tree = flatten(res)
            res_leaves = [Literal.of(x, np.asarray(x).dtype) if is_python_scalar(x) else x for x in res_leaves]

            def bwd(res_values, cts):
                grads = bwd_user(*call.static, unflatten(res_tree, map(_user, res_values)),
                                 unflatten(out_tree, iter(cts)))
                if not isinstance(grads, tuple) or len(grads) != len(call.dynamic):
                    raise TracingError(located(f"the bwd rule of {name} must return a tuple with one cotangent per "
                                               f"argument ({len(call.dynamic)})", _defined(bwd_user)))
                flat = []
                for g, a in zip(grads, call.dynamic):
                    a_leaves, a_tree = flatten(a)
                    if g is None:
                        flat += [np.zeros(_shape(x), _dtype(x)) for x in a_leaves]
                        continue
                    g_leaves, g_tree = flatten(g)
                    if g_tree != a_tree:
                        raise TracingError(located(f"the bwd rule of {name} returns a cotangent structured unlike its "
                                                   "argument", _defined(bwd_user)))
                    flat += g_leaves
                return [_traced(g, _dtype(leaf)) for g, leaf in zip(flat, call.leaves)
                        if np.dtype(_dtype(leaf)).kind in "fc"]

            return _flat_out(out, out_tree, "the fwd rule's output"), res_leaves, bwd

        outs = bind(custom_vjp_call_p, *consts, *call.operands, body=body, rule=rule, num_consts=len(consts))
        return unflatten(out_tree, outs)


def _traced(x, dtype):
    """A cotangent from a user's rule as a traced value of its argument's dtype."""
    from pullback.ir.tracer import current_builder
    from pullback.ir.types import ArrayType
    from pullback.primitives import lax

    if not isinstance(x, Tracer):
        value = np.asarray(x, dtype)
        if not value.any():
            return lax.zeros(ArrayType.of(value))
        builder = current_builder()
        return Tracer(builder.const(value), builder)
    return lax.convert(x, dtype)


def stop_gradient(x: Any):
    """``x`` with a zero derivative (for every leaf of a pytree), as ``jax.lax.stop_gradient``.

    >>> float(pb.grad(lambda x: x * pb.stop_gradient(x))(3.0))  # d/dx of x * c, c = x held constant
    3.0
    """
    from pullback.primitives import lax

    leaves, tree = flatten(x)
    return unflatten(tree, [lax.stop_gradient(v) if isinstance(v, Tracer) else v for v in leaves])


def _defined(fn: Callable) -> SourceInfo | None:
    """Where the user's rule is defined: its errors, raised when pullback runs it outside the user's
    own call (transposing), point there."""
    code = getattr(fn, "__code__", None)
    return None if code is None else SourceInfo(code.co_filename, code.co_firstlineno)
