"""Saved programs run without pullback, for random programs: the gradient source of
hypothesis-generated NumPy programs (tests/regressions/test_random_programs.py's generator), written to a
file and run by a fresh interpreter that cannot import pullback, gives pullback's results."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy
from hypothesis import given

import pullback as pb
from tests.backends.test_standalone import RUNNER, _flat
from tests.regressions.test_random_programs import _loss_of, examples, programs


@examples(10)
@given(programs(dtypes=("float64", "complex128")))
def test_saved_random_gradient_programs_run_without_pullback(p):
    f = pb.differentiate(_loss_of(p, 0), argnums=tuple(range(len(p.inputs))))
    with tempfile.TemporaryDirectory() as tmp, np.errstate(all="ignore"):
        root = Path(tmp)
        (root / "p000.py").write_text(f.source(*p.inputs))
        d = root / "p000"
        d.mkdir()
        for i, a in enumerate(p.inputs):
            np.save(d / f"arg{i:03d}.npy", np.asarray(a))
        for kw, value in f.constants(*p.inputs).items():
            np.save(d / f"kw_{kw}.npy", value)
        want = _flat(f.value_and_grad(*p.inputs))
        (root / "runner.py").write_text(RUNNER)
        paths = sorted({os.path.dirname(os.path.dirname(m.__file__)) for m in (np, scipy)})
        run = subprocess.run([sys.executable, "-I", "-S", str(root / "runner.py"), str(root), *paths],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        got = [np.load(f) for f in sorted(d.glob("out*.npy"))]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0, equal_nan=True)
