"""Names in printed programs through the function forms (``pb.source(pb.grad(f))``, ``pb.vmap(pb.grad(f))``,
...): the arrays ``f`` reads from its scope keep the names ``differentiate(f)`` gives them (``M``, ``L_T``,
``W`` of ``self.W``), not ``c``."""

import numpy as np
import pytest

import pullback as pb

L_LOWER = np.tril(np.arange(1.0, 10.0).reshape(3, 3)) + 3 * np.eye(3)


def through_transpose(x):
    return np.sum(np.tanh(L_LOWER.T @ x) ** 2)


def closure():
    M = np.linspace(0.5, 1.5, 9).reshape(3, 3)

    def closed(x):
        z = M @ x
        return np.sum(np.tanh(z) ** 2)

    return closed, M


class Model:
    def __init__(self):
        self.W = np.eye(3) + 0.1

    def loss(self, x):
        h = np.tanh(self.W @ x)
        return np.sum(h ** 2)


def _keywords(src: str) -> str:
    """The generated function's keyword-only parameters, as printed."""
    head = next(line for line in src.splitlines() if line.startswith("def "))
    return head.split("*, ")[1].rstrip("):") if "*, " in head else ""


FORMS = {
    "grad": lambda f, x: pb.source(pb.grad(f), x),
    "value_and_grad": lambda f, x: pb.source(pb.value_and_grad(f), x),
    "jacrev": lambda f, x: pb.source(pb.jacrev(f), x),
    "jacfwd": lambda f, x: pb.source(pb.jacfwd(f), x),
    "hessian": lambda f, x: pb.source(pb.hessian(f), x),
    "vmap_grad": lambda f, x: pb.source(pb.vmap(pb.grad(f)), np.stack([x, 2 * x])),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_function_forms_name_captured_arrays_as_differentiate_does(form):
    x = np.array([0.3, -0.2, 0.1])
    closed, M = closure()
    model = Model()
    for f, name, array in ((closed, "M", M), (through_transpose, "L_LOWER_T", L_LOWER.T), (model.loss, "W", model.W)):
        assert _keywords(pb.differentiate(f).source(x)) == name
        np.testing.assert_array_equal(pb.differentiate(f).constants(x)[name], array)
        src = FORMS[form](f, x)
        assert _keywords(src) == name, src
        assert " c " not in src and "c.T" not in src
    # the named programs compute f's gradient (the closure's: M^T (2 tanh(z) (1 - tanh(z)^2)))
    t = np.tanh(M @ x)
    np.testing.assert_allclose(pb.grad(closed)(x), M.T @ (2 * t * (1 - t ** 2)), rtol=1e-13)


def differences(x):
    n = x.shape[0]
    D = np.eye(n) - np.eye(n, k=1)
    w = np.arange(n, dtype=np.float64) / n
    mask = np.arange(n) % 2 == 0
    return np.sum((D @ x) ** 2) + np.sum(np.where(mask, w * x, 0.0)) + np.sum(D[:2] @ x)


def test_arrays_made_while_tracing_are_named_after_the_users_variables():
    """An array the traced code computes from shapes alone by arithmetic and slices the program does again
    (``D = np.eye(n) - np.eye(n, k=1)``, its view ``D[:2]``, ``w = np.arange(n, dtype=np.float64) / n``) is
    that work, named after the variable holding it; one it does not (``mask = np.arange(n) % 2 == 0``) is a
    keyword constant named after it, not ``c``; the gradient is the finite differences'."""
    x = np.array([0.5, -1.0, 2.0, 3.0])
    d = pb.differentiate(differences)
    src = d.source(x)
    assert _keywords(src) == "mask", src
    assert "w = arange / 4.0" in src and "D = eye - eye_1" in src and "D_view = D[:2]" in src, src
    n = 4
    consts = d.constants(x)
    np.testing.assert_array_equal(consts["mask"], np.arange(n) % 2 == 0)
    eps, g = 1e-6, d.grad(x)
    fd = [(differences(x + eps * e) - differences(x - eps * e)) / (2 * eps) for e in np.eye(n)]
    np.testing.assert_allclose(g, fd, rtol=1e-7)


def layer_loss(params, x, scale=1.0):
    W, b = params
    h = np.tanh(W @ x + b)
    return np.sum(h ** 2) * scale


@pytest.mark.parametrize("form, head", [
    ("differentiate", "def layer_loss_grad(W, b, x):"), ("grad", "def layer_loss_grad(W, b, x):"),
    ("value_and_grad", "def layer_loss_value_and_grad(W, b, x):"), ("jit", "def layer_loss(W, b, x):"),
    ("vmap_grad", "def layer_loss_grad(W, b, x):")])
@pytest.mark.parametrize("partial", [False, True])
def test_function_forms_and_partials_print_the_functions_name_and_unpacked_parameters(form, head, partial):
    """``pb.grad(f)`` and ``functools.partial(f, scale=2.0)`` print as ``differentiate(f)`` does: ``f``'s name
    and the names ``f`` unpacks its parameters into (``W, b = params``), not ``f`` and ``params_0``."""
    import functools

    params, x = (np.eye(3) * 0.5, np.full(3, 0.1)), np.array([0.5, -1.0, 2.0])
    f = functools.partial(layer_loss, scale=2.0) if partial else layer_loss
    src = {"differentiate": lambda: pb.differentiate(f).source(params, x),
           "grad": lambda: pb.source(pb.grad(f), params, x),
           "value_and_grad": lambda: pb.source(pb.value_and_grad(f), params, x),
           "jit": lambda: pb.source(f, params, x),
           "vmap_grad": lambda: pb.source(pb.vmap(pb.grad(f), in_axes=(None, 0)), params, np.stack([x, x]))}[form]()
    assert head in src, src
    h = np.tanh(params[0] @ x + params[1])
    delta = 2 * h * (1 - h ** 2) * (2.0 if partial else 1.0)
    W_bar, b_bar = pb.grad(f)(params, x)
    np.testing.assert_allclose(W_bar, np.outer(delta, x), rtol=1e-13)
    np.testing.assert_allclose(b_bar, delta, rtol=1e-13)


def test_a_lambda_in_a_statement_of_several_lines_is_quoted_at_its_own_line():
    """``pb.grad(lambda w: ...)`` passed inside a call written over several lines: the comments quote the
    lambda's line (where ``f``'s code is), not the first line of the enclosing statement."""
    import inspect

    x = np.array([0.5, -1.0, 2.0])
    sources = [
        pb.source(pb.grad(lambda w: np.sum(np.sin(w) * w)),
                  x),
    ]
    line = inspect.currentframe().f_lineno - 3  # the lambda's line
    comments = [ln.strip() for ln in sources[0].splitlines() if ln.strip().startswith("# ")]
    assert comments and all(c.startswith(f"# test_printed_names.py:{line}  pb.source(pb.grad(lambda w:")
                            for c in comments), comments
    np.testing.assert_allclose(pb.grad(lambda w: np.sum(np.sin(w) * w))(x), np.sin(x) + x * np.cos(x), rtol=1e-14)


def positions_weighted(x):
    return np.sum(x * np.arange(x.shape[0]))


def test_an_unnamed_arange_is_named_after_the_call():
    """``np.arange(n)`` made while tracing, used where it is made: printed as the call under the name
    ``arange`` (the NumPy function a reader knows, not the IR's ``iota``)."""
    x = np.array([0.5, -1.0, 2.0])
    d = pb.differentiate(positions_weighted)
    src = d.source(x)
    assert "arange = np.arange(3, dtype=np.int64)" in src and "iota" not in src, src
    np.testing.assert_allclose(d.grad(x), [0.0, 1.0, 2.0])


def test_the_hessian_of_a_matrix_argument_prints_and_traces_again():
    """``pb.source(pb.hessian(f), X)`` and ``pb.jit(pb.hessian(f))`` for a matrix ``X``: the Hessian's diagonal
    store (``H[i, :, i, :] = blocks``) re-traces (its index arrays numbered in order), printing
    ``def f_hessian(x)``; the values are the elementwise second derivative on the diagonal."""
    def f(x):
        return np.sum(np.sin(np.exp(x)))

    x = np.linspace(-0.5, 0.5, 6).reshape(2, 3)
    src = pb.source(pb.hessian(f), x)
    assert "def f_hessian(x):" in src
    e = np.exp(x)
    want = np.zeros((2, 3, 2, 3))
    for i in range(2):
        for j in range(3):
            want[i, j, i, j] = np.cos(e[i, j]) * e[i, j] - np.sin(e[i, j]) * e[i, j] ** 2
    np.testing.assert_allclose(pb.jit(pb.hessian(f))(x), want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(pb.hessian(f)(x), want, rtol=1e-13, atol=1e-15)
