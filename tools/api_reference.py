"""Print the API reference (docs/api.md) from the docstrings of the names in ``pullback.__all__``.

    python tools/api_reference.py > docs/api.md

``tests/test_docs.py`` checks that docs/api.md is this script's output, so a changed docstring or
signature shows up as a failing test until the page is regenerated.
"""

from __future__ import annotations

import inspect
import re
import types

import pullback

HEADER = """# API reference

Generated from the docstrings by `tools/api_reference.py` (`python tools/api_reference.py > docs/api.md`);
do not edit by hand. Everything here is importable as `pullback.<name>` (`import pullback as pb`).
The examples are doctests (run by `tests/test_docs.py`) and assume `import numpy as np` and
`import pullback as pb`. The guide is in [index.md](index.md).
"""

KINDS = [("Transforms", "function"), ("Control flow", "loop"), ("Custom rules", "custom"), ("Modules", "module"),
         ("Types and errors", "type")]


def _kind(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    module = getattr(obj, "__module__", "")
    if module == "pullback.frontend.loops":
        return "loop"
    if module == "pullback.frontend.custom":
        return "custom"
    if isinstance(obj, type) and (issubclass(obj, BaseException) or module.startswith("pullback.ir")):
        return "type"
    return "function"


def _signature(name: str, obj) -> str:
    if isinstance(obj, type) and issubclass(obj, BaseException):
        bases = (b.__name__ if b.__module__ == "builtins" else f"{b.__module__}.{b.__qualname__}"
                 for b in obj.__bases__)
        return f"class {name}({', '.join(bases)})"
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = "(...)"
    sig = re.sub(r" at 0x[0-9a-fA-F]+", "", sig)  # sentinel defaults: no addresses, so the page is stable
    return f"{'class ' if isinstance(obj, type) else ''}{name}{sig}"


def _module_section(name: str, module: types.ModuleType) -> list[str]:
    lines = [f"## `{name}`", "", _fence_examples(inspect.cleandoc(module.__doc__ or "")), ""]
    public = getattr(module, "__all__", None) or [
        n for n, v in vars(module).items()
        if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == module.__name__]
    for n in sorted(public):
        if not callable(getattr(module, n)):
            lines.append(f"- `{n} = {getattr(module, n)!r}`")
            continue
        doc = inspect.getdoc(getattr(module, n)) or ""
        first = doc.split("\n\n")[0].replace("\n", " ")
        lines.append(f"- `{_signature(n, getattr(module, n))}`" + (f": {first}" if first else ""))
    return lines + [""]


def _fence_examples(doc: str) -> str:
    """Doctest examples (a ``>>>`` line up to the next blank line) in ```pycon fences, so that Markdown
    keeps their lines apart."""
    out, inside = [], False
    for line in doc.splitlines():
        if line.startswith(">>>") and not inside:
            out.append("```pycon")
            inside = True
        elif not line.strip() and inside:
            out.append("```")
            inside = False
        out.append(line)
    return "\n".join(out + (["```"] if inside else []))


def _section(name: str, obj) -> list[str]:
    if isinstance(obj, types.ModuleType):
        return _module_section(name, obj)
    own = obj.__doc__ if isinstance(obj, type) else inspect.getdoc(obj)  # a class's own, not Exception's
    doc = inspect.cleandoc(own) if own else "(no docstring)"
    return [f"### `{name}`", "", "```text", _signature(name, obj), "```", "", _fence_examples(doc), ""]


def reference() -> str:
    """The Markdown page: one section per kind of name, one entry per name, alphabetical."""
    names = sorted(pullback.__all__)
    out = [HEADER]
    for title, kind in KINDS:
        chosen = [n for n in names if _kind(getattr(pullback, n)) == kind]
        if not chosen:
            continue
        out += [f"## {title}", ""] if kind != "module" else []
        for n in chosen:
            out += _section(n, getattr(pullback, n))
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(reference(), end="")
