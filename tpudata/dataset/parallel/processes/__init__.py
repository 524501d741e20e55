"""Worker processes for user code that holds the GIL: the pool, its worker, start-up, shared memory, and the process map and interleave."""
