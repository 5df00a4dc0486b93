"""The eager walk (``first_call="eager"``, ``api.eager``) against the compiled gradient on random programs
(tests/regressions/test_random_programs.py's generator: float64, float32, complex128 and complex64, with
empty and size-1 axes, 0-d arrays and Python scalars, constants made inside the function or captured),
once as drawn and unrolled over a few steps that read one row of a traced array each (``c[k]``: one
kernel per signature serves every step, the row passed as a start). Values and gradients agree to
rounding: 1e-12 of their scale in double precision; the walk's results are fresh arrays."""

from __future__ import annotations

import logging

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import pullback as pb
from tests.api.test_eager import _leaves
from tests.regressions.test_random_programs import _loss_of, examples, programs

DTYPES = ("float64", "float32", "complex128", "complex64")


def _tolerance(dtype: str) -> float:
    return 1e-12 if dtype in ("float64", "complex128") else 2e-5


def _agree(got, want, tol: float) -> None:
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype, (g, w)
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, equal_nan=True)


class _Said(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _fresh(got, held) -> None:
    """The walk's results share memory with no argument or constant, nor with each other (README,
    "Guarantees at the boundary")."""
    leaves = [x for x in _leaves(got) if isinstance(x, np.ndarray)]
    arrays = [x for x in held if isinstance(x, np.ndarray)]
    for i, x in enumerate(leaves):
        assert not any(np.shares_memory(x, a) for a in arrays), "a result shares an argument's memory"
        assert not any(np.shares_memory(x, y) for y in leaves[i + 1:]), "two results share memory"


def _walked_and_compiled(fn, args, argnums):
    walked = pb.differentiate(fn, argnums=argnums, first_call="eager", reroll=False)
    compiled = pb.differentiate(fn, argnums=argnums, first_call="compiled", reroll=False)
    logger, said = logging.getLogger("pullback"), _Said()
    level = logger.level
    logger.addHandler(said)
    logger.setLevel(logging.INFO)
    try:
        with np.errstate(all="ignore"):
            got = walked.value_and_grad(*args)
    finally:
        logger.removeHandler(said)
        logger.setLevel(level)
    assert any("gradient eagerly (eager)" in line for line in said.lines), said.lines  # walked, not compiled
    with np.errstate(all="ignore"):
        return got, compiled.value_and_grad(*args)


@examples(40, 10)
@given(programs(dtypes=DTYPES, max_ops=8, constants=True))
def test_random_programs_walked_as_compiled(p):
    loss = p.traced(_loss_of(p, 0))
    got, want = _walked_and_compiled(loss, p.arguments, tuple(range(len(p.arguments))))
    _agree(got, want, _tolerance(p.dtype))
    _fresh(got, p.inputs)


@examples(30, 8)
@given(programs(dtypes=DTYPES, max_ops=8, constants=True), st.integers(2, 6))
def test_random_programs_unrolled_walked_as_compiled(p, steps):
    loss = p.traced(_loss_of(p, 0))
    real = np.float32 if p.dtype in ("float32", "complex64") else np.float64
    c = np.linspace(0.75, 1.25, steps).astype(real)

    def unrolled(*args):
        *xs, c = args
        total = 0.0
        for k in range(c.shape[0]):  # each step reads its own row of c: one signature for all steps
            total = total + loss(*[x * c[k] if isinstance(x, np.ndarray) or hasattr(x, "shape") else x
                                   for x in xs])
        return total

    args = (*p.arguments, c)
    got, want = _walked_and_compiled(unrolled, args, tuple(range(len(args))))
    _agree(got, want, _tolerance(p.dtype))
    _fresh(got, (*p.inputs, c))
