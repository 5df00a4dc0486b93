"""pullback: source-to-source automatic differentiation for numerical Python."""

from pullback import numpy_api as _numpy_api  # noqa: F401  (teaches tracers NumPy)
from pullback.api import jit, make_ir, source
from pullback.errors import ConcretizationError, LinAlgError, PullbackError, TracingError
from pullback.ir.core import Program
from pullback.ir.verify import VerificationError, verify

__all__ = [
    "ConcretizationError", "LinAlgError", "Program", "PullbackError", "TracingError", "VerificationError",
    "jit", "make_ir", "source", "verify",
]
__version__ = "0.1.0"
