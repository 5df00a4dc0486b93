"""Memory planning: which operation may write its result into an input's buffer.

A local *owns* a buffer when the operation that made it returns a fresh array; views
(transposes, reshapes, slices, broadcasts, ``.real``/``.imag``, diagonals) alias the
buffer of their operand. An operation may overwrite an input when that input owns its
buffer, every alias of the buffer is dead after the operation, and the buffer is not a
user's input, a constant or an output. User arrays are therefore never mutated.

Only arrays of at least ``MIN_SIZE`` elements are reused: below that an allocation is
cheap, and a fresh name for every value reads better.
"""

from __future__ import annotations

from pullback.ir.core import VIEWS, WITH_BODIES, Literal, Primitive, Program, Var, makes_view
from pullback.ir.types import ArrayType
from pullback.primitives import control as ctrl
from pullback.primitives import elementwise as ew
from pullback.primitives import indexing as ix
from pullback.primitives import structural as st

MIN_SIZE = 1 << 16
# An elementwise operation continues a chain in the buffer of an operand that an elementwise operation
# made from this size on, so that a chain of k operations allocates once: ``t = x * 2.0; t += y;
# np.tanh(t, out=t)``. Measured (five operations, float64, one process, 2 loaded cores): 28.7 us fresh
# against 19.1 in place at 15,000 elements, 8.1 against 6.2 at 4096, 3.4 against 2.5 at 1000.
CHAIN_MIN_SIZE = 1 << 12
_ELEMENTWISE = frozenset(v for v in vars(ew).values() if isinstance(v, Primitive))


# operations that update a copy of their first operand (``out = x.copy(); out[key] = v``, ``K + s I``):
# writing into a dead ``x`` instead saves the copy at any size, so they reuse it whatever its size (0-d
# values excepted: generated code may hold those as NumPy scalars, which cannot be written into)
UPDATES = frozenset({ix.scatter_p, ix.scatter_add_p, ix.dynamic_update_slice_p, st.add_diagonal_p})


def _unread() -> dict:
    """Primitive -> operands its printed value does not read: the matrix A that the composites at a
    factorisation take for their tangents (``primitives.factored``), whose value the factors give. A
    value read only there is dead after its factorisation, which may then overwrite it."""
    from pullback.primitives.linalg import factor_solves as fa
    from pullback.primitives.linalg import matrix_functions as lx

    return {p: frozenset({0}) for p in (fa.gesv_p, fa.getri_at_p, fa.lu_logabsdet_p, fa.posv_p, fa.po_logdet_p,
                                        fa.po_inv_p, lx.det_p)}


UNREAD = _unread()


def _overwriting() -> frozenset:
    """LAPACK/BLAS calls that may work in a dead operand's buffer (``overwrite_*``): they reuse it at any
    size, as the expert's code does, since their result takes a name of its own either way and the copy
    that f2py would make is all that a small call saves (at n = 64, getri's copy of the factors is a few
    per cent of the gradient's time)."""
    from pullback.primitives.linalg import factor_solves as fa
    from pullback.primitives.linalg import factorizations as la
    from pullback.primitives.linalg import rank_update as rk

    return frozenset({la.potrf_p, la.potri_p, la.getrf_p, la.trsm_p, la.trmm_p, fa.getrs_p, fa.getri_p,
                      fa.getri_at_p, fa.gesv_p, fa.potrs_p, fa.posv_p, fa.po_inv_p, rk.ger_p})


OVERWRITING = _overwriting()


def reads(eqn) -> list:
    """The operands of ``eqn`` that its printed code reads (all but ``UNREAD``'s)."""
    skip = UNREAD.get(eqn.prim)
    return list(eqn.inputs) if skip is None else [a for k, a in enumerate(eqn.inputs) if k not in skip]


def buffer_roots(program: Program) -> dict[int, int]:
    """id(var) -> id of the var owning its buffer, for the vars that do not own theirs: a view (a chain of
    views) -> the value it aliases. Read as ``root.get(id(v), id(v))``: a var absent owns its buffer (as
    inputs, constants and most results do), so a long program of fresh arrays makes no entry per equation."""
    root: dict[int, int] = {}
    for eqn in program.eqns:
        prim = eqn.prim
        if prim in VIEWS and makes_view(prim, eqn.inputs) and not isinstance(eqn.inputs[0], Literal):
            src = eqn.inputs[0]
            root[id(eqn.outputs[0])] = root.get(id(src), id(src))
        elif prim in WITH_BODIES:  # sub-programs printed in place: a result may be (a view of) an operand
            for v, src in (_scan_carry_sources(eqn) if prim is ctrl.scan_p else _aliased_operands(eqn)):
                root[id(v)] = root.get(id(src), id(src))
    return root


def _aliased_operands(eqn):
    """(result, an operand whose buffer it may share) of a cond, while, checkpoint or custom call
    (a loop's result may also be its initial value: that one is taken)."""
    p = eqn.params
    bodies = p["branches"] if "branches" in p else (p["body"],)
    operands = eqn.inputs[1:] if "branches" in p else eqn.inputs[p.get("num_cond_consts", 0):]
    sources = []  # per body: output position -> the operand its value is (a view of), if any
    for body in bodies:
        body_root = buffer_roots(body)
        operand = {id(w): a for w, a in zip(body.inputs, operands)}
        sources.append([operand.get(body_root.get(id(out), id(out))) if isinstance(out, Var) else None
                        for out in body.outputs])
    outputs = eqn.outputs[:len(eqn.outputs) - p["num_ys"]] if eqn.prim is ctrl.while_p else eqn.outputs
    initial = operands[len(operands) - len(outputs):] if eqn.prim is ctrl.while_p else ()  # (records: new lists)
    for k, v in enumerate(outputs):
        found = [src[k] for src in sources if isinstance(src[k], Var)]
        if initial and isinstance(initial[k], Var):
            found.append(initial[k])  # no step run: the initial value
        if found:
            yield v, found[-1]


def _scan_carry_sources(eqn):
    """(final carry, operand it may be the buffer of): a loop's final carry is a fresh array only if
    the body makes a new one for it and the loop runs at least once; otherwise it may be its initial
    value, or (a view of) a const, an earlier step's carry or a slice of xs."""
    p = eqn.params
    body, nc, nk = p["body"], p["num_consts"], p["num_carry"]
    body_root = buffer_roots(body)
    operands = eqn.inputs if p["length"] is not None else eqn.inputs[1:]  # (after the number of steps)
    operand = {id(v): a for v, a in zip(body.inputs, operands)}
    made = {id(v) for e in body.eqns for v in e.outputs}
    for k, (v, out) in enumerate(zip(eqn.outputs[:nk], body.outputs[:nk])):
        r = body_root.get(id(out), id(out)) if isinstance(out, Var) else None
        if p["length"] and r in made:  # (a number of steps known at run time may be 0)
            continue
        src = operand.get(r) if r is not None else None
        src = operands[nc + k] if src is None or r in {id(c) for c in body.inputs[nc:nc + nk]} else src
        if isinstance(src, Var):
            yield v, src


def _whole_in(body: Program, out, outer_whole, operands: dict, depth: int = 8) -> bool:
    """Whether a branch's result ``out`` is a fresh array of the branch's own, or an operand (or a
    transpose of one) that holds a whole buffer outside (``outer_whole``)."""
    if not isinstance(out, Var) or not depth:
        return False
    made = next((e for e in body.eqns if any(o is out for o in e.outputs)), None)
    if made is None:
        return id(out) in operands and outer_whole(operands[id(out)])
    if made.prim is st.transpose_p:
        return _whole_in(body, made.inputs[0], outer_whole, operands, depth - 1)
    return not makes_view(made.prim, made.inputs) and made.prim not in WITH_BODIES


def _candidates(program: Program, chain_size: int) -> bool:
    """Whether an equation of ``program`` may reuse a buffer at all: one that overwrites at any size, or
    one with an operand of ``chain_size`` elements or more (a long program of small arrays has none)."""
    small: set[int] = set()  # ids of the types already found smaller (a long program's values share a few)
    for e in program.eqns:
        if e.prim in UPDATES or e.prim in OVERWRITING:
            return True
        for a in e.inputs:
            if type(a) is Var and id(a.type) not in small:
                if type(a.type) is ArrayType and a.type.size >= chain_size:
                    return True
                small.add(id(a.type))
    return False


def plan(program: Program, free: frozenset[int] = frozenset(), min_size: int = MIN_SIZE) -> dict[int, frozenset[int]]:
    """Equation index -> positions of inputs whose buffers the equation may reuse. ``free``: ids of
    inputs that are the program's own to overwrite (a branch's operands that die with the branch);
    ``min_size``: the smallest array updated in place (compiled code gains at any size).
    An operand may be its buffer's owner or a transpose of it (the whole buffer, read another way)."""
    chain_size = min(min_size, CHAIN_MIN_SIZE)
    if not _candidates(program, chain_size):
        return {}
    pinned = ({id(v) for v in program.inputs} - free) | {id(v) for v in program.constvars}
    root = buffer_roots(program)
    whole: set[int] = set()  # transposes of a whole buffer (of its owner, or of such a transpose)
    for e in program.eqns:
        x = e.inputs[0] if e.prim is st.transpose_p else None
        if isinstance(x, Var) and (root.get(id(x), id(x)) == id(x) or id(x) in whole):
            whole.add(id(e.outputs[0]))
        elif e.prim is ctrl.cond_p:  # a result that each branch makes afresh or passes on whole (det's inverse)
            operands = {id(w): a for br in e.params["branches"] for w, a in zip(br.inputs, e.inputs[1:])}
            for k, v in enumerate(e.outputs):
                if root.get(id(v), id(v)) != id(v) and all(
                        _whole_in(br, br.outputs[k], lambda a: isinstance(a, Var) and (
                            root.get(id(a), id(a)) == id(a) or id(a) in whole), operands)
                        for br in e.params["branches"]):
                    whole.add(id(v))
    for a in program.outputs:
        if isinstance(a, Var):
            pinned.add(root.get(id(a), id(a)))
    last: dict[int, int] = {}  # buffer -> index of the last equation reading any of its aliases
    for i, eqn in enumerate(program.eqns):
        for a in eqn.inputs if eqn.prim not in UNREAD else reads(eqn):  # (most read every operand: no list)
            if isinstance(a, Var):
                last[root.get(id(a), id(a))] = i
    made_elementwise = {id(v) for e in program.eqns if e.prim in _ELEMENTWISE for v in e.outputs}
    reusable: dict[int, frozenset[int]] = {}
    for i, eqn in enumerate(program.eqns):
        chain = eqn.prim in _ELEMENTWISE
        # a result may take over a dead buffer too (codegen binds the result's name to it after the update)
        update = eqn.prim in UPDATES
        any_size = update or eqn.prim in OVERWRITING
        sized = []  # the operands large enough (most equations of a long program of small arrays: none)
        for k, a in enumerate(eqn.inputs):  # (a loop, not a comprehension: no call per equation)
            if (isinstance(a, Var) and type(a.type) is ArrayType
                    and (a.type.size >= min_size or (any_size and a.type.ndim)
                         or (chain and id(a) in made_elementwise and a.type.size >= chain_size))
                    and (k == 0 or not update)):  # (not a stack)
                sized.append(k)
        if not sized:
            continue
        buffers = [root.get(id(a), id(a)) if isinstance(a, Var) else None for a in eqn.inputs]
        ok = frozenset(
            k for k in sized
            if (root.get(id(eqn.inputs[k]), id(eqn.inputs[k])) == id(eqn.inputs[k]) or id(eqn.inputs[k]) in whole)
            and buffers[k] not in pinned
            and last.get(buffers[k]) == i and buffers.count(buffers[k]) == 1  # no other operand reads this buffer
        )
        if ok:
            reusable[i] = ok
    return reusable
