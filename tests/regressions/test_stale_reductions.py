"""Open: a reduction of an array the user holds, computed once when tracing and kept as a number, so an
in-place change between calls is not seen (the elementwise use of the same array is: the program reads
it). Two ways in, each a minimal case:

- an array that is a default argument (``def f(x, w=np.arange(4.0))``): ``ir/tracer.py``'s
  ``scope_arrays`` notes closures, globals, ``self``/dict items, not ``__defaults__``/``__kwdefaults__``,
  so ``np.sum(w)`` is NumPy's at the trace (``add t 5.5`` in the program);
- an array made by the trace and kept by the user (a cache filled at the first call, ``self.W =
  np.eye(3)``): ``frontend/eyes.py``'s ``keep_eyes`` makes the array a constant at the trace's end, but
  ``np.sum(w)``, a NumPy scalar, was already a literal (``scalar_var``: recipes are noted for arrays
  only, ``record_derived``).

Each test holds the case; it fails (xfail, strict) until the fix."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb

X = np.linspace(0.5, 1.5, 4)


@pytest.mark.xfail(strict=True, reason="default arguments are not captured: np.sum(w) is folded when tracing")
def test_a_reduction_of_a_default_argument_follows_its_changes():
    def f(x, w=np.arange(4.0)):  # noqa: B008  (the case itself)
        return np.sum(w * x) + np.sum(w)

    value = pb.jit(f)
    assert np.isclose(value(X), f(X))
    f.__defaults__[0][0] = 5.0
    assert np.isclose(value(X), f(X))


@pytest.mark.xfail(strict=True, reason="a kept array's reductions are literals of the trace (eyes.keep_eyes)")
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
