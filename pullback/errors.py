"""Error types. Messages name the user's ``file:line`` where one is known."""

from __future__ import annotations

import numpy as np


class PullbackError(Exception):
    """Base class of pullback's errors."""


class TracingError(PullbackError, TypeError):
    """A function cannot be traced: control flow on a traced value, an
    unsupported NumPy function, a shape mismatch, ... A TypeError, as JAX's and
    autograd's tracing errors are, so code catching those catches it."""


class ConcretizationError(TracingError):
    """A traced value was asked for a concrete Python or NumPy value
    (``bool(x)``, ``float(x)``, ``np.asarray(x)``)."""


class LinAlgError(PullbackError, np.linalg.LinAlgError):
    """A factorisation or solve failed (LAPACK ``info`` > 0, a zero pivot). Generated code,
    which depends on NumPy alone, raises ``np.linalg.LinAlgError``; pullback re-raises it
    as this subclass, so either can be caught."""
