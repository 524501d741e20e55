"""Repository-level pytest settings: skip collecting modules (doctests) whose optional framework
is not installed: the framework bridges and the executor's JAX backend."""

import importlib.util


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


collect_ignore_glob = [f"tpudata/{name}/*" for name in ("torch", "jax") if not _installed(name)]
if not _installed("jax"):  # the [jax] extra: TPUEstimator(backend="jax")
    collect_ignore_glob.append("tpudata/tpu/jax_*.py")
