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


def _update(eqn, x: Expr, ins: list[Expr], ctx=None) -> cst.BaseStatement | list[cst.BaseStatement]:
    """The statement writing ``updates`` into ``x`` at the key. With ``ctx`` (NumPy, not CuPy), a
    sum over repeated rows takes the fastest form for its shape (``_row_sums``)."""
    shape = eqn.inputs[0].shape
    index, unique = eqn.params["index"], eqn.params["unique_indices"]
    if eqn.prim is ix.scatter_add_p and not unique:
        k = key(shape, index, ins[2:], subscript=False)
        add_at = s.statement(s.call("np.add.at", x, k[0] if len(k) == 1 else s.tuple_(k), ins[1]))
        form = _row_sums(eqn) if ctx is not None else None
        return add_at if form is None else _summed(ctx, eqn, form, x, ins, add_at)
    return _store(s.subscript(x, key(shape, index, ins[2:])), ins[1], eqn.prim is ix.scatter_add_p)


# Sums of rows at repeated indices, ``np.add.at(x, rows, u)`` with x of n rows and k columns and u of
# nnz rows: the form chosen by measurement (NumPy 2.4, SciPy 1.17; microseconds, medians of 21 calls
# on the shared 2-core test machine, n = 300 | 10000):
#
#   nnz     k   add.at          bincount per column   COO product
#   100     8   7 | 17          11 | 108              29 | 82        -> add.at up to 200 rows
#   1000    1   10 | 9          3 | 6                 30 | 35        -> bincount for a vector
#   1000    2   24 | 26         5 | 18                29 | 38        -> per column for k <= 4, n <= nnz <= 10^4
#   6000    4   208 | 216       34 | 68               43 | 67
#   6000    16  689 | 745       171 | 724             64 | 328       -> the sparse product otherwise
#   100000  4   15708 | 11783   1106 | 1217           563 | 633
#   100000  32  88824 | 86749   113335 | 101443       11537 | 12555
#
# (the gradient of ``U[rows] * V[cols]`` for 6000 entries of a 300 x 200 matrix, k = 10: 435 us per
# add.at, 63 us per COO product). The COO constructor checks its indices (CSC's does not, and a
# negative index corrupts memory), bincount refuses a negative index, and an index past n makes a
# longer sum: each raises ValueError before anything is written, and then np.add.at runs, wrapping
# negative indices or raising IndexError as NumPy does.
ADD_AT_MAX_ROWS = 200
PER_COLUMN_MAX_COLUMNS = 4
PER_COLUMN_MAX_ROWS = 10_000


def _row_sums(eqn) -> str | None:
    """``"bincount"``, ``"columns"`` or ``"sparse"`` (a COO product) for a real sum of rows at an index array over
    the first axis of a vector or matrix; None where ``np.add.at`` is the form."""
    x, updates, *idx = eqn.inputs
    index = eqn.params["index"]
    if len(idx) != 1 or x.type.ndim not in (1, 2) or x.dtype.kind != "f" or idx[0].dtype.kind not in "iu" \
            or idx[0].type.ndim != 1 or not isinstance(index[0], ix.Operand) \
            or any(not isinstance(e, ix.Slice) or e != ix.Slice(0, n, 1) for e, n in zip(index[1:], x.shape[1:])) \
            or updates.shape != (idx[0].shape[0], *x.shape[1:]):
        return None
    n, nnz = x.shape[0], idx[0].shape[0]
    k = x.shape[1] if x.type.ndim == 2 else 1
    if nnz <= ADD_AT_MAX_ROWS:
        return None
    if x.type.ndim == 1:
        return "bincount"
    if k <= PER_COLUMN_MAX_COLUMNS and n <= nnz <= PER_COLUMN_MAX_ROWS:
        return "columns"
    return "sparse"


def _summed(ctx, eqn, form: str, x: Expr, ins: list[Expr], add_at) -> cst.Try:
    x_var, _, idx_var = eqn.inputs
    n, nnz = x_var.shape[0], idx_var.shape[0]
    rows, u = ins[2], ins[1]

    def bincount(weights):
        return s.call("np.bincount", rows, weights, minlength=s.number(n))

    if form == "bincount":
        body = [s.statement(cst.AugAssign(x, cst.AddAssign(), bincount(u)))]
    elif form == "columns":
        body = [s.statement(cst.AugAssign(s.subscript(x, [s.slice_(None, None, None), s.number(j)]), cst.AddAssign(),
                                          bincount(s.subscript(u, [s.slice_(None, None, None), s.number(j)]))))
                for j in range(x_var.shape[1])]
    else:
        ctx.use("scipy.sparse")
        ones = s.call("np.ones", s.number(nnz), dtype=s.dtype(x_var.dtype))
        at = s.tuple_([rows, s.call("np.arange", s.number(nnz))])
        sums = s.call("scipy.sparse.coo_array", s.tuple_([ones, at]), shape=s.ints((n, nnz)))
        body = [s.statement(cst.AugAssign(x, cst.AddAssign(), s.binop(sums, "@", u)))]
    handler = cst.ExceptHandler(body=cst.IndentedBlock([add_at]), type=s.name("ValueError"))
    return cst.Try(body=cst.IndentedBlock(body), handlers=[handler])


@emits(ix.gather_p)
def _gather(ctx, eqn, ins, outs):
    return s.subscript(ins[0], key(eqn.inputs[0].shape, eqn.params["index"], ins[1:]))


def scatter(ctx, eqn, ins, outs, sums: bool = True):
    """A copy of ``x`` updated at the key; ``sums``: print sums of rows in their fastest NumPy form."""
    x = ins[0] if eqn.inputs[0].type.ndim else s.call("np.array", ins[0])  # a 0-d value may be a NumPy scalar
    return [s.assign(outs, s.method(x, "copy") if eqn.inputs[0].type.ndim else x),
            _update(eqn, outs[0], ins, ctx if sums else None)]


emits(ix.scatter_p, ix.scatter_add_p)(scatter)


def in_place(eqn, ins: list[Expr], where: str = "", ctx=None) -> list[cst.BaseStatement]:
    """The update written into the dead operand ``x`` itself (memory planning); ``where``: the user's
    line; ``ctx``: the NumPy printer's, for the fastest sums of rows (none for CuPy)."""
    if eqn.prim is ix.dynamic_update_slice_p:
        return [*_checks(eqn, ins[2:], _at(where)), _store(s.subscript(ins[0], _window(eqn, ins[2:])), ins[1], False)]
    return [_update(eqn, ins[0], ins, ctx)]


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
                   f"{{}}, not in 0..{last}")
        text = s.message(message, starts[k], suffix=where)
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
