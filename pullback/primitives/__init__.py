"""Primitives by family. Importing this package registers all of them."""

from pullback.ir.core import PRIMITIVES
from pullback.primitives import contractions, cumulative, elementwise, fft, reductions, structural  # noqa: F401

__all__ = ["PRIMITIVES"]
