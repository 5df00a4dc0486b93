"""The Dask backend: every program the NumPy backend prints, printed for ``dask.array`` and run by
``dask.distributed``: functional code, one compute per call, chunks in the signature."""
