"""``python -m benchmarks.loops [--quick]``: the Kalman filter gradient as a loop.

For each state dimension and length T: the first call (trace, transform, print, compile, run; a
fresh ``differentiate`` object each time), the steady time per step (the fastest of a few repeats: the
machine may be shared, and interference only adds time), and the
peak memory the NumPy arrays of one gradient call reach (tracemalloc), for ``pb.scan``, ``pb.scan``
with ``checkpoint=True`` (blocks of sqrt T), JAX's ``lax.scan`` under ``jit`` and PyTorch eager (a Python
loop, ``.backward()``) when installed. The compile overhead is the first call less one steady call.
The reference is a hand-written NumPy gradient (``grad_numpy``: the forward loop keeps what the
backward loop's adjoint formulas read), checked against pullback's in tests/primitives/test_scan.py; the
likelihood alone in NumPy/SciPy (no gradient) is shown for scale. Peak memory is what tracemalloc
sees, NumPy's allocations: not JAX's or PyTorch's (n/a). Every implementation's first result is checked
against the hand-written gradient's.
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


def grad_numpy(A, B, log_qh, log_qv, v, mu0, S0):
    """The likelihood and its gradient in (A, B, log_qh, log_qv) by hand, as an expert writes it: the
    forward loop keeps (mu, S, P, V^-1, K, M, f, F) per step and the backward loop applies the adjoint
    formulas (the likelihood terms through V directly: V_bar = (V^-1 - a a^T) / 2, a = V^-1 d)."""
    dh, dv = A.shape[0], B.shape[0]
    qh, qv = np.exp(log_qh), np.exp(log_qv)
    T = v.shape[0]
    I = np.eye(dh)
    mus, Ss, Ps, Vis, Ks, Ms, fs, Fs, ds = ([None] * T for _ in range(9))
    mu, S, nll = mu0, S0, 0.0
    const = 0.5 * dv * np.log(2 * np.pi)
    for t in range(T):
        P = S @ B.T
        V = B @ P
        V[np.diag_indices(dv)] += qv
        L = np.linalg.cholesky(V)
        Li = np.linalg.inv(L)
        Vi = Li.T @ Li
        d = v[t] - B @ mu
        w = Li @ d
        nll += 0.5 * (w @ w) + np.sum(np.log(np.diag(L))) + const
        K = P @ Vi
        f = mu + K @ d
        M = I - K @ B
        F = M @ S @ M.T + qv * (K @ K.T)
        mus[t], Ss[t], Ps[t], Vis[t], Ks[t], Ms[t], fs[t], Fs[t], ds[t] = mu, S, P, Vi, K, M, f, F, d
        mu = A @ f
        S = A @ F @ A.T
        S[np.diag_indices(dh)] += qh
    A_bar, B_bar = np.zeros_like(A), np.zeros_like(B)
    qh_bar = qv_bar = 0.0
    mu_bar, S_bar = np.zeros(dh), np.zeros((dh, dh))
    for t in range(T - 1, -1, -1):
        mu, S, P, Vi, K, M, f, F, d = mus[t], Ss[t], Ps[t], Vis[t], Ks[t], Ms[t], fs[t], Fs[t], ds[t]
        # mu' = A f, S' = A F A^T + qh I (S_bar symmetric)
        f_bar = A.T @ mu_bar
        F_bar = A.T @ S_bar @ A
        A_bar += np.outer(mu_bar, f) + 2 * S_bar @ A @ F
        qh_bar += np.trace(S_bar)
        # F = M S M^T + qv K K^T
        MS = M @ S
        M_bar = 2 * F_bar @ MS
        S_bar = M.T @ F_bar @ M
        K_bar = 2 * qv * (F_bar @ K) - M_bar @ B.T + np.outer(f_bar, d)
        qv_bar += np.sum(K * (F_bar @ K))
        B_bar -= K.T @ M_bar
        # f = mu + K d; d = v - B mu; the likelihood terms 0.5 d^T V^-1 d + 0.5 logdet V
        a = Vi @ d
        d_bar = K.T @ f_bar + a
        V_bar = 0.5 * (Vi - np.outer(a, a))
        # K = P V^-1
        P_bar = K_bar @ Vi
        V_bar -= K.T @ P_bar
        # V = B P + qv I; P = S B^T
        B_bar += V_bar @ P.T
        P_bar += B.T @ V_bar
        qv_bar += np.trace(V_bar)
        S_bar += P_bar @ B
        B_bar += P_bar.T @ S
        mu_bar = f_bar - B.T @ d_bar
        B_bar -= np.outer(d_bar, mu)
        S_bar = 0.5 * (S_bar + S_bar.T)
    return nll, (A_bar, B_bar, qh_bar * qh, qv_bar * qv)


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


def torch_grad():
    """The same likelihood in PyTorch eager (float64), a Python loop over the steps, the gradient by
    ``.backward()``: the tape records every step's operations, as pullback's forward loop stores residuals."""
    try:
        import torch
    except ImportError:
        return None

    def value_and_grad(A, B, log_qh, log_qv, v, mu0, S0):
        A, B = (torch.tensor(x, requires_grad=True) for x in (A, B))
        log_qh, log_qv = (torch.tensor(float(x), dtype=torch.float64, requires_grad=True) for x in (log_qh, log_qv))
        v, mu_h, S_hh = torch.from_numpy(v), torch.from_numpy(mu0), torch.from_numpy(S0)
        dh, dv = A.shape[0], B.shape[0]
        I_h, I_v = torch.eye(dh, dtype=torch.float64), torch.eye(dv, dtype=torch.float64)
        S_h, S_v = torch.exp(log_qh) * I_h, torch.exp(log_qv) * I_v
        const = 0.5 * dv * np.log(2 * np.pi)
        total = torch.zeros((), dtype=torch.float64)
        for t in range(v.shape[0]):
            S_hh_Bt = S_hh @ B.T
            L = torch.linalg.cholesky(B @ S_hh_Bt + S_v)
            # K^T = L^-T L^-1 (S_hh B^T)^T: two triangular solves
            K = torch.linalg.solve_triangular(L.mT, torch.linalg.solve_triangular(L, S_hh_Bt.T, upper=False),
                                              upper=True).T
            delta = v[t] - B @ mu_h
            w = torch.linalg.solve_triangular(L, delta[:, None], upper=False)[:, 0]
            total = total + 0.5 * (w @ w) + torch.log(torch.diagonal(L)).sum() + const
            f = mu_h + K @ delta
            ImKB = I_h - K @ B
            F = ImKB @ S_hh @ ImKB.T + K @ S_v @ K.T
            mu_h, S_hh = A @ f, A @ F @ A.T + S_h
        total.backward()
        return total.item(), (A.grad.numpy(), B.grad.numpy(), log_qh.grad.item(), log_qv.grad.item())

    return lambda: value_and_grad


def measure(make, args, repeats: int, traced: bool = True):
    """(first call s, fastest steady call s, peak MB of traced allocations during a steady call or None, the first
    call's result)."""
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
    peak = None
    if traced:
        tracemalloc.start()
        _block(fn(*args))
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return first, min(times), peak, out


def _agrees(out, reference) -> bool:
    value, grads = out
    ref_value, ref_grads = reference
    return bool(np.allclose(float(value), ref_value, rtol=1e-6) and all(
        np.allclose(np.asarray(g), r, rtol=1e-5, atol=1e-8 * max(1.0, float(np.max(np.abs(r)))))
        for g, r in zip(grads, ref_grads)))


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
    sizes = [(2, 1000), (8, 1000)] if opts.quick else [(2, 1000), (64, 1000), (2, 10_000), (64, 10_000)]
    impls = {
        "hand-written NumPy gradient": lambda: grad_numpy,
        "pullback scan": lambda: pb.differentiate(kf.kalman_nll, argnums=(0, 1, 2, 3)).value_and_grad,
        "pullback scan, checkpoint=True": lambda: pb.differentiate(
            lambda *a: kf.kalman_nll(*a, checkpoint=True), argnums=(0, 1, 2, 3)).value_and_grad,
    }
    for name, make in (("JAX lax.scan, jit", jax_grad()), ("PyTorch eager, .backward()", torch_grad())):
        if make is not None:
            impls[name] = make
    print("| state dim | T | implementation | first call, s | compile overhead, s | steady, us per step | peak MB |")
    print("|---|---|---|---|---|---|---|")
    for dh, T in sizes:
        args = data(dh, T)
        repeats = 3 if T >= 10_000 else 5
        forward_numpy(*args)
        t = time.perf_counter()
        forward_numpy(*args)
        floor = time.perf_counter() - t
        print(f"| {dh} | {T} | NumPy/SciPy likelihood alone (no gradient) | | | {floor / T * 1e6:.1f} | |")
        reference = None
        for name, make in impls.items():
            # JAX's and PyTorch's allocations are their own: tracemalloc sees NumPy's alone
            first, steady, peak, out = measure(make, args, repeats, traced=name in TRACED)
            reference = reference or out
            ok = "" if _agrees(out, reference) else " (DISAGREES with the hand-written gradient)"
            print(f"| {dh} | {T} | {name}{ok} | {first:.2f} | {first - steady:.2f} | {steady / T * 1e6:.1f} | "
                  f"{'n/a' if peak is None else f'{peak:.1f}'} |")
            sys.stdout.flush()


TRACED = {"hand-written NumPy gradient", "pullback scan", "pullback scan, checkpoint=True"}


if __name__ == "__main__":
    main()
