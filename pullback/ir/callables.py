"""How a traced callable reads in printed code, through pullback's own wrappers.

``pb.grad(f)`` is a method of an object wrapping ``f``; ``pb.vmap(g)`` an object wrapping ``g``; a
call with static arguments, a function wrapping the user's (``__wrapped__`` throughout). The
program of ``pb.vmap(pb.grad(f))`` is ``f``'s gradient: it prints as ``def f_grad(x, y)``, with
``f``'s parameter names, and its comments quote ``f``'s lines, not the line that called the
transform.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import FunctionType, MethodType


def _transform_of(fn) -> Callable | None:
    """The function a transform's method wraps (``pb.grad(f)`` -> ``f``), else None."""
    owner = getattr(fn, "__self__", None) if type(fn) is MethodType else None
    inner = getattr(owner, "__wrapped__", None)
    return inner if callable(inner) else None


def described(fn: Callable) -> tuple[str, Callable, bool]:
    """(the printed function's name, the user's function whose parameters name the arguments, whether
    a transform of pullback stands between: a method of a transform object, or such an object)."""
    suffixes: list[str] = []
    through = False
    seen: set[int] = set()
    while id(fn) not in seen:
        seen.add(id(fn))
        inner = _transform_of(fn)
        if inner is not None:
            suffixes.append(fn.__name__)  # grad, jacrev, hessian, value_and_grad, ...
            through = True
            fn = inner
            continue
        inner = getattr(fn, "__wrapped__", None)
        if inner is None or not callable(inner):
            break
        through = through or not isinstance(fn, FunctionType | MethodType)  # an object: vmap, differentiate
        fn = inner
    base = getattr(unwrapped(fn), "__name__", "f")
    return "_".join(["f" if base == "<lambda>" else base, *reversed(suffixes)]), fn, through


def unwrapped(fn: Callable) -> Callable:
    """The function whose code ``fn`` runs, through ``__wrapped__`` and ``functools.partial``
    (``partial(loss, adjoint=True)`` is ``loss``): its name, its unpackings and its scope's arrays name
    the printed program's."""
    seen: set[int] = set()
    while id(fn) not in seen:
        seen.add(id(fn))
        inner = fn.func if isinstance(fn, functools.partial) else getattr(fn, "__wrapped__", None)
        if inner is None or not callable(inner):
            break
        fn = inner
    return fn
