"""autograd.builtins: pullback traces plain Python containers, so these are Python's own."""

import builtins as _builtins

dict, isinstance, list, tuple, type = (_builtins.dict, _builtins.isinstance, _builtins.list, _builtins.tuple,
                                       _builtins.type)
