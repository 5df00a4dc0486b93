"""What compiled programs are cached by and checked against.

A program traced from a function bakes in what the function read from its scope when it was
traced (a Python scalar becomes a literal, a closed-over array a constant of the program).
``snapshot`` keeps those objects and compares them by identity, so that a cache holding it can
tell when the function now reads something else (a rebound global, a cell reset, new defaults),
and cannot be fooled by a freed object's address being reused. ``Programs`` is such a cache's
validity; ``IdentityCache`` is a map keyed on callables' identities that does not keep them alive.
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from operator import is_
from types import CodeType, FunctionType, MethodType
from typing import Any

_EMPTY = object()  # the contents of an empty closure cell
_DEPTH = 8  # how deep a snapshot follows wrappers (partials of methods of wrapped functions ...)

Check = Callable[[Any], bool]


def snapshot(fn: Callable) -> Check:
    """A test of whether a callable reads the very objects (``is``) that ``fn`` reads now, which
    it keeps alive.

    For a function: its code, defaults and keyword defaults, the contents of its closure cells,
    and the globals its code names (nested code objects' names too: comprehensions, generator
    expressions, lambdas). Through a ``functools.partial``: its function, arguments and keywords;
    through a bound method or an object's ``__call__``: the method's reads and the instance
    attributes its code names; through ``__wrapped__`` (``functools.wraps``, pullback's own
    transforms): the wrapped function's reads (the wrapped function itself is compared through a
    weak reference: it may be the function a cache entry is keyed on). Not what another function
    called by it reads. The test may raise when the callable is not of ``fn``'s shape any more."""
    return _check(fn, _DEPTH)


def _check(fn, depth: int) -> Check:
    if depth == 0:
        return _always
    if type(fn) is FunctionType:
        return _function_check(fn, depth)
    if type(fn) is MethodType:
        func = fn.__func__
        same_func, same_instance = _check(func, depth - 1), _instance_check(fn.__self__, func, depth)
        return lambda m: m.__func__ is func and same_func(func) and same_instance(m.__self__)
    if isinstance(fn, functools.partial):
        func, args, same_keywords = fn.func, fn.args, _dict_check(fn.keywords)
        same_func = _check(func, depth - 1)
        return lambda p: p.func is func and p.args is args and same_keywords(p.keywords) and same_func(func)
    if callable(fn) and not isinstance(fn, type):  # an object with a __call__ method
        call = type(fn).__call__
        if type(call) is not FunctionType:  # a builtin's, a ufunc's
            return lambda obj: type(obj).__call__ is call
        same_call, same_instance = _function_check(call, depth), _instance_check(fn, call, depth)
        return lambda obj: type(obj).__call__ is call and same_call(call) and same_instance(obj)
    return _always


def _function_check(fn: FunctionType, depth: int) -> Check:
    code, defaults, kw = fn.__code__, fn.__defaults__, fn.__kwdefaults__
    names = _named(code)
    values = tuple(map(fn.__globals__.get, names))
    cells = tuple(map(_contents, fn.__closure__ or ()))
    # an empty cell stays empty or is filled: its test cannot raise; a filled one, read faster, raises when emptied
    contents = _contents if any(c is _EMPTY for c in cells) else _cell_contents
    more = [lambda f: all(map(is_, map(contents, f.__closure__), cells))] if cells else []
    if kw:  # a dict, changed in place
        same_kw = _dict_check(kw)
        more.append(lambda f: same_kw(f.__kwdefaults__))
    if "__wrapped__" in fn.__dict__:
        more.append(lambda f: same_wrapped(f.__dict__))
        same_wrapped = _wrapped_check(fn.__dict__, depth)

    def same(f: FunctionType) -> bool:
        if not (f.__code__ is code and f.__defaults__ is defaults and f.__kwdefaults__ is kw
                and all(map(is_, map(f.__globals__.get, names), values))):
            return False
        for test in more:
            if not test(f):
                return False
        return True

    return same


def _instance_check(obj, method, depth: int) -> Check:
    """The attributes of an instance that ``method`` names (``self.lam``), and what it wraps."""
    attributes = getattr(obj, "__dict__", None)
    if type(attributes) is not dict:
        return _always
    names = _named(method.__code__) if type(method) is FunctionType else ()
    values = tuple(map(attributes.get, names))
    if "__wrapped__" not in attributes:
        return lambda o: all(map(is_, map(o.__dict__.get, names), values))
    same_wrapped = _wrapped_check(attributes, depth)
    return lambda o: all(map(is_, map(o.__dict__.get, names), values)) and same_wrapped(o.__dict__)


def _wrapped_check(attributes: dict, depth: int) -> Check:
    """A test of ``__wrapped__`` in a ``__dict__``: the same function, reading the same objects."""
    wrapped = attributes.get("__wrapped__")
    same = _check(wrapped, depth - 1)
    try:
        ref = weakref.ref(wrapped)
    except TypeError:
        return lambda a: a.get("__wrapped__") is wrapped and same(wrapped)
    return lambda a: a.get("__wrapped__") is ref() and same(a["__wrapped__"])


def _dict_check(d: dict) -> Check:
    keys, values = tuple(d), tuple(d.values())
    return lambda now: (len(now) == len(keys) and all(map(is_, now, keys))
                        and all(map(is_, now.values(), values)))


def _always(_) -> bool:
    return True


def _named(code: CodeType) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_names(code)))


def _names(code: CodeType):
    """The global and attribute names ``code`` and the code objects nested in it read."""
    yield from code.co_names
    for const in code.co_consts:
        if type(const) is CodeType:
            yield from _names(const)


_cell_contents = operator.attrgetter("cell_contents")


def _contents(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # not yet bound, or deleted
        return _EMPTY


class Programs:
    """The validity of caches of programs traced from one function: ``check(fn)`` before a lookup
    empties them if ``fn`` now reads other objects than it read at the last trace, ``traced(fn)``
    after a trace records what it reads (after: a trace that rebinds a counter it reads is not
    traced again at every call)."""

    __slots__ = ("caches", "seen", "__weakref__")

    def __init__(self, *caches: dict):
        self.caches = caches
        self.seen: Check | None = None

    def check(self, fn: Callable) -> None:
        if self.seen is None:
            return
        try:
            if self.seen(fn):
                return
        except Exception:  # a test made for another shape of callable: what it came through changed
            pass
        for c in self.caches:
            c.clear()
        self.seen = None

    def traced(self, fn: Callable) -> None:
        self.seen = snapshot(fn)


class IdentityCache:
    """A map keyed on objects' identities (never their ``==``: two callables that compare equal are
    two functions) and a hashable tail. It holds the objects weakly where they allow it, so an entry
    goes when one of them is collected: the entry of a one-off lambda goes with the lambda. Those
    that cannot be weakly referenced are held, and the least recently used entries beyond ``size``
    are dropped, which also bounds entries whose values keep their own key alive."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[tuple, tuple[tuple, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, objects: tuple, tail: Hashable) -> Any:
        key = (*map(id, objects), tail)  # the ids of live objects: the entry holds or watches each
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, objects: tuple, tail: Hashable, value: Any) -> None:
        key = (*map(id, objects), tail)
        drop = functools.partial(self._drop, key)
        self._entries[key] = (tuple(_weak_or_held(o, drop) for o in objects), value)
        self._entries.move_to_end(key)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def _drop(self, key: tuple, ref: weakref.ref) -> None:
        """An object of ``key`` is being collected (before its address can be reused)."""
        entry = self._entries.get(key)
        if entry is not None and any(r is ref for r in entry[0]):
            del self._entries[key]


def _weak_or_held(obj, callback: Callable) -> Any:
    try:
        return weakref.ref(obj, callback)
    except TypeError:  # a builtin, a ufunc: held (they are long-lived anyway)
        return obj
