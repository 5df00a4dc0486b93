"""Users' own derivative rules: ``custom_jvp`` and ``custom_vjp`` calls. The equation holds the
function's traced program (printed where it is called) and the user's rule as a Python callable,
traced only when a derivative is taken (a rule may call the function itself, as JAX allows).

- ``custom_jvp_call``: its JVP is the user's rule, traced in place, so its tangent part (linear
  in the tangents, as the user must make it) is transposed like any other code in reverse mode.
- ``custom_vjp_call``: its JVP runs the user's ``fwd`` (outputs and residuals) and emits
  ``custom_lin``, linear in the tangents, whose transpose is the user's ``bwd`` traced in the
  backward pass: reverse mode stays ``transpose(linearize(f))``. ``custom_lin`` has no forward
  evaluation: forward mode (``jvp``) of a ``custom_vjp`` function raises, as in JAX.
"""

from __future__ import annotations

from collections.abc import Callable

from pullback.ad.jvp import Zero, jvp_rules
from pullback.ad.transpose import Linear, transpose_rules
from pullback.errors import TracingError
from pullback.ir.core import WITH_BODIES, Primitive, Program, ShapeError, shape_rules
from pullback.ir.tracer import Tracer, bind
from pullback.ir.types import ArrayType, is_inexact

custom_jvp_call_p = Primitive("custom_jvp_call", multiple_results=True)
custom_vjp_call_p = Primitive("custom_vjp_call", multiple_results=True)
custom_lin_p = Primitive("custom_lin", multiple_results=True)
WITH_BODIES.update((custom_jvp_call_p, custom_vjp_call_p))


def _call_shape(*args, body: Program, rule: Callable, num_consts: int):
    if tuple(a.type for a in args) != body.in_types:
        raise ShapeError("a custom rule's function does not take its operands' types")
    if body.constvars:
        raise ShapeError("a custom rule's function must be closed (no constants)")
    return body.out_types


shape_rules[custom_jvp_call_p] = _call_shape
shape_rules[custom_vjp_call_p] = _call_shape
shape_rules[custom_lin_p] = lambda *args, bwd, num_res, out_types: out_types


def _type(x) -> ArrayType:
    return x.ssa.type if isinstance(x, Tracer) else x.type


def _tangent(t, p):
    from pullback.primitives import lax

    return lax.zeros(_type(p)) if isinstance(t, Zero) else t


def _refuse_traced_consts(tangents, num_consts: int, what: str) -> None:
    if any(not isinstance(t, Zero) for t in tangents[:num_consts]):
        raise TracingError(f"a {what} function reads a value from an enclosing function that is being "
                           "differentiated; pass it to the function as an argument")


def _check(outs, types, what: str) -> None:
    got = tuple(_type(o) for o in outs)
    if got != tuple(types):
        raise TracingError(f"{what} returns {', '.join(map(str, got))}; expected {', '.join(map(str, types))}")


def _custom_jvp_rule(primals, tangents, *, body: Program, rule: Callable, num_consts: int):
    _refuse_traced_consts(tangents, num_consts, "custom_jvp")
    args = list(primals[num_consts:])
    outs, touts = rule(args, [_tangent(t, p) for t, p in zip(tangents[num_consts:], args)])
    _check(outs, body.out_types, "the custom JVP rule's primal output")
    _check(touts, body.out_types, "the custom JVP rule's tangent output")
    return tuple(outs), tuple(touts)


jvp_rules[custom_jvp_call_p] = _custom_jvp_rule


def _custom_vjp_rule(primals, tangents, *, body: Program, rule: Callable, num_consts: int):
    _refuse_traced_consts(tangents, num_consts, "custom_vjp")
    args = list(primals[num_consts:])
    outs, res, bwd = rule(args)  # the user's fwd, traced here: outputs, residuals, and the bwd to transpose with
    _check(outs, body.out_types, "the custom VJP rule's fwd output")
    diff = [is_inexact(_type(a).dtype) for a in args]
    ts = [_tangent(t, p) for t, p, d in zip(tangents[num_consts:], args, diff) if d]
    if not ts:
        return tuple(outs), tuple(Zero(t) for t in body.out_types)
    touts = bind(custom_lin_p, *res, *ts, bwd=bwd, num_res=len(res), out_types=body.out_types)
    return tuple(outs), tuple(touts)


jvp_rules[custom_vjp_call_p] = _custom_vjp_rule


def _lin_jvp(primals, tangents, **params):
    raise TracingError("forward-mode differentiation through the derivative of a custom_vjp function is not "
                       "supported, as in JAX; give the function a custom_jvp rule instead")


jvp_rules[custom_lin_p] = _lin_jvp


def _lin_transpose(cts, *args, bwd: Callable, num_res: int, out_types):
    from pullback.primitives import lax

    cts = [lax.zeros(t) if isinstance(c, Zero) else c for c, t in zip(cts, out_types)]
    grads = bwd(list(args[:num_res]), cts)  # the user's bwd, traced here
    linear = args[num_res:]
    _check(grads, tuple(_type(a) for a in linear), "the custom VJP rule's bwd")
    return [None] * num_res + [g if isinstance(a, Linear) else None for g, a in zip(grads, linear)]


transpose_rules[custom_lin_p] = _lin_transpose


# --- batching: the function's program by the batching transform, the user's rule under vmap ---------

from pullback.ad.batch import at_front, batch, batch_rules, batch_size  # noqa: E402
from pullback.ir.core import Literal  # noqa: E402
from pullback.primitives.control import close  # noqa: E402


def _batch_call(prim, args, dims, body: Program, rule: Callable, num_consts: int, batched_rule: Callable):
    if any(d is not None for d in dims[:num_consts]):
        raise NotImplementedError(f"vmap of a {prim.name.replace('_call', '')} function that reads a batched "
                                  "value from its enclosing function; pass it as an argument")
    size = batch_size(args, dims)
    axes = [0 if d is not None else None for d in dims]
    new_body, values = close(batch(body, axes, size, [0] * len(body.outputs)))
    moved = [at_front(a, d, size) if d is not None else a for a, d in zip(args, dims)]
    arg_axes = tuple(axes[num_consts:])
    outs = bind(prim, *values, *moved, body=new_body, rule=batched_rule(rule, arg_axes),
                num_consts=len(values) + num_consts)
    return outs, (0,) * len(outs)


def _vmapped_jvp_rule(rule: Callable, arg_axes: tuple) -> Callable:
    from pullback.api.transforms import vmap

    def batched(primals, tangents):
        n, box = len(primals), []

        def flat(*xs):
            outs, touts = rule(list(xs[:n]), list(xs[n:]))
            box.append(len(outs))
            return (*outs, *touts)

        vals = vmap(flat, in_axes=arg_axes + arg_axes, out_axes=0)(*primals, *tangents)
        vals = list(vals) if isinstance(vals, tuple) else [vals]
        return vals[:box[0]], vals[box[0]:]

    return batched


def _vmapped_vjp_rule(rule: Callable, arg_axes: tuple) -> Callable:
    from pullback.api.transforms import vmap

    def batched(primals):
        box = []

        def fwd(*xs):
            outs, res, bwd = rule(list(xs))
            literal = {i: r for i, r in enumerate(res) if isinstance(r, Literal)}
            box.append((len(outs), bwd, literal, len(res)))
            return (*outs, *(r for r in res if not isinstance(r, Literal)))

        vals = vmap(fwd, in_axes=arg_axes, out_axes=0)(*primals)
        vals = list(vals) if isinstance(vals, tuple) else [vals]
        n_out, bwd, literal, n_res = box[0]
        outs, traced_res = vals[:n_out], vals[n_out:]

        def batched_bwd(res_values, cts):
            def one(*xs):
                it = iter(xs[:len(res_values)])
                res = [literal[i] if i in literal else next(it) for i in range(n_res)]
                return tuple(bwd(res, list(xs[len(res_values):])))

            g = vmap(one, in_axes=0, out_axes=0)(*res_values, *cts)
            g = list(g) if isinstance(g, tuple) else [g]
            # an argument the batch did not vary gets the sum of the batch's cotangents
            from pullback.primitives import lax

            return [lax.reduce_sum(c, (0,)) if axis is None else c for c, axis in zip(g, diff_axes)]

        diff_axes = [axis for p, axis in zip(primals, arg_axes) if is_inexact(_type(p).dtype)]
        return outs, traced_res, batched_bwd

    return batched


batch_rules[custom_jvp_call_p] = lambda args, dims, *, body, rule, num_consts: _batch_call(
    custom_jvp_call_p, args, dims, body, rule, num_consts, _vmapped_jvp_rule)
batch_rules[custom_vjp_call_p] = lambda args, dims, *, body, rule, num_consts: _batch_call(
    custom_vjp_call_p, args, dims, body, rule, num_consts, _vmapped_vjp_rule)


def _lin_batch(args, dims, **params):
    """custom_lin is batched only by forward-mode Jacobians (jacfwd), which a custom_vjp function does
    not have; reverse-mode ones batch the program after transposition, where the user's bwd is."""
    raise TracingError("forward-mode differentiation (jacfwd) of a custom_vjp function is not supported, as in "
                       "JAX; use jacrev")


batch_rules[custom_lin_p] = _lin_batch
