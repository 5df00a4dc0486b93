"""Hessians that are a diagonal plus a low-rank matrix: what ``pb.hessian(f, compressed=True)`` returns
for them (softmax's ``diag(p) - p p^T``, a ridge-regularised logistic regression with fewer examples than
features, ``lam I + X^T diag(s) X``).

``H = diag(d) + U V^T`` with U, V of n x k, k < n. The product costs O(n k), the dense matrix one gemm
and a diagonal update (one pass over the result), and a solve Woodbury's identity,
``H^{-1} = D^{-1} - D^{-1} U (I_k + V^T D^{-1} U)^{-1} V^T D^{-1}``: O(n k^2 + k^3), not O(n^3).
"""

from __future__ import annotations

import numpy as np

from pullback.api.kronecker import InputShaped
from pullback.errors import LinAlgError


class DiagonalPlusLowRank(InputShaped):
    """``diag(d) + U @ V.T`` on vectors of the input's shape flattened (``input_shape``)."""

    structured = True

    def __init__(self, input_shape: tuple[int, ...], d: np.ndarray, U: np.ndarray, V: np.ndarray):
        self.input_shape = tuple(input_shape)
        self.d, self.U, self.V = d.reshape(-1), U, V
        n = self.d.shape[0]
        super().__init__(np.result_type(d, U, V), (n, n))

    @property
    def rank(self) -> int:
        return self.U.shape[1]

    def __repr__(self) -> str:
        return f"<DiagonalPlusLowRank {self.shape[0]}x{self.shape[1]}: diag + rank {self.rank}>"

    def _matvec(self, v):
        x = np.asarray(v).reshape(-1)
        return (self.d * x + self.U @ (self.V.T @ x)).reshape(np.shape(v))

    def _matmat(self, X):
        X = np.asarray(X)
        return self.d[:, None] * X + self.U @ (self.V.T @ X)

    def _adjoint(self):
        return DiagonalPlusLowRank(self.input_shape, self.d.conj(), self.V.conj(), self.U.conj())


    def todense(self) -> np.ndarray:
        """The (n, n) matrix: one product written once, then n diagonal entries updated."""
        H = self.U @ self.V.T
        H.flat[:: self.shape[0] + 1] += self.d
        return H

    def solve(self, g) -> np.ndarray:
        """``H^{-1} g`` by Woodbury (``g`` of length n, of the input's shape, or n x m). A diagonal with a
        zero has no Woodbury form: then a dense LU solve. Raises ``pullback.LinAlgError`` when H is singular."""
        g = np.asarray(g)
        b = g.reshape(self.shape[0], -1)
        try:
            if np.all(self.d != 0):
                Du, Db = self.U / self.d[:, None], b / self.d[:, None]
                capacitance = np.eye(self.rank, dtype=self.dtype) + self.V.T @ Du
                x = Db - Du @ np.linalg.solve(capacitance, self.V.T @ Db)
            else:
                x = np.linalg.solve(self.todense(), b)
        except np.linalg.LinAlgError as e:
            raise LinAlgError(f"the Hessian is singular ({e})") from None
        return x.reshape(g.shape)


class Structure:
    """Where the factor program of a compressed Hessian puts d, U and V (``opt.structure.LowRank``)."""

    def __init__(self, shape: tuple[int, ...], spec):
        self.shape, self.spec = tuple(shape), spec

    def operator(self, values) -> DiagonalPlusLowRank:
        values = tuple(values)
        s = self.spec
        return DiagonalPlusLowRank(self.shape, values[s.diagonal], values[s.u], values[s.v])
