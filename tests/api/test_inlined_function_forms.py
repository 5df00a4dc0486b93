"""A function form (``pb.grad(f)``, ``pb.value_and_grad(f)``) called inside the function being traced: its
equations keep ``f``'s lines and ``f``'s names in the printed program, and the caller's targets name what the
caller receives (``g = pb.grad(pair)(a, Y)``). The derivatives are the central differences'."""

import inspect
import re

import numpy as np

import pullback as pb

EPS = 1e-6
X = np.linspace(0.1, 1.0, 4)
Y = np.linspace(-1.0, 1.0, 4)


def pair(x, y):
    s = np.sin(x) * y
    return np.sum(s * s) + np.sum(x * y)


def outer(a):
    g = pb.grad(pair)(a, Y)
    return np.sum(g ** 2)


def both(a):
    value, g = pb.value_and_grad(pair)(a, Y)
    return value * np.sum(np.cos(g))


def unnamed(a):
    return np.sum(pb.grad(pair)(a, Y) ** 3)


def lines_of(fn) -> set[int]:
    lines, first = inspect.getsourcelines(fn)
    return set(range(first, first + len(lines)))


def quoted(src: str) -> set[int]:
    return {int(m) for m in re.findall(r"# test_inlined_function_forms\.py:(\d+)", src)}


def central(f, x):
    return np.array([(f(x + EPS * e) - f(x - EPS * e)) / (2 * EPS) for e in np.eye(x.size)])


def test_the_inlined_gradient_quotes_its_functions_lines_and_keeps_its_names():
    src = pb.differentiate(outer).source(X)
    assert quoted(src) & lines_of(pair) and quoted(src) <= lines_of(pair) | lines_of(outer)
    (line,) = set(re.findall(r"# test_inlined_function_forms\.py:(\d+)  s = np\.sin\(x\) \* y\n", src))
    assert int(line) in lines_of(pair)
    assert re.search(r"^    s = sin \* Y$", src, re.M)  # pair's ``s``, not ``mul``
    assert re.search(r"^    g = Y \+ \w+$", src, re.M)  # what ``outer`` receives: its ``g``
    assert "power = g ** 2" in src
    np.testing.assert_allclose(pb.grad(outer)(X), central(outer, X), rtol=1e-6)


def test_value_and_gradient_name_the_callers_two_targets():
    src = pb.differentiate(both).source(X)
    assert quoted(src) & lines_of(pair)
    assert re.search(r"^    value = ", src, re.M) and re.search(r"^    g = ", src, re.M)
    np.testing.assert_allclose(pb.grad(both)(X), central(both, X), rtol=1e-6)


def test_a_result_no_target_names_keeps_the_name_its_program_gave_it():
    src = pb.differentiate(unnamed).source(X)
    assert re.search(r"^    x_bar = Y \+ \w+$", src, re.M)
    np.testing.assert_allclose(pb.grad(unnamed)(X), central(unnamed, X), rtol=1e-6)


A = np.array([[2.0, 0.3], [0.3, 1.0]])


def loss(x, w):
    r = A @ x - w
    return 0.5 * np.sum(r * r)


def descend(w):
    x = np.zeros(2)
    for _ in range(300):
        g = pb.grad(loss)(x, w)
        x = x - 0.1 * g
    return np.sum(x ** 2)


def test_gradient_descent_by_a_function_form_rolls_up_under_the_users_lines():
    """300 steps of ``x = x - 0.1 * pb.grad(loss)(x, w)``: one loop each way, ``loss``'s ``r`` and the
    caller's ``g`` in the step, the loop under the user's ``for``."""
    w = np.array([1.0, -1.0])
    src = pb.differentiate(descend).source(w)
    loops = [line.strip() for line in src.splitlines() if line.lstrip().startswith("for ")]
    assert len(loops) == 2 and loops[0].endswith("range(300):")
    assert re.search(r"^        r = dot - w$", src, re.M) and re.search(r"^        g = A\.T @ r$", src, re.M)
    lines = src.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == loops[0])
    header = next(line.strip() for line in reversed(lines[:at]) if line.strip().startswith("# "))
    assert header.endswith("for _ in range(300):")
    assert quoted(src) & lines_of(loss)
    np.testing.assert_allclose(pb.grad(descend)(w), central(descend, w), rtol=1e-6)


def batched(a):
    G = pb.vmap(pb.grad(pair), in_axes=(0, None))(np.stack([a, 2 * a]), Y)
    return np.sum(G ** 2)


def test_what_the_callers_statement_computes_for_the_arguments_is_not_named_by_its_target():
    """``G = pb.vmap(pb.grad(pair))(np.stack([a, 2 * a]), Y)``: ``G`` is the gradients, not the stacked
    argument the statement computes first."""
    src = pb.differentiate(batched).source(X)
    assert re.search(r"^    G = Y \+ \w+$", src, re.M) and "power = G ** 2" in src
    assert not re.search(r"^    G = np\.stack", src, re.M) and not re.search(r"\bG_1\b", src)
    assert quoted(src) & lines_of(pair)
    np.testing.assert_allclose(pb.grad(batched)(X), central(batched, X), rtol=1e-6)
