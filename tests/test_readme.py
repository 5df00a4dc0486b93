"""The README is the front door: its examples run and its printed source is real."""

import linecache
import re
import textwrap
from pathlib import Path

import numpy as np

import pullback as pb
from pullback.demo import softplus_regression

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_python_examples_run():
    ns: dict = {}
    for i, block in enumerate(BLOCKS):
        if "pb." not in block or "@numba.njit" in block:
            continue  # printed programs and fragments of them (whose comments may quote pb. calls), checked below
        filename = f"<README.md block {i}>"  # its source where pullback reads it, as a notebook's cells
        linecache.cache[filename] = (len(block), None, block.splitlines(True), filename)
        exec(compile(block, filename, "exec"), ns)
    assert ns["np"].allclose(ns["G"], 2 * ns["A"].conj().T @ (ns["A"] @ ns["z"]) + 2 * np.conj(ns["z"]))


def test_readme_gradient_source_is_what_the_demo_prints():
    rng = np.random.default_rng(0)
    X, y, w = rng.standard_normal((8, 3)), np.sign(rng.standard_normal(8)), rng.standard_normal(3)
    src = pb.differentiate(softplus_regression).source(w, X, y)
    printed = next(b for b in BLOCKS if b.startswith("def softplus_regression_grad"))
    assert printed.strip() in src


def test_readme_primal_source_is_real():
    def loss(x, y):
        t = x * y
        z = np.log(t)
        return z.sum() + np.exp(-x).mean()

    src = pb.source(loss, np.ones(3), np.ones(3))
    printed = next(b for b in BLOCKS if b.startswith("import numpy as np\n\n\ndef loss"))
    normalize = lambda s: re.sub(r"# \S+:\d+", "#", s).strip()  # noqa: E731  (file names differ)
    assert normalize(printed) == normalize(src)


def test_readme_loop_gradient_source_is_real():
    from pullback.demo import rnn_loss

    rng = np.random.default_rng(0)
    W, U = 0.5 * rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
    h0, xs = np.zeros(3), rng.standard_normal((1000, 2))
    src = pb.differentiate(rnn_loss, argnums=(0, 1), compile="numpy").source(W, U, h0, xs)
    printed = next(b for b in BLOCKS if b.startswith("def rnn_loss_grad"))
    assert printed.strip() in src


def test_readme_cholesky_excerpt_is_what_the_gp_gradient_prints():
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    try:
        import gp_regression
    finally:
        sys.path.pop(0)
    X, y = gp_regression.synthetic_data()
    src = gp_regression.neg_log_marginal_likelihood.source(np.zeros(3), X, y)
    printed = next(b for b in BLOCKS if b.startswith("u, info = scipy.linalg.lapack.dpotrf(K.T"))
    assert textwrap.indent(printed, "    ") in src  # the excerpt, as the function's body indents it
