"""Control flow that stays control flow: ``scan``, ``fori_loop``, ``while_loop``, ``cond``, ``switch``
and ``checkpoint``, with JAX's semantics.

Called on concrete arrays outside any trace they simply run. Inside a trace the body is traced
once into a typed sub-program, so a loop of 10,000 steps costs what one step costs to compile, and
the printed code is a Python ``for`` loop (see ``primitives.control``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pullback.errors import TracingError
from pullback.ir.core import Var
from pullback.ir.tracer import (
    Tracer,
    _arg_names,
    argument_leaf_names,
    call_user,
    is_python_scalar,
    located,
    rename,
    trace_closed,
    tracing,
)
from pullback.primitives.control import hoist_effects, make_checkpoint, make_cond, make_scan, make_while
from pullback.tree import LEAF, flatten, unflatten


def _slice_example(x):
    """A stand-in for one step's slice of ``x`` (only its shape and dtype are read)."""
    shape, dtype = (x.ssa.type.shape, x.ssa.type.dtype) if isinstance(x, Tracer) else (np.shape(x), np.asarray(x).dtype)
    if not shape:
        raise TracingError(located("scan: xs must be arrays with a leading axis to scan over, got a 0-d value"))
    return np.empty(shape[1:], dtype)


def block_length(n: int) -> int:
    """The block length of ``checkpoint=True`` over ``n`` steps: the divisor of ``n`` nearest ``sqrt(n)``
    within a factor 1.5 of it (equal blocks: two nested loops of fixed lengths, the steps kept in arrays;
    it stores at most 9% more than ``2 sqrt(n)`` states), else ``ceil(sqrt(n))`` (a shorter last block:
    see ``scan``)."""
    root = math.sqrt(n)
    near = [k for k in range(max(1, math.ceil(root / 1.5)), math.floor(root * 1.5) + 1) if n % k == 0]
    if near:
        return min(near, key=lambda k: (n // k + k, abs(k - root)))
    return math.isqrt(max(n - 1, 0)) + 1


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False,
         checkpoint: int | bool | None = None):
    """``f(carry, x) -> (carry, y)`` over the leading axis of ``xs``; returns ``(carry, ys)``.

    ``init`` and ``xs`` are arrays or tuples, lists and dicts of arrays; ``ys`` stacks each
    step's ``y`` along a new leading axis (``y`` may be None). With ``xs=None``, ``length`` gives
    the number of steps. ``reverse=True`` runs from the last step to the first, as JAX's
    ``lax.scan`` does.

    ``checkpoint=k`` runs the steps in blocks of ``k``, each block checkpointed: reverse mode keeps
    one carry per block and recomputes a block's steps when it gets to it, so it stores about
    ``T / k + k`` states rather than every intermediate of every step, at the cost of running the
    forward steps twice. ``checkpoint=True`` takes ``k`` near ``sqrt(T)``, a divisor of ``T`` where one is
    near enough (``block_length``), so that the blocks are equal and the step prints once per pass. Where
    ``k`` does not divide ``T``, the blocks are one loop too, the last one shorter (``for t in
    range(steps)``, ``steps = min(k, T - i k)``): each block reads its ``k`` rows of the ``xs`` (padded
    with zeros to whole blocks) and writes its ``k`` rows of the ``ys``, so the step prints once per pass
    there as well.

    >>> def cumulative_sum_of_squares(x):
    ...     total, running = pb.scan(lambda c, xi: (c + xi**2, c + xi**2), 0.0, x)
    ...     return total
    >>> float(cumulative_sum_of_squares(np.array([1.0, 2.0, 3.0])))
    14.0
    >>> pb.grad(cumulative_sum_of_squares)(np.array([1.0, 2.0, 3.0])).tolist()
    [2.0, 4.0, 6.0]
    """
    x_leaves, x_tree = flatten(xs)  # xs=None: no leaves
    lengths = {np.shape(x)[0] for x in x_leaves if np.ndim(x)}
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ValueError(located("scan: give xs with a common leading axis, or length when xs is None; "
                                 f"got leading lengths {sorted(lengths)}" if lengths else "scan: give xs or length"))
    (n,) = lengths
    if checkpoint is not None and checkpoint is not False and tracing():
        k = block_length(n) if checkpoint is True else int(checkpoint)
        if k < 1:
            raise ValueError(located(f"scan: checkpoint must be a positive block length, got {checkpoint}"))
        return _scan_blocks(f, init, xs, x_leaves, x_tree, n, reverse, k)
    if not tracing():
        return _scan_python(f, init, xs, x_leaves, x_tree, n, reverse) if n else _scan_empty(f, init, xs)

    body, captures, carry_leaves, carry_tree, y_tree = _traced_step(f, init, x_leaves, x_tree)
    outs = make_scan(body, captures, carry_leaves, x_leaves, length=n, reverse=reverse)
    nk = len(carry_leaves)
    return unflatten(carry_tree, outs[:nk]), unflatten(y_tree, outs[nk:])


def _traced_step(f, init, x_leaves, x_tree, arg_names=None, scope=None):
    """``f(carry, x)`` traced as a scan's body: (the body, the values it captures, the carry's leaves
    and structure, the structure of its ``y``). ``arg_names`` and ``scope`` as ``trace``'s (default: ``f``'s)."""
    from pullback.primitives import lax

    carry_leaves, carry_tree = flatten(init)
    carry_leaves = [lax.full((), c, np.asarray(c).dtype) if is_python_scalar(c) else c for c in carry_leaves]

    def step(carry, x):
        out = call_user(f, carry, x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TracingError(located("scan: the body must return a pair (carry, y)"))
        return out

    carry_ex = unflatten(carry_tree, carry_leaves)
    x_ex = unflatten(x_tree, [_slice_example(x) for x in x_leaves])
    body, captures, (_, (out_carry_tree, y_tree)) = trace_closed(
        step, [carry_ex, x_ex], name="step", arg_names=arg_names or _arg_names(f, 2), scope=scope or f)
    if out_carry_tree != carry_tree:
        raise TracingError(located("scan: the body returns a carry of a different structure than init"))
    nk = len(carry_leaves)
    for i, (a, b) in enumerate(zip(body.in_types[len(captures):len(captures) + nk], body.out_types[:nk])):
        if a != b:
            raise TracingError(located(
                f"scan: carry component {i} enters the body as {a} but the body returns {b}; "
                "the carry must keep its shape and dtype (cast init, e.g. np.float32(0.0))"))
    return body, captures, carry_leaves, carry_tree, y_tree


def _scan_ragged_blocks(f, init, x_leaves, x_tree, n: int, reverse: bool, k: int):
    """``n`` steps of ``f`` in ``ceil(n / k)`` checkpointed blocks, the last one shorter: one loop over the
    blocks, and in each a loop of ``min(k, n - i * k)`` steps, a number known when it runs, so that the
    step is printed once however ``k`` divides ``n``. Each ``xs`` is padded with zeros to the blocks'
    ``ceil(n / k) * k`` rows (the last block's rows past its steps are never read) and each block reads its
    ``k`` rows; each block writes its steps' ``ys`` to its ``k`` rows, those past ``n`` dropped after."""
    from pullback.frontend import numpy as api
    from pullback.primitives import lax

    q = -(-n // k)
    names = _xs_names(x_leaves)
    keys = [f"{name}_block" for name in names]

    def blocked(x, name: str):
        shape = np.shape(x)
        padded = _named(lax.pad(x, (q * k, *shape[1:]), (0,) * len(shape), shape, (1,) * len(shape)),
                        f"{name}_padded")
        return _named(api.reshape(padded, (q, k, *shape[1:])), f"{name}_blocks")

    y_hints: list[str] = []

    def block(carry, part):
        i, x_block = part["block"], [part[key] for key in keys]
        steps = _named(api.minimum(k, n - i * k), "steps")
        body, captures, carry_leaves, carry_tree, y_tree = _traced_step(f, carry, x_block, x_tree)
        y_hints[:] = [_hint(y, "ys") if isinstance(y, Var) else "ys" for y in body.outputs[len(carry_leaves):]]
        outs = make_scan(body, captures, carry_leaves, x_block, length=None, reverse=reverse, count=steps, bound=k)
        nk = len(carry_leaves)
        return unflatten(carry_tree, outs[:nk]), unflatten(y_tree, outs[nk:])

    parts = {"block": _named(lax.iota(np.int64, (q,), 0), "blocks"),
             **{key: blocked(x, name) for key, name, x in zip(keys, names, x_leaves)}}
    part_leaves, part_tree = flatten(parts)
    # the blocks' loop reads its slices of ``parts`` under their keys; its carry (a block's first state) is
    # ``u_block`` (``_block_step``), leaving the user's names to the steps' loop, where the user's lines read them
    step = _block_step(checkpoint(block), f, init)
    body, captures, carry_leaves, carry_tree, y_tree = _traced_step(step, init, part_leaves, part_tree,
                                                                    arg_names=["carry", ""])
    outs = make_scan(body, captures, carry_leaves, part_leaves, length=q, reverse=reverse)
    nk = len(carry_leaves)
    carry, ys = unflatten(carry_tree, outs[:nk]), outs[nk:]
    if not ys:
        return carry, None
    return carry, unflatten(y_tree, [api.reshape(_named(y, f"{h}_blocks"), (q * k, *y.shape[2:]))[:n]
                                     for y, h in zip(ys, y_hints)])


def _xs_names(x_leaves) -> list[str]:
    """The name of each xs (``v``), distinct: the blocks' loop reads ``v_block = v_blocks[t]``."""
    names: list[str] = []
    for x in x_leaves:
        name = base = _hint(x, "xs")
        while name in names:
            name = f"{base}_{len(names)}"
        names.append(name)
    return names


def _block_step(block: Callable, f: Callable, init, xs_names: Sequence[str] = ()) -> Callable:
    """``block(carry, part)`` as the step of the loop over blocks, its carry's leaves printed after the
    user's carry (``u_block`` for the ``u`` of ``def step(u, x)``, ``mu_h_block`` for ``mu_h, S_hh, nll =
    carry``): a block's first state, which the steps' loop inside reads as ``u = u_block``; and the
    leaves of its ``part``, if named, as ``xs_names`` (``v_block``)."""
    carry_names = [f"{h}_block" for h in argument_leaf_names(f, _arg_names(f, 2)[0], flatten(init)[1])]

    def step(carry, part):
        for leaf, hint in [*zip(flatten(carry)[0], carry_names), *zip(flatten(part)[0], xs_names)]:
            if isinstance(leaf, Tracer) and isinstance(leaf.ssa, Var):
                _named(leaf, hint)
        return block(carry, part)

    return step


def _hint(x, default: str) -> str:
    """The name ``x`` prints under, if it has one."""
    return (x.ssa.hint if isinstance(x, Tracer) and isinstance(x.ssa, Var) else "") or default


def _named(x: Tracer, hint: str) -> Tracer:
    """``x``, printed under the name ``hint`` (a value pullback's code made, not the user's)."""
    x.builder.inlined_hints[id(x.ssa)] = hint
    return x


def _scan_blocks(f, init, xs, x_leaves, x_tree, n: int, reverse: bool, k: int):
    """``n`` steps as ``n // k`` checkpointed blocks of ``k`` steps; where ``k`` does not divide ``n``, one loop
    of blocks, the last shorter (``_scan_ragged_blocks``); fewer than ``k`` steps, one checkpointed block."""
    from pullback.frontend import numpy as api

    q, r = divmod(n, k)
    if r and q:
        return _scan_ragged_blocks(f, init, x_leaves, x_tree, n, reverse, k)

    def run(carry, part, steps):
        return scan(f, carry, part, length=steps, reverse=reverse)

    def blocks(carry):
        if not q:
            return carry, None
        names = _xs_names(x_leaves)
        part = None if xs is None else unflatten(x_tree, [
            _named(api.reshape(x[:q * k], (q, k, *x.shape[1:])), f"{name}_blocks") for x, name in zip(x_leaves, names)])
        step = _block_step(checkpoint(lambda c, xb: run(c, xb, k)), f, carry, [f"{name}_block" for name in names])
        carry, ys = scan(step, carry, part, length=q, reverse=reverse)
        if ys is None:
            return carry, None
        leaves, tree = flatten(ys)
        return carry, unflatten(tree, [api.reshape(y, (q * k, *y.shape[2:])) for y in leaves])

    def tail(carry):
        if not r:
            return carry, None
        part = None if xs is None else unflatten(x_tree, [x[q * k:] for x in x_leaves])
        return checkpoint(lambda c, xt: run(c, xt, r))(carry, part)

    if reverse:
        carry, ys_tail = tail(init)
        carry, ys_main = blocks(carry)
    else:
        carry, ys_main = blocks(init)
        carry, ys_tail = tail(carry)
    if ys_main is None or ys_tail is None:
        return carry, ys_main if ys_tail is None else ys_tail
    main_leaves, tree = flatten(ys_main)
    tail_leaves, _ = flatten(ys_tail)
    return carry, unflatten(tree, [api.concatenate([a, b]) for a, b in zip(main_leaves, tail_leaves)])


def _scan_empty(f, init, xs):
    """No steps: the carry is ``init``; the stacked results are empty, shaped by tracing the body."""
    from pullback.api.transforms import jit

    no_ys: list[bool] = []

    def run(init):
        carry, ys = scan(f, init, xs, length=0)
        no_ys.append(ys is None)
        return carry if ys is None else (carry, ys)

    out = jit(run)(init)
    return (out, None) if no_ys[0] else out


def _scan_python(f, init, xs, x_leaves, x_tree, n: int, reverse: bool):
    carry, ys = init, []
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        x = unflatten(x_tree, [x[t] for x in x_leaves]) if xs is not None else None
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys or ys[0] is None:
        return carry, None
    leaves = [flatten(y)[0] for y in ys]
    _, tree = flatten(ys[0])
    return carry, unflatten(tree, [np.stack([y[i] for y in leaves]) for i in range(len(leaves[0]))])


def fori_loop(lower: int, upper: int, body_fun: Callable, init_val: Any):
    """``body_fun(i, val) -> val`` for ``i`` in ``range(lower, upper)``; returns the final ``val``.

    With Python integers as bounds it is a ``scan`` over the step index (a ``for`` loop of a known
    number of steps); with traced bounds (``n`` an argument of the function), a ``while_loop`` over
    ``(i, val)``. Both differentiate in forward and reverse mode. The printed loop carries
    ``body_fun``'s names (``def body(i, q)``: ``q`` and its cotangent ``q_bar``).

    >>> def power(x):  # x ** 5 by a loop
    ...     return pb.fori_loop(0, 4, lambda i, acc: acc * x, x)
    >>> float(power(2.0)), float(pb.grad(power)(2.0))
    (32.0, 80.0)
    """
    if isinstance(lower, Tracer) or isinstance(upper, Tracer):
        def step(c):
            i, val = c
            return i + 1, call_user(body_fun, i, val)  # (converted: arrays it reads from its scope)

        from pullback.primitives import lax

        if any(isinstance(b, Tracer) and np.dtype(b.dtype).kind not in "iu" for b in (lower, upper)):
            raise TracingError(located("fori_loop: the bounds must be integers"))
        start = lower if isinstance(lower, Tracer) else lax.full((), int(lower), upper.dtype)
        i_name, val_name = _arg_names(body_fun, 2)  # the carry's leaves named as ``body_fun`` names them
        leaf_names = [i_name, *argument_leaf_names(body_fun, val_name, flatten(init_val)[1])]
        return traced_while(lambda c: c[0] < upper, step, (start, init_val), leaf_names=leaf_names)[1]
    lower, upper = int(lower), int(upper)
    if not tracing():
        val = init_val
        for i in range(lower, upper):
            val = body_fun(i, val)
        return val
    from pullback.frontend.numpy import integers
    from pullback.primitives import lax

    steps = max(upper - lower, 0)
    index = lax.iota(np.int64, (steps,), 0)
    if lower:
        index = lax.add(index, lower)

    def step(val, i):
        integers.bound(i, lower, upper - 1)  # x[i * b:(i + 1) * b] in range needs no check
        return call_user(body_fun, i, val), None

    # the carry and the index take ``body_fun``'s parameters' names (``def body(i, q)``: ``q``, ``q_bar``)
    i_name, val_name = _arg_names(body_fun, 2)
    body, captures, carry_leaves, carry_tree, _ = _traced_step(step, init_val, [index], LEAF,
                                                               arg_names=[val_name, i_name], scope=body_fun)
    outs = make_scan(body, captures, carry_leaves, [index], length=steps, reverse=False)
    return unflatten(carry_tree, outs[:len(carry_leaves)])


def checkpoint(f: Callable) -> Callable:
    """``f`` whose intermediate values are recomputed in the backward pass rather than kept from the
    forward one (rematerialisation): reverse mode then stores ``f``'s inputs alone. Wrapping a scan's
    step keeps one carry per step instead of every intermediate of every step.

    >>> step = pb.checkpoint(lambda h: np.tanh(2.0 * h))
    >>> g = pb.grad(lambda h: np.sum(step(step(h))))(np.zeros(3))
    >>> g.tolist()  # d/dh tanh(2 tanh(2h)) at 0
    [4.0, 4.0, 4.0]
    """

    @functools.wraps(f)
    def checkpointed(*args):
        if not tracing():
            return f(*args)
        body, captures, out_tree = trace_closed(f, list(args), getattr(f, "__name__", "f"))
        body, drawn = hoist_effects(body)  # random draws: once, not again when recomputed
        leaves = [x for a in args for x in flatten(a)[0]]
        return unflatten(out_tree, make_checkpoint(body, [*drawn, *captures, *leaves]))

    return checkpointed


_rematerialised = checkpoint  # (``while_loop``'s argument of that name hides the function)


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any, checkpoint: bool = False):
    """``while cond_fun(val): val = body_fun(val)``; returns the final ``val``.

    Forward and reverse mode differentiate through it. In reverse mode the loop records each
    step's residuals in Python lists as it runs, and the backward pass walks them in reverse, in a
    ``for`` loop over the steps it counted. ``checkpoint=True`` records the carry alone, once per
    step, and the backward pass recomputes each step's residuals from it (the forward step runs
    twice, for memory of one carry per step). Random draws in the body are made once per forward
    step, and recorded, never drawn again.

    >>> def double_until_big(x):  # the number of steps depends on x
    ...     return pb.while_loop(lambda v: np.sum(v) < 10.0, lambda v: 2.0 * v, x)
    >>> double_until_big(np.ones(2)).tolist()
    [8.0, 8.0]
    >>> out, out_dot = pb.jvp(double_until_big, (np.ones(2),), (np.ones(2),))
    >>> out_dot.tolist()
    [8.0, 8.0]
    >>> pb.grad(lambda x: np.sum(double_until_big(x)))(np.ones(2)).tolist()
    [8.0, 8.0]
    """
    if not tracing():
        val = init_val
        while cond_fun(val):
            val = body_fun(val)
        return val
    return traced_while(cond_fun, body_fun, init_val, checkpoint)


def traced_while(cond_fun: Callable, body_fun: Callable, init_val: Any, checkpoint: bool = False,
                 names: Sequence[str] | None = None, leaf_names: Sequence[str] | None = None):
    """``while_loop`` in a trace; ``names`` names the carry (``[""]`` with a dict carry: its keys, as the
    converted Python ``while`` of ``frontend.control_flow`` names the user's variables). ``leaf_names``,
    given, names each leaf of the carry where the functions are pullback's own (``fori_loop``'s step,
    whose ``i, val = c`` would name them ``i`` and ``val``): the user's names, ``q`` and ``q_bar``."""
    from pullback.primitives import lax

    leaves, tree = flatten(init_val)
    leaves = [lax.full((), c, np.asarray(c).dtype) if is_python_scalar(c) else c for c in leaves]
    init_val = unflatten(tree, leaves)
    cond, cond_caps, cond_tree = trace_closed(cond_fun, [init_val], "cond", arg_names=names)
    if len(cond.outputs) != 1 or cond.out_types[0].shape != () or cond.out_types[0].dtype != np.bool_:
        raise TracingError(located(f"while_loop: cond_fun must return a boolean scalar, got "
                                   f"{', '.join(map(str, cond.out_types))}"))
    step = _rematerialised(body_fun) if checkpoint else body_fun
    body, body_caps, body_tree = trace_closed(step, [init_val], "body", arg_names=names)
    if body_tree != tree or body.out_types != body.in_types[len(body_caps):]:
        raise TracingError(located("while_loop: body_fun must return a value of the structure, shapes and dtypes "
                                   "of init_val"))
    if leaf_names is not None:
        cond, body = (rename(p, {id(v): h for v, h in zip(p.inputs[len(caps):], leaf_names)})
                      for p, caps in ((cond, cond_caps), (body, body_caps)))
    outs = make_while(cond, body, cond_caps, body_caps, leaves)
    return unflatten(tree, outs)


def switch(index: Any, branches: list[Callable], *operands: Any):
    """``branches[clip(index, 0, len(branches) - 1)](*operands)``; only the chosen branch runs (and is
    differentiated).

    >>> def f(i, x):
    ...     return np.sum(pb.switch(i, [np.sin, np.cos, lambda v: v**2], x))
    >>> float(f(2, np.array([3.0]))), pb.grad(f, argnums=1)(2, np.array([3.0])).tolist()
    (9.0, [6.0])
    """
    if not branches:
        raise ValueError(located("switch: give at least one branch"))
    if not isinstance(index, Tracer):  # a value known when tracing: the choice is made now
        return branches[min(max(int(index), 0), len(branches) - 1)](*operands)
    traced = [trace_closed(br, list(operands), getattr(br, "__name__", "branch")) for br in branches]
    trees = {t for _, _, t in traced}
    types = {p.out_types for p, _, _ in traced}
    if len(trees) != 1 or len(types) != 1:
        raise TracingError(located("cond/switch: the branches must return values of the same structure, shapes "
                                   "and dtypes"))
    leaves = [x for a in operands for x in flatten(a)[0]]
    if np.dtype(index.dtype).kind not in "biu" or index.shape != ():
        raise TracingError(located(f"cond/switch: the index must be a boolean or integer scalar, got {index.dtype}"
                                   f"{list(index.shape)}"))
    outs = make_cond(index, [p for p, _, _ in traced], leaves, own=[captures for _, captures, _ in traced])
    return unflatten(traced[0][2], outs)


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any):
    """``true_fun(*operands) if pred else false_fun(*operands)``, with a traced ``pred``: only the
    branch taken runs, and is differentiated (unlike ``np.where``, which computes both).

    >>> def safe_log(x):  # log x, or 0 where x <= 0, without evaluating log there
    ...     return pb.cond(x > 0, np.log, lambda v: 0.0 * v, x)
    >>> float(pb.grad(safe_log)(2.0)), float(pb.grad(safe_log)(-1.0))
    (0.5, 0.0)
    """
    if not isinstance(pred, Tracer):  # a value known when tracing: the choice is made now
        return true_fun(*operands) if pred else false_fun(*operands)
    if pred.dtype != np.bool_:
        raise TracingError(located(f"cond: pred must be a boolean scalar, got {pred.ssa.type}"))
    return switch(pred, [false_fun, true_fun], *operands)
