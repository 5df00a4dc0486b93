"""Diagnostics: with ``PULLBACK_LOG=1`` in the environment (or ``pullback.log.enable()``), each
trace and each compile is reported on standard error, with the function, the stage, the argument
signature, the time taken and the program's size, so that a slow first call, or a function traced
again and again, can be seen. With logging off too, a program of many equations announces its compile
before it starts, and a function compiled for a fifth value of one static argument says so once
(``api.RECOMPILES``), as warnings of the ``pullback`` logger."""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("pullback")
LARGE = 20_000  # equations: a compile of this size takes seconds, so it is announced first


def enable(level: int = logging.INFO) -> None:
    """Report traces and compiles on standard error."""
    if not any(getattr(h, "_pullback", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("pullback: %(message)s"))
        handler._pullback = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)


if os.environ.get("PULLBACK_LOG", "") not in ("", "0"):
    enable()
