"""Primitives by family. Importing this package registers all of them (a family is added
by importing it here, one line each)."""

import pullback.primitives.contractions  # noqa: F401
import pullback.primitives.control  # noqa: F401
import pullback.primitives.cumulative  # noqa: F401
import pullback.primitives.custom  # noqa: F401
import pullback.primitives.elementwise  # noqa: F401
import pullback.primitives.fft  # noqa: F401
import pullback.primitives.indexing  # noqa: F401
import pullback.primitives.linalg.banded  # noqa: F401
import pullback.primitives.linalg.matrix_functions  # noqa: F401
import pullback.primitives.linalg.rank_update  # noqa: F401
import pullback.primitives.random  # noqa: F401
import pullback.primitives.reductions  # noqa: F401
import pullback.primitives.signal  # noqa: F401
import pullback.primitives.special  # noqa: F401
import pullback.primitives.structural  # noqa: F401
from pullback.ir.core import PRIMITIVES

__all__ = ["PRIMITIVES"]
