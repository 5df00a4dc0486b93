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

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import libcst as cst

from pullback.backends import fusion, layout, memory, printed, render
from pullback.backends import syntax as s
from pullback.backends.templates import Templates
from pullback.ir import sourcemap
from pullback.ir.core import WITH_BODIES, Atom, Eqn, Literal, Opaque, Program, SourceInfo, Var, sub_programs
from pullback.ir.names import RESERVED, Namer
from pullback.ir.types import StackType
from pullback.tree import LEAF

# Outputs of multi-result operations, by position.
OUTPUT_HINTS = {"potrf": ("l", "info"), "gelqf": ("l", "q"), "geqrf": ("q", "r"), "syevd": ("w", "v"),
                "gesvd": ("u", "s", "vh"), "getrf": ("lu", "piv", "perm", "info"),
                "getc2": ("lu", "rperm", "cperm", "sign", "info")}

# Unnamed intermediates are named after the operation that made them.
TEMP_HINTS = {
    "broadcast_in_dim": "bcast", "convert_element_type": "cast", "dot_general": "dot", "reduce_sum": "total",
    "reduce_max": "largest", "reduce_min": "smallest", "integer_pow": "power", "concatenate": "concat",
    "transpose": "transposed", "reshape": "reshaped", "slice": "part", "select": "chosen", "diag_embed": "diag",
    "add_diagonal": "shifted", "add_transpose": "symmetric", "rem": "remainder", "floor_divide": "quotient",
    "round": "rounded", "clip": "clipped",
    "and": "both", "or": "either", "xor": "differ", "not": "inverted",
    "gather": "picked", "scatter": "updated", "dynamic_slice": "window", "dynamic_update_slice": "updated",
    "scatter_add": "accumulated", "sort": "ordered", "argsort": "order", "argmax": "imax", "argmin": "imin",
}


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
SCALAR_SAFE = frozenset({
    "neg", "sign", "exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "logistic",
    "abs", "real", "imag", "conj", "add", "sub", "mul", "div", "pow", "max", "min", "eq", "ne", "lt", "le", "gt",
    "ge", "integer_pow", "select", "broadcast_in_dim",
    "dynamic_slice", "dynamic_update_slice",  # scalars only as starts: slice bounds
})


def scalar_inputs(program: Program) -> list[Var]:
    """The 0-d inputs that must be made arrays on entry: those from which a value flows, through
    scalar-safe operations only, into an operation that is not scalar-safe."""
    roots: dict[int, frozenset[int]] = {id(v): frozenset({id(v)}) for v in program.inputs
                                       if not isinstance(v.type, StackType) and v.type.shape == ()}
    needed: set[int] = set()
    for eqn in program.eqns:
        found = [roots[id(a)] for a in eqn.inputs if isinstance(a, Var) and id(a) in roots]
        if not found:
            continue
        if eqn.prim.name not in SCALAR_SAFE:
            needed.update(*found)
            continue
        for v in eqn.outputs:
            if v.type.shape == ():
                roots[id(v)] = frozenset().union(*found)
    return [v for v in program.inputs if id(v) in needed]


def _last_uses(program: Program) -> dict[int, list[Var]]:
    """Equation index -> the locals whose last use it is (outputs and inputs are kept)."""
    keep = {id(a) for a in program.outputs} | {id(v) for v in program.inputs} | {id(v) for v in program.constvars}
    last: dict[int, tuple[int, Var]] = {}
    for i, eqn in enumerate(program.eqns):
        for a in eqn.inputs:
            if isinstance(a, Var) and id(a) not in keep:
                last[id(a)] = (i, a)
        for v in eqn.outputs:  # defined but never used: dead at once
            if id(v) not in keep:
                last.setdefault(id(v), (i, v))
    by_eqn: dict[int, list[Var]] = {}
    for i, v in last.values():
        by_eqn.setdefault(i, []).append(v)
    return by_eqn


def generate(program: Program, backend: ModuleType, out_tree=None, dels: bool = True,
             in_place: bool = True) -> Generated:
    """The module of ``program``. ``out_tree`` (tuples and lists) shapes the return value;
    ``dels`` adds ``del`` statements for locals after their last use; ``in_place`` lets an
    operation write into a dead input's buffer (see ``memory``)."""
    namer = Namer(RESERVED)
    fn_name = namer.fresh(program.name, "f")
    params = [cst.Param(s.name(namer.name(v, v.hint, "x"))) for v in program.inputs]
    constants = {namer.name(v, v.hint, "c"): val for v, val in zip(program.constvars, program.constvals)}
    ctx = backend.Context(fresh=lambda hint: namer.fresh(hint, "t"))
    for obj in opaques(program):  # objects used by reference (a draw's generator): keyword-only too
        name = namer.fresh(obj.hint, "obj")
        constants[name] = obj.value
        ctx.objects[id(obj.value)] = name
    kwonly = [cst.Param(s.name(n)) for n in constants]
    backend.configure(ctx, program)

    def expr(a: Atom) -> s.Expr:
        return s.number(a.value) if isinstance(a, Literal) else s.name(namer[a])

    body: list[cst.BaseStatement] = []
    if not getattr(backend, "SCALARS_AS_ARRAYS", False):  # Python scalar arguments stay scalars: see SCALAR_SAFE
        for v in scalar_inputs(program):
            body.append(s.assign([s.name(namer[v])], s.call("np.asarray", s.name(namer[v]))))
    last_comment: list[tuple[str, int] | None] = [None]
    escaped: set[int] = set()  # loop carries whose names the code after their loop reads (see _scan)
    listed: set[int] = set()  # loops' stacked results kept as lists of each step's array (see _listed_stacks)
    comments: dict[SourceInfo | None, tuple] = {}  # per user line, once: an unrolled loop repeats its lines

    templates = Templates(ctx)
    fortran: set[int] = set()  # ids of the locals known to be F-ordered (see ``layout``)
    free: set[int] = set()  # ids of branches' inputs whose operands die with the branch (see ``memory.plan``)
    order_rules = getattr(backend, "FORTRAN", {})
    optional = getattr(backend, "OPTIONAL_RESULTS", {})

    def templated(eqn: Eqn, k: int | None) -> str | None:
        """The equation's statements as text, from the template of its kind (see ``templates``)."""
        if k is None:
            def emit(ins, outs):
                emitted = backend.EMITTERS[eqn.prim](ctx, eqn, ins, outs)
                return emitted if isinstance(emitted, list) else [s.assign(outs, emitted)]
        else:
            def emit(ins, outs):
                return backend.in_place(eqn, ins, k, ctx.where)
        template = templates.get(templates.key(eqn, k), eqn, emit)
        if template is None:
            return None
        ins = [namer[a] if isinstance(a, Var) else "" for a in eqn.inputs]
        if k is None:
            fallback = TEMP_HINTS.get(eqn.prim.name, eqn.prim.name)
            hints = OUTPUT_HINTS.get(eqn.prim.name, (fallback,) * len(eqn.outputs))
            outs = [namer.name(v, v.hint, h) for v, h in zip(eqn.outputs, hints)]
        else:
            outs = [namer[v] for v in eqn.outputs]
        return templates.fill(template, ins, outs)

    def block(prog: Program, text: bool = False, plain: bool = False) -> list[cst.BaseStatement | str]:
        """The statements of ``prog``'s equations (its inputs are already named); with ``text``, as
        rendered text, printed from templates where the equation's kind allows; ``plain``, with no
        ``del`` and no update in place (a fused kernel's body)."""
        stmts_out: list[cst.BaseStatement | str] = []
        prog = printed.prepare(prog)
        last = _last_uses(prog)
        dead = last if dels and not plain else {}
        reuse = (memory.plan(prog, free=frozenset(id(v) for v in prog.inputs if id(v) in free))
                 if in_place and not plain and not getattr(backend, "FUNCTIONAL", False) else {})
        listed.update(_listed_stacks(prog))
        returned = {id(a) for a in prog.outputs}
        for i in reuse:  # a result updated in a dead buffer (`x_bar[idx] += ct`) names that buffer from its start
            eqn = prog.eqns[i]  # when returned, or when it has the user's name and the buffer none (`S_vv = B @ C`)
            if eqn.prim in memory.UPDATES and (id(eqn.outputs[0]) in returned or (
                    eqn.outputs[0].hint and not eqn.inputs[0].hint and eqn.inputs[0] not in namer)):
                namer.name(eqn.outputs[0], eqn.outputs[0].hint, "t")
                namer.alias(eqn.inputs[0], eqn.outputs[0])
        for i, eqn in enumerate(prog.eqns):
            if eqn.source not in comments:
                comments[eqn.source] = (_where(eqn.source), _comment(eqn.source))
            ctx.where, comment = comments[eqn.source]
            ctx.reusable = reuse.get(i, frozenset())
            ctx.fortran = layout.operands(eqn, fortran)
            ctx.unused = unused_results(eqn, last.get(i, ()))
            if dels and ctx.unused & optional.get(eqn.prim, frozenset()):  # left unassigned by the emitter: no del
                skipped = {id(eqn.outputs[k]) for k in ctx.unused & optional[eqn.prim]}
                dead[i] = [v for v in dead[i] if id(v) not in skipped]
            k = _in_place_operand(eqn, ctx.reusable, backend)
            layout.record(eqn, order_rules, ctx.fortran, k, fortran)
            printer = _NESTED.get(eqn.prim.name)
            # a returned result updates a dead buffer, then takes its own name: `x += y; x_bar = x`
            returned_update = (k is not None and printer is None and id(eqn.outputs[0]) in returned
                               and eqn.prim not in memory.UPDATES)
            if k is not None and printer is None and not returned_update:
                namer.alias(eqn.outputs[0], eqn.inputs[k])
                dead[i] = [v for v in dead.get(i, []) if v is not eqn.inputs[k]]
            piece = templated(eqn, k) if text and printer is None and not returned_update else None
            if piece is not None:
                if comment is not None and comment[1] != last_comment[0] and piece:
                    last_comment[0] = comment[1]
                    piece = render.INDENT + comment[0] + "\n" + piece
                stmts_out.append(piece)
                if dead.get(i):
                    stmts_out.append(render.INDENT + "del " + ", ".join(namer[v] for v in dead[i]) + "\n")
                continue
            ins = [expr(a) for a in eqn.inputs]
            if printer is not None:  # an equation holding sub-programs prints them in place
                for body, first, count in _operands_of_bodies(eqn):  # inputs standing for operands: their order
                    fortran.update(id(body.inputs[j - first]) for j in ctx.fortran if first <= j < first + count)
                if eqn.prim.name == "cond":  # an operand dying here is each branch's to overwrite
                    free.update(id(br.inputs[j - 1]) for br in eqn.params["branches"] for j in ctx.reusable if j)
                stmts = printer(eqn, ins, nest)
            elif returned_update:
                out = eqn.outputs[0]
                named = s.assign([s.name(namer.name(out, out.hint, "t"))], ins[k])
                stmts = [*backend.in_place(eqn, ins, k, ctx.where), named]
            elif k is not None:  # the result takes over the dead operand's buffer, and its name (above)
                stmts = backend.in_place(eqn, ins, k, ctx.where)
            else:
                fallback = TEMP_HINTS.get(eqn.prim.name, eqn.prim.name)
                hints = OUTPUT_HINTS.get(eqn.prim.name, (fallback,) * len(eqn.outputs))
                outs = [s.name(namer.name(v, v.hint, h)) for v, h in zip(eqn.outputs, hints)]
                emitted = backend.EMITTERS[eqn.prim](ctx, eqn, ins, outs)
                stmts = emitted if isinstance(emitted, list) else [s.assign(outs, emitted)]
            if comment is not None and comment[1] != last_comment[0] and stmts:
                last_comment[0] = comment[1]
                stmts[0] = stmts[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(comment[0]))])
            if text:
                stmts_out.append(render.body(stmts))
            else:
                stmts_out.extend(stmts)
            if dead.get(i):
                names = [s.name(namer[v]) for v in dead[i]]
                stmts_out.append(s.statement(cst.Del(s.tuple_(names, parens=False) if len(names) > 1 else names[0])))
        return stmts_out

    kernels: list[cst.FunctionDef] = []

    def kernel(body: Program) -> str:
        """Print ``body`` as a module-level function (``@cp.fuse()`` on CuPy); return its name."""
        name = namer.fresh("fused", "fused")
        seen = last_comment[0]
        stmts = block(body, plain=True)
        last_comment[0] = seen
        results = [expr(a) for a in body.outputs]
        ret = results[0] if len(results) == 1 else s.tuple_(results, parens=False)
        kernels.append(cst.FunctionDef(
            name=s.name(name), params=cst.Parameters([cst.Param(expr(v)) for v in body.inputs]),
            body=cst.IndentedBlock([*stmts, s.statement(cst.Return(ret))]),
            decorators=[cst.Decorator(s.call(fuse_with))] if fuse_with else [],
            leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
        return name

    nest = _Nest(namer, expr, block, escaped, backend, listed, kernel)
    fuse_with = getattr(backend, "FUSE", None)  # the kernels' decorator; "" prints them plain
    if fuse_with is not None:
        program = fusion.fuse(printed.prepare(program))

    body.extend(block(program, text=True))
    outputs = [expr(a) for a in program.outputs]
    for k in aliased_outputs(program):
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
    body.append(s.statement(cst.Return(ret)))
    if constants:
        body.insert(0, _docstring(program, constants))

    # libcst prints the imports, the signature and the docstring; the body, one statement per line in
    # bulk, prints through ``render`` (libcst's text, sooner), after a marker statement libcst prints last
    head = [body.pop(0)] if constants else []
    marker = s.statement(s.name(fn_name))
    func = cst.FunctionDef(
        name=s.name(fn_name), params=cst.Parameters(params, kwonly_params=kwonly, star_arg=cst.ParamStar() if kwonly
                                                     else cst.MaybeSentinel.DEFAULT),
        body=cst.IndentedBlock([*head, marker]), leading_lines=[cst.EmptyLine(), cst.EmptyLine()],
    )
    imports = [_import(m, backend.IMPORTS) for m in ["np", *sorted(ctx.modules)]]
    code = cst.Module(body=[*imports, *kernels, func]).code
    tail = render.body([marker])
    assert code.endswith(tail), "the marker statement prints last"
    statements = {comment[0]: SourceInfo(*comment[1]) for _, comment in comments.values() if comment is not None}
    return Generated(code[: -len(tail)] + render.body(body), fn_name, constants, statements)


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


def _rebind(carry, new, nest: _Nest) -> list[cst.BaseStatement]:
    """``c1, c2 = new1, new2`` for the carries a step changes (all at once: a step may swap them)."""
    changed = [(v, a) for v, a in zip(carry, new) if a is not v]
    if not changed:
        return []
    targets = [s.name(nest.namer[v]) for v, _ in changed]
    values = [nest.expr(a) for _, a in changed]
    return [s.assign(targets, s.tuple_(values, parens=False) if len(values) > 1 else values[0])]


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
    if length is None and isinstance(eqn.inputs[0], Literal) and eqn.inputs[0].value == 0 and not nk:
        return [s.assign([s.name(namer.name(v, v.hint, "empty"))], cst.List([])) for v in eqn.outputs]  # no steps
    steps: s.Expr = s.number(length) if length is not None else (
        s.call("len", ins[0]) if isinstance(eqn.inputs[0].type, StackType) else ins[0])  # as many steps as a stack
    operands, ins = (eqn.inputs, ins) if length is not None else (eqn.inputs[1:], ins[1:])
    carry, xs = body.inputs[nc:nc + nk], body.inputs[nc + nk:]
    stmts = _bind_inputs(body.inputs[:nc], operands[:nc], ins[:nc], namer)
    for v, e in zip(carry, ins[nc:nc + nk]):
        stmts.append(s.assign([s.name(namer.name(v, v.hint, "carry"))], e))
    ys = []
    made_by = {id(v): e.prim.name for e in body.eqns for v in e.outputs}
    for v, y in zip(eqn.outputs[nk:], body.outputs[nk:]):
        made = made_by.get(id(y), "y")
        name = s.name(namer.name(v, v.hint, f"{TEMP_HINTS.get(made, made)}_steps"))
        listed = id(v) in nest.listed or isinstance(v.type, StackType)
        ys.append((name, y, listed and id(v) not in nest.listed))  # a stack's entry not made afresh: a copy
        stmts.append(s.assign([name], s.binop(cst.List([cst.Element(cst.Name("None"))]), "*", steps)
                              if listed else nest.backend.empty(v.type)))
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
    stmts.append(cst.For(target=t, iter=s.call("range", *bounds), body=cst.IndentedBlock(loop)))
    namer.release(index)
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
            isinstance(y.type, StackType) and made[r].prim.name in ("while", "scan"))))
    return fresh


def _listed_stacks(prog: Program) -> set[int]:
    """The stacked results of ``prog``'s loops that only later loops read, a step at a time (a forward
    loop's residuals, read by the backward loop): printed as a list of each step's array, as a person
    keeps them, not copied into an array preallocated once (a copy per residual per step, whose call
    costs more than the copy at small sizes). Only results that each step makes afresh (see
    ``_made_afresh``)."""
    only_sliced: dict[int, bool] = {}
    for e in prog.eqns:
        if e.prim.name == "scan":
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
        if e.prim.name != "scan":
            continue
        nk = e.params["num_carry"]
        for v, fresh in zip(e.outputs[nk:], _made_afresh(e.params["body"], nk)):
            if only_sliced.get(id(v)) and fresh:
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
    for v, e in zip(carry, ins[ncc + nbc:]):
        stmts.append(s.assign([s.name(namer.name(v, v.hint, "carry"))], e))
    records = []
    made_by = {id(v): e.prim.name for e in body.eqns for v in e.outputs}
    for v, y, fresh in zip(eqn.outputs[nk:], body.outputs[nk:], _made_afresh(body, nk)):
        made = made_by.get(id(y), "y")
        name = s.name(namer.name(v, v.hint, f"{TEMP_HINTS.get(made, made)}_steps"))
        stmts.append(s.assign([name], cst.List([])))
        records.append((name, y, fresh))
    for v, c in zip(cond.inputs[ncc:ncc + nk], carry):
        namer.alias(v, c)
    stmts += block(cond)
    loop = block(body)
    for name, y, fresh in records:  # before the carry is rebound: a record may be this step's carry
        value = _fresh(nest.expr(y), y, nest.backend) if not fresh and isinstance(y, Var) else nest.expr(y)
        loop.append(s.statement(s.method(name, "append", value)))
    loop += _rebind(carry, body.outputs[:nk], nest) + block(cond)
    stmts.append(cst.While(test=nest.expr(cond.outputs[0]), body=cst.IndentedBlock(loop)))
    for v, c in zip(eqn.outputs, carry):
        namer.alias(v, c)
        nest.escaped.add(id(c))
    return stmts


def _cond(eqn, ins: list[s.Expr], nest: _Nest) -> list[cst.BaseStatement]:
    """``if index <= 0: ... elif index == 1: ... else: ...`` (``if pred: ... else: ...`` for two
    branches of a boolean), every branch assigning the same result names."""
    branches, namer, expr = eqn.params["branches"], nest.namer, nest.expr
    names = [s.name(namer.name(v, v.hint, "branch")) for v in eqn.outputs]
    bodies = []
    for br in branches:
        code = _bind_inputs(br.inputs, eqn.inputs[1:], ins[1:], namer) + nest.block(br)
        if names:
            code.append(s.assign(names, s.tuple_([expr(a) for a in br.outputs], parens=False) if len(names) > 1
                                 else expr(br.outputs[0])))
        bodies.append(code or [s.statement(cst.Pass())])
    index = ins[0]
    if eqn.inputs[0].dtype == bool:
        return [cst.If(test=index, body=cst.IndentedBlock(bodies[1]),
                       orelse=cst.Else(body=cst.IndentedBlock(bodies[0])))]
    node: cst.If | cst.Else = cst.Else(body=cst.IndentedBlock(bodies[-1]))
    for k in range(len(branches) - 2, -1, -1):
        test = s.binop(index, "<=" if k == 0 else "==", s.number(k))
        node = cst.If(test=test, body=cst.IndentedBlock(bodies[k]), orelse=node)
    return [node]


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


# Equations that hold sub-programs, by primitive name: they print them in place.
_NESTED: dict[str, Callable[[Any, list, _Nest], list[cst.BaseStatement]]] = {
    "scan": _scan, "while": _while, "cond": _cond,
    "checkpoint": _inline_body, "custom_jvp_call": _inline_body, "custom_vjp_call": _inline_body,
    "fused": _fused,
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
            for v in eqn.params.values():
                params(v)
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
    p, name = eqn.params, eqn.prim.name
    if name == "cond":
        return [(br, 1, len(br.inputs)) for br in p["branches"]]
    if name in ("checkpoint", "custom_jvp_call", "custom_vjp_call"):
        return [(p["body"], 0, len(p["body"].inputs))]
    if name == "scan":
        return [(p["body"], int(p["length"] is None), p["num_consts"])]
    return []


def unused_results(eqn: Eqn, dead_here) -> frozenset[int]:
    """Positions of the equation's results that nothing reads (dead where they are made)."""
    here = {id(v) for v in dead_here}
    return frozenset(k for k, v in enumerate(eqn.outputs) if id(v) in here)


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
