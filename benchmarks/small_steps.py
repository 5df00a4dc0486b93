"""``python -m benchmarks.small_steps``: programs of many small steps, value and gradient per call, pullback's
NumPy program, its loops and elementwise chains compiled by Numba (``compile="numba"``) and
``compile="auto"``'s choice, against JAX under ``jit`` (``lax.scan``/``fori_loop``), in one run (also
printed by ``python -m benchmarks.loops``; ``python -m benchmarks.small_steps mixture``: the programs
whose name holds the words given):

- Lotka-Volterra by RK4, ``pb.scan``, 100 steps, state of 2;
- the heat equation, 128 points, 200 explicit steps, ``pb.fori_loop``;
- the Kalman filter of ``examples/kalman_filter.py``, states of 2, 4 and 64, 200 steps;
- a Gaussian mixture's log-likelihood (diagonal, 3 components) over 5000 x 8 data: no loop, chains of
  elementwise operations and the sums and maxima that end them (``backends/numba_chains``).

First call: a fresh function object (trace, transform, print, compile, run; for Numba, compiling the
loops into a fresh cache directory), beside JAX's first call (its tracing and XLA compile). "first call,
cached": a fresh function object again, the compiled loops now read from Numba's on-disk cache (what a
new process pays). Steady: the median of repeats (the machine may be shared: repeat the run when it
matters). Each result is checked against pullback's NumPy program.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import kalman_filter as kf  # noqa: E402

import pullback as pb  # noqa: E402

# --- the programs, for pullback (NumPy) and JAX (jax.numpy) -------------------------------------------------


def lotka_volterra(xp, scan):
    def loss(theta, x0):
        a, b, c, d = theta[0], theta[1], theta[2], theta[3]
        h = 0.01

        def f(x):
            return xp.stack([a * x[0] - b * x[0] * x[1], c * x[0] * x[1] - d * x[1]])

        def step(x, _):
            k1 = f(x)
            k2 = f(x + 0.5 * h * k1)
            k3 = f(x + 0.5 * h * k2)
            k4 = f(x + h * k3)
            x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return x, x

        _, xs = scan(step, x0, None, length=100)
        return xp.sum((xs - 1.0) ** 2)

    return loss, (np.array([1.0, 0.5, 0.3, 0.8]), np.array([1.0, 1.0])), (0, 1)


def heat(xp, fori_loop):
    def loss(u0, kappa):
        def body(_, u):
            return u + kappa * (xp.roll(u, 1) - 2 * u + xp.roll(u, -1))

        return xp.sum(fori_loop(0, 200, body, u0) ** 2)

    u0 = np.sin(np.linspace(0, 2 * np.pi, 128, endpoint=False)) + 1.5
    return loss, (u0, 0.2), (0, 1)


def mixture(xp, logsumexp):
    def loss(means, log_sd, logits, X):
        z = (X[:, None, :] - means[None, :, :]) / xp.exp(log_sd)[None, :, :]
        per = -0.5 * xp.sum(z ** 2, axis=2) - xp.sum(log_sd, axis=1)[None, :] - 4 * np.log(2 * np.pi)
        log_w = logits - logsumexp(logits)
        return xp.sum(logsumexp(per + log_w[None, :], axis=1))

    rng = np.random.default_rng(0)
    return loss, (rng.standard_normal((3, 8)), 0.1 * rng.standard_normal((3, 8)), np.zeros(3),
                  rng.standard_normal((5000, 8))), (0, 1, 2)


def cases(numpy_side: bool):
    """(name, loss, args, argnums) for NumPy and pullback, or for JAX."""
    if numpy_side:
        import scipy.special

        out = [("RK4 Lotka-Volterra, scan, 100 steps, state 2", *lotka_volterra(np, pb.scan)),
               ("heat equation, fori_loop, 128 points, 200 steps", *heat(np, pb.fori_loop))]
    else:
        import jax
        import jax.numpy as jnp

        out = [("RK4 Lotka-Volterra, scan, 100 steps, state 2", *lotka_volterra(jnp, jax.lax.scan)),
               ("heat equation, fori_loop, 128 points, 200 steps", *heat(jnp, jax.lax.fori_loop))]
    for dh in (2, 4, 64):
        args = kf_data(dh)
        out.append((f"Kalman filter, scan, state {dh}, 200 steps", kalman_loss(numpy_side), args, (0, 1, 2, 3)))
    if numpy_side:
        out.append(("Gaussian mixture log-likelihood, 5000 x 8", *mixture(np, scipy.special.logsumexp)))
    else:
        import jax.scipy.special

        out.append(("Gaussian mixture log-likelihood, 5000 x 8", *mixture(jnp, jax.scipy.special.logsumexp)))
    return out


def kf_data(dh: int):
    from benchmarks.loops import data

    return data(dh, 200)


def kalman_loss(numpy_side: bool):
    if numpy_side:
        return kf.kalman_nll
    from benchmarks.loops import jax_nll

    return jax_nll()


# --- measuring ---------------------------------------------------------------------------------------------


def _timed(fn, args, repeats: int, budget: float = 2.0) -> tuple[float, object]:
    """The median of ``repeats`` calls (fewer, at least 5, where they would take over ``budget`` seconds)."""
    out = fn(*args)
    times: list[float] = []
    while len(times) < repeats and (len(times) < 5 or sum(times) < budget):
        t = time.perf_counter()
        out = fn(*args)
        _block(out)
        times.append(time.perf_counter() - t)
    return float(np.median(times)), out


def _block(out):
    for leaf in (out if isinstance(out, tuple | list) else [out]):
        for x in leaf if isinstance(leaf, tuple | list) else [leaf]:
            if hasattr(x, "block_until_ready"):
                x.block_until_ready()


def _first(make, args) -> float:
    t = time.perf_counter()
    fn = make()
    _block(fn(*args))
    return time.perf_counter() - t


def _agrees(out, ref) -> bool:
    value, grads = out
    ref_value, ref_grads = ref
    return bool(np.allclose(float(value), float(ref_value), rtol=1e-8) and all(
        np.allclose(np.asarray(g), np.asarray(r), rtol=1e-6, atol=1e-9 * max(1.0, float(np.max(np.abs(r)))))
        for g, r in zip(grads, ref_grads)))


def main(repeats: int = 50, only: str = "") -> None:
    """The table; ``only``: the programs whose name holds it (``python -m benchmarks.small_steps mixture``)."""
    os.environ["PULLBACK_CACHE_DIR"] = tempfile.mkdtemp(prefix="pullback-bench-")  # compiles from cold
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jax_cases = {name: (loss, argnums) for name, loss, _, argnums in cases(False)}
    except ImportError:
        jax, jax_cases = None, {}
    print("| program | implementation | first call, s | first call, cached, s | steady, ms per call | vs JAX |")
    print("|---|---|---|---|---|---|")
    for name, loss, args, argnums in cases(True):
        if only.lower() not in name.lower():
            continue
        rows = []
        reference = None
        for label, mode in (("pullback, NumPy", "numpy"), ("pullback, Numba", "numba"), ("pullback, auto", "auto")):
            def make(mode=mode, loss=loss, argnums=argnums):
                return pb.differentiate(loss, argnums=argnums, compile=mode).value_and_grad
            first = _first(make, args)
            cached = _first(make, args) if mode != "numpy" else None
            steady, out = _timed(make(), args, repeats)
            reference = reference or out
            ok = "" if _agrees(out, reference) else " (DISAGREES)"
            rows.append((label + ok, first, cached, steady))
        jax_steady = None
        if name in jax_cases:
            jloss, jnums = jax_cases[name]

            def make_jax(jloss=jloss, jnums=jnums):
                return jax.jit(jax.value_and_grad(jloss, argnums=jnums))
            first = _first(make_jax, args)
            jax_steady, out = _timed(make_jax(), args, repeats)
            ok = "" if _agrees(out, reference) else " (DISAGREES)"
            rows.append(("JAX jit" + ok, first, None, jax_steady))
        for label, first, cached, steady in rows:
            ratio = f"{steady / jax_steady:.2f}x" if jax_steady else ""
            print(f"| {name} | {label} | {first:.2f} | {'' if cached is None else f'{cached:.2f}'} | "
                  f"{steady * 1e3:.3f} | {ratio} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main(only=" ".join(sys.argv[1:]))
