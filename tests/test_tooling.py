import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pullback.__main__ import main

ROOT = Path(__file__).parent.parent


def test_demo_runs_and_agrees_with_numpy(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "program softplus_regression(w: f64[3], X: f64[8,3], y: f64[8]):" in out
    assert "def softplus_regression(w, X, y):" in out and "# they agree" in out


@pytest.mark.skipif(shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
                    reason="ruff is not installed")
def test_tree_is_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    result = subprocess.run([ruff, "check", "."], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_version_matches_the_package_metadata_and_types_are_shipped():
    from importlib.metadata import version

    import pullback

    assert pullback.__version__ == version("pullback")
    assert (Path(pullback.__file__).parent / "py.typed").exists()


MODEL = '''import numpy as np


def loss(x):
    return np.sum(np.sin(x) ** 2)


def pair(x, y=2.0):
    return np.sum(x * y)


def nested(x):
    out = np.sin(x)
    for _ in range(500):
        out = [out]
    return out
'''


def _cli(*args: str, cwd: Path, limit_memory: bool = False) -> subprocess.CompletedProcess:
    def at_most_4gb():  # the 80 GB matrix must never be made (one BLAS thread: little virtual memory)
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "pullback", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env, preexec_fn=at_most_4gb if limit_memory and os.name == "posix" else None)


def test_command_line_traces_from_shapes_alone(tmp_path):
    """A 100000 x 100000 argument is a type, never an array: seconds, under a 4 GB address-space limit."""
    (tmp_path / "model.py").write_text(MODEL)
    start = time.perf_counter()
    run = _cli("grad", "model.py:loss", "--arg", "f64[100000,100000]", cwd=tmp_path, limit_memory=True)
    assert run.returncode == 0, run.stderr
    assert "def loss_grad(x):" in run.stdout and "np.cos(x)" in run.stdout
    ir = _cli("ir", "model.py:loss", "--arg", "f32[100000,100000]", cwd=tmp_path, limit_memory=True)
    assert ir.returncode == 0 and "program loss(x: f32[100000,100000]):" in ir.stdout, ir.stderr
    assert time.perf_counter() - start < 60


@pytest.mark.parametrize("args, message", [
    (["--arg", "f64[3]", "--argnums", "1"], "--argnums 1: position 1 is out of range for the 1 argument(s)"),
    (["--arg", "f64[3]", "--argnums", "x"], "--argnums takes argument positions, as 0 or 0,1; got 'x'"),
    (["--arg", "f64[3]", "--argnums", "0,-1"], "position -1 is out of range"),
    ([], "loss takes 1 argument(s) (x); give each with --arg"),
    (["--arg", "f64[3]", "--arg", "f64[3]"], "loss takes at most 1 argument(s); got 2 --arg"),
    (["--arg", "f64[3]", "-o", "missing/loss_grad.py"], "-o missing/loss_grad.py: cannot write it (No such file"),
    (["--arg", "f64[3]", "-o", "folder.py"], "-o folder.py: cannot write it (Is a directory)"),
    (["--arg", "f64[3]", "-o", "loss_grad.txt"], "give a path ending in .py"),
    (["--arg", "float[3]"], "a dtype and a shape, as f64[100,3]"),
])
def test_command_line_refuses_bad_arguments_as_usage_errors(tmp_path, args, message):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "folder.py").mkdir()
    run = _cli("grad", "model.py:loss", *args, cwd=tmp_path)
    assert run.returncode == 2 and "usage: python -m pullback" in run.stderr, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "missing").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["folder.py",
                                                                                                  "model.py"]


def test_command_line_defaults_and_structures_nested_500_deep(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    pair = _cli("grad", "model.py:pair", "--arg", "f64[3]", cwd=tmp_path)  # y has a default
    assert pair.returncode == 0 and "def pair_grad(x):" in pair.stdout, pair.stderr
    for stage in ("primal", "vjp", "jacrev"):
        run = _cli(stage, "model.py:nested", "--arg", "f64[3]", "-o", f"nested_{stage}.py", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    spec = importlib.util.spec_from_file_location("nested_primal", tmp_path / "nested_primal.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.array([0.5, 1.0, 2.0])
    np.testing.assert_array_equal(module.nested(x), np.sin(x))  # the structure is pullback's to rebuild


MISFIT = '''import numpy as np


def loss(w, X):
    return np.sum((X @ w) ** 2)


def vector(x):
    return np.sin(x)


def broken(x):
    return np.sum(x) / undefined_name  # noqa: F821
'''


@pytest.mark.parametrize("target, args, message", [
    ("loss", ["f64[3]", "f64[4,5]"], "grad of loss(w: f64[3], X: f64[4,5]): {path}:5: matmul: size mismatch in "
                                     "its core dimension: (4, 5) @ (3,)"),
    ("vector", ["f64[3]"], "grad of vector(x: f64[3]): {path}:9: grad needs a function returning a real scalar"),
])
def test_command_line_reports_types_that_do_not_fit_in_one_line(tmp_path, capsys, target, args, message):
    """Types the function cannot take: one line naming the function, the types and pullback's message
    with the user's line, exit status 2 as for the other usage errors; no traceback."""
    path = tmp_path / "misfit.py"
    path.write_text(MISFIT)
    with pytest.raises(SystemExit) as exit_:
        main(["grad", f"{path}:{target}", *[a for t in args for a in ("--arg", t)]])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith("python -m pullback: error: " + message.format(path=path)), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert main(["grad", f"{path}:loss", "--arg", "f64[5]", "--arg", "f64[4,5]"]) == 0  # types that fit
    assert "def loss_grad(w, X):" in capsys.readouterr().out


def test_command_line_keeps_the_traceback_of_other_errors(tmp_path):
    """An error that is not pullback's verdict on the types (here the user's own NameError) is raised."""
    path = tmp_path / "misfit.py"
    path.write_text(MISFIT)
    with pytest.raises(NameError, match="undefined_name"):
        main(["grad", f"{path}:broken", "--arg", "f64[3]"])
