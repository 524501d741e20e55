"""Parallel execution: element executors on threads, prefetch, the interleave reader pool, and worker processes."""
