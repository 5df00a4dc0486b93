"""The benchmark cases, each with pullback, the hand-written reference and the peers
that are installed (JAX with jit and float64, PyTorch eager on 2 threads, HIPS autograd)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pullback as pb
from benchmarks import handwritten as hw
from benchmarks.harness import Case, available
from pullback import linalg as pla

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))

import gp_regression  # noqa: E402
import sparse_gp  # noqa: E402

HAVE_JAX, HAVE_TORCH, HAVE_AUTOGRAD = available("jax"), available("torch"), available("autograd")
if HAVE_JAX:
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    jax.config.update("jax_enable_x64", True)
if HAVE_TORCH:
    import torch

    torch.set_num_threads(2)
if HAVE_AUTOGRAD:
    import autograd
    import autograd.numpy as anp
    import autograd.scipy.linalg as asl


# --- 1. scalar overhead -----------------------------------------------------------------------


def scalar_f(x, y):
    return x * np.log(y) + np.log(x * y) * y


def scalar_case() -> Case:
    impls = {"plain f (no gradient)": scalar_f, "hand-written gradient": hw.scalar_grad,
             "pullback grad": pb.grad(scalar_f, (0, 1))}
    if HAVE_JAX:
        g = jax.jit(jax.grad(lambda x, y: x * jnp.log(y) + jnp.log(x * y) * y, (0, 1)))
        impls["JAX jit grad"] = lambda x, y: jax.block_until_ready(g(x, y))
    if HAVE_TORCH:
        def torch_grad(x, y):
            tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
            ty = torch.tensor(y, dtype=torch.float64, requires_grad=True)
            out = tx * torch.log(ty) + torch.log(tx * ty) * ty
            return torch.autograd.grad(out, (tx, ty))
        impls["PyTorch eager"] = torch_grad
    if HAVE_AUTOGRAD:
        impls["autograd"] = autograd.grad(lambda x, y: x * anp.log(y) + anp.log(x * y) * y, (0, 1))
    return Case("scalar gradient, per call", [None], [None], lambda _: (1.5, 2.5), impls, unit="us", repeats=7)


# --- 2. GP negative log likelihood ------------------------------------------------------------


def gp_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = np.sin(X @ np.ones(3)) + 0.1 * rng.standard_normal(n)
    return np.array([0.3, 0.1, -2.0]), X, y


def _gp_jax(theta, X, y):
    ell, sf2, sn2 = jnp.exp(theta[0]), jnp.exp(theta[1]), jnp.exp(theta[2])
    Xs = X / ell
    sq = jnp.sum(Xs**2, axis=1)
    K = sf2 * jnp.exp(-0.5 * (sq[:, None] + sq[None, :] - 2 * Xs @ Xs.T)) + sn2 * jnp.eye(X.shape[0])
    L = jnp.linalg.cholesky(K)
    z = jsl.solve_triangular(L, y, lower=True)
    return 0.5 * z @ z + jnp.sum(jnp.log(jnp.diag(L))) + 0.5 * X.shape[0] * jnp.log(2 * jnp.pi)


def _tensors(*arrays):
    """PyTorch tensors of NumPy arrays; tensors (on the GPU, say) pass through."""
    return [a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a)) for a in arrays]


def _leaf(v, like):
    """A float64 leaf that requires grad, on ``like``'s device."""
    return torch.as_tensor(v, dtype=torch.float64, device=like.device).clone().requires_grad_()


def _gp_torch(theta, X, y):
    X, y = _tensors(X, y)
    t = _leaf(theta, X)
    Xs = X / torch.exp(t[0])
    sq = torch.sum(Xs**2, dim=1)
    K = torch.exp(t[1]) * torch.exp(-0.5 * (sq[:, None] + sq[None, :] - 2 * Xs @ Xs.T))
    K = K + torch.exp(t[2]) * torch.eye(X.shape[0], dtype=torch.float64, device=X.device)
    L = torch.linalg.cholesky(K)
    z = torch.linalg.solve_triangular(L, y[:, None], upper=False)[:, 0]
    value = 0.5 * z @ z + torch.sum(torch.log(torch.diagonal(L))) + 0.5 * X.shape[0] * np.log(2 * np.pi)
    (g,) = torch.autograd.grad(value, t)
    return value.item(), g.cpu().numpy()


def _gp_autograd(theta, X, y):
    ell, sf2, sn2 = anp.exp(theta[0]), anp.exp(theta[1]), anp.exp(theta[2])
    Xs = X / ell
    sq = anp.sum(Xs**2, axis=1)
    K = sf2 * anp.exp(-0.5 * (sq[:, None] + sq[None, :] - 2 * anp.dot(Xs, Xs.T))) + sn2 * anp.eye(X.shape[0])
    L = anp.linalg.cholesky(K)
    z = asl.solve_triangular(L, y, lower=True)
    return 0.5 * anp.dot(z, z) + anp.sum(anp.log(anp.diag(L))) + 0.5 * X.shape[0] * anp.log(2 * anp.pi)


def gp_case() -> Case:
    impls = {"hand-written SciPy": hw.gp_value_and_grad,
             "pullback": gp_regression.neg_log_marginal_likelihood.value_and_grad}
    if HAVE_JAX:
        f = jax.jit(jax.value_and_grad(_gp_jax))
        impls["JAX jit"] = lambda *a: jax.block_until_ready(f(*a))
    if HAVE_TORCH:
        impls["PyTorch"] = _gp_torch
    if HAVE_AUTOGRAD:
        impls["autograd"] = autograd.value_and_grad(_gp_autograd)
    return Case("GP negative log likelihood, value and gradient", [256, 1024, 2048], [256, 1024], gp_data, impls,
                notes=["autograd is measured up to n = 1024 (at 2048 one call takes tens of seconds)."],
                skip=lambda impl, n: impl == "autograd" and n > 1024)


# --- 3. sparse GP bound ----------------------------------------------------------------------


def sgp_data(size, seed=0):
    n, u = size
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 4))
    y = np.sin(X.sum(axis=1)) + 0.1 * rng.standard_normal(n)
    Z = X[rng.choice(n, u, replace=False)].copy()
    return Z, 0.0, 0.0, -2.0, X, y


def _sgp_torch(Z, log_ell, log_sf2, log_sn2, X, y):
    X, y = _tensors(X, y)
    params = [_leaf(v, X) for v in (Z, log_ell, log_sf2, log_sn2)]
    Zt, ell, sf2, sn2l = params
    n, u = X.shape[0], Zt.shape[0]

    def rbf(A, B):
        A, B = A / torch.exp(ell), B / torch.exp(ell)
        d2 = torch.sum(A**2, 1)[:, None] + torch.sum(B**2, 1)[None, :] - 2 * A @ B.T
        return torch.exp(sf2) * torch.exp(-0.5 * d2)

    sn2 = torch.exp(sn2l)
    Lu = torch.linalg.cholesky(rbf(Zt, Zt) + sparse_gp.JITTER * torch.eye(u, dtype=torch.float64, device=X.device))
    B = torch.linalg.solve_triangular(Lu, rbf(Zt, X), upper=False)
    La = torch.linalg.cholesky(B @ B.T / sn2 + torch.eye(u, dtype=torch.float64, device=X.device))
    c = torch.linalg.solve_triangular(La, (B @ y)[:, None], upper=False)[:, 0]
    value = (0.5 * n * (np.log(2 * np.pi) + sn2l) + torch.sum(torch.log(torch.diagonal(La))) + y @ y / (2 * sn2)
             - c @ c / (2 * sn2**2) - (torch.sum(B**2) - n * torch.exp(sf2)) / (2 * sn2))
    return value.item(), [g.cpu().numpy() for g in torch.autograd.grad(value, params)]


def _sgp_jax(Z, log_ell, log_sf2, log_sn2, X, y):
    n, u = X.shape[0], Z.shape[0]

    def rbf(A, B):
        A, B = A / jnp.exp(log_ell), B / jnp.exp(log_ell)
        return jnp.exp(log_sf2) * jnp.exp(-0.5 * (jnp.sum(A**2, 1)[:, None] + jnp.sum(B**2, 1)[None, :] - 2 * A @ B.T))

    sn2 = jnp.exp(log_sn2)
    Lu = jnp.linalg.cholesky(rbf(Z, Z) + sparse_gp.JITTER * jnp.eye(u))
    B = jsl.solve_triangular(Lu, rbf(Z, X), lower=True)
    La = jnp.linalg.cholesky(B @ B.T / sn2 + jnp.eye(u))
    c = jsl.solve_triangular(La, B @ y, lower=True)
    return (0.5 * n * (jnp.log(2 * jnp.pi) + log_sn2) + jnp.sum(jnp.log(jnp.diag(La))) + y @ y / (2 * sn2)
            - c @ c / (2 * sn2**2) - (jnp.sum(B**2) - n * jnp.exp(log_sf2)) / (2 * sn2))


def sgp_case() -> Case:
    impls = {"hand-written SciPy": hw.sgp_value_and_grad, "pullback": sparse_gp.bound.value_and_grad}
    if HAVE_JAX:
        f = jax.jit(jax.value_and_grad(_sgp_jax, (0, 1, 2, 3)))
        impls["JAX jit"] = lambda *a: jax.block_until_ready(f(*a))
    if HAVE_TORCH:
        impls["PyTorch"] = _sgp_torch
    return Case("variational sparse GP bound, value and gradient (Z, kernel, noise); n = 9568, d = 4",
                [(9568, 50), (9568, 200), (9568, 800)], [(9568, 50), (9568, 200)], sgp_data, impls)


# --- 4. linear-algebra forward + backward ------------------------------------------------------


def _lin_data(kind):
    def setup(shape):
        rng = np.random.default_rng(0)
        A = rng.standard_normal(shape)
        m, n = shape
        k = min(m, n)
        if kind == "cholesky":
            return A @ A.T / n + np.eye(n), rng.standard_normal(shape)
        if kind == "eigh":
            return (A + A.T) / 2, rng.standard_normal(n), rng.standard_normal(shape)
        if kind == "svd":
            return A, rng.standard_normal(k), rng.standard_normal((m, k)), rng.standard_normal((k, n))
        if kind == "qr":
            return A, rng.standard_normal((m, n)), rng.standard_normal((n, n))
        return A, rng.standard_normal((m, k)), rng.standard_normal((k, n))
    return setup


def _pb_losses():
    def cholesky(A, W):
        return np.sum(pla.cholesky(A) * W)

    def eigh(A, c, W):
        w, v = pla.eigh(A)
        return w @ c + np.sum(v**2 * W)

    def svd(A, c, W1, W2):
        u, s, vh = pla.svd(A)
        return s @ c + np.sum(u**2 * W1) + np.sum(vh**2 * W2)

    def qr(A, W1, W2):
        q, r = pla.qr(A)
        return np.sum(q * W1) + np.sum(r * W2)

    def lu(A, W1, W2):
        _, l, u = pla.lu(A)
        return np.sum(l * W1) + np.sum(u * W2)

    return {"cholesky": cholesky, "eigh": eigh, "svd": svd, "qr": qr, "lu": lu}


def _torch_losses():
    def run(loss, A, *rest):
        t = torch.tensor(A, requires_grad=True)
        rest = [torch.from_numpy(np.asarray(r)) for r in rest]
        value = loss(t, *rest)
        (g,) = torch.autograd.grad(value, t)
        return value.item(), g.numpy()

    return {
        "cholesky": lambda A, W: run(lambda t, W: torch.sum(torch.linalg.cholesky(t) * W), A, W),
        "eigh": lambda A, c, W: run(lambda t, c, W: (lambda w, v: w @ c + torch.sum(v**2 * W))(
            *torch.linalg.eigh(t)), A, c, W),
        "svd": lambda A, c, W1, W2: run(lambda t, c, W1, W2: (lambda u, s, vh: s @ c + torch.sum(u**2 * W1)
                                                              + torch.sum(vh**2 * W2))(
            *torch.linalg.svd(t, full_matrices=False)), A, c, W1, W2),
        "qr": lambda A, W1, W2: run(lambda t, W1, W2: (lambda q, r: torch.sum(q * W1) + torch.sum(r * W2))(
            *torch.linalg.qr(t)), A, W1, W2),
        "lu": lambda A, W1, W2: run(lambda t, W1, W2: (lambda p, l, u: torch.sum(l * W1) + torch.sum(u * W2))(
            *torch.linalg.lu(t)), A, W1, W2),
    }


def _jax_losses():
    def wrap(loss):
        f = jax.jit(jax.value_and_grad(loss))
        return lambda *a: jax.block_until_ready(f(*a))

    return {
        "cholesky": wrap(lambda A, W: jnp.sum(jnp.linalg.cholesky(A) * W)),
        "eigh": wrap(lambda A, c, W: (lambda w, v: w @ c + jnp.sum(v**2 * W))(*jnp.linalg.eigh(A))),
        "svd": wrap(lambda A, c, W1, W2: (lambda u, s, vh: s @ c + jnp.sum(u**2 * W1) + jnp.sum(vh**2 * W2))(
            *jnp.linalg.svd(A, full_matrices=False))),
        "qr": wrap(lambda A, W1, W2: (lambda q, r: jnp.sum(q * W1) + jnp.sum(r * W2))(*jnp.linalg.qr(A))),
        "lu": wrap(lambda A, W1, W2: (lambda p, l, u: jnp.sum(l * W1) + jnp.sum(u * W2))(*jsl.lu(A))),
    }


HAND = {"cholesky": hw.cholesky_value_and_grad, "eigh": hw.eigh_value_and_grad, "svd": hw.svd_value_and_grad,
        "qr": hw.qr_value_and_grad, "lu": hw.lu_value_and_grad}


def linalg_case(kind: str) -> Case:
    impls = {"hand-written SciPy": HAND[kind], "pullback": pb.value_and_grad(_pb_losses()[kind])}
    if HAVE_JAX:
        impls["JAX jit"] = _jax_losses()[kind]
    if HAVE_TORCH:
        impls["PyTorch"] = _torch_losses()[kind]
    sizes = [(512, 512), (256, 512), (512, 256)] if kind == "lu" else [(512, 512)]
    return Case(f"{kind} forward + backward", sizes, sizes[:1], _lin_data(kind), impls, repeats=5)


def all_cases() -> dict[str, Case]:
    cases = [scalar_case(), gp_case(), sgp_case(), *(linalg_case(k) for k in ("cholesky", "eigh", "svd", "qr", "lu"))]
    from benchmarks import gpu

    if gpu.gpu_available():
        cases += [gpu.gpu_gp_case(), gpu.gpu_sgp_case()]
    return {c.name: c for c in cases}
