"""What a checkpoint knows of its pipeline: a readable description of the op graph and its hash.

An iterator state records ``{"fingerprint": ..., "ops": ...}`` of the pipeline that took it, so a
restore into another pipeline says so in words (what was expected, what was found) instead of
failing somewhere inside an op. The description is built from the ops and their configuration -
sizes, counts, flags, file counts - and is the same in every process: it leaves out user functions
(only that a ``map`` is there counts, not its code), seeds (a state carries its own), paths that
may move (cache and spill directories, a saved dataset's path) and knobs that change speed, not
elements (parallelism, read-ahead, prefetch, ``with_options``).

:func:`pipeline_types` lists the namedtuple classes the pipeline declares (in its sources'
structures, specs and signatures): the allow-list from which :func:`state_tree` resolves the
structures a state holds (never by importing a name the state gives).

>>> from tpudata.dataset import Dataset
>>> describe(Dataset.range(4).map(abs, num_parallel_calls=2).prefetch(1).take(3))
'range(dtype=int64, n=4, start=0, step=1) -> map() -> take(count=3)'
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from tpudata.dataset.core.nest import MAX_DEPTH, Tree, namedtuple_types, tree_from_json
from tpudata.errors import StateError, UntrustedTypeError

# attributes that change speed or placement, not which elements come out in what order
TUNING = frozenset({
    "autotune", "chunk", "compression_level", "deterministic", "deterministic_arg", "log_warning",
    "max_bytes", "name", "options", "opts", "output_signature", "parallel", "path", "read_ahead_bytes", "seed",
    "spill_bytes", "spill_keep", "spill_url", "storage_options", "threads", "unseeded", "url",
    "use_processes", "views", "where", "workers",
})
# ops whose state is their input's: adding or removing them keeps a checkpoint valid
TRANSPARENT = frozenset({"OptionsDataset", "PrefetchDataset"})
MAX_OPS_TEXT = 4000  # characters of the description kept in a state (the hash covers it all)


def _is_dataset(value) -> bool:
    return hasattr(value, "_make_iterator") and hasattr(value, "cardinality")


def _datasets_in(value) -> list | None:
    """The Datasets a list/tuple/dict attribute holds (None: it holds none)."""
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value, key=str)]
    if isinstance(value, (list, tuple)) and value and all(_is_dataset(v) for v in value):
        return list(value)
    return None


def _scalar(value):
    """A stable text for a configuration value, or None when it is not a plain value."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.dtype):
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return value if len(value) <= 200 else None
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        parts = [_scalar(v) for v in value]
        if all(p is not None for p in parts):
            return "[" + ", ".join(parts) + "]"
    return None


def _op_name(ds) -> str:
    op = type(ds).__name__.lstrip("_")
    op = op[:-len("Dataset")] if op.endswith("Dataset") and op != "Dataset" else op
    return re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", op).lower()


def describe(ds, depth: int = 0) -> str:
    """The pipeline ``ds`` as text, source first (see the module doc). An op that declares
    ``_describe_under`` (op names) is described below a chain of those ops directly under it:
    ``shuffle(n).parse(spec)`` and ``parse(spec).shuffle(n)`` give the same elements and
    states, so a checkpoint of one restores into the other."""
    if depth > MAX_DEPTH:
        return "..."
    ds = _visible(ds)
    own, upstream = _own(ds, depth)
    under = getattr(type(ds), "_describe_under", ())
    above = []  # the ops this one is described below, top first
    while under and _is_dataset(upstream) and _op_name(upstream) in under and len(above) < 64:
        text, below = _own(upstream, depth)
        above.append(text)
        upstream = _visible(below) if _is_dataset(below) else below
    text = own if upstream is None else f"{describe(upstream, depth + 1)} -> {own}"
    return " -> ".join([text, *reversed(above)])


def _visible(ds):
    while type(ds).__name__ in TRANSPARENT and _is_dataset(ds.__dict__.get("input")):
        ds = ds.__dict__["input"]
    return ds


def _own(ds, depth: int) -> tuple:
    """``(text of the op itself, its input Dataset or None)``."""
    config, upstream = [], None
    for key in sorted(ds.__dict__):
        if key.startswith("_") or key in TUNING:
            continue
        value = ds.__dict__[key]
        if _is_dataset(value):
            if key == "input":
                upstream = value
            else:
                config.append(f"{key}=[{describe(value, depth + 1)}]")
            continue
        nested = _datasets_in(value)
        if nested is not None:
            config.append(f"{key}=[{'; '.join(describe(v, depth + 1) for v in nested)}]")
        elif key == "files" and isinstance(value, (list, tuple)):
            config.append(f"files={len(value)}")
        else:
            text = _scalar(value)
            if text is not None:
                config.append(f"{key}={text}")
    return f"{_op_name(ds)}({', '.join(config)})", upstream


def fingerprint(text: str) -> str:
    """A short hash of a pipeline description."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def pipeline_record(ds) -> dict:
    """What a state records of its pipeline: ``{"fingerprint", "ops"}``."""
    text = describe(ds)
    ops = text if len(text) <= MAX_OPS_TEXT else text[:MAX_OPS_TEXT] + "..."
    return {"fingerprint": fingerprint(text), "ops": ops}


def pipeline_types(ds) -> dict:
    """``{"module:qualname": class}`` of the namedtuples the pipeline ``ds`` declares in its ops'
    configuration (structures, specs, signatures), searched without running anything."""
    from tpudata.dataset.core.graph import walk

    found: dict = {}
    for node in walk(ds):
        for value in node.__dict__.values():
            if _is_dataset(value) or _datasets_in(value) is not None:
                continue
            if isinstance(value, (dict, tuple, type, Tree)):
                try:
                    found.update(namedtuple_types(value))
                except Exception:  # an attribute that is not a structure: nothing declared
                    continue
    return found


def state_tree(obj, ds):
    """The structure ``obj`` (JSON) of a state over ``ds``'s elements. Its namedtuples are resolved
    from the classes the pipeline declares (its configuration, else its element spec), never by
    importing a name the state holds; an unknown one raises StateError."""
    try:
        return tree_from_json(obj, pipeline_types(ds))
    except UntrustedTypeError:
        pass  # a namedtuple made by a user function: the element spec names it
    try:
        types = namedtuple_types(ds.element_spec)
    except Exception:  # no spec without running more of the pipeline than a restore should
        types = {}
    try:
        return tree_from_json(obj, types)
    except UntrustedTypeError as exc:
        raise StateError(f"the state's elements are namedtuples {exc.type_name!r} that this "
                         "pipeline does not make (tpudata never imports a class a state names): "
                         "restore it into the pipeline that took it") from None


__all__ = ["describe", "fingerprint", "pipeline_record", "pipeline_types", "state_tree"]
