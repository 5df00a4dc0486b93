"""Issue 29, item 5, on compositions the other tests do not print: ``jacrev`` of a function with a
keyword-only parameter, ``hessian`` of a two-argument function in both arguments, ``vmap(grad(f))`` of a
function of a dict, ``grad(grad(f))``, ``jacfwd(grad(f))`` and ``value_and_grad``. Each prints
``def f_<transforms>(...)`` with ``f``'s parameter names and comments quoting only ``f``'s lines, and
computes what central differences or a loop over examples compute; a function form called inside the
traced function quotes its own function's lines."""

import inspect
import re

import numpy as np

import pullback as pb

EPS = 1e-6


def energy(pos, *, stiffness=2.0):
    d = pos[1:] - pos[:-1]
    stretch = d ** 2
    return stiffness * np.sum(stretch)


def pair(x, y):
    s = np.sin(x) * y
    return np.sum(s * s) + np.sum(x * y)


def tree_loss(params, x):
    W, b = params["W"], params["b"]
    h = np.tanh(W @ x + b)
    return np.sum(h ** 2)


def scalar(t):
    q = np.sin(t) * t
    return q * q


def own_lines(fn) -> set[int]:
    lines, first = inspect.getsourcelines(fn)
    return set(range(first, first + len(lines)))


def quoted(src: str) -> set[int]:
    return {int(m) for m in re.findall(r"# test_composed_names\.py:(\d+)", src)}


def header(src: str) -> str:
    (line,) = [line for line in src.splitlines() if line.startswith("def ")]
    return line


X = np.linspace(0.1, 1.0, 4)
Y = np.linspace(-1.0, 1.0, 4)


def grad_fd(f, x):
    return np.array([(f(x + EPS * e) - f(x - EPS * e)) / (2 * EPS) for e in np.eye(x.size)]).T


def test_jacrev_of_a_function_with_a_keyword_only_parameter():
    """``def energy_jacrev(pos)``, ``d`` and its cotangent under the user's name; called with the keyword
    (``stiffness=3.0``), the keyword's Jacobian."""
    pos = np.array([0.1, 0.5, 0.7, 1.6])
    src = pb.source(pb.jacrev(energy), pos)
    assert header(src) == "def energy_jacrev(pos):"
    assert quoted(src) and quoted(src) <= own_lines(energy)
    assert re.search(r"^    d = part - ", src, re.M) and "d_bar = " in src and "pos_bar = " in src
    np.testing.assert_allclose(pb.jacrev(energy)(pos), grad_fd(energy, pos), rtol=1e-7)
    np.testing.assert_allclose(pb.jacrev(energy)(pos, stiffness=3.0),
                               grad_fd(lambda p: energy(p, stiffness=3.0), pos), rtol=1e-7)


def test_hessian_of_a_two_argument_function_in_both_arguments():
    src = pb.source(pb.hessian(pair, argnums=(0, 1)), X, Y)
    assert header(src) == "def pair_hessian(x, y):"
    assert quoted(src) and quoted(src) <= own_lines(pair)
    H = pb.hessian(pair, argnums=(0, 1))(X, Y)
    for i, a in enumerate((X, Y)):
        for j in range(2):
            def gi(z, i=i, j=j):  # the gradient in argument j as a function of argument i
                args = [X, Y]
                args[i] = z
                return pb.grad(pair, argnums=j)(*args)

            np.testing.assert_allclose(H[j][i], grad_fd(gi, a), rtol=1e-6, atol=1e-8)


def test_vmap_of_grad_of_a_function_of_a_dict():
    params = {"W": 0.1 * np.arange(12.0).reshape(3, 4), "b": np.array([0.1, -0.2, 0.3])}
    xs = np.linspace(-1.0, 1.0, 20).reshape(5, 4)
    per_example = pb.vmap(pb.grad(tree_loss), in_axes=(None, 0))
    src = pb.source(per_example, params, xs)
    assert header(src) == "def tree_loss_grad(params_W, params_b, x):"
    assert quoted(src) and quoted(src) <= own_lines(tree_loss)
    got = per_example(params, xs)
    for k in params:
        for n, x in enumerate(xs):
            def along(z, k=k, x=x):
                return tree_loss({**params, k: z.reshape(params[k].shape)}, x)

            np.testing.assert_allclose(got[k][n].ravel(), grad_fd(along, params[k].ravel()), rtol=1e-6, atol=1e-9)


def test_nested_function_forms_name_each_transform():
    assert header(pb.source(pb.grad(pb.grad(scalar)), 0.3)) == "def scalar_grad_grad(t):"
    assert header(pb.source(pb.jacfwd(pb.grad(pair)), X, Y)) == "def pair_grad_jacfwd(x, y):"
    assert header(pb.source(pb.value_and_grad(pair), X, Y)) == "def pair_value_and_grad(x, y):"
    for src in (pb.source(pb.grad(pb.grad(scalar)), 0.3), pb.source(pb.jacfwd(pb.grad(pair)), X, Y)):
        assert quoted(src) and quoted(src) <= own_lines(scalar) | own_lines(pair)
    h = 1e-4
    second = (scalar(0.3 + h) - 2 * scalar(0.3) + scalar(0.3 - h)) / h ** 2
    np.testing.assert_allclose(pb.grad(pb.grad(scalar))(0.3), second, rtol=1e-6)
    np.testing.assert_allclose(pb.jacfwd(pb.grad(pair))(X, Y), grad_fd(lambda x: pb.grad(pair)(x, Y), X), rtol=1e-6)


def outer(a):
    g = pb.grad(pair)(a, Y)
    return np.sum(g ** 2)


def test_a_function_form_called_inside_the_traced_function_is_right():
    np.testing.assert_allclose(pb.grad(outer)(X), grad_fd(outer, X), rtol=1e-6)


def test_a_function_form_inside_the_traced_function_quotes_the_functions_lines():
    src = pb.source(pb.grad(outer), X)
    assert quoted(src) & own_lines(pair)
