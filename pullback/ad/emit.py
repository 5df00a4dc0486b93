"""The lean way the transforms and their rules record an equation: what ``bind`` does, less what they need not.

``jvp`` and ``transpose`` record a few equations per equation of the program they read, all at known
lines (``new_trace(replay=True)``), on operands that are this trace's own tracers or literals. ``bind``
serves every caller (the user's code, views, captured tracers, shape errors named after the user's
function); these two serve the transforms:

- ``emit``: an equation whose output types are already known (a primal equation re-recorded, whose
  outputs' types the program it came from holds), so no shape rule is asked;
- ``apply``: an operation of ``primitives.lax`` (no params), whose output types are remembered per
  primitive and operand types (by identity: a type is compared with ``is`` before its answer is used);
- ``record``: one with params (``lax``'s ``bind``), whose ``Params`` object is remembered with its types.

Either goes through ``bind`` whenever an operand or the trace is not the common case, so what is
recorded is the same equation ``bind`` would record.

``gc_paused``: a transform makes a few objects per equation and frees none of them, so each of
the cyclic garbage collector's full passes while it runs reads every object the program holds, for
nothing; with the collector paused, a long program's jvp takes half the time.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pullback.ir.core import NO_PARAMS, VIEWS, Eqn, Literal, Params, Primitive, Var, makes_view, typed_params
from pullback.ir.tracer import Tracer, _state, bind


def emit(eqn: Eqn, args: Sequence):
    """``bind(eqn.prim, *args, **eqn.params)``, ``args`` of the types of ``eqn``'s inputs: its outputs have the
    types of ``eqn``'s (an equation re-recorded on other values)."""
    prim, params = eqn.prim, eqn.params
    builder = _state.stack[-1]  # a transform's trace is running
    source = builder.source
    if source is None and not builder.replay:
        return bind(prim, *args, **params)
    for a in args:  # checked, then read in one comprehension (no call per operand)
        if type(a) is Tracer:
            if a.builder is not builder or (a.view is not None and a.view[0].version != a.view[1]):
                return bind(prim, *args, **params)
        elif type(a) is not Literal:
            return bind(prim, *args, **params)
    atoms = tuple([a.ssa if type(a) is Tracer else a for a in args])
    if prim.multiple_results:
        if prim in VIEWS:
            return bind(prim, *args, **params)
        outs = tuple([Var(v.type) for v in eqn.outputs])
        builder.eqns.append(Eqn(prim, atoms, outs, params, source))
        return tuple([Tracer(v, builder) for v in outs])
    out = Var(eqn.outputs[0].type)
    builder.eqns.append(Eqn(prim, atoms, (out,), params, source))
    t = Tracer(out, builder)
    return _view(t, prim, args, atoms) if prim in VIEWS else t


def _atoms(prim: Primitive, args: tuple, builder) -> tuple[list, list] | None:
    """The atoms of ``args`` (tracers of ``builder`` whose view is current, literals) and a cache key of
    ``prim`` and their types (by id: ``_same_types`` checks a hit); None where any is something else."""
    atoms = []
    key = [prim]
    for a in args:  # loops, not comprehensions: this runs for every equation a rule records
        if type(a) is Tracer and a.builder is builder and (a.view is None or a.view[0].version == a.view[1]):
            a = a.ssa
            key.append(id(a.type))
        elif type(a) is Literal:  # (``Literal.of`` shares one object per value and dtype)
            key.append(id(a))
        else:
            return None
        atoms.append(a)
    return atoms, key


def _same_types(atoms: list, known: tuple) -> bool:
    """Whether each atom's type (a literal: itself) is the object a cache entry was made for."""
    for a, k in zip(atoms, known):
        if (a.type if type(a) is Var else a) is not k:
            return False
    return True


# (primitive, id of each operand's type or literal) -> (those types and literals, the output types)
_KNOWN: dict[tuple, tuple[tuple, tuple]] = {}
_KNOWN_MAX = 1 << 12


def apply(prim: Primitive, *args):
    """``bind(prim, *args)`` of a single-output primitive without params, its output type remembered."""
    builder = _state.stack[-1]  # a transform's trace is running
    source = builder.source
    if source is None and not builder.replay:
        return bind(prim, *args)
    found = _atoms(prim, args, builder)
    if found is None:
        return bind(prim, *args)
    atoms, key = found
    key = tuple(key)
    hit = _KNOWN.get(key)
    if hit is not None and _same_types(atoms, hit[0]):
        types = hit[1]
    else:
        try:
            types = typed_params(prim, tuple(atoms), {})[0]
        except Exception:  # a shape error: ``bind`` reports it as it does
            return bind(prim, *args)
        if len(_KNOWN) >= _KNOWN_MAX:
            _KNOWN.clear()
        _KNOWN[key] = (tuple([a.type if type(a) is Var else a for a in atoms]), types)
    return _recorded(builder, prim, args, tuple(atoms), types, source)


def apply1(prim: Primitive, x):
    """``apply`` of one operand, without the loops."""
    builder = _state.stack[-1]
    source = builder.source
    if type(x) is not Tracer or x.builder is not builder or x.view is not None or (
            source is None and not builder.replay):
        return apply(prim, x)
    t = x.ssa.type
    hit = _KNOWN.get((prim, id(t)))
    if hit is None or hit[0][0] is not t:
        return apply(prim, x)
    return _recorded(builder, prim, (x,), (x.ssa,), hit[1], source)


def apply2(prim: Primitive, x, y):
    """``apply`` of two operands (tracers or literals), without the loops."""
    builder = _state.stack[-1]
    source = builder.source
    if source is None and not builder.replay:
        return apply(prim, x, y)
    a, b = _operand(x, builder), _operand(y, builder)
    if a is None or b is None:
        return apply(prim, x, y)
    ka, kb = a.type if type(a) is Var else a, b.type if type(b) is Var else b
    hit = _KNOWN.get((prim, id(ka), id(kb)))
    if hit is None or hit[0][0] is not ka or hit[0][1] is not kb:
        return apply(prim, x, y)
    return _recorded(builder, prim, (x, y), (a, b), hit[1], source)


def _operand(v, builder) -> Var | Literal | None:
    """The atom of a tracer of ``builder`` (not a view) or of a literal; None for anything else."""
    if type(v) is Tracer and v.builder is builder and v.view is None:
        return v.ssa
    return v if type(v) is Literal else None


def _recorded(builder, prim: Primitive, args: tuple, atoms: tuple, types: tuple, source,
              params: Params = NO_PARAMS) -> Tracer:
    """The tracer of one output of ``prim`` on ``atoms`` of known ``types``, its equation recorded."""
    out = Var(types[0])
    builder.eqns.append(Eqn(prim, atoms, (out,), params, source))
    o = Tracer(out, builder)
    return _view(o, prim, args, atoms) if prim in VIEWS else o


# (primitive, id of each operand's type or literal, the params' items) -> (those types and literals,
# the params' values, their Params, the output types)
_RECORDED: dict[tuple, tuple] = {}


def record(prim: Primitive, *args, **params):
    """``bind(prim, *args, **params)``, for the rules' operations (``primitives.lax``): the output types
    and the ``Params`` remembered for the primitive, the operand types and the params' values (of the
    same types)."""
    try:
        builder = _state.stack[-1]
    except (AttributeError, IndexError):
        return bind(prim, *args, **params)
    source = builder.source
    if (source is None and not builder.replay) or prim.multiple_results:
        return bind(prim, *args, **params)
    found = _atoms(prim, args, builder)
    if found is None:
        return bind(prim, *args, **params)
    atoms, key = found
    key.append(tuple(params.items()))
    key = tuple(key)
    try:
        hit = _RECORDED.get(key)
    except TypeError:  # an unhashable param: ``bind`` says what is wrong with it
        return bind(prim, *args, **params)
    if hit is not None and not _same_types(atoms, hit[0]):
        hit = None
    if hit is not None:
        for v, w in zip(params.values(), hit[1]):
            if type(v) is not type(w):
                hit = None
                break
    if hit is None:
        try:  # the types and the Params that ``bind`` shares for this kind of equation
            types, p = typed_params(prim, tuple(atoms), params)
        except Exception:  # a shape error: ``bind`` reports it as it does
            return bind(prim, *args, **params)
        if len(_RECORDED) >= _KNOWN_MAX:
            _RECORDED.clear()
        hit = _RECORDED[key] = (tuple([a.type if type(a) is Var else a for a in atoms]), tuple(params.values()),
                                p, types)
    return _recorded(builder, prim, args, tuple(atoms), hit[3], source, hit[2])


def _view(out: Tracer, prim: Primitive, args: Sequence, atoms: tuple) -> Tracer:
    """``out``, marked a view of its first operand where ``prim`` makes one (as ``bind`` marks it)."""
    if args and type(args[0]) is Tracer and makes_view(prim, atoms):
        root = args[0].view[0] if args[0].view is not None else args[0]
        out.view = (root, root.version)
    return out


@contextmanager
def gc_paused(promote: bool = False) -> Iterator[None]:
    """The cyclic garbage collector off while a program is built (a trace, a transform, printing and
    compiling: see the module's docstring); as it was on exit. Reference counting still frees what is
    dropped, and cycles made meanwhile are collected after. ``promote``: what was made meanwhile and is
    still tracked goes to the oldest generation on exit (``gc.freeze`` then ``gc.unfreeze``: two list
    splices), not through young collections that scan it (a program's objects live as long as its
    function); where the process has frozen objects of its own, they stay frozen, and this is skipped."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if promote and not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        gc.enable()
