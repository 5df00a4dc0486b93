"""autograd.builtins: pullback traces plain Python containers, so the container types are
Python's own; ``isinstance`` is box-aware as autograd's is: a traced array is an ndarray."""

import builtins as _builtins

import numpy as _np

from pullback.ir.tracer import Tracer as _Tracer

dict, list, tuple, type = _builtins.dict, _builtins.list, _builtins.tuple, _builtins.type


def isinstance(obj, classinfo) -> bool:
    if _builtins.isinstance(obj, _Tracer):
        classes = classinfo if _builtins.isinstance(classinfo, _builtins.tuple) else (classinfo,)
        return any(c is _np.ndarray or c is _Tracer for c in classes)
    return _builtins.isinstance(obj, classinfo)
