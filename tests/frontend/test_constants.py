"""Constants: arrays read from the user's scope are captured by reference (in-place changes are
seen at the next call), only identities made by np.eye/np.identity during a trace become ``eye``
equations, and the generated function takes constants as keyword-only parameters."""

import ast
import threading

import numpy as np
import pytest

import pullback as pb

GLOBALS = {"eye": np.eye(3), "dense": np.arange(9.0).reshape(3, 3) / 4}
_W_GLOBAL = np.zeros((3, 3))  # reset by each test that reads it


def _keyword_only(src: str) -> list[str]:
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef))
    return [a.arg for a in fn.args.kwonlyargs]


class Model:
    def __init__(self, W):
        self.W = W


def _routes(W):
    """f(x) = sum((W x)^2) reading W through each route a function can reach an array by."""
    global _W_GLOBAL
    _W_GLOBAL = W
    model, params = Model(W), {"W": W}

    def closure(x):
        return np.sum((W @ x) ** 2)

    def global_(x):
        return np.sum((_W_GLOBAL @ x) ** 2)

    def attribute(x):
        return np.sum((model.W @ x) ** 2)

    def dict_(x):
        return np.sum((params["W"] @ x) ** 2)

    return {"closure": closure, "global": global_, "attribute": attribute, "dict": dict_}


ROUTE_NAMES = {"closure": "W", "global": "W_GLOBAL", "attribute": "W", "dict": "W"}


@pytest.mark.parametrize("route", ["closure", "global", "attribute", "dict"])
@pytest.mark.parametrize("start", ["eye", "dense"])
def test_in_place_changes_are_seen_through_every_route(route, start):
    W = GLOBALS[start].copy()
    f = pb.differentiate(_routes(W)[route])
    x = np.array([1.0, -2.0, 0.5])
    for change in (lambda: None, lambda: W.__setitem__((0, 1), 10.0), lambda: W.__imul__(-3.0)):
        change()
        value, grad = f.value_and_grad(x)
        np.testing.assert_allclose(f(x), np.sum((W @ x) ** 2), rtol=1e-12)
        np.testing.assert_allclose(value, np.sum((W @ x) ** 2), rtol=1e-12)
        np.testing.assert_allclose(grad, 2 * W.T @ (W @ x), rtol=1e-12)
        v = np.array([0.5, 1.0, -1.0])
        np.testing.assert_allclose(f.jvp((x,), (v,))[1], 2 * (W @ x) @ (W @ v), rtol=1e-12)
        np.testing.assert_allclose(f.vjp(x)[1](1.0)[0], 2 * W.T @ (W @ x), rtol=1e-12)
    assert "np.eye" not in f.source(x) and len(_keyword_only(f.source(x))) == 1
    consts = f.constants(x)  # the very array, under the name the function reads it by
    assert list(consts) == [ROUTE_NAMES[route]] and consts[ROUTE_NAMES[route]] is W


def test_identity_attribute_is_not_frozen():
    """The report: ``self.W = np.eye(3)`` then ``self.W[0, 1] = 10`` gave 3.0 instead of 13.0."""
    model = Model(np.eye(3))
    f = pb.jit(lambda x: np.sum(model.W @ x))
    assert f(np.ones(3)) == 3.0
    model.W[0, 1] = 10
    assert f(np.ones(3)) == 13.0


@pytest.mark.parametrize("make", [lambda: np.eye(3), lambda: np.identity(3), lambda: np.eye(3, 4, k=1),
                                  lambda: np.eye(3, dtype=np.float32), lambda: np.eye(4, 3, -1)])
def test_identities_made_while_tracing_print_as_code(make):
    def f(x):
        return np.sum((make() @ x) ** 2)

    x = np.linspace(0.5, 2.0, make().shape[1])
    src = pb.differentiate(f).source(x)
    E = make()
    vanishes = E.dtype == np.float64 and np.array_equal(E, np.eye(*E.shape))  # I @ x simplifies to x
    assert ("np.eye(" in src) != vanishes and _keyword_only(src) == []
    E = E.astype(np.float64)
    np.testing.assert_allclose(pb.grad(f)(x), 2 * E.T @ (E @ x), rtol=1e-6)


def test_identity_changed_while_tracing_is_a_constant():
    def f(x):
        eye = np.eye(3)
        eye[0, 2] = 5.0  # no longer the identity: a constant with this value
        return np.sum(eye @ x)

    x = np.ones(3)
    assert pb.jit(f)(x) == 8.0
    np.testing.assert_allclose(pb.grad(f)(x), [1.0, 1.0, 6.0])


def test_identity_from_another_thread_is_not_recorded():
    """np.eye called on a thread that does not trace, while another traces, stays a constant there."""
    made, started, done = [], threading.Event(), threading.Event()

    def other():
        started.wait()
        made.append(np.eye(3))
        done.set()

    t = threading.Thread(target=other)
    t.start()

    def f(x):
        started.set()
        done.wait(5)
        return np.sum(made[0] @ x)

    jf = pb.jit(f)
    assert jf(np.ones(3)) == 3.0
    t.join()
    made[0][1, 0] = 2.0
    assert jf(np.ones(3)) == 5.0


def test_constants_are_keyword_only_parameters_listed_in_the_docstring():
    scale = np.array([1.25, 2.75, 3.5])

    def f(x):
        return np.sum(scale * x * x)

    src = pb.differentiate(f).source(np.ones(3))
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef))
    assert [a.arg for a in fn.args.args] == ["x"] and _keyword_only(src) == ["scale"]
    assert "scale: f64[3]" in ast.get_docstring(fn)
    assert "1.25" not in src and "2.75" not in src and "3.5" not in src  # the values are not printed
    ns: dict = {}
    exec(compile(src, "<saved>", "exec"), ns)
    _, g = ns[fn.name](np.ones(3), scale=np.array([4.0, 5.0, 6.0]))
    np.testing.assert_allclose(g, [8.0, 10.0, 12.0])


@pytest.mark.parametrize("fn", [np.linalg.det, lambda a: np.linalg.slogdet(a)[1], lambda a: np.sum(np.linalg.inv(a)),
                                lambda a: np.sum(pb.linalg.lu(a)[0] * pb.linalg.lu(a)[1]),
                                lambda a: np.sum(np.linalg.matrix_power(a, 0) * a)],
                         ids=["det", "slogdet", "inv", "lu", "matrix_power-0"])
def test_constants_pullback_makes_print_as_code(fn):
    a = np.array([[1.0, 2.0, 0.5], [3.0, 1.0, 2.0], [0.5, 4.0, 1.0]])
    f = pb.differentiate(fn)
    assert not f.ir(a).constvars and _keyword_only(f.source(a)) == []


def test_rebinding_is_not_seen_but_in_place_changes_are():
    model = Model(np.ones(3))
    f = pb.jit(lambda x: np.sum(model.W * x))
    assert f(np.ones(3)) == 3.0
    model.W *= 2
    assert f(np.ones(3)) == 6.0
    model.W = np.zeros(3)  # a new object: the compiled program holds the one it traced
    assert f(np.ones(3)) == 6.0


class Layer:
    def __init__(self):
        self.W = np.eye(3)
        self.params = {"bias": np.ones(3)}

    def loss(self, x):
        return np.sum((self.W @ x) ** 2)


def test_keyword_parameters_take_attribute_and_dict_names():
    layer, params = Layer(), {"bias": np.array([1.0, 2.0, 3.0])}

    def f(x):
        return np.sum(layer.W @ x) + np.sum(params["bias"] * x)

    x = np.array([1.0, -1.0, 2.0])
    assert _keyword_only(pb.differentiate(f).source(x)) == ["W", "bias"]
    method = pb.differentiate(layer.loss)  # a bound method reads self.W
    assert _keyword_only(method.source(x)) == ["W"]
    layer.W[2, 0] = 4.0
    np.testing.assert_allclose(method.grad(x), 2 * layer.W.T @ (layer.W @ x))
    np.testing.assert_allclose(pb.grad(f)(x), layer.W.sum(axis=0) + params["bias"])


def test_operations_on_literals_alone_fold_when_traced():
    """No traced equation computes from literals alone (a fill's broadcast aside): ``0.0 != 0.0``
    printed would be a Python bool, which CuPy's broadcast_to refuses (found on the GPU)."""
    from pullback.ir.core import Literal
    from pullback.primitives.lax import FOLD
    from tests.primitives.cases import program
    from tests.primitives.test_forward import CASES

    for case in CASES:
        folded = [e.prim.name for e in program(case).eqns
                  if e.prim in FOLD and all(isinstance(a, Literal) for a in e.inputs)]
        assert not folded, (case.name, folded)
