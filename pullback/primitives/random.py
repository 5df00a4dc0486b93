"""Random draws: effects of the program, not values of the trace.

``draw`` calls a method of a NumPy generator (``RandomState`` or ``Generator``, held by reference
in an ``Opaque``) when the program runs, so the k-th call of a program consumes exactly the numbers
the k-th eager call would. Its operands are the arrays among the call's arguments; everything else
about the call (the method, static arguments, the result's type) is a param. It is in ``EFFECTS``:
no pass drops, merges, hoists or reorders it. Its result has no derivative: a differentiable
parameter enters by reparameterisation, outside the draw (``loc + scale * standard_normal``,
``frontend.numpy.random``).

    program f(mu: f64[]):
      eps: f64[3] = draw[rs.standard_normal((3,))]
      t: f64[3] = add mu eps
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pullback.ad.jvp import defzero
from pullback.ir.core import EFFECTS, Opaque, Primitive, shape_rules
from pullback.ir.types import ArrayType


@dataclass(frozen=True)
class Slot:
    """Where the draw's ``index``-th operand goes among the call's arguments."""

    index: int


# NumPy's global RandomState, what ``np.random.randn`` draws from, as code
GLOBAL_CODE = "np.random.mtrand._rand"

draw_p = Primitive("draw")
EFFECTS.add(draw_p)


def _draw(*operands, generator: Opaque, method: str, args: tuple, kwargs: tuple[tuple[str, Any], ...],
          out: ArrayType, weak: bool):
    """``out``: the type NumPy's call returns, found when tracing by the same call on a copy of the
    generator (``weak``: it returns a Python scalar, weak under NEP 50)."""
    return out


shape_rules[draw_p] = _draw
defzero(draw_p)  # a draw's numbers do not move with its operands (probabilities, bounds of integers)
