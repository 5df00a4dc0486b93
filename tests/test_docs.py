"""The guide in docs/ runs, its API reference is what tools/api_reference.py prints, and the
examples in the public docstrings are doctests that pass."""

import doctest
import importlib
import linecache
import re
import runpy
import types
from pathlib import Path

import numpy as np
import pytest

import pullback as pb

ROOT = Path(__file__).parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
# the modules defining the names in pullback.__all__ (checked below, so a new public module is not missed)
PUBLIC_MODULES = ["pullback.api.transforms", "pullback.frontend.loops", "pullback.frontend.custom",
                  "pullback.api.export", "pullback.errors", "pullback.ir.verify", "pullback.ir.core",
                  "pullback.ir.types", "pullback.frontend.linalg", "pullback.frontend.integrate"]


@pytest.mark.parametrize("page", [p.name for p in DOCS])
def test_python_blocks_in_docs_run(page):
    text = (ROOT / "docs" / page).read_text()
    ns: dict = {}
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
        filename = f"<docs/{page} block {i}>"  # its source where pullback reads it, as a notebook's cells
        linecache.cache[filename] = (len(block), None, block.splitlines(True), filename)
        exec(compile(block, filename, "exec"), ns)  # blocks of a page share a namespace, in order


def test_the_tutorials_excerpt_of_the_gradient_is_what_pullback_prints(tmp_path):
    """Each printed line of the excerpt (not its ``...`` nor the shortened error message) is a line of
    the source printed for the tutorial's own blocks saved as ``tutorial.py``, as the excerpt says."""
    text = (ROOT / "docs" / "tutorial.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    saved = tmp_path / "tutorial.py"
    saved.write_text("".join(blocks[:4]))  # data, kernel, likelihood, the first value and gradient
    ns = runpy.run_path(str(saved))
    source = ns["nlml"].source(ns["theta"], ns["X"], ns["y"]).splitlines()
    excerpt = re.search(r"```text\n(def nlml_grad.*?)```", text, re.S).group(1).splitlines()
    lines = [line for line in excerpt if line.strip() not in ("...", "") and "raise" not in line]
    missing = [line for line in lines if line not in source]
    assert len(lines) > 20 and not missing, missing


def test_docs_pages_link_to_each_other_and_exist():
    index = (ROOT / "docs" / "index.md").read_text()
    for page in DOCS:
        assert page.name == "index.md" or f"]({page.name})" in index, page.name
    for page in DOCS:
        for target in re.findall(r"\]\(([\w./-]+)(?:#[\w-]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)
    assert "docs/index.md" in (ROOT / "README.md").read_text()


def test_api_reference_is_up_to_date():
    reference = runpy.run_path(str(ROOT / "tools" / "api_reference.py"))["reference"]()
    assert (ROOT / "docs" / "api.md").read_text() == reference, (
        "docs/api.md is stale: run `python tools/api_reference.py > docs/api.md`")
    for name in pb.__all__:
        assert f"`{name}`" in reference, name


def test_every_public_callable_has_a_doctest_example():
    modules = {getattr(pb, n).__name__ if isinstance(getattr(pb, n), types.ModuleType) else getattr(pb, n).__module__
               for n in pb.__all__}
    assert modules <= set(PUBLIC_MODULES), modules - set(PUBLIC_MODULES)
    missing = [n for n in pb.__all__ if ">>>" not in (getattr(pb, n).__doc__ or "")]
    assert not missing, f"public names without an example in their docstring: {missing}"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), extraglobs={"np": np, "pb": pb},
                             optionflags=doctest.ELLIPSIS, report=True)
    assert result.attempted > 0 and result.failed == 0, result


def test_reading_generated_sources_excerpts_are_what_pullback_prints():
    """The first printed program (the NumPy one, ``compile="numpy"``, as the page says; file names aside)
    and the LAPACK excerpt (indented as in the function, ``examples/gp_regression.py``'s gradient)."""
    import sys

    text = (ROOT / "docs" / "reading-generated-source.md").read_text()
    printed = re.findall(r"```text\n(.*?)```", text, re.S)

    def f(x):
        y = np.exp(x)
        z = np.log1p(y) * 2.0
        return np.sum(z)

    src = pb.differentiate(f, compile="numpy").source(np.ones((1000, 1000)))
    normalize = lambda s: re.sub(r"# \S+:\d+", "#", s).strip()  # noqa: E731
    assert normalize(printed[0]) == normalize(src)
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import gp_regression
    finally:
        sys.path.pop(0)
    X, y = gp_regression.synthetic_data()
    gp = gp_regression.neg_log_marginal_likelihood.source(np.zeros(3), X, y)
    lapack = next(b for b in printed if "dpotrf" in b)
    assert lapack in gp  # (indented as the function's body)
