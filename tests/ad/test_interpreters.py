import numpy as np
import pytest

import pullback as pb
from pullback.ad.cse import Clean, cse
from pullback.ad.dce import dce
from pullback.ad.jvp import jvp
from pullback.ad.partial_eval import partial_eval
from pullback.ad.transpose import transpose
from pullback.api import stages as ad
from pullback.ir.core import Eqn, Literal, Params, Program, Var
from pullback.ir.tracer import bind
from pullback.ir.types import ArrayType
from pullback.opt.simplify import simplify
from pullback.primitives import elementwise as ew
from pullback.primitives import structural as st

F3 = ArrayType((3,), np.float64)


def mlp(W1, W2, x):
    h = np.tanh(W1 @ x)
    y = W2 @ h
    return np.sum(y * y) + np.sum(W1[0] ** 2)


ARGS = (np.ones((4, 3)) * 0.1, np.ones((2, 4)) * 0.2, np.arange(3.0))


@pytest.mark.parametrize("wrt", [[True, True, False], [True, False, True], [True, True, True]])
def test_every_stage_verifies(wrt):
    p = pb.verify(pb.make_ir(mlp)(*ARGS))
    j = pb.verify(jvp(p, wrt))
    assert len(j.inputs) == 3 + sum(wrt) and len(j.outputs) == 2
    split = ad.linearize(p, wrt)
    pb.verify(split.known)
    pb.verify(split.unknown)
    pb.verify(ad.transpose_linear(split))
    pb.verify(ad.vjp(p, wrt))
    pb.verify(ad.value_and_grad(p, wrt))


def test_unknown_program_is_linear_in_tangents():
    p = pb.make_ir(mlp)(*ARGS)
    split = ad.linearize(p, [True, True, True])
    # every equation of the linear program reads a tangent-derived value
    derived = {id(v) for v in split.unknown.inputs[split.n_residuals:]}
    for eqn in split.unknown.eqns:
        assert any(id(a) in derived for a in eqn.inputs)
        derived.update(id(v) for v in eqn.outputs)
    assert {e.prim.name for e in split.unknown.eqns} <= {"mul", "add", "sub", "neg", "dot_general", "reduce_sum",
                                                          "slice", "reshape", "integer_pow"} - {"integer_pow"}


def test_zero_tangents_emit_no_code():
    def f(x, y):
        return np.exp(y) * 2.0 + np.sin(x)

    p = pb.make_ir(f)(np.ones(3), np.ones(3))
    j = jvp(p, [True, False])
    # exp(y) has a zero tangent: no equation multiplies by exp(y) except the primal one
    assert [e.prim.name for e in j.eqns].count("exp") == 1
    assert len([e for e in j.eqns if e.prim is ew.mul_p]) == 2  # exp(y)*2 and x_dot*cos(x)
    out = pb.jvp(f, (np.ones(3), np.ones(3)), (np.ones(3), np.zeros(3)))[1]
    np.testing.assert_allclose(out, np.cos(1.0))


def test_zero_output_tangent_is_materialised():
    p = pb.make_ir(lambda x, y: (x * 2, y + 1))(np.ones(3), np.ones(3))
    j = pb.verify(jvp(p, [True, False]))
    assert j.outputs[3].type == F3
    *_, tx, ty = pb.api.transforms.Staged(j)(np.ones(3), np.ones(3), np.ones(3))
    np.testing.assert_array_equal(tx, 2)
    np.testing.assert_array_equal(ty, 0)


def test_partial_eval_splits_known_and_unknown():
    x, y, t, z = Var(F3, "x"), Var(F3, "y"), Var(F3, "t"), Var(F3, "z")
    p = Program((x, y), (Eqn(ew.sin_p, (x,), (t,)), Eqn(ew.mul_p, (t, y), (z,))), (t, z))
    split = partial_eval(p, [False, True], [False, True])
    assert [e.prim for e in split.known.eqns] == [ew.sin_p]
    assert [e.prim for e in split.unknown.eqns] == [ew.mul_p]
    assert split.known.outputs == (t, t) and split.unknown.inputs == (t, y)
    with pytest.raises(ValueError, match="depends on unknown inputs"):
        partial_eval(p, [False, True], [True, False])


def test_transpose_refuses_nonlinear_equations():
    x, y = Var(F3, "x"), Var(F3, "y")
    p = Program((x,), (Eqn(ew.exp_p, (x,), (y,)),), (y,))
    with pytest.raises(pb.TracingError, match="exp is not linear"):
        transpose(p, [True])
    z = Var(F3)
    p2 = Program((x,), (Eqn(ew.mul_p, (x, x), (z,)),), (z,))
    with pytest.raises(TypeError, match="mul of two values"):
        transpose(p2, [True])


def test_transpose_accumulates_fan_out():
    p = pb.make_ir(lambda x: x * 2.0 + x * 3.0 - x)(np.ones(3))
    t = pb.verify(transpose(p, [True]))
    fn = pb.api.transforms.Staged(t)
    np.testing.assert_allclose(fn(np.ones(3)), 4.0)


def test_dce_removes_dead_equations_and_constants():
    c = np.ones(3)
    p = pb.make_ir(lambda x: (x + 1, x * c)[0])(np.ones(3))
    d = pb.verify(dce(p))
    assert [e.prim.name for e in d.eqns] == ["add"] and d.constvars == ()


def test_cse_merges_repeats():
    p = pb.make_ir(lambda x: np.sin(x) * np.sin(x) + np.sin(x))(np.ones(3))
    c = pb.verify(dce(cse(p)))
    assert [e.prim.name for e in c.eqns].count("sin") == 1



def test_cse_after_a_clean_one_keys_only_the_new_equations():
    """A program rewritten after a CSE (some equations new, the others the same objects): the next CSE
    given what the last left (``Clean``) finds what a whole pass finds; no duplicate, the program itself."""
    x, y = Var(F3, "x"), Var(F3, "y")
    a, b, c, d, e, f = (Var(F3) for _ in range(6))
    old = (Eqn(ew.mul_p, (x, y), (a,)), Eqn(ew.sin_p, (a,), (b,)), Eqn(ew.add_p, (b, x), (c,)))
    clean = Clean()
    first = Program((x, y), old, (c,))
    assert cse(first, clean) is first and clean.eqns == set(old)
    # a new equation repeating nothing: no pass over the others, the program returned as it is
    unique = Program((x, y), (*old, Eqn(ew.cos_p, (c,), (d,))), (d,))
    assert cse(unique, clean) is unique and len(clean.eqns) == 4
    # new ones repeating an old one (the commutative product the other way round) and each other
    repeats = (*old, Eqn(ew.mul_p, (y, x), (d,)), Eqn(ew.exp_p, (d,), (e,)), Eqn(ew.exp_p, (a,), (f,)),
               Eqn(ew.add_p, (e, f), (h := Var(F3),)))
    program = Program((x, y), repeats, (h,))
    merged = cse(program, clean)
    whole = cse(program)
    names = ["mul", "sin", "add", "exp", "add"]
    assert [e.prim.name for e in merged.eqns] == [e.prim.name for e in whole.eqns] == names
    assert merged.eqns[-1].inputs == (merged.eqns[3].outputs[0],) * 2
    # a new equation before an old one it repeats: the first is kept, the old one's readers read it
    early = Eqn(ew.sin_p, (a,), (g := Var(F3),))
    program = Program((x, y), (old[0], early, *old[1:]), (c,))
    clean = Clean()
    cse(Program((x, y), old, (c,)), clean)
    merged = cse(program, clean)
    assert merged.eqns[1] is early and merged.eqns[2].inputs == (g, x) and merged.outputs == (c,)
    assert [e.prim.name for e in merged.eqns] == [e.prim.name for e in cse(program).eqns] == ["mul", "sin", "add"]

def test_simplify():
    x = Var(F3, "x")
    one = Var(F3, "one")
    a, b, c, d, e = (Var(F3) for _ in range(5))
    r1, r2 = Var(ArrayType((1, 3), np.float64)), Var(ArrayType((3, 1), np.float64))
    eqns = (
        Eqn(st.broadcast_in_dim_p, (Literal.of(1.0, np.float64),), (one,),
            Params({"shape": (3,), "broadcast_dimensions": ()})),
        Eqn(ew.mul_p, (x, one), (a,)),  # x * ones -> x
        Eqn(ew.add_p, (a, Literal.of(0.0, np.float64)), (b,)),  # + 0 -> x
        Eqn(ew.neg_p, (b,), (c,)),
        Eqn(ew.neg_p, (c,), (d,)),  # -(-x) -> x
        Eqn(st.reshape_p, (d,), (r1,), Params({"new_sizes": (1, 3)})),
        Eqn(st.reshape_p, (r1,), (r2,), Params({"new_sizes": (3, 1)})),
        Eqn(st.reshape_p, (r2,), (e,), Params({"new_sizes": (3,)})),  # reshape chain back -> x
    )
    s = pb.verify(simplify(Program((x,), eqns, (e,))))
    assert s.eqns == () and s.outputs == (x,)


def test_simplify_transpose_of_transpose():
    p = pb.make_ir(lambda x: np.transpose(np.transpose(x, (1, 2, 0)), (2, 0, 1)) + x.T.T)(np.ones((2, 3, 4)))
    assert [e.prim.name for e in simplify(p).eqns] == ["mul"]  # x + x, the transposes gone, is x * 2


def test_simplify_folds_scalar_factors():
    """``x c1 + x c2`` is ``x (c1 + c2)`` and ``(x c1) c2`` is ``x (c1 c2)``: the cotangent of
    ``0.5 * z @ z`` is z itself, and values are unchanged."""
    def f(z, w):
        return (0.5 * z) + (z * 0.5), (w * 3.0) * 2.0 + w, z + z
    z, w = np.arange(3.0), np.arange(3.0, 6.0)
    p = pb.verify(simplify(pb.make_ir(f)(z, w)))
    assert p.outputs[0] is p.inputs[0]  # 0.5 z + 0.5 z: z
    assert [e.prim.name for e in p.eqns] == ["mul", "mul"]  # w * 7, z * 2
    for got, want in zip(pb.jit(f)(z, w), f(z, w)):
        np.testing.assert_array_equal(got, want)
    g = pb.differentiate(lambda z: 0.5 * z @ z).source(z)
    assert "z_bar" not in g and "0.5" in g  # the gradient is z: no cotangent computed


def test_simplify_moves_a_negation_past_a_contraction_and_into_a_scale():
    def f(A, X, a, b):
        N = -A
        return N @ X, X.T @ N, N * 2.0, np.outer(-a, b), B_minus(X, N)

    def B_minus(X, N):
        return X + N @ X  # X - A @ X
    A, X = np.arange(16.0).reshape(4, 4), np.arange(8.0).reshape(4, 2)
    a, b = np.arange(3.0), np.arange(5.0)
    p = pb.verify(simplify(pb.make_ir(f)(A, X, a, b)))
    negated = [e.inputs[0] for e in p.eqns if e.prim is ew.neg_p]
    # the products' results are negated (N * 2 is A * -2.0, X + N @ X is X - A @ X); the outer
    # product, which sums nothing, negates its smaller side
    assert sorted(v.shape for v in negated) == [(2, 4), (3,), (4, 2)]
    assert any(e.prim is ew.sub_p for e in p.eqns)
    out = pb.jit(lambda *args: f(*args))(A, X, a, b)
    for got, want in zip(out, f(A, X, a, b)):
        np.testing.assert_array_equal(got, want)


def test_simplify_keeps_diagonal_matrices_as_vectors():
    def f(K, s):
        A = K + np.exp(s) * np.eye(4)  # K + s I: four additions
        return np.sum(A * A) + np.sum(A * np.eye(4))  # trace(A): no dense identity
    K, s = np.arange(16.0).reshape(4, 4), np.float64(0.3)
    p = pb.verify(simplify(pb.make_ir(f)(K, s)))
    names = [e.prim.name for e in p.eqns]
    assert "eye" not in names and "add_diagonal" in names and "diag_embed" not in names
    g = pb.differentiate(f, argnums=(0, 1))
    code = [line for line in g.source(K, s, program="grad").splitlines() if not line.strip().startswith("#")]
    assert any(".reshape(-1)[::5] +=" in line for line in code) and not any("np.eye" in line for line in code)
    A = K + np.exp(s) * np.eye(4)
    K_bar, s_bar = g.grad(K, s)
    np.testing.assert_allclose(K_bar, 2 * A + np.eye(4), rtol=1e-14)
    np.testing.assert_allclose(s_bar, np.exp(s) * (2 * np.trace(A) + 4), rtol=1e-14)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_simplify_adds_a_large_outer_product_as_a_rank_one_update(dtype):
    def f(A, u, v):
        return A @ A + np.outer(u, v)

    def ger_count(*args):
        return [e.prim.name for e in pb.verify(simplify(pb.make_ir(f)(*args))).eqns].count("ger")

    rng = np.random.default_rng(0)
    n = 300  # 90,000 elements: above the threshold
    A, u, v = (rng.standard_normal(s).astype(dtype) for s in ((n, n), n, n))
    if np.dtype(dtype).kind == "c":
        u = u + 1j * rng.standard_normal(n)
    assert ger_count(A, u, v) == 1 and ger_count(A[:8, :8].copy(), u[:8], v[:8]) == 0
    np.testing.assert_allclose(pb.jit(f)(A, u, v), A @ A + np.outer(u, v), rtol=1e-12)


def test_solves_with_a_checked_cholesky_factor_skip_the_zero_diagonal_check():
    from pullback import linalg as pla

    def gp(K, y):  # the factor and its transpose: the Cholesky raised unless the diagonal is positive
        L = pla.cholesky(K)
        return pla.solve_triangular(L.T, pla.solve_triangular(L, y, lower=True), lower=False)

    def unchecked(K, y):  # cholesky_ex does not raise: its factor's diagonal may hold zeros
        return pla.solve_triangular(pla.cholesky_ex(K)[0], y, lower=True)

    def checks(fn, *args):
        return sum(e.params.get("check", False) for e in simplify(pb.make_ir(fn)(*args)).eqns
                   if e.prim.name == "trsm")

    K, y = np.array([[4.0, 2.0], [2.0, 3.0]]), np.array([1.0, 2.0])
    assert checks(gp, K, y) == 0 and checks(unchecked, K, y) == 1
    np.testing.assert_allclose(pb.jit(gp)(K, y), np.linalg.solve(K, y), rtol=1e-14)
    with pytest.raises(pb.LinAlgError, match="singular"):  # the kept check still fires
        pb.jit(unchecked)(np.array([[0.0, 0.0], [0.0, 1.0]]), y)


def _pad(x, shape, start, stop, axis):
    n = len(shape)
    return bind(st.pad_p, x, shape=shape, start_indices=tuple(start if i == axis else 0 for i in range(n)),
                limit_indices=tuple(stop if i == axis else shape[i] for i in range(n)), strides=(1,) * n)


def test_simplify_joins_pads_of_adjacent_slabs():
    """Zero-padded slabs that tile an axis, added, are their concatenation; slabs covering part
    of it are one pad of their concatenation; slabs that overlap or leave a gap stay sums."""
    def f(a, b, c):
        whole = _pad(b, (5, 2), 1, 4, 0) + _pad(a, (5, 2), 0, 1, 0) + _pad(c, (5, 2), 4, 5, 0)
        part = _pad(a, (5, 2), 1, 2, 0) + _pad(b, (5, 2), 2, 5, 0)
        gap = _pad(a, (5, 2), 0, 1, 0) + _pad(c, (5, 2), 2, 3, 0)
        return whole, part, gap
    args = (np.arange(2.0).reshape(1, 2), np.arange(6.0).reshape(3, 2) + 5, np.array([[-1.0, -2.0]]))
    p = pb.verify(simplify(pb.make_ir(f)(*args)))
    names = [e.prim.name for e in p.eqns]
    assert names.count("concatenate") == 2 and names.count("pad") == 3 and names.count("add") == 1
    whole = next(e for e in p.eqns if e.outputs[0] is p.outputs[0])
    assert whole.prim is st.concatenate_p and whole.inputs == (p.inputs[0], p.inputs[1], p.inputs[2])
    want = [np.zeros((5, 2)) for _ in range(3)]
    a, b, c = args
    want[0][:1], want[0][1:4], want[0][4:] = a, b, c
    want[1][1:2], want[1][2:] = a, b
    want[2][:1], want[2][2:3] = a, c
    for got, w in zip(pb.jit(f)(*args), want):
        np.testing.assert_array_equal(got, w)


def test_simplify_folds_the_sum_of_a_fill():
    """The sum of a broadcast constant is the constant times the count (the cotangent of ``+ b``
    for a broadcast scalar b is the number of entries), empty axes included."""
    def f(x, b):
        return np.sum(x + b), np.sum(np.full((0, 2), 3.0) + x[:2])
    p = pb.verify(simplify(pb.make_ir(lambda b: pb.grad(lambda b: f(np.arange(4.0), b)[0])(b))(2.0)))
    assert not [e for e in p.eqns if e.prim.name == "reduce_sum"]
    assert pb.grad(lambda b: f(np.arange(4.0), b)[0])(2.0) == 4.0
    np.testing.assert_array_equal(pb.jit(f)(np.arange(4.0), 1.0), f(np.arange(4.0), 1.0))
