"""NumPy's floating-point warnings (``RuntimeWarning: divide by zero encountered ...``) raised while a
generated program runs, reported at the line of the user's code that the statement came from, not at
the generated source's ``<pullback:f_grad:3>:12``.

NumPy decides what a floating-point error does from its ``errstate``, a context variable. While a
generated program runs, the categories the user's state has *warn* call ``_warn`` instead (NumPy's
``call`` mode): it finds the generated frame, maps its line to the user's statement (the ``# f.py:12
text`` comment above it, ``codegen.Generated.statements``, kept in the module's namespace) and warns
there with ``warnings.warn_explicit``, so the user's filters (``-W error`` too) apply as to any
warning. Other modes stay the user's: ``ignore``, ``raise`` and ``print`` behave as set, and a state
with the user's own ``call`` or ``log`` handler is left whole. The user's state maps to the program's
once (a small cache keyed by the context variable's value), so a call costs a context-variable set and
reset; nothing global changes, and other threads and contexts keep their own state.
"""

from __future__ import annotations

import linecache
import sys
import warnings
from collections.abc import Callable

from pullback.ir.core import SourceInfo
from pullback.ir.tracer import is_user_code

try:  # NumPy 2's errstate: a context variable holding NumPy's "extobj"
    from numpy._core.umath import _extobj_contextvar, _get_extobj_dict, _make_extobj
except ImportError:  # another NumPy: its warnings stay at the generated line
    _extobj_contextvar = None

STATEMENTS = "__pullback_statements__"  # in a generated module's namespace: comment text -> user's line
_CATEGORIES = ("divide", "over", "under", "invalid")
_states: dict[int, tuple[object, object | None]] = {}  # id(user's extobj) -> (it, the program's, or None)


def _program_state(current) -> object | None:
    """The errstate a program runs under, given the user's (``current``): None to run under the user's."""
    found = _states.get(id(current))
    if found is not None and found[0] is current:
        return found[1]
    modes = _get_extobj_dict()  # ``current``'s modes: it is this context's value
    if any(modes[c] in ("call", "log") for c in _CATEGORIES) or "warn" not in (modes[c] for c in _CATEGORIES):
        ours = None
    else:
        ours = _make_extobj(call=_warn, **{c: "call" if modes[c] == "warn" else modes[c] for c in _CATEGORIES})
    if len(_states) >= 64:  # each ``np.errstate`` block makes a new state: keep a few
        _states.clear()
    _states[id(current)] = (current, ours)  # the entry keeps the state it is keyed by alive
    return ours


def attributed(fn: Callable) -> Callable:
    """``fn`` (a generated program) whose floating-point warnings name the user's lines."""
    if _extobj_contextvar is None:
        return fn
    get, set_, reset = _extobj_contextvar.get, _extobj_contextvar.set, _extobj_contextvar.reset
    last: list = [None, None]  # the user's state of the last call and the program's: usually the same

    def run(*args):
        current = get()
        if current is last[0]:
            ours = last[1]
        else:
            ours = _program_state(current)
            last[0], last[1] = current, ours
        if ours is None:
            return fn(*args)
        token = set_(ours)
        try:
            return fn(*args)
        finally:
            reset(token)

    return run


def _warn(err: str, flag: int) -> None:
    """NumPy's ``call`` handler: the warning NumPy would give (``divide by zero encountered``), at the
    user's statement that the generated line running came from; in the user's own code (a callback
    the program runs), at that line."""
    frame = sys._getframe(1)
    while frame is not None:
        statements = frame.f_globals.get(STATEMENTS)
        if statements is not None:
            source = _statement(frame.f_code.co_filename, frame.f_lineno, statements)
            if source is not None:
                text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
                message = f"{err} encountered in `{text}` ({frame.f_code.co_filename}:{frame.f_lineno})"
                warnings.warn_explicit(message, RuntimeWarning, source.filename, source.lineno,
                                       registry=frame.f_globals.setdefault("__warningregistry__", {}))
                return
        elif is_user_code(frame):
            warnings.warn_explicit(f"{err} encountered", RuntimeWarning, frame.f_code.co_filename, frame.f_lineno,
                                   registry=frame.f_globals.setdefault("__warningregistry__", {}))
            return
        frame = frame.f_back
    warnings.warn(f"{err} encountered", RuntimeWarning, stacklevel=2)


def _statement(filename: str, lineno: int, statements: dict[str, SourceInfo]) -> SourceInfo | None:
    """The user's statement of the generated line: that of the nearest ``# f.py:12  text`` comment above."""
    lines = linecache.getlines(filename)
    for line in reversed(lines[:lineno]):
        found = statements.get(line.strip())
        if found is not None:
            return found
    return None
