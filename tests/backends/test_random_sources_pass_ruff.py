"""The printed programs of random NumPy programs (tests/regressions/test_random_programs.py's generator, with
constants made in the function or captured from its scope): their gradient, their forward program and, for
real ones, their Hessian pass ruff under the project's own settings, as the golden sources do."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given

import pullback as pb
from tests.backends.test_printed_programs import PYPROJECT
from tests.regressions.test_random_programs import _loss_of, examples, programs


@examples(60, sampled=12)
@given(programs(dtypes=("float64", "complex128", "float32"), constants=True, max_ops=8))
def test_random_programs_print_ruff_clean_sources(p):
    loss = p.traced(_loss_of(p, 0))
    xs = p.arguments
    with np.errstate(all="ignore"):
        sources = {"grad": pb.differentiate(loss, argnums=tuple(range(len(xs)))).source(*xs),
                   "jit": pb.jit(p.traced()).source(*xs)}
        if p.dtype == "float64":
            sources["hessian"] = pb.source(pb.hessian(loss), *xs)
    with tempfile.TemporaryDirectory() as tmp:  # one run of ruff for the three
        for form, src in sources.items():
            (Path(tmp) / f"{form}.py").write_text(src)
        done = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(PYPROJECT), "--no-cache",
                               "--output-format", "concise", tmp], capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout + done.stderr, sources)
