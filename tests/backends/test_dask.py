"""The Dask backend on a real ``distributed`` cluster: two worker processes on this machine.

Each gradient is computed through a ``Client`` and compared with the NumPy backend on the same data
(and with finite differences where they are cheap); bad chunkings are refused at print time, before
any data is read (the data here raises if it is ever computed)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

import pullback as pb

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from pullback.backends.dask.backend import ChunkingError  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  memory_limit="1GiB") as cluster, distributed.Client(cluster) as c:
        yield c


def logistic(w, X, y):
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z)


def mlp(params, X, y):
    W1, b1, W2 = params
    h = np.tanh(X @ W1 + b1)
    return np.mean((h @ W2 - y) ** 2)


def lstsq_norm(X, y):
    q, r = np.linalg.qr(X)
    coef = scipy.linalg.solve_triangular(r, q.T @ y)
    return np.sum(coef ** 2)


def gp_nll(theta, X, y):
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    K = np.exp(theta[0]) * np.exp(-0.5 * d2 / np.exp(2 * theta[1])) + np.exp(theta[2]) * np.eye(X.shape[0])
    L = np.linalg.cholesky(K)
    a = scipy.linalg.solve_triangular(L, y, lower=True)
    return 0.5 * a @ a + np.sum(np.log(np.diag(L)))


def _data(rng, n=2000, d=5):
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ np.linspace(-1, 1, d)))).astype(float)
    return X, y


def _fd(f, x, eps=1e-6):
    out = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        out.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return out


def _boom(shape):
    raise AssertionError("the data was read")


def _unreadable(shape, chunks):
    """A Dask array whose every chunk raises when computed: printing must not need its values."""
    return da.map_blocks(_boom, da.empty(shape, chunks=chunks), dtype=float)


def test_logistic_matches_numpy_and_finite_differences(client, rng):
    X, y = _data(rng)
    Xd, yd = da.from_array(X, chunks=(500, 5)), da.from_array(y, chunks=500)
    w = rng.standard_normal(5) / 3
    f = pb.differentiate(logistic)
    source = f.source(w, Xd, yd)
    assert "dask.compute(" in source and source.count("dask.compute(") == 1
    assert "out=" not in source and "+=" not in source and "overwrite" not in source
    value, grad = f.value_and_grad(w, Xd, yd)
    value0, grad0 = f.value_and_grad(w, X, y)
    assert isinstance(grad, np.ndarray)
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    np.testing.assert_allclose(grad, grad0, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(grad, _fd(lambda v: logistic(v, X, y), w), rtol=1e-6, atol=1e-9)


def test_numpy_arguments_chunked_by_the_backend(client, rng):
    X, y = _data(rng, n=600)
    w = rng.standard_normal(5) / 3
    f = pb.differentiate(logistic, backend="dask", chunks=(200, 5))
    assert "da.logaddexp" in f.source(w, X, y)
    value, grad = f.value_and_grad(w, X, y)
    value0, grad0 = pb.differentiate(logistic).value_and_grad(w, X, y)
    np.testing.assert_allclose([value, *grad], [value0, *grad0], rtol=1e-11, atol=1e-14)


def test_mlp_on_chunked_rows(client, rng):
    X, y = rng.standard_normal((1200, 4)), rng.standard_normal(1200)
    params = (rng.standard_normal((4, 8)) / 2, rng.standard_normal(8) / 2, rng.standard_normal(8) / 2)
    f = pb.differentiate(mlp)
    value, grads = f.value_and_grad(params, da.from_array(X, chunks=(300, 4)), da.from_array(y, chunks=300))
    value0, grads0 = f.value_and_grad(params, X, y)
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    for g, g0 in zip(grads, grads0):
        np.testing.assert_allclose(g, g0, rtol=1e-10, atol=1e-13)


def test_tall_skinny_least_squares_through_tsqr(client, rng):
    X, y = rng.standard_normal((400, 4)), rng.standard_normal(400)
    Xd, yd = da.from_array(X, chunks=(100, 4)), da.from_array(y, chunks=100)
    f = pb.differentiate(lstsq_norm)
    source = f.source(Xd, yd)
    assert "da.linalg.qr(X)" in source and "da.linalg.solve_triangular" in source
    value, grad = f.value_and_grad(Xd, yd)
    value0, grad0 = f.value_and_grad(X, y)
    np.testing.assert_allclose(value, value0, rtol=1e-10)
    np.testing.assert_allclose(grad, grad0, rtol=1e-8, atol=1e-12)


def test_gp_likelihood_with_blocked_cholesky(client, rng):
    X, y = rng.standard_normal((60, 2)), rng.standard_normal(60)
    theta = np.array([0.3, 0.1, -1.0])
    Xd, yd = da.from_array(X, chunks=(20, 2)), da.from_array(y, chunks=20)
    f = pb.differentiate(gp_nll)
    source = f.source(theta, Xd, yd)
    assert "da.linalg.cholesky(" in source and "dask.delayed" not in source
    assert "blocked_potri(L)" in source and "l_inv" not in source  # K's inverse by blocks, no dense solve
    value, grad = f.value_and_grad(theta, Xd, yd)
    value0, grad0 = f.value_and_grad(theta, X, y)
    np.testing.assert_allclose(value, value0, rtol=1e-10)
    np.testing.assert_allclose(grad, grad0, rtol=1e-8)
    np.testing.assert_allclose(grad, _fd(lambda t: gp_nll(t, X, y), theta), rtol=1e-5)


def _spd_factor(rng, n, complex_):
    a = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    a = a @ a.conj().T + n * np.eye(n)
    return a, np.linalg.cholesky(a)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize(("n", "block"), [(12, 12), (12, 6), (12, 4), (23, 5)], ids=["1", "2", "3", "5"])
def test_potri_by_blocks_is_the_inverse(n, block, complex_, rng):
    """cholesky_inverse of a factor in 1, 2, 3, 5 square blocks (the last one smaller) is NumPy's inverse: one
    LAPACK potri task on one chunk, the printed blocked potri on several."""
    a, l = _spd_factor(rng, n, complex_)
    ld = da.from_array(l, chunks=block)
    f = pb.jit(pb.linalg.cholesky_inverse)
    source = f.source(ld)
    assert ("blocked_potri(l)" in source) == (block < n)
    assert ("potri(" in source and "dask.delayed" in source) == (block == n)  # LAPACK's, as one task
    with dask.config.set(scheduler="sync"):
        out = f(ld)
    np.testing.assert_allclose(out, np.linalg.inv(a), rtol=1e-10, atol=1e-13)


def test_potri_by_blocks_skips_the_zero_blocks():
    """The printed blocked potri makes nb(nb + 1)(2 nb + 1)/6 products of b x b blocks ((nb^3 - nb)/6 for
    L^{-1}'s lower blocks, nb(nb + 1)(nb + 2)/6 for the upper blocks of L^{-H} L^{-1}: about nb^3/3 b^3
    products, 2/3 n^3 flops) and nb(nb + 1)/2 triangular solves of one block: a solve of the whole factor
    in an identity makes nb^2 of them, and its product with its transpose nb^3 block products."""
    from dask.utils import key_split

    b = 3
    source = pb.jit(pb.linalg.cholesky_inverse).source(da.from_array(np.eye(4 * b), chunks=b))
    module: dict = {}
    exec(source, module)
    for nb in (2, 3, 4, 6):
        out = module["blocked_potri"](da.from_array(np.eye(nb * b), chunks=b))
        assert out.chunks == ((b,) * nb,) * 2
        graph = dict(out.__dask_graph__())
        kinds = [key_split(k) for k in graph]
        assert kinds.count("matmul") == nb * (nb + 1) * (2 * nb + 1) // 6
        assert kinds.count("solve-triangular") == nb * (nb + 1) // 2


def test_small_dense_linalg_on_a_reduced_result_is_one_task(client, rng):
    """eigh has no chunked form: on the d x d Gram matrix of chunked rows (one chunk) it runs as one
    task calling LAPACK."""
    def spread(X):
        return np.sum(np.sqrt(np.linalg.eigvalsh(X.T @ X)))

    X = rng.standard_normal((900, 3))
    Xd = da.from_array(X, chunks=(300, 3))
    f = pb.differentiate(spread)
    assert "dask.delayed(" in f.source(Xd)
    value, grad = f.value_and_grad(Xd)
    value0, grad0 = f.value_and_grad(X)
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    np.testing.assert_allclose(grad, grad0, rtol=1e-9, atol=1e-12)


def descend(w0, X, y):
    """Five gradient-descent steps of least squares from ``w0``, in a ``fori_loop``; the final loss."""
    def step(i, w):
        return w - 0.5 * (X.T @ (X @ w - y)) / X.shape[0]

    w = pb.fori_loop(0, 5, step, w0)
    return np.mean((X @ w - y) ** 2)


def rnn(params, h0, xs):
    """A recurrent state of 3 numbers driven by a chunked sequence: each step reads every row of its slice."""
    W, V = params

    def step(h, x):
        h = np.tanh(h @ W + np.mean(np.tanh(x @ V), axis=0))
        return h, np.sum(h ** 2)

    h, ys = pb.scan(step, h0, xs)
    return np.sum(ys * np.arange(1.0, xs.shape[0] + 1)) + np.sum(h)


def test_fori_loop_of_gradient_descent_over_chunked_rows(client, rng):
    """A loop with a static trip count prints as a Python ``for`` building the graph (the carry rebound,
    nothing written in place), the transpose's loop likewise, and one ``dask.compute``."""
    X, y = _data(rng, n=800, d=4)
    Xd, yd = da.from_array(X, chunks=(200, 4)), da.from_array(y, chunks=200)
    w0 = rng.standard_normal(4) / 3
    f = pb.differentiate(descend)
    source = f.source(w0, Xd, yd)
    assert "for _ in range(5):" in source and "for _ in range(4, -1, -1):" in source
    assert source.count("dask.compute(") == 1 and ".compute()" not in source
    assert "+=" not in source and "] = " not in source and "np.empty" not in source
    assert ".rechunk(" not in source  # the carry keeps its chunks: nothing to rechunk
    value, grad = f.value_and_grad(w0, Xd, yd)
    value0, grad0 = f.value_and_grad(w0, X, y)
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    np.testing.assert_allclose(grad, grad0, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(grad, _fd(lambda v: descend(v, X, y), w0), rtol=1e-6, atol=1e-9)


def test_rnn_scan_over_chunked_data(client, rng):
    """A scan's per-step results and the residuals its transpose reads are lists of Dask arrays (a result
    read as an array is stacked after the loop); the reverse loop reads them a step at a time."""
    T, n = 6, 400
    xs = rng.standard_normal((T, n, 2))
    params = (rng.standard_normal((3, 3)) / 2, rng.standard_normal((2, 3)))
    h0 = rng.standard_normal(3) / 2
    xsd = da.from_array(xs, chunks=(1, 100, 2))
    f = pb.differentiate(rnn, argnums=(0, 1))
    source = f.source(params, h0, xsd)
    assert "da.stack(" in source and "[None] * 6" in source and "for t in range(5, -1, -1):" in source
    assert "np.empty" not in source and source.count("dask.compute(") == 1
    value, (g_params, g_h0) = f.value_and_grad(params, h0, xsd)
    value0, (g_params0, g_h00) = f.value_and_grad(params, h0, xs)
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    for g, g0 in zip([*g_params, g_h0], [*g_params0, g_h00]):
        np.testing.assert_allclose(g, g0, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(g_h0, _fd(lambda h: rnn(params, h, xs), h0), rtol=1e-6, atol=1e-9)


def test_cond_on_a_dask_value(client, rng):
    """A branch on a Dask value: elementwise branches are both in the graph and chosen by ``da.where``
    (no round trip); a branch holding a solve computes the predicate once and takes one branch, the
    backward pass reusing the computed predicate."""
    def soft(w, X):
        s = np.sum(X @ w)
        return pb.cond(s > 0, lambda v: np.sum(np.exp(v)), lambda v: np.sum(v ** 2), w * s)

    def solved(w, X):
        s = np.sum(X @ w)
        return pb.cond(s > 0, lambda v: np.sum(np.linalg.solve(X.T @ X, v)), lambda v: np.sum(v ** 2), w)

    X = rng.standard_normal((600, 3))
    Xd = da.from_array(X, chunks=(150, 3))
    for w in (np.array([0.3, -0.2, 0.1]), np.array([-0.3, 0.2, -0.1])):
        taken = np.sum(X @ w) > 0
        f = pb.differentiate(soft)
        source = f.source(w, Xd)
        assert "da.where(" in source and ".compute()" not in source and "if " not in source
        value, grad = f.value_and_grad(w, Xd)
        value0, grad0 = f.value_and_grad(w, X)
        np.testing.assert_allclose(value, value0, rtol=1e-12)
        np.testing.assert_allclose(grad, grad0, rtol=1e-10)
        np.testing.assert_allclose(grad, _fd(lambda v: soft(v, X), w), rtol=1e-6)

        g = pb.differentiate(solved)
        source = g.source(w, Xd)
        assert source.count(".compute()") == 1 and source.count("if gt:") == 2, source
        value, grad = g.value_and_grad(w, Xd)
        value0, grad0 = g.value_and_grad(w, X)
        np.testing.assert_allclose(value, value0, rtol=1e-12)
        np.testing.assert_allclose(grad, grad0, rtol=1e-10)
        expected = np.linalg.solve(X.T @ X, np.ones(3)) if taken else 2 * w
        np.testing.assert_allclose(grad, expected, rtol=1e-10)


def test_switch_on_a_dask_index_selects_with_nested_where(rng):
    """``pb.switch`` on an index computed from chunked data: ``cond`` clamps the index, and so do the
    nested ``da.where``s (index <= 0, == 1, else)."""
    def f(w, X):
        i = np.sum(X @ w > 0.5) // 100
        return np.sum(pb.switch(i, [np.sin, np.cos, lambda v: v ** 2], X @ w))

    X = rng.standard_normal((600, 3))
    Xd = da.from_array(X, chunks=(150, 3))
    g = pb.differentiate(f)
    seen = set()
    for w in (np.array([0.1, 0.0, 0.0]), np.array([1.0, 0.2, 0.0]), np.array([3.0, 1.0, 0.2])):
        seen.add(min(int(np.sum(X @ w > 0.5) // 100), 2))
        assert "da.where(i <= 0, " in g.source(w, Xd)
        with dask.config.set(scheduler="sync"):
            value, grad = g.value_and_grad(w, Xd)
        value0, grad0 = g.value_and_grad(w, X)
        np.testing.assert_allclose(value, value0, rtol=1e-12)
        np.testing.assert_allclose(grad, grad0, rtol=1e-10, atol=1e-12)
    assert seen == {0, 1, 2}


def test_while_loop_computes_its_predicate_at_each_step(client, rng):
    """A while loop on Dask values holds its carries (``persist``) and computes its predicate at each
    step, one round trip a step; the backward loop takes as many steps, reading the recorded residuals."""
    def shrink(w, X):
        def more(c):
            x, k = c
            return np.sum(x ** 2) > 1e-3

        def step(c):
            x, k = c
            return np.tanh(0.8 * x), k + 1

        x, k = pb.while_loop(more, step, (X.T @ (X @ w) / X.shape[0], 0))
        return np.sum(x * w) + k

    X = rng.standard_normal((400, 3))
    Xd = da.from_array(X, chunks=(100, 3))
    w = np.array([0.5, -0.4, 0.3])
    f = pb.differentiate(shrink)
    source = f.source(w, Xd)
    assert "while gt.compute():" in source and "dask.persist(x, k)" in source and ".copy()" not in source
    value0, grad0 = f.value_and_grad(w, X)
    calls = []

    def get(dsk, keys, **kwargs):
        calls.append(keys)
        return dask.threaded.get(dsk, keys, **kwargs)

    with dask.config.set(scheduler=get):
        value, grad = f.value_and_grad(w, Xd)
    steps = int(value0 - np.sum(_shrunk(X.T @ (X @ w) / 400) * w))
    assert steps > 3
    assert len(calls) == 2 * (steps + 1) + 1  # a persist and a test before each step and the last test, one compute
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    np.testing.assert_allclose(grad, grad0, rtol=1e-10)
    np.testing.assert_allclose(grad, _fd(lambda v: shrink(v, X), w, eps=1e-7), rtol=1e-5)
    value, grad = f.value_and_grad(w, Xd)  # on the cluster: the carries persisted on the workers
    np.testing.assert_allclose([value, *grad], [value0, *grad0], rtol=1e-10)


def _shrunk(x):
    while np.sum(x ** 2) > 1e-3:
        x = np.tanh(0.8 * x)
    return x


def solve_steps(L, A, v):
    """Each step's product with A (chunked (6, 4)) leaves the carry in 6-row chunks; the solve needs L's 4."""
    def body(i, v):
        return np.tanh(A @ scipy.linalg.solve_triangular(L, v, lower=True))

    return np.sum(pb.fori_loop(0, 3, body, v) ** 2)


def solve_until(L, A, v):
    def more(c):
        return c[1] < 3

    def step(c):
        return np.tanh(A @ scipy.linalg.solve_triangular(L, c[0], lower=True)), c[1] + 1

    v, k = pb.while_loop(more, step, (v, 0))
    return np.sum(v ** 2)


def factor_steps(A, S):
    """The carry S = A S A^T / 4 + I changes chunks (A's rows); each step's Cholesky factor is a stacked
    result read whole, and a residual of the backward loop."""
    def step(S, _):
        L = np.linalg.cholesky(S)
        return A @ S @ A.T / 4 + np.eye(S.shape[0]), L

    S, Ls = pb.scan(step, S, None, length=3)
    return np.sum(Ls ** 2) + np.sum(np.log(np.diagonal(Ls, axis1=1, axis2=2))) + np.sum(S)


@pytest.mark.parametrize("fn", [solve_steps, solve_until, factor_steps], ids=["fori", "while", "scan"])
def test_loop_carries_whose_chunks_a_step_changes(fn, client, rng):
    """A carry whose chunks a step changes is rechunked to its first value's chunks at each step
    (``v = v.rechunk(4)``): the body, printed and checked for those chunks, holds at every step; the
    stacked results, the residuals and the backward loop's accumulators are chunked alike."""
    n = 12
    A = rng.standard_normal((n, n)) / 4
    S = rng.standard_normal((n, n))
    S = S @ S.T / n + np.eye(n)
    L, v = np.linalg.cholesky(S), rng.standard_normal(n)
    args = (A, S) if fn is factor_steps else (L, A, v)
    chunks = [(6, 4) if a is A else 4 for a in args]
    dargs = [da.from_array(a, chunks=c) for a, c in zip(args, chunks)]
    f = pb.differentiate(fn, argnums=tuple(range(len(args))))
    assert (".rechunk((4, 4))" if fn is factor_steps else ".rechunk(4)") in f.source(*dargs)
    value, grads = f.value_and_grad(*dargs)
    value0, grads0 = f.value_and_grad(*args)
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    for g, g0 in zip(grads, grads0):
        np.testing.assert_allclose(g, g0, rtol=1e-10, atol=1e-13)


def sliced(x):
    w = np.arange(1.0, 1.0 + x.size).reshape(x.shape)
    return (np.sum(np.cos(x[3:, ::-1]) * w[3:, ::-1]) + np.sum(x[6:1:-1, 2:5] ** 2) + np.sum(np.roll(x, 2, axis=0) * w)
            + np.sum(x[-1:, :1]) + np.sum(np.flip(x) * w))


def test_slices_cotangents_pad_with_zero_blocks(rng):
    """A slice's cotangent (its pad) is the operand between ``da.zeros`` blocks, a reversed slice's reversed
    first (strides of -1: flips, rolls), never ``da.pad``, whose zeros take the operand's chunks (padding a
    1-row slice of a 10^8-row array would be 10^8 tasks)."""
    x = rng.standard_normal((9, 6))
    xd = da.from_array(x, chunks=(4, 3))
    f = pb.differentiate(sliced)
    source = f.source(xd)
    assert "da.pad(" not in source and "da.zeros((" in source and "dask.delayed" not in source
    with dask.config.set(scheduler="sync"):
        value, grad = f.value_and_grad(xd)
    value0, grad0 = f.value_and_grad(x)
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    np.testing.assert_allclose(grad, grad0, rtol=1e-12, atol=1e-14)
    huge = pb.differentiate(lambda v: np.sum(v[:1] * v[-1:]))  # two 1-element slices of 2^27 entries
    assert huge.source(_unreadable((1 << 27,), 1 << 24)).count("da.zeros(") == 2


def test_bad_chunkings_are_refused_before_any_data_is_read():
    """Operands larger than one of Dask's chunks (128 MiB) that a blocked algorithm cannot take as chunked."""
    f = pb.differentiate(gp_nll)
    theta = np.zeros(3)
    with pytest.raises(ChunkingError, match=r"potrf \(cholesky\).*square blocks of one size"):  # 2000, 2000, 1000
        f.value_and_grad(theta, _unreadable((5000, 2), (2000, 2)), _unreadable((5000,), 2000))
    g = pb.differentiate(lstsq_norm)
    with pytest.raises(ChunkingError, match=r"geqrf \(qr\).*TSQR needs a tall matrix in row chunks"):
        g.value_and_grad(_unreadable((1_000_000, 40), (250_000, 20)), _unreadable((1_000_000,), 250_000))

    def sorted_sum(x):
        return np.sum(np.sort(x) * np.arange(x.shape[0]))

    def lq_norm(A):
        return np.sum(pb.linalg.lq(A)[0] ** 2)

    with pytest.raises(ChunkingError, match=r"gelqf \(lq\).*in column chunks.*rechunk it to \(40, 262144\)"):
        pb.differentiate(lq_norm).value_and_grad(_unreadable((40, 1 << 20), (20, 1 << 18)))

    def solved(L, b):
        return np.sum(scipy.linalg.solve_triangular(L, b, lower=True))

    with pytest.raises(ChunkingError, match=r"trsm \(solve_triangular\).*right-hand side's rows chunked as the "
                                            r"matrix's: rechunk it \(b.rechunk\(\(2048, -1\)\)\)"):
        pb.differentiate(solved).value_and_grad(_unreadable((8192, 8192), 2048), _unreadable((8192, 4), (1000, 4)))
    with pytest.raises(ChunkingError, match=r"sort .*no chunked form.*rechunk"):  # 256 MB: not gathered
        pb.differentiate(sorted_sum).value_and_grad(_unreadable((1 << 25,), 1 << 22))


def test_chunks_are_part_of_the_signature(rng):
    """One shape, two chunkings, two programs: the blocked Cholesky for square blocks of one size, one
    LAPACK task for blocks it cannot take (K is small enough to gather)."""
    X, y = rng.standard_normal((40, 2)), rng.standard_normal(40)
    theta = np.array([0.0, 0.2, -1.0])
    f = pb.differentiate(gp_nll)
    with dask.config.set(scheduler="threads"):
        square = (da.from_array(X, chunks=(20, 2)), da.from_array(y, chunks=20))
        uneven = (da.from_array(X, chunks=(15, 2)), da.from_array(y, chunks=15))  # blocks 15, 15, 10
        assert "da.linalg.cholesky(" in f.source(theta, *square)
        assert "potrf_task" in f.source(theta, *uneven) and "da.linalg.cholesky(" not in f.source(theta, *uneven)
        v1, g1 = f.value_and_grad(theta, *square)
        v2, g2 = f.value_and_grad(theta, *uneven)
    np.testing.assert_allclose([v1, *g1], [v2, *g2], rtol=1e-10)


def test_constants_are_persisted_once_per_client(client, rng):
    X, y = _data(rng, n=800)
    Xd, yd = da.from_array(X, chunks=(400, 5)), da.from_array(y, chunks=400)
    prior = rng.standard_normal((5, 5))

    def penalised(w, X, y):
        return logistic(w, X, y) + 0.5 * w @ (prior @ w)

    f = pb.differentiate(penalised)
    assert "prior" in f.constants(np.zeros(5), Xd, yd)
    w = rng.standard_normal(5) / 3
    value, grad = f.value_and_grad(w, Xd, yd)
    (staged,) = [s for s in f._stages.values() if s._run is not None]
    prior_held = staged.backend.persisted[client]["prior"]
    keys = list(dask.core.flatten(prior_held.__dask_keys__()))
    assert len(prior_held.dask) == len(keys)  # its graph is the keys of its chunks, held on the workers
    assert all(client.who_has()[k] for k in keys)
    value2, _ = f.value_and_grad(w, Xd, yd)
    assert staged.backend.persisted[client]["prior"] is prior_held  # not sent again
    value0, grad0 = pb.differentiate(penalised).value_and_grad(w, X, y)
    np.testing.assert_allclose([value, value2, *grad], [value0, value0, *grad0], rtol=1e-11, atol=1e-14)


def test_scipy_minimize_over_chunked_data(client, rng):
    """Each evaluation is one pass over the chunks; the parameters stay NumPy arrays on the client."""
    X, y = _data(rng, n=1000, d=3)
    f = pb.differentiate(logistic)
    Xd, yd = da.from_array(X, chunks=(250, 3)), da.from_array(y, chunks=250)
    fit = scipy.optimize.minimize(f.value_and_grad, np.zeros(3), args=(Xd, yd), jac=True, method="L-BFGS-B")
    ref = scipy.optimize.minimize(f.value_and_grad, np.zeros(3), args=(X, y), jac=True, method="L-BFGS-B")
    assert fit.success and ref.success
    np.testing.assert_allclose(fit.x, ref.x, rtol=1e-6, atol=1e-8)
    assert fit.nfev == ref.nfev


def test_export_writes_a_dask_module(tmp_path, rng):
    X, y = _data(rng, n=300, d=3)
    Xd, yd = da.from_array(X, chunks=(100, 3)), da.from_array(y, chunks=100)
    path = pb.export(logistic, np.zeros(3), Xd, yd, path=tmp_path / "logistic_grad.py", backend="dask")
    text = path.read_text()
    assert "import dask.array as da" in text and "pullback" not in text.split('"""', 2)[2]
    spec = importlib.util.spec_from_file_location("logistic_grad", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    w = np.array([0.2, -0.1, 0.3])
    value, grad = module.logistic_grad(w, Xd, yd)
    value0, grad0 = pb.differentiate(logistic).value_and_grad(w, X, y)
    np.testing.assert_allclose([value, *grad], [value0, *grad0], rtol=1e-11, atol=1e-14)


def test_readme_dask_source_is_what_pullback_prints():
    """The README's printed Dask program is the real one for its example (comments aside: file names differ)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    printed = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "dask.compute(" in b)
    rng = np.random.default_rng(0)
    X = da.from_array(rng.standard_normal((10_000, 5)), chunks=(2_500, 5))
    y = da.from_array((rng.random(10_000) < 0.5).astype(float), chunks=2_500)
    source = pb.differentiate(logistic).source(np.zeros(5), X, y)
    code = lambda s: [line for line in s.strip().splitlines() if not line.strip().startswith("#")]  # noqa: E731
    assert code(printed) == code(source)


def test_pb_source_prints_the_dask_program_for_numpy_arguments():
    def f(x):
        return np.sum(np.sqrt(x))

    source = pb.source(f, np.ones(3), backend="dask")
    assert "da.sqrt(x)" in source and "dask.compute(" in source
    assert "np.sqrt" in pb.source(f, np.ones(3))


def test_svd_lstsq_and_normal_equations_on_row_chunks(rng):
    """SVD of a tall matrix in row chunks is Dask's TSQR SVD; lstsq traces to QR (TSQR); the normal
    equations' d x d solve is one task (LU)."""
    def nuclear(X):
        return np.sum(np.linalg.svd(X, compute_uv=False))

    def lstsq(X, y):
        return np.sum(np.linalg.lstsq(X, y)[0] ** 2)

    def normal(X, y):
        return np.sum(np.linalg.solve(X.T @ X, X.T @ y) ** 2)

    X, y = rng.standard_normal((400, 4)), rng.standard_normal(400)
    Xd, yd = da.from_array(X, chunks=(100, 4)), da.from_array(y, chunks=100)
    for fn, args in [(nuclear, (X,)), (lstsq, (X, y)), (normal, (X, y))]:
        f = pb.differentiate(fn)
        with dask.config.set(scheduler="threads"):  # the local threads: the cluster's round trips cost more here
            value, grad = f.value_and_grad(*((Xd, yd)[:len(args)]))
        value0, grad0 = f.value_and_grad(*args)
        np.testing.assert_allclose(value, value0, rtol=1e-10)
        np.testing.assert_allclose(grad, grad0, rtol=1e-8, atol=1e-12)
    assert "da.linalg.svd(X)" in pb.differentiate(nuclear).source(Xd)
    assert "dask.delayed(" in pb.differentiate(normal).source(Xd, yd)


def test_backend_option_is_checked():
    with pytest.raises(ValueError, match="backend must be"):
        pb.differentiate(logistic, backend="spark")
    with pytest.raises(TypeError, match="backend='numpy' was given a Dask array"):
        pb.differentiate(logistic, backend="numpy").value_and_grad(np.zeros(2), da.ones((4, 2)), da.ones(4))


def test_example_fits_data_read_from_disk(client, tmp_path):
    """examples/dask_logistic.py at a small size: .npy chunks on disk, fitted through the cluster."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
    import dask_logistic

    w_true = dask_logistic.write_dataset(str(tmp_path), n=20_000, d=4, rows_per_chunk=5_000)
    X, y = da.from_npy_stack(f"{tmp_path}/X"), da.from_npy_stack(f"{tmp_path}/y")
    fit = dask_logistic.fit(X, y)
    ref = scipy.optimize.minimize(dask_logistic.loss.value_and_grad, np.zeros(4), args=(X.compute(), y.compute()),
                                  jac=True, method="L-BFGS-B")
    assert fit.success
    np.testing.assert_allclose(fit.x, ref.x, rtol=1e-5, atol=1e-7)
    assert np.linalg.norm(fit.x - w_true) < 0.5 * np.linalg.norm(w_true)


def test_one_compute_per_call_reads_each_chunk_once(rng):
    """value_and_grad hands the scheduler one graph, in which each chunk of the data is one task."""
    X, y = _data(rng, n=800)
    Xd, yd = da.from_array(X, chunks=(200, 5)), da.from_array(y, chunks=200)
    graphs = []

    def get(dsk, keys, **kwargs):
        graphs.append(dict(dsk.__dask_graph__() if hasattr(dsk, "__dask_graph__") else dsk))
        return dask.threaded.get(dsk, keys, **kwargs)

    f = pb.differentiate(logistic)
    f.value_and_grad(np.zeros(5), Xd, yd)  # compiled
    with dask.config.set(scheduler=get):
        f.value_and_grad(np.zeros(5), Xd, yd)
    assert len(graphs) == 1
    reads = [k for k in graphs[0] if isinstance(k, tuple) and k[0] in (Xd.name, yd.name)]
    assert sorted(reads) == sorted([(Xd.name, i, 0) for i in range(4)] + [(yd.name, i) for i in range(4)])


from tests import sample  # noqa: E402
from tests.primitives.cases import make_arg  # noqa: E402
from tests.primitives.test_forward import CASES  # noqa: E402

ROWS = ("one chunk", "two row chunks")
# the sampled cases alternate between the two chunkings; --runslow runs every case in both
PRIMITIVE_CASES = [pytest.param(p.values[0], rows, id=f"{p.id}-{rows}", marks=p.marks)
                   for k, p in enumerate(sample.cases(CASES, salt=5))
                   for j, rows in enumerate(ROWS) if sample.full() or j == k % 2]


@pytest.mark.parametrize(("case", "rows"), PRIMITIVE_CASES)
def test_every_primitive_prints_for_dask_or_says_why(case, rows, rng):
    """Each primitive's program on Dask arrays gives NumPy's result (control flow included), or is refused at
    print time: chunkings Dask cannot take (a ChunkingError naming the primitive)."""
    args = [make_arg(rng, s, case.dtype, case.positive) for s in case.shapes]
    reference = pb.jit(case.fn)(*args)
    dargs = [da.from_array(a, chunks=tuple(max(1, -(-n // 2)) if rows != "one chunk" and i == 0 else -1
                                           for i, n in enumerate(a.shape))) if isinstance(a, np.ndarray) and a.ndim
             else a for a in args]
    with dask.config.set(scheduler="sync"):
        try:
            out = pb.jit(case.fn)(*dargs)
        except ChunkingError as e:
            assert rows != "one chunk", e
            return
    tol = 1e-4 if case.dtype in ("float32", "complex64") else 1e-8
    outs, refs = (out, reference) if isinstance(reference, tuple) else ((out,), (reference,))
    for o, r in zip(outs, refs):
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=tol, atol=tol * 1e-2)
