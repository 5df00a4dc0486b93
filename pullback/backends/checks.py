"""Error checks printed once, with what they check (issue 29, item 4).

A solve raises on a singular LU factor as NumPy's would, but getrf itself is unchecked in the IR, so
that a ``slogdet`` of the same matrix shares it; and a checked triangular solve tests its triangle's
diagonal. Printed as they stand, a factorisation hoisted out of a loop is checked at every step, one
LU serving two solves is checked twice (the second unreachable), and the diagonal of a Cholesky factor
is tested though potrf's own check already passed. Before printing, each check moves to what it checks:

- getrf's ``info > 0`` is tested once, right after the getrf (its ``check``), where a solve or an
  inverse reading its info surely runs whenever the getrf does (in its block, or in the bodies of
  loops of a known number of steps, at least one, around it); those readers' checks go (their info
  becomes the literal 0 of ``lu_solve``, which checks nothing);
- a check another check of the same value already made (earlier in the block or in a block around
  it) goes; so does a triangular solve's diagonal check of a factor a checked potrf made (potrf
  raised unless its diagonal is positive).

A check under a branch, or in a loop that may run no step, stays where it is: moved out, it would raise
where the user's program does not. A loop body's values are those around it where the loop reads them
unchanged (a scan's consts)."""

from __future__ import annotations

from pullback.ir.core import WITH_BODIES, Eqn, Literal, Params, Program, Var
from pullback.opt.census import primitives
from pullback.primitives import control as ctrl
from pullback.primitives.linalg import factor_solves as fa
from pullback.primitives.linalg import factorizations as la

_INFO_READERS = frozenset({fa.gesv_p, fa.getri_at_p})  # (a, lu, piv, info, ...): raise on getrf's info > 0
_CHECKING = frozenset({la.getrf_p, la.potrf_p, la.trsm_p}) | _INFO_READERS


def once(program: Program) -> Program:
    """``program`` with each error check printed once, after what it checks (see the module docstring)."""
    if not _holds(program):
        return program
    roots: dict[int, Var] = {}
    to_check: set[int] = set()
    _collect(program, roots, {}, to_check, ())
    return _rewrite(program, roots, to_check, set())


def _holds(program: Program) -> bool:
    """Whether ``program`` or a body in it has a check (its primitives found in C: ``census``)."""
    prims = set(primitives(program))
    return not prims.isdisjoint(_CHECKING) or not WITH_BODIES.isdisjoint(prims) and any(
        _holds(b) for e in program.eqns if e.prim in WITH_BODIES for b in _bodies(e))


def _bodies(eqn: Eqn) -> list[Program]:
    return [b for v in eqn.params.values() for b in (v if isinstance(v, tuple) else (v,)) if isinstance(b, Program)]


def _root(a, roots: dict[int, Var]) -> int:
    """The id of the value ``a`` is in the outermost program (a scan body's const input: its operand)."""
    return id(roots.get(id(a), a))


def _scan_consts(eqn: Eqn) -> tuple[list, list]:
    """A scan's const operands and its body's inputs for them."""
    p = eqn.params
    count = 1 if p["length"] is None else 0
    n = p["num_consts"]
    return list(eqn.inputs[count:count + n]), list(p["body"].inputs[:n])


def _surely_runs(eqn: Eqn) -> bool:
    """Whether the body of a scan runs whenever the scan does (a known number of steps, at least one)."""
    return eqn.params.get("length") is not None and eqn.params["length"] > 0


def _collect(prog: Program, roots: dict[int, Var], getrfs: dict[int, int], to_check: set[int], path: tuple) -> None:
    """The getrfs (by their info's root) that a solve or an inverse surely reached from them checks; ``getrfs``:
    each getrf's info root -> the depth of its block; ``path``: whether each block around this one surely runs."""
    for e in prog.eqns:
        if e.prim is la.getrf_p and e.inputs[0].type.ndim == 2:
            getrfs[id(e.outputs[3])] = len(path)
        elif e.prim in _INFO_READERS and isinstance(e.inputs[3], Var) and e.inputs[0].type.ndim == 2:
            depth = getrfs.get(_root(e.inputs[3], roots))
            if depth is not None and all(path[depth:]):
                to_check.add(_root(e.inputs[3], roots))
        elif e.prim in WITH_BODIES:
            scan = e.prim is ctrl.scan_p
            if scan:
                outer, inner = _scan_consts(e)
                for o, i in zip(outer, inner):
                    if isinstance(o, Var):
                        roots[id(i)] = roots.get(id(o), o)
            for body in _bodies(e):
                _collect(body, roots, getrfs, to_check, (*path, scan and _surely_runs(e)))


def _rewrite(prog: Program, roots: dict[int, Var], to_check: set[int], done: set) -> Program:
    """``prog`` with its checks moved or dropped; ``done``: the checks made before it, as (kind, root)."""
    done = set(done)
    eqns = []
    for e in prog.eqns:
        p = e.params
        if e.prim is la.getrf_p and (id(e.outputs[3]) in to_check or p["check"]):
            if not p["check"]:
                e = Eqn(e.prim, e.inputs, e.outputs, Params({**p, "check": True}), e.source)
            done.add(("info", id(e.outputs[3])))
        elif e.prim in _INFO_READERS and isinstance(e.inputs[3], Var) and e.inputs[0].type.ndim == 2:
            key = ("info", _root(e.inputs[3], roots))
            if key in done:
                unchecked = Literal.of(0, e.inputs[3].type.dtype)
                e = Eqn(e.prim, (*e.inputs[:3], unchecked, *e.inputs[4:]), e.outputs, p, e.source)
            done.add(key)
        elif e.prim is la.potrf_p and p["check"]:
            done.add(("diagonal", id(e.outputs[0])))
        elif e.prim is la.trsm_p and p["check"] and not p["unit_diagonal"]:
            key = ("diagonal", _root(e.inputs[0], roots))
            if key in done:
                e = Eqn(e.prim, e.inputs, e.outputs, Params({**p, "check": False}), e.source)
            done.add(key)
        elif e.prim in WITH_BODIES and any(map(_holds, _bodies(e))):  # (a body's again: rare, short)
            new = {k: _rewritten(v, roots, to_check, done) for k, v in p.items()}
            if any(new[k] is not v for k, v in p.items()):
                e = Eqn(e.prim, e.inputs, e.outputs, Params(new), e.source)
        eqns.append(e)
    if all(a is b for a, b in zip(eqns, prog.eqns)):
        return prog
    return Program(prog.inputs, tuple(eqns), prog.outputs, prog.constvars, prog.constvals, prog.name)


def _rewritten(v, roots, to_check, done):
    if isinstance(v, Program):
        return _rewrite(v, roots, to_check, done)
    if isinstance(v, tuple) and any(isinstance(b, Program) for b in v):
        return tuple(_rewritten(b, roots, to_check, done) for b in v)
    return v
