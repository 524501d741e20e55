"""Repository-level pytest settings: doctests of modules whose optional framework is absent."""

import importlib.util

collect_ignore_glob = []
if importlib.util.find_spec("jax") is None:  # the [jax] extra: TPUEstimator(backend="jax")
    collect_ignore_glob.append("tpudata/tpu/jax_*.py")
