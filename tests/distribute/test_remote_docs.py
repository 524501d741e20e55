"""docs/remote.md's laptop example, run as written (a LocalCluster of 2 worker processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.readme import ROOT, code_blocks

pytest.importorskip("distributed")


def test_the_laptop_example_runs(tmp_path):
    (code,) = code_blocks("From a laptop to a cluster", "docs/remote.md")
    (tmp_path / "laptop.py").write_text(code)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "laptop.py"], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
