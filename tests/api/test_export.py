"""pb.export and the command line: exported modules import and run in a fresh interpreter that
cannot import pullback, and give pullback's results."""

import subprocess
import sys
from pathlib import Path

import numpy as np

import pullback as pb

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

RUN = """
import importlib.util, sys
sys.modules["pullback"] = None
import numpy as np
spec = importlib.util.spec_from_file_location("exported", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn = getattr(module, sys.argv[2])
args = np.load(sys.argv[3], allow_pickle=False)
out = fn(*[args[f"a{i}"] for i in range(len(args.files))])
flat = []
def walk(o):
    if isinstance(o, (tuple, list)):
        for x in o:
            walk(x)
    else:
        flat.append(np.asarray(o))
walk(out)
np.savez(sys.argv[4], *flat)
"""


def _flat(out) -> list:
    return [a for o in out for a in _flat(o)] if isinstance(out, tuple | list) else [np.asarray(out)]


def _round_trip(tmp_path: Path, d, args, name: str):
    path = pb.export(d, *args, path=tmp_path / f"{name}.py")
    np.savez(tmp_path / "args.npz", **{f"a{i}": np.asarray(a) for i, a in enumerate(args)})
    function = next(line.split("(")[0][4:] for line in path.read_text().splitlines() if line.startswith("def "))
    subprocess.run([sys.executable, "-I", "-c", RUN, str(path), function, str(tmp_path / "args.npz"),
                    str(tmp_path / "out.npz")], check=True)
    got = np.load(tmp_path / "out.npz")
    return [got[f"arr_{i}"] for i in range(len(got.files))]


def _every_example():
    from tests.backends.test_standalone import _examples

    yield from _examples()  # GP, sparse GP, Bayesian linear regression (two forms), Kalman filter
    import autodiff_cookbook as cb
    import sequence_models as seq

    params, h0, xs, targets = seq.gru_data(T=5, n=3, m=2)
    yield "gru", pb.differentiate(lambda *p: seq.gru_loss(p, h0, xs, targets), argnums=tuple(range(7))), params
    yield "cookbook", pb.differentiate(cb.loss, argnums=(0, 1)), (cb.W, cb.b)


def test_every_example_exported_runs_without_pullback(tmp_path):
    for name, d, args in _every_example():
        got = _round_trip(tmp_path, d, args, name)
        want = _flat(d.value_and_grad(*args))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)


W = np.arange(6.0).reshape(3, 2)


def test_exported_constants_sit_in_an_npz_beside_the_module(tmp_path):
    d = pb.differentiate(lambda x: np.sum((x @ W) ** 2))
    x = np.ones((4, 3))
    path = pb.export(d, x, path=tmp_path / "g.py")
    assert path.with_suffix(".npz").exists() and "x: f64[4,3]" in path.read_text()
    got = _round_trip(tmp_path, d, (x,), "g")
    np.testing.assert_allclose(got[1], pb.grad(lambda x: np.sum((x @ W) ** 2))(x))


RS = np.random.RandomState(3)


def test_an_exported_program_that_draws_takes_its_generator_at_each_call(tmp_path):
    import importlib.util

    path = pb.export(lambda x: np.sum(x * RS.standard_normal(3) * W[:, 0]), np.ones(3), path=tmp_path / "draws.py")
    text = path.read_text()
    assert "Pass RS= (a RandomState) at each call" in text and path.with_suffix(".npz").exists()
    spec = importlib.util.spec_from_file_location("draws", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = next(v for k, v in vars(module).items() if k.endswith("_grad"))
    mine, eager = np.random.RandomState(1), np.random.RandomState(1)
    for _ in range(2):
        value, grad = fn(np.ones(3), RS=mine)
        eps = eager.standard_normal(3)
        assert value == np.sum(eps * W[:, 0])
        np.testing.assert_array_equal(grad, eps * W[:, 0])


def test_command_line_prints_and_writes(tmp_path):
    model = tmp_path / "model.py"
    model.write_text("import numpy as np\n\n\ndef loss(x, y):\n    return np.sum((x - y) ** 2)\n")
    cmd = [sys.executable, "-m", "pullback", "grad", f"{model}:loss", "--arg", "f64[5]", "--arg", "f64[5]"]
    printed = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "def loss_grad(x, y):" in printed
    out = subprocess.run([*cmd, "-o", str(tmp_path / "loss_grad.py")], capture_output=True, text=True, check=True)
    assert (tmp_path / "loss_grad.py").exists() and "loss_grad.py" in out.stdout
    ir = subprocess.run([sys.executable, "-m", "pullback", "ir", f"{model}:loss", "--arg", "f64[5]", "--arg",
                         "f64[5]"], capture_output=True, text=True, check=True).stdout
    assert ir.startswith("program loss(")
    bad = subprocess.run([sys.executable, "-m", "pullback", "grad", f"{model}:loss", "--arg", "float[5]"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "dtype and a shape" in bad.stderr
