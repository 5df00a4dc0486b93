"""The Dask backend: the same programs printed as ``dask.array`` graphs, computed once per call.

A Dask program is printed for the chunks of its arguments (they are part of the compiled signature).
Printing follows the chunks exactly: each equation's statements are run, as they print, on
placeholder arrays of the operands' chunks (``da.empty``: a graph, never computed), so that every
value's chunks are Dask's own, and an operation Dask cannot build on those chunks fails here, at print
time, naming the primitive, the user's line and the chunking that works, before any data is read.

- Elementwise work, broadcasting and products print as ``dask.array`` calls (blockwise tasks);
  reductions and contractions over a chunked axis are Dask's tree reductions.
- Linear algebra prints ``dask.array.linalg``: TSQR ``qr`` and ``svd``, blocked ``cholesky``,
  ``solve_triangular`` (on square blocks, the right-hand side's rows chunked as the matrix's
  columns); on a single chunk each is one task calling LAPACK. ``potri`` is LAPACK's blocked algorithm
  over the factor's blocks (``blocked_potri``, printed into the module: ``HELPERS``). Triangular
  products, ``syrk`` and ``ger`` are blocked products.
- Any other primitive whose operands are each one chunk, or smaller than one of Dask's chunks
  (a d x d Gram matrix, a reduced result, a batch of small matrices), runs as one task: the NumPy
  backend's statements, in a nested function called through ``dask.delayed``. On larger chunked
  operands it is refused, naming the primitive.
- The program is functional (no update in place, no ``out=``, no overwrite flags) and ends in one
  ``dask.compute`` of all its results together, so the data is read once per call; the results are
  NumPy arrays.
- Constants (arrays the function reads from its scope) are Dask arrays persisted once per
  ``distributed`` client (``wrap``): each call's graph names them, never carries them.

Loops and branches print as a Dask user writes them (``codegen`` prints them; this module's hooks
say how): a ``scan`` is a Python ``for`` building the graph, its stacked results lists of Dask arrays
(``stack`` after the loop where the whole is read); a ``while`` on Dask values holds its carries and
computes its test at every step (``Dask.while_carries``, ``Dask.while_test``); a carry whose chunks a step
changes is rechunked to its first value's (``Dask.carried``); a ``cond`` on a Dask
value selects with ``da.where`` or computes its predicate once (``Dask.branching``). Each sub-program
prints on placeholders of what its inputs stand for (``_enter``). Checkpoints and custom rules print
in place.
"""

from __future__ import annotations

import textwrap
import weakref
from collections.abc import Sequence
from typing import Any

import libcst as cst
import numpy as np

from pullback.backends import render
from pullback.backends import syntax as s
from pullback.backends.numpy import backend as npb
from pullback.backends.numpy.factor_solves import at_factor
from pullback.backends.stacked import stack_p
from pullback.ir.core import Literal, Var, sub_programs
from pullback.ir.types import StackType
from pullback.primitives import control as ctrl
from pullback.primitives import custom
from pullback.primitives import structural as st
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la
from pullback.primitives.linalg import rank_update as rk

IMPORTS = {"np": "numpy", "da": "dask.array", "dask": "dask", "scipy": "scipy"}
IN_PLACE: dict = {}  # functional: nothing is updated in place
FUNCTIONAL = True  # codegen plans no buffer reuse (no ``overwrite_a``, no ``out=``)
FAST_PATH = False  # NumPy arguments are chunked on each call (``chunked``) before the signature is read
OPTIONAL_RESULTS = {**npb.OPTIONAL_RESULTS, la.potrf_p: frozenset({1})}  # cholesky's info: Dask raises instead


class ChunkingError(ValueError):
    """An operation that Dask cannot build on its operands' chunks, found when the program prints."""


def is_dask(a) -> bool:
    """A Dask array, recognised without importing Dask."""
    return type(a).__module__.startswith("dask.array") and hasattr(a, "chunks") and hasattr(a, "dask")


# --- arguments ------------------------------------------------------------------------------------

def chunked(a, chunks: Any = "auto"):
    """A NumPy array as a Dask array, other leaves as they are. ``chunks`` as ``da.from_array`` takes them;
    a tuple's leading entries apply to each array's leading axes (``(rows, cols)`` chunks a matrix and
    its vectors alike), missing ones are whole axes."""
    if not isinstance(a, np.ndarray):
        return a
    import dask.array as da

    if type(chunks) is tuple:
        chunks = (chunks + (-1,) * a.ndim)[:a.ndim]
    return da.from_array(a, chunks=chunks, name=False)


def chunks_of(a) -> tuple | None:
    return tuple(map(tuple, a.chunks)) if is_dask(a) else None


class Dask:
    """The backend for one signature: this module's printing rules and the chunks of the program's
    inputs (the arguments' leaves, then any tangents, which take their primals' chunks)."""

    def __init__(self, input_chunks: Sequence[tuple | None]):
        self.input_chunks = tuple(input_chunks)

    def __getattr__(self, name: str):
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(name) from None

    def configure(self, ctx: Context, program) -> None:
        import dask.array as da

        ctx.use("da")
        ctx.use("dask")
        self.ctx = ctx
        chunks = list(self.input_chunks)
        for v in program.inputs:
            c = chunks[len(ctx.values) % len(chunks)] if chunks else None
            ctx.values[id(v)] = _placeholder(v.type, c if c is not None and len(c) == v.type.ndim else None)
        for v, value in zip(program.constvars, program.constvals):
            ctx.values[id(v)] = (da.empty(np.shape(value), dtype=v.type.dtype, chunks=constant_chunks(value))
                                 if np.ndim(value) else np.zeros((), v.type.dtype))

    def enter(self, eqn) -> None:
        _enter(self.ctx, eqn)

    def leave(self, eqn) -> None:
        _leave(self.ctx, eqn)

    def while_carries(self, names: list, values) -> list:
        """``x, k = dask.persist(x, k)`` before a while loop's test: the carries that are Dask arrays, held
        computed (on the workers, with a client), so that each step's test computes that step alone."""
        held = [n for n, a in zip(names, values) if is_dask(_value(self.ctx, a))]
        if not held:
            return []
        if len(held) == 1:
            return [s.assign(held, s.method(held[0], "persist"))]
        return [s.assign(held, s.call("dask.persist", *held))]

    def carried(self, v, a, value):
        """``v = new.rechunk(4)``: a loop's carry takes its first value's chunks at every step, where a step
        changes them (a product with a matrix chunked otherwise, a reduction to one chunk), so that the
        body, printed for those chunks (and checked on them), holds at every step, each step's residuals
        and results are chunked alike, and so are the backward loop's accumulators (``_rechunked``)."""
        if not _rechunked(self.ctx, v, a):
            return value
        return s.method(value, "rechunk", _chunks_expr(_value(self.ctx, v).chunks))

    def while_test(self, pred, e):
        """``while pred.compute():``: the predicate of a Dask value is computed at every step, a round trip
        to the scheduler (each step's carries are already held: ``while_carries``)."""
        return s.method(e, "compute") if is_dask(_value(self.ctx, pred)) else e

    def branching(self, eqn, index) -> tuple[list, Any]:
        """How a ``cond`` on a Dask value prints: (statements before the ``if``, None) or ([], a function
        printing the selection of the branches' results, each branch printed one after another).

        A predicate known on the client (a NumPy value) chooses as NumPy's ``if`` does. On a Dask value,
        branches that are elementwise work, broadcasts and reductions are all put in the graph and their
        results chosen with ``da.where`` (``select``): no round trip, no second pass over the data the
        predicate reads, at the cost of the branch not taken, which is elementwise work on values the
        graph holds anyway. Other branches (a factorization, a loop) are too costly to run both: the
        predicate is computed first, once (``pred = pred.compute()``, a round trip; what it shares with
        the results is computed again by the final ``dask.compute``), and the ``if`` takes one branch;
        the backward pass's ``if`` reads the computed predicate. (In a loop's step: once per step.)"""
        ctx, pred = self.ctx, eqn.inputs[0]
        if not is_dask(_value(ctx, pred)):
            return [], None
        branches = eqn.params["branches"]
        if all(e.prim in _SELECTABLE for br in branches for e in br.eqns):
            return [], lambda names, values: _select(ctx, eqn, index, names, values)
        ctx.values[id(_resolved(ctx, pred))] = np.zeros((), pred.type.dtype)  # a NumPy value from here on
        return [s.assign([index], s.method(index, "compute"))], None

    def wrap(self, fn):
        run = wrap(fn)
        self.persisted = getattr(run, "persisted", None)  # client -> the constants held on its workers
        return run

    def __reduce__(self):
        return Dask, (self.input_chunks,)


def for_leaves(leaves: Sequence[Any]) -> Dask:
    return Dask([chunks_of(a) for a in leaves])


def _placeholder(t, chunks):
    """A Dask array of type ``t`` and these chunks whose graph is never computed; a 0-d NumPy value for scalars."""
    import dask.array as da

    if chunks is None:
        return np.zeros(t.shape, t.dtype) if t.ndim == 0 else da.empty(t.shape, dtype=t.dtype, chunks=-1)
    return da.empty(t.shape, dtype=t.dtype, chunks=chunks)


def constant_chunks(value) -> tuple:
    from dask.array.core import normalize_chunks

    return normalize_chunks("auto", np.shape(value), dtype=np.asarray(value).dtype)


def constant(value):
    """A closed-over array as a Dask array (persisted per client at the first call: ``wrap``)."""
    import dask.array as da

    if not isinstance(value, np.ndarray | np.generic):  # an object used by reference (a draw's generator)
        return value
    value = np.asarray(value)
    return da.from_array(value, chunks=constant_chunks(value)) if value.ndim else value


def wrap(fn):
    """The compiled function with its constants persisted once per ``distributed`` client (on the
    workers: each call's graph refers to them by key) or, with no client, held computed in memory."""
    defaults = dict(fn.__kwdefaults__ or {})
    lazy = {k: v for k, v in defaults.items() if is_dask(v)}
    if not lazy:
        return fn
    import dask

    held: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    local: dict[str, Any] = {}

    def run(*args):
        client = _client()
        kept = held.get(client) if client is not None else local or None
        if kept is None:
            kept = dict(zip(lazy, dask.persist(*lazy.values())))
            if client is not None:
                held[client] = kept
            else:
                local.update(kept)
        return fn(*args, **kept)

    run.__wrapped__ = fn  # type: ignore[attr-defined]
    run.persisted = held  # type: ignore[attr-defined]
    return run


def _client():
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:
        return None


# --- printing -------------------------------------------------------------------------------------

class Context(npb.Context):
    """NumPy's context, with each value's placeholder (its chunks), filled as equations print, and the
    values that inlined bodies' inputs and the results of their equations stand for."""

    def __init__(self, fresh=None):
        super().__init__(fresh)
        self.values: dict[int, Any] = {}
        self.alias: dict[int, Any] = {}
        self.derived: dict[int, tuple] = {}  # id -> (how, atom): placeholder how(placeholder of atom)


_INLINED = frozenset({ctrl.checkpoint_p, custom.custom_jvp_call_p, custom.custom_vjp_call_p})  # printed in place


def _enter(ctx: Context, eqn) -> None:
    """Note, as an equation holding sub-programs prints, what their inputs and its results stand for, so
    that each equation in them prints on placeholders of its operands' chunks: a body's input is its
    operand (a loop's carry its initial value, a step's ``x`` the first slice of ``xs``), a loop's final
    carry its body's last, a stacked result the body's value stacked, a branch's result the first
    branch's. (Set as each prints: two loops may share one body.)"""
    p = eqn.params
    if eqn.prim in _INLINED:
        _stands_for(ctx, p["body"].inputs, eqn.inputs)
        _stands_for(ctx, eqn.outputs, p["body"].outputs)
    elif eqn.prim is ctrl.scan_p:
        operands = eqn.inputs[1:] if p["length"] is None else eqn.inputs  # (the first: the number of steps)
        nc, nk, body = p["num_consts"], p["num_carry"], p["body"]
        _stands_for(ctx, body.inputs[:nc + nk], operands[:nc + nk])
        for v, a in zip(body.inputs[nc + nk:], operands[nc + nk:]):
            ctx.derived[id(v)] = (_first, a)
        _stands_for(ctx, eqn.outputs[:nk], body.outputs[:nk])
        for v, y in zip(eqn.outputs[nk:], body.outputs[nk:]):
            ctx.derived[id(v)] = (_stacked(v.type), y)
    elif eqn.prim is ctrl.while_p:
        cond, body, ncc, nbc = p["cond"], p["body"], p["num_cond_consts"], p["num_body_consts"]
        carry = eqn.inputs[ncc + nbc:]
        _stands_for(ctx, cond.inputs, [*eqn.inputs[:ncc], *carry])
        _stands_for(ctx, body.inputs, eqn.inputs[ncc:])
        nk = len(carry)
        _stands_for(ctx, eqn.outputs[:nk], body.outputs[:nk])
        for v, y in zip(eqn.outputs[nk:], body.outputs[nk:]):
            ctx.derived[id(v)] = (_stacked(v.type), y)
    elif eqn.prim is ctrl.cond_p:
        for br in p["branches"]:
            _stands_for(ctx, br.inputs, eqn.inputs[1:])
        _stands_for(ctx, eqn.outputs, p["branches"][0].outputs)
    for body in sub_programs(eqn):
        for v in body.inputs:
            ctx.values.pop(id(v), None)  # a slice made when another loop over this body printed


def _leave(ctx: Context, eqn) -> None:
    """The results' placeholders, fixed while the sub-programs' inputs stand for this equation's operands;
    a loop's carries that its steps rechunk (``Dask.carried``) keep their first chunks."""
    for v in eqn.outputs:
        value = _value(ctx, v)
        if value is not None:
            ctx.values[id(v)] = value
    if eqn.prim in (ctrl.scan_p, ctrl.while_p):
        body = eqn.params["body"]
        nk = eqn.params["num_carry"] if eqn.prim is ctrl.scan_p else len(eqn.outputs) - eqn.params["num_ys"]
        first = eqn.params["num_consts"] if eqn.prim is ctrl.scan_p else eqn.params["num_body_consts"]
        for v, c, a in zip(eqn.outputs[:nk], body.inputs[first:first + nk], body.outputs[:nk]):
            if _rechunked(ctx, c, a):
                ctx.values[id(v)] = _value(ctx, c)


def _chunks_expr(chunks) -> cst.BaseExpression:
    """Chunks as ``rechunk`` takes them: a block size per axis where the blocks are even (``4``,
    ``(4, 3)``), else every block's size."""
    if all(len(set(c[:-1])) <= 1 and c[-1] <= c[0] for c in chunks if c):
        sizes = [c[0] if c else 0 for c in chunks]
        return s.number(sizes[0]) if len(sizes) == 1 else s.ints(sizes)
    return s.tuple_([s.ints(c) for c in chunks])


def _rechunked(ctx: Context, carry, new) -> bool:
    """Whether a loop's step changes a carry's chunks: ``new`` (its value after a step) and ``carry`` (the
    body's input, standing for its first value) Dask arrays chunked differently."""
    before, after = _value(ctx, carry), _value(ctx, new)
    return is_dask(before) and is_dask(after) and before.chunks != after.chunks


def _stands_for(ctx: Context, vs, atoms) -> None:
    for v, a in zip(vs, atoms):
        ctx.alias[id(v)] = a


def _first(stack):
    """A step's slice of a stack (of a stack of no steps, a value of a slice's shape: no step runs)."""
    if len(stack):
        return stack[0]
    if is_dask(stack):
        import dask.array as da

        return da.empty(stack.shape[1:], dtype=stack.dtype, chunks=-1)
    return np.zeros(np.shape(stack)[1:], np.asarray(stack).dtype)


def _stacked(t):
    """The placeholder of a loop's stacked results from a step's: the step's stacked as many times as the
    loop has steps (the array its list is stacked into after the loop), or a list of the step's (a stack
    of a number of steps known when the loop runs, a while loop's records: read only a step at a time)."""
    if isinstance(t, StackType):
        return lambda y: [y]

    def stacked(y):
        import dask.array as da

        if not is_dask(y):
            return np.zeros(t.shape, t.dtype)
        return da.stack([y] * t.shape[0]) if t.shape[0] else da.empty(t.shape, dtype=t.dtype, chunks=-1)

    return stacked


def stack(steps: cst.BaseExpression, t) -> cst.BaseExpression:
    """``ys = da.stack(ys_list)``: a loop's stacked results, kept as a list of each step's arrays (functional:
    no array preallocated and written step by step), stacked after the loop; of no steps, an empty array."""
    if not t.shape[0]:
        return s.call("da.zeros", s.ints(t.shape), dtype=s.dtype(t.dtype))
    return s.call("da.stack", steps)


def _select(ctx: Context, eqn, index, names: list, values: list[list]) -> list:
    """``y = da.where(pred, y_then, y_else)`` (``da.where(index <= 0, y0, da.where(index == 1, y1, y2))``
    for an integer index: ``cond`` clamps it) for each result; records the results' placeholders."""
    import dask.array as da

    branches, boolean = eqn.params["branches"], eqn.inputs[0].dtype == bool
    p_index = _value(ctx, eqn.inputs[0])
    stmts = []
    for k, name in enumerate(names):
        options = [vs[k] for vs in values]
        placeholders = [_value(ctx, br.outputs[k]) for br in branches]
        if boolean:
            chosen, placeholder = s.call("da.where", index, options[1], options[0]), da.where(
                p_index, placeholders[1], placeholders[0])
        else:
            chosen, placeholder = options[-1], placeholders[-1]
            for j in range(len(options) - 2, -1, -1):
                test = s.binop(index, "<=" if j == 0 else "==", s.number(j))
                chosen = s.call("da.where", test, options[j], chosen)
                placeholder = da.where(p_index <= j if j == 0 else p_index == j, placeholders[j], placeholder)
        stmts.append(s.assign([name], chosen))
        ctx.values[id(eqn.outputs[k])] = placeholder
    return stmts


def _resolved(ctx: Context, a):
    """The atom whose placeholder ``a`` takes (through the aliases of sub-programs)."""
    while isinstance(a, Var) and id(a) not in ctx.values and id(a) in ctx.alias:
        a = ctx.alias[id(a)]
    return a


def _value(ctx: Context, a):
    """The placeholder of ``a`` (through the aliases of sub-programs' inputs and results); a literal's
    value; None if unknown."""
    while isinstance(a, Var) and id(a) not in ctx.values:
        if id(a) in ctx.derived:  # a step's slice of a stack, a loop's stacked results: made once, when read
            how, of = ctx.derived[id(a)]
            value = _value(ctx, of)
            if value is None:
                return None
            ctx.values[id(a)] = how(value)
        elif id(a) in ctx.alias:
            a = ctx.alias[id(a)]
        else:
            return None
    if isinstance(a, Literal):
        return np.asarray(a.value, a.dtype)
    return ctx.values.get(id(a))


def returned(ctx: Context, ret: cst.BaseExpression) -> cst.BaseExpression:
    """``dask.compute(value, (a_bar, b_bar))``: every result in one graph, computed together."""
    if isinstance(ret, cst.Tuple):
        return s.call("dask.compute", *(e.value for e in ret.elements))
    return s.subscript(s.call("dask.compute", ret), [s.number(0)])


def empty(t):
    raise AssertionError("the Dask backend preallocates nothing: a loop's stacked results are lists (``stack``)")


def zeros(t):
    """A step's zeros, the entries of a list of stacked results past the steps a loop runs (``stack``)."""
    return s.call("da.zeros", s.ints(t.shape), dtype=s.dtype(t.dtype))


def in_place(eqn, ins, k, where=""):
    raise AssertionError("the Dask backend updates nothing in place")


_DA_NAMES: frozenset[str] | None = None


def _da_names() -> frozenset[str]:
    """The ``np.`` names that print as ``da.``: dask.array's functions, not NumPy's dtypes."""
    global _DA_NAMES
    if _DA_NAMES is None:
        import dask.array as da

        _DA_NAMES = frozenset(n for n in dir(da) if not n.startswith("_") and hasattr(np, n)
                              and not (isinstance(getattr(np, n), type) and issubclass(getattr(np, n), np.generic))
                              and n not in ("linalg", "random", "dtype"))
    return _DA_NAMES


class _ToDask(cst.CSTTransformer):
    """``np.exp`` -> ``da.exp`` (dtypes, ``np.linalg.LinAlgError`` stay NumPy's)."""

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        if (isinstance(updated.value, cst.Name) and updated.value.value == "np"
                and updated.attr.value in _da_names()):
            return updated.with_changes(value=cst.Name("da"))
        return updated


def to_dask(node):
    t = _ToDask()
    return [n.visit(t) for n in node] if isinstance(node, list) else node.visit(t)


def _statements(emitted, outs) -> list:
    return emitted if isinstance(emitted, list) else [s.assign(outs, emitted)]


def _describe(chunks) -> str:
    return "(" + ", ".join("(" + ", ".join(map(str, c[:4])) + (", ..." if len(c) > 4 else "") + ")"
                           for c in chunks) + ")"


def _operand_chunks(ctx: Context, eqn) -> list:
    """Each operand's chunks (None for scalars and literals)."""
    return [chunks_of(_value(ctx, a)) if isinstance(a, Var) else None for a in eqn.inputs]


def _gatherable(ctx: Context, eqn) -> bool:
    """Whether the operands can be gathered into one task: each one chunk, or smaller than one chunk of
    Dask's configured size (``array.chunk-size``; pads and concatenations split small arrays too)."""
    import dask
    from dask.utils import parse_bytes

    limit = parse_bytes(dask.config.get("array.chunk-size"))
    for a in eqn.inputs:
        v = _value(ctx, a) if isinstance(a, Var) else None
        if not _single(chunks_of(v)) and v.nbytes > limit:
            return False
    return True


def _single(chunks) -> bool:
    return chunks is None or all(len(c) <= 1 for c in chunks)


def _run(ctx: Context, eqn, ins, outs, stmts: list) -> None:
    """Run ``stmts`` on the operands' placeholders; record the results' (their chunks)."""
    import dask
    import dask.array as da
    import scipy.linalg
    import scipy.special

    ns: dict[str, Any] = {"np": np, "da": da, "dask": dask, "scipy": scipy}
    for a, e in zip(eqn.inputs, ins):
        if isinstance(a, Var):
            value = _value(ctx, a)
            if value is None:
                raise AssertionError(f"{eqn.prim.name}: an operand the Dask backend has no placeholder for")
            ns[e.value] = value
    code = textwrap.dedent(render.body(stmts))
    try:
        exec(compile(code, "<dask placeholder>", "exec"), ns)
    except Exception as e:  # Dask's own checks raise ValueError, NotImplementedError, TypeError, AssertionError ...
        where = f" (at {ctx.where})" if ctx.where else ""
        chunks = ", ".join(_describe(c) for c in _operand_chunks(ctx, eqn) if c is not None)
        raise ChunkingError(f"{eqn.prim.name}{where}: Dask cannot build it on operands chunked {chunks}: {e}") from e
    for v, o in zip(eqn.outputs, outs):
        if o.value in ns:
            ctx.values[id(v)] = ns[o.value]


def _emitter(printer):
    """An emitter that prints with ``printer`` and records the results' placeholders. Where Dask's
    own call cannot take operands that are one chunk each (a batch of matrices, a gather Dask does
    not index), the NumPy statements run as one task instead."""

    def emit(ctx, eqn, ins, outs):
        try:
            stmts = _statements(printer(ctx, eqn, ins, outs), outs)
            _run(ctx, eqn, ins, outs, stmts)
        except ChunkingError:
            if printer is _one_task or not _gatherable(ctx, eqn):
                raise
            stmts = _statements(_one_task(ctx, eqn, ins, outs), outs)
            _run(ctx, eqn, ins, outs, stmts)
        return stmts

    return emit


def _renamed(emit):
    return lambda ctx, eqn, ins, outs: to_dask(emit(ctx, eqn, ins, outs))


class _Emitters(dict):
    """Every primitive: its Dask printer if it has one, else one task on single-chunk operands."""

    def __missing__(self, prim):
        return _emitter(_one_task)


EMITTERS: dict = _Emitters()

# What Dask's NumPy-like API prints as NumPy's does (``np.`` -> ``da.``): elementwise, reductions,
# contractions, broadcasts, slices, reshapes, concatenations, triangles, cumulative sums, FFTs.
from pullback.primitives import contractions as con  # noqa: E402
from pullback.primitives import cumulative as cum  # noqa: E402
from pullback.primitives import elementwise as ew  # noqa: E402
from pullback.primitives import fft as fft_  # noqa: E402
from pullback.primitives import indexing as ix  # noqa: E402
from pullback.primitives import reductions as red  # noqa: E402

_AS_NUMPY = [p for p in vars(ew).values() if isinstance(p, type(ew.exp_p)) and p in npb.EMITTERS]
_AS_NUMPY += [red.reduce_sum_p, red.reduce_max_p, red.reduce_min_p, cum.reduce_prod_p, red.reduce_and_p,
              red.reduce_or_p, cum.cumsum_p, cum.cumprod_p, con.dot_general_p, st.broadcast_in_dim_p, st.reshape_p,
              st.slice_p, st.concatenate_p, st.tril_p, st.triu_p, st.convert_element_type_p, st.iota_p,
              st.linspace_p, fft_.fft_p, ix.gather_p]
for _p in _AS_NUMPY:
    EMITTERS[_p] = _emitter(_renamed(npb.EMITTERS[_p]))
EMITTERS[st.broadcast_in_dim_p] = _emitter(_renamed(npb.broadcast_array))  # (a 0-d fill: a Dask array too)
EMITTERS[stack_p] = _emitter(_renamed(npb.stacked_arrays))  # ``da.stack`` of 0-d arrays too (``da.array`` computes)

# What a branch on a Dask value may hold to print as ``da.where`` of both branches (see ``Dask.branching``):
# blockwise work and the reductions of its transposes (a broadcast's cotangent is summed), never a
# factorization or a loop.
_SELECTABLE = frozenset({*(p for p in vars(ew).values() if isinstance(p, type(ew.exp_p))),
                         st.broadcast_in_dim_p, st.reshape_p, st.convert_element_type_p,
                         red.reduce_sum_p, red.reduce_max_p, red.reduce_min_p})


def emits(*prims):
    def register(fn):
        for p in prims:
            EMITTERS[p] = _emitter(fn)
        return fn

    return register


def matrices(fn):
    """Dask's linear algebra takes matrices: a batch of them runs as one task (``_one_task``)."""

    def emit(ctx, eqn, ins, outs):
        if any(isinstance(a, Var) and a.type.ndim > 2 for a in eqn.inputs):
            return _one_task(ctx, eqn, ins, outs)
        return fn(ctx, eqn, ins, outs)

    emit.__doc__ = fn.__doc__
    return emit


def _one_task(ctx, eqn, ins, outs):
    """The NumPy backend's statements for ``eqn`` in a nested function, run as one task (``dask.delayed``,
    which gathers each operand's chunks) on operands that are one chunk each or smaller than one chunk
    of Dask's configured size; the results are single-chunk arrays."""
    if not _gatherable(ctx, eqn):
        where = f" (at {ctx.where})" if ctx.where else ""
        shown = ", ".join(_describe(c) for c in _operand_chunks(ctx, eqn) if c is not None)
        raise ChunkingError(
            f"{eqn.prim.name}{where} has no chunked form in the Dask backend; its operands are chunked {shown}. "
            "It runs as one task on operands that are one chunk each, or smaller than Dask's array.chunk-size: "
            "rechunk them (x.rechunk(-1)) if they fit in a worker's memory, or reduce them first")
    names = [e.value for a, e in zip(eqn.inputs, ins) if isinstance(a, Var)]
    params = list(dict.fromkeys(names))
    reusable, ctx.reusable = ctx.reusable, frozenset()  # never overwrite a chunk Dask holds
    try:
        body = _statements(npb.EMITTERS[eqn.prim](ctx, eqn, ins, outs), outs)
    finally:
        ctx.reusable = reusable
    kernel = s.name(ctx.fresh(f"{eqn.prim.name}_task"))
    unused = ctx.unused & npb.OPTIONAL_RESULTS.get(eqn.prim, frozenset())
    results = [o for k, o in enumerate(outs) if k not in unused]
    ret = results[0] if len(results) == 1 else s.tuple_(results, parens=False)
    fn = cst.FunctionDef(name=kernel, params=cst.Parameters([cst.Param(s.name(n)) for n in params]),
                         body=cst.IndentedBlock([*body, s.statement(cst.Return(ret))]))
    delayed = s.call(s.call("dask.delayed", kernel, **({"nout": s.number(len(results))} if len(results) > 1 else {})),
                     *(s.name(n) for n in params))
    stmts: list = [fn, s.assign(results, delayed)]
    for k, o in enumerate(outs):
        if k in unused:
            continue
        t = eqn.outputs[k].type
        stmts.append(s.assign([o], s.call("da.from_delayed", o, s.ints(t.shape), dtype=s.dtype(t.dtype))))
    return stmts



@emits(st.eye_p)
def _eye(ctx, eqn, ins, outs):
    """``da.eye(n, k=k, dtype=...)``; a rectangular one sliced from the square (Dask 2026.8 builds a graph
    with a missing block for ``da.eye(n, M=m)``, m > n)."""
    (n, m), k = eqn.params["shape"], eqn.params["k"]
    eye = s.call("da.eye", s.number(max(n, m)), **({"k": s.number(k)} if k else {}), dtype=s.dtype(eqn.params["dtype"]))
    if m == n:
        return eye
    return s.subscript(eye, [s.slice_(None, n, None), s.slice_(None, m, None)])


@emits(st.add_transpose_p)
def _add_transpose(ctx, eqn, ins, outs):
    return s.binop(ins[0], "+", s.attribute(ins[0], "T"))


@emits(ew.nan_to_num_p)
def _nan_to_num(ctx, eqn, ins, outs):
    """NumPy's nan_to_num in each block (``da.nan_to_num`` takes no replacement values)."""
    p = eqn.params
    kw = {k: s.number(p[k]) for k in ("nan", "posinf", "neginf") if p[k] is not None and (k != "nan" or p[k] != 0)}
    return s.call("da.map_blocks", s.dotted("np.nan_to_num"), ins[0], **kw)


@emits(st.transpose_p)
def _transpose(ctx, eqn, ins, outs):
    perm = eqn.params["permutation"]
    if perm == (1, 0):
        return s.attribute(ins[0], "T")
    return s.call("da.transpose", ins[0], s.ints(perm))


@emits(st.diagonal_p)
def _diagonal(ctx, eqn, ins, outs):
    offset = eqn.params["offset"]
    kw = {"offset": s.number(offset)} if offset else {}
    if eqn.inputs[0].type.ndim > 2:
        kw |= {"axis1": s.number(-2), "axis2": s.number(-1)}
    return s.call("da.diagonal", ins[0], **kw)


@emits(st.add_diagonal_p)
def _add_diagonal(ctx, eqn, ins, outs):
    """``x + da.diag(v)``; a scalar ``v`` times an identity in x's blocks."""
    (x, v), (xt, vt) = ins, eqn.inputs
    if vt.type.ndim:
        return s.binop(x, "+", s.call("da.diag", v))
    n = xt.type.shape[0]
    block = _value(ctx, xt).chunks[0][0] if n else 1
    eye = s.call("da.eye", s.number(n), chunks=s.number(block), dtype=s.dtype(xt.type.dtype))
    return s.binop(x, "+", s.binop(v, "*", eye))


@emits(st.diag_embed_p)
def _diag_embed(ctx, eqn, ins, outs):
    (m, n), k = eqn.params["shape"], eqn.params["offset"]
    (operand,) = eqn.inputs
    if operand.type.ndim == 1 and m == n == operand.shape[-1] + abs(k):
        return s.call("da.diag", ins[0], *([s.number(k)] if k else []))
    return _one_task(ctx, eqn, ins, outs)


@emits(st.pad_p)
def _pad(ctx, eqn, ins, outs):
    """Zeros around the operand, where the slice it transposes read (strides of 1 or -1, the operand then
    reversed): the operand between ``da.zeros`` blocks, axis by axis (``da.concatenate``). Not ``da.pad``,
    whose zeros take the operand's chunk size: a 3-element slice's cotangent padded to 10^8 entries would
    be 3 x 10^7 tasks; these zeros are chunked by Dask's ``array.chunk-size``."""
    p, out = eqn.params, eqn.outputs[0]
    if any(step not in (1, -1) for step in p["strides"]):
        return _one_task(ctx, eqn, ins, outs)
    x, shape, dt = ins[0], list(eqn.inputs[0].type.shape), s.dtype(out.type.dtype)
    if -1 in p["strides"]:  # a reversed slice's cotangent: reversed, then padded as the slice's range
        x = s.subscript(x, [s.slice_(None, None, -1 if step < 0 else None) for step in p["strides"]])
    for axis, (start, limit, step, n) in enumerate(zip(p["start_indices"], p["limit_indices"], p["strides"],
                                                       out.shape)):
        r = range(start, limit, step)
        lo, hi = (min(r[0], r[-1]), max(r[0], r[-1]) + 1) if len(r) else (0, 0)
        if lo == 0 and hi == n:
            continue
        parts = []
        for width, part in ((lo, "before"), (None, "x"), (n - hi, "after")):
            if part == "x":
                parts.append(x)
            elif width:
                parts.append(s.call("da.zeros", s.ints([*shape[:axis], width, *shape[axis + 1:]]), dtype=dt))
        x, shape[axis] = s.call("da.concatenate", cst.List([cst.Element(e) for e in parts]),
                                **({"axis": s.number(axis)} if axis else {})), n
    return x


def _op(a: cst.BaseExpression, trans: int, complex_: bool) -> cst.BaseExpression:
    if trans == 0:
        return a
    return s.attribute(s.method(a, "conj") if trans == 2 and complex_ else a, "T")


def _triangle(ctx, a, t, lower: bool, unit: bool) -> cst.BaseExpression:
    """The ``lower``/upper triangle of ``a`` (its unit diagonal, if ``unit``)."""
    if not unit:
        return s.call("da.tril" if lower else "da.triu", a)
    m, n = t.type.shape[-2:]
    block = _value(ctx, t).chunks[0][0] if m else 1
    eye = s.call("da.eye", s.number(max(m, n)), chunks=s.number(block), dtype=s.dtype(t.type.dtype))
    if m != n:  # sliced from the square (see ``_eye``)
        eye = s.subscript(eye, [s.slice_(None, m, None), s.slice_(None, n, None)])
    return s.binop(s.call("da.tril" if lower else "da.triu", a, s.number(-1 if lower else 1)), "+", eye)


def _square_blocks(ctx, eqn, v, what: str) -> None:
    c = chunks_of(_value(ctx, v))
    if c is not None and len(c[0]) > 1 and not (c[0] == c[1] and len(set(c[0][:-1])) <= 1):
        where = f" (at {ctx.where})" if ctx.where else ""
        raise ChunkingError(f"{eqn.prim.name}{where}: {what} of shape {v.type.shape} is chunked {_describe(c)}; "
                            f"the blocked algorithm needs square blocks of one size: rechunk it to (b, b) "
                            f"(x.rechunk({c[0][0]}) here), or to one chunk (x.rechunk(-1))")


@emits(la.potrf_p)
@matrices
def _potrf(ctx, eqn, ins, outs):
    """``da.linalg.cholesky``: one LAPACK call on one chunk; blocked (square blocks of one size) on several.
    Dask raises ``LinAlgError`` for a matrix that is not positive definite; ``info`` is not computed."""
    if 1 not in ctx.unused:
        return _one_task(ctx, eqn, ins, outs)
    c = chunks_of(_value(ctx, eqn.inputs[0]))
    if c is not None and len(c[0]) > 1 and len(set(c[0] + c[1])) != 1:
        where = f" (at {ctx.where})" if ctx.where else ""
        raise ChunkingError(f"potrf (cholesky){where}: a matrix of shape {eqn.inputs[0].type.shape} chunked "
                            f"{_describe(c)}; Dask's blocked Cholesky needs square blocks of one size, b dividing n: "
                            "rechunk it to (b, b), or to one chunk (x.rechunk(-1))")
    return [s.assign([outs[0]], s.call("da.linalg.cholesky", ins[0], lower=s.number(True)))]


@emits(la.trsm_p)
@matrices
def _trsm(ctx, eqn, ins, outs):
    """``da.linalg.solve_triangular`` (on square blocks of the matrix, the right-hand side's rows chunked as
    its columns; a single-chunk matrix solves a row-chunked right-hand side block by block). A right-side
    solve X op(A) = B is the left one op(A)^T X^T = B^T; ``alpha`` scales B. Dask's solve does not check
    for a zero on the diagonal."""
    p = eqn.params
    (a, b), at = ins, eqn.inputs[0]
    complex_ = at.type.dtype.kind == "c"
    trans = int(p["trans"])
    tri = _triangle(ctx, a, at, p["lower"], p["unit_diagonal"]) if p["unit_diagonal"] else a
    if p["left"]:  # op(A) X = B
        lhs, rhs, lower = _op(tri, trans, complex_), b, p["lower"] != bool(trans)
    else:  # X op(A) = B  <=>  op(A)^T X^T = B^T, op(A)^T being A^T, A or conj(A)
        lhs = s.attribute(tri, "T") if trans == 0 else s.method(tri, "conj") if trans == 2 and complex_ else tri
        rhs, lower = s.attribute(b, "T"), p["lower"] == bool(trans)
    alpha = float(p.get("alpha", 1.0))
    if alpha != 1.0:
        rhs = s.binop(s.number(alpha), "*", rhs)
    _square_blocks(ctx, eqn, at, "the triangular matrix")
    ca, cb = chunks_of(_value(ctx, at)), chunks_of(_value(ctx, eqn.inputs[1]))
    side = 0 if p["left"] else -1  # the right-hand side's axis that meets the matrix
    if not _single(ca) and cb is not None and cb[side] != ca[0]:
        where = f" (at {ctx.where})" if ctx.where else ""
        want = (ca[0][0], -1) if p["left"] else (-1, ca[0][0])
        raise ChunkingError(f"trsm (solve_triangular){where}: the right-hand side of shape {eqn.inputs[1].type.shape} "
                            f"is chunked {_describe(cb)}, the matrix in {ca[0][0]} x {ca[0][0]} blocks; the blocked "
                            f"solve needs the right-hand side's {'rows' if p['left'] else 'columns'} chunked as the "
                            f"matrix's: rechunk it (b.rechunk({want}))")
    x = s.call("da.linalg.solve_triangular", lhs, rhs, lower=s.number(lower))
    return x if p["left"] else s.attribute(x, "T")


@emits(la.trmm_p)
@matrices
def _trmm(ctx, eqn, ins, outs):
    """alpha op(T) B or alpha B op(T): the triangle (``da.tril``/``da.triu``) times B, a blocked product."""
    p = eqn.params
    (a, b), (at, _) = ins, eqn.inputs
    t = _op(_triangle(ctx, a, at, p["lower"], p["unit_diagonal"]), int(p["trans"]), at.type.dtype.kind == "c")
    product = s.binop(t, "@", b) if p["left"] else s.binop(b, "@", t)
    alpha = float(p.get("alpha", 1.0))
    return product if alpha == 1.0 else s.binop(s.number(alpha), "*", product)


def _potri(ctx, eqn, ins, outs):
    """(L L^H)^{-1} from L in square blocks: ``blocked_potri`` (``HELPERS``), LAPACK's potri by blocks, which
    never forms L^{-1}'s zero blocks nor the lower triangle's products (about 2/3 n^3 flops, as LAPACK's);
    on one chunk (or a batch), LAPACK's potri as one task. The result takes L's chunks (set here: the
    helper's graph, of order (n/b)^3 tasks, is not built on placeholders when the program prints)."""
    (lt,), (out,) = eqn.inputs, eqn.outputs
    c = chunks_of(_value(ctx, lt))
    if _single(c) or lt.type.ndim > 2:
        return _emitter(_one_task)(ctx, eqn, ins, outs)
    _square_blocks(ctx, eqn, lt, "the Cholesky factor")
    ctx.helpers.add("blocked_potri")
    ctx.values[id(out)] = _placeholder(out.type, c)
    return [s.assign(outs, s.call("blocked_potri", ins[0]))]


EMITTERS[la.potri_p] = _potri
EMITTERS[fa.po_inv_p] = lambda ctx, eqn, ins, outs: at_factor(ctx, eqn, ins, outs, EMITTERS)  # potri of the factor

# Functions printed into the module where a primitive calls them (``codegen`` prints them before the
# program, as the Numba loops' helpers): textbook blocked algorithms over a Dask array's blocks.
HELPERS = {
    "blocked_potri": '''
def blocked_potri(l):
    """(L L^H)^{-1} from the lower Cholesky factor L in square blocks, as LAPACK's potri by blocks: the
    blocks of X = L^{-1} on and below the diagonal, column by column (L X = I: a diagonal block is a
    triangular solve in an identity, a block below it one in the sum of products of the blocks above),
    then the blocks of X^H X on and above the diagonal, each mirrored below. X's zero blocks are never
    formed: nb(nb + 1)(2 nb + 1)/6 block products, (2/3 + 3/(2 nb)) n^3 flops."""
    nb = len(l.chunks[0])
    a = [[l.blocks[i, j] for j in range(i + 1)] for i in range(nb)]
    x = [[None] * (i + 1) for i in range(nb)]
    for j in range(nb):
        eye = da.eye(l.chunks[0][j], dtype=l.dtype)
        x[j][j] = da.linalg.solve_triangular(a[j][j], eye, lower=True)
        for i in range(j + 1, nb):
            above = sum((a[i][k] @ x[k][j] for k in range(j + 1, i)), a[i][j] @ x[j][j])
            x[i][j] = -da.linalg.solve_triangular(a[i][i], above, lower=True)
    h = [[x[i][j].conj().T if l.dtype.kind == "c" else x[i][j].T for j in range(i + 1)] for i in range(nb)]
    b = [[None] * nb for _ in range(nb)]
    for i in range(nb):
        for j in range(i, nb):
            b[i][j] = sum((h[k][i] @ x[k][j] for k in range(j + 1, nb)), h[j][i] @ x[j][j])
            if j > i:
                b[j][i] = b[i][j].conj().T if l.dtype.kind == "c" else b[i][j].T
    return da.block(b)
''',
}


@emits(la.geqrf_p)
@matrices
def _geqrf(ctx, eqn, ins, outs):
    """``da.linalg.qr``: TSQR for a tall matrix in row chunks (one column chunk, each row chunk at least as
    tall as the matrix is wide), one LAPACK call on one chunk. R's signs are TSQR's (a valid QR)."""
    _tsqr_chunks(ctx, eqn.inputs[0], wide=False)
    return [s.assign(outs, s.call("da.linalg.qr", ins[0]))]


def _tsqr_chunks(ctx, at, wide: bool) -> None:
    """Dask's TSQR takes a tall matrix in row chunks, each at least as tall as the matrix is wide, and one
    column chunk (``wide``: the LQ's transpose, a wide matrix in column chunks); else a clear error."""
    m, n = at.type.shape[-2:]
    c = chunks_of(_value(ctx, at))
    long, short, k, other = (1, 0, m, n) if wide else (0, 1, n, m)
    if c is None or len(c[long]) <= 1 or not (len(c[short]) > 1 or min(c[long]) < k or other < k):
        return
    where = f" (at {ctx.where})" if ctx.where else ""
    head = f"a matrix of shape {at.type.shape} chunked {_describe(c)}; "
    if wide:
        raise ChunkingError(f"gelqf (lq){where}: {head}its LQ is Dask's TSQR of the transpose, which needs a wide "
                            f"matrix in column chunks of at least {m} columns and one row chunk: rechunk it to "
                            f"({m}, {max(m, c[1][0])}), or to one chunk (x.rechunk(-1))")
    raise ChunkingError(f"geqrf (qr){where}: {head}Dask's TSQR needs a tall matrix in row chunks of at least {n} "
                        f"rows and one column chunk: rechunk it to ({max(n, c[0][0])}, {n}), or to one chunk "
                        "(x.rechunk(-1))")


@emits(la.gelqf_p)
@matrices
def _gelqf(ctx, eqn, ins, outs):
    """LQ of A is the transposed QR of A^T (TSQR for a wide matrix in column chunks)."""
    (a,), (l, q) = ins, outs
    _tsqr_chunks(ctx, eqn.inputs[0], wide=True)
    q_t, r_t = s.name(ctx.fresh("q_t")), s.name(ctx.fresh("r_t"))
    return [s.assign([q_t, r_t], s.call("da.linalg.qr", s.attribute(a, "T"))),
            s.assign([l], s.attribute(r_t, "T")), s.assign([q], s.attribute(q_t, "T"))]


@emits(la.syrk_p)
@matrices
def _syrk(ctx, eqn, ins, outs):
    (a,) = ins
    h = s.method(a, "conj") if eqn.inputs[0].type.dtype.kind == "c" else a
    return s.binop(s.attribute(h, "T"), "@", a) if eqn.params["trans"] else s.binop(a, "@", s.attribute(h, "T"))


@emits(rk.ger_p)
@matrices
def _ger(ctx, eqn, ins, outs):
    """A + alpha x y^T, the outer product blockwise."""
    a, x, y = ins
    alpha = float(eqn.params.get("alpha", 1.0))
    outer = s.call("da.outer", x if alpha == 1.0 else s.binop(x, "*", s.number(alpha)), y)
    return s.binop(a, "+", outer)


@emits(la.gesvd_p)
@matrices
def _gesvd(ctx, eqn, ins, outs):
    """``da.linalg.svd`` (TSQR, then LAPACK on the small R) for a tall matrix in row chunks or a wide one in
    column chunks; one LAPACK call on one chunk. The signs are Dask's (u and v flipped together)."""
    (at,) = eqn.inputs
    c = chunks_of(_value(ctx, at))
    if _single(c) or at.type.dtype.kind == "c":
        return _one_task(ctx, eqn, ins, outs)
    m, n = at.type.shape[-2:]
    if not ((len(c[1]) == 1 and min(c[0]) >= n) or (len(c[0]) == 1 and min(c[1]) >= m)):
        where = f" (at {ctx.where})" if ctx.where else ""
        raise ChunkingError(f"gesvd (svd){where}: a matrix of shape {at.type.shape} chunked {_describe(c)}; Dask's "
                            "SVD needs a tall matrix in row chunks (one column chunk, each at least as tall as the "
                            "matrix is wide) or a wide one in column chunks: rechunk it, or to one chunk "
                            "(x.rechunk(-1))")
    return [s.assign(outs, s.call("da.linalg.svd", ins[0]))]


from pullback.primitives import random as rnd  # noqa: E402


def _draw(ctx, eqn, ins, outs):
    """A draw runs on the client as NumPy's does, advancing the caller's generator at each call; its
    NumPy array joins the graph as a constant of that call."""
    stmts = _statements(npb.EMITTERS[eqn.prim](ctx, eqn, ins, outs), outs)
    for v in eqn.outputs:
        ctx.values[id(v)] = np.zeros(v.type.shape, v.type.dtype)
    return stmts


EMITTERS[rnd.draw_p] = _draw
