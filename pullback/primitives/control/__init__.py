"""Structured control flow, one file per primitive with all its rules: ``scan`` (scan.py, also the
stacks a recording while loop makes), ``checkpoint``, ``while`` (while_loop.py) and ``cond``; what
they share (closing a body, which values depend on which inputs, live inputs, batched bodies) in
common.py. Importing the package registers them all."""

from pullback.primitives.control.checkpoint import checkpoint_p, hoist_effects, make_checkpoint, passed_through
from pullback.primitives.control.common import close, expression_hint
from pullback.primitives.control.cond import cond_p, make_cond
from pullback.primitives.control.scan import (
    hoist_invariant,
    invariant_carries,
    make_scan,
    scan_p,
    shared_consts,
    split_invariant,
    with_fills,
    zeros_like_stack,
)
from pullback.primitives.control.while_loop import make_while, while_p

__all__ = [
    "checkpoint_p", "close", "cond_p", "expression_hint", "hoist_effects", "hoist_invariant", "invariant_carries",
    "make_checkpoint", "make_cond", "make_scan", "make_while", "passed_through", "scan_p", "shared_consts",
    "split_invariant", "while_p", "with_fills", "zeros_like_stack",
]
