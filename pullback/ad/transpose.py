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

from pullback.ad.emit import emit, gc_paused
from pullback.ad.jvp import Zero, instantiate
from pullback.ad.ops import lax
from pullback.errors import TracingError
from pullback.ir.core import NO_PARAMS, Primitive, Program, Var
from pullback.ir.tracer import Tracer, new_trace, rename
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
    # keyed by the Var itself (hashed by identity, without a call), not by ``id``
    linear: set[Var] = {v for v, lin in zip(program.inputs, linear_inputs) if lin}
    hints: dict[int, str] = {}
    with gc_paused(), new_trace(replay=True) as builder:
        env: dict[Var, object] = {}  # values of the non-linear vars
        for v, lin in zip(program.inputs, linear_inputs):
            if not lin:
                env[v] = Tracer(v, builder)
        for v, c in zip(program.constvars, program.constvals):
            builder.consts[id(c)] = (v, c)
            env[v] = Tracer(v, builder)
        linear_eqns = []
        for eqn in program.eqns:  # forward: evaluate what does not depend on linear inputs
            for a in eqn.inputs:
                if type(a) is Var and a in linear:
                    linear_eqns.append(eqn)
                    linear.update(eqn.outputs)
                    break
            else:
                builder.source = eqn.source
                outs = emit(eqn, [env[a] if type(a) is Var else a for a in eqn.inputs])  # output types known
                for v, o in zip(eqn.outputs, outs if eqn.prim.multiple_results else (outs,)):
                    env[v] = o
        builder.source = None
        ct_inputs = [Var(a.type, cotangent_hint(a.hint) if isinstance(a, Var) else "") for a in program.outputs]
        ct: dict[Var, object] = {}  # complete or partial cotangents of linear vars (never Zero)
        for a, c in zip(program.outputs, ct_inputs):
            if isinstance(a, Var) and a in linear:
                ct[a] = add_cotangents(ct.get(a, Zero(a.type)), Tracer(c, builder))
        # a value's complete cotangent is named after it, as it is made (a Var made here is in no other
        # program yet); one of the input program's own is renamed, by copy
        foreign = {*program.inputs, *program.constvars}

        def name(v, c) -> None:
            if type(c) is Tracer and v.hint and not c.ssa.hint and c.ssa not in ct_inputs:
                if c.ssa in foreign:
                    hints.setdefault(id(c.ssa), cotangent_hint(v.hint))
                else:
                    c.ssa.hint = cotangent_hint(v.hint)

        for eqn in reversed(linear_eqns):
            if eqn.prim.multiple_results:
                ct_out = [ct.pop(v) if v in ct else Zero(v.type) for v in eqn.outputs]
                nonzero = False
                for v, c in zip(eqn.outputs, ct_out):
                    if type(c) is not Zero:
                        nonzero = True
                        if v.hint:
                            name(v, c)
                if not nonzero:
                    continue
            else:  # one output: ``name`` inline
                v = eqn.outputs[0]
                ct_out = ct.pop(v, None)
                if ct_out is None:  # a Zero cotangent
                    continue
                h = v.hint
                if h and type(ct_out) is Tracer:
                    c = ct_out.ssa
                    if not c.hint and c not in ct_inputs:
                        h = (h[:-4] if h[-4:] == "_dot" else h) + "_bar"  # ``cotangent_hint``
                        if c in foreign:
                            hints.setdefault(id(c), h)
                        else:
                            c.hint = h
            rule = transpose_rules.get(eqn.prim)
            if rule is None:
                raise TracingError(
                    f"{eqn.prim.name} is not linear in its tangent inputs and has no transpose rule"
                    + (f" (from {eqn.source})" if eqn.source else "")
                )
            args = [
                (Linear(a.type) if a in linear else env[a]) if type(a) is Var else a
                for a in eqn.inputs
            ]
            builder.source = eqn.source
            # (``**`` of a Params asks it for its keys: a call)
            cts_in = rule(ct_out, *args) if eqn.params is NO_PARAMS else rule(ct_out, *args, **eqn.params)
            for a, c in zip(eqn.inputs, cts_in):
                if c is not None and type(a) is Var and a in linear and type(c) is not Zero:
                    t, u = c.ssa.type, a.type  # (compared without ``__eq__``'s call where both are ArrayTypes)
                    if t is not u and (t.shape != u.shape or t.dtype != u.dtype if type(t) is ArrayType is type(u)
                                       else t != u):
                        raise TracingError(f"transpose rule of {eqn.prim.name} gave a cotangent of type {c.ssa.type} "
                                           f"for an input of type {a.type}")
                    prev = ct.get(a)
                    ct[a] = c if prev is None else add_cotangents(prev, c)
        builder.source = None
        linear_vars = [v for v, lin in zip(program.inputs, linear_inputs) if lin]
        outs = [instantiate(ct.get(v, Zero(v.type))) for v in linear_vars]
        for v, o in zip(linear_vars, outs):
            name(v, o)
        out_atoms = tuple(builder.atom(o) for o in outs)
    inputs = tuple(v for v, lin in zip(program.inputs, linear_inputs) if not lin) + tuple(ct_inputs)
    constvars, constvals = builder.constants()
    result = Program(inputs, tuple(builder.eqns), out_atoms, constvars, constvals, name=f"{program.name}_transpose")
    return rename(result, hints) if hints else result
