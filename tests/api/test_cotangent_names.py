"""The cotangent parameters of a printed vjp or transpose program are named after the outputs they are
the cotangents of (``mul_bar``), as the gradients are after the inputs (``x_bar``)."""

import numpy as np

import pullback as pb


def f(x, y):
    return np.sin(x) * y


def h(x, y):
    loss = np.sum(np.sin(x) * y)
    return loss, x * 2.0


def load_source(src: str, name: str):
    """The printed program run as saved, without pullback."""
    namespace: dict = {}
    exec(compile(src, "<saved>", "exec"), namespace)
    return namespace[name]


def _def_line(src: str) -> str:
    return next(line for line in src.splitlines() if line.startswith("def "))


def test_vjp_parameter_named_after_its_output():
    x, y, ct = np.array([0.3, 1.1, -0.7]), np.array([2.0, -1.0, 0.5]), np.array([1.0, 2.0, -3.0])
    src = pb.differentiate(f).source(x, y, program="vjp")
    assert _def_line(src) == "def f_vjp(x, y, mul_bar):"
    assert "mul = " in src and "x_1" not in src
    out, x_bar = load_source(src, "f_vjp")(x, y, ct)
    np.testing.assert_allclose(out, np.sin(x) * y)
    np.testing.assert_allclose(x_bar, ct * y * np.cos(x))  # d/dx of sin(x) * y, by hand
    transposed = pb.differentiate(f).source(x, y, program="transpose")
    assert _def_line(transposed) == "def f_transpose(x, y, mul_bar):"


def test_several_outputs_one_cotangent_each():
    x, y = np.array([0.3, 1.1, -0.7]), np.array([2.0, -1.0, 0.5])
    src = pb.differentiate(h).source(x, y, program="vjp")
    assert _def_line(src) == "def h_vjp(x, y, loss_bar, mul_bar):"
    ct = np.array([1.0, -2.0, 0.5])
    loss, doubled, x_bar = load_source(src, "h_vjp")(x, y, 1.5, ct)
    np.testing.assert_allclose(loss, np.sum(np.sin(x) * y))
    np.testing.assert_allclose(doubled, 2.0 * x)
    eps = 1e-6  # central differences of <ct_out, h(x)> in each entry of x
    def pairing(x):
        a, b = h(x, y)
        return 1.5 * a + ct @ b
    fd = [(pairing(x + eps * e) - pairing(x - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(x_bar, fd, rtol=1e-6)
