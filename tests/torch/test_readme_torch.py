"""docs/torch.md's PyTorch snippets, run as written: one process with workers, and two ranks under
torchrun (gloo on 127.0.0.1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from tests.readme import ROOT, code_blocks  # noqa: E402


def _run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
    out = subprocess.run(args, cwd=str(tmp_path), env=env, capture_output=True, text=True,
                         timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]


def test_readme_pytorch_snippets(tmp_path):
    single, multi = code_blocks("PyTorch", "docs/torch.md")
    (tmp_path / "single.py").write_text(single)
    (tmp_path / "train.py").write_text(multi)
    _run([sys.executable, "single.py"], tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
          "--master_addr=127.0.0.1", f"--master_port={port}", "train.py"], tmp_path)
