"""The NumPy/SciPy backend: how each primitive prints as Python, one module per family."""
