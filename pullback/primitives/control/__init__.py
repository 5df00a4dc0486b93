"""Structured control flow (scan, checkpoint, while, cond); importing the package registers them."""

from pullback.primitives.control.scan import *  # noqa: F403
