"""What a pass asks of a whole program before it looks closer: which primitives it holds, which
shapes its equations make, how many equations read each var. All are counted in C (``map`` over an
``attrgetter``), with no Python call per equation, so that a pass whose trigger is absent returns at
once on a long program, and one that needs reader counts gets them in one sweep, not a loop of its own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from itertools import chain, repeat
from operator import attrgetter

from pullback.ir.core import Primitive, Program

_prim = attrgetter("prim")
_inputs = attrgetter("inputs")
_outputs = attrgetter("outputs")
_type = attrgetter("type")


def primitives(program: Program) -> Iterator[Primitive]:
    """The primitive of each equation, in order (lazily: ``p in primitives(program)`` stops at the first)."""
    return map(_prim, program.eqns)


def readers(program: Program) -> Counter:
    """id of a var -> how many equations read it, an output of the program counting as one reader.
    Literals' ids are counted too, harmlessly: no var has them."""
    count = Counter(map(id, chain.from_iterable(map(_inputs, program.eqns))))
    count.update(map(id, program.outputs))
    return count


def shapes(program: Program) -> set[tuple[int, ...] | None]:
    """The distinct shapes of the equations' results (a long program has few; None: a stack's, which has
    no shape)."""
    return set(map(getattr, map(_type, chain.from_iterable(map(_outputs, program.eqns))), repeat("shape"),
                   repeat(None)))
