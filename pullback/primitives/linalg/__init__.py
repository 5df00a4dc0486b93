"""Dense linear algebra primitives, named as in LAPACK/BLAS: the factorisations, matrix
functions, solves at the factors, rank updates and banded matrices."""
