"""Split a program into what can be computed now and what must wait.

Given which inputs are unknown, every equation with an unknown input is unknown.
The known program computes the known outputs plus the *residuals*: known values
the unknown program reads. After ``jvp`` with the tangents unknown, the unknown
program is linear in them. Before (x known, x_dot unknown)::

    program f_jvp(x: f64[3], x_dot: f64[3]):
      y: f64[3] = sin x
      t: f64[3] = cos x
      y_dot: f64[3] = mul x_dot t
      return y, y_dot

After::

    program f_known(x: f64[3]):            program f_linear(t: f64[3], x_dot: f64[3]):
      y: f64[3] = sin x                      y_dot: f64[3] = mul x_dot t
      t: f64[3] = cos x                      return y_dot
      return y, t

Residuals are the same Var objects in both programs, so running the known
program and then the unknown one is plain concatenation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pullback.ir.core import Eqn, Primitive, Program, Var


@dataclass(frozen=True)
class Split:
    known: Program  # known inputs -> (known outputs..., residuals...)
    unknown: Program  # (residuals..., unknown inputs...) -> unknown outputs
    n_residuals: int


# Equations that split themselves rather than go wholly to the unknown side (a scan: a known loop and
# an unknown one): rule(eqn, unknown_inputs) -> (known eqns, unknown eqns, which outputs are unknown).
PartialEvalRule = Callable[[Eqn, list[bool]], tuple[list[Eqn], list[Eqn], list[bool]]]
partial_eval_rules: dict[Primitive, PartialEvalRule] = {}


def partial_eval(program: Program, unknown_inputs: Sequence[bool], unknown_outputs: Sequence[bool]) -> Split:
    """Split ``program``; ``unknown_outputs[i]`` puts output i in the unknown program
    (a known value there becomes a residual passed through)."""
    # sets keyed by the Var itself (hashed by identity, without a call), not by ``id``
    unknown: set[Var] = {v for v, u in zip(program.inputs, unknown_inputs) if u}
    known_eqns, unknown_eqns = [], []
    for eqn in program.eqns:
        for a in eqn.inputs:
            if type(a) is Var and a in unknown:
                break
        else:
            known_eqns.append(eqn)
            continue
        rule = partial_eval_rules.get(eqn.prim)
        if rule is not None:
            is_unknown = [type(a) is Var and a in unknown for a in eqn.inputs]
            known_part, unknown_part, outs_unknown = rule(eqn, is_unknown)
            known_eqns += known_part
            unknown_eqns += unknown_part
            unknown.update(v for v, u in zip(eqn.outputs, outs_unknown) if u)
        else:
            unknown_eqns.append(eqn)
            unknown.update(eqn.outputs)

    known_outputs = [a for a, u in zip(program.outputs, unknown_outputs) if not u]
    for a in known_outputs:
        if isinstance(a, Var) and a in unknown:
            raise ValueError(f"output {a!r} depends on unknown inputs but was asked for as known")
    constvars = set(program.constvars)
    residuals: dict[Var, Var] = {}

    def need(a) -> None:
        if type(a) is Var and a not in unknown and a not in constvars:
            residuals.setdefault(a, a)

    for eqn in unknown_eqns:
        for a in eqn.inputs:
            if type(a) is Var and a not in unknown and a not in constvars and a not in residuals:
                residuals[a] = a
    unknown_outs = tuple(a for a, u in zip(program.outputs, unknown_outputs) if u)
    for a in unknown_outs:
        need(a)
    res = tuple(residuals.values())
    known_inputs = tuple(v for v, u in zip(program.inputs, unknown_inputs) if not u)
    unknown_inputs_vars = tuple(v for v, u in zip(program.inputs, unknown_inputs) if u)
    known = Program(known_inputs, tuple(known_eqns), tuple(known_outputs) + res, program.constvars,
                    program.constvals, name=f"{program.name}_known")
    unknown_prog = Program(res + unknown_inputs_vars, tuple(unknown_eqns), unknown_outs, program.constvars,
                           program.constvals, name=f"{program.name}_linear")
    return Split(known, unknown_prog, len(res))

