"""Floor 5, staging: trace, transform, print, compile and call; the caches; differentiate, jit, vmap
and the function forms; export and the testing harness."""
