"""The batching transform, primitive by primitive: every forward and linear case of the registry,
batched over an axis of size 3, against a Python loop over the batch of the unbatched program.
The registry is enumerated: a primitive with operands and no batching rule fails the suite."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb
from pullback.ad.batch import batch, batch_rules
from pullback.backends.compiler import compile_program
from pullback.backends.numpy import backend as numpy_backend
from pullback.ir.core import PRIMITIVES
from pullback.ir.tracer import new_trace
from pullback.ir.verify import verify
from tests import sample
from tests.ad.test_rules import JVP_CASES, LINEAR_CASES
from tests.primitives.cases import make_arg
from tests.primitives.test_forward import CASES

B = 3
NULLARY = {"iota", "eye", "linspace", "shaped", "draw"}  # no operands (a draw's are constants), so never batched


def _unique(cases):
    seen, out = set(), []
    for c in cases:
        key = (c.name, c.dtype)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


# a draw is made once for the whole batch (tests/frontend/test_random.py), not once per member as the loop here
ALL_CASES = _unique([c for c in (*CASES, *JVP_CASES, *LINEAR_CASES) if not c.name.startswith("draw")])


def _compiled(program):
    fn, _ = compile_program(program, numpy_backend)
    return lambda *args: list(fn(*args)) if len(program.outputs) > 1 else [fn(*args)]


def _axes_variants(program) -> list[tuple]:
    """All inputs batched first; then the first input unbatched (when there are others) and the
    rest batched on axis 1 where their rank allows."""
    n = len(program.inputs)
    mixed = tuple(None if (k == 0 and n > 1) else (1 if v.type.ndim >= 1 else 0)
                  for k, v in enumerate(program.inputs))
    return [(0,) * n] + ([mixed] if mixed != (0,) * n else [])


def _check(program, in_axes, rng, case):
    elems = [[make_arg(rng, v.shape, v.dtype.name, case.positive) for _ in range(B)] for v in program.inputs]
    args = [e[0] if a is None else np.stack(e, axis=a) for e, a in zip(elems, in_axes)]
    batched = verify(batch(program, in_axes, B))
    with np.errstate(all="ignore"):
        got = _compiled(batched)(*args)
        run = _compiled(program)
        loop = [run(*[e[0] if a is None else e[b] for e, a in zip(elems, in_axes)]) for b in range(B)]
    for j, g in enumerate(got):
        want = np.stack([np.asarray(out[j]) for out in loop])
        assert g.shape == want.shape and g.dtype == want.dtype, (g.shape, g.dtype, want.shape, want.dtype)
        tol = 1e-4 if want.dtype in (np.float32, np.complex64) else 1e-9
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol, equal_nan=True)


@pytest.fixture(scope="module")
def enclosing_trace():
    """One trace enclosing the module's tests, which bind the batched programs' equations."""
    with new_trace():
        yield


BATCHED = sample.cases(ALL_CASES, ids=lambda c: f"{c.name}-{c.dtype}", salt=2)


@pytest.mark.parametrize("case", BATCHED)
def test_batched_equals_loop(case, rng, enclosing_trace):
    args = [make_arg(rng, s, case.dtype, case.positive) for s in case.shapes]
    program = pb.make_ir(case.fn)(*args)
    for in_axes in _axes_variants(program):
        _check(program, in_axes, rng, case)


def test_every_primitive_has_a_batching_rule():
    missing = {name for name, p in PRIMITIVES.items() if p not in batch_rules} - NULLARY
    assert missing == set()


def test_every_batching_rule_is_exercised(rng):
    """Each rule runs in a batched case (all inputs batched), and in one of the default run's sample
    (tests/sample.py)."""
    called: set[str] = set()
    sampled: set[str] = set()
    kept = set(map(id, sample.kept(BATCHED)))
    saved = dict(batch_rules)

    def recording(prim, rule):
        def run(*args, **params):
            called.add(prim.name)
            return rule(*args, **params)
        return run

    try:
        batch_rules.update({p: recording(p, r) for p, r in saved.items()})
        with new_trace():  # an enclosing trace: NumPy's wrappers are installed once, not per case
            for case in ALL_CASES:
                args = [make_arg(rng, s, case.dtype, case.positive) for s in case.shapes]
                program = pb.make_ir(case.fn)(*args)
                before = set(called)
                called.clear()
                batch(program, (0,) * len(program.inputs), B)
                if id(case) in kept:
                    sampled |= called
                called |= before
    finally:
        batch_rules.update(saved)
    # custom_lin is batched by jacfwd alone, whose refusal tests/frontend/test_custom.py checks
    assert {p.name for p in batch_rules} - called - {"custom_lin"} == set()
    assert {p.name for p in batch_rules} - sampled - {"custom_lin", *NULLARY} == set(), "the sample misses a rule"


def test_no_rule_names_the_primitive():
    from pullback.ad.jvp import defzero
    from pullback.ir.core import Primitive, Program, Var, shape_rules
    from pullback.ir.types import ArrayType

    prim = Primitive("batch_test_unruled")
    shape_rules[prim] = lambda x: x.type
    defzero(prim)
    try:
        x = Var(ArrayType((2,), np.dtype(np.float64)), "x")
        y = Var(ArrayType((2,), np.dtype(np.float64)), "y")
        from pullback.ir.core import Eqn

        program = Program((x,), (Eqn(prim, (x,), (y,)),), (y,))
        with pytest.raises(NotImplementedError, match="batch_test_unruled"):
            batch(program, (0,), 3)
    finally:
        del PRIMITIVES["batch_test_unruled"]
        del shape_rules[prim]
        from pullback.ad.jvp import jvp_rules

        del jvp_rules[prim]
