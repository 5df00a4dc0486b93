"""Array types: a concrete shape and one of eight dtypes, printed like ``f64[3,4]``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

DTYPES: dict[np.dtype, str] = {
    np.dtype(np.bool_): "bool",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.float16): "f16",
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.complex64): "c64",
    np.dtype(np.complex128): "c128",
}


def canonical_dtype(dtype) -> np.dtype:
    """The supported dtype for ``dtype``, or a TypeError naming the supported ones."""
    dt = np.dtype(dtype)
    if dt not in DTYPES:
        supported = ", ".join(d.name for d in DTYPES)
        raise TypeError(f"dtype {dt.name} is not supported by pullback (supported: {supported})")
    return dt


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def is_complex(dtype: np.dtype) -> bool:
    return dtype.kind == "c"


def is_inexact(dtype: np.dtype) -> bool:
    return dtype.kind in "fc"


def real_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for complex64, float64 for complex128, the dtype itself otherwise."""
    return np.finfo(dtype).dtype if dtype.kind == "c" else dtype


def complex_dtype(dtype: np.dtype) -> np.dtype:
    return np.result_type(dtype, np.complex64)


_CANONICAL = {id(dt): dt for dt in DTYPES}  # the supported dtypes by identity: no dtype hash on the fast path


@dataclass(frozen=True, slots=True)
class ArrayType:
    """Hashed once, when made: types are keys of the tables every pass and printer consults."""

    shape: tuple[int, ...]
    dtype: np.dtype
    _hash: int = field(init=False, repr=False, compare=False)
    ndim: int = field(init=False, repr=False, compare=False)  # (a slot, not a property: read at every operation traced)

    def __post_init__(self):
        shape = self.shape
        if type(shape) is not tuple or not all(type(d) is int and d >= 0 for d in shape):
            shape = tuple(int(d) for d in shape)
            if any(d < 0 for d in shape):
                raise ValueError(f"negative dimension in shape {shape}")
            object.__setattr__(self, "shape", shape)
        dtype = _CANONICAL.get(id(self.dtype)) or canonical_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "_hash", hash((shape, dtype.num)))
        object.__setattr__(self, "ndim", len(shape))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (type(other) is ArrayType and self._hash == other._hash
                                 and self.shape == other.shape and self.dtype == other.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # Python ints: exact, and no NumPy call per query

    def __str__(self) -> str:
        return f"{DTYPES[self.dtype]}[{','.join(map(str, self.shape))}]"

    __repr__ = __str__

    @staticmethod
    def of(value) -> ArrayType:
        """The type of a concrete NumPy array or scalar."""
        arr = np.asarray(value)
        return ArrayType(arr.shape, arr.dtype)

    @staticmethod
    def parse(text: str) -> ArrayType:
        """The type printed as ``text``: ``f64[100,3]``, ``c128[]``."""
        m = _PRINTED.match(text.strip())
        if m is None or m.group(1) not in _BY_NAME:
            raise ValueError(f"a type is a dtype and a shape, as f64[100,3] or i64[] (dtypes: {', '.join(_BY_NAME)}); "
                             f"got {text!r}")
        return ArrayType(tuple(int(n) for n in m.group(2).split(",") if n.strip()), _BY_NAME[m.group(1)])


@dataclass(frozen=True, slots=True)
class StackType:
    """A stack of values of type ``elem``, one per step of a loop whose number of steps is known only
    when the program runs: the residuals a ``while`` loop records for its backward loop. Printed code
    keeps it as a Python list (``res.append(r)`` forward, ``res[t]`` backward); its type says what each
    entry is, never how many there are, so that every other type in the IR stays concrete.
    ``ndim`` and ``dtype`` are its entries' with the step axis in front, as for a stacked array."""

    elem: ArrayType | StackType

    @property
    def ndim(self) -> int:
        return self.elem.ndim + 1

    @property
    def dtype(self) -> np.dtype:
        return self.elem.dtype

    def __str__(self) -> str:
        return f"list[{self.elem}]"

    __repr__ = __str__


_PRINTED = re.compile(r"^(\w+)\[([\d,\s]*)\]$")
_BY_NAME = {name: dt for dt, name in DTYPES.items()}


class ShapeDtypeStruct:
    """An argument standing for an array of this shape and dtype, as JAX's: the reading methods
    (``source``, ``ir``, ``constants``, ``pb.export``) trace from it alone, so that the program for
    a 100000 x 100000 matrix is read without making one. It has no values: compiled programs refuse it.

    >>> A = pb.ShapeDtypeStruct((100_000, 100_000), np.float64)  # 80 GB that are never allocated
    >>> print(pb.make_ir(lambda A: np.sum(A ** 2))(A))
    program f(A: f64[100000,100000]):
      t: f64[100000,100000] = integer_pow[y=2] A
      t_1: f64[] = reduce_sum[axes=(0, 1)] t
      return t_1
    """

    __slots__ = ("type",)

    def __init__(self, shape, dtype):
        self.type = ArrayType(tuple(shape), dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"
