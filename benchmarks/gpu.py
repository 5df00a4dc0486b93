"""GPU cases: the GP and sparse GP gradients as CuPy programs, against pullback's CPU
program and, when they see a GPU, PyTorch CUDA and JAX. Inputs move to the device once,
outside the timed calls; each timed call ends with a device synchronisation."""

from __future__ import annotations

import numpy as np

from benchmarks import cases
from benchmarks.harness import Case, available


def gpu_available() -> bool:
    if not available("cupy"):
        return False
    import cupy

    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _on_device(fn, to_device, sync, to_host):
    """``fn`` on device copies of the arguments (made once per argument object)."""
    cache: dict[int, tuple] = {}

    def on_device(a):
        if not isinstance(a, np.ndarray):
            return a
        if cache.get(id(a), (None,))[0] is not a:
            cache[id(a)] = (a, to_device(a))  # the array is kept, so its id is not reused
        return cache[id(a)][1]

    def run(*args):
        dev = [on_device(a) for a in args]
        out = fn(*dev)
        sync()
        return to_host(out)

    return run


def _host(x):
    if isinstance(x, tuple | list):
        return type(x)(_host(v) for v in x)
    return x.get() if hasattr(x, "get") and not isinstance(x, dict) else np.asarray(x)


def _impls(pullback_fn, torch_fn, jax_fn) -> dict:
    import cupy

    impls = {"pullback CPU": pullback_fn,
             "pullback CuPy": _on_device(pullback_fn, cupy.asarray, cupy.cuda.Device().synchronize, _host)}
    if cases.HAVE_TORCH and cases.torch.cuda.is_available():
        torch = cases.torch
        impls["PyTorch CUDA"] = _on_device(torch_fn, lambda a: torch.from_numpy(a).cuda(), torch.cuda.synchronize,
                                           lambda out: out)
    if cases.HAVE_JAX and any(d.platform == "gpu" for d in cases.jax.devices()):
        jax = cases.jax
        f = jax.jit(jax_fn)
        impls["JAX GPU"] = _on_device(f, jax.device_put, lambda: None, jax.device_get)
    return impls


def gpu_gp_case() -> Case:
    impls = _impls(cases.gp_regression.neg_log_marginal_likelihood.value_and_grad, cases._gp_torch,
                   cases.jax.value_and_grad(cases._gp_jax) if cases.HAVE_JAX else None)
    return Case("GPU: GP negative log likelihood, value and gradient", [2048, 4096, 8192], [2048], cases.gp_data,
                impls, memory=False,
                notes=["pullback's CPU program is measured up to n = 4096 (at 8192 the ratios are to pullback CuPy)."],
                skip=lambda impl, n: impl == "pullback CPU" and n > 4096)


def gpu_sgp_case() -> Case:
    impls = _impls(cases.sparse_gp.bound.value_and_grad, cases._sgp_torch,
                   cases.jax.value_and_grad(cases._sgp_jax, (0, 1, 2, 3)) if cases.HAVE_JAX else None)
    return Case("GPU: variational sparse GP bound, value and gradient; n = 9568, d = 4", [(9568, 800)],
                [(9568, 800)], cases.sgp_data, impls, memory=False)
