"""`make demo` (tools/demo.py) runs end to end, at a small size."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "demo.py"), "--per-class", "12",
         "--validation", "21", "--steps", "20", "--step-ms", "1", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "[5/5] results" in out
    assert "on 21 of 21 validation images" in out  # the exact epoch counted every image once
    assert "gs://demo/imagenet/train-*: 8 shards, 96 records" in out
    assert "model.ckpt-00000020.npz" in out
    assert f"tensorboard --logdir {tmp_path / 'tensorboard'}" in out
    if importlib.util.find_spec("tensorboardX"):  # event files copied out of the fake gs://
        names = {os.path.relpath(os.path.join(d, n), tmp_path / "tensorboard").split(".out.")[0]
                 for d, _, files in os.walk(tmp_path / "tensorboard") for n in files}
        assert names == {"events", os.path.join("eval", "events")}
    assert "image/class/synset" in out  # tpudata head over gs://
    # the JAX backend (measured device time) whenever JAX is installed, else numpy
    backend = "jax" if importlib.util.find_spec("jax") else "numpy"
    assert f"infeed ({backend} backend)" in out and f"backend={backend}" in out
