"""``canonical`` skips its CSE pass where the program has no getrf and its rules change nothing on the program
as it is (the eager first call's primal program: one pass fewer per equation). Oracle: the pass as it was, CSE
first and the rules on its copy, on every factorisation spelling of the Gaussian likelihood, each with its
matrix computed twice (CSE makes the two one), factorised once and solved with the other triangle."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from pullback.ad.cse import cse
from pullback.ad.dce import dce
from pullback.ir.tracer import trace
from pullback.opt.canonical import _Canon, canonical
from tests.opt.test_cholesky_spellings import SPELLINGS, _problem, make


def _reference(program):
    """``canonical`` as it was: CSE, then the rules on CSE's copy; the program itself where they change nothing."""
    merged = cse(program)
    out = _Canon(merged).run()
    return program if out is merged else out


def _same(a, b) -> bool:
    return a is b or str(a) == str(b)


def _twice(k, y):
    """The matrix made twice (one value to CSE), factorised by one and solved by the other's upper triangle."""
    a1 = k + 0.1 * np.eye(k.shape[0])
    a2 = k + 0.1 * np.eye(k.shape[0])
    c = np.linalg.cholesky(a1)
    return np.sum(np.log(np.diag(c))) + y @ scipy.linalg.solve(a2, y, assume_a="pos")


@pytest.mark.parametrize("factor, lower, quadratic, logdet, jitter, logdet_first", SPELLINGS[::5])
def test_as_before_on_every_spelling(factor, lower, quadratic, logdet, jitter, logdet_first):
    k, y = _problem(4)
    program = dce(trace(make(factor, lower, quadratic, logdet, jitter, logdet_first), (k, y))[0])
    assert _same(canonical(program), _reference(program))


def test_a_matrix_made_twice_is_factorised_once():
    k, y = _problem(4)
    program = dce(trace(_twice, (k, y))[0])
    out = canonical(program)
    assert out is not program and _same(out, _reference(program))
    assert sum(e.prim.name == "potrf" for e in out.eqns) == 1
