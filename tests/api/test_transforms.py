import numpy as np
import pytest
from pullback.testing import numerical_jvp

import pullback as pb


def f(x, y):
    return x * np.log(y) + np.log(x * y) * y


def fd_grad(fn, args, i, eps=1e-6):
    args = [np.asarray(a, float) for a in args]
    g = np.zeros_like(args[i])
    for idx in np.ndindex(g.shape):
        e = np.zeros_like(args[i])
        e[idx] = 1
        plus = [a + eps * e if j == i else a for j, a in enumerate(args)]
        minus = [a - eps * e if j == i else a for j, a in enumerate(args)]
        g[idx] = (fn(*plus) - fn(*minus)) / (2 * eps)
    return g


def test_grad_and_value_and_grad():
    x, y = 1.5, 2.5
    np.testing.assert_allclose(pb.grad(f)(x, y), fd_grad(f, (x, y), 0), rtol=1e-7)
    v, (gx, gy) = pb.value_and_grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(v, f(x, y))
    np.testing.assert_allclose([gx, gy], [fd_grad(f, (x, y), 0), fd_grad(f, (x, y), 1)], rtol=1e-7)


def test_grad_requires_real_scalar_output():
    with pytest.raises(TypeError, match=r"test_api.py:\d+: grad needs a function returning a real scalar .* "
                                        r"returns f64\[3\]"):
        pb.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(TypeError, match=r"test_api.py:\d+: grad needs"):  # no equation: the definition's line
        pb.grad(lambda x: x)(np.ones(3))
    with pytest.raises(TypeError, match="real scalar"):
        pb.grad(lambda z: (z * z).sum())(np.ones(3, complex))


def test_grad_of_a_one_element_output():
    """A loss of shape (1,) or (1, 1) (``keepdims``, a 1x1 product) is one number: grad takes it, as
    autograd does, and value_and_grad returns the value in its shape."""
    x = np.array([0.3, -1.2, 2.0])

    def f(x):
        return x[None, :] @ np.sin(x)[:, None]

    def f_scalar(x):
        return float(np.sum(x * np.sin(x)))

    np.testing.assert_allclose(pb.grad(f)(x), fd_grad(lambda x: f_scalar(x), (x,), 0), rtol=1e-7)
    np.testing.assert_allclose(pb.grad(lambda x: np.sum(x ** 2, keepdims=True))(x), 2 * x)
    value, g = pb.value_and_grad(f)(x)
    assert value.shape == (1, 1) and np.allclose(value, f_scalar(x))
    np.testing.assert_allclose(g, np.sin(x) + x * np.cos(x))
    np.testing.assert_allclose(pb.grad(pb.grad(lambda x: np.sum(x ** 3, keepdims=True)))(2.0), 12.0)


def test_grad_of_integer_argument_is_refused():
    with pytest.raises(TypeError, match="dtype int64"):
        pb.grad(lambda x: (x * 1.0).sum())(np.arange(3))


def test_jvp_vjp_linearize_with_tuples():
    def g(a, b):
        return a @ b, np.sin(a).sum()

    a, b = np.random.default_rng(0).standard_normal((2, 3, 3))
    ta, tb = np.random.default_rng(1).standard_normal((2, 3, 3))
    (o1, o2), (t1, t2) = pb.jvp(g, (a, b), (ta, tb))
    np.testing.assert_allclose(o1, a @ b)
    want = numerical_jvp(g, (a, b), (ta, tb))
    np.testing.assert_allclose(t1, want[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(t2, want[1], rtol=1e-6)

    out, lin = pb.linearize(g, a, b)
    np.testing.assert_allclose(lin(ta, tb)[0], t1, rtol=1e-12)

    out, vjp_fn = pb.vjp(g, a, b)
    c1, c2 = np.ones((3, 3)), 2.0
    ga, gb = vjp_fn((c1, c2))
    np.testing.assert_allclose(ga, c1 @ b.T + 2.0 * np.cos(a))
    np.testing.assert_allclose(gb, a.T @ c1)
    with pytest.raises(ValueError, match="structure"):
        vjp_fn(c1)


def test_differentiate_decorator_both_forms_and_stages():
    @pb.differentiate
    def h(x):
        return np.sum(np.exp(x))

    @pb.differentiate(argnums=(0, 1))
    def k(x, y):
        return np.sum(x * y)

    x = np.arange(3.0)
    np.testing.assert_allclose(h(x), np.exp(x).sum())
    np.testing.assert_allclose(h.grad(x), np.exp(x))
    gx, gy = k.grad(x, x + 1)
    np.testing.assert_allclose(gx, x + 1)
    np.testing.assert_allclose(gy, x)
    for stage in ("primal", "jvp", "known", "linear", "transpose", "vjp", "grad"):
        pb.verify(h.ir(x, stage=stage))
        compile(h.source(x, program=stage), "<check>", "exec")
    assert "def h_grad(x):" in h.source(x)
    with pytest.raises(ValueError, match="unknown stage"):
        h.source(x, program="nope")


def test_second_order_grad_of_grad_and_hvp():
    x, y = 1.5, 2.5
    gg = pb.grad(pb.grad(f))(x, y)
    np.testing.assert_allclose(gg, fd_grad(pb.grad(f), (x, y), 0), rtol=1e-6)

    def loss(w):
        return np.sum(np.tanh(w) ** 2) + w[0] * w[1] ** 3

    w, v = np.array([0.3, -0.7, 1.1]), np.array([1.0, 0.5, -2.0])
    _, hvp = pb.jvp(pb.grad(loss), (w,), (v,))
    eps = 1e-6
    want = (pb.grad(loss)(w + eps * v) - pb.grad(loss)(w - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hvp, want, rtol=1e-6)


def test_static_argnums_in_differentiate():
    d = pb.differentiate(lambda x, n: np.sum(x**n), static_argnums=1)
    np.testing.assert_allclose(d.grad(np.arange(3.0), 3), 3 * np.arange(3.0) ** 2)


def test_structured_arguments_and_argnums_order():
    def model(params, x):
        W, b = params["W"], params["b"]
        return np.sum(np.tanh(x @ W + b) ** 2)

    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    x = rng.standard_normal((4, 3))
    g = pb.grad(model)(params, x)
    assert set(g) == {"W", "b"}
    flat = lambda W, b: model({"W": W, "b": b}, x)  # noqa: E731
    np.testing.assert_allclose(g["W"], fd_grad(flat, (params["W"], params["b"]), 0), rtol=1e-6)
    np.testing.assert_allclose(g["b"], fd_grad(flat, (params["W"], params["b"]), 1), rtol=1e-6)
    assert "params_W" in pb.differentiate(model).source(params, x)

    gx, gp = pb.grad(model, argnums=(1, 0))(params, x)
    np.testing.assert_allclose(gx, fd_grad(lambda x: model(params, x), (x,), 0), rtol=1e-6)
    np.testing.assert_allclose(gp["b"], g["b"])

    out, vjp_fn = pb.differentiate(model, argnums=(1, 0)).vjp(params, x)
    vx, vp = vjp_fn(1.0)
    np.testing.assert_allclose(vx, gx)
    np.testing.assert_allclose(vp["W"], g["W"])

    tangents = ({"W": np.ones((3, 2)), "b": np.zeros(2)}, np.zeros((4, 3)))
    _, t = pb.jvp(model, (params, x), tangents)
    np.testing.assert_allclose(t, np.sum(g["W"]), rtol=1e-10)

    _, lin = pb.differentiate(model, argnums=(1, 0)).linearize(params, x)
    np.testing.assert_allclose(lin(np.zeros((4, 3)), tangents[0]), t, rtol=1e-10)


def test_tuple_of_arrays_argument():
    f2 = lambda ab: np.sum(ab[0] * ab[1])  # noqa: E731
    a, b = np.arange(3.0), np.arange(3.0) + 1
    ga, gb = pb.grad(f2)((a, b))
    np.testing.assert_allclose(ga, b)
    np.testing.assert_allclose(gb, a)


def test_steady_state_fast_path_keeps_signatures_apart_and_traces_through():
    @pb.differentiate
    def f(x):
        return np.sum(np.sin(x) * x)

    x3, x4 = np.linspace(0.1, 1.0, 3), np.linspace(0.1, 1.0, 4)
    for x in (x3, x4, x3, 0.5, x4):  # cached per shape; a Python scalar is its own signature
        np.testing.assert_allclose(f.grad(x), np.cos(x) * x + np.sin(x), rtol=1e-14)
        np.testing.assert_allclose(f(x), np.sum(np.sin(x) * x), rtol=1e-14)
    # after concrete calls, calling f on traced values still traces through it
    np.testing.assert_allclose(pb.grad(lambda x: f(x) * 2.0)(x3), 2 * (np.cos(x3) * x3 + np.sin(x3)), rtol=1e-14)
    np.testing.assert_allclose(pb.grad(lambda x: f.grad(x)[0])(x3)[0], 2 * np.cos(x3[0]) - x3[0] * np.sin(x3[0]),
                               rtol=1e-13)


def test_shape_dtype_structs_trace_the_program_that_arrays_do_and_cannot_be_called(tmp_path):
    def loss(params, X):
        return np.sum(np.tanh(X @ params["w"] + params["b"]) ** 2)

    params, X = {"w": np.ones(3), "b": np.float32(0.5)}, np.ones((4, 3))
    abstract = ({"w": pb.ShapeDtypeStruct((3,), np.float64), "b": pb.ShapeDtypeStruct((), np.float32)},
                pb.ShapeDtypeStruct(X.shape, X.dtype))
    d = pb.differentiate(loss)
    assert d.source(*abstract) == d.source(params, X) and str(d.ir(*abstract)) == str(d.ir(params, X))
    path = pb.export(d, *abstract, path=tmp_path / "loss_grad.py")
    assert "params_w: f64[3], params_b: f32[], X: f64[4,3]" in path.read_text()
    with pytest.raises(TypeError, match="called on a ShapeDtypeStruct, which has a shape and a dtype but no values"):
        d.grad(*abstract)
    with pytest.raises(TypeError, match="uint8 is not supported"):
        pb.ShapeDtypeStruct((2,), np.uint8)
