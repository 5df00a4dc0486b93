"""Program -> Program transformations: jvp, partial_eval, transpose (and their
composition in ``ad``), dce, cse, simplify."""
