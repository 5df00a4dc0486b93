"""Gradients of LU, eigh, svd and cholesky against torch.linalg + torch.autograd.grad
(the `compare` extra; skipped when PyTorch is not installed). Losses are invariant to
eigen/singular-vector phases, so the two libraries' conventions need not agree there."""

import numpy as np
import pytest

import pullback as pb
from pullback import linalg as pla

torch = pytest.importorskip("torch")

rng = np.random.default_rng(3)


def rand(shape, dtype):
    x = rng.standard_normal(shape)
    return (x + 1j * rng.standard_normal(shape)).astype(dtype) if np.dtype(dtype).kind == "c" else x


def torch_grad(f, A):
    t = torch.tensor(A, requires_grad=True)
    (g,) = torch.autograd.grad(f(t), t)
    return g.numpy()


def sym_np(x):
    return (x + np.conj(x.T)) / 2


def sym_t(x):
    return (x + x.conj().T) / 2


DTYPES = [np.float64, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 3)])
def test_lu(shape, dtype):
    A = rand(shape, dtype)
    k = min(shape)
    W1, W2 = rand((shape[0], k), dtype), rand((k, shape[1]), dtype)

    def ours(A):
        _, l, u = pla.lu(A)
        return np.real(np.sum(l * W1) + np.sum(u * W2))

    def theirs(A):
        _, l, u = torch.linalg.lu(A)
        return torch.real(torch.sum(l * torch.tensor(W1)) + torch.sum(u * torch.tensor(W2)))

    np.testing.assert_allclose(pb.grad(ours)(A), torch_grad(theirs, A), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky(dtype):
    X = rand((4, 4), dtype)
    A = X @ np.conj(X.T) + 4 * np.eye(4)
    W = rand((4, 4), dtype)
    ours = lambda A: np.real(np.sum(pla.cholesky(sym_np(A)) * W))  # noqa: E731
    theirs = lambda A: torch.real(torch.sum(torch.linalg.cholesky(sym_t(A)) * torch.tensor(W)))  # noqa: E731
    np.testing.assert_allclose(pb.grad(ours)(A), torch_grad(theirs, A), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh(dtype):
    A = rand((4, 4), dtype)
    c, W = rng.standard_normal(4), rng.standard_normal((4, 4))

    def ours(A):
        w, v = pla.eigh(sym_np(A))
        return np.sum(w * c) + np.sum(np.abs(v) ** 2 * W)

    def theirs(A):
        w, v = torch.linalg.eigh(sym_t(A))
        return torch.sum(w * torch.tensor(c)) + torch.sum(torch.abs(v) ** 2 * torch.tensor(W))

    np.testing.assert_allclose(pb.grad(ours)(A), torch_grad(theirs, A), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5), (4, 4), (5, 3)])
def test_svd(shape, dtype):
    A = rand(shape, dtype)
    k = min(shape)
    c, W1, W2 = rng.standard_normal(k), rng.standard_normal((shape[0], k)), rng.standard_normal((k, shape[1]))

    def ours(A):
        u, s, vh = pla.svd(A)
        return np.sum(s * c) + np.sum(np.abs(u) ** 2 * W1) + np.sum(np.abs(vh) ** 2 * W2)

    def theirs(A):
        u, s, vh = torch.linalg.svd(A, full_matrices=False)
        return (torch.sum(s * torch.tensor(c)) + torch.sum(torch.abs(u) ** 2 * torch.tensor(W1))
                + torch.sum(torch.abs(vh) ** 2 * torch.tensor(W2)))

    np.testing.assert_allclose(pb.grad(ours)(A), torch_grad(theirs, A), rtol=1e-8, atol=1e-10)
