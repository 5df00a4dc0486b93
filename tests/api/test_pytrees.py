"""Registered dataclasses and pytree nodes, keyword arguments and static_argnames on the transforms
(issue 17): values and gradients against closed forms and finite differences, the compile cache
(a static change retraces, a data change does not), and the errors for bad input."""

import dataclasses
import functools
from typing import NamedTuple

import numpy as np
import pytest
from pullback.testing import check_grads

import pullback as pb


@dataclasses.dataclass
class Linear:
    w: np.ndarray
    b: np.ndarray
    power: int


pb.tree.register_dataclass(Linear, data_fields=["w", "b"], meta_fields=["power"])


@pb.tree.register_dataclass
@dataclasses.dataclass(frozen=True)
class Layer:  # fields inferred: static=True in the metadata marks a meta field
    params: dict
    activation: str = dataclasses.field(default="tanh", metadata={"static": True})


class Interval:
    """A class that is not a dataclass, registered with its own flatten and unflatten."""

    def __init__(self, lo, hi, closed=True):
        self.lo, self.hi, self.closed = lo, hi, closed


pb.tree.register_pytree_node(Interval, lambda iv: ((iv.lo, iv.hi), iv.closed),
                             lambda closed, children: Interval(*children, closed))


class Pair(NamedTuple):
    a: np.ndarray
    b: np.ndarray


def counted(fn):
    """``fn`` with a count of its Python calls: each trace calls it once, a compiled call never."""
    @functools.wraps(fn)  # keeps the signature, through which static_argnums and static_argnames are matched
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)
    wrapper.calls = 0
    return wrapper


def loss(p, x):
    return np.sum((x @ p.w + p.b) ** p.power)


X = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.25]])


def test_registered_dataclass_gradient_is_the_same_class_with_the_closed_form():
    p = Linear(np.array([0.3, -0.2]), np.array(0.1), 3)
    g = pb.grad(loss)(p, X)
    r = X @ p.w + p.b
    assert type(g) is Linear and g.power == 3
    np.testing.assert_allclose(g.w, X.T @ (3 * r**2), rtol=1e-13)
    np.testing.assert_allclose(g.b, np.sum(3 * r**2), rtol=1e-13)
    value, g2 = pb.value_and_grad(loss, argnums=(0, 1))(p, X)
    np.testing.assert_allclose(value, np.sum(r**3), rtol=1e-13)
    np.testing.assert_allclose(g2[1], np.outer(3 * r**2, p.w), rtol=1e-13)
    check_grads(lambda w, b: loss(Linear(w, b, 3), X), (p.w, p.b), order=2)


def test_meta_fields_are_static_data_fields_are_not():
    f = counted(loss)
    d = pb.differentiate(f)
    x = X
    d.grad(Linear(np.ones(2), np.array(0.5), 2), x)
    d.grad(Linear(np.array([2.0, -1.0]), np.array(1.5), 2), x)  # new data: the same program
    assert f.calls == 1
    g = d.grad(Linear(np.ones(2), np.array(0.5), 1), x)  # new meta value: another program
    assert f.calls == 2
    np.testing.assert_allclose(g.w, X.sum(0))
    np.testing.assert_allclose(g.b, 3.0)


def test_inferred_fields_nested_dict_and_a_dataclass_output():
    layer = Layer({"w": np.array([[1.0, -0.5], [0.25, 2.0]]), "c": np.array([0.1, 0.2])}, "tanh")

    def apply(layer, x):
        z = x @ layer.params["w"] + layer.params["c"]
        return np.tanh(z) if layer.activation == "tanh" else np.sin(z)

    def objective(layer, x):
        return np.sum(apply(layer, x) ** 2)

    x = np.array([[0.3, -0.7], [1.1, 0.4]])
    np.testing.assert_allclose(pb.jit(apply)(layer, x), np.tanh(x @ layer.params["w"] + layer.params["c"]))
    sin_layer = Layer(layer.params, "sin")
    np.testing.assert_allclose(pb.jit(apply)(sin_layer, x), np.sin(x @ layer.params["w"] + layer.params["c"]))
    g = pb.grad(objective)(layer, x)
    assert type(g) is Layer and g.activation == "tanh" and set(g.params) == {"w", "c"}
    t = np.tanh(x @ layer.params["w"] + layer.params["c"])
    delta = 2 * t * (1 - t**2)
    np.testing.assert_allclose(g.params["w"], x.T @ delta, rtol=1e-13)
    np.testing.assert_allclose(g.params["c"], delta.sum(0), rtol=1e-13)

    def step(layer):  # a registered class as the output of a compiled program
        return Layer({k: 2 * v for k, v in layer.params.items()}, layer.activation)

    out = pb.jit(step)(layer)
    assert type(out) is Layer and out.activation == "tanh"
    np.testing.assert_allclose(out.params["w"], 2 * layer.params["w"])


def test_register_pytree_node_with_aux_in_jacobians_and_vjp():
    def width(iv, x):
        return (iv.hi - iv.lo) * x if iv.closed else (iv.hi - iv.lo) * x**2

    iv = Interval(np.array(1.0), np.array(3.5))
    x = np.array([1.0, 2.0, -1.0])
    jac = pb.jacrev(width)(iv, x)
    assert type(jac) is Interval and jac.closed
    np.testing.assert_allclose(jac.lo, -x)
    np.testing.assert_allclose(jac.hi, x)
    jac_open = pb.jacfwd(width)(Interval(np.array(1.0), np.array(3.5), False), x)
    np.testing.assert_allclose(jac_open.hi, x**2)
    out, vjp_fn = pb.vjp(width, iv, x)
    (ct_iv, ct_x) = vjp_fn(np.ones(3))
    np.testing.assert_allclose(out, 2.5 * x)
    np.testing.assert_allclose([ct_iv.lo, ct_iv.hi], [-x.sum(), x.sum()])
    np.testing.assert_allclose(ct_x, np.full(3, 2.5))


def test_float32_complex_and_empty_leaves_keep_their_dtypes_and_shapes():
    p = Linear(np.array([0.5, 1.5], np.float32), np.array(0.25, np.float32), 2)
    g = pb.grad(loss)(p, X.astype(np.float32))
    assert g.w.dtype == np.float32
    np.testing.assert_allclose(g.w, X.T @ (2 * (X @ [0.5, 1.5] + 0.25)), rtol=1e-5)
    empty = Linear(np.zeros(0), np.array(2.0), 2)
    g = pb.grad(loss)(empty, np.zeros((3, 0)))
    assert g.w.shape == (0,)
    np.testing.assert_allclose(g.b, 12.0)
    z = Linear(np.array([1 + 1j, 2j]), np.array(0.5 + 0j), 1)
    np.testing.assert_allclose(pb.jit(loss)(z, X), loss(z, X))


def test_unregistered_dataclass_and_bad_registrations_are_refused_clearly():
    @dataclasses.dataclass
    class Plain:
        w: np.ndarray

    with pytest.raises(TypeError, match="Plain is a dataclass.*register_dataclass"):
        pb.grad(lambda p: np.sum(p.w))(Plain(np.ones(2)))
    with pytest.raises(TypeError, match="register_dataclass"):
        pb.jit(lambda x: Plain(x))(np.ones(2))
    with pytest.raises(ValueError, match="exactly once"):
        pb.tree.register_dataclass(Plain, data_fields=["w"], meta_fields=["w"])
    with pytest.raises(ValueError, match="exactly once"):
        pb.tree.register_dataclass(Linear, data_fields=["w"], meta_fields=["power"])
    with pytest.raises(TypeError, match="takes a dataclass"):
        pb.tree.register_dataclass(Interval, data_fields=[], meta_fields=[])
    with pytest.raises(TypeError, match="must be hashable"):
        pb.grad(loss)(Linear(np.ones(2), np.array(0.0), [2]), X)


def test_static_argnames_by_name_or_position_and_the_cache():
    def f(x, n, scale=1.0):
        return np.sum(x**n) * scale

    f = counted(f)
    x = np.array([1.0, 2.0, 3.0])
    g = pb.grad(f, static_argnames="n")
    np.testing.assert_allclose(g(x, n=3), 3 * x**2)
    np.testing.assert_allclose(g(2 * x, n=3), 3 * (2 * x) ** 2)  # new data: no trace
    assert f.calls == 1
    np.testing.assert_allclose(g(x, n=2), 2 * x)  # new static value: a trace
    assert f.calls == 2
    np.testing.assert_allclose(g(x, 2), 2 * x)  # by position: static too (inferred, as in JAX)
    np.testing.assert_allclose(g(x, n=2, scale=3.0), 6 * x)  # a traced keyword argument
    calls = f.calls
    np.testing.assert_allclose(g(x, n=2, scale=5.0), 10 * x)  # its value changes: no trace
    assert f.calls == calls
    # static_argnums passed by name is static as well
    np.testing.assert_allclose(pb.grad(f, static_argnums=1)(x, n=4), 4 * x**3)
    value, grad = pb.value_and_grad(f, static_argnames=("n",))(x, n=2, scale=0.5)
    np.testing.assert_allclose([value, *grad], [7.0, *x])


def test_static_argnames_on_jit_and_jacobians():
    def poly(x, *, degree, coeffs):
        return sum(coeffs[k] * x**k for k in range(degree + 1))

    poly = counted(poly)
    x = np.array([0.5, -1.0, 2.0])
    c = np.array([1.0, -2.0, 0.5, 0.25])
    jitted = pb.jit(poly, static_argnames="degree")
    np.testing.assert_allclose(jitted(x, degree=3, coeffs=c), np.polyval(c[::-1], x))
    np.testing.assert_allclose(jitted(x, degree=3, coeffs=2 * c), 2 * np.polyval(c[::-1], x))
    assert poly.calls == 1
    np.testing.assert_allclose(jitted(x, degree=1, coeffs=c), c[0] + c[1] * x)
    assert poly.calls == 2
    deriv = np.polyval(np.polyder(c[::-1]), x)
    np.testing.assert_allclose(pb.jacfwd(poly, static_argnames="degree")(x, degree=3, coeffs=c), np.diag(deriv))
    np.testing.assert_allclose(pb.jacrev(poly, static_argnames="degree")(x, degree=3, coeffs=c), np.diag(deriv))
    np.testing.assert_allclose(pb.jacobian(poly, static_argnames="degree")(x, degree=2, coeffs=c),
                               np.diag(c[1] + 2 * c[2] * x))

    def total(x, *, degree, coeffs):
        return np.sum(poly(x, degree=degree, coeffs=coeffs))

    second = np.polyval(np.polyder(c[::-1], 2), x)
    np.testing.assert_allclose(pb.hessian(total, static_argnames="degree")(x, degree=3, coeffs=c), np.diag(second))

    @pb.jit(static_argnames="n")
    def power(x, n):
        return x**n

    np.testing.assert_allclose(power(x, n=3), x**3)


def test_keyword_arguments_are_traced_not_differentiated():
    def f(x, *, y, pair):
        return np.sum(x * y + pair.a * pair.b)

    x, y = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    pair = Pair(np.array([0.5, 0.5]), np.array([2.0, 4.0]))
    np.testing.assert_allclose(pb.grad(f)(x, y=y, pair=pair), y)
    np.testing.assert_allclose(pb.jacrev(f)(x, y=y, pair=pair), y)
    out, vjp_fn = pb.differentiate(f).vjp(x, y=y, pair=pair)
    np.testing.assert_allclose(out, x @ y + 3.0)
    np.testing.assert_allclose(vjp_fn(np.float64(2.0))[0], 2 * y)


def test_vmap_maps_keyword_arguments_over_their_leading_axis():
    def f(x, *, scale, shift):
        return x * scale + shift["s"]

    xs = np.arange(6.0).reshape(2, 3)
    scales, shifts = np.array([2.0, -1.0]), {"s": np.array([[1.0, 1.0, 1.0], [0.0, 0.5, 1.0]])}
    out = pb.vmap(f)(xs, scale=scales, shift=shifts)
    np.testing.assert_allclose(out, [f(xs[i], scale=scales[i], shift={"s": shifts["s"][i]}) for i in range(2)])
    out = pb.vmap(f, in_axes=(None,))(xs[0], scale=scales, shift=shifts)  # in_axes is for positional ones
    np.testing.assert_allclose(out, [f(xs[0], scale=scales[i], shift={"s": shifts["s"][i]}) for i in range(2)])


def test_vmap_in_axes_a_tree_over_a_prefix_of_the_arguments_structure():
    """As in JAX, an ``in_axes`` entry may be a tree matching a prefix of its argument: a dict of weights
    mapped over one leaf and shared in the other; a tree that does not fit is a clear ValueError."""
    def loss(p, x):
        return np.sum(np.tanh(p["W"] @ x + p["b"]))

    rng = np.random.default_rng(5)
    params = {"W": rng.standard_normal((4, 2, 3)), "b": rng.standard_normal(2)}
    x = rng.standard_normal(3)
    expected = [loss({"W": W, "b": params["b"]}, x) for W in params["W"]]
    np.testing.assert_allclose(pb.vmap(loss, in_axes=({"W": 0, "b": None}, None))(params, x), expected, rtol=1e-14)
    grads = pb.vmap(pb.grad(loss), in_axes=({"W": 0, "b": None}, None))(params, x)
    for k, W in enumerate(params["W"]):
        one = pb.grad(loss)({"W": W, "b": params["b"]}, x)
        np.testing.assert_allclose(grads["W"][k], one["W"], rtol=1e-13)
        np.testing.assert_allclose(grads["b"][k], one["b"], rtol=1e-13)
    for bad in ({"W": 0}, [0, 0], {"W": 0, "b": {"c": 0}}):
        with pytest.raises(ValueError, match=r"vmap in_axes: .* is not a prefix of the structure \{'W': \*, 'b': \*\}"):
            pb.vmap(loss, in_axes=(bad, None))(params, x)


def test_bad_static_arguments_are_refused():
    def f(x, n):
        return x * n

    with pytest.raises(TypeError, match="static argument 'n'.*hashable"):
        pb.jit(f, static_argnames="n")(np.ones(2), n=[1, 2])
    with pytest.raises(ValueError, match="static_argnums"):
        pb.jit(f, static_argnums=2)(np.ones(2), 3)


def test_stages_are_read_with_keyword_arguments():
    def f(x, *, n, shift):
        return x**n + shift

    x, shift = np.array([1.0, 2.0]), np.array(0.5)
    jitted = pb.jit(f, static_argnames="n")
    assert "** 3" in jitted.source(x, n=3, shift=shift) and "** 3" not in jitted.source(x, n=4, shift=shift)
    assert [v.hint for v in jitted.ir(x, n=3, shift=shift).inputs] == ["x", "shift"]
    small = pb.make_ir(f, static_argnames="n")(x, n=1, shift=shift)
    assert len(small.eqns) < len(pb.make_ir(f, static_argnames="n")(x, n=5, shift=shift).eqns)

    def spring(x, stiffness=1.0):
        return np.sum(np.sin(x) * stiffness)

    assert "def spring(x, stiffness):" in pb.source(spring, x, stiffness=3.0)  # pb.source takes them too


def test_argnums_passed_by_keyword_is_refused():
    def f(n, x):
        return np.sum(x**n)

    np.testing.assert_allclose(pb.grad(f, argnums=1, static_argnums=0)(3, np.array([2.0])), [12.0])
    with pytest.raises(ValueError, match="keyword ones are not differentiated"):
        pb.grad(f, argnums=1, static_argnums=0)(x=np.array([2.0]), n=3)


def test_registered_dataclass_through_jvp_linearize_and_vmap():
    def f(p):
        return np.sum(p.w**p.power + p.b)

    p = Linear(np.array([1.0, 2.0]), np.array(0.5), 3)
    out, tangent = pb.jvp(f, (p,), (Linear(np.array([1.0, -1.0]), np.array(2.0), 3),))
    np.testing.assert_allclose([out, tangent], [10.0, 3 * 1 - 3 * 4 + 4.0])
    value, jvp_fn = pb.linearize(f, p)
    np.testing.assert_allclose([value, jvp_fn(Linear(np.array([0.0, 1.0]), np.array(0.0), 3))], [10.0, 12.0])
    batched = pb.vmap(lambda p: p.w * p.power + p.b)(Linear(np.ones((2, 3)), np.array([1.0, -1.0]), 2))
    np.testing.assert_allclose(batched, [[3.0] * 3, [1.0] * 3])


def _nest(x, depth: int = 500):
    for _ in range(depth):
        x = [x]
    return x


def _unnest(x, depth: int = 500):
    """The leaf inside ``depth`` one-element lists (and nothing else)."""
    for _ in range(depth):
        assert type(x) is list and len(x) == 1
        x = x[0]
    assert type(x) is not list
    return x


def test_structures_nested_500_deep_in_and_out_of_jit_grad_and_vjp():
    """Deeper than a recursive walk reaches (two frames a level): flatten, unflatten, the cache key's
    equality and the returned structure (rebuilt in Python, as the parser refuses it) use stacks."""
    x = np.array([0.5, -1.0])
    f = pb.jit(lambda x: _nest(np.sin(x)))
    for _ in range(2):  # the second call finds the program in the cache
        np.testing.assert_array_equal(_unnest(f(x)), np.sin(x))
    g, aux = pb.grad(lambda x: (np.sum(np.sin(x)), _nest(2 * x)), has_aux=True)(x)
    np.testing.assert_allclose(g, np.cos(x))
    np.testing.assert_array_equal(_unnest(aux), 2 * x)
    out, vjp_fn = pb.vjp(lambda x: _nest(np.sin(x)), x)
    (x_bar,) = vjp_fn(_nest(np.array([1.0, 3.0])))
    np.testing.assert_allclose(x_bar, np.cos(x) * [1.0, 3.0])
    with pytest.raises(ValueError, match="structure of the function's output"):
        vjp_fn(_nest(np.ones(2), 499))
    h = pb.jit(lambda t: np.sum(_unnest(t) ** 2))
    assert [h(_nest(x)), h(_nest(x + 1))] == [np.sum(x ** 2), np.sum((x + 1) ** 2)]
    np.testing.assert_allclose(_unnest(pb.grad(lambda t: np.sum(_unnest(t) ** 3))(_nest(x))), 3 * x ** 2)
