"""Elementwise chains compiled by Numba: a run of elementwise operations over one shape, and the
sums, maxima and minima that end it, printed as one module-level function under
``@numba.njit(cache=True, error_model="numpy")`` with an explicit loop over the elements, each value a
scalar local: no temporary arrays, one pass over memory where NumPy makes one per operation (and
allocates a temporary for each).

The grouping is ``fusion``'s (one open group per shape, values read outside their group printed
first), with two additions: a reduction of a group's value ends the group (its result, of another
shape, is accumulated in the loop: a scalar for trailing axes, an array otherwise), and a broadcast or
a reshape that only adds or drops axes of one element joins it as an index (``mul_2[i, j]`` read
inside a loop over ``i, j, k``). Operands are read as NumPy broadcasts them (an axis of one element at
index 0); values of the group read after it are stored into arrays the kernel returns.

Which chains (``compile=``): ``"numba"`` every chain of two or more operations; ``"auto"`` those that
a cost model measured on this machine says run faster compiled, by a margin worth a compile
(``worth_compiling``: many operations, reductions over short axes; none in a program where they would
save under ``AUTO_MIN_PROGRAM_SAVED_US`` a call together), without the functions that Numba's
libm computes several times slower than NumPy's vectorised loops (``exp``, ``tanh``: a chain breaks
there, and NumPy computes them, beyond ``AUTO_MAX_TRANSCENDENTAL`` elements); ``"numpy"`` none.
Matrix products and other BLAS calls never join a chain. Under ``"numba"``, an elementwise operation
with no spelling here stays NumPy, said in the log and in a comment above the printed function. Numba
cannot fail on what is printed here short of a bug; if it does, the program
runs as NumPy (``Staged``'s fallback, as for loops).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Callable

import libcst as cst
import numpy as np

from pullback.ad.dce import dce
from pullback.backends import syntax as s
from pullback.backends.fusion import Group, runs
from pullback.ir.core import WITH_BODIES, Eqn, Literal, Params, Primitive, Program, SourceInfo, Var
from pullback.ir.names import RESERVED, Namer
from pullback.log import logger
from pullback.primitives import elementwise as ew
from pullback.primitives import reductions as red
from pullback.primitives import structural as st

chain_p = Primitive("chain", multiple_results=True, registered=False)  # made while printing only
WITH_BODIES.add(chain_p)

# Scalar spellings, which Numba compiles on floats and complex numbers alike.
_CALLS = {
    ew.exp_p: "np.exp", ew.log_p: "np.log", ew.log1p_p: "np.log1p", ew.expm1_p: "np.expm1", ew.sqrt_p: "np.sqrt",
    ew.sin_p: "np.sin", ew.cos_p: "np.cos", ew.tan_p: "np.tan", ew.tanh_p: "np.tanh", ew.sinh_p: "np.sinh",
    ew.cosh_p: "np.cosh", ew.abs_p: "np.abs", ew.sign_p: "np.sign", ew.max_p: "np.maximum", ew.min_p: "np.minimum",
    ew.isnan_p: "np.isnan", ew.isinf_p: "np.isinf", ew.isfinite_p: "np.isfinite", ew.conj_p: "np.conj",
}
_OPERATORS = {ew.add_p: "+", ew.sub_p: "-", ew.mul_p: "*", ew.div_p: "/", ew.pow_p: "**", ew.eq_p: "==",
              ew.ne_p: "!=", ew.lt_p: "<", ew.le_p: "<", ew.gt_p: ">", ew.ge_p: ">="}
_OPERATORS[ew.le_p] = "<="
SPELLED = frozenset({*_CALLS, *_OPERATORS, ew.neg_p, ew.integer_pow_p, ew.select_p})
# Real arguments only (NumPy's and Numba's orders and signs of complex numbers differ).
_REAL_ONLY = frozenset({ew.max_p, ew.min_p, ew.sign_p, ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p, ew.isnan_p, ew.isinf_p,
                        ew.isfinite_p})
REDUCTIONS = frozenset({red.reduce_sum_p, red.reduce_max_p, red.reduce_min_p})
VIEWS = frozenset({st.broadcast_in_dim_p, st.reshape_p})
# ``auto`` chooses by a cost model, nanoseconds per element and microseconds per call, measured (float64,
# 20,000 elements, in cache, Numba 0.68 without SVML, one process on the shared 2-core machine). NumPy's
# transcendental functions are vectorised; Numba calls libm once per element: exp 0.63 against 4.6 ns,
# tanh 1.2 against 12.3; sin, cos and sqrt cost the same in both. Arithmetic: a NumPy pass (a fresh
# result) 0.5, an operation of a compiled loop 0.2. NumPy's sum over a short trailing axis (fewer than
# ``_LONG_AXIS`` elements) or over a leading one runs at about 3.5 ns an element, 0.5 over long rows.
_NUMPY_NS = {ew.exp_p: 0.63, ew.log_p: 0.78, ew.tanh_p: 1.2, ew.log1p_p: 0.96, ew.expm1_p: 0.94, ew.sin_p: 7.0,
             ew.cos_p: 7.2, ew.tan_p: 8.0, ew.sqrt_p: 0.8, ew.pow_p: 10.0}
_NUMBA_NS = {ew.exp_p: 4.6, ew.log_p: 4.4, ew.tanh_p: 12.3, ew.log1p_p: 9.8, ew.expm1_p: 9.1, ew.sin_p: 6.9,
             ew.cos_p: 7.2, ew.tan_p: 8.0, ew.sqrt_p: 0.76, ew.pow_p: 10.0, ew.sinh_p: 10.0, ew.cosh_p: 10.0}
_NUMPY_PASS_NS, _NUMBA_OP_NS, _NUMPY_SLOW_SUM_NS, _LONG_AXIS = 0.5, 0.2, 3.5, 16
_NUMPY_CALL_US, _NUMBA_CALL_US, _NUMBA_OPERAND_US = 1.0, 0.5, 0.2
# A function Numba computes over twice NumPy's time joins no chain over more than this many elements
# (beyond, NumPy computes it between two chains); a chain is compiled where the model saves at least
# ``AUTO_MIN_SAVED_US`` a call (a compile, about half a second, is repaid in 50,000 calls) and a fifth of
# NumPy's time.
AUTO_MAX_TRANSCENDENTAL = 256
AUTO_MIN_SAVED_US = 10.0
# ... and only in a program whose chains save at least this much together: compiling costs 0.3 to 0.5 s
# a chain on an idle machine the first time (3 s at a load of 17), 0.1 s from Numba's cache after.
AUTO_MIN_PROGRAM_SAVED_US = 100.0
# ... and at most this many chains a program, those saving most: a long unrolled program (a fluid simulation
# of 30,000 equations) has hundreds of chains, whose compiles would take minutes of its first call.
AUTO_MAX_CHAINS = 4
# ... and none of more operations than this: LLVM's time grows faster than the function (the unrolled Kalman
# filter's cotangent of B, a sum of 900 small products over 300 steps, took minutes to compile as one chain).
AUTO_MAX_OPERATIONS = 64
# Below this many elements a loop gains little over NumPy's dispatch: an operation this small that reads
# a chain's result waits for the chain rather than closing it (``_waits``).
WAIT_MAX_ELEMENTS = 256


# the functions Numba computes over twice NumPy's time
_SLOW = frozenset(p for p, ns in _NUMBA_NS.items() if ns > 2 * _NUMPY_NS.get(p, _NUMPY_PASS_NS))


def elementwise(eqn: Eqn, mode: str) -> bool:
    """Whether ``eqn`` may be an operation of a chain (of its result's shape) under ``mode``: floating and
    complex operands (bool for a select's predicate), results of those or bool. (Asked of every equation
    of a long program, in one call.)"""
    prim, out = eqn.prim, eqn.outputs[0].type
    if prim not in SPELLED or not out.shape:
        return False
    for k, a in enumerate(eqn.inputs):
        if type(a) is not Var:
            continue
        kind = a.type.dtype.kind  # (types hold canonical NumPy dtypes)
        if kind == "b" and not (prim is ew.select_p and k == 0):
            return False
        if kind not in "fcb" or (kind == "c" and prim in _REAL_ONLY):
            return False
    for v in eqn.outputs:
        if v.type.dtype.kind not in "fcb":
            return False
    return not (mode == "auto" and prim in _SLOW and out.size > AUTO_MAX_TRANSCENDENTAL)


def view_map(eqn: Eqn) -> tuple[int | None, ...] | None:
    """For a broadcast or a reshape that only adds or drops axes of one element: for each axis of the
    operand, the axis of the result whose index it takes (None: index 0); else None."""
    x, out = eqn.inputs[0], eqn.outputs[0].shape
    if not isinstance(x, Var) or np.dtype(x.dtype).kind not in "fcb":
        return None
    if eqn.prim is st.broadcast_in_dim_p:
        dims = eqn.params["broadcast_dimensions"]
        return tuple(d if n == out[d] and n != 1 else None for n, d in zip(x.shape, dims))
    if eqn.prim is st.reshape_p:
        src = [j for j, n in enumerate(x.shape) if n != 1]
        dst = [k for k, n in enumerate(out) if n != 1]
        if [x.shape[j] for j in src] != [out[k] for k in dst]:
            return None
        to = dict(zip(src, dst))
        return tuple(to.get(j) for j in range(len(x.shape)))
    return None


def operations(eqns: list[Eqn]) -> int:
    """The operations of a chain (views aside: they print as indices)."""
    return len([e for e in eqns if e.prim not in VIEWS])


def costs(group: Group) -> tuple[float, float]:
    """The model's microseconds per call of the group's equations printed as NumPy and as one compiled
    loop (see ``_NUMPY_NS``)."""
    size = math.prod(group.shape)
    numpy_us, numba_ns = 0.0, 0.0
    for e in group.eqns:
        if e.prim in VIEWS:
            continue
        if e.prim in REDUCTIONS:
            x, axes = e.inputs[0].shape, sorted(e.params["axes"])
            trailing = axes == list(range(len(x) - len(axes), len(x)))
            long_rows = math.prod([x[k] for k in axes]) >= _LONG_AXIS or len(axes) == len(x)
            per = _NUMPY_PASS_NS if trailing and long_rows else _NUMPY_SLOW_SUM_NS
        else:
            per = _NUMPY_NS.get(e.prim, _NUMPY_PASS_NS)
        numpy_us += _NUMPY_CALL_US + size * per / 1000
        numba_ns += _NUMBA_NS.get(e.prim, _NUMBA_OP_NS)
    made = group.defined | group.reduced
    operands = len({id(a) for e in group.eqns for a in e.inputs if isinstance(a, Var) and id(a) not in made})
    return numpy_us, _NUMBA_CALL_US + _NUMBA_OPERAND_US * operands + size * numba_ns / 1000


def worth_compiling(group: Group, mode: str) -> bool:
    """``auto``'s choice, by the cost model (``costs``); ``numba``: any chain of two operations."""
    n = operations(group.eqns)
    if math.prod(group.shape) == 0 or n < 2:
        return False
    if mode == "numba":
        return True
    if n > AUTO_MAX_OPERATIONS:
        return False
    numpy_us, numba_us = costs(group)
    return numpy_us - numba_us >= max(AUTO_MIN_SAVED_US, 0.2 * numpy_us)


def outline(program: Program, mode: str) -> tuple[Program, list[str]]:
    """``program`` with each chain chosen for Numba (see the module docstring) one ``chain``
    equation, and under ``"numba"`` notes of the elementwise operations that stay NumPy."""
    if mode == "numpy":
        return program, []
    chosen: list[tuple[float, int, Group]] = []  # the model's saving a call, where in ``out``, the chain

    def emit(group: Group, out: list) -> None:
        if worth_compiling(group, mode):
            numpy_us, numba_us = costs(group)
            chosen.append((numpy_us - numba_us, len(out), group))
            out.append(group)  # replaced below: a chain, or its equations
        else:
            out.extend(group.eqns)

    def member(eqn: Eqn, groups: dict) -> bool:
        if elementwise(eqn, mode):
            return True
        if eqn.prim not in VIEWS or eqn.outputs[0].type.ndim == 0 or view_map(eqn) is None:
            return False
        g = groups.get(eqn.outputs[0].shape)
        return g is None or id(eqn.inputs[0]) not in g.defined  # a view of the group's own value: not an index

    def ends(eqn: Eqn, owner: dict) -> Group | None:
        """The group a sum or a max of its value ends (a float's, or a complex's sum)."""
        if eqn.prim not in REDUCTIONS:
            return None
        x = eqn.inputs[0]
        end = owner.get(x) if type(x) is Var else None  # (``runs`` keys its values by themselves)
        kinds = "fc" if eqn.prim is red.reduce_sum_p else "f"
        return end if end is not None and id(x) in end.defined and np.dtype(x.dtype).kind in kinds else None

    out = runs(program, member, emit, ends, _waits, REDUCTIONS)
    notes = _notes(program, mode) if mode == "numba" else []
    kept = sorted(chosen, key=lambda c: -c[0])[:AUTO_MAX_CHAINS] if mode == "auto" else chosen
    if not kept or (mode == "auto" and sum(c[0] for c in kept) < AUTO_MIN_PROGRAM_SAVED_US):
        return program, notes
    compiled = {k for _, k, _ in kept}
    consumers = Counter(id(a) for e in program.eqns for a in e.inputs if isinstance(a, Var))
    consumers.update(id(a) for a in program.outputs if isinstance(a, Var))
    eqns: list[Eqn] = []
    for k, e in enumerate(out):
        if isinstance(e, Group):
            eqns.extend(_chain(e, consumers) if k in compiled else e.eqns)
        else:
            eqns.append(e)
    return dce(Program(program.inputs, tuple(eqns), program.outputs, program.constvars, program.constvals,
                       program.name)), notes


def _waits(eqn: Eqn, involved: list[Group]) -> Group | None:
    """For a small result (at most ``WAIT_MAX_ELEMENTS``), the one open group of larger arrays that the
    equation reads, if any: the equation is printed as NumPy after that group's loop (a gradient's
    ``total_7 * exp`` of 3 x 8 after the loop over 5000 x 3 x 8 that sums ``total_7``), which stays open
    for the operations and reductions that follow; the smaller groups it reads are printed first."""
    out = eqn.outputs[0].type
    for g in involved:
        if g.shape != out.shape:
            break
    else:  # (only groups of its own shape, none larger)
        return None
    size = out.size
    if size > WAIT_MAX_ELEMENTS:
        return None
    larger = [g for g in involved if g.shape != out.shape and math.prod(g.shape) > size]
    return larger[0] if len(larger) == 1 else None


def _notes(program: Program, mode: str) -> list[str]:
    """One note per elementwise operation with no spelling here (``compile="numba"``)."""
    notes, seen = [], set()
    family = {v for v in vars(ew).values() if isinstance(v, Primitive)}
    for e in program.eqns:
        if e.prim in family and e.prim not in SPELLED and e.outputs[0].type.ndim and e.prim not in seen:
            seen.add(e.prim)
            where = f" at {os.path.basename(e.source.filename)}:{e.source.lineno}" if e.source else ""
            notes.append(f"{e.prim.name}{where} stays NumPy: Numba cannot compile it in an elementwise loop")
            logger.info("%s: %s", program.name, notes[-1])
    return notes


def _chain(group: Group, consumers: Counter) -> list[Eqn]:
    """The group as one equation: its operands and the values read outside it (reductions' results
    included) are its body's inputs and outputs, the same vars."""
    inside = Counter(id(a) for e in group.eqns for a in e.inputs if isinstance(a, Var))
    made = group.defined | group.reduced
    operands = {id(a): a for e in group.eqns for a in e.inputs if isinstance(a, Var) and id(a) not in made}
    results = [v for e in group.eqns for v in e.outputs if consumers[id(v)] > inside[id(v)]]
    body = Program(tuple(operands.values()), tuple(group.eqns), tuple(results), name="chain")
    return [Eqn(chain_p, body.inputs, body.outputs, Params({"body": body, "shape": group.shape}),
                group.eqns[-1].source)]


# --- printing ---------------------------------------------------------------------------------------


_NUMBERS: dict[tuple[type, str], str] = {}  # a literal's text, by its type and repr (0.0 and -0.0 differ)


def _number(value) -> str:
    key = (type(value), repr(value))
    if key not in _NUMBERS:
        text = cst.Module([]).code_for_node(s.number(value))
        _NUMBERS[key] = f"({text})" if text.startswith("-") else text
    return _NUMBERS[key]


def _scalar(eqn: Eqn, args: list[str]) -> str:
    """The operation on scalars, as Numba compiles it."""
    p = eqn.prim
    if p in _OPERATORS:
        return f"{args[0]} {_OPERATORS[p]} {args[1]}"
    if p in _CALLS:
        return f"{_CALLS[p]}({', '.join(args)})"
    if p is ew.neg_p:
        return f"-{args[0]}"
    if p is ew.integer_pow_p:
        y = eqn.params["y"]
        return f"{args[0]} * {args[0]}" if y == 2 else f"{args[0]} ** {_number(y)}"
    assert p is ew.select_p
    return f"{args[1]} if {args[0]} else {args[2]}"


def source(eqn: Eqn, name: str, names: Callable[[Var], str],
           comment: Callable[[SourceInfo | None], str | None] = lambda where: None) -> str:
    """The text of the Numba function for a ``chain`` equation: ``names`` gives its operands' and
    results' names (the program's), the loop's scalars are named here; ``comment``, the line above the
    statements of each user line (``# model.py:7  t = ...``)."""
    body, shape = eqn.params["body"], eqn.params["shape"]
    params = [names(v) for v in body.inputs]
    arrays = {id(v): names(v) for v in body.outputs}
    local = Namer(RESERVED | {"np", "numba", name} | set(params) | set(arrays.values()))
    idx = [local.fresh(c) for c in "ijkmnpqrstuvw"[:len(shape)]]
    if len(shape) > len(idx):
        idx += [local.fresh("i") for _ in range(len(shape) - len(idx))]
    r = len(shape)
    pre: list[list[str]] = [[] for _ in range(r + 1)]  # statements before the loop at each depth
    post: list[list[str]] = [[] for _ in range(r + 1)]  # after it
    inner: list[str] = []
    scalars: dict[int, str] = {}  # values of the loop, as scalar names or index expressions
    param = {id(v): n for v, n in zip(body.inputs, params)}

    def read(a) -> str:
        if isinstance(a, Literal):
            return _number(a.value)
        if id(a) in scalars:
            return scalars[id(a)]
        if a.type.ndim == 0:
            return param[id(a)]
        k0 = r - a.type.ndim  # NumPy's broadcasting: the operand's axes are the last
        return f"{param[id(a)]}[{', '.join('0' if n == 1 else idx[k0 + k] for k, n in enumerate(a.shape))}]"

    def index(keep: list[int]) -> str:
        return ", ".join(idx[k] for k in keep)

    said = None
    for e in body.eqns:
        v = e.outputs[0]
        line = comment(e.source) if e.prim not in VIEWS else None
        if line is not None and line != said:
            inner.append(line)
            said = line
        if e.prim in VIEWS:
            x = e.inputs[0]
            if isinstance(x, Literal) or x.type.ndim == 0:
                scalars[id(v)] = read(x)
            else:
                at = ", ".join("0" if k is None else idx[k] for k in view_map(e))
                scalars[id(v)] = f"{param[id(x)]}[{at}]"
        elif e.prim in REDUCTIONS:
            axes, value = sorted(e.params["axes"]), read(e.inputs[0])
            keep = [k for k in range(r) if k not in axes]
            start = {red.reduce_sum_p: "0j" if np.dtype(v.dtype).kind == "c" else "0.0",
                     red.reduce_max_p: "-np.inf", red.reduce_min_p: "np.inf"}[e.prim]
            trailing = keep == list(range(len(keep)))
            out = arrays.get(id(v)) or local.fresh("total")
            acc = local.fresh(out + "_acc") if trailing and keep else out
            if trailing:  # a scalar, from the loop over the first reduced axis on
                pre[len(keep)].append(f"{acc} = {start}")
                if keep:
                    pre[0].append(f"{out} = np.empty({_shape_text(v.shape)}, dtype={_dtype_text(v.dtype)})")
                    post[len(keep)].append(f"{out}[{index(keep)}] = {acc}")
                target = acc
            else:
                fill = "np.zeros" if e.prim is red.reduce_sum_p else "np.full"
                extra = "" if fill == "np.zeros" else f", {start}"
                pre[0].append(f"{out} = {fill}({_shape_text(v.shape)}{extra}, dtype={_dtype_text(v.dtype)})")
                target = f"{out}[{index(keep)}]"
            if e.prim is red.reduce_sum_p:
                inner.append(f"{target} += {value}")
            else:
                op = ">" if e.prim is red.reduce_max_p else "<"
                inner.append(f"if {value} {op} {target} or {value} != {value}:  # NaN propagates, as in NumPy")
                inner.append(f"    {target} = {value}")
            scalars[id(v)] = out
        else:
            scalar = local.fresh(v.hint or _HINTS.get(e.prim, e.prim.name), "t")
            inner.append(f"{scalar} = {_scalar(e, [read(a) for a in e.inputs])}")
            scalars[id(v)] = scalar
    for v in body.outputs:  # values of the loop read after it: stored
        if _reduction_of(body, v) is not None:
            continue
        pre[0].append(f"{arrays[id(v)]} = np.empty({_shape_text(v.shape)}, dtype={_dtype_text(v.dtype)})")
        inner.append(f"{arrays[id(v)]}[{index(list(range(r)))}] = {scalars[id(v)]}")

    used = " ".join(inner + [line for lines in pre + post for line in lines])

    def nest(depth: int) -> list[str]:
        pad = "    " * (depth + 1)
        if depth == r:
            return [pad + line for line in inner]
        counter = idx[depth] if re.search(rf"\b{idx[depth]}\b", used) else "_"  # (an axis only reduced over)
        return [*(pad + line for line in pre[depth]), f"{pad}for {counter} in range({shape[depth]}):",
                *nest(depth + 1), *(pad + line for line in post[depth])]

    lines = [f"def {name}({', '.join(params)}):", *nest(0)]
    results = [scalars[id(v)] if v.type.ndim == 0 else arrays[id(v)] for v in body.outputs]
    lines.append(f"    return {', '.join(results)}")
    return "\n".join(lines) + "\n"


def _reduction_of(body: Program, v: Var) -> Eqn | None:
    return next((e for e in body.eqns if e.prim in REDUCTIONS and any(o is v for o in e.outputs)), None)


def _shape_text(shape: tuple[int, ...]) -> str:
    return cst.Module([]).code_for_node(s.ints(shape))


def _dtype_text(dtype) -> str:
    return cst.Module([]).code_for_node(s.dtype(dtype))


_HINTS = {ew.integer_pow_p: "power", ew.select_p: "chosen"}
