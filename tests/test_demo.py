"""`make demo` (tools/demo.py) runs end to end, at a small size."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_runs(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # without --workdir: a temporary directory
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "demo.py"), "--per-class", "12",
         "--validation", "21", "--steps", "20", "--step-ms", "1",
         "--tensorboard-dir", str(tmp_path / "tensorboard")],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # the JPEG folder it printed is removed at the end, and it says so
    raw = out.split("validation JPEGs in ", 1)[1].split(" ", 1)[0]
    assert raw.startswith(str(tmp_path)) and "removed at the end; --workdir DIR keeps them" in out
    assert not os.path.exists(raw)
    assert f"removed {os.path.dirname(raw)} (the generated JPEGs; --workdir DIR keeps them)" in out
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
    assert "checkpoints: ['checkpoint', 'model.ckpt-00000020.npz']" in out  # not the event files


# -- `make demo`: its own extra and stamp, quiet, and `make test` still works after it --------------
def _make(venv, *targets):
    out = subprocess.run(["make", "-n", f"VENV={venv}", *targets], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return out.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_installs_the_demo_extra_with_its_own_stamp(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()  # a venv exists: dry runs show what each target installs
    demo = _make(venv, "demo")
    assert "pip install -q -q -e '.[demo]'" in demo and f"touch {venv}/.installed-demo" in demo
    assert "[test]" not in demo and "tools/demo.py" in demo
    assert 'PYTHONWARNINGS="ignore:Editable installation"' in demo  # quiet
    (venv / ".installed-demo").touch()
    assert "pip install" not in _make(venv, "demo")  # its stamp is enough for the demo
    test = _make(venv, "test")  # after `make demo`, `make test` installs the [test] extra
    assert "pip install -q -e '.[test]'" in test and "pytest" in test
    (venv / ".installed-test").touch()
    assert "pip install" not in _make(venv, "test") + _make(venv, "demo")  # and vice versa
    assert "-e '.[demo,jax]'" in _make(venv, "demo-jax")


def _names(requirements):
    return {r.split(">")[0].split("[")[0].lower() for r in requirements}


def test_the_demo_extra_is_what_the_demo_imports_and_the_metadata_builds_quietly():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    extras = project["project"]["optional-dependencies"]
    # tools/demo.py's imports beyond the base package (JAX is optional: `make demo-jax`)
    assert _names(extras["demo"]) == {"pillow", "tensorboardx"}
    assert _names(extras["demo"]) <= _names(extras["test"])  # `make test` can run the demo too
    # an SPDX license string (setuptools >= 77), not the deprecated table whose warning every
    # install printed
    assert project["project"]["license"] == "Apache-2.0"
    assert project["build-system"]["requires"][0] == "setuptools>=77"
    pytest.importorskip("setuptools", minversion="77")  # the build-system requirement
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any deprecation in our metadata fails here
        apply_configuration(Distribution(), os.path.join(ROOT, "pyproject.toml"))
