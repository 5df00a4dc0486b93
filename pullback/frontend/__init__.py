"""Floor 6, what users call: NumPy's and SciPy's names on tracers, ``pullback.linalg``, loops,
custom rules, and the conversion of the user's code that routes their calls here."""
