"""``python -m pullback``: the demo, and the generated source of any function from the shell.

    python -m pullback demo
    python -m pullback grad path/to/file.py:func --arg "f64[100,3]" --arg "f64[100]" [-o out.py]

The stages: ``ir`` (the traced program), ``primal``, ``jvp``, ``vjp``, ``grad``, ``hessian``
(and ``jacfwd``, ``jacrev``). ``--argnums`` picks the differentiated arguments. With ``-o`` the
program is written as a standalone module (``pullback.export``: its constants in an ``.npz``
beside it); otherwise it is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np

import pullback as pb
from pullback.demo import softplus_regression

_DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128,
           "i32": np.int32, "i64": np.int64, "bool": np.bool_}
_SPEC = re.compile(r"^(\w+)\[([\d,\s]*)\]$")


def demo() -> int:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 3))
    y = np.sign(rng.standard_normal(8))
    w = rng.standard_normal(3)
    f = pb.differentiate(softplus_regression)
    print("# The typed IR of softplus_regression at w: f64[3], X: f64[8,3], y: f64[8]\n")
    print(f.ir(w, X, y, stage="primal"))
    print("\n# The Python that pullback generates from it\n")
    print(f.source(w, X, y, program="primal"))
    print("# Its gradient with respect to w: forward pass, then backward pass\n")
    print(f.source(w, X, y, program="grad"))
    ours, theirs = f(w, X, y), softplus_regression(w, X, y)
    value_ok = np.allclose(ours, theirs, rtol=1e-12, atol=0)
    print(f"# value, compiled: {ours!r}\n# value, NumPy:    {theirs!r}")
    eps = 1e-6
    fd = np.array([(softplus_regression(w + eps * e, X, y) - softplus_regression(w - eps * e, X, y)) / (2 * eps)
                   for e in np.eye(3)])
    g = f.grad(w, X, y)
    grad_ok = np.allclose(g, fd, rtol=1e-6, atol=1e-9)
    print(f"# gradient:            {g}\n# finite differences:  {fd}")
    ok = value_ok and grad_ok
    print("# they agree" if ok else "# MISMATCH")
    return 0 if ok else 1


def example_argument(spec: str) -> np.ndarray:
    """``f64[100,3]`` -> a float64 array of shape (100, 3) (random normal values; ``f64[]`` a scalar)."""
    m = _SPEC.match(spec.strip())
    if m is None or m.group(1) not in _DTYPES:
        raise ValueError(f"an argument is a dtype and a shape, as f64[100,3] or i64[] (dtypes: "
                         f"{', '.join(_DTYPES)}); got {spec!r}")
    shape = tuple(int(n) for n in m.group(2).replace(" ", "").split(",") if n)
    values = np.random.default_rng(0).standard_normal(shape)
    return np.asarray(values).astype(_DTYPES[m.group(1)])


def load_function(target: str):
    """``path/to/file.py:func`` -> the function (the file is imported as a module)."""
    path, sep, name = target.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise ValueError(f"give the function as path/to/file.py:name, got {target!r}")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if fn is None:
        raise ValueError(f"{path} has no function {name!r}")
    return fn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pullback", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["demo", "ir", *pb.api.STAGES])
    parser.add_argument("function", nargs="?", help="path/to/file.py:func")
    parser.add_argument("--arg", action="append", default=[], help="an argument's dtype and shape, as f64[100,3]")
    parser.add_argument("--argnums", default="0", help="differentiated arguments, as 0 or 0,1")
    parser.add_argument("-o", "--output", help="write a standalone module here instead of printing")
    opts = parser.parse_args(argv)
    if opts.command == "demo":
        return demo()
    if opts.function is None:
        parser.error("give the function as path/to/file.py:func")
    try:
        fn = load_function(opts.function)
        args = [example_argument(a) for a in opts.arg]
        nums = tuple(int(n) for n in opts.argnums.split(","))
    except ValueError as e:
        parser.error(str(e))
    argnums = nums[0] if len(nums) == 1 else nums
    d = pb.differentiate(fn, argnums=argnums)
    if opts.command == "ir":
        print(d.ir(*args, stage="primal"))
        return 0
    if opts.output:
        print(pb.export(d, *args, path=opts.output, program=opts.command))
        return 0
    print(d.source(*args, program=opts.command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
