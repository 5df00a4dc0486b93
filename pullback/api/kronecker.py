"""Hessians as sums of Kronecker products: what ``pb.hessian(f, compressed=True)`` returns.

The Hessian of a scalar function of an array ``x`` of shape ``(n_1, ..., n_r)`` is a
``(N, N)`` matrix, ``N = n_1 ... n_r``, in C order: entry ``[i, j]`` is
``d^2 f / d x.flat[i] d x.flat[j]``, i.e. ``hessian(f)(x).reshape(N, N)``. Where the Hessian
program's result is a product of broadcasts, it is a Kronecker product over groups of axes::

    H = c  (F_1 (x) F_2 (x) ...)     F_g over the axes of group g: an identity, a diagonal or a dense matrix

(the matrix-factorisation Hessian ``2 I_n (x) V^T V``: groups ``(0,)`` and ``(1,)``). A sum of
such terms that differ in one group only is one term (``I (x) A + I (x) B = I (x) (A + B)``).
``KroneckerOperator`` applies, solves and densifies with the factors; where no structure is
found it holds the whole Hessian as one dense factor over all axes (``structured`` is False
then), and every method still works, at dense cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal as Kind

import numpy as np
from scipy.sparse.linalg import LinearOperator

from pullback.errors import LinAlgError


@dataclass(frozen=True)
class KronFactor:
    """One group's factor: over ``axes`` (of the input, of sizes ``sizes``), an ``"identity"``,
    a ``"diagonal"`` (``value`` has shape ``sizes``), a ``"dense"`` matrix (``value`` has shape
    ``sizes + sizes``) or ``"blocks"``: block-diagonal over ``axes[0]`` with dense blocks over the
    other axes (``value`` has shape ``sizes + sizes[1:]``, block i is ``value[i]``; the masked
    matrix-factorisation Hessian ``H[i, a, i, b] = B[i, a, b]``)."""

    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    kind: Kind["identity", "diagonal", "dense", "blocks"]
    value: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64))


@dataclass(frozen=True)
class KronTerm:
    coef: float
    factors: tuple[KronFactor, ...]


@dataclass(frozen=True)
class Structure:
    """What a compressed Hessian program's outputs are: the input's shape and dtype, and per term
    its coefficient and factors (``pullback.opt.outer.FactorSpec``, each naming the output
    that holds its value)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    terms: list


def operator(structure: Structure, values) -> KroneckerOperator:
    """The operator of a compressed Hessian from its factors' values (the factor program's outputs)."""
    values = tuple(values)
    terms = []
    for coef, specs in structure.terms:
        factors = []
        for f in specs:
            value = None if f.output is None else values[f.output]
            if f.kind == "scalar":
                coef = coef * value[()]
            elif f.kind == "ones":
                factors.append(KronFactor(f.axes, f.sizes, "dense", np.ones(f.sizes * 2, structure.dtype)))
            else:
                factors.append(KronFactor(f.axes, f.sizes, f.kind, value))
        if not factors:  # a scalar times a matrix of ones over no axes (a 0-d input)
            factors.append(KronFactor((), (), "dense", np.ones((), structure.dtype)))
        terms.append(KronTerm(coef, tuple(factors)))
    return KroneckerOperator(structure.shape, structure.dtype, terms)


class InputShaped(LinearOperator):
    """A compressed Hessian: ``H @ v`` takes ``v`` flat or of the input's shape (the result then has it)."""

    input_shape: tuple[int, ...]

    def __matmul__(self, other):
        other = np.asarray(other)
        if other.shape == self.input_shape and other.ndim != 1:
            return self._matvec(other)
        return super().__matmul__(other)


class KroneckerOperator(InputShaped):
    """``sum_t coef_t * kron(factors_t)`` on vectors of length N (inputs flattened in C order).

    ``H @ v`` and ``H.matvec(v)`` use the factors (``v`` may also have the input's shape: the
    result then has it too); ``H.todense()`` is the ``(N, N)`` array ``hessian(f)(x).reshape(N, N)``;
    ``H.solve(g)`` solves ``H s = g`` factor by factor when there is one term (an LU solve per
    dense factor, a batched one per block-diagonal factor): ``O(sum k_g^3 + N sum k_g)`` instead of
    ``O(N^3)``.
    """

    def __init__(self, shape: tuple[int, ...], dtype, terms: list[KronTerm]):
        self.input_shape = tuple(shape)
        n = int(np.prod(shape, dtype=np.int64))
        super().__init__(np.dtype(dtype), (n, n))
        self.terms = _merged(terms)

    @property
    def structured(self) -> bool:
        """One Kronecker term with more than one group, or with a factor that is not dense."""
        return len(self.terms) == 1 and (len(self.terms[0].factors) > 1 or self.terms[0].factors[0].kind != "dense")

    def __repr__(self) -> str:
        terms = " + ".join(f"{t.coef:g} * " + " (x) ".join(
            f"{f.kind}{list(f.axes)}" for f in t.factors) for t in self.terms)
        return f"<KroneckerOperator {self.shape[0]}x{self.shape[1]}: {terms}>"

    # --- LinearOperator ------------------------------------------------------------------

    def _matvec(self, v):
        x = np.asarray(v).reshape(self.input_shape)
        out = sum(t.coef * _apply(t.factors, x) for t in self.terms)
        return np.asarray(out).reshape(np.shape(v))

    def _matmat(self, V):
        V = np.asarray(V)
        x = V.reshape(*self.input_shape, V.shape[1])  # the columns ride along as a last axis
        return sum(t.coef * _apply(t.factors, x) for t in self.terms).reshape(V.shape)

    def _adjoint(self):
        return self  # a Hessian is symmetric

    # --- dense and solve -------------------------------------------------------------------

    def todense(self) -> np.ndarray:
        """The ``(N, N)`` matrix (``hessian(f)(x).reshape(N, N)``)."""
        r = len(self.input_shape)
        full = self.input_shape * 2
        total = np.zeros(full, self.dtype)
        for t in self.terms:
            product = np.full(full, t.coef, self.dtype)
            for f in t.factors:
                dims = (*f.axes, *(a + r for a in f.axes))
                product = product * _expand(_as_tensor(f, self.dtype), dims, full)
            total += product
        return total.reshape(self.shape)

    def solve(self, g) -> np.ndarray:
        """``H^{-1} g`` (``g`` of length N or of the input's shape; the result has ``g``'s shape).
        Raises ``pullback.LinAlgError`` when a factor is singular."""
        g = np.asarray(g)
        if len(self.terms) != 1:
            try:
                return np.linalg.solve(self.todense(), g.reshape(-1)).reshape(g.shape)
            except np.linalg.LinAlgError as e:
                raise LinAlgError(f"the Hessian is singular ({e})") from None
        x = g.reshape(self.input_shape)
        for f in self.terms[0].factors:
            x = _on_axes(x, f.axes, _solver(f))
        return (x / self.terms[0].coef).reshape(g.shape)


# --- helpers -------------------------------------------------------------------------------


def _as_tensor(f: KronFactor, dtype) -> np.ndarray:
    if f.kind == "blocks":  # zeros and one write of the blocks on the diagonal of the first axis
        n, g = f.sizes[0], f.size // f.sizes[0]
        dense = np.zeros((n, g, n, g), dtype)
        dense[np.arange(n), :, np.arange(n), :] = f.value.reshape(n, g, g)
        return dense.reshape(f.sizes * 2)
    if f.kind == "identity":
        return np.eye(f.size, dtype=dtype).reshape(f.sizes * 2)
    if f.kind == "diagonal":
        return np.diag(f.value.reshape(-1)).reshape(f.sizes * 2)
    return f.value


def _expand(a: np.ndarray, dims: tuple[int, ...], full: tuple[int, ...]) -> np.ndarray:
    order = sorted(range(len(dims)), key=dims.__getitem__)  # a's axes as they lie in the result
    a, dims = a.transpose(order), tuple(dims[i] for i in order)
    shape = [1] * len(full)
    for d, n in zip(dims, a.shape):
        shape[d] = n
    return a.reshape(shape)


def _on_axes(x: np.ndarray, axes: tuple[int, ...], fn) -> np.ndarray:
    """``fn`` applied to ``x`` as a matrix whose rows are the entries of ``axes`` (columns: the rest)."""
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, (*axes, *rest))
    m = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    y = fn(moved.reshape(m, -1)).reshape(moved.shape)
    return np.transpose(y, np.argsort((*axes, *rest)))


def _apply(factors: tuple[KronFactor, ...], x: np.ndarray) -> np.ndarray:
    for f in factors:
        if f.kind == "diagonal":
            x = _on_axes(x, f.axes, f.value.reshape(-1, 1).__mul__)
        elif f.kind == "dense":
            x = _on_axes(x, f.axes, f.value.reshape(f.size, f.size).__matmul__)
        elif f.kind == "blocks":
            x = _on_axes(x, f.axes, _per_block(f, np.matmul))
    return x


def _per_block(f: KronFactor, fn):
    """``fn(blocks, m)`` on the rows of ``m`` grouped by block (``m`` has ``f.size`` rows)."""
    n, g = f.sizes[0], f.size // f.sizes[0]
    blocks = f.value.reshape(n, g, g)
    return lambda m: fn(blocks, m.reshape(n, g, -1)).reshape(m.shape)


def _solver(f: KronFactor):
    """A function solving with ``f``'s matrix. A dense factor is solved by LU (``np.linalg.solve``)
    on each call: O(k^3 + k^2 m) for m right-hand sides, where the k^3 is small next to the rest
    (SciPy's ``cho_solve`` with many right-hand sides was 500x slower than this on the test machine)."""
    if f.kind == "identity":
        return lambda m: m
    if f.kind == "diagonal":
        v = f.value.reshape(-1, 1)
        if not np.all(v):
            raise LinAlgError(f"the Hessian is singular: its diagonal factor over axes {list(f.axes)} has a zero")
        return lambda m: m / v
    if f.kind == "blocks":
        def solve_blocks(blocks, m):
            try:
                return np.linalg.solve(blocks, m)
            except np.linalg.LinAlgError:
                raise LinAlgError(f"the Hessian is singular: a block of its factor over axes {list(f.axes)} "
                                  "is") from None

        return _per_block(f, solve_blocks)
    a = f.value.reshape(f.size, f.size)

    def solve(m):
        try:
            return np.linalg.solve(a, m)
        except np.linalg.LinAlgError:
            raise LinAlgError(f"the Hessian is singular: its factor over axes {list(f.axes)} is") from None

    return solve


def _merged(terms: list[KronTerm]) -> list[KronTerm]:
    """Terms that agree on every group but one are one term: ``c1 (A (x) B) + c2 (A (x) C)`` is
    ``A (x) (c1 B + c2 C)`` (the coefficients move into the differing factor)."""
    terms = list(terms)
    merged = True
    while merged and len(terms) > 1:
        merged = False
        for i in range(len(terms)):
            for j in range(i + 1, len(terms)):
                joined = _join(terms[i], terms[j])
                if joined is not None:
                    terms[i] = joined
                    del terms[j]
                    merged = True
                    break
            if merged:
                break
    return terms


def _same(f: KronFactor, g: KronFactor) -> bool:
    return f.axes == g.axes and f.kind == g.kind and (f.kind == "identity" or f.value is g.value)


def _join(s: KronTerm, t: KronTerm) -> KronTerm | None:
    if [f.axes for f in s.factors] != [f.axes for f in t.factors]:
        return None
    differ = [i for i, (f, g) in enumerate(zip(s.factors, t.factors)) if not _same(f, g)]
    if not differ:
        return KronTerm(s.coef + t.coef, s.factors)
    if len(differ) > 1:
        return None
    i = differ[0]
    f, g = s.factors[i], t.factors[i]
    if f.kind in ("identity", "diagonal") and g.kind in ("identity", "diagonal"):
        new = KronFactor(f.axes, f.sizes, "diagonal", s.coef * _diagonal(f) + t.coef * _diagonal(g))
    else:
        dtype = np.result_type(*(h.value for h in (f, g) if h.value is not None))
        new = KronFactor(f.axes, f.sizes, "dense", s.coef * _as_tensor(f, dtype) + t.coef * _as_tensor(g, dtype))
    return KronTerm(1.0, (*s.factors[:i], new, *s.factors[i + 1:]))


def _diagonal(f: KronFactor) -> np.ndarray:
    return f.value if f.kind == "diagonal" else np.ones(f.sizes)
