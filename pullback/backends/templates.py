"""Print the bulk of a program from templates: each kind of equation through libcst once.

An unrolled loop repeats a few kinds of equation thousands of times, differing only in the
names they read and write. An emitter sees an equation's primitive, params, types and literal
operands, the printing context (the user's line for messages, the operands it may overwrite)
and the operands' names; only the names vary between repetitions. So the statements of an
equation are built (libcst nodes, through the emitters) and rendered once per *kind* (the key
below: everything the emitter may read except the names, the context's whole state included),
with placeholder identifiers for the names, and every equation of that kind is printed by
putting its names into that text.

The names are the Namer's (sanitised ASCII identifiers); the placeholders contain a non-ASCII
letter, so they cannot collide with a name, a number or one of our messages. The fresh names an
emitter asks for (``ctx.fresh``) are recorded in order and drawn again, in the same order, for
each repetition, so the namer's state evolves exactly as it would emitting each equation afresh.
An emitter whose fresh-name hints depend on the names themselves cannot be a template: such
kinds are emitted afresh every time. ``tests/api/test_compile_time.py`` checks that printing with
and without templates gives the same text.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

import libcst as cst

from pullback.backends import render
from pullback.backends import syntax as s
from pullback.ir.core import NO_PARAMS, Eqn, Var
from pullback.ir.types import ArrayType

# the context's services, not what an emitter decides by (``objects``: fixed for the function, and
# an object is in the params by identity; ``helpers``: what compiled loops call, printed without templates)
_NOT_STATE = frozenset({"fresh", "modules", "objects", "helpers"})
_MARK = "\u01c2"  # "ǂ", a letter (an identifier character) outside ASCII
_HOLE = re.compile(_MARK + r"(\d+)" + _MARK)


def _hole(k: int) -> str:
    return f"{_MARK}{k}{_MARK}"


_WHERE = f"{_MARK}w{_MARK}"  # the user's line, in a template (filled by name: ``{w}``)


_MISSING = object()


def _typed(t):
    """An array type as the key holds it: (shape, dtype), equal exactly when the types are, and hashed
    without a call of Python (other types, a loop's stacks, as they are)."""
    return (t.shape, t.dtype) if type(t) is ArrayType else t


class Template:
    """A rendered statement list with numbered holes: the operands' and results' names, then the fresh ones."""

    __slots__ = ("format", "fresh", "modules", "empty", "where")

    def __init__(self, text: str, fresh: list[str], modules: set[str]):
        # a ``str.format`` pattern: filling it is one call (the text's own braces doubled)
        parts = _HOLE.split(text)  # text, hole, text, hole, ..., text
        for i in range(0, len(parts), 2):
            parts[i] = parts[i].replace("{", "{{").replace("}", "}}").replace(_WHERE, "{w}")
        for i in range(1, len(parts), 2):
            parts[i] = "{" + str(int(parts[i])) + "}"
        self.format = "".join(parts).format
        self.fresh = fresh
        self.modules = modules
        self.empty = not text
        self.where = _WHERE in text  # it quotes the user's line


class Templates:
    """The templates of one generated function (the context's program-wide choices are fixed).
    ``shared``: a store of templates to read and add to, that functions printed together share (the
    kernels of ``api.eager``), by the names of their contexts' attributes: a template is a function of
    its key alone, except for the names the context gives objects used by reference (``ctx.objects``), so
    a context holding such objects keeps its templates to itself."""

    def __init__(self, ctx, shared: dict | None = None):
        self.ctx = ctx
        self._shared = shared if shared is not None and not getattr(ctx, "objects", None) else None
        self._cache: dict[tuple, Template | None] = {}
        self.built = 0  # kinds emitted through libcst, for tests
        self._attributes: frozenset[str] | None = None  # the context's attributes when ``_state`` was made
        self._keys = vars(ctx).keys()  # (a live view of its attributes' names)
        self._state: Callable = tuple
        self._where_at: int | None = None  # the place of ``where`` in the state

    def key(self, eqn: Eqn, mode) -> tuple:
        """Everything an emitter may read except the names: operands as (first position, type) for
        values (so that ``x * x`` differs from ``x * y``) and as typed values for literals."""
        operands = eqn.inputs
        ins = []
        for k, a in enumerate(operands):
            if type(a) is Var:
                j = k
                for m in range(k):  # (the first position of a value read twice)
                    if operands[m] is a:
                        j = m
                        break
                t = a.type  # (an array type as (shape, dtype): equal exactly when the types are, hashed in C)
                ins.append((j, (t.shape, t.dtype) if type(t) is ArrayType else t))
            else:  # (``_typed``, inline)
                t = a.type
                ins.append((type(a.value), repr(a.value), (t.shape, t.dtype) if type(t) is ArrayType else t))
        outputs = eqn.outputs
        if len(outputs) == 1 and type(outputs[0].type) is ArrayType:
            t = outputs[0].type
            outs = ((t.shape, t.dtype),)
        else:
            outs = tuple([_typed(v.type) for v in outputs])
        if self._keys != self._attributes:  # the context's attributes, all of its state but its services
            attributes = vars(self.ctx)
            self._attributes = frozenset(attributes)
            if self._shared is not None:
                self._cache = self._shared.setdefault(self._attributes, {})
            names = [k for k in attributes if k not in _NOT_STATE]
            self._where_at = names.index("where") if "where" in names else None
            self._state = (lambda c: ()) if not names else (
                (lambda c, get=operator.attrgetter(names[0]): (get(c),)) if len(names) == 1
                else operator.attrgetter(*names))
        state = self._state(self.ctx)  # where, reusable, ... all of it
        at = self._where_at
        if at is not None and state[at]:  # a line, whichever: it is a placeholder in the template
            state = (*state[:at], True, *state[at + 1:])
        params = eqn.params  # (most equations have none: the shared empty params, not hashed by a call of Python)
        return (eqn.prim, None if params is NO_PARAMS else params, tuple(ins), outs, state, mode)

    def get(self, key: tuple, eqn: Eqn, emit: Callable[[list, list], list[cst.BaseStatement]]) -> Template | None:
        """The template of ``key``, built by ``emit(ins, outs)`` on placeholder names; None when the
        emitter's fresh names depend on the names it is given, or the key cannot be a key."""
        try:
            found = self._cache.get(key, _MISSING)  # (one lookup: a key's hash is not kept)
            if found is not _MISSING:
                return found
        except TypeError:  # context state that cannot be compared (unhashable): emit this equation afresh
            return None
        first: dict[int, int] = {}
        ins = [s.name(_hole(first.setdefault(id(a), k))) if isinstance(a, Var) else s.number(a.value)
               for k, a in enumerate(eqn.inputs)]
        n_in = len(eqn.inputs)
        outs = [s.name(_hole(n_in + k)) for k in range(len(eqn.outputs))]
        hints: list[str] = []
        ctx = self.ctx
        real_fresh, before, where = ctx.fresh, set(ctx.modules), getattr(ctx, "where", "")

        def fresh(hint: str) -> str:
            hints.append(hint)
            return _hole(n_in + len(outs) + len(hints) - 1)

        ctx.fresh = fresh
        if where:
            ctx.where = _WHERE
        try:
            stmts = emit(ins, outs)
        finally:
            ctx.fresh = real_fresh
            if where:
                ctx.where = where
        self.built += 1
        template = None
        if not any(_MARK in h for h in hints):
            template = Template(render.body(stmts), hints, ctx.modules - before)
        self._cache[key] = template
        return template

    def fill(self, template: Template, ins: list[str], outs: list[str]) -> str:
        """The template's text with these names: the operands', the results', then fresh ones drawn now."""
        if template.modules:
            self.ctx.modules.update(template.modules)
        if template.where:
            return template.format(*ins, *outs, *[self.ctx.fresh(h) for h in template.fresh], w=self.ctx.where)
        if template.fresh:
            return template.format(*ins, *outs, *[self.ctx.fresh(h) for h in template.fresh])
        return template.format(*ins, *outs)
