"""Iterator state as JSON: numpy values and bytes turned into JSON types and back."""

from __future__ import annotations

import base64
from typing import Any

from tpudata.dataset.core import registry
import numpy as np


def jsonable(obj: Any) -> Any:
    """State with numpy values and bytes turned into JSON types.

    An object with a ``__jsonable__()`` method (e.g. a shuffle buffer that may spill to a file)
    is turned into JSON only here, when the user takes a checkpoint.
    """
    if hasattr(obj, "__jsonable__"):
        return jsonable(obj.__jsonable__())
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return {"__objects__": [jsonable(v) for v in obj.ravel().tolist()],
                    "shape": list(obj.shape)}
        return {"__array__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"__bytes__": base64.b64encode(bytes(obj)).decode("ascii")}
    return obj


def from_jsonable(obj: Any) -> Any:
    """Inverse of :func:`jsonable`."""
    if isinstance(obj, dict):
        if "__array__" in obj:
            return np.array(obj["__array__"], dtype=obj["dtype"])
        if "__objects__" in obj:
            values = [from_jsonable(v) for v in obj["__objects__"]]
            out = np.empty(len(values), dtype=object)
            for k, v in enumerate(values):
                out[k] = v
            return out.reshape(tuple(obj["shape"]))
        if "__bytes__" in obj:
            return base64.b64decode(obj["__bytes__"])
        if "__window__" in obj:  # a window (a Dataset element) carried by a checkpoint
            window_from_jsonable = registry.lookup("window_from_jsonable")

            return window_from_jsonable(from_jsonable(obj["__window__"]))
        if "__saved_shard__" in obj:  # a shard of Dataset.load (reader_func's elements)
            shard_from_jsonable = registry.lookup("shard_from_jsonable")

            return shard_from_jsonable(obj["__saved_shard__"])
        return {k: from_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_jsonable(v) for v in obj]
    return obj


__all__ = ["from_jsonable", "jsonable"]
