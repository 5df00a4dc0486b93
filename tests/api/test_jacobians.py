"""vmap, jacfwd, jacrev, jacobian and hessian: Jacobians against central finite differences,
Hessians against finite differences of the gradient and the logistic-regression formula,
vmap against Python loops."""

from __future__ import annotations

import numpy as np
import pytest

import pullback as pb


def numerical_jacobian(f, args, argnum: int, eps: float = 1e-6) -> np.ndarray:
    """Central differences: shape ``out.shape + in.shape``."""
    x = np.asarray(args[argnum], dtype=np.float64)
    cols = []
    for k in range(x.size):
        d = np.zeros(x.size)
        d[k] = eps
        d = d.reshape(x.shape)
        plus = [*args[:argnum], x + d, *args[argnum + 1:]]
        minus = [*args[:argnum], x - d, *args[argnum + 1:]]
        cols.append((np.asarray(f(*plus)) - np.asarray(f(*minus))) / (2 * eps))
    out = np.stack(cols, axis=-1)
    return out.reshape(out.shape[:-1] + x.shape)


def spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T / n + np.eye(n)


def _tanh_affine(x, A):
    return np.tanh(A @ x)


def _matmul(X, W):
    return X @ W


def _solve(A, b):
    return np.linalg.solve(A, b)


def _cholesky(A):
    return np.linalg.cholesky(A @ A.T + 3 * np.eye(A.shape[0]))


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _args(name, rng):
    return {
        "tanh_affine": (rng.standard_normal(3), rng.standard_normal((4, 3))),
        "matmul": (rng.standard_normal((2, 3)), rng.standard_normal((3, 4))),
        "solve": (spd(rng, 3), rng.standard_normal(3)),
        "cholesky": (rng.standard_normal((3, 3)),),
        "softmax": (rng.standard_normal(5),),
    }[name]


FUNCTIONS = {"tanh_affine": _tanh_affine, "matmul": _matmul, "solve": _solve, "cholesky": _cholesky,
             "softmax": _softmax}


@pytest.mark.parametrize("mode", ["jacfwd", "jacrev", "jacobian"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_jacobian_against_finite_differences(name, mode, rng):
    f = FUNCTIONS[name]
    args = _args(name, rng)
    nums = tuple(range(len(args)))
    got = getattr(pb, mode)(f, argnums=nums)(*args)
    assert isinstance(got, tuple) and len(got) == len(args)
    for k, j in enumerate(got):
        want = numerical_jacobian(f, args, k)
        assert j.shape == np.shape(f(*args)) + np.shape(args[k])
        np.testing.assert_allclose(j, want, rtol=1e-6, atol=1e-7)


def test_jacobian_int_argnum_and_float32(rng):
    x = rng.standard_normal(3).astype(np.float32)
    A = rng.standard_normal((4, 3)).astype(np.float32)
    for mode in (pb.jacfwd, pb.jacrev):
        j = mode(_tanh_affine)(x, A)
        assert j.shape == (4, 3) and j.dtype == np.float32
        want = (1 - np.tanh(A @ x) ** 2)[:, None] * A
        np.testing.assert_allclose(j, want, rtol=1e-5, atol=1e-6)


def test_jacobian_pytrees(rng):
    """Outputs keep their structure; each leaf holds the argnums structure of its derivatives."""
    def f(p, x):
        return {"y": np.sin(p["w"] * x), "s": np.sum(p["b"] * x)}

    p = {"w": rng.standard_normal(3), "b": rng.standard_normal(3)}
    x = rng.standard_normal(3)
    for mode in (pb.jacfwd, pb.jacrev):
        j = mode(f)(p, x)
        assert set(j) == {"y", "s"} and set(j["y"]) == {"w", "b"}
        np.testing.assert_allclose(j["y"]["w"], np.diag(np.cos(p["w"] * x) * x), atol=1e-12)
        np.testing.assert_allclose(j["y"]["b"], np.zeros((3, 3)), atol=0)
        np.testing.assert_allclose(j["s"]["b"], x, atol=1e-12)
        assert j["s"]["w"].shape == (3,)


def test_differentiate_methods_and_source(rng):
    A, b = spd(rng, 3), rng.standard_normal(3)
    f = pb.differentiate(_solve, argnums=1)
    np.testing.assert_allclose(f.jacobian(A, b), np.linalg.inv(A), rtol=1e-10, atol=1e-12)
    for program in ("jacfwd", "jacrev", "jacobian", "hessian"):  # jacobian: as many outputs as inputs, jacfwd
        src = f.source(A, b, program=program)
        assert f"def solve_{program.replace('jacobian', 'jacfwd')}(A, b)" in src
        assert "ndindex" not in src  # no loop over the batch
    assert f.hessian(A, b).shape == (3, 3, 3)
    np.testing.assert_allclose(f.hessian(A, b), 0, atol=1e-12)


def _logistic_loss(w, X, y):
    z = X @ w
    return np.sum(np.logaddexp(0, z) - y * z)


def test_logistic_regression_hessian_is_the_formula(rng):
    X = rng.standard_normal((20, 4))
    y = (rng.random(20) > 0.5).astype(float)
    w = rng.standard_normal(4)
    s = 1 / (1 + np.exp(-X @ w))
    want = X.T @ ((s * (1 - s))[:, None] * X)
    np.testing.assert_allclose(pb.hessian(_logistic_loss)(w, X, y), want, rtol=1e-10)
    np.testing.assert_allclose(pb.jacfwd(pb.grad(_logistic_loss))(w, X, y), want, rtol=1e-10)
    np.testing.assert_allclose(pb.jacrev(pb.grad(_logistic_loss))(w, X, y), want, rtol=1e-10)


@pytest.mark.parametrize("name", ["rosenbrock", "logdet", "quadratic-solve"])
def test_hessian_against_finite_differences_of_the_gradient(name, rng):
    A = spd(rng, 3)
    f = {"rosenbrock": lambda x: np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2),
         "logdet": lambda x: np.linalg.slogdet(A + np.outer(x, x))[1],
         "quadratic-solve": lambda x: x @ np.linalg.solve(A + np.diag(x * x), x)}[name]
    x = rng.standard_normal(3) * 0.5
    g = pb.grad(f)
    want = numerical_jacobian(g, (x,), 0)
    H = pb.hessian(f)(x)
    np.testing.assert_allclose(H, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-10)


def test_hessian_several_argnums(rng):
    def f(x, y):
        return np.sum(np.sin(x)) * np.sum(y ** 2)

    x, y = rng.standard_normal(2), rng.standard_normal(3)
    (hxx, hxy), (hyx, hyy) = pb.hessian(f, argnums=(0, 1))(x, y)
    assert hxx.shape == (2, 2) and hxy.shape == (2, 3) and hyx.shape == (3, 2) and hyy.shape == (3, 3)
    s = np.sum(y ** 2)
    np.testing.assert_allclose(hxx, np.diag(-np.sin(x) * s), atol=1e-12)
    np.testing.assert_allclose(hxy, np.outer(np.cos(x), 2 * y), atol=1e-12)
    np.testing.assert_allclose(hyx, hxy.T, atol=1e-12)
    np.testing.assert_allclose(hyy, 2 * np.sum(np.sin(x)) * np.eye(3), atol=1e-12)


def test_vmap_per_example_gradients(rng):
    X = rng.standard_normal((6, 4))
    y = (rng.random(6) > 0.5).astype(float)
    w = rng.standard_normal(4)
    per_example = pb.vmap(pb.grad(_logistic_loss), in_axes=(None, 0, 0))(w, X[:, None, :], y[:, None])
    want = np.stack([pb.grad(_logistic_loss)(w, X[i:i + 1], y[i:i + 1]) for i in range(6)])
    np.testing.assert_allclose(per_example, want, rtol=1e-12)
    s = 1 / (1 + np.exp(-X @ w))
    np.testing.assert_allclose(per_example, (s - y)[:, None] * X, rtol=1e-10)


def test_vmap_axes_and_composition(rng):
    A = rng.standard_normal((3, 4, 2))
    b = rng.standard_normal((2, 4))

    def f(a, v):
        return np.linalg.norm(a @ v), a.T @ a

    norms, grams = pb.vmap(f, in_axes=(2, None), out_axes=(0, 2))(A, b[0])
    for k in range(2):
        n, g = f(A[:, :, k], b[0])
        np.testing.assert_allclose(norms[k], n, rtol=1e-12)
        np.testing.assert_allclose(grams[:, :, k], g, rtol=1e-12)
    nested = pb.vmap(pb.vmap(lambda a, v: a @ v, in_axes=(0, None)), in_axes=(2, 0))(A, b)
    assert nested.shape == (2, 3)
    np.testing.assert_allclose(nested, np.einsum("ijk,kj->ki", A, b), rtol=1e-12)


def test_vmap_complex_against_loop(rng):
    Z = rng.standard_normal((5, 3, 3)) + 1j * rng.standard_normal((5, 3, 3))

    def f(z):
        return np.exp(z).sum(axis=0) * np.conj(z[0]), np.abs(z).max()

    got = pb.vmap(f)(Z)
    for k in range(5):
        want = f(Z[k])
        np.testing.assert_allclose(got[0][k], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1][k], want[1], rtol=1e-12)


def test_vmap_source_is_a_whole_array_program(rng):
    src = pb.vmap(lambda x, W: np.tanh(x @ W), in_axes=(0, None)).source(rng.standard_normal((8, 3)),
                                                                         rng.standard_normal((3, 2)))
    assert "ndindex" not in src and "x @ W" in src


def test_vmap_errors(rng):
    with pytest.raises(ValueError, match="different sizes"):
        pb.vmap(lambda a, b: a + b)(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least one"):
        pb.vmap(lambda a: a, in_axes=None)(np.ones(3))
    with pytest.raises(ValueError, match="depend"):
        pb.vmap(lambda a: a, out_axes=None)(np.ones(3))


def _code(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))


def test_identity_seeds_vanish_from_printed_jacobians(rng):
    """The seed meets a contraction and disappears (Laue's unit tensor): the logistic Hessian is
    one matrix product of X with a scaled X, the reverse Jacobian of tanh(A x) a row scaling of A."""
    X = rng.standard_normal((20, 4))
    y = (rng.random(20) > 0.5).astype(float)
    w = rng.standard_normal(4)
    src = _code(pb.differentiate(_logistic_loss).source(w, X, y, program="hessian"))
    assert "eye" not in src and src.count(" @ ") == 2  # z = X @ w, and the Hessian's product
    program = pb.differentiate(_logistic_loss).ir(w, X, y, stage="hessian")
    full = [e.prim.name for e in program.eqns if e.outputs[0].type.size == X.size and e.prim.name != "transpose"]
    assert full == ["broadcast_in_dim", "mul"]  # X scaled by s (1 - s) once: the scalings are collected first
    x, A = rng.standard_normal(3), rng.standard_normal((5, 3))
    for program in ("jacfwd", "jacrev"):
        src = _code(pb.differentiate(_tanh_affine).source(x, A, program=program))
        assert "eye" not in src and "diag" not in src and src.count(" @ ") == 1, src


def test_jacobians_refuse_complex_and_integer_values():
    z = np.ones(2, dtype=complex)
    for mode in (pb.jacfwd, pb.jacrev, pb.hessian):
        with pytest.raises(TypeError, match="real float"):
            mode(lambda z: np.sum(np.abs(z) ** 2))(z)
        with pytest.raises(TypeError, match="real float"):
            mode(lambda x: x * 1j)(np.ones(2))
    with pytest.raises(TypeError, match="real float"):
        pb.jacfwd(lambda x: np.argmax(x))(np.ones(2))


def _relu_net(W1, x, W2, t):
    h = np.maximum(W1 @ x, 0)
    z = W2 @ h
    z = z - z.max()
    p = np.exp(z) / np.sum(np.exp(z))
    return -np.sum(t * np.log(p))


def test_relu_net_first_layer_hessian_is_the_formula(rng):
    """Laue's third example: H[i, j, k, l] = A[i, k] x[j] x[l] with A = D W2^T (diag(p) - p p^T) W2 D,
    D the ReLU's 0/1 slopes and p the softmax (one-hot target)."""
    W1, x, W2 = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal((4, 5))
    t = np.eye(4)[1]
    D = np.diag((W1 @ x > 0).astype(float))
    z = W2 @ np.maximum(W1 @ x, 0)
    p = np.exp(z - z.max()) / np.sum(np.exp(z - z.max()))
    A = D @ W2.T @ (np.diag(p) - np.outer(p, p)) @ W2 @ D
    want = np.einsum("ik,j,l->ijkl", A, x, x)
    np.testing.assert_allclose(pb.hessian(_relu_net)(W1, x, W2, t), want, rtol=1e-9, atol=1e-12)


def test_transforms_of_vmap_and_vmap_of_jacobians(rng):
    X, w = rng.standard_normal((4, 3)), rng.standard_normal(3)
    # grad through vmap, the mapped function closing over the traced w
    g = pb.grad(lambda w: np.sum(pb.vmap(lambda x: np.tanh(x @ w))(X)))(w)
    np.testing.assert_allclose(g, X.T @ (1 - np.tanh(X @ w) ** 2), rtol=1e-12)
    # per-example Jacobians
    J = pb.vmap(pb.jacrev(lambda x: np.sin(x) * x.sum()))(X)
    want = np.stack([np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None] for x in X])
    np.testing.assert_allclose(J, want, rtol=1e-12)
    np.testing.assert_allclose(pb.jacfwd(pb.vmap(np.sin))(w), np.diag(np.cos(w)), rtol=1e-12)


def test_vmap_of_a_while_loop_with_a_batched_condition():
    """Each element runs its own number of steps (the loop runs while any element's condition holds)."""
    def halvings(x):
        return pb.while_loop(lambda c: c[0] > 1.0, lambda c: (c[0] / 2.0, c[1] + 1), (x, 0))

    xs = np.array([0.5, 3.0, 10.0, 1.5])
    values, counts = pb.vmap(halvings)(xs)
    want = [halvings(x) for x in xs]
    np.testing.assert_array_equal(counts, [c for _, c in want])
    np.testing.assert_allclose(values, [v for v, _ in want], rtol=0)
    np.testing.assert_array_equal(counts, [0, 2, 4, 1])


def test_vmap_of_scan_and_switch(rng):
    def f(h0, xs, k):
        h, ys = pb.scan(lambda h, x: (np.tanh(h + x), h.sum()), h0, xs)
        return pb.switch(k, [lambda a: a * 2.0, lambda a: -a, lambda a: a + 1.0], h), ys

    H0, XS, K = rng.standard_normal((4, 2)), rng.standard_normal((4, 3, 2)), np.array([0, 1, 2, 5])
    got = pb.vmap(f)(H0, XS, K)
    for i in range(4):
        h, ys = f(H0[i], XS[i], K[i])
        np.testing.assert_allclose(got[0][i], h, rtol=1e-12)
        np.testing.assert_allclose(got[1][i], ys, rtol=1e-12)


def test_hessian_through_scan(rng):
    M = np.array([[0.5, -0.3, 0.1], [0.2, 0.4, -0.2], [0.0, 0.3, 0.6]])

    def rnn(h0, xs):
        h, ys = pb.scan(lambda h, x: (np.tanh(M @ h + x), np.sum(h * x)), h0, xs)
        return np.sum(h ** 2) + np.sum(ys)

    h0, xs = rng.standard_normal(3), rng.standard_normal((4, 3))
    want = numerical_jacobian(pb.grad(rnn), (h0, xs), 0)
    np.testing.assert_allclose(pb.hessian(rnn)(h0, xs), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(pb.jacfwd(rnn, argnums=1)(h0, xs), pb.grad(rnn, argnums=1)(h0, xs), rtol=1e-12)


def test_jacobians_with_has_aux(rng):
    """``has_aux=True``: ``f`` returns ``(out, aux)`` (pytrees), the transform returns
    ``(jacobian, aux)`` as JAX's; against the closed forms d(sin x * y)/dx = diag(cos x * y)."""
    x, y = rng.standard_normal(3), rng.standard_normal(3)

    def f(x, y):
        z = np.sin(x) * y
        return {"z": z, "s": np.sum(z * z)}, (np.cos(x), {"n": np.sum(x)})

    dz = np.diag(np.cos(x) * y)
    ds = 2 * np.sin(x) * np.cos(x) * y * y
    for name in ("jacfwd", "jacrev", "jacobian"):
        jac, aux = getattr(pb, name)(f, has_aux=True)(x, y)
        np.testing.assert_allclose(jac["z"], dz, atol=1e-14)
        np.testing.assert_allclose(jac["s"], ds, atol=1e-14)
        np.testing.assert_allclose(aux[0], np.cos(x))
        assert aux[1]["n"] == pytest.approx(np.sum(x))
    jac, _ = pb.jacrev(f, argnums=(0, 1), has_aux=True)(x, y)  # per output leaf, one block per argnum
    np.testing.assert_allclose(jac["z"][1], np.diag(np.sin(x)), atol=1e-14)
    hess, aux = pb.hessian(lambda x: (np.sum(np.sin(x) * y), x * 2), has_aux=True)(x)
    np.testing.assert_allclose(hess, np.diag(-np.sin(x) * y), atol=1e-14)
    np.testing.assert_allclose(aux, 2 * x)
    with pytest.raises(TypeError, match="pair"):
        pb.jacfwd(lambda x: x, has_aux=True)(x)


def test_jvp_and_linearize_with_has_aux(rng):
    """``jvp(..., has_aux=True)`` returns ``(out, out_dot, aux)`` and ``linearize`` ``(out, jvp_fn,
    aux)``, as JAX's; against the closed form d(x^2 y) = 2 x y dx + x^2 dy."""
    x, y, dx, dy = rng.standard_normal((4, 3))

    def f(x, y):
        return {"p": x * x * y}, {"sum": np.sum(x), "x": x}

    out, out_dot, aux = pb.jvp(f, (x, y), (dx, dy), has_aux=True)
    np.testing.assert_allclose(out["p"], x * x * y)
    np.testing.assert_allclose(out_dot["p"], 2 * x * y * dx + x * x * dy, rtol=1e-13)
    assert aux["sum"] == pytest.approx(np.sum(x)) and np.array_equal(aux["x"], x)
    out, jvp_fn, aux = pb.linearize(f, x, y, has_aux=True)
    np.testing.assert_allclose(jvp_fn(dx, dy)["p"], 2 * x * y * dx + x * x * dy, rtol=1e-13)
    np.testing.assert_allclose(out["p"], x * x * y)
    assert np.array_equal(aux["x"], x)
    with pytest.raises(TypeError, match="pair"):
        pb.linearize(lambda x: x, x, has_aux=True)


def test_vmap_keeps_unbatched_python_ints_static():
    """An unbatched Python int or bool (a loop bound, a flag) stays a Python value, as in JAX's
    vmap: one program per value; floats stay traced."""
    X = np.arange(6.0).reshape(3, 2)

    def f(x, n, flag):
        for _ in range(n):
            x = x * 2
        return -x if flag else x

    v = pb.vmap(f, in_axes=(0, None, None))
    np.testing.assert_array_equal(v(X, 3, True), -8 * X)
    np.testing.assert_array_equal(v(X, 2, False), 4 * X)
    np.testing.assert_array_equal(pb.vmap(lambda x, t: x * t[0] ** t[1], in_axes=(0, None))(X, (2.0, 3)), 8 * X)
    np.testing.assert_array_equal(pb.jit(lambda X: pb.vmap(f, in_axes=(0, None, None))(X, 1, True))(X), -2 * X)
    assert "for" not in v.source(X, 2, False)  # the loop ran at trace time
