"""How the indexing primitives print: NumPy's own indexing (``x[idx, 1:3, None]``,
``out[key] = v``, ``np.add.at(out, key, v)``) and ordering functions."""

from __future__ import annotations

import libcst as cst

from pullback.backends import syntax as s
from pullback.backends.numpy_backend import IN_PLACE, emits
from pullback.backends.syntax import Expr
from pullback.primitives import indexing as ix


def slice_expr(n: int, start: int, stop: int, step: int) -> cst.Slice:
    """A normalised ``start:stop:step`` of an axis of length ``n`` as short source; an empty
    range prints ``0:0`` (a start of -1 would mean the last entry to NumPy)."""
    if not len(range(start, stop, step)):
        return s.slice_(0, 0, None)
    if step > 0:
        return s.slice_(start or None, None if stop >= n else stop, None if step == 1 else step)
    return s.slice_(None if start == n - 1 else start, None if stop < 0 else stop, step)


def key(shape: tuple[int, ...], index, idx: list[Expr], subscript: bool = True) -> list:
    """The entries of ``x[key]``; for a call argument (``subscript=False``) slices are ``slice(...)``."""
    sizes = iter(shape)
    entries = [(1 if isinstance(e, ix.NewAxis) else next(sizes), e) for e in index]
    while len(entries) > 1 and isinstance(entries[-1][1], ix.Slice) and entries[-1][1] == ix.Slice(
            0, entries[-1][0], 1):
        entries.pop()  # trailing full slices are implied
    out: list = []
    for n, e in entries:
        if isinstance(e, ix.NewAxis):
            out.append(s.name("None"))
        elif isinstance(e, ix.Int):
            out.append(s.number(e.value))
        elif isinstance(e, ix.Operand):
            out.append(idx[e.k])
        else:
            sl = slice_expr(n, e.start, e.stop, e.step)
            if not subscript:
                parts = [sl.lower or s.name("None"), sl.upper or s.name("None")] + ([sl.step] if sl.step else [])
                sl = s.call("slice", *(parts if sl.lower or sl.upper or sl.step else parts[:1]))
            out.append(sl)
    return out or [cst.Ellipsis()]


def _store(target: Expr, value: Expr, add: bool) -> cst.SimpleStatementLine:
    if add:
        return s.statement(cst.AugAssign(target, cst.AddAssign(), value))
    return s.statement(cst.Assign([cst.AssignTarget(target)], value))


def _update(eqn, x: Expr, ins: list[Expr]) -> cst.SimpleStatementLine:
    """The statement writing ``updates`` into ``x`` at the key."""
    shape = eqn.inputs[0].shape
    index, unique = eqn.params["index"], eqn.params["unique_indices"]
    if eqn.prim is ix.scatter_add_p and not unique:
        k = key(shape, index, ins[2:], subscript=False)
        return s.statement(s.call("np.add.at", x, k[0] if len(k) == 1 else s.tuple_(k), ins[1]))
    return _store(s.subscript(x, key(shape, index, ins[2:])), ins[1], eqn.prim is ix.scatter_add_p)


@emits(ix.gather_p)
def _gather(ctx, eqn, ins, outs):
    return s.subscript(ins[0], key(eqn.inputs[0].shape, eqn.params["index"], ins[1:]))


@emits(ix.scatter_p, ix.scatter_add_p)
def _scatter(ctx, eqn, ins, outs):
    x = ins[0] if eqn.inputs[0].type.ndim else s.call("np.array", ins[0])  # a 0-d value may be a NumPy scalar
    return [s.assign(outs, s.method(x, "copy") if eqn.inputs[0].type.ndim else x), _update(eqn, outs[0], ins)]


def in_place(eqn, ins: list[Expr]) -> cst.SimpleStatementLine:
    """The update written into the dead operand ``x`` itself (memory planning)."""
    return _update(eqn, ins[0], ins)


UPDATES = (ix.scatter_p, ix.scatter_add_p)
IN_PLACE.update({p: (None, None) for p in UPDATES})


def _axis_kw(eqn) -> dict[str, Expr]:
    return {"axis": s.number(eqn.params["axis"])} if eqn.inputs[0].type.ndim > 1 else {}


@emits(ix.sort_p)
def _sort(ctx, eqn, ins, outs):
    return s.call("np.sort", ins[0], **_axis_kw(eqn))


@emits(ix.argsort_p)
def _argsort(ctx, eqn, ins, outs):
    kw = _axis_kw(eqn) | ({"kind": cst.SimpleString('"stable"')} if eqn.params["stable"] else {})
    return s.call("np.argsort", ins[0], **kw)


@emits(ix.argmax_p, ix.argmin_p)
def _argextremum(ctx, eqn, ins, outs):
    return s.call(f"np.{eqn.prim.name}", ins[0], **_axis_kw(eqn))
