"""The primal's canonical form is found once per gradient (issue 29: no repeated whole-program passes):
the primal stage drops dead code and runs ``canonical``; where that finds nothing to rewrite, the program is
known canonical (``Staged.canonical``) and ``linearize`` runs neither ``canonical`` nor DCE on it again."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sl

import pullback as pb
from pullback.api import stages, transforms


def _counted(monkeypatch) -> list[int]:
    calls: list[int] = []
    for module in (stages, transforms):
        run = module.canonical
        monkeypatch.setattr(module, "canonical", lambda p, run=run: calls.append(len(p.eqns)) or run(p))
    return calls


def _problem():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(4, 4))
    return m @ m.T + 4 * np.eye(4), rng.normal(size=4)


def test_canonical_runs_once_when_it_rewrites_nothing(monkeypatch):
    calls = _counted(monkeypatch)

    def f(S, b):  # a lower factor's solve: a trigger of canonical's rewrites, none of which applies
        return np.sum(sl.solve_triangular(sl.cholesky(S, lower=True), b, lower=True) ** 2)

    S, b = _problem()
    value, grad = pb.value_and_grad(f, argnums=1, first_call="compiled")(S, b)
    assert len(calls) == 1
    # |L^{-1} b|^2 = b' S^{-1} b: its gradient 2 S^{-1} b
    np.testing.assert_allclose(value, b @ np.linalg.solve(S, b), rtol=1e-12)
    np.testing.assert_allclose(grad, 2 * np.linalg.solve(S, b), rtol=1e-10)


def test_canonical_runs_again_where_it_rewrote(monkeypatch):
    calls = _counted(monkeypatch)

    def f(S, b):  # the upper factor's transpose solved: rewritten to the lower factor, then checked again
        return np.sum(sl.solve_triangular(sl.cholesky(S).T, b, lower=True) ** 2)

    S, b = _problem()
    value, grad = pb.value_and_grad(f, argnums=1, first_call="compiled")(S, b)
    assert len(calls) == 2
    np.testing.assert_allclose(value, b @ np.linalg.solve(S, b), rtol=1e-12)
    np.testing.assert_allclose(grad, 2 * np.linalg.solve(S, b), rtol=1e-10)
