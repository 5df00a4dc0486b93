import shutil
import subprocess
import sys
from pathlib import Path

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
