"""Readable, unique, safe identifiers from name hints.

Hints come from user code (argument names, assignment targets, closed-over
variables), so they are sanitised: ASCII letters, digits and underscores only,
bounded length, never a keyword or a name the generated code itself uses.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata

from pullback.ir.core import Var

MAX_LEN = 32
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]+")

# Names the generated module binds or calls: a user's variable must never shadow them.
RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) | {
    "np", "numpy", "scipy", "sp", "lapack", "blas", "special", "linalg", "cupy", "cp",
}


def sanitize(hint: str, fallback: str = "v") -> str:
    """A valid Python identifier resembling ``hint`` (remembered: a long program repeats a few hints)."""
    found = _SANITIZED.get((hint, fallback))
    if found is None:
        if len(_SANITIZED) >= 4096:
            _SANITIZED.clear()
        found = _SANITIZED[hint, fallback] = _sanitize(hint, fallback)
    return found


_SANITIZED: dict[tuple[str, str], str] = {}


def _sanitize(hint: str, fallback: str) -> str:
    ascii_hint = unicodedata.normalize("NFKD", hint).encode("ascii", "ignore").decode()
    s = _NOT_IDENT.sub("_", ascii_hint).strip("_")[:MAX_LEN].rstrip("_")
    if not s:
        s = fallback
    if s[0].isdigit():
        s = f"{fallback}_{s}"[:MAX_LEN]
    if s in RESERVED or s.startswith("__"):
        s = s + "_"
    return s


class Namer:
    """Assigns each object a unique sanitised name: ``x``, ``x_1``, ``x_2`` ..."""

    def __init__(self, reserved: frozenset[str] = RESERVED):
        self._taken: set[str] = set(reserved)
        self._names: dict[int, str] = {}
        self._next: dict[str, int] = {}  # base -> the first suffix not yet known to be taken
        self.probes = 0  # names tried, for tests that check naming stays linear

    def fresh(self, hint: str, fallback: str = "t") -> str:
        """``base`` if free, else ``base_i`` for the least free ``i``. Names are never released, so
        the suffixes below ``_next[base]`` stay taken: probing resumes there, linear in all."""
        base = _SANITIZED.get((hint, fallback)) or sanitize(hint, fallback)
        name, i = base, self._next.get(base, 1)
        self.probes += 1
        while name in self._taken:
            name = f"{base}_{i}"
            i += 1
            self.probes += 1
        self._next[base] = i
        self._taken.add(name)
        return name

    def name(self, obj, hint: str, fallback: str = "t") -> str:
        key = id(obj)
        if key not in self._names:
            self._names[key] = self.fresh(hint, fallback)
        return self._names[key]

    def unused(self, obj, hint: str, fallback: str = "t") -> str:
        """``_x`` for a value nothing reads (one result of several, or kept as the program has it): the
        underscore tells readers and linters so. ``sanitize`` never starts a name with one: no clash."""
        name = "_" + self.fresh(hint, fallback).rstrip("_")  # ``_abs``, not ``_abs_``: ends as linters expect
        while name in self._taken:
            name = "_" + self.fresh(hint, fallback).rstrip("_")
        self._taken.add(name)
        self._names[id(obj)] = name
        return name

    def alias(self, obj, other) -> None:
        """Give ``obj`` the name ``other`` already has (it takes over a dead value's buffer)."""
        self._names[id(obj)] = self._names[id(other)]

    def rebind(self, obj, name: str | None) -> str | None:
        """Give ``obj`` the name ``name`` (None: no name); return the name it had."""
        old = self._names.pop(id(obj), None)
        if name is not None:
            self._names[id(obj)] = name
        return old

    def release(self, name: str) -> None:
        """``name`` may be given again: a loop's index, dead once its loop ends, so that the next loop
        counts with ``t`` too."""
        self._taken.discard(name)

    def __contains__(self, obj) -> bool:
        return id(obj) in self._names

    def __getitem__(self, obj) -> str:
        return self._names[id(obj)]

    def operands(self, atoms) -> list[str]:
        """The names of ``atoms``' vars, and "" for a literal (printed from its value): one call per equation."""
        names = self._names
        return [names[id(a)] if type(a) is Var else "" for a in atoms]
