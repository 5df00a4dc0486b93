"""pullback's benchmarks: ``python -m benchmarks [--quick]`` writes benchmarks/RESULTS.md."""
