"""Primitives by family. Importing this package registers all of them."""

from pullback.ir.core import PRIMITIVES
from pullback.primitives import (  # noqa: F401
    contractions,
    cumulative,
    elementwise,
    indexing,
    reductions,
    special,
    structural,
)

__all__ = ["PRIMITIVES"]
