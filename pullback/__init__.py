"""pullback: source-to-source automatic differentiation for numerical Python."""

from pullback import tree
from pullback.api.export import export
from pullback.api.transforms import (
    differentiate,
    grad,
    hessian,
    jacfwd,
    jacobian,
    jacrev,
    jit,
    jvp,
    linearize,
    make_ir,
    source,
    value_and_grad,
    vjp,
    vmap,
)
from pullback.errors import ConcretizationError, LinAlgError, PullbackError, TracingError
from pullback.frontend import integrate, linalg
from pullback.frontend import numpy as _numpy_api  # noqa: F401  (teaches tracers NumPy)
from pullback.frontend.custom import custom_jvp, custom_vjp, stop_gradient
from pullback.frontend.loops import checkpoint, cond, fori_loop, scan, switch, while_loop
from pullback.ir.core import Program
from pullback.ir.types import ShapeDtypeStruct
from pullback.ir.verify import VerificationError, verify

__all__ = [
    "ConcretizationError", "LinAlgError", "Program", "PullbackError", "ShapeDtypeStruct", "TracingError",
    "VerificationError",
    "checkpoint", "cond", "custom_jvp", "custom_vjp", "differentiate", "export", "fori_loop", "grad", "hessian",
    "integrate", "jacfwd", "jacobian", "jacrev", "jit", "jvp", "linalg", "linearize", "make_ir", "scan", "source",
    "stop_gradient", "switch", "value_and_grad", "verify", "vjp", "vmap", "while_loop",
]
try:  # the installed distribution's version, so the two cannot disagree
    from importlib.metadata import PackageNotFoundError as _NotFound
    from importlib.metadata import version as _version

    __version__ = _version("pullback")
except _NotFound:  # run from a source tree that is not installed
    __version__ = "0.1.0"
