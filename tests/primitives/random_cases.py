"""Cases for ``pullback.primitives.random`` (``draw``), collected by the forward and JVP suites.

A case's generator is seeded afresh each time the case's function starts (``_rng``), so NumPy's run
of it and pullback's (whose draws happen when the compiled program runs, after the reseeding that
tracing did, unconverted) draw the same numbers; finite differences reseed for each evaluation. The tangents do
not depend on what is drawn (a draw is added, never multiplied: it has no derivative), so a program compiled
once and run again, its generator not reseeded, agrees too.
"""

from __future__ import annotations

import numpy as np

from tests.primitives.cases import Case

_RS = np.random.RandomState(0)
_GEN = np.random.default_rng(0)
_P = np.array([0.2, 0.5, 0.3])


# Reseeding inside a traced function is refused (the compiled program could not repeat it), so the
# helper that reseeds is made without source, which pullback runs as it is: it reseeds when tracing.
_helper: dict = {"np": np}
exec(compile("""
def _rng(generator):
    if isinstance(generator, np.random.RandomState):
        generator.seed(0)
    else:
        generator.bit_generator.state = np.random.default_rng(0).bit_generator.state
    return generator
""", "<reseeding helper>", "exec"), _helper)
_rng = _helper["_rng"]


CASES = [
    Case("draw-legacy", lambda x: (x + _rng(_RS).standard_normal(x.shape), _RS.randint(0, 5, size=2),
                                   _RS.choice(3, size=4, p=_P)), ((3,),)),
    Case("draw-generator", lambda x: (x + _rng(_GEN).random((2, 3)), _GEN.integers(10), _GEN.normal(1.0, 2.0, 3)),
         ((2, 3),)),
    Case("draw-float32", lambda x: x + _rng(_GEN).standard_normal(2, dtype=np.float32), ((2,),), "float32"),
]

JVP_CASES = [
    Case("draw", lambda x: 2 * x + _rng(_RS).standard_normal(x.shape), ((3,),)),
    Case("draw-reparameterised", lambda mu: _rng(_GEN).normal(mu, 2.0) * 3, ((4,),)),
]
