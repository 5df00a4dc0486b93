"""Forward mode: a program computing outputs and output tangents.

Before::

    program f(x: f64[3]):
      y: f64[3] = sin x
      return y

After ``jvp``::

    program f_jvp(x: f64[3], x_dot: f64[3]):
      y: f64[3] = sin x
      t: f64[3] = cos x
      y_dot: f64[3] = mul x_dot t
      return y, y_dot

Each primitive's rule is ordinary traced code over other primitives (``lax``), so
its output is IR. A tangent that is known to be zero is ``Zero``: never
materialised, and an equation whose tangent inputs are all ``Zero`` emits no
tangent code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pullback.ad.emit import emit, gc_paused, record
from pullback.ad.ops import lax
from pullback.ir.core import NO_PARAMS, Literal, Primitive, Program, Var
from pullback.ir.tracer import Tracer, bind, new_trace, rename
from pullback.ir.types import ArrayType, is_inexact


@dataclass(frozen=True, slots=True)
class Zero:
    """A symbolic zero tangent (or cotangent) of the given type."""

    type: ArrayType

    shape = property(lambda self: self.type.shape)
    dtype = property(lambda self: self.type.dtype)


def instantiate(t, like_type: ArrayType | None = None):
    """A materialised zero for ``Zero``; anything else unchanged."""
    return lax.zeros(t.type) if isinstance(t, Zero) else t


# Zeros of the types ``lax.zeros`` cannot make from the type alone, made like a primal value: a stack
# (a loop's records, as long as the loop ran), by type -> fn(primal) -> its zero tangent
zeros_of: dict[type, Callable] = {}


def instantiate_like(t, primal):
    """``instantiate``, where a zero of a stack is made as long as ``primal``."""
    if isinstance(t, Zero) and type(t.type) in zeros_of:
        return zeros_of[type(t.type)](primal)
    return instantiate(t)


# rule(primals, tangents, **params) -> (primal_out, tangent_out); tangents may be Zero
JvpRule = Callable[..., tuple]
jvp_rules: dict[Primitive, JvpRule] = {}
# The rules ``defjvp``, ``deflinear`` and ``defzero`` make, each to its part after the primal equation:
# part(ans, primals, tangents, **params) -> (ans, tangent_out). ``jvp`` records the primal equation itself
# (its output types known from the program it reads) and calls the part; keyed by the rule, so that a rule
# registered in its place is called as it is.
given_primal: dict[Callable, Callable] = {}


def tangent_type(t: ArrayType) -> ArrayType | None:
    """Tangents exist for inexact (float, complex) values only."""
    return t if is_inexact(t.dtype) else None


# --- helpers that give the common shapes of rule a one-line form ---------------------------


def defjvp(prim: Primitive, *partials: Callable | None) -> None:
    """``partials[i](t_i, *primals, ans=..., **params)`` is input i's contribution; the
    rule sums the contributions of the inputs whose tangent is not Zero."""
    def part(ans, primals, tangents, **params):
        out = None
        for partial, t in zip(partials, tangents):
            if partial is None or type(t) is Zero:
                continue
            term = partial(t, *primals, ans=ans, **params)
            out = term if out is None else lax.add(out, term)
        return ans, Zero(ans.ssa.type) if out is None else out

    _register(prim, part)


def _register(prim: Primitive, part: Callable) -> None:
    """``jvp_rules[prim]``: ``part`` after the primal equation is recorded (see ``given_primal``)."""

    def rule(primals, tangents, **params):
        return part(bind(prim, *primals, **params), primals, tangents, **params)

    jvp_rules[prim] = rule
    given_primal[rule] = part


def deflinear(prim: Primitive) -> None:
    """A primitive linear in all its operands: the tangent is the primitive applied to the
    tangents (Zero operands materialised only when another tangent is not Zero)."""

    def part(ans, primals, tangents, **params):
        if all(isinstance(t, Zero) for t in tangents):
            return ans, Zero(ans.ssa.type)
        return ans, record(prim, *[instantiate(t) for t in tangents], **params)

    _register(prim, part)


def defzero(prim: Primitive) -> None:
    """Outputs that are piecewise constant (comparisons, sign, iota): zero tangent."""

    def part(ans, primals, tangents, **params):
        outs = ans if prim.multiple_results else (ans,)
        zeros = tuple(Zero(o.ssa.type) for o in outs)
        return ans, zeros if prim.multiple_results else zeros[0]

    _register(prim, part)


# --- the transform --------------------------------------------------------------------------


def _tangent_hint(hint: str) -> str:
    return f"{hint}_dot" if hint else ""


def jvp(program: Program, wrt: Sequence[bool] | None = None) -> Program:
    """``program(*primals) -> outs`` to ``jvp(*primals, *tangents) -> (*outs, *out_tangents)``.

    ``wrt[i]`` says whether input i gets a tangent input (default: every inexact input).
    Output tangents that are Zero are materialised, since a program returns arrays.
    """
    if wrt is None:
        wrt = [tangent_type(v.type) is not None for v in program.inputs]
    # names for the values this trace makes are given as they are made (a Var made here is in no other
    # program yet); a value that is the input program's own (a rule returning an input) is renamed, by copy
    hints: dict[int, str] = {}
    foreign = {*program.inputs, *program.constvars}
    with gc_paused(), new_trace(replay=True) as builder:
        # keyed by the Var itself (hashed by identity, without a call), not by ``id``
        primal: dict[Var, object] = {}
        tangent: dict[Var, object] = {}
        tangent_inputs = []
        for v, w in zip(program.inputs, wrt):
            primal[v] = Tracer(v, builder)
            if w:
                if tangent_type(v.type) is None:
                    raise TypeError(f"cannot differentiate with respect to {v.hint or 'an input'} of dtype {v.dtype}")
                t = Var(v.type, _tangent_hint(v.hint))
                tangent_inputs.append(t)
                tangent[v] = Tracer(t, builder)
        for v, c in zip(program.constvars, program.constvals):
            builder.consts[id(c)] = (v, c)
            primal[v] = Tracer(v, builder)

        def read(a, env, zero):
            if isinstance(a, Literal):
                return a if env is primal else Zero(a.type)
            found = env.get(a)
            return Zero(a.type) if found is None and zero else found

        rules: dict[Primitive, tuple] = {}  # this pass's look-ups of ``jvp_rules`` and ``given_primal``
        for eqn in program.eqns:
            builder.source = eqn.source
            inputs = eqn.inputs
            ps = [a if type(a) is Literal else primal[a] for a in inputs]
            for a in inputs:  # does a tangent reach it? (``tangent`` holds no Zero; a literal, unhashed, no key)
                if type(a) is Var and a in tangent:
                    break
            else:
                a = None
            if a is None:  # the primal equation alone, its output types known
                outs, touts = emit(eqn, ps), None
            else:
                ts = [tangent[a] if type(a) is Var and a in tangent else Zero(a.type) for a in inputs]
                found = rules.get(eqn.prim)  # (the rule, its part after the primal equation or None)
                if found is None:
                    rule = jvp_rules.get(eqn.prim)
                    if rule is None:
                        raise NotImplementedError(f"no JVP rule for primitive {eqn.prim.name}")
                    found = rules[eqn.prim] = (rule, given_primal.get(rule))
                rule, part = found
                if part is None:
                    outs, touts = rule(ps, ts, **eqn.params)
                elif eqn.params is NO_PARAMS:  # (``**`` of a Params asks it for its keys: a call)
                    outs, touts = part(emit(eqn, ps), ps, ts)
                else:
                    outs, touts = part(emit(eqn, ps), ps, ts, **eqn.params)
            if not eqn.prim.multiple_results:
                outs, touts = (outs,), (touts,)
            elif touts is None:
                touts = (None,) * len(outs)
            for v, o, t in zip(eqn.outputs, outs, touts):
                primal[v] = o
                if v.hint and not o.ssa.hint:
                    if o.ssa in foreign:
                        hints.setdefault(id(o.ssa), v.hint)
                    else:
                        o.ssa.hint = v.hint
                if t is not None and type(t) is not Zero and v.type.dtype.kind in "fc":  # ``tangent_type``
                    tangent[v] = t
                    if v.hint and not t.ssa.hint:
                        if t.ssa in foreign:
                            hints.setdefault(id(t.ssa), _tangent_hint(v.hint))
                        else:
                            t.ssa.hint = _tangent_hint(v.hint)
        builder.source = None
        outs = [read(a, primal, False) for a in program.outputs]
        touts = [instantiate_like(read(a, tangent, True), o) for a, o in zip(program.outputs, outs)]
        out_atoms = tuple(builder.atom(o) for o in outs + touts)
    constvars, constvals = builder.constants()
    result = Program(program.inputs + tuple(tangent_inputs), tuple(builder.eqns), out_atoms, constvars, constvals,
                     name=f"{program.name}_jvp")
    return rename(result, hints) if hints else result
