"""The CuPy backend: every program the NumPy backend prints, printed for the GPU."""
