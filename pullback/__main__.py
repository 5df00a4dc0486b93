"""``python -m pullback demo``: trace a small function, print its IR and its
generated Python, run it and compare with NumPy."""

from __future__ import annotations

import argparse
import sys

import numpy as np

import pullback as pb
from pullback.demo import softplus_regression


def demo() -> int:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 3))
    y = np.sign(rng.standard_normal(8))
    w = rng.standard_normal(3)
    print("# The typed IR of softplus_regression at w: f64[3], X: f64[8,3], y: f64[8]\n")
    print(pb.make_ir(softplus_regression)(w, X, y))
    print("\n# The Python that pullback generates from it\n")
    print(pb.source(softplus_regression, w, X, y))
    ours, theirs = pb.jit(softplus_regression)(w, X, y), softplus_regression(w, X, y)
    print(f"# compiled: {ours!r}\n# NumPy:    {theirs!r}")
    ok = np.allclose(ours, theirs, rtol=1e-12, atol=0)
    print("# they agree" if ok else "# MISMATCH")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pullback")
    parser.add_argument("command", choices=["demo"])
    parser.parse_args(argv)
    return demo()


if __name__ == "__main__":
    sys.exit(main())
