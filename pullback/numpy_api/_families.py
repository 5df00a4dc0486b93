"""Imports every family module of ``pullback.numpy_api`` so that each registers its
functions; a family is added by importing it here."""

from pullback.numpy_api import fft, statistics  # noqa: F401
