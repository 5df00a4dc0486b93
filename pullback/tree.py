"""Nested tuples (NamedTuples too), lists and dicts of arrays, None (no leaves), and registered
classes (``register_pytree_node``, ``register_dataclass``): flatten to leaves and rebuild.

A treedef is ``LEAF``, ``(type, children)`` for tuples and lists, ``(dict, keys, children)``, or
``(cls, aux, children)`` for a registered class, whose hashable ``aux`` (a dataclass's meta fields)
is part of the structure and so of every compiled program's cache key."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

LEAF = None  # the treedef of a single leaf

# registered class -> (flatten: obj -> (children, aux), unflatten: (aux, children) -> obj)
NODES: dict[type, tuple[Callable[[Any], tuple[Iterable[Any], Any]], Callable[[Any, Iterable[Any]], Any]]] = {}


def register_pytree_node(cls: type, flatten_fn: Callable[[Any], tuple[Iterable[Any], Any]],
                         unflatten_fn: Callable[[Any, Iterable[Any]], Any]) -> None:
    """Make ``cls`` a node, as JAX's ``register_pytree_node``: ``flatten_fn(obj)`` returns
    ``(children, aux)`` and ``unflatten_fn(aux, children)`` rebuilds it. ``aux`` is static: it
    must be hashable, as programs are cached on it."""
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node takes a class, got {cls!r}")
    NODES[cls] = (flatten_fn, unflatten_fn)


def register_dataclass(cls: type, data_fields: Sequence[str] | None = None,
                       meta_fields: Sequence[str] | None = None) -> type:
    """Make the dataclass ``cls`` a node, as JAX's ``register_dataclass``: ``data_fields`` hold
    arrays or subtrees (traced, differentiated), ``meta_fields`` hashable static values (part of
    the structure: a change compiles another program). Without field lists, fields whose metadata
    has ``static=True`` are meta fields, the others data fields. Returns ``cls`` (a decorator)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"register_dataclass takes a dataclass, got {cls!r}")
    fields = [f for f in dataclasses.fields(cls) if f.init]
    if data_fields is None and meta_fields is None:
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    elif data_fields is None or meta_fields is None:
        raise TypeError("register_dataclass takes both data_fields and meta_fields, or neither")
    data, meta = tuple(data_fields), tuple(meta_fields)
    names = {f.name for f in fields}
    if set(data) & set(meta) or set(data) | set(meta) != names or len(data) + len(meta) != len(names):
        raise ValueError(f"register_dataclass({cls.__name__}): data_fields {list(data)} and meta_fields {list(meta)} "
                         f"must name each of its init fields {sorted(names)} exactly once")

    def flatten_fn(obj):
        return [getattr(obj, n) for n in data], tuple(getattr(obj, n) for n in meta)

    def unflatten_fn(aux, children):
        return cls(**dict(zip(data, children)), **dict(zip(meta, aux)))

    register_pytree_node(cls, flatten_fn, unflatten_fn)
    return cls


def is_node(obj: Any) -> bool:
    """Whether ``flatten`` sees structure in ``obj`` (not a single leaf)."""
    return obj is None or isinstance(obj, tuple | list | dict) or type(obj) in NODES or dataclasses.is_dataclass(obj)


def flatten(obj: Any) -> tuple[list[Any], Any]:
    leaves: list[Any] = []

    def walk(o):
        if o is None:  # no leaves, as in JAX
            return (type(None), ())
        node = NODES.get(type(o))
        if node is not None:
            children, aux = node[0](o)
            try:
                hash(aux)
            except TypeError:
                raise TypeError(f"the static part of a {type(o).__name__} (its meta fields, or the aux its flatten "
                                f"function returns) must be hashable; got {aux!r}") from None
            return (type(o), aux, tuple(walk(x) for x in children))
        if isinstance(o, tuple | list):
            return (type(o), tuple(walk(x) for x in o))
        if isinstance(o, dict):
            keys = tuple(o)
            return (dict, keys, tuple(walk(o[k]) for k in keys))
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            raise TypeError(f"{type(o).__name__} is a dataclass that pullback does not know how to flatten: register "
                            f"it, e.g. pullback.tree.register_dataclass({type(o).__name__}, data_fields=[...], "
                            "meta_fields=[...]) (arrays in data fields, hashable static values in meta fields)")
        leaves.append(o)
        return LEAF

    return leaves, walk(obj)


def unflatten(treedef: Any, leaves) -> Any:
    it = iter(leaves)

    def build(t):
        if t is LEAF:
            return next(it)
        if t[0] is type(None):
            return None
        if t[0] is dict:
            return {k: build(s) for k, s in zip(t[1], t[2])}
        if t[0] in NODES and len(t) == 3:
            return NODES[t[0]][1](t[1], [build(s) for s in t[2]])
        if hasattr(t[0], "_fields"):  # a NamedTuple takes its fields as arguments
            return t[0](*(build(s) for s in t[1]))
        return t[0](build(s) for s in t[1])

    return build(treedef)
