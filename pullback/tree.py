"""Nested tuples (NamedTuples too), lists and dicts of arrays, None (no leaves), and registered
classes (``register_pytree_node``, ``register_dataclass``): flatten to leaves and rebuild.

A treedef is ``LEAF``, ``(type, children)`` for tuples and lists, ``(dict, keys, children)``, or
``(cls, aux, children)`` for a registered class, whose hashable ``aux`` (a dataclass's meta fields)
is part of the structure and so of every compiled program's cache key. ``flatten`` makes its nodes
``TreeDef`` tuples, and every walk here uses a stack: structures nested hundreds deep work."""

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


class TreeDef(tuple):
    """A node of a treedef: ``(type, children)`` or ``(type, aux, children)``, children last. A
    tuple, read as the plain tuples it replaces are; but its hash is computed once, from its
    children's, and equality walks the two trees with a stack, so that structures nested
    hundreds deep are cache keys and compare without reaching Python's recursion limit."""

    def __new__(cls, parts: Iterable[Any]) -> TreeDef:
        node = super().__new__(cls, parts)
        node._hash = tuple.__hash__(node)  # the children's hashes are already cached
        return node

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        pairs = [(self, other)]
        while pairs:
            a, b = pairs.pop()
            if a is b:
                continue
            if isinstance(a, TreeDef) and isinstance(b, TreeDef) and a._hash != b._hash:
                return False
            if not (isinstance(a, tuple) and isinstance(b, tuple) and a and len(a) == len(b)):
                return False
            if a[:-1] != b[:-1] or len(a[-1]) != len(b[-1]):  # the type, the keys or aux, the number of children
                return False
            pairs += zip(a[-1], b[-1])
        return True

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __reduce__(self):  # the hash is recomputed where unpickled (a type's hash differs between processes)
        return TreeDef, (tuple(self),)


def _fold(root: Any, expand: Callable[[Any], tuple[Any, Iterable[Any]] | None], leaf: Callable[[Any], Any],
          node: Callable[[Any, list[Any]], Any]) -> Any:
    """A tree walked depth first, children left to right, with a stack rather than recursion (a
    structure may nest deeper than Python's recursion limit): ``expand(x)`` is None for a leaf,
    which becomes ``leaf(x)``, else ``(label, children)``; a node becomes ``node(label, results)``."""
    parts = expand(root)
    if parts is None:
        return leaf(root)
    stack = [(parts[0], iter(parts[1]), [])]
    while True:
        label, children, done = stack[-1]
        for child in children:
            parts = expand(child)
            if parts is not None:
                stack.append((parts[0], iter(parts[1]), []))
                break
            done.append(leaf(child))
        else:
            stack.pop()
            value = node(label, done)
            if not stack:
                return value
            stack[-1][2].append(value)


def _parts(o: Any) -> tuple[tuple, Iterable[Any]] | None:
    """A node's treedef head (its type, and keys or aux) and children; None for a leaf."""
    if o is None:  # no leaves, as in JAX
        return (type(None),), ()
    node = NODES.get(type(o))
    if node is not None:
        children, aux = node[0](o)
        try:
            hash(aux)
        except TypeError:
            raise TypeError(f"the static part of a {type(o).__name__} (its meta fields, or the aux its flatten "
                            f"function returns) must be hashable; got {aux!r}") from None
        return (type(o), aux), children
    if isinstance(o, tuple | list):
        return (type(o),), o
    if isinstance(o, dict):
        keys = tuple(o)
        return (dict, keys), [o[k] for k in keys]
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        raise TypeError(f"{type(o).__name__} is a dataclass that pullback does not know how to flatten: register "
                        f"it, e.g. pullback.tree.register_dataclass({type(o).__name__}, data_fields=[...], "
                        "meta_fields=[...]) (arrays in data fields, hashable static values in meta fields)")
    return None


def flatten(obj: Any) -> tuple[list[Any], Any]:
    """The leaves of ``obj``, depth first, and its treedef."""
    leaves: list[Any] = []

    def leaf(o):
        leaves.append(o)
        return LEAF

    treedef = _fold(obj, _parts, leaf, lambda head, children: TreeDef((*head, tuple(children))))
    return leaves, treedef


class _Star:
    def __repr__(self) -> str:
        return "*"


def prefix_leaves(prefix: Any, obj: Any) -> list[Any]:
    """For each leaf of ``obj``, depth first, the leaf of ``prefix`` above it: ``prefix`` is a tree whose
    structure is a prefix of ``obj``'s (JAX's ``in_axes``), each of its leaves (None too) standing for a
    whole subtree of ``obj``. ValueError where the structures differ."""
    out: list[Any] = []
    stack = [(prefix, obj)]
    while stack:
        p, o = stack.pop()
        if p is None or _parts(p) is None:
            out += [p] * len(flatten(o)[0])
            continue
        head, children = _parts(p)
        found = _parts(o)
        children = list(children)
        if found is None or found[0] != head:
            leaves, treedef = flatten(obj)
            shown = unflatten(treedef, [_Star()] * len(leaves))
            raise ValueError(f"{prefix!r} is not a prefix of the structure {shown!r} (its leaves shown as *)")
        stack += reversed(list(zip(children, found[1])))
    return out


def _children(treedef: Any) -> tuple[Any, Iterable[Any]] | None:
    return None if treedef is LEAF else (treedef, treedef[-1])


def unflatten(treedef: Any, leaves: Iterable[Any]) -> Any:
    """The structure ``treedef`` with ``leaves`` in flatten's order."""
    it = iter(leaves)
    return _fold(treedef, _children, lambda _: next(it), _build)


def _build(t: Any, children: list[Any]) -> Any:
    if t[0] is type(None):
        return None
    if t[0] is dict:
        return dict(zip(t[1], children))
    if t[0] in NODES and len(t) == 3:
        return NODES[t[0]][1](t[1], children)
    if hasattr(t[0], "_fields"):  # a NamedTuple takes its fields as arguments
        return t[0](*children)
    return t[0](children)


def graft(treedef: Any, sub: Any) -> Any:
    """``treedef`` with each leaf replaced by the treedef ``sub``."""
    return _fold(treedef, _children, lambda _: sub, lambda t, children: TreeDef((*t[:-1], tuple(children))))


def leaf_paths(treedef: Any) -> list[tuple]:
    """The path to each leaf, in flatten's order: dict keys, and positions in other nodes."""
    def node(t, children):
        keys = t[1] if t[0] is dict else range(len(children))
        return [(k, *path) for k, paths in zip(keys, children) for path in paths]

    return _fold(treedef, _children, lambda _: [()], node)
