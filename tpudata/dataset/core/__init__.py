"""The engine's core: Dataset, iterator and Cursor, blocks and columns, nest, spec, state, options, seeds.

Imports no sibling package (ops, sources, parallel, io); tests/test_layering.py enforces it."""
