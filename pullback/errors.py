"""Error types. Messages name the user's ``file:line`` where one is known."""

from __future__ import annotations


class PullbackError(Exception):
    """Base class of pullback's errors."""


class TracingError(PullbackError):
    """A function cannot be traced: control flow on a traced value, an
    unsupported NumPy function, a shape mismatch, ..."""


class ConcretizationError(TracingError, TypeError):
    """A traced value was asked for a concrete Python or NumPy value
    (``bool(x)``, ``float(x)``, ``np.asarray(x)``)."""


class LinAlgError(PullbackError, ArithmeticError):
    """A factorisation failed (LAPACK ``info`` != 0)."""
