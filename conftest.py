"""Skip collecting the framework bridges' modules (doctests) when the framework is not installed."""

import importlib.util


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


collect_ignore_glob = [f"tpudata/{name}/*" for name in ("torch", "jax") if not _installed(name)]
