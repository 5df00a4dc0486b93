"""The default run's share of the exhaustive families; ``python -m pytest --runslow`` (or
``PULLBACK_SLOW=1``) runs every case.

A family is the cases of one function or primitive under several dtypes, shapes or parameters
(``exp-float64``, ``exp-float32``, ``exp-complex128``: the name up to its first ``-``). The
default run keeps one case of each family and marks the others ``slow`` (deselected, and counted
as such). Which one it keeps rotates from family to family, so that every dtype and shape
variant still runs, and with ``salt`` from test to test, so that the tests sharing a case list
(forward, JVP, batching, CuPy printing) keep different cases of a family. The registry tests
check that each test's sample still puts every primitive into a program: a family whose cases
hold different primitives names the case that alone holds one in ``ALWAYS``. A grid of stacked
``parametrize`` decorators (shape x dtype x layout) marked ``@grid("shape")`` keeps each shape once,
the other parameters rotating."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import pytest


def full() -> bool:
    """Every case, not the sample: ``--runslow`` sets PULLBACK_SLOW (tests/conftest.py)."""
    return os.environ.get("PULLBACK_SLOW", "") not in ("", "0")


# kept in every sample: within its family, the only case of some primitives
ALWAYS = {
    "bessel-float64",  # i0, i0e, i1, i1e
    "bessel-j01-float32",  # j0, j1
    "bessel-y-k-float64",  # y0, y1, yn, k0, k0e, k1, k1e
    "bessel-real-order-float32",  # jv, yv, iv, ive, kv, kve
    "custom-jvp",
    "custom-vjp",
    "rounding",  # floor, ceil, trunc
    "logistic-float64",  # logit, log_expit
    "erf-erfc-float32",  # erfcx
    "lu_solve-batched",  # permute (one matrix's lu_solve is gesv: transforms.canonical)
    "lu_solve-trans",  # unpermute
    "clip",  # max (the float32 case clips by literals only)
}


def family(name: str) -> str:
    return name.split("-")[0]


def sample(params: Iterable, *, key: Callable = lambda p: family(p.id), salt: int = 0,
           always: Callable = lambda p: p.id in ALWAYS) -> list:
    """``params`` (``pytest.param`` objects) with all but one of each family (``key``) marked
    ``slow``; the kept one is the family's ``(k + salt) % size``-th for the k-th family. Those
    for which ``always`` holds (by default: whose id is in ``ALWAYS``) are kept too."""
    params = list(params)
    families: dict = {}
    for i, p in enumerate(params):
        families.setdefault(key(p), []).append(i)
    kept = {members[(k + salt) % len(members)] for k, members in enumerate(families.values())}
    return [p if i in kept or always(p) else pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.slow])
            for i, p in enumerate(params)]


def cases(items: Iterable, ids: Callable = lambda c: c.name, **kw) -> list:
    """``sample`` of a list of ``Case`` records, each a one-value param with its id."""
    return sample([pytest.param(c, id=ids(c)) for c in items], key=lambda p: family(p.values[0].name),
                  always=lambda p: p.values[0].name in ALWAYS, **kw)


def grid(*names: str):
    """Mark a test whose stacked ``parametrize`` decorators form a grid: the default run keeps, for each
    combination of ``names``' values, one combination of the other parameters, rotating (the rest are
    marked ``slow`` by ``mark_grids``, from tests/conftest.py)."""
    return pytest.mark.sample_grid(names)


def mark_grids(items: list) -> None:
    families: dict = {}
    for item in items:
        marker = item.get_closest_marker("sample_grid")
        if marker is not None and hasattr(item, "callspec"):
            key = (item.module.__name__, item.originalname,
                   tuple(repr(item.callspec.params[n]) for n in marker.args[0]))
            families.setdefault(key, []).append(item)
    for k, members in enumerate(families.values()):
        for i, item in enumerate(members):
            if i != k % len(members):
                item.add_marker(pytest.mark.slow)


def is_slow(p) -> bool:
    return any(m.name == "slow" for m in p.marks)


def kept(params: Iterable) -> list:
    """The first value of each param the default run keeps."""
    return [p.values[0] for p in params if not is_slow(p)]
