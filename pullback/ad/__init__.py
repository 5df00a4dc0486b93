"""Floor 2, the interpreters: jvp, partial evaluation, transposition, batching, dead code, common
subexpressions, substitution, each with the rule table the primitive families fill."""
