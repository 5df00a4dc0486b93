"""The package is built in floors (DESIGN.md, "Layout"); an import only runs down.

Every module's imports are read with ``ast`` (module level and inside functions; ``import x``,
``from x import y``, relative imports), each module is given its floor from ``FLOORS``, and an
import of a pullback module on a higher floor is a violation. Imports on one floor are free,
so the registry circles inside one folder (a family file registering its rules with the
tables of its folder) are allowed. Python's implicit import of parent packages is not counted.

The floors of today's modules (the target folder of DESIGN.md in brackets):

  0  errors, log, tree
  1  ir.*                                                  [ir/]
  2  transforms: jvp, transpose, partial_eval, batch,
     dce, cse, substitute (the interpreters)               [ad/]
  3  primitives.*, lax                                     [primitives/]
  4  transforms: simplify, structure, reroll, outer, canonical,
     schedule, contraction_order, scalings, readers        [opt/]
     backends.*                                            [backends/]
  5  api, cache, export, testing; transforms.ad and
     transforms.jacobian (differentiate: they compose the
     interpreters with the optimiser; ``ad.optimize`` goes
     to opt/); kronecker (the value api returns)           [api/]
  6  numpy_api.*, linalg, loops, custom, demo, __main__,
     pullback (the package's __init__)                     [frontend/]

A folder that is one floor (ir, primitives, backends, numpy_api) has one entry, so a new
module there takes its floor; anywhere else a module missing from ``FLOORS`` fails the test.

Report mode: ``KNOWN`` lists today's violations, and the test fails on a violation not in it
and on a listed one that has gone (remove it from KNOWN), so the list only shrinks. When it is
empty, the test is strict. Known violations by floor pair (importer -> imported), 2026-11-27:

  1 -> 2   1   ir.tracer -> transforms.dce
  1 -> 3   1   ir.tracer -> primitives.structural
  1 -> 4   2   ir.tracer -> backends (compiler, memory)
  1 -> 6   2   ir.tracer -> numpy_api, pullback
  2 -> 3   3   transforms jvp, batch, transpose -> lax
  3 -> 4   2   primitives.control -> backends.memory, transforms.simplify
  3 -> 5   1   primitives.custom -> api
  3 -> 6   1   primitives.linalg_extra -> loops
  total   13
"""

import ast
import importlib.util
from collections import Counter
from pathlib import Path

ROOT = Path(importlib.util.find_spec("pullback").submodule_search_locations[0])

#: Module, or folder (a prefix ending in "."), -> floor. The longest match wins.
FLOORS = {
    "pullback.errors": 0,
    "pullback.log": 0,
    "pullback.tree": 0,
    "pullback.ir": 1,  # a namespace package
    "pullback.ir.": 1,
    "pullback.transforms": 2,  # the package's __init__
    "pullback.ad.jvp": 2,
    "pullback.ad.transpose": 2,
    "pullback.ad.partial_eval": 2,
    "pullback.ad.batch": 2,
    "pullback.ad.dce": 2,
    "pullback.ad.cse": 2,
    "pullback.ad.substitute": 2,
    "pullback.primitives": 3,
    "pullback.primitives.": 3,
    "pullback.primitives.lax": 3,
    "pullback.opt.simplify": 4,
    "pullback.opt.canonical": 4,
    "pullback.opt.schedule": 4,
    "pullback.opt.structure": 4,
    "pullback.opt.reroll": 4,
    "pullback.opt.outer": 4,
    "pullback.opt.contraction_order": 4,
    "pullback.opt.scalings": 4,
    "pullback.opt.readers": 4,
    "pullback.backends": 4,
    "pullback.backends.": 4,
    "pullback.api.transforms": 5,
    "pullback.api.cache": 5,
    "pullback.api.export": 5,
    "pullback.testing": 5,
    "pullback.api.stages": 5,
    "pullback.api.jacobian": 5,
    "pullback.api.kronecker": 5,
    "pullback": 6,
    "pullback.frontend.numpy": 6,
    "pullback.frontend.numpy.": 6,
    "pullback.linalg": 6,
    "pullback.frontend.loops": 6,
    "pullback.frontend.custom": 6,
    "pullback.integrate": 6,
    "pullback.demo": 6,
    "pullback.__main__": 6,
}

#: Today's violations, (importer, imported); the issue's work removes them one by one.
KNOWN = {
    ("pullback.ir.tracer", "pullback.ad.dce"),
    ("pullback.ir.tracer", "pullback.primitives.structural"),
    ("pullback.ir.tracer", "pullback.backends.compiler"),
    ("pullback.ir.tracer", "pullback.backends.memory"),
    ("pullback.ir.tracer", "pullback.frontend.numpy"),
    ("pullback.ir.tracer", "pullback"),
    ("pullback.ad.jvp", "pullback.primitives.lax"),
    ("pullback.ad.batch", "pullback.primitives.lax"),
    ("pullback.ad.transpose", "pullback.primitives.lax"),
    ("pullback.primitives.control", "pullback.backends.memory"),
    ("pullback.primitives.control", "pullback.opt.simplify"),
    ("pullback.primitives.custom", "pullback.api.transforms"),
    ("pullback.primitives.linalg.matrix_functions", "pullback.frontend.loops"),
}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package's __init__)."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    return modules


def floor(module: str) -> int | None:
    """The floor of ``module`` from ``FLOORS`` (the longest match), or None."""
    if module in FLOORS:
        return FLOORS[module]
    folders = [key for key in FLOORS if key.endswith(".") and module.startswith(key)]
    return FLOORS[max(folders, key=len)] if folders else None


def imports(name: str, path: Path, package: bool, modules) -> list[tuple[str, int]]:
    """The pullback modules ``name`` imports anywhere in its file, with their lines."""
    here = name if package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in modules else base, node.lineno))
    return [(target, line) for target, line in found if target.split(".")[0] == "pullback"]


def violations() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the places, for every import that runs up a floor."""
    modules = _modules()
    unplaced = [name for name in modules if floor(name) is None]
    assert not unplaced, f"modules without a floor, add them to FLOORS in {__file__}: {unplaced}"
    found: dict[tuple[str, str], list[str]] = {}
    for name, (path, package) in modules.items():
        for target, line in imports(name, path, package, modules):
            assert floor(target) is not None, f"{path}:{line} imports {target}, which has no floor"
            if floor(target) > floor(name):
                found.setdefault((name, target), []).append(f"{path.relative_to(ROOT.parent)}:{line}")
    return found


def test_imports_run_down():
    found = violations()
    new = {pair: found[pair] for pair in sorted(set(found) - KNOWN)}
    gone = sorted(KNOWN - set(found))
    message = []
    if new:
        message.append("imports that run up a floor (DESIGN.md, Layout):")
        message += [
            f"  {a} (floor {floor(a)}) imports {b} (floor {floor(b)}) at {', '.join(where)}"
            for (a, b), where in new.items()
        ]
    if gone:
        message.append("violations fixed, remove them from KNOWN in tests/test_layers.py:")
        message += [f"  {pair}" for pair in gone]
    assert not message, "\n".join(message)


def test_known_is_listed_by_floor_pair():
    """The summary in this file's docstring counts KNOWN by floor pair; keep it in step."""
    pairs = Counter((floor(a), floor(b)) for a, b in KNOWN)
    for (low, high), count in pairs.items():
        assert f"{low} -> {high}   {count}" in __doc__, f"update the docstring: {low} -> {high}: {count}"
    assert f"total   {len(KNOWN)}" in __doc__, f"update the docstring's total: {len(KNOWN)}"
