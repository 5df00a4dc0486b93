"""Every primitive, compiled, against NumPy on random inputs; the registry is
enumerated so that a primitive no case exercises fails the suite."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import pullback as pb
from pullback.ir.core import PRIMITIVES
from pullback.ir.tracer import bind
from pullback.primitives import structural as st
from tests import sample
from tests.primitives.cases import Case, collect, make_arg, primitives

_arg = make_arg


def _eye_plus(x):
    return x + bind(st.eye_p, dtype=x.dtype, shape=(3, 4), k=1)


def _iota_plus(x):
    return x + bind(st.iota_p, dtype=x.dtype, shape=(3, 4), dimension=1)


def _linspace_times(x):
    return x * bind(st.linspace_p, start=0.0, stop=1.0, num=50, dtype=x.dtype)


def _tri_times(x):
    return x @ bind(st.shaped_p, function="tri", args=(4,), kwargs=(("k", -1),), shape=(4, 4), dtype=x.dtype)


def _diag_embed_batched(x):
    return bind(st.diag_embed_p, x, shape=(3, 4), offset=1)


def _add_diagonal(x, v):
    return bind(st.add_diagonal_p, x, v)


def _pad(x):
    return bind(st.pad_p, x, shape=(5, 4), start_indices=(4, 0), limit_indices=(-1, 4), strides=(-2, 2))


def _padded(x):
    out = np.zeros((5, 4))
    out[4::-2, 0:4:2] = x
    return out


UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "abs", "sign",
         "negative", "square"]
POSITIVE = {"log", "sqrt", "log1p"}

CASES: list[Case] = []
for _fn in UNARY:
    for _dt in ("float64", "float32", "complex128"):
        CASES.append(Case(f"{_fn}-{_dt}", getattr(np, _fn), ((3, 4),), _dt, _fn in POSITIVE))
CASES += [
    Case("logistic", scipy.special.expit, ((5,),)),
    Case("logistic-f32", scipy.special.expit, ((5,),), "float32"),
    Case("real", np.real, ((3,),), "complex128"),
    Case("imag", lambda z: z.imag, ((3,),), "complex128"),
    Case("conj", np.conj, ((2, 3),), "complex128"),
    Case("real-of-real", np.real, ((3,),)),
    Case("add-broadcast", lambda x, y: x + y, ((3, 1), (4,))),
    Case("sub-scalar", lambda x: 2.5 - x, ((3,),)),
    Case("mul-complex", lambda x, y: x * y, ((3,), (3,)), "complex128"),
    Case("div", lambda x, y: x / y, ((2, 3), (3,)), "float32", True),
    Case("pow", lambda x, y: x**y, ((3,), (3,)), "float64", True),
    Case("pow-literal", lambda x: x**1.5, ((3,),), "float64", True),
    Case("integer_pow", lambda x: x**3 + x**-2, ((4,),), "float64", True),
    Case("maximum", np.maximum, ((3, 4), (4,))),
    Case("minimum", lambda x: np.minimum(x, 0.1), ((5,),)),
    Case("compare", lambda x, y: (x < y, x <= y, x > y, x >= y, x == y, x != y), ((4,), (4,))),
    Case("select", lambda x, y: np.where(x > 0, x, y), ((3, 4), (4,))),
    Case("select-literal", lambda x: np.where(x > 0, x, 0.0), ((5,),)),
    Case("broadcast_to", lambda x: np.broadcast_to(x, (2, 3, 4)), ((3, 1),)),
    Case("zeros_like", lambda x: np.zeros_like(x) + np.full_like(x, 2.5), ((2,),)),
    Case("reshape", lambda x: x.reshape(2, -1).reshape((3, 4)), ((4, 3),)),
    Case("transpose", lambda x: (x.T, np.transpose(x, (2, 0, 1)), np.swapaxes(x, 0, 2), x.mT), ((2, 3, 4),)),
    Case("squeeze-expand", lambda x: np.expand_dims(np.squeeze(x, 1), (0, -1)), ((3, 1, 2),)),
    Case("slice", lambda x: (x[1:, ::2], x[-1], x[..., 1:3], x[None, 0, ::-1], x[2:0:-1, 1]), ((3, 4),)),
    Case("index-to-scalar", lambda x: x[1, 2] * x[-1, 0], ((3, 4),)),
    Case("concatenate", lambda x, y: (np.concatenate([x, y], axis=1), np.stack([x, x], axis=-1)), ((2, 3), (2, 2))),
    Case("diagonal", lambda x: (np.diagonal(x), np.diag(x, 1), np.trace(x), x.diagonal(-1)), ((4, 3),)),
    Case("diagonal-batched", lambda x: np.diagonal(x, axis1=1, axis2=2), ((2, 3, 3),)),
    Case("diag_embed", np.diag, ((4,),)),
    Case("diag_embed", lambda x: (np.diag(x, 1), np.diag(x, -2)), ((3,),)),
    Case("diag_embed-batched", _diag_embed_batched, ((2, 3),),
         reference=lambda x: np.einsum("ij,jk->ijk", x, np.eye(3, 4, 1))),
    Case("pad", _pad, ((3, 2),), reference=lambda x: _padded(x)),
    Case("tril-triu", lambda x: (np.tril(x), np.triu(x, 1), np.tril(x, -1)), ((2, 4, 4),)),
    Case("convert", lambda x: (x.astype(np.float32), x.astype(np.complex128)), ((3,),)),
    Case("weak-scalar-keeps-f32", lambda x: 2.0 * x + 1, ((3,),), "float32"),
    Case("iota", _iota_plus, ((3, 4),), reference=lambda x: x + np.arange(4.0)),
    Case("linspace", _linspace_times, ((50,),), reference=lambda x: x * np.linspace(0.0, 1.0, 50)),
    Case("eye", _eye_plus, ((3, 4),), reference=lambda x: x + np.eye(3, 4, 1)),
    Case("sum", lambda x: (x.sum(), np.sum(x, axis=0), np.sum(x, axis=(0, 2), keepdims=True)), ((2, 3, 4),)),
    Case("mean", lambda x: (x.mean(), np.mean(x, axis=-1), x.mean(axis=0, keepdims=True)), ((3, 4),), "float32"),
    Case("max-min", lambda x: (x.max(), np.max(x, axis=1), np.min(x, axis=0, keepdims=True), np.amin(x)), ((3, 4),)),
    Case("matmul", lambda a, b: a @ b, ((3, 4), (4, 5))),
    Case("matmul-vec", lambda a, b: (a @ b, b @ a.T, b @ b), ((3, 4), (4,))),
    Case("matmul-batched", lambda a, b: a @ b, ((2, 3, 4), (4, 5))),
    Case("matmul-broadcast", lambda a, b: np.matmul(a, b), ((2, 1, 3, 4), (5, 4, 2))),
    Case("matmul-complex", lambda a, b: a @ b.T, ((3, 4), (2, 4)), "complex128"),
    Case("dot-tensordot", lambda a, b: (np.dot(a, b.T), np.tensordot(a, b, axes=([1], [1])), np.outer(a, b)),
         ((3, 4), (2, 4))),
    Case("inner-vdot", lambda a, b: (np.inner(a, b), np.vdot(a, a)), ((3, 4), (2, 4)), "complex128"),
    Case("einsum", lambda a, b, c: (np.einsum("ij,jk,kl->il", a, b, c), np.einsum("ii->i", a @ b @ c),
                                    np.einsum("ij,ij->", a, a), np.einsum("...j,kj", a, b.T)),
         ((3, 4), (4, 5), (5, 3))),
    Case("einsum-batched", lambda a, b: np.einsum("bij,bjk->bki", a, b), ((2, 3, 4), (2, 4, 5))),
    Case("norm", lambda x: (np.linalg.norm(x), np.linalg.norm(x, axis=0)), ((3, 4),), "complex128"),
    Case("add_transpose", lambda x: bind(st.add_transpose_p, x), ((5, 5),), reference=lambda x: x + x.T),
    Case("add_transpose-blocked", lambda x: bind(st.add_transpose_p, x), ((520, 520),), "complex128",
         reference=lambda x: x + x.T),
    Case("add_diagonal-scalar", _add_diagonal, ((4, 4), ()), reference=lambda x, s: x + s * np.eye(4)),
    Case("add_diagonal", _add_diagonal, ((4, 4), (4,)), reference=lambda x, v: x + np.diag(v)),
    Case("add_diagonal-complex", _add_diagonal, ((3, 3), (3,)), "complex128", reference=lambda x, v: x + np.diag(v)),
    *collect("CASES"),
    Case("shaped", _tri_times, ((3, 4),), reference=lambda x: x @ np.tri(4, k=-1)),  # (last: keeps the sample)
]


FORWARD = sample.cases(CASES)


@pytest.mark.parametrize("case", FORWARD)
def test_compiled_equals_numpy(case: Case, rng):
    args = [_arg(rng, s, case.dtype, case.positive) for s in case.shapes]
    ours = pb.jit(case.fn)(*args)
    want = (case.reference or case.fn)(*args)
    ours, want = (ours, want) if isinstance(want, tuple) else ((ours,), (want,))
    assert len(ours) == len(want)
    for o, w in zip(ours, want):
        w = np.asarray(w)
        assert np.shape(o) == w.shape
        assert np.asarray(o).dtype == w.dtype, (np.asarray(o).dtype, w.dtype)
        tol = 1e-5 if w.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(o, w, rtol=tol, atol=tol)
    pb.verify(pb.make_ir(case.fn)(*args))


def test_every_primitive_has_a_case():
    """A primitive that no case above puts into a program fails here; so does one that the default
    run's sample of them (tests/sample.py) leaves out, here or in CuPy's printing test."""
    from tests.backends.test_cupy import PRINTED

    # custom_lin only exists in linear programs (a custom_vjp's linearisation): its transpose is tested there
    every = set(PRIMITIVES) - {"custom_lin"}
    assert every - set().union(*map(primitives, CASES)) == set()
    for params in (FORWARD, PRINTED):
        assert every - set().union(*map(primitives, sample.kept(params))) == set(), "a sample misses a primitive"
