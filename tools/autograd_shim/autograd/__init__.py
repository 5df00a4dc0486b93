"""A stand-in for HIPS autograd backed by pullback, for replaying autograd's own tests
(tools/autograd_replay.py). ``autograd.numpy`` *is* NumPy, ``autograd.scipy.*`` are the SciPy
modules: tests call plain NumPy on pullback's tracers. autograd's internals (core, tracer,
extend, wrap_util, misc, vspaces) are deliberately absent: tests of them are not applicable."""

import sys as _sys

import numpy as _np
import numpy.fft as _np_fft
import numpy.linalg as _np_linalg
import numpy.random as _np_random

_sys.modules[__name__ + ".numpy"] = _np
_sys.modules[__name__ + ".numpy.random"] = _np_random
_sys.modules[__name__ + ".numpy.linalg"] = _np_linalg
_sys.modules[__name__ + ".numpy.fft"] = _np_fft
numpy = _np


# autograd.numpy's few functions of its own, written in NumPy (the replay process only: they are
# set on NumPy's modules, since autograd.numpy *is* NumPy here)
def _make_diagonal(D, offset=0, axis1=0, axis2=1):
    """autograd.numpy.make_diagonal: ``D``'s last axis as the diagonal of new matrices."""
    if not (offset == 0 and axis1 == -1 and axis2 == -2):
        raise NotImplementedError("Currently make_diagonal only supports offset=0, axis1=-1, axis2=-2")
    return _np.asarray(D)[..., None] * _np.eye(_np.shape(D)[-1])


_np.make_diagonal = _make_diagonal
_np_linalg._dot = lambda a, b: _np.einsum("...ij,...jk->...ik", a, b)  # autograd.numpy.linalg._dot
_np_linalg.T = lambda x: _np.swapaxes(x, -1, -2)  # autograd.numpy.linalg.T

from autograd._internal import Internal  # noqa: E402

# autograd's container types and isinstance make boxes behave; pullback traces plain containers.
from autograd.builtins import dict, isinstance, list, tuple, type  # noqa: E402
from autograd.differential_operators import (  # noqa: E402
    checkpoint,
    deriv,
    elementwise_grad,
    grad,
    grad_and_aux,
    grad_named,
    hessian,
    hessian_tensor_product,
    hessian_vector_product,
    holomorphic_grad,
    jacobian,
    make_ggnvp,
    make_hvp,
    make_jvp,
    make_vjp,
    multigrad_dict,
    tensor_jacobian_product,
    value_and_grad,
    vector_jacobian_product,
)

primitive = Internal("autograd.primitive")

__all__ = [
    "checkpoint", "deriv", "dict", "elementwise_grad", "grad", "grad_and_aux", "grad_named", "hessian",
    "hessian_tensor_product", "hessian_vector_product", "holomorphic_grad", "isinstance", "jacobian", "list",
    "make_ggnvp", "make_hvp", "make_jvp", "make_vjp", "multigrad_dict", "numpy", "primitive",
    "tensor_jacobian_product", "tuple", "type", "value_and_grad", "vector_jacobian_product",
]
