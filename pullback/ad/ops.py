"""The array operations the interpreters build with (zeros, add, reshape, ...), registered from above.

They are ``primitives.lax``'s (floor 3), which imports the rule tables here (floor 2); so the tables
reach them through ``lax`` below, which ``primitives.lax`` fills when it is imported (as JAX's ad_util
holds ``add_jaxvals``). The package imports it before any rule runs.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

#: ``lax.add(a, b)``, ``lax.zeros(t)``, ...: the functions ``primitives.lax`` registers
lax = SimpleNamespace()


def register(**operations: Callable) -> None:
    """Make ``operations`` (name -> function) available as ``lax.name`` to the interpreters."""
    vars(lax).update(operations)
