"""Transformations, one file per op (take, map, shuffle, interleave, batch, ...)."""
