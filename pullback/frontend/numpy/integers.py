"""Integer scalars affine in traced integers: ``it * b``, ``(it + 1) * b``, ``it % n``.

A traced integer (a minibatch counter passed as an argument, a loop's counter) cannot say how long a
slice is: the program's shapes are fixed when tracing. But ``x[it * b:(it + 1) * b]`` has ``b``
entries whatever ``it`` is. So integer scalar arithmetic (``elementwise``, where NumPy's ``+``, ``-``,
``*``, ``//`` and ``%`` are lowered) records beside each traced result its *form* ``c + sum(k_i v_i)``
over atoms ``v_i``: traced integer scalars of no form themselves (arguments, a loop's counter,
``it % n``, ``it // n``), with the interval of values where one is known (``it % n`` lies in
``0..n - 1`` for ``n > 0``). A slice whose bounds differ by a constant is a window of static length at
a traced start (``dynamic_slice``); a start whose interval fits the axis needs no range check."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pullback.errors import ConcretizationError, TracingError
from pullback.ir.core import Var
from pullback.ir.tracer import Tracer, argument_hint, located
from pullback.primitives import elementwise as ew


@dataclass(frozen=True, slots=True)
class Affine:
    """``const + sum(k * v for v, k in terms)``, in ``lo..hi`` where known (None: unbounded)."""

    terms: tuple[tuple[Var, int], ...]  # (atom, nonzero coefficient), each atom once
    const: int
    lo: int | None = None
    hi: int | None = None

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        coefficients = dict(self.terms)
        for v, k in other.terms:
            coefficients[v] = coefficients.get(v, 0) + sign * k
        lo, hi = (other.lo, other.hi) if sign > 0 else (_neg(other.hi), _neg(other.lo))
        return Affine(tuple((v, k) for v, k in coefficients.items() if k), self.const + sign * other.const,
                      _add(self.lo, lo), _add(self.hi, hi))

    def times(self, c: int) -> Affine:
        lo, hi = _mul(self.lo, c), _mul(self.hi, c)
        return Affine(tuple((v, k * c) for v, k in self.terms if k * c), self.const * c,
                      *((lo, hi) if c >= 0 else (hi, lo)))


def _neg(a: int | None) -> int | None:
    return None if a is None else -a


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _mul(a: int | None, c: int) -> int | None:
    return None if a is None else a * c


def _constant(value: int) -> Affine:
    return Affine((), value, value, value)


def form(x) -> Affine | None:
    """The form of an integer scalar: a Python or NumPy integer's is its value; a traced one's is the
    form recorded when it was computed, else the tracer itself as an atom. None for anything else."""
    if isinstance(x, Tracer):
        if x.shape != () or x.dtype.kind not in "iu":
            return None
        return x.builder.affine.get(x.ssa) or Affine(((x.ssa, 1),), 0)
    if isinstance(x, bool | np.bool_):
        return None
    if isinstance(x, int | np.integer) or (isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "iu"):
        return _constant(int(x))
    return None


def bound(x: Tracer, lo: int, hi: int) -> None:
    """Note that the traced integer scalar ``x`` lies in ``lo..hi`` (a loop's counter)."""
    x.builder.affine[x.ssa] = Affine(((x.ssa, 1),), 0, lo, hi)


def record(prim, xs, out) -> None:
    """Note the form of ``out = prim(*xs)`` where it is an integer scalar affine in its operands'
    atoms (called by ``elementwise`` for every result: cheap when it is not one)."""
    if type(out) is not Tracer or out.ssa.type.shape != () or out.dtype.kind not in "iu":
        return
    forms = [form(x) for x in xs]
    if any(f is None for f in forms):
        return
    found = _form_of(prim, forms, out)
    if found is not None:
        out.builder.affine[out.ssa] = found


def _form_of(prim, forms: list[Affine], out: Tracer) -> Affine | None:
    if prim is ew.add_p:
        return forms[0].plus(forms[1])
    if prim is ew.sub_p:
        return forms[0].plus(forms[1], -1)
    if prim is ew.neg_p:
        return forms[0].times(-1)
    if prim is ew.mul_p:
        a, b = forms
        return b.times(a.const) if not a.terms else a.times(b.const) if not b.terms else None
    if prim in (ew.rem_p, ew.floor_divide_p) and not forms[1].terms and forms[1].const > 0:
        a, n = forms[0], forms[1].const
        if prim is ew.rem_p:
            if a.lo is not None and a.hi is not None and 0 <= a.lo and a.hi < n:
                return a  # already in range: ``%`` changes nothing
            return Affine(((out.ssa, 1),), 0, 0, n - 1)
        lo = None if a.lo is None else a.lo // n
        hi = None if a.hi is None else a.hi // n
        return Affine(((out.ssa, 1),), 0, lo, hi)
    return None


def span(start, stop) -> tuple[Affine, Affine]:
    """The forms of ``start`` and of ``stop - start``, the latter constant: raises where it depends on a
    traced value (a slice or a range of that length has no static shape), naming the arguments."""
    first, last = form(start), form(stop)
    for b, f in ((start, first), (stop, last)):
        if f is None:
            what = b.ssa.type if isinstance(b, Tracer) else type(b).__name__
            raise TracingError(located(f"bounds must be integers (Python's or 0-d traced ones), got {what}"))
    length = last.plus(first, -1)
    if length.terms:
        traced = next(b for b in (stop, start) if isinstance(b, Tracer))
        raise ConcretizationError(located(
            "a slice or range whose length depends on a traced value has no static shape: one of fixed length "
            "at a traced start, x[s:s + b] or np.arange(s, s + b) with b a Python int (x[it * b:(it + 1) * b]), "
            "works" + argument_hint(traced)))
    return first, length


def window(bound: slice, n: int, axis: int) -> tuple[Tracer, int, bool] | slice:
    """A slice with traced bounds of an axis of length ``n``: ``(start, length, check)`` for a window of
    static length at a traced start, or a ``slice`` of Python integers where the bounds' forms are
    constants (``it - it + 2``). Raises where the length depends on a traced value."""
    if bound.step not in (None, 1):
        raise TracingError(located(f"a slice with traced bounds needs step 1, got {bound}: take the window "
                                   "x[s:s + b] first, then step through it (x[s:s + b][::2])"))
    start, length = span(0 if bound.start is None else bound.start, n if bound.stop is None else bound.stop)
    if not start.terms:
        return slice(start.const, start.const + length.const)
    size = max(length.const, 0)
    if size > n:
        raise TracingError(located(f"IndexError: a slice of {size} at a traced start does not fit axis {axis} "
                                   f"of length {n}"))
    if size == 0:
        return slice(0, 0)
    check = not (start.lo is not None and start.hi is not None and 0 <= start.lo and start.hi <= n - size)
    return bound.start, size, check
