"""A reduction of an array the user holds was computed once when tracing and kept as a number, so an
in-place change between calls was not seen (the elementwise use of the same array was: the program reads
it). Two ways in, each a minimal case:

- an array that is a default argument (``def f(x, w=np.arange(4.0))``): ``ir/tracer.py``'s
  ``scope_arrays`` noted closures, globals, ``self``/dict items, not ``__defaults__``/``__kwdefaults__``,
  so ``np.sum(w)`` was NumPy's at the trace (``add t 5.5`` in the program). Fixed: defaults are noted.
- an array made by the trace and kept by the user (a cache filled at the first call, ``self.W =
  np.eye(3)``): ``frontend/eyes.py``'s ``keep_eyes`` makes the array a constant at the trace's end, but
  ``np.sum(w)``, a NumPy scalar (``np.float64`` is a ``float``: ``astype`` took it for a literal), was
  already a number. Fixed: a NumPy scalar a NumPy function made of arrays the trace made is that call in
  the program (``eyes.record_derived``, ``eyes.derived``), reading the constant once the array is kept."""

from __future__ import annotations

import numpy as np

import pullback as pb

X = np.linspace(0.5, 1.5, 4)


def test_a_reduction_of_a_default_argument_follows_its_changes():
    def f(x, w=np.arange(4.0), *, v=np.ones(4)):  # noqa: B008  (the case itself)
        return np.sum(w * x) + np.sum(w) + np.sum(v)

    value = pb.jit(f)
    assert np.isclose(value(X), f(X))
    f.__defaults__[0][0] = 5.0
    f.__kwdefaults__["v"][1] = 3.0
    assert np.isclose(value(X), f(X))


def test_a_reduction_of_an_array_made_by_the_trace_and_kept_follows_its_changes():
    cache: dict = {}

    def f(x):
        if "w" not in cache:
            cache["w"] = np.arange(4.0)
        return np.sum(cache["w"] * x) + np.sum(cache["w"])

    value = pb.jit(f)
    assert np.isclose(value(X), f(X))
    cache["w"][0] = 5.0
    assert np.isclose(value(X), f(X))
