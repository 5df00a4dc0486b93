"""Batching: push a batch axis through every equation of a program (``vmap``).

Before::

    program f(x: f64[3], y: f64[3]):
      t: f64[3] = mul x y
      s: f64[] = reduce_sum[axes=(0,)] t
      return s

After ``batch(f, in_axes=(0, None), size=5)``::

    program f_batch(x: f64[5,3], y: f64[3]):
      y_b: f64[5,3] = broadcast_in_dim[broadcast_dimensions=(1,), shape=(5, 3)] y
      t: f64[5,3] = mul x y_b
      s: f64[5] = reduce_sum[axes=(1,)] t
      return s

Each value carries its batch axis, or None when it does not depend on a batched input (JAX's
convention): unbatched values are computed once, as in the original program. A rule
``batch_rules[prim](args, dims, **params) -> (outs, out_dims)`` sees the equation's operands
(Tracers or Literals) with their batch axes and binds whole-array primitives: the printed
program does not loop over the batch (except where a LAPACK primitive gets a batch of
matrices: its emitter loops over leading batch axes, as for any batched input). A primitive
without a rule raises NotImplementedError. Rules live beside each primitive family's other
rules; the helpers below give their common shapes a one-line form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pullback.ad.ops import lax
from pullback.ir.core import Literal, Primitive, Program, Var
from pullback.ir.tracer import Tracer, bind, new_trace, rename
from pullback.ir.types import ArrayType, StackType

# Broadcasts of the values ``broadcast_in_dim`` cannot broadcast (a stack of a loop's records), by type:
# fn(x, size) -> x with a batch of ``size`` (first in each entry)
broadcasts_of: dict[type, Callable] = {}

# rule(args, dims, **params) -> (outs, out_dims); outs/out_dims are tuples for multiple results
BatchRule = Callable[..., tuple]
batch_rules: dict[Primitive, BatchRule] = {}


# --- helpers ---------------------------------------------------------------------------------


def _is_stack(x) -> bool:
    return isinstance(x, Tracer) and isinstance(x.ssa.type, StackType)


def moveaxis(x, src: int | None, dst: int):
    """``x`` with its batch axis ``src`` moved to ``dst`` (None: unchanged). A batched stack (a loop's
    records) has its batch axis first in each entry, wherever it is asked for."""
    if src is None or src == dst or _is_stack(x):
        return x
    perm = [i for i in range(x.ndim) if i != src]
    perm.insert(dst, src)
    return lax.transpose(x, perm)


def at_front(x, dim: int | None, size: int):
    """``x`` with its batch axis first, a broadcast copy when ``x`` is not batched."""
    if dim is None:
        if _is_stack(x):  # each entry broadcast (a loop over them: see primitives.control)
            return broadcasts_of[StackType](x, size)
        return lax.broadcast_in_dim(x, (size, *x.shape), range(1, x.ndim + 1))
    return moveaxis(x, dim, 0)


def batch_size(args, dims) -> int:
    return next(a.shape[d] for a, d in zip(args, dims) if d is not None)


def unbatched_axis(axis: int, dim: int) -> int:
    """Where axis ``axis`` of an unbatched operand is once batch axis ``dim`` is inserted."""
    return axis if axis < dim else axis + 1


def elementwise(prim: Primitive) -> None:
    """Operands of equal shape (or scalar Literals): batched ones share an axis, unbatched
    arrays are broadcast along it; the output is batched there. Params are unchanged."""

    def rule(args, dims, **params):
        arrays = [(a, d) for a, d in zip(args, dims) if not isinstance(a, Literal)]
        batched = {d for _, d in arrays if d is not None}
        if len(batched) == 1 and all(d is not None for _, d in arrays):
            return bind(prim, *args, **params), batched.pop()
        size = batch_size(args, dims)
        moved = [a if isinstance(a, Literal) else at_front(a, d, size) for a, d in zip(args, dims)]
        return bind(prim, *moved, **params), 0

    batch_rules[prim] = rule


def leading_batch(prim: Primitive) -> None:
    """Primitives that accept leading batch axes of equal shape in every array operand (linear
    algebra, matrix structure): batch axes first, unbatched operands broadcast; each output is
    batched first. Params are unchanged."""

    def rule(args, dims, **params):
        size = batch_size(args, dims)
        moved = [a if isinstance(a, Literal) else at_front(a, d, size) for a, d in zip(args, dims)]
        out = bind(prim, *moved, **params)
        return out, ((0,) * len(out) if prim.multiple_results else 0)

    batch_rules[prim] = rule


def unary_axes(prim: Primitive, param: str, *, removed: bool) -> None:
    """One operand, static axes in ``params[param]`` (a tuple, or an int): the axes are renumbered
    around the batch axis, which stays where it is (``removed``: those axes leave the output)."""

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        value = params[param]
        axes = (value,) if isinstance(value, int) else tuple(value)
        new = tuple(unbatched_axis(a, d) for a in axes)
        params[param] = new[0] if isinstance(value, int) else new
        out_dim = d - sum(a < d for a in new) if removed else d
        return bind(prim, x, **params), out_dim

    batch_rules[prim] = rule


# --- the transform ---------------------------------------------------------------------------


def _batched_type(t: ArrayType | StackType, axis: int | None, size: int) -> ArrayType | StackType:
    if axis is None:
        return t
    if isinstance(t, StackType):  # each entry batched, its batch axis first
        return StackType(_batched_type(t.elem, 0, size))
    shape = list(t.shape)
    shape.insert(axis, size)
    return ArrayType(tuple(shape), t.dtype)


def _normalise(axis: int | None, ndim: int) -> int | None:
    if axis is None:
        return None
    if not -ndim <= axis < ndim:
        raise ValueError(f"batch axis {axis} out of range for a batched value of rank {ndim}")
    return axis % ndim


def batch(program: Program, in_axes: Sequence[int | None], size: int,
          out_axes: Sequence[int | None] | None = None) -> Program:
    """``program`` mapped over a batch axis of length ``size``: input i gets a batch axis at
    ``in_axes[i]`` (None: the same value for every batch element); output j has it at
    ``out_axes[j]`` (default 0; None: the output must not depend on the batch)."""
    if len(in_axes) != len(program.inputs):
        raise ValueError(f"in_axes has {len(in_axes)} entries for {len(program.inputs)} inputs")
    out_axes = [0] * len(program.outputs) if out_axes is None else list(out_axes)
    inputs = []
    hints: dict[int, str] = {}
    with new_trace(replay=True) as builder:
        env: dict[int, tuple[object, int | None]] = {}
        for v, axis in zip(program.inputs, in_axes):
            axis = _normalise(axis, v.type.ndim + 1)
            nv = Var(_batched_type(v.type, axis, size), v.hint) if axis is not None else v
            inputs.append(nv)
            env[id(v)] = (Tracer(nv, builder), axis)
        for v, c in zip(program.constvars, program.constvals):
            builder.consts[id(c)] = (v, c)
            env[id(v)] = (Tracer(v, builder), None)

        def read(a):
            return (a, None) if isinstance(a, Literal) else env[id(a)]

        for eqn in program.eqns:
            builder.source = eqn.source
            args, dims = zip(*map(read, eqn.inputs)) if eqn.inputs else ((), ())
            if all(d is None for d in dims):
                outs = bind(eqn.prim, *args, **eqn.params)
                out_dims = (None,) * len(outs) if eqn.prim.multiple_results else None
            else:
                rule = batch_rules.get(eqn.prim)
                if rule is None:
                    raise NotImplementedError(f"no batching rule for primitive {eqn.prim.name}")
                outs, out_dims = rule(list(args), list(dims), **eqn.params)
            if not eqn.prim.multiple_results:
                outs, out_dims = (outs,), (out_dims,)
            for v, o, d in zip(eqn.outputs, outs, out_dims):
                env[id(v)] = (o, d)
                if v.hint and isinstance(o, Tracer) and not o.ssa.hint:
                    hints.setdefault(id(o.ssa), v.hint)
        builder.source = None
        results = []
        for a, axis in zip(program.outputs, out_axes):
            x, d = read(a)
            if axis is None:
                if d is not None:
                    raise ValueError("an output with out_axes None depends on the batched inputs")
                results.append(x)
                continue
            axis = _normalise(axis, a.type.ndim + 1)
            if isinstance(x, Literal):
                x = lax.full((), x.value, x.dtype)
            results.append(moveaxis(at_front(x, d, size), 0, axis) if d is None else moveaxis(x, d, axis))
        out_atoms = tuple(builder.atom(o) for o in results)
    constvars, constvals = builder.constants()
    result = Program(tuple(inputs), tuple(builder.eqns), out_atoms, constvars, constvals,
                     name=f"{program.name}_batch")
    return rename(result, hints)


def per_element(prim: Primitive) -> None:
    """For primitives whose operation takes no batch axes (SciPy's N-d ``convolve`` would convolve
    along one too, ``solve_banded`` has none): the primitive once per batch element, the results
    stacked. The printed program then holds one call per element, as a loop over the batch would."""
    def rule(args, dims, **params):
        size = batch_size(args, dims)
        moved = [a if isinstance(a, Literal) or d is None else at_front(a, d, 0) for a, d in zip(args, dims)]

        def element(a, d, i):
            if isinstance(a, Literal) or d is None:
                return a
            part = lax.slice_axis(a, 0, i, i + 1)
            return lax.reshape(part, a.shape[1:])

        outs = [bind(prim, *(element(a, d, i) for a, d in zip(moved, dims)), **params) for i in range(size)]
        if prim.multiple_results:
            return tuple(_stack([o[k] for o in outs]) for k in range(len(outs[0]))), (0,) * len(outs[0])
        return _stack(outs), 0

    batch_rules[prim] = rule


def _stack(xs):
    return lax.concatenate([lax.reshape(x, (1, *x.shape)) for x in xs], 0)

