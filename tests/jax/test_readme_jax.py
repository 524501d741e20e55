"""docs/jax.md's JAX snippet, run as written in a fresh process (8 CPU devices)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from tests.jax.helpers import run_jax_script  # noqa: E402
from tests.readme import code_blocks  # noqa: E402


def test_readme_jax_snippet(tmp_path):
    (block,) = code_blocks("JAX", "docs/jax.md")
    run_jax_script(block, tmp_path, "jax_input.py")
