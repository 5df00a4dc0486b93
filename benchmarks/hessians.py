"""``python -m benchmarks.hessians``: Laue et al.'s Hessian experiments, per call after a warm-up.

- ``factorisation_table``: matrix factorisation, ``f(U) = ||T - U V^T||_F^2`` with U of n x 5, at
  n = 50 and 100: by hand the dense Hessian ``2 I_n (x) V^T V`` (a Kronecker product),
  ``pb.hessian``, JAX's and PyTorch's, with peak memory; the compressed Hessian
  (``pb.hessian(f, compressed=True)``) and a Newton step with it against a dense solve, also at
  n = 1000, k = 10 (the paper's 10 us against 1 s), where the dense solve is skipped.
- ``masked_table``: Laue's masked factorisation ``sum(M * (U V^T - Y)**2)``, Hessian in U with k = 10
  at n = m = 60, 200, 1000: block-diagonal (``B[i] = 2 V^T diag(M[i]) V``); by hand (one gemm and a
  diagonal write), pullback dense and compressed, JAX and PyTorch (skipped where their (n, k, n, m)
  intermediate passes 4 GiB). ``python -m benchmarks.hessians masked`` runs that table alone.
- ``lowrank_table``: Hessians that are a diagonal plus a low-rank matrix: softmax cross-entropy with a
  ridge (``diag(p) - p p^T + c I``) and a weighted ridge logistic regression with 50 examples of 2000
  features (``I + X^T diag(w) X``): dense by hand and by pullback, and ``compressed=True`` (a
  ``DiagonalPlusLowRank``) with its Woodbury solve against ``np.linalg.solve`` on the dense matrix.
- ``laue_tables``: the logistic Hessian at n = 100, 300, 1000, the first-layer Hessian of a
  ten-layer ReLU net with a softmax cross-entropy, and per-example gradients of the logistic loss
  (10,000 examples: ``pb.vmap(pb.grad)``, a Python loop of ``pb.grad``, by hand), against
  ``jax.hessian`` / ``jax.vmap(jax.grad)`` under ``jit`` and ``torch.func.hessian`` /
  ``torch.func.vmap(torch.func.grad)`` when installed. The models and the hand-written Hessians are
  in ``examples/laue_hessians.py``. Peak memory is tracemalloc's peak over one call: it sees NumPy's
  arrays (so the hand-written and the pullback code) but not BLAS workspaces nor JAX's or PyTorch's
  own allocators, so peers get no memory figure.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
from scipy.special import logsumexp

import pullback as pb
from benchmarks.harness import median_ms

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
import laue_hessians as laue  # noqa: E402


def best_ms(fn, args, repeats: int = 5) -> float:
    return median_ms(fn, args, repeats)


def factorisation(U, V, T):
    return np.sum((T - U @ V.T) ** 2)


def factorisation_hand(U, V, T):
    return np.kron(np.eye(U.shape[0]), 2.0 * V.T @ V)


def main(tables: list[str] | None = None) -> None:
    """All tables, or those named (``laue``, ``factorisation``, ``masked``)."""
    chosen = {"laue": laue_tables, "factorisation": factorisation_table, "masked": masked_table,
              "lowrank": lowrank_table}
    for name, table in chosen.items():
        if not tables or name in tables:
            table()


def masked(U, V, Y, M):
    """Laue's masked matrix factorisation: only the observed entries (M = 1) count."""
    return np.sum(M * (U @ V.T - Y) ** 2)


def masked_hand(U, V, Y, M):
    """The block-diagonal Hessian in U by hand: ``B[i] = 2 V^T diag(M[i]) V`` as one gemm
    ``M @ (V (x) V)`` (n x m times m x k^2), written on the diagonal of zeros."""
    n, k = U.shape
    B = (M @ (V[:, :, None] * V[:, None, :]).reshape(V.shape[0], k * k)).reshape(n, k, k)
    B *= 2.0
    H = np.zeros((n, k, n, k))
    H[np.arange(n), :, np.arange(n), :] = B
    return H


PEER_BYTES = 4 * 2**30  # JAX's and PyTorch's Hessians go through an (n, k, n, m) tensor: skipped above 4 GiB


def masked_table() -> None:
    """The masked factorisation Hessian in U (k = 10, m = n, a third of the entries observed) at
    n = 60, 200, 1000: by hand, pullback dense and compressed (its blocks), JAX and PyTorch."""
    rng = np.random.default_rng(2)
    jx, tc = _peers()
    dense_pb, compressed = pb.hessian(masked), pb.hessian(masked, compressed=True)
    jax_h = jx and jx[0].jit(jx[0].hessian(lambda U, V, Y, M: jx[1].sum(M * (U @ V.T - Y) ** 2)))
    torch_h = tc and tc[1].hessian(lambda U, V, Y, M: tc[0].sum(M * (U @ V.T - Y) ** 2))
    print("\n| masked factorisation Hessian in U, k = 10 | by hand, ms | pullback, ms | ratio | JAX jit, ms | ratio "
          "| PyTorch, ms | ratio | peak MB, hand | peak MB, pullback | result MB | pullback compressed, ms |")
    print("|---" * 12 + "|")
    k = 10
    for n in (60, 200, 1000):
        m = n
        U, V, Y = rng.standard_normal((n, k)), rng.standard_normal((m, k)), rng.standard_normal((n, m))
        M = (rng.random((n, m)) < 1 / 3).astype(float)
        args = (U, V, Y, M)
        assert np.allclose(dense_pb(*args), masked_hand(*args), rtol=1e-10, atol=1e-10)
        peers = [None, None]
        if n * k * n * m * 8 <= PEER_BYTES:
            if jx:
                peers[0] = (jax_h, args)
            if tc:
                peers[1] = (torch_h, tuple(map(tc[0].from_numpy, args)))
        row = _row(f"n = {n}", masked_hand, dense_pb, args, peers)
        if peers[0] is None:
            row = row.replace("| nan | nan | nan | nan |", "| skipped | | skipped | |")
        t_c = best_ms(compressed, args, REPEATS)
        print(f"{row} {n * k * n * k * 8 / 2**20:.1f} | {t_c:.3f} |")


def peak_mb(fn, args) -> float:
    """Peak of the NumPy memory one call allocates (tracemalloc; see the module's note)."""
    fn(*args)
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def _peers():
    """``(jax, jnp)`` and ``(torch, torch.func)``, None where not installed."""
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        jx = (jax, jnp)
    except ImportError:
        jx = None
    try:
        import torch
        import torch.func

        tc = (torch, torch.func)
    except ImportError:
        tc = None
    return jx, tc


def _jax_relu(jnp):
    def net(W1, x, Ws, t):
        h = W1 @ x
        for W in Ws:
            h = W @ jnp.maximum(h, 0)
        z = h - h.max()
        return -jnp.sum(t * (z - jnp.log(jnp.sum(jnp.exp(z)))))
    return net


def _torch_relu(torch):
    def net(W1, x, Ws, t):
        h = W1 @ x
        for W in Ws:
            h = W @ torch.clamp(h, min=0)
        z = h - h.max()
        return -torch.sum(t * (z - torch.log(torch.sum(torch.exp(z)))))
    return net


def _torch_logistic(w, X, y):
    import torch

    return torch.sum(torch.nn.functional.softplus(-y * (X @ w)))


REPEATS = 15  # the median of 15 calls: the shared machine's load makes 5 too few


def _row(name: str, hand, ours, args, peers) -> str:
    """One table row: times (ms) and ratios to hand, tracemalloc peaks (MB) for hand and pullback."""
    t_hand, t_pb = best_ms(hand, args, REPEATS), best_ms(ours, args, REPEATS)
    cells = [name, f"{t_hand:.3f}", f"{t_pb:.3f}", f"{t_pb / t_hand:.2f}"]
    for peer in peers:
        t = best_ms(*peer, REPEATS) if peer is not None else float("nan")
        cells += [f"{t:.3f}", f"{t / t_hand:.2f}"]
    cells += [f"{peak_mb(hand, args):.1f}", f"{peak_mb(ours, args):.1f}"]
    return "| " + " | ".join(cells) + " |"


def laue_tables() -> None:
    rng = np.random.default_rng(1)
    jx, tc = _peers()
    header = ("| {} | by hand, ms | pullback, ms | ratio | JAX jit, ms | ratio | PyTorch, ms | ratio "
              "| peak MB, hand | peak MB, pullback |")
    rule = "|---" * 10 + "|"
    print(header.format("Logistic-regression Hessian"))
    print(rule)
    lr_pb = pb.hessian(laue.logistic)
    lr_jax = jx and jx[0].jit(jx[0].hessian(lambda w, X, y: jx[1].sum(jx[1].logaddexp(0.0, -y * (X @ w)))))
    for n in (100, 300, 1000):
        X, y, w = rng.standard_normal((n, n)) / np.sqrt(n), np.sign(rng.standard_normal(n)), rng.standard_normal(n)
        assert np.allclose(lr_pb(w, X, y), laue.logistic_hessian_by_hand(w, X, y), rtol=1e-9, atol=1e-12)
        peers = [jx and (lr_jax, (w, X, y)), None]
        if tc:
            torch, func = tc
            peers[1] = (func.hessian(_torch_logistic), tuple(map(torch.from_numpy, (w, X, y))))
        print(_row(f"n = {n}", laue.logistic_hessian_by_hand, lr_pb, (w, X, y), peers))
    print()
    print(header.format("ReLU net, 10 layers n x n, first-layer Hessian (n^4 entries)"))
    print(rule)
    net_pb = pb.hessian(laue.relu_net)
    for n in (10, 20, 40):
        W1 = rng.standard_normal((n, n)) / np.sqrt(n)
        Ws = [rng.standard_normal((n, n)) / np.sqrt(n) for _ in range(9)]
        x, t = rng.standard_normal(n), np.eye(n)[n // 2]
        args = (W1, x, Ws, t)
        assert np.allclose(net_pb(*args), laue.relu_net_first_layer_hessian_by_hand(*args), rtol=1e-8, atol=1e-10)
        peers = [None, None]
        if jx:
            peers[0] = (jx[0].jit(jx[0].hessian(_jax_relu(jx[1]))), args)
        if tc:
            torch, func = tc
            peers[1] = (func.hessian(_torch_relu(torch)),
                        (torch.from_numpy(W1), torch.from_numpy(x), [torch.from_numpy(W) for W in Ws],
                         torch.from_numpy(t)))
        print(_row(f"n = {n}", laue.relu_net_first_layer_hessian_by_hand, net_pb, args, peers))
    print()
    cross_country_table(rng, jx, tc)
    print()
    n_ex, d = 10_000, 100
    X, y, w = rng.standard_normal((n_ex, d)) / np.sqrt(d), np.sign(rng.standard_normal(n_ex)), rng.standard_normal(d)
    per_example = pb.vmap(pb.grad(_example_loss), in_axes=(None, 0, 0))
    assert np.allclose(per_example(w, X, y), laue.logistic_example_gradients_by_hand(w, X, y), rtol=1e-10)
    one = pb.grad(_example_loss)

    def loop(w, X, y):
        return np.stack([one(w, X[i], y[i]) for i in range(X.shape[0])])

    peers = [None, None]
    if jx:
        jax, jnp = jx
        peers[0] = (jax.jit(jax.vmap(jax.grad(lambda w, x, y: jnp.logaddexp(0.0, -y * (x @ w))), in_axes=(None, 0, 0))),
                    (w, X, y))
    if tc:
        torch, func = tc
        g = func.vmap(func.grad(lambda w, x, y: torch.nn.functional.softplus(-y * (x @ w))), in_dims=(None, 0, 0))
        peers[1] = (g, tuple(map(torch.from_numpy, (w, X, y))))
    print(header.format(f"Per-example gradients, logistic loss, {n_ex} x {d}"))
    print(rule)
    print(_row("pb.vmap(pb.grad)", laue.logistic_example_gradients_by_hand, per_example, (w, X, y), peers))
    t_hand, t_loop = best_ms(laue.logistic_example_gradients_by_hand, (w, X, y)), best_ms(loop, (w, X, y), repeats=1)
    print(f"| Python loop of pb.grad | {t_hand:.3f} | {t_loop:.3f} | {t_loop / t_hand:.2f} | | | | | | |")


def cross_country_table(rng, jx, tc) -> None:
    """Laue's example 7: the Jacobian A diag(u) B diag(v) C of ``A tanh(B tanh(C x))`` with A of 2
    rows, by hand in the cheap order ``((A u) B v) C``, and by forward and reverse mode."""
    n = 1000
    A, x = rng.standard_normal((2, n)), rng.standard_normal(n)
    B, C = rng.standard_normal((n, n)) / np.sqrt(n), rng.standard_normal((n, n)) / np.sqrt(n)

    def f(x):
        return A @ np.tanh(B @ np.tanh(C @ x))

    def hand(x):
        v = np.tanh(C @ x)
        u = 1 - np.tanh(B @ v) ** 2
        return ((A * u) @ B * (1 - v ** 2)) @ C

    print("| Jacobian of A tanh(B tanh(C x)), A 2 x 1000, B, C 1000 x 1000 | by hand, ms | pullback, ms | ratio "
          "| JAX jit, ms | ratio | PyTorch, ms | ratio | peak MB, hand | peak MB, pullback |")
    print("|---" * 10 + "|")
    for mode in ("jacfwd", "jacrev"):
        ours = getattr(pb, mode)(f)
        assert np.allclose(ours(x), hand(x), rtol=1e-9, atol=1e-12)
        peers = [None, None]
        if jx:
            peers[0] = (jx[0].jit(getattr(jx[0], mode)(_chain(jx[1].tanh))), (x, A, B, C))
        if tc:
            peers[1] = (getattr(tc[1], mode)(_chain(tc[0].tanh)), tuple(map(tc[0].from_numpy, (x, A, B, C))))
        print(_row(f"pb.{mode} (JAX, PyTorch: the same mode)", hand, ours, (x,), peers))


def _chain(tanh):
    """``A tanh(B tanh(C x))`` for a peer's ``tanh``, differentiated with respect to x."""
    def f(x, A, B, C):
        return A @ tanh(B @ tanh(C @ x))
    return f


def _example_loss(w, x, y):
    return np.logaddexp(0.0, -y * (x @ w))


def factorisation_peers():
    """JAX's (jit) and PyTorch's (torch.func) dense factorisation Hessians, each None when not installed."""
    jx = tc = None
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        jx = jax.jit(jax.hessian(lambda U, V, T: jnp.sum((T - U @ V.T) ** 2)))
    except ImportError:
        pass
    try:
        import torch

        def tc(U, V, T):
            U, V, T = map(torch.from_numpy, (U, V, T))
            return torch.func.hessian(lambda U: torch.sum((T - U @ V.T) ** 2))(U)
    except ImportError:
        pass
    return jx, tc


def factorisation_table() -> None:
    """The factorisation Hessian dense (pullback against the hand-written Kronecker product and the
    peers) and compressed: building the ``KroneckerOperator`` and one Newton step ``H.solve(g)``
    (building included) against ``np.linalg.solve`` on the dense (n k, n k) Hessian."""
    rng = np.random.default_rng(1)
    jx, tc = factorisation_peers()
    dense_pb, compressed = pb.hessian(factorisation), pb.hessian(factorisation, compressed=True)
    print("\n| factorisation Hessian, k = 5 | by hand, ms | pullback, ms | ratio | JAX jit, ms | ratio "
          "| PyTorch, ms | ratio | peak MB hand / pullback |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (50, 100):
        U, V = rng.standard_normal((n, 5)), rng.standard_normal((n, 5))
        args = (U, V, U @ V.T + 0.1 * rng.standard_normal((n, n)))
        assert np.allclose(dense_pb(*args).reshape(5 * n, 5 * n), factorisation_hand(*args))
        t_hand, t_pb = best_ms(factorisation_hand, args, 20), best_ms(dense_pb, args, 20)
        t_jax = best_ms(jx, args) if jx else float("nan")
        t_tc = best_ms(tc, args, 3) if tc else float("nan")
        print(f"| n = {n} | {t_hand:.3f} | {t_pb:.3f} | {t_pb / t_hand:.2f} | {t_jax:.3f} | {t_jax / t_hand:.1f} "
              f"| {t_tc:.3f} | {t_tc / t_hand:.0f} | {peak_mb(factorisation_hand, args):.1f} / "
              f"{peak_mb(dense_pb, args):.1f} |")
    print("\n| Newton step | compressed build, ms | compressed solve, ms | dense solve, ms | ratio |")
    print("|---|---|---|---|---|")
    for n, k in ((50, 5), (100, 5), (1000, 10)):
        U, V = rng.standard_normal((n, k)), rng.standard_normal((n, k))
        args = (U, V, U @ V.T + 0.1 * rng.standard_normal((n, n)))
        g = rng.standard_normal(n * k)
        H = compressed(*args)
        t_build, t_solve = best_ms(compressed, args, 20), best_ms(H.solve, (g,), 20)
        if n * k <= 1000:
            dense = H.todense()
            assert np.allclose(H.solve(g), np.linalg.solve(dense, g))
            t_dense = best_ms(np.linalg.solve, (dense, g), 5)
            cells = f"{t_dense:.3f} | {t_dense / t_solve:.0f}"
        else:
            cells = f"skipped ((n k)^2 = {(n * k) ** 2:.0e} entries) | "
        print(f"| n = {n}, k = {k} | {t_build:.3f} | {t_solve:.3f} | {cells} |")


def softmax_ridge(z, t):
    return logsumexp(z) - t @ z + 0.5 * np.sum(z ** 2)


def softmax_ridge_hand(z, t):
    p = np.exp(z - logsumexp(z))
    H = np.outer(-p, p)
    H.flat[:: z.size + 1] += p + 1.0
    return H


def logistic_ridge(w, X, y, c):
    return np.sum(c * np.logaddexp(0.0, -y * (X @ w))) + 0.5 * np.sum(w ** 2)


def logistic_ridge_hand(w, X, y, c):
    s = 1.0 / (1.0 + np.exp(-y * (X @ w)))
    H = X.T @ ((c * s * (1.0 - s))[:, None] * X)
    H.flat[:: w.size + 1] += 1.0
    return H


def lowrank_table() -> None:
    """Dense Hessians by hand and by pullback, and the compressed form's build and Newton step."""
    rng = np.random.default_rng(3)
    print("\n| diagonal plus low rank | by hand, ms | pullback, ms | ratio | compressed build, ms "
          "| compressed solve, ms | dense solve, ms | ratio |")
    print("|---" * 8 + "|")
    n = 2000
    z, t = rng.standard_normal(n), rng.dirichlet(np.ones(n))
    m = 50
    X, y, c = rng.standard_normal((m, n)) / np.sqrt(n), np.sign(rng.standard_normal(m)), rng.random(m) + 0.5
    w = rng.standard_normal(n)
    for name, f, hand, args in ((f"softmax + ridge, n = {n}", softmax_ridge, softmax_ridge_hand, (z, t)),
                                (f"weighted logistic + ridge, {m} x {n}", logistic_ridge, logistic_ridge_hand,
                                 (w, X, y, c))):
        dense_pb, compressed = pb.hessian(f), pb.hessian(f, compressed=True)
        dense = hand(*args)
        assert np.allclose(dense_pb(*args), dense, rtol=1e-10, atol=1e-12)
        H = compressed(*args)
        g = rng.standard_normal(n)
        assert np.allclose(H.solve(g), np.linalg.solve(dense, g), rtol=1e-8, atol=1e-10)
        t_hand, t_pb = best_ms(hand, args, REPEATS), best_ms(dense_pb, args, REPEATS)
        t_build, t_solve = best_ms(compressed, args, REPEATS), best_ms(H.solve, (g,), REPEATS)
        t_dense = best_ms(np.linalg.solve, (dense, g), 3)
        print(f"| {name} | {t_hand:.3f} | {t_pb:.3f} | {t_pb / t_hand:.2f} | {t_build:.3f} | {t_solve:.3f} "
              f"| {t_dense:.3f} | {t_dense / t_solve:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
