"""Issue 29, items 6 and 7, on programs the other tests do not print: arrays made from shapes alone
(``np.linspace(0, 1, n)``, ``np.outer`` of ``np.arange(n)``) print as the calls that make them, and the
gradients of the audit's programs (loops of several spellings, compositions, constants, the CuPy program
of the Kalman filter) pass ruff under the project's settings, with no ``del`` of small values; temporaries
made from shapes are not constants named ``c``, and the CuPy printer deletes no handle nor 0-d scalar."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import pullback as pb
from tests.api import test_composed_names as names
from tests.backends.test_printed_programs import ruff
from tests.opt import test_loops_as_written as loops

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

import kalman_filter as kf  # noqa: E402

EPS = 1e-6
X3 = np.array([0.3, -0.4, 0.9])


def fd(f, x):
    return np.array([(f(x + EPS * e) - f(x - EPS * e)) / (2 * EPS) for e in np.eye(x.size)])


def keyword_constants(src: str) -> list[str]:
    """The keyword-only parameters of the printed function (arrays passed in by pullback)."""
    head = re.search(r"^def \w+\((.*)\):", src, re.M).group(1)
    return [p.strip() for p in head.split("*,")[1].split(",")] if "*," in head else []


def graded(x):
    n = x.shape[0]
    grid = np.linspace(0.0, 1.0, n)
    k = np.arange(n)
    W = np.cos(np.pi * np.outer(k, k) / n)
    return np.sum(W @ x * grid)


def test_arrays_made_from_shapes_print_as_calls():
    d = pb.differentiate(graded)
    src = d.source(X3)
    assert keyword_constants(src) == []
    assert "np.arange(3, dtype=np.int64)" in src and "W = np.cos(" in src
    np.testing.assert_allclose(d.grad(X3), fd(graded, X3), rtol=1e-7)


def reversed_range(x):
    idx = np.arange(x.shape[0])
    return np.sum(x[idx[::-1]] * x)


def sum_of_shapes(x):
    n = x.shape[0]
    return np.sum((np.eye(n) + np.tri(n)) @ x)


def lower_ones(x):
    T = np.tri(x.shape[0])
    return np.sum(T @ np.sin(x))


@pytest.mark.parametrize("f", [reversed_range, sum_of_shapes, lower_ones])
def test_the_gradients_of_functions_of_shape_made_constants_are_right(f):
    np.testing.assert_allclose(pb.differentiate(f).grad(X3), fd(f, X3), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("f", [reversed_range, sum_of_shapes])
def test_shape_made_temporaries_are_not_constants_named_c(f):
    assert "c" not in keyword_constants(pb.differentiate(f).source(X3))


def test_np_tri_prints_as_the_call():
    src = pb.differentiate(lower_ones).source(X3)
    assert keyword_constants(src) == [] and "np.tri(" in src


def kalman_args(T=12):
    A, B, v = kf.simulate(T=T)
    return A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2)


def audited_sources() -> dict[str, str]:
    rng = np.random.default_rng(0)
    params = {"W": 0.3 * rng.standard_normal((3, 3)), "U": 0.3 * rng.standard_normal((3, 2)), "b": 0.1 * np.ones(3)}
    M = np.eye(3) + 0.1 * rng.standard_normal((3, 3))
    theta, u0 = np.array([1.5, 1.0, 3.0, 1.0]), np.array([1.0, 0.5])
    X, Y = names.X, names.Y
    return {
        "while_helper": pb.differentiate(loops.while_helper, argnums=(0, 1)).source(0.7, np.array([0.3, -0.2])),
        "rnn": pb.differentiate(loops.rnn).source(params, rng.standard_normal((400, 2))),
        "two_factorisations": pb.differentiate(loops.two_factorisations, argnums=(0, 1)).source(M, X3),
        "invariant_factorisations": pb.differentiate(loops.invariant_factorisations, argnums=(0, 1)).source(M, X3),
        "euler": pb.differentiate(loops.euler, argnums=(0, 1)).source(theta, u0),
        "swap": pb.differentiate(loops.swap).source(X3),
        "fori": pb.differentiate(loops.fori, argnums=(0, 1)).source(0.7, u0),
        "energy_jacrev": pb.source(pb.jacrev(names.energy), X),
        "pair_hessian": pb.source(pb.hessian(names.pair, argnums=(0, 1)), X, Y),
        "tree_loss_vmap_grad": pb.source(pb.vmap(pb.grad(names.tree_loss), in_axes=(None, 0)),
                                         {"W": np.ones((3, 4)), "b": np.zeros(3)}, np.ones((5, 4))),
        "graded": pb.differentiate(graded).source(X3),
        "reversed_range": pb.differentiate(reversed_range).source(X3),
        "kalman_cuda": kf.nll.source(*kalman_args(), device="cuda"),
    }


def test_the_audited_programs_pass_ruff_and_keep_small_values():
    sources = audited_sources()
    findings = {name: ruff(src) for name, src in sources.items()}
    assert not any(findings.values()), findings
    for name, src in sources.items():
        if name != "kalman_cuda":  # (below: the CuPy printer's own temporaries)
            assert "del " not in src, name
        # one list (or array) per residual: no value stored twice a step
        stored = re.findall(r"^\s*\w+_steps(?:_\d+)?\[t\] = (\w+)$", src, re.M)
        assert len(stored) == len(set(stored)), (name, stored)


def test_the_cupy_program_deletes_no_scalars():
    src = kf.nll.source(*kalman_args(), device="cuda")
    assert not re.search(r"^\s*del .*\b(one|alpha|handle)(_\d+)?\b", src, re.M)
