"""Transposition: a program linear in some inputs to the program mapping output
cotangents to those inputs' cotangents. Before (t a residual, x_dot linear)::

    program f_linear(t: f64[3], x_dot: f64[3]):
      y_dot: f64[3] = mul x_dot t
      return y_dot

After::

    program f_transpose(t: f64[3], y_bar: f64[3]):
      x_bar: f64[3] = mul y_bar t
      return x_bar

Only linear primitives have transpose rules. A rule receives the output
cotangent and the equation's inputs, with the linear ones replaced by
``Linear`` markers, and returns one cotangent per input (None for the others).
Cotangents of values that fan out are summed; ``Zero`` cotangents stay symbolic.

Complex values: a rule gives the adjoint under the real inner product
``<X, Y> = Re tr(X^H Y)``, so multiplying by ``a`` transposes to multiplying by
``conj(a)`` and the gradient ``G`` of a real loss satisfies ``dL = Re tr(G^H dZ)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pullback.ad.jvp import Zero, instantiate
from pullback.ad.ops import lax
from pullback.errors import TracingError
from pullback.ir.core import Literal, Primitive, Program, Var
from pullback.ir.tracer import Tracer, bind, new_trace, rename
from pullback.ir.types import ArrayType


@dataclass(frozen=True, slots=True)
class Linear:
    """Marks an input in which the equation is linear (its value is not available)."""

    type: ArrayType

    shape = property(lambda self: self.type.shape)
    dtype = property(lambda self: self.type.dtype)
    ndim = property(lambda self: self.type.ndim)


TransposeRule = Callable[..., Sequence]
transpose_rules: dict[Primitive, TransposeRule] = {}


def cotangent_hint(hint: str) -> str:
    if not hint:
        return ""
    return (hint[:-4] if hint.endswith("_dot") else hint) + "_bar"


def add_cotangents(a, b):
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    return lax.add(a, b)


def transpose(program: Program, linear_inputs: Sequence[bool]) -> Program:
    """``program(*nonlinear, *linear) -> outs`` to ``T(*nonlinear, *out_cotangents) -> linear_cotangents``.

    Inputs keep their order with the linear ones removed; the output cotangents follow.
    """
    linear: set[int] = {id(v) for v, lin in zip(program.inputs, linear_inputs) if lin}
    hints: dict[int, str] = {}
    with new_trace(replay=True) as builder:
        env: dict[int, object] = {}  # values of the non-linear vars
        for v, lin in zip(program.inputs, linear_inputs):
            if not lin:
                env[id(v)] = Tracer(v, builder)
        for v, c in zip(program.constvars, program.constvals):
            builder.consts[id(c)] = (v, c)
            env[id(v)] = Tracer(v, builder)
        linear_eqns = []
        for eqn in program.eqns:  # forward: evaluate what does not depend on linear inputs
            if not linear.isdisjoint(map(id, eqn.inputs)):  # (a literal's id is no live var's)
                linear_eqns.append(eqn)
                linear.update(id(v) for v in eqn.outputs)
            else:
                builder.source = eqn.source
                outs = bind(eqn.prim, *[env[id(a)] if isinstance(a, Var) else a for a in eqn.inputs], **eqn.params)
                for v, o in zip(eqn.outputs, outs if eqn.prim.multiple_results else (outs,)):
                    env[id(v)] = o
        builder.source = None
        ct_inputs = [Var(a.type, cotangent_hint(a.hint) if isinstance(a, Var) else "") for a in program.outputs]
        ct: dict[int, object] = {}
        for a, c in zip(program.outputs, ct_inputs):
            if isinstance(a, Var) and id(a) in linear:
                ct[id(a)] = add_cotangents(ct.get(id(a), Zero(a.type)), Tracer(c, builder))
        def name(v, c) -> None:  # a value's complete cotangent is named after it
            if isinstance(c, Tracer) and v.hint and not c.ssa.hint and c.ssa not in ct_inputs:
                hints.setdefault(id(c.ssa), cotangent_hint(v.hint))

        for eqn in reversed(linear_eqns):
            cts_out = [ct.pop(id(v), Zero(v.type)) for v in eqn.outputs]
            for v, c in zip(eqn.outputs, cts_out):
                name(v, c)
            if all(isinstance(c, Zero) for c in cts_out):
                continue
            rule = transpose_rules.get(eqn.prim)
            if rule is None:
                raise TracingError(
                    f"{eqn.prim.name} is not linear in its tangent inputs and has no transpose rule"
                    + (f" (from {eqn.source})" if eqn.source else "")
                )
            args = [
                Linear(a.type) if isinstance(a, Var) and id(a) in linear
                else (a if isinstance(a, Literal) else env[id(a)])
                for a in eqn.inputs
            ]
            builder.source = eqn.source
            cts_in = rule(cts_out if eqn.prim.multiple_results else cts_out[0], *args, **eqn.params)
            for a, c in zip(eqn.inputs, cts_in):
                if isinstance(a, Var) and id(a) in linear and c is not None and not isinstance(c, Zero):
                    if c.ssa.type != a.type:
                        raise TracingError(f"transpose rule of {eqn.prim.name} gave a cotangent of type {c.ssa.type} "
                                           f"for an input of type {a.type}")
                    ct[id(a)] = add_cotangents(ct.get(id(a), Zero(a.type)), c)
        builder.source = None
        linear_vars = [v for v, lin in zip(program.inputs, linear_inputs) if lin]
        outs = [instantiate(ct.get(id(v), Zero(v.type))) for v in linear_vars]
        for v, o in zip(linear_vars, outs):
            name(v, o)
        out_atoms = tuple(builder.atom(o) for o in outs)
    inputs = tuple(v for v, lin in zip(program.inputs, linear_inputs) if not lin) + tuple(ct_inputs)
    constvars, constvals = builder.constants()
    result = Program(inputs, tuple(builder.eqns), out_atoms, constvars, constvals, name=f"{program.name}_transpose")
    return rename(result, hints)
