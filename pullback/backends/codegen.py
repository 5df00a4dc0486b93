"""Print a Program as a Python module through libcst.

One statement per equation, names from the IR's hints (unique, sanitised), and
above the statements of each user line a comment with its ``file:line`` and
source. Constants (arrays the traced function read from its scope, or made
when tracing) are keyword-only parameters, listed in the docstring, never
written into the source: the printed module needs only NumPy/SciPy (or CuPy),
and pullback passes the very arrays on each call (``compiler``), so in-place
changes to them are seen.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from types import ModuleType
from typing import Any

import libcst as cst

from pullback.backends import fusion, layout, lines, memory, merged, numba_chains, numba_loops, printed, render, stacked
from pullback.backends import syntax as s
from pullback.backends.checks import once as checked_once
from pullback.backends.templates import Templates
from pullback.ir import sourcemap
from pullback.ir.core import (
    NO_PARAMS,
    WITH_BODIES,
    Atom,
    Eqn,
    Literal,
    Opaque,
    Primitive,
    Program,
    SourceInfo,
    Var,
    sub_programs,
)
from pullback.ir.names import RESERVED, Namer
from pullback.ir.types import ArrayType, StackType
from pullback.primitives import contractions as con
from pullback.primitives import control as ctrl
from pullback.primitives import custom
from pullback.primitives import elementwise as ew
from pullback.primitives import indexing as ix
from pullback.primitives import reductions as red
from pullback.primitives import structural as st
from pullback.primitives.linalg import factorizations as la
from pullback.tree import LEAF

_prim = attrgetter("prim")

# Outputs of multi-result operations, by position (families with printers of their own add theirs).
OUTPUT_HINTS: dict[Primitive, tuple[str, ...]] = {
    la.potrf_p: ("l", "info"), la.gelqf_p: ("l", "q"), la.geqrf_p: ("q", "r"), la.syevd_p: ("w", "v"),
    la.gesvd_p: ("u", "s", "vh"), la.getrf_p: ("lu", "piv", "perm", "info"),
    la.getc2_p: ("lu", "rperm", "cperm", "sign", "info")}

# Unnamed intermediates are named after the operation that made them (by default, its name).
TEMP_HINTS: dict[Primitive, str] = {
    st.broadcast_in_dim_p: "bcast", st.convert_element_type_p: "cast", con.dot_general_p: "dot",
    red.reduce_sum_p: "total", red.reduce_max_p: "largest", red.reduce_min_p: "smallest", ew.integer_pow_p: "power",
    st.concatenate_p: "concat", st.transpose_p: "transposed", st.reshape_p: "reshaped", st.slice_p: "part",
    ew.select_p: "chosen", st.diag_embed_p: "diag", st.add_diagonal_p: "shifted", st.add_transpose_p: "symmetric",
    ew.rem_p: "remainder", ew.floor_divide_p: "quotient", ew.round_p: "rounded", ew.clip_p: "clipped",
    ew.and_p: "both", ew.or_p: "either", ew.xor_p: "differ", ew.not_p: "inverted",
    ix.gather_p: "picked", ix.scatter_p: "updated", ix.dynamic_slice_p: "window", ix.dynamic_update_slice_p: "updated",
    ix.scatter_add_p: "accumulated", ix.sort_p: "ordered", ix.argsort_p: "order", ix.argmax_p: "imax",
    ix.argmin_p: "imin", st.iota_p: "arange",
}
TEMP_HINTS[stacked.stack_p] = "stacked"  # (made while printing: ``stacked``)


def _temp_name(prim: Primitive) -> str:
    return TEMP_HINTS.get(prim, prim.name)


def _temp_hint(eqn: Eqn, namer: Namer) -> str:
    """The name of an unnamed result: after its operand for a transpose (``B_T``) and for an entry read at
    fixed indices (``u_0`` for ``u[0]``), else after its operation."""
    if eqn.prim is not st.transpose_p and eqn.prim is not ix.gather_p:
        if eqn.prim is st.broadcast_in_dim_p and type(eqn.inputs[0]) is Literal:
            return _fill_name(eqn)
        return TEMP_HINTS.get(eqn.prim, eqn.prim.name)
    a = eqn.inputs[0] if eqn.inputs else None
    if isinstance(a, Var) and a in namer:
        if eqn.prim is st.transpose_p and eqn.outputs[0].type.ndim == 2:
            return namer[a].lstrip("_") + "_T"
        index = eqn.params.get("index") if eqn.prim is ix.gather_p and len(eqn.inputs) == 1 else None
        if index and len(index) <= 2 and all(type(i).__name__ == "Int" for i in index):
            return "_".join([namer[a].lstrip("_"), *(str(i.value) for i in index)])
    return _temp_name(eqn.prim)


def _fill_name(eqn: Eqn) -> str:
    """A fill is named after what it is: ``zeros = np.zeros(...)``, ``ones``, ``full`` (a 0-d one ``zero``)."""
    value, shape = eqn.inputs[0].value, eqn.params["shape"]
    word = ("zeros", "zero") if value == 0 else ("ones", "one") if value == 1 else ("full", "value")
    return word[0] if shape else word[1]


def _lone_fills(prog: Program) -> set[int]:
    """The ids of ``prog``'s fills that one operand of one equation reads, and nothing returns."""
    fills = {id(e.outputs[0]) for e in prog.eqns if e.prim is st.broadcast_in_dim_p and type(e.inputs[0]) is Literal}
    reads = Counter(id(a) for e in prog.eqns for a in e.inputs if id(a) in fills)
    reads.update(id(a) for a in prog.outputs if id(a) in fills)
    return {f for f in fills if reads[f] == 1}


def _fills_apart(prog: Program) -> Program:
    """``prog`` with each loop, and each update in place, that reads a fill other equations read too given
    a fill of its own, made just before it: a person writes ``p = np.zeros(n)`` where the zeros start one
    loop's value (the fill then takes the carry's name, ``_name_initial_carries``) and ``accumulated =
    np.zeros(n)`` before ``np.add.at(accumulated, ...)``, not ``p = bcast`` and ``bcast.copy()`` of zeros
    made for several places. A fill is cheap to make again; one nothing else reads then is left out."""
    fills = {id(e.outputs[0]): e for e in prog.eqns
             if e.prim is st.broadcast_in_dim_p and type(e.inputs[0]) is Literal}
    if not fills:
        return prog
    readers: dict[int, set[int]] = {}  # a fill -> the equations reading it
    apart: dict[int, set[int]] = {}  # a fill -> those to read one of their own: loops, updates of it in place
    stays: set[int] = {id(a) for a in prog.outputs if id(a) in fills}  # fills read where they are
    for i, e in enumerate(prog.eqns):
        own = e.prim is ctrl.scan_p or e.prim is ctrl.while_p
        update = e.prim in memory.UPDATES
        for q, a in enumerate(e.inputs):
            if id(a) in fills:
                readers.setdefault(id(a), set()).add(i)
                if own or update and q == 0:
                    apart.setdefault(id(a), set()).add(i)
                else:
                    stays.add(id(a))
    apart = {f: rs for f, rs in apart.items() if len(readers[f]) + (f in stays) > 1}
    if not apart:
        return prog
    eqns: list[Eqn] = []
    for i, e in enumerate(prog.eqns):
        if e.outputs and id(e.outputs[0]) in apart and id(e.outputs[0]) not in stays:
            continue  # (each reader makes its own)
        own: dict[int, Var] = {}
        update = e.prim in memory.UPDATES
        for q, a in enumerate(e.inputs):
            if id(a) in apart and i in apart[id(a)] and id(a) not in own and (q == 0 or not update):
                fill = fills[id(a)]
                own[id(a)] = Var(a.type, a.hint)
                # one carry's start (``p = np.zeros(n)``) stands under the line that made the zeros (the user's
                # ``h = np.zeros(3)``), else its loop's; zeros shared by several carries (a backward loop's sums)
                # with the statement before: no comment of their own
                where = (fill.source or e.source) if e.inputs.count(a) == 1 or not eqns else eqns[-1].source
                eqns.append(Eqn(fill.prim, fill.inputs, (own[id(a)],), fill.params, where))
        if own:
            ins = tuple(own.get(id(a), a) if type(a) is Var and (q == 0 or not update) else a
                        for q, a in enumerate(e.inputs))
            e = Eqn(e.prim, ins, e.outputs, e.params, e.source)
        eqns.append(e)
    return Program(prog.inputs, tuple(eqns), prog.outputs, prog.constvars, prog.constvals, prog.name)


@dataclass(frozen=True)
class Generated:
    source: str
    function_name: str
    constants: dict[str, Any]  # the keyword-only parameters' values, by name
    # the user's statement above which each ``# file.py:12  text`` comment stands: the source's lines
    # map back to the user's (``warnings``)
    statements: dict[str, SourceInfo] = field(default_factory=dict)


# Deeper output structures are rebuilt in Python (``api.Staged``), as dicts are: Python's parser
# refuses 200 nested brackets, and printing recurses per level.
PRINTED_DEPTH = 32


def printable_tree(treedef) -> bool:
    """Whether the generated function can return this output structure itself: tuples and lists,
    nested at most ``PRINTED_DEPTH`` deep."""
    stack = [(treedef, 0)]
    while stack:
        t, depth = stack.pop()
        if t is LEAF:
            continue
        if t[0] not in (tuple, list) or depth == PRINTED_DEPTH:
            return False
        stack += ((child, depth + 1) for child in t[1])
    return True


def _structure(treedef, leaves) -> s.Expr:
    if treedef is LEAF:
        return next(leaves)
    items = [_structure(t, leaves) for t in treedef[1]]
    if treedef[0] is list:
        return cst.List([cst.Element(e) for e in items])
    return s.tuple_(items)


# Operations whose printed code accepts Python scalars as well as arrays (NumPy functions and
# operators). A Python scalar argument stays a Python scalar through operators (``x < y`` is a
# bool), so a value derived from one may reach an operation printed as a method (``.astype``,
# ``.reshape``), which Python scalars lack.
SCALAR_SAFE: frozenset[Primitive] = frozenset({
    *(getattr(ew, f"{name}_p") for name in (
        "neg", "sign", "exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "logistic",
        "abs", "real", "imag", "conj", "add", "sub", "mul", "div", "pow", "max", "min", "eq", "ne", "lt", "le", "gt",
        "ge", "integer_pow", "select")),
    st.broadcast_in_dim_p,
    ix.dynamic_slice_p, ix.dynamic_update_slice_p,  # scalars only as starts: slice bounds
})


def scalar_inputs(program: Program) -> list[Var]:
    """The 0-d inputs that must be made arrays on entry: those from which a value flows, through
    scalar-safe operations only, into an operation that is not scalar-safe."""
    roots: dict[int, frozenset[int]] = {id(v): frozenset({id(v)}) for v in program.inputs
                                       if not isinstance(v.type, StackType) and v.type.shape == ()}
    if not roots:  # (no 0-d input: nothing to look for)
        return []
    needed: set[int] = set()
    for eqn in program.eqns:
        found = [roots[id(a)] for a in eqn.inputs if isinstance(a, Var) and id(a) in roots]
        if not found:
            continue
        if eqn.prim not in SCALAR_SAFE:
            needed.update(*found)
            continue
        for v in eqn.outputs:
            if v.type.shape == ():
                roots[id(v)] = frozenset().union(*found)
    return [v for v in program.inputs if id(v) in needed]


def _last_uses(program: Program) -> dict[int, list[Var]]:
    """Equation index -> the locals whose last use it is (outputs and inputs are kept)."""
    # (keyed by the values themselves: a Var hashes by identity)
    keep = {a for a in program.outputs if type(a) is Var} | set(program.inputs) | set(program.constvars)
    last: dict[Var, int] = {}  # (in the order of first use: the order of each equation's list)
    unread = memory.UNREAD  # the matrix beside its factors is not read (``memory.reads``)
    for i, eqn in enumerate(program.eqns):
        if eqn.prim in unread:
            skip = unread[eqn.prim]
            for k, a in enumerate(eqn.inputs):
                if type(a) is Var and a not in keep and k not in skip:
                    last[a] = i
        else:
            for a in eqn.inputs:
                if type(a) is Var and a not in keep:
                    last[a] = i
        for v in eqn.outputs:  # defined but never used: dead at once
            if v not in keep and v not in last:
                last[v] = i
    by_eqn: dict[int, list[Var]] = {}
    for v, i in last.items():
        by_eqn.setdefault(i, []).append(v)
    return by_eqn


# A ``del`` frees memory that matters: an array of at least ``DEL_BYTES`` (a 100 x 100 matrix of
# float64 has 80,000), a list of each step's values, and any value once the smaller ones a block leaves
# to the end of the function (or of the step) would hold more than its budget together: ``KEEP_BYTES``, or
# ``KEEP_PER_EQN`` per equation of the block when that is more. The budget is the function's own weight:
# compiled, a printed program holds 460 (chain) to 830 (Kalman filter) bytes per equation for as long as it
# is cached, and its small values kept to the end held 136 to 150 bytes per equation more during a call
# (NumPy 10,000-equation chain: 3.1 MB against 1.5 MB with a del after each; Kalman filter, 300 steps
# unrolled: 4.6 against 1.6 MB), while their dels were 29% of the lines and 16% of compile()'s time. A long
# unrolled program of small arrays so prints no del; one of larger arrays (a 50 x 50 grid's 20 KB) frees
# them once they pass the budget. Scalars and small arrays are left to the end, as a person leaves them.
DEL_BYTES = 1 << 16
KEEP_BYTES = 1 << 20
KEEP_PER_EQN = 256
_OBJECT_BYTES = 100  # an ndarray's own header, about


def _worth_freeing(last: dict[int, list[Var]], prog: Program, top: bool = False) -> dict[int, list[Var]]:
    """The locals of ``last`` (equation index -> locals last used there) that a ``del`` should free; in the
    function's own block (``top``), none where what follows allocates less than ``DEL_BYTES``: returning frees them."""
    after, tail = 0, len(prog.eqns)
    while top and tail and after < DEL_BYTES:  # (a loop may allocate in its steps whatever its results weigh)
        tail -= 1
        eqn = prog.eqns[tail]
        after += DEL_BYTES if eqn.prim in WITH_BODIES else sum(
            v.type.size * v.type.dtype.itemsize for v in eqn.outputs if type(v.type) is ArrayType)
    kept, out = 0, {}
    budget = max(KEEP_BYTES, KEEP_PER_EQN * len(prog.eqns))
    sizes: dict[int, int] = {}  # id of a type -> its bytes (a long program's values share a few type objects)
    for i in sorted(last):
        if i >= tail:  # (in order: the rest are in the tail too)
            break
        chosen = []
        for v in last[i]:
            t = v.type
            size = sizes.get(id(t))
            if size is None:
                if isinstance(t, StackType):
                    chosen.append(v)
                    continue
                size = sizes[id(t)] = math.prod(t.shape) * t.dtype.itemsize
            if size >= DEL_BYTES or kept + size + _OBJECT_BYTES > budget:
                chosen.append(v)
            else:
                kept += size + _OBJECT_BYTES
        if chosen:
            out[i] = chosen
    return out


def generate(program: Program, backend: ModuleType, out_tree=None, dels: bool = True,
             in_place: bool = True, loops: str = "numpy", fresh: bool = True,
             templates: dict | None = None, comments: dict | None = None) -> Generated:
    """The module of ``program``. ``out_tree`` (tuples and lists) shapes the return value;
    ``dels`` adds ``del`` statements for locals after their last use; ``in_place`` lets an
    operation write into a dead input's buffer (see ``memory``); ``loops``, which loops print as
    functions compiled by Numba (``numba_loops``); ``fresh``, outputs that would share memory with an
    input or another output returned as copies (the kernels of ``api.eager``, whose caller writes
    into no result, return views); ``templates``, a store of templates shared with other functions printed
    with the same backend (``Templates``); ``comments``, a store of the user's lines' comments shared likewise
    (the kernels of ``api.eager``: a forward and a backward one per line, and often several lines' worth)."""
    shared_comments = comments
    helper_texts = {**(numba_loops.HELPERS if loops != "numpy" else {}), **getattr(backend, "HELPERS", {})}
    namer = Namer(RESERVED | frozenset(helper_texts))
    fn_name, params, constants, ctx = _signature(program, backend, namer)

    def expr(a: Atom) -> s.Expr:
        return s.number(a.value) if isinstance(a, Literal) else s.name(namer[a])

    body: list[cst.BaseStatement] = []
    if not getattr(backend, "SCALARS_AS_ARRAYS", False):  # Python scalar arguments stay scalars: see SCALAR_SAFE
        for v in scalar_inputs(program):
            body.append(s.assign([s.name(namer[v])], s.call("np.asarray", s.name(namer[v]))))
    last_comment: list[tuple[str, int] | None] = [None]
    escaped: set[int] = set()  # loop carries whose names the code after their loop reads (see _scan)
    seeds: set[int] = set()  # values made only to start a loop's carry, named as the carry (_name_initial_carries)
    listed: set[int] = set()  # loops' stacked results kept as lists of each step's array (see _listed_stacks)
    comments: dict[SourceInfo | None, tuple] = {}  # per user line, once: an unrolled loop repeats its lines
    known = comments if shared_comments is None else shared_comments  # (where the comments are made once)

    templates = Templates(ctx, templates)
    fortran: set[int] = set()  # ids of the locals known to be F-ordered (see ``layout``)
    free: set[int] = set()  # ids of branches' inputs whose operands die with the branch (see ``memory.plan``)
    order_rules = getattr(backend, "FORTRAN", {})
    elementwise_order = layout.elementwise
    optional = getattr(backend, "OPTIONAL_RESULTS", {})

    def templated(eqn: Eqn, k: int | None) -> str | None:
        """The equation's statements as text, from the template of its kind (see ``templates``)."""
        if k is None:
            def emit(ins, outs):
                emitted = backend.EMITTERS[eqn.prim](ctx, eqn, ins, outs)
                return emitted if isinstance(emitted, list) else [s.assign(outs, emitted)]
        else:
            def emit(ins, outs):
                return backend.in_place(eqn, ins, k, ctx.where, ctx)
        template = templates.get(templates.key(eqn, k), eqn, emit)
        if template is None:
            return None
        ins = namer.operands(eqn.inputs)
        outputs = eqn.outputs
        if k is not None:
            outs = [namer[v] for v in outputs]
        elif len(outputs) == 1 and eqn.prim not in OUTPUT_HINTS:
            v, prim = outputs[0], eqn.prim  # (``_temp_hint``'s common case inline: asked of every equation)
            fallback = (TEMP_HINTS.get(prim, prim.name) if prim is not st.transpose_p and prim is not ix.gather_p
                        and prim is not st.broadcast_in_dim_p else _temp_hint(eqn, namer))
            outs = [namer.name(v, v.hint, fallback)]
        else:
            fallback = _temp_hint(eqn, namer)
            hints = OUTPUT_HINTS.get(eqn.prim, (fallback,) * len(outputs))
            outs = [namer.name(v, v.hint, h) for v, h in zip(outputs, hints)]
        return templates.fill(template, ins, outs)

    def block(prog: Program, text: bool = False, plain: bool = False) -> list[cst.BaseStatement | str]:
        """The statements of ``prog``'s equations (its inputs are already named); with ``text``, as
        rendered text, printed from templates where the equation's kind allows; ``plain``, with no
        ``del`` and no update in place (a fused kernel's body)."""
        stmts_out: list[cst.BaseStatement | str] = []
        plain = plain or compiled[0]  # inside a Numba function: no del, no out= (see ``numba_loops``)
        top, prog = prog is program, _fills_apart(printed.prepare(prog))
        last = _last_uses(prog)
        dead = _worth_freeing(last, prog, top) if dels and not plain else {}
        reuse = (memory.plan(prog, free=frozenset(id(v) for v in prog.inputs if id(v) in free),
                             min_size=1 if compiled[0] else memory.MIN_SIZE)
                 if in_place and (not plain or compiled[0]) and not getattr(backend, "FUNCTIONAL", False) else {})
        if compiled[0]:  # elementwise updates only (Numba has no ``np.add.at``), ``out`` passed by position
            reuse = {i: ks for i, ks in reuse.items() if _elementwise_update(prog.eqns[i], backend)}
        if not compiled[0]:  # Numba's lists hold one type: stacks are preallocated there
            listed.update(_listed_stacks(prog, functional=getattr(backend, "FUNCTIONAL", False)))
        factor_notes = merged.notes(prog, lambda a: namer[a] if isinstance(a, Var) and a in namer else "the matrix")
        returned = {id(a) for a in prog.outputs}
        lone: set[int] | None = None  # fills that one update alone reads (_lone_fills), when one is asked
        for i in reuse:  # a result updated in a dead buffer (`x_bar[idx] += ct`) names that buffer from its start
            eqn = prog.eqns[i]  # when returned, or when it has the user's name and the buffer none (`S_vv = B @ C`)
            if eqn.prim in memory.UPDATES and (id(eqn.outputs[0]) in returned or (
                    eqn.outputs[0].hint and not eqn.inputs[0].hint and eqn.inputs[0] not in namer)):
                namer.name(eqn.outputs[0], eqn.outputs[0].hint, "t")
                namer.alias(eqn.inputs[0], eqn.outputs[0])
            elif eqn.prim in memory.UPDATES and eqn.inputs[0] not in namer and id(eqn.inputs[0]) in (
                    lone := _lone_fills(prog) if lone is None else lone):
                # zeros made for this update alone: ``accumulated = np.zeros(...)``, then ``np.add.at(accumulated``
                namer.name(eqn.outputs[0], eqn.outputs[0].hint, _temp_hint(eqn, namer))
                namer.alias(eqn.inputs[0], eqn.outputs[0])
        _name_initial_carries(prog, namer, seeds, top)
        for i, vs in last.items():  # the result of an equation nothing reads: ``_x``
            outs = prog.eqns[i].outputs
            if len(outs) == 1 and outs[0] in vs and outs[0] not in namer and prog.eqns[i].prim not in _NESTED:
                hint = _temp_name(prog.eqns[i].prim)
                namer.unused(outs[0], outs[0].hint or hint, hint)
        source: Any = _MISSING
        for i, eqn in enumerate(prog.eqns):
            if eqn.source is not source:  # (the user's line: its comment and place made once per line)
                source = eqn.source
                said = comments.get(source)
                if said is None:
                    said = known.get(source)
                    if said is None:
                        said = known[source] = (_where(source), _comment(source))
                    comments[source] = said
                where, comment = said
            ctx.where = where  # (a nested block sets it for its own equations)
            ctx.reusable = reuse.get(i, _NO_POSITIONS) if reuse else _NO_POSITIONS
            ctx.fortran = layout.operands(eqn, fortran) if fortran else layout.NONE
            if i not in last:  # (``unused_results``, its common case inline)
                ctx.unused = _NO_POSITIONS
            elif len(eqn.outputs) == 1:  # (values compare by identity)
                ctx.unused = _FIRST if eqn.outputs[0] in last[i] else _NO_POSITIONS
            else:
                ctx.unused = unused_results(eqn, last[i])
            if dels and ctx.unused and ctx.unused & optional.get(eqn.prim, _NO_POSITIONS):  # unassigned: no del
                skipped = {id(eqn.outputs[k]) for k in ctx.unused & optional[eqn.prim]}
                dead[i] = [v for v in dead.get(i, []) if id(v) not in skipped]
            k = _in_place_operand(eqn, ctx.reusable, backend) if ctx.reusable else None
            # (no rule, or an elementwise one with no F-ordered operand: no result of it is F-ordered)
            if k is not None or eqn.prim in order_rules and (
                    ctx.fortran or order_rules[eqn.prim] is not elementwise_order):
                layout.record(eqn, order_rules, ctx.fortran, k, fortran)
            printer = _NESTED.get(eqn.prim)
            # a returned result updates a dead buffer, then takes its own name: `x += y; x_bar = x`
            returned_update = (k is not None and printer is None and id(eqn.outputs[0]) in returned
                               and eqn.prim not in memory.UPDATES)
            if k is not None and printer is None:  # the operand's buffer lives on as the result: no del frees it
                dead[i] = [v for v in dead.get(i, []) if v is not eqn.inputs[k]]
                if not returned_update:
                    namer.alias(eqn.outputs[0], eqn.inputs[k])
            piece = templated(eqn, k) if text and printer is None and not returned_update else None
            if piece is not None:
                if i in factor_notes and piece:
                    piece = render.INDENT + factor_notes[i] + "\n" + piece
                if comment is not None and comment[1] != last_comment[0] and piece:
                    last_comment[0] = comment[1]
                    piece = render.INDENT + comment[0] + "\n" + piece
                stmts_out.append(piece)
                if i in dead and dead[i]:
                    named = {namer[v] for v in eqn.outputs if v in namer}
                    dead[i] = [v for v in dead[i] if namer[v] not in named]
                if i in dead and dead[i]:
                    stmts_out.append(render.INDENT + "del " + ", ".join(namer[v] for v in dead[i]) + "\n")
                continue
            ins = [expr(a) for a in eqn.inputs]
            said_before = last_comment[0]
            if printer is not None:  # an equation holding sub-programs prints them in place
                if comment is not None:  # its line said before its blocks: their statements of it say it not again
                    last_comment[0] = comment[1]
                for body, first, count in _operands_of_bodies(eqn):  # inputs standing for operands: their order
                    fortran.update(id(body.inputs[j - first]) for j in ctx.fortran if first <= j < first + count)
                if eqn.prim is ctrl.cond_p:  # an operand dying here is each branch's to overwrite
                    free.update(id(br.inputs[j - 1]) for br in eqn.params["branches"] for j in ctx.reusable if j)
                enter = getattr(backend, "enter", None)  # Dask: what the sub-programs' values stand for
                if enter is not None:
                    enter(eqn)
                stmts = printer(eqn, ins, nest)
                if enter is not None:
                    backend.leave(eqn)
            elif returned_update:
                out = eqn.outputs[0]
                named = s.assign([s.name(namer.name(out, out.hint, "t"))], ins[k])
                stmts = [*backend.in_place(eqn, ins, k, ctx.where, ctx), named]
                if compiled[0]:
                    stmts = [_positional_out(st) for st in stmts]
            elif k is not None:  # the result takes over the dead operand's buffer, and its name (above)
                stmts = backend.in_place(eqn, ins, k, ctx.where, ctx)
                if compiled[0]:
                    stmts = [_positional_out(st) for st in stmts]
            else:
                fallback = _temp_hint(eqn, namer)
                hints = OUTPUT_HINTS.get(eqn.prim, (fallback,) * len(eqn.outputs))
                outs = [s.name(namer.name(v, v.hint, h)) for v, h in zip(eqn.outputs, hints)]
                emit = (numba_loops.emitter(eqn) if compiled[0] else None) or backend.EMITTERS[eqn.prim]
                emitted = emit(ctx, eqn, ins, outs)
                stmts = emitted if isinstance(emitted, list) else [s.assign(outs, emitted)]
            if i in factor_notes and stmts:
                stmts[0] = stmts[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(factor_notes[i]))])
            if comment is not None and comment[1] != said_before and stmts and not (
                    printer is not None and _says(stmts[0])):  # (a block printed inline said where it starts)
                if printer is None:  # (after a nested block, its last comment stands)
                    last_comment[0] = comment[1]
                stmts[0] = stmts[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment[0])),
                                                                *stmts[0].leading_lines])
            if text:
                stmts_out.append(render.body(stmts))
            else:
                stmts_out.extend(stmts)
            if dead.get(i):
                named = {namer[v] for v in eqn.outputs if v in namer}  # a carry's new value under its name
                dead[i] = [v for v in dead[i] if namer[v] not in named]
            if dead.get(i):
                # (two values recorded in one list, ``sub_steps``, die together: the name once)
                names = [s.name(n) for n in dict.fromkeys(namer[v] for v in dead[i])]
                stmts_out.append(s.statement(cst.Del(s.tuple_(names, parens=False) if len(names) > 1 else names[0])))
        return stmts_out

    kernels: list[cst.FunctionDef | str] = []  # printed before the function (CuPy's fused kernels; Numba's, as text)
    helpers: list[cst.FunctionDef] = []  # printed after it (rare branches): the module opens with the gradient

    compiled = [False]  # printing the body of a function compiled by Numba

    def kernel(body: Program, decorator: cst.BaseExpression | None = None, hint: str = "fused",
               text: Callable[[str], str] | None = None) -> str:
        """Print ``body`` as a module-level function (``@cp.fuse()`` on CuPy, ``decorator`` if given);
        return its name. ``text``: the function's source, given its name (a Numba chain's loop)."""
        name = namer.fresh(hint, hint)
        if text is not None:  # kept as text: parsing a 20,000-line chain into libcst and printing it back took seconds
            at = f"@{cst.Module([]).code_for_node(decorator)}\n" if decorator is not None else ""
            kernels.append(f"\n\n{at}{text(name)}")
            return name
        seen, last_comment[0] = last_comment[0], None  # (a function of its own: its first line says where)
        compiled[0] = decorator is not None
        renamed = _carry_parameters(body, namer, seeds) if decorator is not None else {}
        try:
            stmts = block(body, plain=True)
            results = [expr(a) for a in body.outputs]
            params = [cst.Param(expr(v)) for v in body.inputs]
        finally:
            compiled[0] = False
            for v, old in renamed.values():  # (the caller's names again, outside the function)
                namer.rebind(v, old)
                seeds.discard(id(v))
        last_comment[0] = seen
        ret = results[0] if len(results) == 1 else s.tuple_(results, parens=False)
        kernels.append(cst.FunctionDef(
            name=s.name(name), params=cst.Parameters(params),
            body=cst.IndentedBlock([*stmts, s.statement(cst.Return(ret))]),
            decorators=[cst.Decorator(decorator)] if decorator is not None else [cst.Decorator(s.call(fuse_with))]
            if fuse_with else [],
            leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
        return name

    def function(body: Program, operands, ins: list[s.Expr]) -> str:
        """Print a branch as a module-level function of its operands; return its name."""
        name = namer.fresh(body.name if body.name.isidentifier() else "branch", "branch")
        params, head = [], []
        read = {id(a) for e in body.eqns for a in e.inputs} | {id(a) for a in body.outputs}
        for v, a, e in zip(body.inputs, operands, ins):
            if id(v) not in read:
                continue
            if isinstance(a, Var):  # the parameter takes the operand's name: another scope
                namer.alias(v, a)
                if e.value not in {p.name.value for p in params}:
                    params.append(cst.Param(s.name(e.value)))
            else:
                head.append(s.assign([s.name(namer.name(v, v.hint, "c"))], e))
        seen, last_comment[0] = last_comment[0], None
        stmts = head + block(body)
        last_comment[0] = seen
        results = [expr(a) for a in body.outputs]
        ret = results[0] if len(results) == 1 else s.tuple_(results, parens=False)
        helpers.append(cst.FunctionDef(
            name=s.name(name), params=cst.Parameters(params),
            body=cst.IndentedBlock([*stmts, s.statement(cst.Return(ret))]),
            leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
        return name

    nest = _Nest(namer, expr, block, escaped, backend, listed, kernel, function, seeds)
    fuse_with = getattr(backend, "FUSE", None)  # the kernels' decorator; "" prints them plain
    program, notes = _prepared(program, backend, ctx, loops)
    body.extend(block(program, text=True))
    kernels[:0] = [numba_loops.helper(name, helper_texts) for name in sorted(getattr(ctx, "helpers", ()))]
    if not fresh and out_tree is None and not hasattr(backend, "returned") and program.outputs and all(
            type(a) is Var for a in program.outputs):  # names returned as they are (each of api.eager's kernels)
        body.append(f"{render.INDENT}return {', '.join(namer[a] for a in program.outputs)}\n")
    else:
        body.append(_return(program, [expr(a) for a in program.outputs], out_tree, backend, ctx, fresh))
    if constants:
        body.insert(0, _docstring(program, constants))
    if constants or notes or kernels:
        head: cst.FunctionDef | str = _function(fn_name, params, constants, body, notes)
    else:  # (names only: the ``def`` line as libcst prints it, written directly)
        head = _def_line(fn_name, params)
    code, shortened = _module_text(head, body, kernels, helpers)
    imports, code = _imports(code, ctx, backend)
    statements = {comment[0]: SourceInfo(*comment[1]) for _, comment in comments.values() if comment is not None}
    statements.update({short: statements[full] for short, full in shortened.items() if full in statements})
    return Generated(imports + code, fn_name, constants, statements)


# --- the steps of ``generate`` around the body ------------------------------------------------------


def _signature(program: Program, backend: ModuleType, namer: Namer) -> tuple[str, list[str], dict, Any]:
    """The function's name, its parameters' names, its keyword-only constants (arrays, and objects used by
    reference: a draw's generator) and the backend's printing context, configured for ``program``."""
    fn_name = namer.fresh(program.name, "f")
    params = [namer.name(v, v.hint, "x") for v in program.inputs]
    constants = {namer.name(v, v.hint, "c"): val for v, val in zip(program.constvars, program.constvals)}
    ctx = backend.Context(fresh=lambda hint: namer.fresh(hint, "t"))
    for obj in opaques(program):
        name = namer.fresh(obj.hint, "obj")
        constants[name] = obj.value
        ctx.objects[id(obj.value)] = name
    backend.configure(ctx, program)
    return fn_name, params, constants, ctx


def _prepared(program: Program, backend: ModuleType, ctx, loops: str) -> tuple[Program, list[str]]:
    """``program`` as it prints: elementwise runs fused where the backend fuses (CuPy), loops outlined
    as Numba functions where asked (``numba_loops``), with the notes of those that stay NumPy."""
    program = checked_once(program)  # each error check once, after what it checks (``checks``)
    for step in getattr(backend, "PREPARE", ()):  # the backend's own print-time forms (NumPy's: BLAS's alpha, trsv)
        program = step(program, ctx)
    if getattr(backend, "FUSE", None) is not None:  # the kernels' decorator; "" prints them plain
        program = fusion.fuse(printed.prepare(program))
    notes: list[str] = []
    if loops != "numpy":
        program, notes = numba_loops.outline(printed.prepare(program), loops)
        if numba_loops.available():  # elementwise chains outside the loops (``numba_chains``)
            program, chains = numba_chains.outline(program, loops)
            notes += chains
        if any(e.prim is numba_loops.njit_p or e.prim is numba_chains.chain_p for e in program.eqns):
            ctx.use("numba")
    return program, notes


def _return(program: Program, outputs: list[s.Expr], out_tree, backend: ModuleType, ctx,
            fresh: bool = True) -> cst.BaseStatement:
    """``return`` of the outputs, fresh where one would share memory with another or an input (with
    ``fresh``), in the structure of ``out_tree`` where it prints."""
    for k in aliased_outputs(program) if fresh else ():
        outputs[k] = _fresh(outputs[k], program.outputs[k], backend)
    if out_tree is not None and printable_tree(out_tree) and out_tree is not LEAF:
        ret = _structure(out_tree, iter(outputs))
    else:
        ret = outputs[0] if len(outputs) == 1 else s.tuple_(outputs)
    if isinstance(ret, cst.Tuple) and len(outputs) > 1:
        ret = ret.with_changes(lpar=[], rpar=[])
    finish = getattr(backend, "returned", None)  # Dask: the results computed together, ``dask.compute(...)``
    if finish is not None:
        ret = finish(ctx, ret)
    return s.statement(cst.Return(ret))


_MARKER = "__pullback_body__"


def _function(fn_name: str, params: list[str], constants: dict, body: list, notes: list[str]) -> cst.FunctionDef:
    """The function with its signature and docstring; its body is a marker statement, which
    ``_module_text`` replaces by the body printed in bulk. ``body`` loses its docstring to it."""
    kwonly = [cst.Param(s.name(n)) for n in constants]
    head = [body.pop(0)] if constants else []
    return cst.FunctionDef(
        name=s.name(fn_name), params=cst.Parameters([cst.Param(s.name(n)) for n in params], kwonly_params=kwonly,
                                                     star_arg=cst.ParamStar() if kwonly else cst.MaybeSentinel.DEFAULT),
        body=cst.IndentedBlock([*head, s.statement(s.name(_MARKER))]),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *(cst.EmptyLine(comment=cst.Comment(f"# {_safe(n)}"))
                                                         for n in notes)],
    )


def _def_line(fn_name: str, params: list[str]) -> str:
    """The ``def`` line of a function of plain parameters, as libcst prints it (two blank lines above)."""
    return f"\n\ndef {fn_name}({', '.join(params)}):\n"


def _module_text(head: cst.FunctionDef | str, body: list, kernels: list, helpers: list) -> tuple[str, dict[str, str]]:
    """The module's text without its imports: libcst prints the kernels (before), the signature and the
    docstring (a signature of names alone, the ``def`` line as text: a small program's, each of
    ``api.eager``'s kernels, where libcst's printer cost more than the body's); the body, one statement per
    line in bulk, prints through ``render`` (libcst's text, sooner) in place of the marker libcst prints last;
    the rare branches' functions follow. Long lines are broken (``lines.fit``), which returns the shortened
    comments too."""
    if isinstance(head, str):
        code = head
    else:
        code = "".join(k if isinstance(k, str) else cst.Module(body=[k]).code for k in [*kernels, head])
        tail = render.body([s.statement(s.name(_MARKER))])
        assert code.endswith(tail), "the marker statement prints last"
        code = code[: -len(tail)]
    after = cst.Module(body=helpers).code if helpers else ""
    return lines.fit(code + render.body(body) + after)


def _imports(code: str, ctx, backend: ModuleType) -> tuple[str, str]:
    """The imports of the modules ``code`` reads, sorted as ruff sorts them (cupy before numpy), and
    the code (which starts at its first definition when there is nothing to import)."""
    read = lines.modules_read(code, {m.split(".")[0] for m in {"np", *ctx.modules}})
    modules = sorted((m for m in {"np", *ctx.modules} if m.split(".")[0] in read),
                     key=lambda m: backend.IMPORTS.get(m, m))
    if not modules:
        return "", code.lstrip("\n")
    key = (backend.__name__, *modules)
    text = _IMPORT_TEXTS.get(key)
    if text is None:  # (a few distinct lists in a process; printing them through libcst cost as much as a kernel)
        text = _IMPORT_TEXTS[key] = cst.Module(body=[_import(m, backend.IMPORTS) for m in modules]).code
    return text, code


_IMPORT_TEXTS: dict[tuple[str, ...], str] = {}  # (backend, modules...) -> their import statements


@dataclass(frozen=True)
class _Nest:
    """What printing a sub-program in place needs of the generator: the names, atoms as
    expressions, the statements of a program, the carries whose names outlive their loop."""

    namer: Namer
    expr: Callable[[Atom], s.Expr]
    block: Callable[[Program], list[cst.BaseStatement]]
    escaped: set[int]
    backend: ModuleType
    listed: set[int]
    kernel: Callable[[Program], str]
    function: Callable[[Program, Any, list[s.Expr]], str]
    seeds: set[int]


def _name_initial_carries(prog: Program, namer: Namer, seeds: set[int], top: bool = False) -> None:
    """A value made only to start a loop's carry (``np.zeros`` of a cotangent's sum) takes the carry's
    name where it is made, ``A_bar_sum = np.zeros((2, 2))``, rather than a name of its own and
    ``A_bar_sum = bcast`` before the loop: one reader (the loop, once), one result, no update in place.
    ``top``: the function's own parameter that only starts a carry of its name is the carry (``for t:
    x = x[perm]``, not ``x_1 = x`` first), a local of the function like any other."""
    prims = set(map(_prim, prog.eqns))  # (in C: asked of every block)
    if ctrl.scan_p not in prims and ctrl.while_p not in prims:
        return
    readers: Counter = Counter(id(a) for e in prog.eqns for a in e.inputs if isinstance(a, Var))
    readers.update(id(a) for a in prog.outputs if isinstance(a, Var))
    made = {id(e.outputs[0]): e for e in prog.eqns if len(e.outputs) == 1}
    params = {id(v) for v in prog.inputs} if top else set()
    for e in prog.eqns:
        p = e.params
        if e.prim is ctrl.scan_p:
            first = p["num_consts"] + (p["length"] is None)
            body, carry = p["body"], range(p["num_carry"])
            inputs = [body.inputs[p["num_consts"] + k] for k in carry]
            outputs = body.outputs[:p["num_carry"]]
            operands = e.inputs[first:first + p["num_carry"]]
        elif e.prim is ctrl.while_p:
            body, nbc = p["body"], p["num_body_consts"]
            inputs = list(body.inputs[nbc:])
            outputs = body.outputs[:len(inputs)]
            operands = e.inputs[p["num_cond_consts"] + nbc:]
        else:
            continue
        for v, new, a in zip(inputs, outputs, operands):
            d = made.get(id(a)) if isinstance(a, Var) else None
            if (top and d is None and isinstance(a, Var) and id(a) in params and readers[id(a)] == 1
                    and new is not v and v.hint and a.hint == v.hint):
                seeds.add(id(a))
                continue
            if (d is None or readers[id(a)] != 1 or new is v or a in namer or d.prim in _NESTED
                    or d.prim in memory.UPDATES or not v.hint):
                continue
            namer.name(a, v.hint, "carry")
            seeds.add(id(a))


def _carry_parameters(body: Program, namer: Namer, seeds: set[int]) -> dict[int, tuple[Var, str | None]]:
    """A compiled function of one loop whose parameter only starts a carry takes the carry's name
    (``def loop(x, h):``), not the caller's and ``h = h_1`` first: the function's own scope. The
    parameters renamed, by id, with the names they had (restored after the function is printed)."""
    if len(body.eqns) != 1 or body.eqns[0].prim not in (ctrl.scan_p, ctrl.while_p):
        return {}
    e, p = body.eqns[0], body.eqns[0].params
    if e.prim is ctrl.scan_p:
        first = p["num_consts"] + (p["length"] is None)
        inputs = p["body"].inputs[p["num_consts"]:p["num_consts"] + p["num_carry"]]
        operands = e.inputs[first:first + p["num_carry"]]
    else:
        nbc = p["num_body_consts"]
        inputs = p["body"].inputs[nbc:]
        operands = e.inputs[p["num_cond_consts"] + nbc:]
    reads = Counter(id(a) for a in e.inputs if isinstance(a, Var))
    reads.update(id(a) for a in body.outputs if isinstance(a, Var))
    params = {id(v) for v in body.inputs}
    renamed: dict[int, tuple[Var, str | None]] = {}
    for v, a in zip(inputs, operands):
        if isinstance(a, Var) and id(a) in params and reads[id(a)] == 1 and v.hint and id(a) not in renamed:
            renamed[id(a)] = (a, namer.rebind(a, namer.fresh(v.hint, "carry")))
            seeds.add(id(a))
    return renamed


def _init_carry(carry, new, operands, ins: list[s.Expr], namer: Namer,
                seeds: frozenset[int] | set[int] = frozenset()) -> list[cst.BaseStatement]:
    """``c = init`` before a loop for each carry; a carry every step passes on as it is keeps its
    operand's name (nothing rebinds it), and so does one whose operand was made for it alone (``seeds``)."""
    stmts = []
    for v, a, op, e in zip(carry, new, operands, ins):
        if (a is v or id(op) in seeds) and isinstance(op, Var):
            namer.alias(v, op)
        else:
            stmts.append(s.assign([s.name(namer.name(v, v.hint, "carry"))], e))
    return stmts


def _result_hints(body: Program) -> dict[int, str]:
    """id(value) -> the name of an unnamed value of ``body`` by the operation that made it, a result of
    several by its position (``lu``, ``piv`` of a ``getrf``): the lists of a loop's records are named so."""
    hints = {}
    for e in body.eqns:
        if e.prim is numba_loops.grid_p:  # its values by the operations in it
            hints.update(_result_hints(e.params["body"]))
            continue
        fallback = _temp_name(e.prim)
        for v, h in zip(e.outputs, OUTPUT_HINTS.get(e.prim, (fallback,) * len(e.outputs))):
            hints[id(v)] = h
    return hints


def _name_new_carries(body: Program, nc: int, nk: int, namer: Namer) -> list[Var]:
    """A carry's new value takes the carry's name where the step makes it after its last read of the old
    one: ``nll = nll + term`` and ``A_bar_sum = A_bar_sum + A_bar``, not ``add_3 = ...`` and a rebinding
    at the end of the step. Not where the old value is a result of the step (recorded for the backward
    loop, or another carry's new value), nor for a value two carries share or an update in place (its
    buffer is named from its start)."""
    body = printed.prepare(body)  # as it prints: a broadcast left to NumPy reads the carry where its readers are
    defined = {id(v): i for i, e in enumerate(body.eqns) for v in e.outputs}
    last_read: dict[int, int] = {}
    for i, e in enumerate(body.eqns):
        for a in e.inputs:
            last_read[id(a)] = i
    returned = Counter(id(a) for a in body.outputs)
    took: list[Var] = []
    recorded = set(returned)  # an old carry passed on (another carry's new value, a record) is read at the end
    for c, a in zip(body.inputs[nc:nc + nk], body.outputs[:nk]):
        if not isinstance(a, Var) or returned[id(a)] != 1 or id(a) not in defined or a in namer:
            continue
        e = body.eqns[defined[id(a)]]
        if (e.prim in memory.UPDATES or e.prim in _NESTED or len(e.outputs) != 1 or id(c) in recorded
                or last_read.get(id(c), -1) > defined[id(a)]):
            continue
        namer.alias(a, c)
        took.append(a)
    return took


def _rebind(carry, new, nest: _Nest) -> list[cst.BaseStatement]:
    """``c1, c2 = new1, new2`` for the carries a step changes (all at once: a step may swap them); a
    chunked backend (Dask) may give each the chunks its carry had (``carried``), a carry the body
    assigns under its own name too (``c = c.rechunk(...)``)."""
    namer = nest.namer
    carried = getattr(nest.backend, "carried", lambda v, a, value: value)
    changed, stmts = [], []
    for v, a in zip(carry, new):
        if a is v:
            continue
        if isinstance(a, Var) and a in namer and v in namer and namer[a] == namer[v]:
            name = s.name(namer[v])
            value = carried(v, a, name)
            if value is not name:
                stmts.append(s.assign([s.name(namer[v])], value))
        else:
            changed.append((v, a))
    if not changed:
        return stmts
    targets = [s.name(nest.namer[v]) for v, _ in changed]
    values = [carried(v, a, nest.expr(a)) for v, a in changed]
    return [s.assign(targets, s.tuple_(values, parens=False) if len(values) > 1 else values[0]), *stmts]


def _scan(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """A scan as a ``for`` loop: the carry rebound each step, the stacked results preallocated once
    (or lists, for the residuals of ``_listed_stacks`` and for stacks). Over the steps of a while
    loop (``length`` None), the number of steps is its first operand.

        carry = init
        ys = np.empty((T, ...), dtype=...)
        for t in range(T):
            x = xs[t]
            ...body...
            carry = new_carry
            ys[t] = y
    """
    p = eqn.params
    body, length, nc, nk = p["body"], p["length"], p["num_consts"], p["num_carry"]
    namer, expr = nest.namer, nest.expr
    bound = p.get("bound")  # at most this many steps, over arrays of this many rows (ys zero past the steps)
    if length is None and bound is None and isinstance(eqn.inputs[0], Literal) and eqn.inputs[0].value == 0 \
            and not nk:
        return [s.assign([s.name(namer.name(v, v.hint, "empty"))], cst.List([])) for v in eqn.outputs]  # no steps
    steps: s.Expr = s.number(length) if length is not None else (
        s.call("len", ins[0]) if isinstance(eqn.inputs[0].type, StackType) else ins[0])  # as many steps as a stack
    if length is None and isinstance(eqn.inputs[0], Var) and not isinstance(eqn.inputs[0].type, StackType) \
            and (getattr(nest.backend, "SCALARS_AS_ARRAYS", False) or getattr(nest.backend, "FUNCTIONAL", False)):
        # a count on the device (CuPy has no __index__: no implicit copy to the host), or a Dask graph's (computed)
        steps = s.call("int", steps)
    operands, ins = (eqn.inputs, ins) if length is not None else (eqn.inputs[1:], ins[1:])
    carry, xs = body.inputs[nc:nc + nk], body.inputs[nc + nk:]
    stmts = _bind_inputs(body.inputs[:nc], operands[:nc], ins[:nc], namer)
    stmts += _init_carry(carry, body.outputs[:nk], operands[nc:nc + nk], ins[nc:nc + nk], namer, nest.seeds)
    took = _name_new_carries(body, nc, nk, namer)
    ys = []
    made_by = _result_hints(printed.prepare(body))  # by the operations as they print (``stacked_steps``)
    kept: dict[int, Var] = {}  # one list per residual: a value recorded twice is kept once
    stack = getattr(nest.backend, "stack", None)  # a functional backend (Dask): a list, stacked after the loop
    functional = getattr(nest.backend, "FUNCTIONAL", False)  # (whose arrays are never overwritten: no copies)
    stacked: list[tuple[cst.Name, cst.Name, Any]] = []
    for v, y in zip(eqn.outputs[nk:], body.outputs[nk:]):
        listed = id(v) in nest.listed or isinstance(v.type, StackType)
        if listed and isinstance(y, Var) and id(y) in kept:
            namer.alias(v, kept[id(y)])
            continue
        if listed and isinstance(y, Var):
            kept[id(y)] = v
        name = s.name(namer.name(v, v.hint, f"{made_by.get(id(y), 'y')}_steps"))
        copy = listed and id(v) not in nest.listed and not functional  # a stack's entry not made afresh: a copy
        rows: s.Expr = steps
        if not listed and stack is not None:
            stacked.append((name, s.name(namer.fresh(f"{name.value}_list")), v.type))
            name, listed = stacked[-1][1], True
            rows = steps if bound is None else s.number(bound)
        ys.append((name, y, copy))
        if listed:
            entry = cst.Name("None") if rows is steps else nest.backend.zeros(v.type.elem if isinstance(
                v.type, StackType) else ArrayType(v.type.shape[1:], v.type.dtype))
            stmts.append(s.assign([name], s.binop(cst.List([cst.Element(entry)]), "*", rows)))
        else:
            stmts.append(s.assign([name], nest.backend.empty(v.type) if bound is None else nest.backend.zeros(v.type)))
    index = namer.fresh("t")
    t = s.name(index)
    used = {id(a) for e in body.eqns for a in e.inputs} | {id(a) for a in body.outputs}
    # A value may be read by two loops (a residual of the forward loop, sliced again in the backward
    # one) and share its name there; but if it was an earlier loop's carry, the code after that loop
    # reads the name: here it takes another.
    renamed = {id(v): (v, namer.rebind(v, namer.fresh(v.hint or "x"))) for v in xs if id(v) in nest.escaped}
    loop: list[cst.BaseStatement] = [s.assign([s.name(namer.name(v, v.hint, "x"))], s.subscript(e, [t]))
                                     for v, e in zip(xs, ins[nc + nk:]) if id(v) in used]
    loop += nest.block(body)
    for v, old in renamed.values():
        namer.rebind(v, old)
    for name, y, copy in ys:  # before the carry is rebound: a y may be this step's carry
        value = _fresh(expr(y), y, nest.backend) if copy and isinstance(y, Var) else expr(y)
        loop.append(s.statement(cst.Assign([cst.AssignTarget(s.subscript(name, [t]))], value)))
    loop += _rebind(carry, body.outputs[:nk], nest)
    if p["reverse"]:
        last = s.number(length - 1) if length is not None else s.binop(steps, "-", s.number(1))
        bounds: tuple[s.Expr, ...] = (last, s.number(-1), s.number(-1))
    else:
        bounds = (steps,)
    if not loop:
        loop = [s.statement(cst.Pass())]
    if not ys and not any(id(v) in used for v in xs):  # the step's index is read nowhere
        t = s.name("_")
    stmts.append(cst.For(target=t, iter=s.call("range", *bounds), body=cst.IndentedBlock(loop)))
    stmts += [s.assign([name], stack(steps_list, typ)) for name, steps_list, typ in stacked]
    namer.release(index)
    for a in took:  # another loop over this body (the forward steps again) decides afresh
        namer.rebind(a, None)
    for v, c in zip(eqn.outputs[:nk], carry):
        namer.alias(v, c)
        nest.escaped.add(id(c))
    return stmts


def _made_afresh(body: Program, nk: int) -> list[bool]:
    """Which of a loop body's results after its ``nk`` carries each step makes afresh: not (views of)
    its inputs or carries, which the code after the step may overwrite, nor a nested loop's or
    branch's results (one may be its operand), but for stacks, which a nested loop makes anew."""
    root = memory.buffer_roots(body)
    made = {id(v): b for b in body.eqns for v in b.outputs}
    carried = {root.get(id(a), id(a)) for a in body.outputs[:nk] if isinstance(a, Var)}
    # (an operand of a nested loop or branch may come out of it as its result: a carry, perhaps)
    carried |= {root.get(id(a), id(a)) for b in body.eqns if b.prim in WITH_BODIES for a in b.inputs}
    fresh = []
    for y in body.outputs[nk:]:
        r = root.get(id(y), id(y)) if isinstance(y, Var) else None
        fresh.append(r in made and r not in carried and (made[r].prim not in WITH_BODIES or (
            isinstance(y.type, StackType) and made[r].prim in (ctrl.while_p, ctrl.scan_p))))
    return fresh


def _listed_stacks(prog: Program, functional: bool = False) -> set[int]:
    """The stacked results of ``prog``'s loops that only later loops read, a step at a time (a forward
    loop's residuals, read by the backward loop): printed as a list of each step's array, as a person
    keeps them, not copied into an array preallocated once (a copy per residual per step, whose call
    costs more than the copy at small sizes). Only results that each step makes afresh (see
    ``_made_afresh``), but for a ``functional`` backend's (Dask's arrays are never overwritten)."""
    for e in prog.eqns:
        if e.prim is ctrl.scan_p:
            break
    else:  # (no loop: no stack)
        return set()
    only_sliced: dict[int, bool] = {}
    for e in prog.eqns:
        if e.prim is ctrl.scan_p:
            xs_from = e.params["num_consts"] + e.params["num_carry"] + (e.params["length"] is None)
        else:
            xs_from = len(e.inputs)
        for i, a in enumerate(e.inputs):
            if isinstance(a, Var):
                only_sliced[id(a)] = only_sliced.get(id(a), True) and i >= xs_from
    for a in prog.outputs:
        if isinstance(a, Var):
            only_sliced[id(a)] = False
    out: set[int] = set()
    for e in prog.eqns:
        if e.prim is not ctrl.scan_p:
            continue
        nk = e.params["num_carry"]
        for v, fresh in zip(e.outputs[nk:], _made_afresh(e.params["body"], nk)):
            if only_sliced.get(id(v)) and (fresh or functional):
                out.add(id(v))
    return out


def _bind_inputs(inputs, operands, ins: list[s.Expr], namer: Namer) -> list[cst.BaseStatement]:
    """Name a sub-program's inputs as the operands they stand for (literals are assigned)."""
    stmts = []
    for v, a, e in zip(inputs, operands, ins):
        if isinstance(a, Var):
            namer.alias(v, a)
        else:
            stmts.append(s.assign([s.name(namer.name(v, v.hint, "c"))], e))
    return stmts


def _while(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """``carry = init; pred = cond(carry); while pred: carry = body(carry); pred = cond(carry)``; the
    values a step records are appended to lists (``res_steps = []`` before the loop,
    ``res_steps.append(res)`` in it), which a backward loop reads in reverse."""
    p = eqn.params
    cond, body, ncc, nbc = p["cond"], p["body"], p["num_cond_consts"], p["num_body_consts"]
    namer, block = nest.namer, nest.block
    nk = len(eqn.outputs) - p["num_ys"]
    stmts = _bind_inputs(cond.inputs, eqn.inputs[:ncc], ins[:ncc], namer)
    stmts += _bind_inputs(body.inputs, eqn.inputs[ncc:ncc + nbc], ins[ncc:ncc + nbc], namer)
    carry = body.inputs[nbc:]
    stmts += _init_carry(carry, body.outputs[:nk], eqn.inputs[ncc + nbc:], ins[ncc + nbc:], namer, nest.seeds)
    records = []
    made_by = _result_hints(printed.prepare(body))  # by the operations as they print (``stacked_steps``)
    for v, y, fresh in zip(eqn.outputs[nk:], body.outputs[nk:], _made_afresh(body, nk)):
        name = s.name(namer.name(v, v.hint, f"{made_by.get(id(y), 'y')}_steps"))
        stmts.append(s.assign([name], cst.List([])))
        records.append((name, y, fresh))
    for v, c in zip(cond.inputs[ncc:ncc + nk], carry):
        namer.alias(v, c)
    # a lazy backend (Dask) holds the carries computed before each test, and computes the test itself
    held = getattr(nest.backend, "while_carries", lambda names, values: [])
    stmts += held([nest.expr(v) for v in carry], eqn.inputs[ncc + nbc:]) + block(cond)
    loop = block(body)
    functional = getattr(nest.backend, "FUNCTIONAL", False)  # (Dask's arrays are never overwritten: no copies)
    for name, y, fresh in records:  # before the carry is rebound: a record may be this step's carry
        value = (_fresh(nest.expr(y), y, nest.backend) if not fresh and not functional and isinstance(y, Var)
                 else nest.expr(y))
        loop.append(s.statement(s.method(name, "append", value)))
    loop += _rebind(carry, body.outputs[:nk], nest)
    loop += held([nest.expr(v) for v in carry], body.outputs[:nk]) + block(cond)
    test = getattr(nest.backend, "while_test", lambda pred, e: e)(cond.outputs[0], nest.expr(cond.outputs[0]))
    stmts.append(cst.While(test=test, body=cst.IndentedBlock(loop)))
    for v, c in zip(eqn.outputs, carry):
        namer.alias(v, c)
        nest.escaped.add(id(c))
    return stmts


HELPER_MIN_EQNS = 16  # a branch this long prints as a function of its own (det's singular branch): the
# common path reads in a few lines, and the rare one is named for what it computes


def _cond(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """``if index <= 0: ... elif index == 1: ... else: ...`` (``if pred: ... else: ...`` for two
    branches of a boolean), every branch assigning the same result names; a long branch is a call of
    a module-level function printed for it (``HELPER_MIN_EQNS``)."""
    branches, namer, expr = eqn.params["branches"], nest.namer, nest.expr
    names = [s.name(namer.name(v, v.hint, "branch")) for v in eqn.outputs]
    lazy = getattr(nest.backend, "branching", None)  # a lazy backend (Dask): see its ``branching``
    head, select = lazy(eqn, ins[0]) if lazy is not None else ([], None)
    if select is not None:  # every branch, one after another, and their results selected by the index
        stmts = []
        for br in branches:
            stmts += _bind_inputs(br.inputs, eqn.inputs[1:], ins[1:], namer) + nest.block(br)
        return stmts + select(names, [[expr(a) for a in br.outputs] for br in branches])
    bodies = []
    for br in branches:
        if len(br.eqns) >= HELPER_MIN_EQNS and all(isinstance(e, cst.Name) or isinstance(a, Literal)
                                                   for a, e in zip(eqn.inputs[1:], ins[1:])):
            read = {id(a) for e in br.eqns for a in e.inputs} | {id(a) for a in br.outputs}
            args = dict.fromkeys(e.value for v, a, e in zip(br.inputs, eqn.inputs[1:], ins[1:])
                                 if isinstance(a, Var) and id(v) in read)
            call = s.call(nest.function(br, eqn.inputs[1:], ins[1:]), *map(s.name, args))
            bodies.append([s.assign(names, call)] if names else [s.statement(call)])
            continue
        code = _bind_inputs(br.inputs, eqn.inputs[1:], ins[1:], namer) + nest.block(br)
        if names:
            code.append(s.assign(names, s.tuple_([expr(a) for a in br.outputs], parens=False) if len(names) > 1
                                 else expr(br.outputs[0])))
        bodies.append(code or [s.statement(cst.Pass())])
    index = ins[0]
    if eqn.inputs[0].dtype == bool:
        return [*head, cst.If(test=index, body=cst.IndentedBlock(bodies[1]),
                              orelse=cst.Else(body=cst.IndentedBlock(bodies[0])))]
    node: cst.If | cst.Else = cst.Else(body=cst.IndentedBlock(bodies[-1]))
    for k in range(len(branches) - 2, -1, -1):
        test = s.binop(index, "<=" if k == 0 else "==", s.number(k))
        node = cst.If(test=test, body=cst.IndentedBlock(bodies[k]), orelse=node)
    return [*head, node]


def _inline_body(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """A checkpoint's (or custom rule's) body, printed in place: its inputs are the operands' names,
    its outputs the results' (in the backward pass, the recomputed forward values it needs)."""
    body, namer, expr = eqn.params["body"], nest.namer, nest.expr
    stmts = _bind_inputs(body.inputs, eqn.inputs, ins, namer) + nest.block(body)
    inputs = {id(v) for v in body.inputs}
    taken: set[int] = set()
    for v, out in zip(eqn.outputs, body.outputs):
        if isinstance(out, Var) and id(out) not in inputs and id(out) not in taken:
            namer.alias(v, out)  # the result is the body's value, by its name
            taken.add(id(out))
        else:  # a literal, an operand or a value already returned: a name of its own, lest a del of one end the other
            stmts.append(s.assign([s.name(namer.name(v, v.hint, "t"))], expr(out)))
    return stmts


def _fused(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """``a, b = fused(x, y)``: the call of the kernel printed for the body (see ``fusion``)."""
    name = nest.kernel(eqn.params["body"])
    outs = [s.name(nest.namer[v]) for v in eqn.outputs]
    return [s.assign(outs, s.call(name, *ins))]


def _njit(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """``x, ys = loop(c, x0, xs)``: the call of the Numba function printed for a loop (see
    ``numba_loops``). 0-d operands go in as scalars of their dtype, and 0-d results come back as
    NumPy scalars (Numba returns Python's)."""
    return _compiled_call(eqn, nest.kernel(eqn.params["body"], _NUMBA, "loop"), ins, nest)


def _chain(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """``sub, total = chain(X, means, scale)``: the call of the Numba function printed for an elementwise
    chain, an explicit loop over its elements (see ``numba_chains``)."""
    body = eqn.params["body"]
    for v in body.outputs:
        nest.namer.name(v, v.hint, _temp_name(next(e.prim for e in body.eqns if any(o is v for o in e.outputs))))
    said: dict[SourceInfo | None, str | None] = {}  # the comment of each user line, found once

    def comment(where: SourceInfo | None) -> str | None:
        if where not in said:
            said[where] = (_comment(where) or (None,))[0]
        return said[where]

    name = nest.kernel(body, _NUMBA, "chain", lambda name: numba_chains.source(eqn, name, lambda v: nest.namer[v],
                                                                              comment))
    return _compiled_call(eqn, name, ins, nest)


_NUMBA = s.call("numba.njit", cache=cst.Name("True"), error_model=cst.SimpleString('"numpy"'))


def _compiled_call(eqn, name: str, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """``outs = name(ins)`` for a Numba function: 0-d operands in as scalars of their dtype, 0-d results
    back as NumPy scalars (Numba returns Python's)."""
    body = eqn.params["body"]
    args = [s.call(s.dtype(v.type.dtype), e) if isinstance(v, Var) and v.type.ndim == 0 else e
            for v, e in zip(body.inputs, ins)]
    outs = [s.name(nest.namer[v]) for v in eqn.outputs]
    stmts: list[cst.BaseStatement] = [s.assign(outs, s.call(name, *args))]
    scalars = [(o, v) for o, v in zip(outs, eqn.outputs) if v.type.ndim == 0]
    if scalars:
        values = [s.call(s.dtype(v.type.dtype), o) for o, v in scalars]
        stmts.append(s.assign([o for o, _ in scalars], s.tuple_(values, parens=False) if len(values) > 1
                              else values[0]))
    return stmts


def _grid(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """A run of elementwise operations in a compiled loop as one loop over its grid (see ``numba_loops``)."""
    return numba_loops.grid_statements(eqn, ins, nest.namer, nest.backend.EMITTERS, nest.backend.Context(),
                                       lambda e: _temp_name(e.prim))


# Equations that hold sub-programs: they print them in place.
_NESTED: dict[Primitive, Callable[[Any, list, _Nest], list[cst.BaseStatement]]] = {
    ctrl.scan_p: _scan, ctrl.while_p: _while, ctrl.cond_p: _cond,
    ctrl.checkpoint_p: _inline_body, custom.custom_jvp_call_p: _inline_body, custom.custom_vjp_call_p: _inline_body,
    fusion.fused_p: _fused, numba_loops.njit_p: _njit, numba_loops.grid_p: _grid, numba_chains.chain_p: _chain,
}


def opaques(program: Program) -> list[Opaque]:
    """The objects the equations of ``program`` and of its sub-programs use by reference, each once,
    in order of first use, but those that print as code (``np.random``)."""
    found: dict[int, Opaque] = {}

    def params(v) -> None:
        if type(v) is Opaque and v.code is None:
            found.setdefault(id(v.value), v)
        elif type(v) is tuple:
            for e in v:
                params(e)

    def walk(p: Program) -> None:
        for eqn in p.eqns:
            if eqn.params is not NO_PARAMS:  # (most equations have none: the shared empty params)
                for v in eqn.params.values():
                    if type(v) is Opaque or type(v) is tuple:
                        params(v)
            if eqn.prim in WITH_BODIES:  # (the equations that hold sub-programs)
                for body in sub_programs(eqn):
                    walk(body)

    walk(program)
    return list(found.values())


def _docstring(program: Program, constants: dict[str, Any]) -> cst.SimpleStatementLine:
    """Lists the keyword-only arrays and objects: names (sanitised identifiers) and types (an object's
    class), never their values."""
    types = [str(v.type) for v in program.constvars] + [type(v).__name__ for v in list(constants.values())[
        len(program.constvars):]]
    lines = [f"        {name}: {t}" for name, t in zip(constants, types)]
    text = "\n".join(["Keyword-only: arrays the traced function read from its scope (or made when tracing),",
                       "    passed by pullback on each call:", *lines, "    "])
    return s.statement(cst.Expr(cst.SimpleString('"""' + text + '"""')))


def aliased_outputs(program: Program) -> list[int]:
    """Positions of the outputs that would share memory with an input, a constant or an earlier
    output: one of them, a view of one (views chain to the buffer they alias, as in ``memory``),
    the same value as an earlier output, or a view of a buffer an earlier output also views.
    Those are returned as copies, so that callers may write into any result."""
    root = memory.buffer_roots(program)
    taken = {id(v) for v in program.inputs} | {id(v) for v in program.constvars}
    copies = []
    for k, a in enumerate(program.outputs):
        if isinstance(a, Var):  # literals print as Python scalars: immutable
            buffer = root.get(id(a), id(a))
            if buffer in taken:
                copies.append(k)
            taken.add(buffer)
    return copies


def _fresh(e: s.Expr, v: Var, backend: ModuleType) -> s.Expr:
    """A copy of ``e``: ``e.copy()`` for arrays; a 0-d value may be a Python scalar at run time
    (see ``scalar_inputs``), so it becomes a NumPy scalar of its dtype, ``np.float64(e)``."""
    if v.type.ndim or getattr(backend, "SCALARS_AS_ARRAYS", False):
        return s.method(e, "copy")
    return s.call(s.dtype(v.type.dtype), e)


def _operands_of_bodies(eqn: Eqn) -> list[tuple[Program, int, int]]:
    """(sub-program, position of the operand its first input stands for, how many inputs do) for the
    sub-programs whose leading inputs are the equation's operands as they are: a branch's, an inlined
    body's, a scan's constants (its carries change from step to step)."""
    p, prim = eqn.params, eqn.prim
    if prim is ctrl.cond_p:
        return [(br, 1, len(br.inputs)) for br in p["branches"]]
    if prim in (ctrl.checkpoint_p, custom.custom_jvp_call_p, custom.custom_vjp_call_p):
        return [(p["body"], 0, len(p["body"].inputs))]
    if prim is ctrl.scan_p:
        return [(p["body"], int(p["length"] is None), p["num_consts"])]
    return []


_NO_POSITIONS: frozenset[int] = frozenset()
_FIRST: frozenset[int] = frozenset({0})
_MISSING = object()


def unused_results(eqn: Eqn, dead_here) -> frozenset[int]:
    """Positions of the equation's results that nothing reads (dead where they are made)."""
    if not dead_here:
        return _NO_POSITIONS
    outputs = eqn.outputs
    if len(outputs) == 1:  # (values compare by identity)
        return _FIRST if outputs[0] in dead_here else _NO_POSITIONS
    return frozenset([k for k, v in enumerate(outputs) if v in dead_here])


def _elementwise_update(eqn: Eqn, backend: ModuleType) -> bool:
    """Whether the equation can update an operand in place as an elementwise ufunc or operator (an array's:
    Numba's 0-d values are scalars)."""
    return (eqn.prim not in memory.UPDATES and eqn.prim in getattr(backend, "IN_PLACE", {})
            and eqn.prim is not st.add_diagonal_p and eqn.outputs[0].type.ndim > 0)


def _positional_out(stmt: cst.BaseStatement) -> cst.BaseStatement:
    """``np.exp(a, a)`` for ``np.exp(a, out=a)`` (Numba takes a ufunc's output by position only)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, cst.Call)):
        return stmt
    call = stmt.body[0].value
    args = [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT) if a.keyword and a.keyword.value == "out"
            else a for a in call.args]
    return stmt.with_changes(body=[cst.Expr(call.with_changes(args=args))])


def _in_place_operand(eqn, reusable: frozenset[int], backend: ModuleType) -> int | None:
    """The operand an elementwise operation can overwrite with its result, if any."""
    if not reusable or eqn.prim not in backend.IN_PLACE:
        return None
    out = eqn.outputs[0]
    return next((k for k in sorted(reusable) if eqn.inputs[k].type == out.type), None)


def _import(module: str, aliases: dict[str, str]) -> cst.SimpleStatementLine:
    if module in aliases and aliases[module] != module:
        alias = cst.ImportAlias(name=s.dotted(aliases[module]), asname=cst.AsName(s.name(module)))
    else:
        alias = cst.ImportAlias(name=s.dotted(module))
    return s.statement(cst.Import([alias]))


def _says(stmt: cst.CSTNode) -> bool:
    """Whether ``stmt`` already stands under a comment (a line of a block printed inline)."""
    return any(line.comment is not None for line in getattr(stmt, "leading_lines", ()))


def _comment(source: SourceInfo | None) -> tuple[str, tuple[str, int]] | None:
    """``# file.py:12  t = x * y`` for the user statement at ``source``."""
    if source is None:
        return None
    stmt = sourcemap.statement_at(source.filename, source.lineno)
    if stmt is None:
        return None
    where = f"{_safe(os.path.basename(source.filename))}:{stmt.first}"
    return f"# {where}  {sourcemap.statement_text(source.filename, stmt)}", (source.filename, stmt.first)


def _where(source: SourceInfo | None) -> str:
    """``file.py:12`` for error messages: basename and line, letters, digits and ._- only."""
    if source is None:
        return ""
    name = "".join(c for c in os.path.basename(source.filename) if c.isascii() and (c.isalnum() or c in "._-"))
    return f"{name}:{source.lineno}"


def _safe(text: str) -> str:
    return "".join(c for c in text if c.isprintable())
