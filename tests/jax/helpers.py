"""Light helpers that worker processes of the JAX tests import (no jax, no pytest)."""


def encode_item(i):
    return str(i).encode()


def run_jax_script(code: str, tmp_path, name: str) -> str:
    """Run ``code`` as ``tmp_path/name`` in a fresh process (CPU JAX; the script sets its own
    XLA_FLAGS); asserts it succeeds and returns its stdout."""
    import os
    import subprocess
    import sys

    from tests.readme import ROOT

    (tmp_path / name).write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(PYTHONPATH=ROOT, TMPDIR=str(tmp_path), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, name], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-5000:]
    return out.stdout
