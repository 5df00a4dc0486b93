"""Common-subexpression elimination: an equation repeating an earlier one
(same primitive, same inputs, same params; the inputs of a commutative one in either order) reuses
its outputs. Effects never do: two equal draws
are two draws."""

from __future__ import annotations

from itertools import filterfalse

from pullback.ir.core import COMMUTATIVE, EFFECTS, NO_PARAMS, WITH_BODIES, Eqn, Literal, Program, Var, effectful


def _key(a):
    return ("lit", type(a.value), a.value, a.dtype) if isinstance(a, Literal) else a


def _before(a, b) -> bool:
    """A fixed order of two operand keys, so that a commutative pair is keyed one way: vars by id,
    before literals; literals by their text (rare, and a dtype's repr is dear)."""
    if type(a) is Var:
        return type(b) is not Var or id(a) < id(b)
    return type(b) is not Var and repr(a) < repr(b)


def key_of(prim, inputs: tuple, params) -> tuple:
    """What two equations that compute the same value share: vars as themselves (a Var hashes by
    identity, in C: no int object per operand, and a hit compares pointers), literals by value; a
    commutative pair in one order; the params only where there are some (a Params hashes in Python)."""
    if Literal not in map(type, inputs):
        keys = inputs
        if prim in COMMUTATIVE and len(keys) == 2 and id(keys[1]) < id(keys[0]):
            keys = (keys[1], keys[0])  # x * y and y * x are one product
    else:  # literals by value (in the equations that have one; ``_key``, inline)
        keys = tuple([a if type(a) is Var else ("lit", type(a.value), a.value, a.type.dtype) for a in inputs])
        if prim in COMMUTATIVE and len(keys) == 2:  # x * c and c * x are one product (``_before``, inline)
            first, second = keys
            if ((type(first) is not Var or id(second) < id(first)) if type(second) is Var
                    else (type(first) is not Var and repr(second) < repr(first))):
                keys = (second, first)
    return (prim, keys) if params is NO_PARAMS else (prim, keys, params)


class Clean:
    """What the last CSE of a pipeline's program left: its equations (none repeats another) and their
    keys. The passes after it rewrite a few equations and keep the others as they were (the same objects),
    so the next CSE of that program keys only the new ones: no new one repeating a key, the program has no
    duplicate (two kept equations are no more alike than they were), and it costs what changed."""

    __slots__ = ("eqns", "keys")

    def __init__(self):
        self.eqns: set[Eqn] = set()
        self.keys: dict[tuple, Eqn] = {}  # the key of every equation in ``eqns`` but effects -> that equation


def cse(program: Program, clean: Clean | None = None) -> Program:
    """``program`` itself when no equation repeats another. ``clean``: what the last CSE of an earlier
    version of this program left, used and updated (see ``Clean``)."""
    if clean is not None and clean.eqns and _still_clean(program, clean):
        return program
    seen: dict[tuple, Eqn] = {}
    replace: dict[Var, Var] = {}
    eqns: list[Eqn] | None = None  # made at the first change: until then the kept equations are a prefix
    for i, eqn in enumerate(program.eqns):
        inputs = eqn.inputs
        if replace and not replace.keys().isdisjoint([a for a in inputs if type(a) is Var]):
            inputs = tuple([replace.get(a, a) if type(a) is Var else a for a in inputs])
        prim = eqn.prim
        key = key_of(prim, inputs, eqn.params)
        first = None if (prim in EFFECTS or prim in WITH_BODIES and effectful(eqn)) else seen.get(key)
        if first is not None:
            for v, w in zip(eqn.outputs, first.outputs):
                replace[v] = w
            if eqns is None:
                eqns = list(program.eqns[:i])
            continue
        if inputs is not eqn.inputs and inputs != eqn.inputs:
            eqn = Eqn(eqn.prim, inputs, eqn.outputs, eqn.params, eqn.source)
        seen[key] = eqn
        if eqns is not None:
            eqns.append(eqn)
    if clean is not None:
        clean.keys, clean.eqns = seen, set(program.eqns if eqns is None else eqns)
    if eqns is None:  # no duplicate, so nothing replaced either
        return program
    # uses were replaced on the way (a kept equation precedes its duplicates' uses): only outputs remain
    outputs = tuple(replace.get(a, a) if type(a) is Var else a for a in program.outputs)
    return Program(program.inputs, tuple(eqns), outputs, program.constvars, program.constvals, program.name)


def _still_clean(program: Program, clean: Clean) -> bool:
    """Whether no equation of ``program`` that is not in ``clean`` repeats another equation; ``clean``
    updated when none does. A key already known may be that of an equation since dropped: then this says
    no, and the whole program is gone through (a rare case)."""
    fresh = list(filterfalse(clean.eqns.__contains__, program.eqns))
    keys = clean.keys
    for eqn in fresh:
        prim = eqn.prim
        if prim in EFFECTS or prim in WITH_BODIES and effectful(eqn):
            continue
        key = key_of(prim, eqn.inputs, eqn.params)
        if key in keys:  # (``keys`` is remade by the whole pass that follows)
            return False
        keys[key] = eqn
    clean.eqns.update(fresh)
    return True
