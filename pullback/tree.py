"""Nested tuples (NamedTuples too), lists and dicts of arrays, and None (no leaves): flatten to leaves and
rebuild."""

from __future__ import annotations

from typing import Any

LEAF = None  # the treedef of a single leaf


def flatten(obj: Any) -> tuple[list[Any], Any]:
    leaves: list[Any] = []

    def walk(o):
        if o is None:  # no leaves, as in JAX
            return (type(None), ())
        if isinstance(o, tuple | list):
            return (type(o), tuple(walk(x) for x in o))
        if isinstance(o, dict):
            keys = tuple(o)
            return (dict, keys, tuple(walk(o[k]) for k in keys))
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
        if hasattr(t[0], "_fields"):  # a NamedTuple takes its fields as arguments
            return t[0](*(build(s) for s in t[1]))
        return t[0](build(s) for s in t[1])

    return build(treedef)
