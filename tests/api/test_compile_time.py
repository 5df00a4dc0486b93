"""Compilation stays linear in program length: work counted, not timed (machine speed cannot
fool it), and the fast paths checked against the slow, obvious ones they replace."""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst
import numpy as np
import pytest

import pullback as pb
from pullback.api import stages as ad
from pullback.backends import codegen, render
from pullback.backends import syntax as s
from pullback.backends.numpy import backend as numpy_backend
from pullback.ir.names import Namer
from pullback.ir.tracer import trace
from pullback.opt import pipeline

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
import kalman_filter as kf  # noqa: E402


def chain(steps: int):
    def f(x):
        for _ in range(steps):
            x = np.sin(x) * 0.9 + 0.1 * x
        return np.sum(x)

    return f


def kalman_args(steps: int):
    A, B, v = kf.simulate(steps)
    return A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2)


def test_namer_probes_each_name_once_or_twice():
    namer = Namer(frozenset())
    names = [namer.fresh("x") for _ in range(1000)]
    assert names[:3] == ["x", "x_1", "x_2"] and names[-1] == "x_999"
    assert namer.probes == 1 + 2 * 999  # "x" once; then "x" and the next suffix, never x_1, x_2, ... again


def test_namer_skips_names_taken_by_other_hints():
    namer = Namer(frozenset({"y_1"}))
    got = [namer.fresh("y"), namer.fresh("x_2"), namer.fresh("y"), namer.fresh("x"), namer.fresh("x"),
           namer.fresh("x"), namer.fresh("x"), namer.fresh("y")]
    assert got == ["y", "x_2", "y_2", "x", "x_1", "x_3", "x_4", "y_3"]


def test_printing_a_long_gradient_probes_linearly(monkeypatch):
    made: list[Namer] = []
    calls = [0]

    class Counting(Namer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        def fresh(self, hint, fallback="t"):
            calls[0] += 1
            return super().fresh(hint, fallback)

    monkeypatch.setattr(codegen, "Namer", Counting)
    src = pb.differentiate(chain(200)).source(np.ones(3))
    (namer,) = made
    assert calls[0] > 1000 and src.count("\n") > 1000
    assert namer.probes <= 2 * calls[0]  # quadratic probing made about calls**2 / 8 here


def _sink_by_moving(eqns, boundary, outputs):
    """The obvious quadratic sink: find each first use by a scan, then move the equation there."""
    eqns = list(eqns)
    pinned = {id(a) for a in outputs}
    for i in reversed(range(boundary)):
        eqn = eqns[i]
        if any(id(v) in pinned for v in eqn.outputs):
            continue
        outs = {id(v) for v in eqn.outputs}
        first = next((j for j in range(i + 1, len(eqns)) if any(id(a) in outs for a in eqns[j].inputs)), None)
        if first is not None and first >= boundary:
            eqns.insert(first - 1, eqns.pop(i))
            boundary -= 1
    return tuple(eqns)


@pytest.mark.parametrize("name, fn, args, wrt, moves", [
    ("chain", chain(40), (np.ones(3),), [True], True),
    ("kalman", kf.kalman_nll_unrolled, kalman_args(6), [True] * 4 + [False] * 3, False),
    ("two outputs", lambda x, y: np.sum(np.exp(x) * np.cos(y)) + np.sum(np.tanh(x) ** 2 * np.sin(np.cos(y))),
     (np.ones(3), np.ones(3)), [True, True], True),
])
def test_sink_orders_as_moving_one_by_one(name, fn, args, wrt, moves):
    program, _ = trace(fn, args)
    split = ad.linearize(program, wrt)
    t = ad.transpose_linear(split)
    eqns = split.known.eqns + t.eqns
    outputs = split.known.outputs[:len(program.outputs)] + t.outputs
    got = ad.sink(eqns, len(split.known.eqns), outputs)
    want = _sink_by_moving(eqns, len(split.known.eqns), outputs)
    assert [id(e) for e in got] == [id(e) for e in want]
    assert (got != eqns) == moves  # where something moves, the test sees the order it moves to


def test_render_prints_what_libcst_prints(monkeypatch):
    def by_libcst(statements):  # text items are statements printed (from templates) by this same function
        return "".join(st if isinstance(st, str) else cst.Module([]).code_for_node(cst.IndentedBlock([st]))[1:]
                       for st in statements)

    d = pb.differentiate(kf.kalman_nll, argnums=(0, 1, 2, 3))
    args = kalman_args(3)
    fast = codegen.generate(d.ir(*args, stage="grad"), numpy_backend).source
    monkeypatch.setattr(render, "body", by_libcst)
    slow = codegen.generate(d.ir(*args, stage="grad"), numpy_backend).source
    assert fast == slow and "for t in range" in fast and "if info" in fast  # loops and checks take libcst's path


@pytest.mark.parametrize("statement", [
    s.assign([s.name("a"), s.name("b")], s.call("np.linalg.eigh", s.name("x"), UPLO=cst.SimpleString("'L'"))),
    s.statement(cst.Del(s.tuple_([s.name("a"), s.name("b")], parens=False))),
    s.assign([s.name("y")], s.subscript(s.name("x"), [s.slice_(None, 3, -1), s.number(0), s.slice_(1, None, None)])),
    s.assign([s.name("y")], s.binop(s.neg(s.number(-2.5)), "**", s.binop(s.name("x"), "-", s.number(1j + 2)))),
    s.assign([s.name("z")], s.binop(s.name("x"), "<=", s.tuple_([s.number(1)]))),
    s.assign([s.name("z")], cst.List([cst.Element(s.name("x")), cst.Element(s.number(np.inf))])),
    s.statement(cst.AugAssign(s.subscript(s.name("x"), [s.name("i")]), cst.AddAssign(), s.name("v"))),
    s.statement(cst.Return(s.tuple_([s.name("x"), s.name("y")]))),
    s.assign([s.name("z")], cst.UnaryOperation(cst.Not(), s.name("x"))),
    s.assign([s.name("w")], cst.Call(cst.Name("f"), [cst.Arg(cst.Name("a"), star="*")])),
    cst.SimpleStatementLine([cst.Expr(s.name("a")), cst.Expr(s.name("b"))],
                            leading_lines=[cst.EmptyLine(comment=cst.Comment("# f.py:3  a; b"))]),
    cst.If(s.name("info"), cst.IndentedBlock([s.statement(cst.Raise(s.call("ValueError")))])),
    s.assign([s.name("z")], cst.Comparison(s.name("x"), [cst.ComparisonTarget(cst.IsNot(), s.name("y"))])),
])
def test_render_statement_kinds(statement):
    want = cst.Module([]).code_for_node(cst.IndentedBlock([statement]))[1:]
    assert render.body([statement]) == want


@pytest.mark.parametrize("params", [[], ["x"], ["a", "b_bar", "c"]])
def test_def_line_as_text_is_what_libcst_prints(params):
    body = [s.statement(s.name(codegen._MARKER))]
    func = codegen._function("f_grad", params, {}, body, [])
    assert codegen._def_line("f_grad", params) + render.body(body) == cst.Module(body=[func]).code


def templates_made(monkeypatch) -> list:
    """The template stores made from now on in this test (each ``Templates`` as it is made)."""
    from pullback.backends.templates import Templates

    made: list[Templates] = []
    real_init = Templates.__init__

    def counting_init(self, ctx, shared=None):
        real_init(self, ctx, shared)
        made.append(self)

    monkeypatch.setattr(Templates, "__init__", counting_init)
    return made


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_templates_print_what_emitting_each_equation_prints(monkeypatch, device):
    """Each kind of equation is emitted once and its text reused: the same text as emitting every equation."""
    from pullback.backends.cupy import backend as cupy_backend
    from pullback.backends.templates import Templates

    backend = cupy_backend if device == "cuda" else numpy_backend
    d = pb.differentiate(kf.kalman_nll_unrolled, argnums=(0, 1, 2, 3))
    program = d.ir(*kalman_args(12), stage="grad")
    made = templates_made(monkeypatch)
    monkeypatch.setattr(codegen, "DEL_BYTES", 0)  # a del for every dead local, to see them printed alike
    fast = codegen.generate(program, backend).source
    monkeypatch.setattr(Templates, "get", lambda self, key, eqn, emit: None)  # every equation emitted afresh
    slow = codegen.generate(program, backend).source
    assert fast == slow and "del " in fast and "+=" in fast  # dels and in-place updates take the fast path too
    kinds = made[0].built
    assert 0 < kinds < len(program.eqns) / 8  # the kinds of one step, not one per equation


def test_functions_printed_together_share_templates_and_print_as_alone(monkeypatch):
    """``compile_programs`` (``api.eager``'s kernels) prints its functions with one store of templates: a kind
    of equation emitted for one is reused by the next, for the text each prints alone."""
    from pullback.backends import compiler
    from pullback.ir.core import Program

    fs = [lambda x: np.sum(np.exp(x) * x), lambda x: np.sum(np.exp(x) * x * 2.0), lambda x: np.sum(np.exp(x))]
    programs = []
    for k, f in enumerate(fs):
        p = pb.differentiate(f).ir(np.ones(3), stage="grad")
        programs.append(Program(p.inputs, p.eqns, p.outputs, p.constvars, p.constvals, name=f"g{k}"))
    built = templates_made(monkeypatch)
    alone = [codegen.generate(p, numpy_backend).source for p in programs]
    emitted_alone = sum(t.built for t in built)
    built.clear()
    fns = compiler.compile_programs(programs)
    assert [fn.__pullback_source__ for fn in fns] == alone
    assert 0 < sum(t.built for t in built) < emitted_alone
    x = np.linspace(0.1, 0.9, 3)
    assert np.allclose(fns[0](x)[1], np.exp(x) * (x + 1))


def test_equations_of_a_kind_on_different_lines_share_a_template(monkeypatch):
    """The user's line an error message quotes is a placeholder of the template, filled per equation: two
    checked Cholesky factorisations on two lines are emitted once, and each message names its own line."""
    from pullback.backends.templates import Templates
    from pullback.primitives.linalg import factorizations as la

    def f(a, b):
        la_ = np.linalg.cholesky(a)
        lb = np.linalg.cholesky(b)
        return np.sum(la_) + np.sum(lb)

    made = templates_made(monkeypatch)
    a, b = np.eye(2) * 2.0, np.eye(2) * 3.0
    program, _ = trace(f, (a, b))
    fast = codegen.generate(program, numpy_backend).source
    potrfs = [key for key in made[-1]._cache if key[0] is la.potrf_p]
    monkeypatch.setattr(Templates, "get", lambda self, key, eqn, emit: None)  # every equation emitted afresh
    assert codegen.generate(program, numpy_backend).source == fast
    first = f.__code__.co_firstlineno
    assert len(potrfs) == 1
    assert all(f"test_compile_time.py:{first + k})" in fast for k in (1, 2)), fast  # (long lines broken)


def test_functions_printed_together_make_each_lines_comment_once(monkeypatch):
    """``compile_programs`` makes each user line's comment once for all its functions (an eager kernel's
    forward and backward functions quote the same line), for the text each prints alone."""
    from pullback.backends import compiler
    from pullback.ir.core import Program

    def f(x):
        return np.sum(np.exp(x) * x)

    p = pb.differentiate(f).ir(np.ones(3), stage="grad")
    programs = [Program(p.inputs, p.eqns, p.outputs, p.constvars, p.constvals, name=f"g{k}") for k in range(3)]
    alone = [codegen.generate(q, numpy_backend).source for q in programs]
    lines: list = []
    real = codegen._comment
    monkeypatch.setattr(codegen, "_comment", lambda source: lines.append(source) or real(source))
    fns = compiler.compile_programs(programs)
    assert [fn.__pullback_source__ for fn in fns] == alone
    assert lines and len(lines) == len(set(lines))  # each line once, not once per function


def test_template_names_come_in_the_order_fresh_names_are_drawn():
    """An emitter that asks for fresh names (``u`` of a Cholesky) draws them per equation, as emitting would."""
    def f(a):
        return sum(np.sum(np.linalg.cholesky(a * (k + 2))) for k in range(3))

    src = pb.differentiate(f).source(np.eye(2) * 2.0)
    assert all(f"u_{k}, info" in src for k in (1, 2)) and "u, info" in src


@pytest.mark.parametrize("name, fn, args, argnums", [
    ("chain", chain(40), (np.ones(3),), 0),
    ("kalman", kf.kalman_nll_unrolled, kalman_args(6), (0, 1, 2, 3)),
    ("kalman scan", kf.kalman_nll, kalman_args(6), (0, 1, 2, 3)),
    ("two outputs", lambda x, y: np.sum(np.exp(x) * np.cos(y)) + np.sum(np.tanh(x) ** 2 * np.sin(np.cos(y)
                                                                                               * np.eye(3))),
     (np.ones(3), np.ones((3, 3))), (0, 1)),
])
def test_simplify_rereads_only_what_changed_and_finds_the_same_program(monkeypatch, name, fn, args, argnums):
    """Steps after the first rewrite only the equations whose reads changed (``Settled``): the same
    gradient program as rewriting every equation on every step, for a fraction of the rewrites."""
    from pullback.opt import simplify as simp

    visits = [0]
    real_visit, real_step = simp._visit, simp._step

    def counting_visit(*a):
        visits[0] += 1
        return real_visit(*a)

    monkeypatch.setattr(simp, "_visit", counting_visit)
    fast = str(pb.differentiate(fn, argnums=argnums).ir(*args, stage="grad"))
    fast_visits, visits[0] = visits[0], 0
    monkeypatch.setattr(simp, "_step", lambda program, settled=None: real_step(program))  # every equation, every step
    full = str(pb.differentiate(fn, argnums=argnums).ir(*args, stage="grad"))
    assert fast == full
    assert fast_visits < 0.7 * visits[0]


def test_shape_rules_answer_each_question_once(monkeypatch):
    """Recording an equation re-derives its types; an unrolled loop asks the same few questions."""
    from pullback.ir import core
    from pullback.primitives import contractions as con

    monkeypatch.setattr(core, "_KNOWN_TYPES", {})
    calls = [0]
    rule = core.shape_rules[con.dot_general_p]

    def counting(*args, **params):
        calls[0] += 1
        return rule(*args, **params)

    monkeypatch.setitem(core.shape_rules, con.dot_general_p, counting)
    unrolled = pb.differentiate(kf.kalman_nll_unrolled, argnums=(0, 1, 2, 3), reroll=False)
    program = unrolled.ir(*kalman_args(20), stage="grad")
    products = sum(e.prim is con.dot_general_p for e in program.eqns)
    assert products > 500 and calls[0] < 60
    x = np.ones((2, 3))
    for _ in range(2):  # a wrong question is asked again, and answered with the error again
        with pytest.raises(pb.TracingError, match="size mismatch"):
            pb.make_ir(lambda a: a @ a)(x)


@pytest.mark.parametrize("fn, args", [(chain(20), (np.ones(3),)), (kf.kalman_nll_unrolled, kalman_args(5))])
def test_one_structure_pass_per_gradient(monkeypatch, fn, args):
    """The passes that look at the whole program (structure, contraction order) run once, on the
    finished gradient: the steps that build it only simplify and share, and find the same program
    as optimising fully at every step."""
    argnums = tuple(range(4)) if fn is kf.kalman_nll_unrolled else 0
    calls = [0]
    real_structure, real_optimize = pipeline.structure, pipeline.optimize

    def counting(program):
        calls[0] += 1
        return real_structure(program)

    monkeypatch.setattr(pipeline, "structure", counting)
    once = str(pb.differentiate(fn, argnums=argnums).ir(*args, stage="grad"))
    assert calls[0] == 1
    fully = lambda program, settled=None, final=True: real_optimize(program, settled)  # noqa: E731
    monkeypatch.setattr(ad, "optimize", fully)  # the stages' own calls
    monkeypatch.setattr(pipeline, "optimize", fully)  # and the pipeline's, on loop bodies
    assert str(pb.differentiate(fn, argnums=argnums).ir(*args, stage="grad")) == once
    assert calls[0] > 2
