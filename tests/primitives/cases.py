"""The case record shared by the primitive suites."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Case:
    name: str
    fn: Callable
    shapes: tuple
    dtype: str = "float64"
    positive: bool = False
    reference: Callable | None = None  # defaults to fn itself run by NumPy


def make_arg(rng, shape, dtype, positive):
    if dtype.startswith("complex"):
        x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    else:
        x = rng.standard_normal(shape)
    if positive:
        x = np.abs(x) + 0.5
    return np.asarray(x).astype(dtype) if shape != () else np.dtype(dtype).type(x)


def collect(attr: str) -> list[Case]:
    """The ``attr`` lists (``CASES``, ``JVP_CASES``, ``LINEAR_CASES``) of every
    ``tests/primitives/*_cases.py`` module: a family adds its cases in a module of its own,
    and the registry-wide tests see them."""
    import importlib
    from pathlib import Path

    found: list[Case] = []
    for path in sorted(Path(__file__).parent.glob("*_cases.py")):
        module = importlib.import_module(f"tests.primitives.{path.stem}")
        found += getattr(module, attr, [])
    return found


_PROGRAMS: dict = {}


def program(case: Case):
    """``case``'s traced program, traced once per session: the registry-wide tests of several
    modules walk the same cases."""
    if id(case) not in _PROGRAMS:
        import pullback as pb

        rng = np.random.default_rng(0)
        _PROGRAMS[id(case)] = pb.make_ir(case.fn)(*[make_arg(rng, s, case.dtype, case.positive) for s in case.shapes])
    return _PROGRAMS[id(case)]


def primitives(case: Case) -> frozenset[str]:
    """The names of the primitives in ``case``'s program."""
    return frozenset(e.prim.name for e in program(case).eqns)
