"""``python -m benchmarks.hessians``: Laue et al.'s Hessian experiments, per call after a warm-up.

- Logistic regression, ``f(w) = sum log(1 + exp(-y * (X w)))`` with X of n x n: by hand
  ``X^T diag(s (1 - s)) X`` (one scaling and one product), ``pb.hessian``, and ``jax.hessian``
  under ``jit`` when JAX is installed.
- Matrix factorisation, ``f(U) = ||T - U V^T||_F^2`` with U of n x 5: by hand the dense Hessian
  ``2 I_n (x) V^T V`` (a Kronecker product), ``pb.hessian``, and JAX's; then (``factorisation_table``)
  at n = 50 and 100 with PyTorch and peak memory too, the compressed Hessian
  (``pb.hessian(f, compressed=True)``) and a Newton step with it against a dense solve, also at
  n = 1000, k = 10 (the paper's 10 us against 1 s), where the dense solve is skipped.
"""

from __future__ import annotations

import time

import numpy as np

import pullback as pb


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


def peak_mb(fn, args) -> float:
    """Peak NumPy memory of one call (tracemalloc sees NumPy's allocations)."""
    import tracemalloc

    tracemalloc.start()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2 ** 20


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


if __name__ == "__main__":
    main()
    factorisation_table()
