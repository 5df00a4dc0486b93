"""autograd.builtins: pullback traces plain Python containers, so the container types are
Python's own. autograd's box-aware ``isinstance`` is an internal (tracers are not ndarrays)."""

import builtins as _builtins

from autograd._internal import Internal

dict, list, tuple, type = _builtins.dict, _builtins.list, _builtins.tuple, _builtins.type
isinstance = Internal("autograd.builtins.isinstance")
