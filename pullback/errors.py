"""Error types. Messages name the user's ``file:line`` where one is known."""

from __future__ import annotations

import numpy as np


class PullbackError(Exception):
    """Base class of pullback's errors.

    >>> issubclass(pb.TracingError, pb.PullbackError) and issubclass(pb.LinAlgError, pb.PullbackError)
    True
    """


class TracingError(PullbackError, TypeError):
    """A function cannot be traced: control flow on a traced value, an
    unsupported NumPy function, a shape mismatch, ... A TypeError, as JAX's and
    autograd's tracing errors are, so code catching those catches it.

    >>> try:
    ...     pb.jit(lambda x: np.unique(x))(np.ones(3))
    ... except TypeError as e:
    ...     print(type(e).__name__)
    TracingError
    """


class ConcretizationError(TracingError):
    """A traced value was asked for a concrete Python or NumPy value
    (``bool(x)``, ``float(x)``, ``np.asarray(x)``).

    >>> def relu(x):
    ...     return x if bool(x > 0) else 0.0  # a traced value asked for a Python bool
    >>> try:
    ...     pb.grad(relu)(1.0)
    ... except pb.ConcretizationError as e:
    ...     print("control flow" in str(e))
    True
    """


class LinAlgError(PullbackError, np.linalg.LinAlgError):
    """A factorisation or solve failed (LAPACK ``info`` > 0, a zero pivot). Generated code,
    which depends on NumPy alone, raises ``np.linalg.LinAlgError``; pullback re-raises it
    as this subclass, so either can be caught.

    >>> try:
    ...     pb.jit(np.linalg.cholesky)(-np.eye(2))
    ... except np.linalg.LinAlgError as e:
    ...     print(type(e).__name__, "not positive definite" in str(e))
    LinAlgError True
    """


class ArgumentError(TracingError, ValueError):
    """Arguments for which NumPy raises ValueError (a repeated axis, an unequal split), so
    code that catches NumPy's error catches pullback's."""


class ArgumentIndexError(TracingError, IndexError):
    """Indices NumPy refuses with IndexError (out of bounds, a boolean index of another shape, too
    many indices), so code that catches NumPy's error catches pullback's."""


class ArgumentTypeError(TracingError):
    """Arguments for which NumPy raises TypeError (a cast its ``casting`` rule forbids); every
    TracingError is a TypeError."""


class AxisError(ArgumentError, np.exceptions.AxisError):
    """An axis out of range for an array's rank: NumPy's ``AxisError`` (a ValueError and an IndexError)."""

    __str__ = Exception.__str__  # the located message, not NumPy's (axis, ndim) formatting


class LinAlgArgumentError(ArgumentError, LinAlgError):
    """Arguments for which NumPy raises LinAlgError before computing anything (fewer than two
    axes, a non-square matrix): NumPy's type (a ValueError, which SciPy raises) and a TracingError."""
