"""The IR: primitives, SSA values, equations and programs, all immutable.

A ``Program`` is a straight-line SSA function::

    program f(x: f64[3], y: f64[3]):
      t: f64[3] = mul x y
      z: f64[3] = log t
      return z

Transforms never mutate a program; they build a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from pullback.ir.types import ArrayType


class Primitive:
    """An operation's identity. What it means lives in rule tables keyed by it:
    shape rules here, JVP and transpose rules beside their transforms, emitters
    in each backend."""

    __slots__ = ("name", "multiple_results")

    def __init__(self, name: str, *, multiple_results: bool = False, registered: bool = True):
        """``registered=False``: an equation only a backend makes while printing (no rules, never
        traced or differentiated), kept out of the registry every rule table is checked against."""
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} is already registered")
        self.name = name
        self.multiple_results = multiple_results
        if registered:
            PRIMITIVES[name] = self

    def __repr__(self) -> str:
        return self.name


PRIMITIVES: dict[str, Primitive] = {}
# binary primitives whose two operands may swap (``x * c`` is ``c * x``): CSE keys them in one order
COMMUTATIVE: set[Primitive] = set()
# primitives whose equations hold sub-programs in their params (loop bodies, branches): the passes that
# must look inside them check membership here rather than every equation's params
WITH_BODIES: set[Primitive] = set()
# primitives whose equations act on the world when the program runs (a random draw consumes its
# generator's stream): no pass drops, merges, hoists, sinks or reorders them, and an equation whose
# sub-programs hold one is one too (see ``effectful``)
EFFECTS: set[Primitive] = set()
# primitives whose output is a view of (aliases the buffer of) their first operand: primitive -> a rule on
# an equation's inputs saying whether its output is one (None: always). Filled by the families owning
# them; read by the tracer (which refuses writes through views) and the backends' memory planner
VIEWS: dict[Primitive, Callable[[tuple[Atom, ...]], bool] | None] = {}


def makes_view(prim: Primitive, inputs: tuple[Atom, ...]) -> bool:
    """Whether ``prim``'s output on ``inputs`` aliases the first operand (see ``VIEWS``)."""
    if prim not in VIEWS:
        return False
    rule = VIEWS[prim]
    return rule is None or rule(inputs)


ShapeRule = Callable[..., "ArrayType | tuple[ArrayType, ...]"]
shape_rules: dict[Primitive, ShapeRule] = {}


def output_types(prim: Primitive, inputs: tuple[Atom, ...], params: Mapping[str, Any]) -> tuple[ArrayType, ...]:
    """Re-derive an equation's output types; shape rules raise ShapeError on bad input.

    A shape rule is a function of the operands' types, the literals' values and the params, so its
    answers are remembered (a bounded table): an unrolled loop asks the same questions thousands of
    times, and a contraction's rule costs as much as the rest of recording its equation."""
    key = (prim, tuple([a.type if type(a) is Var else (type(a.value), a) for a in inputs]),
           params if type(params) is Params else tuple(params.items()))
    try:
        hit = _KNOWN_TYPES.get(key)
    except TypeError:  # an unhashable param: the rule will say what is wrong with it
        hit, key = None, None
    if hit is not None:
        return hit
    out = shape_rules[prim](*inputs, **params)
    types = tuple(map(interned, out)) if prim.multiple_results else (interned(out),)
    if key is not None:
        if len(_KNOWN_TYPES) >= _KNOWN_TYPES_MAX:
            _KNOWN_TYPES.clear()
        _KNOWN_TYPES[key] = types
    return types


_KNOWN_TYPES: dict[tuple, tuple[ArrayType, ...]] = {}
_KNOWN_TYPES_MAX = 1 << 14


def interned(t: ArrayType) -> ArrayType:
    """One object for all equal types (bounded: cleared when full): the tables above are keyed by types, and
    a key whose types are the very objects the table holds is found without a call of ``ArrayType.__eq__``
    (a Python call per type, at every equation recorded, where each trace's inputs made types of their own)."""
    found = _TYPES.get(t)
    if found is None:
        if len(_TYPES) >= _KNOWN_TYPES_MAX:
            _TYPES.clear()
        found = _TYPES[t] = t
    return found


_TYPES: dict = {}


def typed_params(prim: Primitive, inputs: tuple[Atom, ...], params: dict[str, Any],
                 ins: tuple | None = None) -> tuple[tuple[ArrayType, ...], Params]:
    """``output_types`` and the equation's ``Params`` together (what recording an equation needs), remembered
    by one key: an unrolled loop records the same (primitive, operand types, params) at every step, and then
    its equations share one immutable Params rather than each building, sorting and hashing its own. The key
    holds the params' types beside their values, so that ``axis=True`` never finds the Params of ``axis=1``;
    ``ins``: each input's part of the key (its type; a literal's value and the value's type). (``tracer.bind``
    reads the table with this key itself: keep the two alike.)"""
    if ins is None:  # (``bind`` gives them, made as it reads its operands)
        ins = tuple([a.type if type(a) is Var else (type(a.value), a) for a in inputs])
    key = (prim, ins, tuple(params.items()), tuple(map(type, params.values()))) if params else (prim, ins)
    try:
        hit = _KNOWN_EQNS.get(key)
    except TypeError:  # an unhashable param: the rule will say what is wrong with it, or Params will
        hit, key = None, None
    if hit is not None:
        return hit
    out = shape_rules[prim](*inputs, **params)
    hit = (tuple(map(interned, out)) if prim.multiple_results else (interned(out),),
           Params(params) if params else NO_PARAMS)
    if key is not None:
        if len(_KNOWN_EQNS) >= _KNOWN_TYPES_MAX:
            _KNOWN_EQNS.clear()
        _KNOWN_EQNS[key] = hit
    return hit


_KNOWN_EQNS: dict[tuple, tuple[tuple[ArrayType, ...], Params]] = {}


class ShapeError(ValueError):
    """An equation's inputs or params do not fit its primitive."""


# Var, Literal, SourceInfo and Eqn are immutable by convention, not ``frozen``: a frozen dataclass
# sets each field through ``object.__setattr__`` and costs four times as much to make, and a long
# program makes millions of them (no pass assigns to one; a transform builds new ones). One exception: a
# trace (or jvp, transpose) names the Vars it made itself (``hint``) before its program is returned, when
# they are in no other program yet, rather than copying the program to rename them
@dataclass(eq=False, slots=True)
class Var:
    """An SSA value: its identity is the object; ``hint`` is a name suggestion."""

    type: ArrayType
    hint: str = ""

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"{self.hint or 'v'}:{self.type}"


@dataclass(unsafe_hash=True, slots=True)  # hashed by value, as a frozen one: never assigned to
class Literal:
    """A Python scalar operand, typed (shape ``()``) by the operation it feeds."""

    value: bool | int | float | complex
    type: ArrayType

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    def __repr__(self) -> str:
        return repr(self.value)

    @staticmethod
    def of(value, dtype) -> Literal:
        """``value`` cast to the Python scalar type matching ``dtype``.

        A literal is a value, immutable: the one made for a Python int or float (or a float64) and a dtype is shared by
        every equation using it (``x * 0.9`` at every step of an unrolled loop). Not for zeros (``-0.0 ==
        0.0``), NaN (never equal) or complex numbers (``1 + 0j == 1 - 0j``): those are made each time."""
        kind = type(value)
        if (kind is float or kind is int or kind is bool or kind is np.float64) and value and value == value:
            key = (kind, value, dtype)
            try:
                return _LITERALS[key]
            except KeyError:
                if len(_LITERALS) >= 4096:
                    _LITERALS.clear()
                found = _LITERALS[key] = Literal._of(value, dtype)
                return found
            except TypeError:  # an unhashable dtype spelling: made, not remembered
                pass
        return Literal._of(value, dtype)

    @staticmethod
    def _of(value, dtype) -> Literal:
        dtype = np.dtype(dtype)
        return Literal(np.array(value, dtype).item(), ArrayType((), dtype))


_LITERALS: dict[tuple, Literal] = {}


Atom = Var | Literal


class Params(Mapping[str, Any]):
    """An equation's static parameters: a frozen, hashable mapping."""

    __slots__ = ("_items", "_dict", "_hash")

    def __init__(self, items: Mapping[str, Any] | None = None):
        d = dict(sorted(items.items())) if items and len(items) > 1 else dict(items or {})  # one key: sorted
        self._dict = d
        self._items = tuple(d.items())
        self._hash = hash(self._items)  # params must be hashable: fail early, not in CSE; kept for the tables

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._items)

    # the dict's own (read-only views), not Mapping's generic ones: every pass asks each equation's params
    def __contains__(self, key) -> bool:
        return key in self._dict

    def get(self, key: str, default=None) -> Any:
        return self._dict.get(key, default)

    def keys(self):
        return self._dict.keys()

    def values(self):
        return self._dict.values()

    def items(self):
        return self._dict.items()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, Params) and self._hash == other._hash
                                 and self._items == other._items)

    def __reduce__(self):  # rebuilt, not copied: the kept hash holds for this process's string hashes only
        return Params, (self._dict,)

    def __repr__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self._items)


NO_PARAMS = Params()  # the params of most equations, one object: a Params is immutable


class SourceInfo(NamedTuple):
    """Where in the user's code an equation came from. A tuple, so that it is hashed and compared in C:
    every equation's source is part of the keys the passes and the eager walk look equations up by."""

    filename: str
    lineno: int

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


class Opaque:
    """A Python object an equation uses by reference (the generator a draw consumes): compared by
    identity, passed to the generated code as a keyword-only parameter named after ``hint``, never
    printed; or, where ``code`` is given, printed as that code (``np.random`` for NumPy's own)."""

    __slots__ = ("value", "hint", "code")

    def __init__(self, value: Any, hint: str, code: str | None = None):
        self.value, self.hint, self.code = value, hint, code

    def __eq__(self, other) -> bool:
        return type(other) is Opaque and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return self.hint


@dataclass(eq=False, slots=True)
class Eqn:
    prim: Primitive
    inputs: tuple[Atom, ...]
    outputs: tuple[Var, ...]
    params: Params = NO_PARAMS
    source: SourceInfo | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Program:
    """A typed SSA function. ``constvals[i]`` is the value of ``constvars[i]``:
    arrays read from the user's scope (or made when tracing), keyword-only parameters of the
    generated code.

    Made by tracing (``pb.make_ir``, ``differentiate(f).ir``), changed only by transforms that
    return new programs; ``str(program)`` prints one typed equation per line.

    >>> program = pb.make_ir(lambda x, y: np.log(x * y))(np.ones(3), np.ones(3))
    >>> [str(v.type) for v in program.inputs], len(program.eqns)
    (['f64[3]', 'f64[3]'], 2)
    >>> print(str(program).splitlines()[1].strip())
    t: f64[3] = mul x y
    """

    inputs: tuple[Var, ...]
    eqns: tuple[Eqn, ...]
    outputs: tuple[Atom, ...]
    constvars: tuple[Var, ...] = ()
    constvals: tuple[Any, ...] = ()
    name: str = "f"

    @property
    def in_types(self) -> tuple[ArrayType, ...]:
        return tuple(v.type for v in self.inputs)

    @property
    def out_types(self) -> tuple[ArrayType, ...]:
        return tuple(a.type for a in self.outputs)

    def __str__(self) -> str:
        from pullback.ir.printer import print_program

        return print_program(self)


def sub_programs(eqn: Eqn) -> Iterator[Program]:
    """The programs an equation holds in its params (a loop's body, a conditional's branches)."""
    for v in eqn.params.values():
        if isinstance(v, Program):
            yield v
        elif isinstance(v, tuple):
            yield from (b for b in v if isinstance(b, Program))


_EFFECTFUL: dict[int, tuple[Program, bool]] = {}  # id(body) -> (body, whether it holds an effect)


def effectful(eqn: Eqn) -> bool:
    """Whether running ``eqn`` acts on the world: a primitive in ``EFFECTS``, or a body holding one."""
    if eqn.prim in EFFECTS:
        return True
    if eqn.prim not in WITH_BODIES:
        return False
    for body in sub_programs(eqn):
        found = _EFFECTFUL.get(id(body))
        if found is None or found[0] is not body:
            if len(_EFFECTFUL) > 4096:
                _EFFECTFUL.clear()
            found = _EFFECTFUL[id(body)] = (body, any(map(effectful, body.eqns)))
        if found[1]:
            return True
    return False
