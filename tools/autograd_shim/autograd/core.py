"""autograd.core: internals, not applicable to pullback (see _internal.py)."""

from autograd._internal import module_getattr

__getattr__ = module_getattr(__name__)
