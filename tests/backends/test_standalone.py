"""Saved programs run without pullback: the gradient source of every example and of every
linear-algebra case (linalg_cases.py, linalg2_cases.py), written to a file and run by a fresh
interpreter that cannot import pullback (``-I -S``, a sys.path holding only NumPy's and SciPy's
directories, and pullback's import blocked, since an installed pullback shares NumPy's
directory), with the arguments and the keyword-only constants saved by ``np.save``, gives
pullback's results. One subprocess runs them all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import scipy

import pullback as pb
from tests.primitives.cases import make_arg
from tests.primitives.linalg2_cases import CASES as LINALG2_CASES
from tests.primitives.linalg_cases import LINALG_CASES

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

import bayesian_linear_regression as blr  # noqa: E402
import gp_regression as gpr  # noqa: E402
import kalman_filter as kf  # noqa: E402
import sparse_gp as sgp  # noqa: E402

# Runs each saved program on its saved arguments and constants and saves its flattened results.
RUNNER = '''
import importlib.util, inspect, sys
from pathlib import Path
sys.path[:] = sys.argv[2:] + [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
sys.modules["pullback"] = None  # installed beside NumPy (pip install .) it would be found: block it
try:
    import pullback  # noqa: F401
except ImportError:
    pass
else:
    raise AssertionError("pullback is importable")
import numpy as np

def flat(out):
    return [a for o in out for a in flat(o)] if isinstance(out, (tuple, list)) else [np.asarray(out)]

root = Path(sys.argv[1])
for program in sorted(root.glob("p*.py")):
    spec = importlib.util.spec_from_file_location(program.stem, program)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    d = root / program.stem
    args = [np.load(f) for f in sorted(d.glob("arg*.npy"))]
    kwargs = {f.stem[3:]: np.load(f) for f in d.glob("kw_*.npy")}
    fn = next(v for v in vars(module).values() if inspect.isfunction(v))
    for i, r in enumerate(flat(fn(*args, **kwargs))):
        np.save(d / f"out{i:03d}.npy", r)
'''


def _flat(out) -> list:
    return [a for o in out for a in _flat(o)] if isinstance(out, tuple | list) else [np.asarray(out)]


def _linalg_gradients():
    """Each case made a real scalar, sum_i Re <W_i, out_i> with constant weights W_i (keyword
    constants of the printed program), differentiated in all its inputs."""
    rng = np.random.default_rng(0)
    for case in LINALG_CASES + LINALG2_CASES:
        args = tuple(make_arg(rng, s, case.dtype, case.positive) for s in case.shapes)
        outs = _flat(pb.jit(case.fn)(*args))
        weights = [rng.standard_normal(o.shape).astype(np.finfo(o.dtype).dtype) for o in outs]

        def loss(*xs, fn=case.fn, weights=weights):
            out = fn(*xs)
            out = out if isinstance(out, tuple | list) else (out,)
            return sum(np.sum(np.real(o * w)) for o, w in zip(out, weights))

        yield case.name, pb.differentiate(loss, argnums=tuple(range(len(args)))), args


def _examples():
    X, y = gpr.synthetic_data(n=12)
    yield "gp", gpr.neg_log_marginal_likelihood, (np.array([0.1, 0.2, -1.0]), X, y)
    rng = np.random.default_rng(1)
    Xs = rng.uniform(-2, 2, (20, 2))
    yield "sparse_gp", sgp.bound, (Xs[:5].copy(), 0.1, 0.3, -1.5, Xs, np.sin(Xs[:, 0]))
    F = blr.features(rng.uniform(-1, 1, 15), degree=3)
    yb = 1 - 2 * F[1] + 0.1 * rng.standard_normal(15)
    for fn in (blr.blr_lq, blr.blr_cholesky):
        yield fn.__name__, pb.differentiate(fn, argnums=(0, 2, 3)), (F, yb, -2.0, 0.5)
    A, B, v = kf.simulate(T=6)
    yield "kalman", kf.nll, (A, B, np.log(0.09), np.log(0.01), v, np.zeros(2), np.eye(2))


def test_saved_gradient_programs_run_without_pullback(tmp_path):
    expected = {}
    for k, (name, f, args) in enumerate([*_examples(), *_linalg_gradients()]):
        stem = f"p{k:03d}"
        d = tmp_path / stem
        d.mkdir()
        (tmp_path / f"{stem}.py").write_text(f.source(*args))
        for i, a in enumerate(args):
            np.save(d / f"arg{i:03d}.npy", np.asarray(a))
        for kw, value in f.constants(*args).items():
            np.save(d / f"kw_{kw}.npy", value)
        expected[stem] = (name, _flat(f.value_and_grad(*args)))
    (tmp_path / "runner.py").write_text(RUNNER)
    paths = sorted({os.path.dirname(os.path.dirname(m.__file__)) for m in (np, scipy)})
    run = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "runner.py"), str(tmp_path), *paths],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for stem, (name, want) in expected.items():
        got = [np.load(f) for f in sorted((tmp_path / stem).glob("out*.npy"))]
        assert len(got) == len(want), name
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, name
            np.testing.assert_allclose(g, w, rtol=1e-6 if w.dtype in (np.float32, np.complex64) else 1e-12,
                                       atol=0, err_msg=name)
