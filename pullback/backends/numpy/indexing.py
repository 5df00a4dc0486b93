"""How the indexing primitives print: NumPy's own indexing (``x[idx, 1:3, None]``,
``out[key] = v``, ``np.add.at(out, key, v)``) and ordering functions."""

from __future__ import annotations

import libcst as cst

from pullback.backends import syntax as s
from pullback.backends.numpy.backend import IN_PLACE, emits
from pullback.backends.syntax import Expr
from pullback.ir.core import Literal
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


def in_place(eqn, ins: list[Expr], where: str = "") -> list[cst.BaseStatement]:
    """The update written into the dead operand ``x`` itself (memory planning); ``where``: the user's line."""
    if eqn.prim is ix.dynamic_update_slice_p:
        return [*_checks(eqn, ins[2:], _at(where)), _store(s.subscript(ins[0], _window(eqn, ins[2:])), ins[1], False)]
    return [_update(eqn, ins[0], ins)]


# --- windows at traced starts ---------------------------------------------------------------------


def _window(eqn, starts: list[Expr]) -> list:
    """The key ``[:, s:s + b]`` of a window; a literal start prints its slice (``[:, 3:5]``)."""
    shape, p = eqn.inputs[0].shape, eqn.params
    out: list = []
    for a, n in enumerate(shape):
        if a not in p["axes"]:
            out.append(s.slice_(None, None, None))
            continue
        k = p["axes"].index(a)
        start, size, atom = starts[k], p["sizes"][k], eqn.inputs[len(eqn.inputs) - len(starts) + k]
        if isinstance(atom, Literal):
            out.append(slice_expr(n, atom.value, atom.value + size, 1))
        else:
            out.append(cst.Slice(lower=start, upper=s.binop(start, "+", s.number(size))))
    while len(out) > 1 and isinstance(out[-1], cst.Slice) and out[-1].lower is None and out[-1].upper is None:
        out.pop()
    return out


def _checks(eqn, starts: list[Expr], where: str) -> list[cst.If]:
    """``if not 0 <= s <= n - b: raise IndexError(...)`` for each traced start (``check``): NumPy
    would return a shorter slice, which the program's shapes cannot follow."""
    if not eqn.params["check"]:
        return []
    out = []
    shape, p = eqn.inputs[0].shape, eqn.params
    for k, (a, size) in enumerate(zip(p["axes"], p["sizes"])):
        if isinstance(eqn.inputs[len(eqn.inputs) - len(starts) + k], Literal):
            continue
        last = shape[a] - size
        inside = cst.Comparison(s.number(0), [cst.ComparisonTarget(cst.LessThanEqual(), starts[k]),
                                              cst.ComparisonTarget(cst.LessThanEqual(), s.number(last))])
        message = (f"a slice of {size} at a traced start does not fit axis {a} of length {shape[a]}: the start is "
                   f"{{}}, not in 0..{last}{where}")
        text = s.method(cst.SimpleString(repr(message)), "format", starts[k])
        out.append(cst.If(test=cst.UnaryOperation(cst.Not(), inside), body=cst.IndentedBlock(
            [s.statement(cst.Raise(exc=s.call("IndexError", text)))])))
    return out


def _at(where: str) -> str:
    return f" (at {where})" if where else ""


@emits(ix.dynamic_slice_p)
def _dynamic_slice(ctx, eqn, ins, outs):
    window = s.subscript(ins[0], _window(eqn, ins[1:]))
    checks = _checks(eqn, ins[1:], _at(ctx.where))
    return [*checks, s.assign(outs, window)] if checks else window


@emits(ix.dynamic_update_slice_p)
def _dynamic_update_slice(ctx, eqn, ins, outs):
    checks = _checks(eqn, ins[2:], _at(ctx.where))
    return [*checks, s.assign(outs, s.method(ins[0], "copy")),
            _store(s.subscript(outs[0], _window(eqn, ins[2:])), ins[1], False)]


UPDATES = (ix.scatter_p, ix.scatter_add_p, ix.dynamic_update_slice_p)
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
