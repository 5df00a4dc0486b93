"""The eager first call leaves the primal program's naming from the user's source (``trace``'s ``naming``) until
something reads the program: the walk needs no names. Whatever is printed afterwards is byte-identical to what
a compiled first call prints (oracle: the same function differentiated with ``first_call="compiled"``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

import pullback as pb
from tests.regressions.test_random_programs import _loss_of, examples, programs

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import kalman_filter as kf  # noqa: E402


def _step(W, h):
    return np.tanh(W @ h) * 0.5


def helpers(W, h):
    for _ in range(6):
        h = _step(W, h)
    a, b = h[:2], h[2:]
    return np.sum(a * b)


def factored_twice(K, y):
    """Canonical rewrites it (the inverse from the Cholesky factor, not an LU): its new values copy names."""
    A = K + 0.1 * np.eye(K.shape[0])
    L = np.linalg.cholesky(A)
    Ainv = np.linalg.inv(A)
    return np.sum(np.log(np.diag(L))) + y @ Ainv @ y


def scanned(x):
    def step(c, _):
        c = np.sin(c) * 0.9
        return c, None

    c, _ = pb.scan(step, x, None, length=5)
    return np.sum(c)


def _kalman_args():
    A, B, v = kf.simulate(5)
    return (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2)), (0, 1, 2, 3)


K = np.eye(3) * 2 + 0.1
CASES = {
    "kalman": (kf.kalman_nll_unrolled, *_kalman_args()),
    "helpers": (helpers, (np.eye(4) * 0.5, np.linspace(0.1, 0.4, 4)), 0),
    "factored twice": (factored_twice, (K, np.arange(3.0)), 0),
    "scan": (scanned, (np.linspace(0.1, 0.9, 3),), 0),
}


def _primal_stage(g):
    (staged,) = [s for key, s in g._stages.items() if key[0] == "primal"]
    return staged


@pytest.mark.parametrize("case", CASES)
def test_printed_as_by_a_compiled_first_call(case):
    fn, args, argnums = CASES[case]
    walked = pb.differentiate(fn, argnums=argnums, reroll=False, first_call="eager")
    compiled = pb.differentiate(fn, argnums=argnums, reroll=False, first_call="compiled")
    value, grads = walked.value_and_grad(*args)
    deferred = case in ("kalman", "helpers")  # (the canonical rewrite and the loop name at once)
    assert (_primal_stage(walked).naming is not None) == deferred
    want_value, want_grads = compiled.value_and_grad(*args)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for g, w in zip(grads if isinstance(grads, tuple) else (grads,),
                    want_grads if isinstance(want_grads, tuple) else (want_grads,)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    assert str(walked.ir(*args, stage="primal")) == str(compiled.ir(*args, stage="primal"))
    assert walked.source(*args) == compiled.source(*args)
    assert _primal_stage(walked).naming is None


@examples(20, 6)
@given(programs(dtypes=("float64",), constants=True))
def test_random_programs_print_as_by_a_compiled_first_call(p):
    loss = p.traced(_loss_of(p, 0))
    nums = tuple(range(len(p.arguments)))
    walked = pb.differentiate(loss, argnums=nums, reroll=False, first_call="eager")
    compiled = pb.differentiate(loss, argnums=nums, reroll=False, first_call="compiled")
    with np.errstate(all="ignore"):
        walked.value_and_grad(*p.arguments)
    assert str(walked.ir(*p.arguments, stage="primal")) == str(compiled.ir(*p.arguments, stage="primal"))
    assert walked.source(*p.arguments) == compiled.source(*p.arguments)
