"""A Python loop rolled back up prints under the user's lines: a carry started from a literal under the
statement that assigned it before the loop (``total = 0.0``), the loop itself, and the carries started
from arguments, under the user's ``for``. The gradient is the central differences'."""

import inspect

import numpy as np

import pullback as pb
from tests.oracles import central_differences


def accumulate(x, w):
    total = 0.0
    h = x
    for _ in range(200):
        h = np.tanh(w * h + 0.1)
        total = total + np.sum(h ** 2)
    return total


def line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if line.strip() == text)


def comment_above(src: str, statement: str) -> str:
    lines = src.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(statement))
    return next(line.strip() for line in reversed(lines[:at]) if line.strip().startswith("# "))


def test_a_rolled_loops_starts_stand_under_the_users_lines():
    x = np.array([0.1, -0.2, 0.3])
    d = pb.differentiate(accumulate, argnums=(0, 1))
    src = d.source(x, 0.9)
    loops = [line.strip() for line in src.splitlines() if line.lstrip().startswith("for ")]
    assert loops == ["for t in range(200):", "for t in range(199, -1, -1):"]  # rolled: one loop each way
    start = line_of(accumulate, "total = 0.0")
    assert comment_above(src, "total = np.float64(0.0)") == f"# test_rolled_loop_lines.py:{start}  total = 0.0"
    header = f"# test_rolled_loop_lines.py:{start + 2}  for _ in range(200):"
    assert comment_above(src, "h = x") == header  # the loop and its carry from the argument x
    g_x, g_w = d.grad(x, 0.9)
    np.testing.assert_allclose(g_x, central_differences(accumulate, (x, 0.9), 0), rtol=1e-6)
    np.testing.assert_allclose(g_w, central_differences(accumulate, (x, 0.9), 1), rtol=1e-6)
