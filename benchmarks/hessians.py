"""``python -m benchmarks.hessians``: Laue et al.'s Hessian experiments, per call after a warm-up.

- Logistic regression, ``f(w) = sum log(1 + exp(-y * (X w)))`` with X of n x n: by hand
  ``X^T diag(s (1 - s)) X`` (one scaling and one product), ``pb.hessian``, and ``jax.hessian``
  under ``jit`` when JAX is installed.
- Matrix factorisation, ``f(U) = ||T - U V^T||_F^2`` with U of n x 5: by hand the dense Hessian
  ``2 I_n (x) V^T V`` (a Kronecker product), ``pb.hessian``, and JAX's.
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


if __name__ == "__main__":
    main()
