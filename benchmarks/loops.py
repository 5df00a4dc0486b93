"""``python -m benchmarks.loops [--quick]``: the Kalman filter gradient as a loop.

For each state dimension and length T: the first call (trace, transform, print, compile, run; a
fresh ``differentiate`` object each time), the steady time per step (median of repeats), and the
peak memory the NumPy arrays of one gradient call reach (tracemalloc), for ``pb.scan``, ``pb.scan``
with ``checkpoint=True`` (blocks of sqrt T), and JAX's ``lax.scan`` under ``jit`` when installed.
A plain NumPy loop evaluating the likelihood alone (no gradient) is the floor: the gradient
cannot cost less than the forward pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import kalman_filter as kf  # noqa: E402

import pullback as pb  # noqa: E402


def data(dh: int, T: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((dh, dh)))
    A = 0.95 * q
    dv = max(dh // 2 + 1, 1)
    B = rng.standard_normal((dv, dh)) / np.sqrt(dh)
    h, vs = np.zeros(dh), np.empty((T, dv))
    for t in range(T):
        h = A @ h + 0.3 * rng.standard_normal(dh)
        vs[t] = B @ h + 0.1 * rng.standard_normal(dv)
    return A, B, np.log(0.09), np.log(0.01), vs, np.zeros(dh), np.eye(dh)


def forward_numpy(A, B, log_qh, log_qv, v, mu0, S0):
    """The likelihood alone, as a person writes it in NumPy/SciPy: the floor for any gradient."""
    import scipy.linalg as sl

    dh, dv = A.shape[0], B.shape[0]
    S_h, S_v = np.exp(log_qh) * np.eye(dh), np.exp(log_qv) * np.eye(dv)
    mu_h, S_hh, nll = mu0, S0, 0.0
    const = 0.5 * dv * np.log(2 * np.pi)
    for v_t in v:
        S_hh_Bt = S_hh @ B.T
        L = sl.cholesky(B @ S_hh_Bt + S_v, lower=True)
        K = sl.solve_triangular(L, sl.solve_triangular(L, S_hh_Bt.T, lower=True), lower=True, trans="T").T
        delta = v_t - B @ mu_h
        w = sl.solve_triangular(L, delta, lower=True)
        nll += 0.5 * (w @ w) + np.sum(np.log(np.diag(L))) + const
        f = mu_h + K @ delta
        ImKB = np.eye(dh) - K @ B
        F = ImKB @ S_hh @ ImKB.T + K @ S_v @ K.T
        mu_h, S_hh = A @ f, A @ F @ A.T + S_h
    return nll


def jax_grad():
    try:
        import jax
        import jax.numpy as jnp
        import jax.scipy.linalg as jsl
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def nll(A, B, log_qh, log_qv, v, mu0, S0):
        dh, dv = A.shape[0], B.shape[0]
        S_h, S_v = jnp.exp(log_qh) * jnp.eye(dh), jnp.exp(log_qv) * jnp.eye(dv)

        def step(carry, v_t):
            mu_h, S_hh, total = carry
            S_hh_Bt = S_hh @ B.T
            L = jnp.linalg.cholesky(B @ S_hh_Bt + S_v)
            K = jsl.solve_triangular(L, jsl.solve_triangular(L, S_hh_Bt.T, lower=True), lower=True, trans="T").T
            delta = v_t - B @ mu_h
            w = jsl.solve_triangular(L, delta, lower=True)
            total = total + 0.5 * (w @ w) + jnp.sum(jnp.log(jnp.diag(L))) + 0.5 * dv * jnp.log(2 * jnp.pi)
            f = mu_h + K @ delta
            ImKB = jnp.eye(dh) - K @ B
            F = ImKB @ S_hh @ ImKB.T + K @ S_v @ K.T
            return (A @ f, A @ F @ A.T + S_h, total), None

        (_, _, total), _ = jax.lax.scan(step, (mu0, S0, 0.0), v)
        return total

    return lambda: jax.jit(jax.value_and_grad(nll, argnums=(0, 1, 2, 3)))


def measure(make, args, repeats: int) -> tuple[float, float, float]:
    """(first call s, steady s per call, peak MB of traced allocations during a steady call)."""
    start = time.perf_counter()
    fn = make()
    out = fn(*args)
    _block(out)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        _block(fn(*args))
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    _block(fn(*args))
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return first, float(np.median(times)), peak


def _block(out):
    leaves = out if isinstance(out, tuple | list) else [out]
    for leaf in leaves:
        for x in leaf if isinstance(leaf, tuple | list) else [leaf]:
            if hasattr(x, "block_until_ready"):
                x.block_until_ready()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    sizes = [(2, 1000), (8, 1000)] if opts.quick else [(2, 1000), (2, 10_000), (64, 1000), (64, 10_000)]
    impls = {
        "pullback scan": lambda: pb.differentiate(kf.kalman_nll, argnums=(0, 1, 2, 3)).value_and_grad,
        "pullback scan, checkpoint=True": lambda: pb.differentiate(
            lambda *a: kf.kalman_nll(*a, checkpoint=True), argnums=(0, 1, 2, 3)).value_and_grad,
    }
    jax_make = jax_grad()
    if jax_make is not None:
        impls["JAX lax.scan, jit"] = jax_make
    print("| state dim | T | implementation | first call, s | steady, us per step | peak MB |")
    print("|---|---|---|---|---|---|")
    for dh, T in sizes:
        args = data(dh, T)
        repeats = 3 if T >= 10_000 else 5
        t = time.perf_counter()
        forward_numpy(*args)
        floor = time.perf_counter() - t
        print(f"| {dh} | {T} | NumPy/SciPy likelihood alone (no gradient) | | {floor / T * 1e6:.1f} | |")
        for name, make in impls.items():
            first, steady, peak = measure(make, args, repeats)
            print(f"| {dh} | {T} | {name} | {first:.2f} | {steady / T * 1e6:.1f} | {peak:.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
