"""The package is built in floors (DESIGN.md, "Layout"); an import only runs down.

Every module's imports are read with ``ast`` (module level and inside functions; ``import x``,
``from x import y``, relative imports), each module is given its floor from ``FLOORS``, and an
import of a pullback module on a higher floor is a violation. Imports on one floor are free,
so the registry circles inside one folder (a family file registering its rules with the
tables of its folder) are allowed. Python's implicit import of parent packages is not counted.

The floors (DESIGN.md, "Layout"; each a folder):

  0  errors, log, tree
  1  ir/         types, core, names, printer, verify, sourcemap, tracer
  2  ad/         the interpreters: jvp, transpose, partial_eval, batch, dce, cse, substitute
  3  primitives/ lax and the families (linalg/ a folder of families)
  4  opt/        the optimiser; backends/ beside it (numpy/, cupy/)
  5  api/        staging, caches, differentiate, jit, vmap, the function forms, export, testing
  6  frontend/   NumPy's and SciPy's names (numpy/, scipy/), pullback.linalg, loops, custom rules,
                 the conversion of user code
  7  pullback    the package's __init__ (the public names), __main__ and the demo

A folder has one entry, so a new module there takes its floor; anywhere else a module missing
from ``FLOORS`` fails the test.

Strict: any import that runs up a floor fails the test. Where a lower floor needs what a higher
one makes, the higher one registers it in a table or hook of the lower (the families fill
``ir.core.VIEWS``, ``primitives.lax`` fills ``ad.ops.lax``, ``opt.simplify`` sets
``control.BODY_PASS``, ``frontend.eyes`` sets the tracer's ``ARRAY_OPERAND`` and ``TRACE_END``).
"""

import ast
import importlib.util
from pathlib import Path

ROOT = Path(importlib.util.find_spec("pullback").submodule_search_locations[0])

#: Module, or folder (a prefix ending in "."), -> floor. The longest match wins.
FLOORS = {
    "pullback.errors": 0,
    "pullback.log": 0,
    "pullback.tree": 0,
    "pullback.ir": 1,  # a namespace package
    "pullback.ir.": 1,
    "pullback.ad": 2,
    "pullback.ad.": 2,
    "pullback.primitives": 3,
    "pullback.primitives.": 3,
    "pullback.opt": 4,
    "pullback.opt.": 4,
    "pullback.backends": 4,
    "pullback.backends.": 4,
    "pullback.api": 5,
    "pullback.api.": 5,
    "pullback.frontend": 6,
    "pullback.frontend.": 6,
    "pullback": 7,  # the package's __init__: the public names
    "pullback.__main__": 7,
    "pullback.demo": 7,
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
    message = [
        f"  {a} (floor {floor(a)}) imports {b} (floor {floor(b)}) at {', '.join(where)}"
        for (a, b), where in sorted(found.items())
    ]
    assert not found, "\n".join(["imports that run up a floor (DESIGN.md, Layout):", *message])
