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
    cache: dict[int, object] = {}

    def run(*args):
        dev = [cache.setdefault(id(a), to_device(a)) if isinstance(a, np.ndarray) else a for a in args]
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
        impls["JAX GPU"] = _on_device(f, jax.device_put, lambda: None, lambda out: jax.block_until_ready(out))
    return impls


def _gp_torch_cuda(theta, X, y):
    torch = cases.torch
    t = torch.tensor(np.asarray(theta.cpu()), requires_grad=True, device="cuda")
    Xs = X / torch.exp(t[0])
    sq = torch.sum(Xs**2, dim=1)
    K = torch.exp(t[1]) * torch.exp(-0.5 * (sq[:, None] + sq[None, :] - 2 * Xs @ Xs.T))
    K = K + torch.exp(t[2]) * torch.eye(X.shape[0], dtype=torch.float64, device="cuda")
    L = torch.linalg.cholesky(K)
    z = torch.linalg.solve_triangular(L, y[:, None], upper=False)[:, 0]
    value = 0.5 * z @ z + torch.sum(torch.log(torch.diagonal(L))) + 0.5 * X.shape[0] * np.log(2 * np.pi)
    (g,) = torch.autograd.grad(value, t)
    return value.item(), g.cpu().numpy()


def gpu_gp_case() -> Case:
    impls = _impls(cases.gp_regression.neg_log_marginal_likelihood.value_and_grad, _gp_torch_cuda,
                   cases.jax.value_and_grad(cases._gp_jax) if cases.HAVE_JAX else None)
    return Case("GPU: GP negative log likelihood, value and gradient", [2048, 4096, 8192], [2048], cases.gp_data,
                impls, memory=False, notes=["pullback's CPU program is measured up to n = 4096."],
                skip=lambda impl, n: impl == "pullback CPU" and n > 4096)


def gpu_sgp_case() -> Case:
    impls = _impls(cases.sparse_gp.bound.value_and_grad, lambda *a: cases._sgp_torch(*a),
                   cases.jax.value_and_grad(cases._sgp_jax, (0, 1, 2, 3)) if cases.HAVE_JAX else None)
    impls.pop("PyTorch CUDA", None)  # the CPU PyTorch sparse-GP code builds CPU tensors
    return Case("GPU: variational sparse GP bound, value and gradient; n = 9568, d = 4", [(9568, 800)],
                [(9568, 800)], cases.sgp_data, impls, memory=False)
