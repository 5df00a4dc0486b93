"""Every primitive's JVP rule against finite differences, every transpose rule by the
dot-product test (real and complex). The registries are enumerated: a primitive without
a JVP test, or a linear one without a transpose test, fails the suite."""

from __future__ import annotations

import numpy as np
import pytest
from pullback.testing import check_jvp, check_transpose, check_vjp

import pullback as pb
from pullback import linalg as pla
from pullback.ad.jvp import jvp_rules
from pullback.ad.transpose import transpose_rules
from pullback.api.stages import linearize
from pullback.ir.core import PRIMITIVES
from pullback.ir.tracer import bind
from pullback.primitives import lax
from pullback.primitives import structural as st
from pullback.primitives.linalg import factorizations as la
from tests import sample
from tests.primitives.cases import collect, primitives
from tests.primitives.test_forward import CASES, Case, _arg

# the forward cases with differentiable inputs, plus scalars and second-order-relevant shapes
JVP_CASES = [c for c in CASES if not c.name.startswith(("iota", "eye", "linspace", "shaped"))] + [
    Case("scalar-mixed", lambda x, y: x * np.log(y) + np.log(x * y) * y, ((), ()), positive=True),
    Case("scalar-f32", lambda x: np.tanh(x) * np.exp(x), ((),), "float32"),
    Case("iota", lambda x: x * bind(st.iota_p, dtype=x.dtype, shape=(3, 4), dimension=0), ((3, 4),),
         reference=lambda x: x * np.arange(3.0)[:, None]),
    Case("eye", lambda x: x @ bind(st.eye_p, dtype=x.dtype, shape=(4, 4), k=0), ((3, 4),), reference=lambda x: x),
    Case("linspace", lambda x: x * bind(st.linspace_p, start=-1.0, stop=2.0, num=50, dtype=x.dtype), ((50,),),
         reference=lambda x: x * np.linspace(-1.0, 2.0, 50)),
    Case("max-ties", lambda x: np.maximum(x, x).sum() + x.max(), ((5,),)),
    *collect("JVP_CASES"),
    Case("shaped", lambda x: x * bind(st.shaped_p, function="hanning", args=(6,), kwargs=(), shape=(6,),
                                      dtype=np.dtype(np.float64)), ((6,),), reference=lambda x: x * np.hanning(6)),
]


# a custom_vjp function has reverse mode only, as in JAX (tests/frontend/test_custom.py checks it by finite differences)
REVERSE_ONLY = ("custom-vjp",)


def _args(case, rng):
    return [_arg(rng, s, case.dtype, case.positive) for s in case.shapes]


JVP = sample.cases(JVP_CASES, salt=1)


@pytest.mark.parametrize("case", JVP)
def test_jvp_against_finite_differences(case, rng):
    args = _args(case, rng)
    fn = pb.jit(case.fn) if case.reference else case.fn  # functions that bind primitives need pullback to run
    with np.errstate(all="ignore"):
        if case.name.startswith(REVERSE_ONLY):
            with pytest.raises(pb.TracingError, match="forward-mode"):
                check_jvp(fn, args)
            return
        check_jvp(fn, args)
        check_vjp(fn, args)


def test_every_primitive_has_a_jvp_rule_and_test():
    """Every primitive has a JVP rule and a case, and one in the default run's sample (tests/sample.py)."""
    assert set(PRIMITIVES) == {p.name for p in jvp_rules}
    every = set(PRIMITIVES) - {"custom_lin"}  # custom_lin: see test_forward
    assert every - set().union(*map(primitives, JVP_CASES)) == set()
    assert every - set().union(*map(primitives, sample.kept(JVP))) == set(), "the sample misses a primitive"


C = np.random.default_rng(7).standard_normal((3, 4))
CC = C + 1j * np.random.default_rng(8).standard_normal((3, 4))
P = np.random.default_rng(9).standard_normal((3, 4)) > 0

LINEAR_CASES = [
    Case("neg", lambda x: -x, ((3, 4),)),
    Case("add-sub", lambda x, y: (x + y, x - y, y - x), ((3, 4), (3, 4))),
    Case("mul", lambda x: (x * C, C * x), ((3, 4),)),
    Case("mul-complex", lambda x: (x * CC, CC * x), ((3, 4),), "complex128"),
    Case("div", lambda x: x / (C**2 + 1), ((3, 4),)),
    Case("div-complex", lambda x: x / CC, ((3, 4),), "complex128"),
    Case("select", lambda x, y: np.where(P, x, y), ((3, 4), (3, 4))),
    Case("select-complex", lambda x: np.where(P, x, 0), ((3, 4),), "complex128"),
    Case("real-imag-conj", lambda z: (z.real, z.imag, np.conj(z)), ((3, 4),), "complex128"),
    Case("broadcast", lambda x: (np.broadcast_to(x, (2, 3, 4)), np.broadcast_to(x[:, :1], (3, 4))), ((3, 4),)),
    Case("reshape-transpose", lambda x: (x.reshape(4, 3), x.T, x.reshape(2, 6).T), ((3, 4),), "complex128"),
    Case("slice", lambda x: (x[1:, ::-2], x[0], x[..., 2:3]), ((3, 4),)),
    Case("pad", lambda x: bind(st.pad_p, x, shape=(5, 4), start_indices=(4, 0), limit_indices=(-1, 4),
                               strides=(-2, 2)), ((3, 2),)),
    Case("concatenate", lambda x, y: np.concatenate([x, y, x], axis=1), ((3, 4), (3, 2))),
    Case("diagonal", lambda x: (np.diagonal(x), np.diagonal(x, 1), np.diagonal(x, -1)), ((3, 4),)),
    Case("diag_embed", lambda v: (np.diag(v), np.diag(v, -1)), ((3,),), "complex128"),
    Case("diag_embed-batched", lambda v: bind(st.diag_embed_p, v, shape=(3, 4), offset=1), ((2, 3),)),
    Case("tril-triu", lambda x: (np.tril(x), np.triu(x, 1)), ((2, 4, 4),)),
    Case("convert", lambda x: (x.astype(np.float32), x.astype(np.complex128)), ((3, 4),)),
    Case("convert-f32", lambda x: x.astype(np.float64), ((3, 4),), "float32"),
    Case("sum", lambda x: (x.sum(), x.sum(axis=0), x.sum(axis=(0, 2), keepdims=True)), ((2, 3, 4),)),
    Case("dot", lambda x: (C @ x.T, x @ C.T, np.einsum("ij,kj->ik", C, x)), ((3, 4),)),
    Case("dot-complex", lambda x: (CC @ x.T, x @ CC.T.conj()), ((3, 4),), "complex128"),
    Case("dot-batched", lambda x: np.einsum("bij,jk->bki", x, C.T), ((2, 5, 4),)),
    Case("dot-batched-rhs", lambda x: np.einsum("bij,bjk->bik", np.ones((2, 3, 5)), x), ((2, 5, 4),)),
    Case("tensordot", lambda x: np.tensordot(x, C, axes=([0, 1], [0, 1])), ((3, 4),)),
]


TRI = np.tril(np.random.default_rng(10).standard_normal((3, 3))) + 3 * np.eye(3)
for _left in (True, False):
    for _lower in (True, False):
        for _trans in (0, 1):
            _a = TRI if _lower else TRI.T
            _shape = ((3, 2),) if _left else ((2, 3),)
            _tag = f"{'left' if _left else 'right'}-{'lower' if _lower else 'upper'}-{'NT'[_trans]}"
            _kw = dict(trans=_trans, lower=_lower, side="left" if _left else "right")
            LINEAR_CASES.append(Case(f"trsm-{_tag}", lambda b, a=_a, kw=_kw: pla.solve_triangular(a, b, **kw), _shape))
            LINEAR_CASES.append(Case(f"trmm-{_tag}", lambda b, a=_a, kw=_kw: pla.trmm(a, b, **kw), _shape))
TRI_C = TRI + 1j * np.tril(np.random.default_rng(11).standard_normal((3, 3)))
for _left in (True, False):
    for _trans in (0, 1, 2):
        _shape = ((3, 2),) if _left else ((2, 3),)
        _kw = dict(trans=_trans, lower=True, side="left" if _left else "right")
        _tag = f"{'left' if _left else 'right'}-{'NTC'[_trans]}-complex"
        LINEAR_CASES.append(Case(f"trsm-{_tag}", lambda b, kw=_kw: pla.solve_triangular(TRI_C, b, **kw), _shape,
                                 "complex128"))
        LINEAR_CASES.append(Case(f"trmm-{_tag}", lambda b, kw=_kw: pla.trmm(TRI_C, b, **kw), _shape, "complex128"))
LINEAR_CASES += [  # BLAS's alpha scales the linear operand
    Case("trsm-alpha", lambda b: lax.trsm(TRI, b, lower=True, trans=1, alpha=-0.5), ((3, 2),)),
    Case("trsm-alpha-right-complex", lambda b: lax.trsm(TRI_C, b, left=False, lower=True, trans=2, alpha=2.0),
         ((2, 3),), "complex128"),
    Case("trmm-alpha", lambda b: pla.trmm(TRI.T, b, lower=False, side="right", alpha=-0.5), ((2, 3),)),
    Case("trmm-alpha-complex", lambda b: pla.trmm(TRI_C, b, trans=2, alpha=3.0), ((3, 2),), "complex128"),
]
PERM = np.array([2, 0, 3, 1], dtype=np.int32)
LINEAR_CASES += [
    Case("permute", lambda x: bind(la.permute_p, x, PERM), ((4, 3),)),
    Case("unpermute", lambda x: bind(la.unpermute_p, x, PERM), ((4, 3),), "complex128"),
    Case("add_diagonal", lambda x, v: bind(st.add_diagonal_p, x, v), ((3, 3), (3,)), "complex128"),
    Case("add_transpose", lambda x: bind(st.add_transpose_p, x), ((3, 3),), "complex128"),
    Case("add_diagonal-scalar", lambda x, s: bind(st.add_diagonal_p, x, s), ((3, 3), ()), "complex128"),
]
LINEAR_CASES.append(Case("trsm-batched", lambda b: pla.solve_triangular(np.stack([TRI, 2 * TRI]), b, lower=True),
                         ((2, 3, 4),)))


LINEAR_CASES += collect("LINEAR_CASES")


LINEAR = sample.cases(LINEAR_CASES)


@pytest.mark.parametrize("case", LINEAR)
def test_transpose_dot_product(case, rng):
    check_transpose(case.fn, _args(case, rng))


def test_every_transpose_rule_has_a_test(rng):
    """Each rule is exercised: its primitive appears in a linear case's linear program, and in one of
    the default run's sample (tests/sample.py)."""
    seen, sampled = set(), set()
    kept = set(map(id, sample.kept(LINEAR)))
    for case in LINEAR_CASES:
        program = pb.make_ir(case.fn)(*_args(case, rng))
        split = linearize(program, [True] * len(program.inputs))
        seen |= {e.prim.name for e in split.unknown.eqns}
        if id(case) in kept:
            sampled |= {e.prim.name for e in split.unknown.eqns}
    assert {p.name for p in transpose_rules} - seen == set()
    assert {p.name for p in transpose_rules} - sampled == set(), "the sample misses a rule"


def test_transpose_rule_count_is_documented():
    """The README states the rule counts; keep it true."""
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert f"{len(jvp_rules)} JVP rules" in readme and f"{len(transpose_rules)} transpose rules" in readme
