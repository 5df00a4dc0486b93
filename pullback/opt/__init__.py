"""Floor 4, the optimiser: algebraic and structure-aware simplification, canonical forms of
factorisations, rerolling, contraction order, scheduling."""
