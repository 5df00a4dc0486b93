"""``python -m pullback demo``: trace a small function, print its IR, the Python
pullback generates for it and for its gradient, run both and check them against
NumPy and finite differences."""

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pullback")
    parser.add_argument("command", choices=["demo"])
    parser.parse_args(argv)
    return demo()


if __name__ == "__main__":
    sys.exit(main())
