"""``python -m pullback``: the demo, and the generated source of any function from the shell.

    python -m pullback demo
    python -m pullback grad path/to/file.py:func --arg "f64[100,3]" --arg "f64[100]" [-o out.py]

The stages: ``ir`` (the traced program), ``primal``, ``jvp``, ``vjp``, ``grad``, ``hessian``
(and ``jacfwd``, ``jacrev``). An ``--arg`` is a type: the program is traced from shapes and dtypes
alone, never from arrays of that size. ``--argnums`` picks the differentiated arguments. With ``-o`` the
program is written as a standalone module (``pullback.api.export``: its constants in an ``.npz``
beside it); otherwise it is printed. Bad options, and types the function cannot take (pullback's error
at the user's line, in one line), exit with status 2; any other exception keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import itertools
import sys
from pathlib import Path

import numpy as np

import pullback as pb
from pullback.demo import softplus_regression
from pullback.errors import PullbackError
from pullback.ir.types import ArrayType


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


def abstract_argument(spec: str) -> pb.ShapeDtypeStruct:
    """``f64[100,3]`` -> an argument of that shape and dtype: the program is traced from the type
    alone, so a 100000 x 100000 matrix costs nothing."""
    t = ArrayType.parse(spec)
    return pb.ShapeDtypeStruct(t.shape, t.dtype)


def load_function(target: str):
    """``path/to/file.py:func`` -> the function (the file is imported as a module)."""
    path, sep, name = target.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise ValueError(f"give the function as path/to/file.py:name, got {target!r}")
    if not Path(path).is_file():
        raise ValueError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{path} has no function {name!r}")
    return fn


def parse_argnums(text: str, n: int) -> int | tuple[int, ...]:
    """``0`` -> 0, ``0,1`` -> (0, 1): positions among the ``n`` arguments given."""
    try:
        nums = tuple(int(k) for k in text.split(","))
    except ValueError:
        raise ValueError(f"--argnums takes argument positions, as 0 or 0,1; got {text!r}") from None
    bad = [k for k in nums if not 0 <= k < n]
    if bad:
        raise ValueError(f"--argnums {text}: position {bad[0]} is out of range for the {n} argument(s) given by --arg")
    return nums[0] if len(nums) == 1 else nums


def check_arity(fn, n: int) -> None:
    """Every parameter without a default needs an ``--arg`` (keyword-only ones cannot have one)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature to check: tracing says what is wrong
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional if p.default is p.empty]
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    name = getattr(fn, "__name__", "the function")
    if keyword:
        raise ValueError(f"{name} has keyword-only parameters without defaults ({', '.join(keyword)}), "
                         "which --arg cannot give")
    if n < len(required):
        raise ValueError(f"{name} takes {len(required)} argument(s) ({', '.join(required)}); "
                         f"give each with --arg, as --arg 'f64[100,3]' (got {n})")
    if n > len(positional) and not any(p.kind is p.VAR_POSITIONAL for p in params):
        raise ValueError(f"{name} takes at most {len(positional)} argument(s); got {n} --arg")


def check_writable(path: Path) -> None:
    """``-o``: a .py file that can be written (tried now, before the seconds of tracing)."""
    if path.suffix != ".py":
        raise ValueError(f"-o writes a Python module: give a path ending in .py, not {str(path)!r}")
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise ValueError(f"-o {path}: cannot write it ({e.strerror or e})") from None
    if not existed:
        path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pullback", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["demo", "ir", *pb.api.transforms.STAGES])
    parser.add_argument("function", nargs="?", help="path/to/file.py:func")
    parser.add_argument("--arg", action="append", default=[], help="an argument's dtype and shape, as f64[100,3]")
    parser.add_argument("--argnums", help="differentiated arguments, as 0 or 0,1 (default 0)")
    parser.add_argument("-o", "--output", help="write a standalone module here instead of printing")
    opts = parser.parse_args(argv)
    if opts.command == "demo":
        return demo()
    if opts.function is None:
        parser.error("give the function as path/to/file.py:func")
    try:
        fn = load_function(opts.function)
        args = [abstract_argument(a) for a in opts.arg]
        check_arity(fn, len(args))
        argnums = 0 if opts.argnums is None else parse_argnums(opts.argnums, len(args))
        if opts.output:
            check_writable(Path(opts.output))
    except ValueError as e:
        parser.error(str(e))
    d = pb.differentiate(fn, argnums=argnums)
    try:
        if opts.command == "ir":
            text = d.ir(*args, stage="primal")
        elif opts.output:
            text = pb.export(d, *args, path=opts.output, program=opts.command)
        else:
            text = d.source(*args, program=opts.command)
    except PullbackError as e:  # the function does not fit the types given: the user's to fix, no traceback
        parser.exit(2, f"{parser.prog}: error: {opts.command} of {signature(fn, opts.arg)}: {e}\n")
    print(text)
    return 0


def signature(fn, specs: list[str]) -> str:
    """``loss(w: f64[3], X: f64[4,5])``: the function called with the types given, its parameters named
    where its signature names them."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    typed = [f"{p}: {t}" if p else t for p, t in itertools.zip_longest(params[:len(specs)], specs, fillvalue="")]
    return f"{getattr(fn, '__name__', 'the function')}({', '.join(typed)})"


if __name__ == "__main__":
    sys.exit(main())
