"""SciPy's names on traced arrays: ``scipy.linalg``, ``scipy.special``, ``scipy.stats``,
``scipy.signal``, ``scipy.spatial`` and ``scipy.integrate``."""
