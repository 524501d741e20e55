"""Skip collecting the framework bridges' modules (doctests) when the framework is not installed."""

import importlib.util

collect_ignore_glob = [f"tpudata/{name}/*" for name in ("torch", "jax")
                       if importlib.util.find_spec(name) is None]
