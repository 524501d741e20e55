"""docs/jax.md's JAX snippet, run as written in a fresh process (8 CPU devices)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

from tests.readme import ROOT, code_blocks  # noqa: E402


def test_readme_jax_snippet(tmp_path):
    (block,) = code_blocks("JAX", "docs/jax.md")
    (tmp_path / "jax_input.py").write_text(block)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(PYTHONPATH=ROOT, TMPDIR=str(tmp_path), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "jax_input.py"], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-5000:]
