"""Imports every family module of ``pullback.numpy_api`` so that each registers its
functions; a family is added by importing it here."""

import pullback.numpy_api.fft  # noqa: F401
from pullback.numpy_api import statistics  # noqa: F401
