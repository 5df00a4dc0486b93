"""``python -m benchmarks.hessians``: Laue et al.'s Hessian experiments, per call after a warm-up.

- Logistic regression, ``f(w) = sum log(1 + exp(-y * (X w)))`` with X of n x n: by hand
  ``X^T diag(s (1 - s)) X`` (one scaling and one product), ``pb.hessian``, and ``jax.hessian``
  under ``jit`` when JAX is installed.
- Matrix factorisation, ``f(U) = ||T - U V^T||_F^2`` with U of n x 5: by hand the dense Hessian
  ``2 I_n (x) V^T V`` (a Kronecker product), ``pb.hessian``, and JAX's.
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
import time
import tracemalloc
from pathlib import Path

import numpy as np

import pullback as pb

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
import laue_hessians as laue  # noqa: E402


def best_ms(fn, args, repeats: int = 5) -> float:
    out = fn(*args)
    if hasattr(out, "block_until_ready"):
        out.block_until_ready()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn(*args)
        if hasattr(out, "block_until_ready"):
            out.block_until_ready()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def logistic(w, X, y):
    return np.sum(np.logaddexp(0.0, -y * (X @ w)))


def logistic_hand(w, X, y):
    s = 1.0 / (1.0 + np.exp(-y * (X @ w)))
    return X.T @ ((s * (1.0 - s))[:, None] * X)


def factorisation(U, V, T):
    return np.sum((T - U @ V.T) ** 2)


def factorisation_hand(U, V, T):
    return np.kron(np.eye(U.shape[0]), 2.0 * V.T @ V)


def jax_versions():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    lr = jax.jit(jax.hessian(lambda w, X, y: jnp.sum(jnp.logaddexp(0.0, -y * (X @ w)))))
    mf = jax.jit(jax.hessian(lambda U, V, T: jnp.sum((T - U @ V.T) ** 2)))
    return lr, mf


def main() -> None:
    rng = np.random.default_rng(0)
    n = 1000
    X, y, w = rng.standard_normal((n, n)) / np.sqrt(n), np.sign(rng.standard_normal(n)), rng.standard_normal(n)
    k, m = 5, 100
    U, V = rng.standard_normal((m, k)), rng.standard_normal((m, k))
    T = U @ V.T + 0.1 * rng.standard_normal((m, m))
    lr_pb, mf_pb = pb.hessian(logistic), pb.hessian(factorisation)
    h = lr_pb(w, X, y)
    assert np.allclose(h, logistic_hand(w, X, y), rtol=1e-9, atol=1e-12)
    assert np.allclose(mf_pb(U, V, T).reshape(m * k, m * k), factorisation_hand(U, V, T))
    rows = [("logistic regression, n = 1000", logistic_hand, lr_pb, (w, X, y)),
            ("rank-5 factorisation, n = 100", factorisation_hand, mf_pb, (U, V, T))]
    jx = jax_versions()
    print("| Hessian | by hand, ms | pullback, ms | ratio | JAX jit, ms | ratio |")
    print("|---|---|---|---|---|---|")
    for i, (name, hand, ours, args) in enumerate(rows):
        t_hand, t_pb = best_ms(hand, args), best_ms(ours, args)
        t_jax = best_ms(jx[i], args) if jx else float("nan")
        print(f"| {name} | {t_hand:.3f} | {t_pb:.3f} | {t_pb / t_hand:.2f} | {t_jax:.3f} | {t_jax / t_hand:.2f} |")
    print()
    laue_tables()


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


if __name__ == "__main__":
    main()
