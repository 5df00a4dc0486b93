"""The gradient of a long flat program by walking it, equation by equation, as an eager reverse mode
does (autograd's tape): what ``differentiate`` serves a first call with, instead of differentiating,
printing and compiling the whole program first.

Each equation's derivative still comes from pullback's rules: for each distinct equation *signature*
(primitive, params, input types or literal values, which inputs are differentiated, the user's line),
the one-equation program is linearised and transposed (``stages``) and printed as two kernels by the
normal printer, a forward one (inputs -> outputs and residuals) and a backward one (residuals and
output cotangents -> input cotangents). An unrolled loop repeats a few dozen signatures thousands of
times, so kernels are built once per signature, all of a call's new ones printed into one module
compiled by one ``compile()``, and kept for the process (``KERNELS``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pullback import log
from pullback.ad.jvp import tangent_type
from pullback.api import stages as ad
from pullback.backends.compiler import compile_programs, gc_paused
from pullback.ir.core import WITH_BODIES, Eqn, Literal, Params, Primitive, Program, Var
from pullback.ir.types import ArrayType
from pullback.opt.census import primitives
from pullback.primitives import indexing as ix
from pullback.primitives import structural as st

# How many primal equations a program needs, and how many per distinct signature (as the walk keys its
# kernels), for the first call to be served eagerly (``first_call="auto"``). Measured (CPU, 2 loaded
# cores): a kernel pair costs 0.45 to 1 ms to build, walking an equation forward and back 3 (an elementwise
# chain) to 7 us (the Kalman filter), NumPy's work included; the compiled first call costs 130 (the chain,
# NumPy only) to 400 us (the Kalman filter) per equation, seconds more where Numba compiles chains. So the
# walk pays from about 4 equations per signature; below 1000 equations the compiled first call takes well
# under a second, and the walk would only add to the second call's compile.
MIN_EQUATIONS = 1000
MIN_REPEATS = 4
# Under "auto" the walk serves the later calls of a signature too, until the walks have taken as long as
# compiling the whole gradient should: ski rental, at most twice the better of walking every call and compiling
# at once. The compiled first call costs 80 to 400 us per primal equation (benchmarks/compile_time.py, the
# chain and the Kalman filter: trace, passes, printing, compile()), a later walk 3 to 7 us; so a long program
# run a few times never waits for the whole compile, and one run for long compiles after some dozens of calls.
COMPILE_SECONDS_PER_EQUATION = 100e-6


def compile_estimate(program: Program) -> float:
    """The seconds compiling ``program``'s gradient should take (``COMPILE_SECONDS_PER_EQUATION``)."""
    return COMPILE_SECONDS_PER_EQUATION * len(program.eqns)

_names = itertools.count()


@dataclass(slots=True)
class Kernel:
    """One signature's compiled derivative. ``forward(*inputs)`` returns its computed values (a tuple);
    ``outs`` and ``residuals`` index the pool ``(*inputs, *computed, *consts)``. ``backward(*residuals,
    *output_cotangents)`` likewise, its pool's ``grads`` (one per differentiated input, None: zero)."""

    forward: Callable | None
    single: bool  # forward returns one value, not a tuple
    consts: tuple
    outs: tuple[int, ...]
    residuals: tuple[int, ...]
    backward: Callable | None
    back_single: bool
    back_consts: tuple
    grads: tuple[int | None, ...]
    zeros: tuple  # (shape, dtype) of each output's cotangent, for the outputs that get none
    wrt: tuple[int, ...]  # the differentiated inputs' positions
    out_at: slice | None = field(init=False)  # ``outs`` as a slice of the pool, where they are consecutive
    res_at: slice | None = field(init=False)  # ``residuals`` likewise
    n_args: int = 0  # the forward kernel's arguments
    # forward computes one value, the step's only output, and the pool holds no constants: the walk stores
    # it and takes the residuals from (*arguments, value) without building the pool
    direct: bool = field(init=False)

    def __post_init__(self):
        self.out_at, self.res_at = _run(self.outs), _run(self.residuals)
        self.direct = (self.forward is not None and self.single and not self.consts and self.outs == (self.n_args,)
                       and all(j <= self.n_args for j in self.residuals))


def _run(index: tuple[int, ...]) -> slice | None:
    """``index`` as a slice where its positions are consecutive (the usual case: a kernel computes its
    outputs, then its residuals), so the walk takes them from the pool in one step."""
    if not index:
        return slice(0, 0)
    if all(b == a + 1 for a, b in zip(index, index[1:])):
        return slice(index[0], index[-1] + 1)
    return None


KERNELS: dict[tuple, Kernel] = {}  # signature -> kernel, for the process
built = [0]  # kernels built (pairs or forward-only), for tests and the log


def flat_program(program: Program) -> bool:
    """Whether ``program`` has no equation holding programs (loops, conditionals): what the walk takes."""
    return WITH_BODIES.isdisjoint(primitives(program))  # (counted in C: no Python call per equation)


def _window(eqn: Eqn) -> tuple[Eqn, tuple[int, ...]] | None:
    """A ``slice`` of unit strides as a ``dynamic_slice`` at starts passed as values: an unrolled loop
    slices its data at a new start each step (``v[t]``), one signature for all steps, not one each."""
    key = (eqn.params, eqn.inputs[0].type)
    found = _WINDOWS.get(key)
    if found is None:
        p = eqn.params
        axes = tuple(a for a, (n, lo, hi) in enumerate(zip(key[1].shape, p["start_indices"], p["limit_indices"]))
                     if (lo, hi) != (0, n))
        if not axes or any(stride != 1 for stride in p["strides"]):
            found = _WINDOWS[key] = ((), None)
        else:
            sizes = tuple(p["limit_indices"][a] - p["start_indices"][a] for a in axes)
            starts = tuple(np.int64(p["start_indices"][a]) for a in axes)
            found = _WINDOWS[key] = (starts, Params({"axes": axes, "sizes": sizes, "check": False}))
    starts, params = found
    if params is None:
        return None
    return Eqn(ix.dynamic_slice_p, (eqn.inputs[0], *(Var(_START) for _ in starts)), eqn.outputs, params,
               eqn.source), starts


_WINDOWS: dict[tuple, tuple] = {}  # (slice params, operand type) -> (starts, dynamic_slice params or None)


_START = ArrayType((), np.dtype(np.int64))
# primitive -> the equation with params that vary from step to step as inputs, and their values
PARAMETRIC: dict[Primitive, Callable[[Eqn], tuple[Eqn, tuple] | None]] = {st.slice_p: _window}


def _mini(eqn: Eqn, name: str) -> Program:
    """The one-equation program of ``eqn``: a fresh input per variable operand, literals kept."""
    inputs = [Var(a.type, a.hint) for a in eqn.inputs if type(a) is Var]
    it = iter(inputs)
    ins = tuple(next(it) if type(a) is Var else a for a in eqn.inputs)
    outs = tuple(Var(o.type, o.hint) for o in eqn.outputs)
    return Program(tuple(inputs), (Eqn(eqn.prim, ins, outs, eqn.params, eqn.source),), outs, name=name)


def _plan(program: Program, inputs: Sequence[Var]) -> tuple[Program | None, tuple, list]:
    """``program`` returning only the values it computes (each once), and where each of its outputs is
    in the pool ``(*inputs, *computed, *consts)``: an input passed through, a literal, a computed value."""
    at = {id(v): i for i, v in enumerate(inputs)}
    computed: list[Var] = []
    consts: list = []
    index: list[int] = []
    for a in program.outputs:
        if type(a) is Literal:
            consts.append(np.asarray(a.value, a.dtype)[()])
            index.append(-len(consts))  # fixed below, once the computed values are counted
        elif id(a) in at:
            index.append(at[id(a)])
        else:
            if a not in computed:
                computed.append(a)
            index.append(len(inputs) + computed.index(a))
    base = len(inputs) + len(computed)
    index = [base - i - 1 if i < 0 else i for i in index]
    kept = None if not computed else Program(program.inputs, program.eqns, tuple(computed), program.constvars,
                                              program.constvals, program.name)
    return kept, tuple(consts), index


def build(todo: dict[tuple, tuple[Eqn, tuple[bool, ...]]]) -> None:
    """Build the kernels of the signatures in ``todo`` (each an equation and its inputs' activity),
    compiled together, into ``KERNELS``."""
    if not todo:
        return
    programs: list[Program] = []
    parts = []
    for key, (eqn, active) in todo.items():
        mini = _mini(eqn, f"{eqn.prim.name}_{next(_names)}")
        wrt = [act for a, act in zip(eqn.inputs, active) if type(a) is Var]
        m = len(mini.outputs)
        if any(wrt):
            split = ad.linearize(mini, wrt)
            known, consts, index = _plan(split.known, split.known.inputs)
            back = ad.transpose_linear(split)
            backward, back_consts, grads = _plan(back, back.inputs)
            grads = _none_for_zero(back, backward, back_consts, grads)
            zeros = tuple((v.type.shape, v.type.dtype) for v in back.inputs[split.n_residuals:])
        else:
            known, consts, index = _plan(mini, mini.inputs)
            backward, back_consts, grads, zeros = None, (), [], ()
        parts.append((key, known, consts, index, m, backward, back_consts, grads, zeros,
                      tuple(i for i, w in enumerate(wrt) if w), len(mini.inputs)))
        programs += [p for p in (known, backward) if p is not None]
    fns = iter(compile_programs(programs, fresh=False))  # views, not copies: no kernel writes into its inputs
    for key, known, consts, index, m, backward, back_consts, grads, zeros, wrt, n_args in parts:
        fwd = next(fns) if known is not None else None
        bwd = next(fns) if backward is not None else None
        KERNELS[key] = Kernel(fwd, known is not None and len(known.outputs) == 1, consts, tuple(index[:m]),
                              tuple(index[m:]), bwd, backward is not None and len(backward.outputs) == 1,
                              back_consts, tuple(grads), zeros, wrt, n_args)
        built[0] += 1


def _zero(value) -> bool:
    return not np.any(value)


def _none_for_zero(back: Program, kept: Program | None, consts: tuple, grads: list) -> list:
    """Cotangents that are literal zeros become None: nothing to add."""
    base = len(back.inputs) + (len(kept.outputs) if kept is not None else 0)
    return [None if i is not None and i >= base and _zero(consts[i - base]) else i for i in grads]


def value_and_grads(program: Program, leaves: Sequence[Any], wrt: Sequence[bool],
                    repeats: int = 0) -> tuple[list, list] | None:
    """The values of ``program``'s outputs on ``leaves``, and the cotangents of its inputs in ``wrt``
    (input order) for a cotangent of one on its first output: the program walked forward, kernel by
    kernel, then back. ``repeats``: None, before any kernel is built or run, where the program has fewer
    equations than ``repeats`` per distinct signature (the kernels would not pay: ``MIN_REPEATS``), found
    by the walk's own first pass over the signatures."""
    slot: dict[Var, int] = {}
    values: list[Any] = []
    codes: list[int] = []
    memo: dict[int, int] = {}
    for v, x, w in zip(program.inputs, leaves, wrt):
        slot[v] = len(values)
        values.append(x)
        codes.append(_code(v.type, memo) | bool(w))
    for v, x in zip(program.constvars, program.constvals):
        slot[v] = len(values)
        values.append(x)
        codes.append(_code(v.type, memo) & ~1)
    with gc_paused():  # the tape holds many small tuples: the collector would walk them again and again
        return _walk(program, slot, values, codes, memo, wrt, repeats)


# each type a number, twice its index, one more where it has a tangent: a value's code adds whether it
# is active (its low bit), so a signature is a tuple of small ints, hashed and compared in C
_TYPE_CODES: dict[ArrayType, int] = {}


def _code(t: ArrayType, memo: dict[int, int]) -> int:
    """``t``'s code (``_TYPE_CODES``); ``memo`` keys it by the object for this walk: the program holds it."""
    c = _TYPE_CODES.get(t)
    if c is None:
        c = _TYPE_CODES[t] = 4 * len(_TYPE_CODES) + (2 if tangent_type(t) is not None else 0)
    memo[id(t)] = c
    return c


def _walk(program: Program, slot: dict[Var, int], values: list, codes: list[int], memo: dict[int, int],
          wrt: Sequence[bool], repeats: int):
    """``value_and_grads`` once the inputs and constants have slots: each equation's kernel and slots found
    first (the kernels of new signatures built together), so the walks themselves index flat lists. A
    value's code (``_TYPE_CODES``) has bit 0 set where it is active, bit 1 where its type has a tangent."""
    n_in = len(program.inputs)
    leaves = values[:n_in]
    steps: list = []  # [kernel (or its place in ``pending``, until built), input slots, output slots] per equation
    pending: dict[tuple, tuple[Eqn, tuple[bool, ...]]] = {}
    unbuilt: list[list] = []
    kernels = KERNELS
    # signature -> its kernel, or its place in ``pending``: an unrolled loop repeats each signature, so one
    # lookup (one hash of the key) per equation after its first
    seen: dict[tuple, Kernel | int] = {}
    parametric = PARAMETRIC
    last: list[int] = [-1] * len(values)  # the step that reads each value last: dropped after it, as eager code
    for n, eqn in enumerate(program.eqns):
        rewrite = parametric.get(eqn.prim)
        if rewrite is not None:
            found = rewrite(eqn)
            if found is not None:
                eqn, given = found
                for v, x in zip(eqn.inputs[len(eqn.inputs) - len(given):], given):
                    slot[v] = len(values)
                    values.append(x)
                    codes.append(_code(v.type, memo) & ~1)
                    last.append(-1)
        ins = []
        key = [eqn.prim, eqn.params, eqn.source]
        on = 0
        for a in eqn.inputs:
            if type(a) is Var:
                s = slot[a]
                ins.append(s)
                last[s] = n
                c = codes[s]
                on |= c
                key.append(c)
            else:
                key.append(a)
        on &= 1
        start = len(values)
        for o in eqn.outputs:
            slot[o] = len(values)
            values.append(None)
            last.append(-1)
            c = memo.get(id(o.type))
            if c is None:
                c = _code(o.type, memo)
            codes.append(c | (on & (c >> 1)))
        key = tuple(key)
        k = seen.get(key)
        if k is None:
            k = kernels.get(key)
            if k is None:
                k = len(pending)
                pending[key] = (eqn, tuple(type(a) is Var and bool(codes[slot[a]] & 1) for a in eqn.inputs))
            seen[key] = k
        step = [k, ins, slice(start, len(values))]
        if type(k) is int:
            unbuilt.append(step)
        steps.append(step)
    if len(steps) < repeats * len(seen):
        return None
    build(pending)
    made = [kernels[key] for key in pending]
    for step in unbuilt:
        step[0] = made[step[0]]
    dead: list[list[int] | None] = [None] * len(steps)
    for a in program.outputs:  # kept
        if type(a) is Var:
            last[slot[a]] = -1
    for i, n in enumerate(last):
        if n >= 0:
            d = dead[n]
            if d is None:
                dead[n] = [i]
            else:
                d.append(i)
    tape: list = [None] * len(steps)  # each step's residuals, for the backward walk
    get = values.__getitem__
    for n, (k, ins, outs) in enumerate(steps):  # forward
        args = [*map(get, ins)]
        f = k.forward
        if k.direct:  # one computed value, the step's only output, no constants: stored at once (the common case)
            r = values[outs.start] = f(*args)
            pool = (*args, r) if k.wrt else ()
        else:
            if f is None:
                pool = (*args, *k.consts)
            elif k.single:
                pool = (*args, f(*args), *k.consts)
            else:
                pool = (*args, *f(*args), *k.consts)
            at = k.out_at
            if at is not None:
                values[outs] = pool[at]
            else:
                for s, j in zip(range(outs.start, outs.stop), k.outs):
                    values[s] = pool[j]
        if k.wrt:
            at = k.res_at
            tape[n] = pool[at] if at is not None else [pool[j] for j in k.residuals]
        d = dead[n]
        if d is not None:
            for i in d:
                values[i] = None
    # a 0-d value as the compiled program returns it: a NumPy scalar of its type
    results = [np.asarray(values[slot[a]] if type(a) is Var else a.value, a.dtype)[()] if not a.type.ndim
               else values[slot[a]] for a in program.outputs]
    cts: list[Any] = [None] * len(values)
    first = program.outputs[0]
    if type(first) is Var:
        cts[slot[first]] = np.ones(first.type.shape, first.type.dtype)
    mine = set()  # the slots whose cotangent is an array this walk made by adding: later ones add in place
    for n in range(len(steps) - 1, -1, -1):  # backward
        args = tape[n]
        if args is None:
            continue
        tape[n] = None
        k, ins, outs = steps[n]
        s = outs.start
        if outs.stop - s == 1:
            c = cts[s]
            if c is None:
                continue
            cts[s] = None
            out_cts = (c,)
        else:
            out_cts = cts[outs]
            if all(c is None for c in out_cts):
                continue
            cts[outs] = [None] * len(out_cts)
            out_cts = [np.zeros(*z) if c is None else c for c, z in zip(out_cts, k.zeros)]
        if k.backward is None:  # the cotangents pass through (an addition's)
            back = (*args, *out_cts, *k.back_consts)
        else:
            got = k.backward(*args, *out_cts)
            back = (*args, *out_cts, got, *k.back_consts) if k.back_single else (*args, *out_cts, *got,
                                                                                  *k.back_consts)
        for p, j in zip(k.wrt, k.grads):
            if j is None:
                continue
            s = ins[p]
            g = back[j]
            old = cts[s]
            if old is None:
                cts[s] = g
            elif s in mine:  # no one else holds it: cotangents reach a value only before its equation's turn
                old += g  # in place (a NumPy scalar: a new one)
                cts[s] = old
            else:
                cts[s] = old + g
                mine.add(s)
    grads = []
    for k, (v, w) in enumerate(zip(program.inputs, wrt)):
        if w:
            g = cts[k]
            grads.append(np.zeros(v.type.shape, v.type.dtype) if g is None else g)
    return _owned(results, leaves), _owned(grads, leaves)


def _owned(arrays: list, values: list) -> list:
    """``arrays`` as the compiled program returns them: none a view or another value (the kernels return
    views), none shared with an argument."""
    out, seen = [], set()
    for a in arrays:
        if type(a) is np.ndarray and (a.base is not None or id(a) in seen or any(a is x for x in values)):
            a = a.copy()
        seen.add(id(a))
        out.append(a)
    return out


def log_fallback(why: str) -> None:
    """Say (at DEBUG) why a call that asked for the walk is served by the compiled program."""
    log.logger.debug("gradient served by the compiled program, not eagerly: %s", why)
