"""Host batches -> global ``jax.Array`` s on a device mesh, and this process's place.

Each JAX process reads its own part of the data (:func:`process_split`) and contributes its
rows of every global batch: :func:`global_batch` calls ``jax.make_array_from_process_local_data``
for every array of a (nested) batch with a ``NamedSharding`` that splits the batch dimension over
the mesh's data axis (the first axis by default).
"""

from __future__ import annotations

import numpy as np


def process_split(process_index: int | None = None, process_count: int | None = None) -> tuple[int, int]:
    """``(index, count)``: explicit values, else ``jax.process_index()`` / ``jax.process_count()``."""
    if process_index is None or process_count is None:
        import jax  # noqa: PLC0415

        process_index = jax.process_index() if process_index is None else process_index
        process_count = jax.process_count() if process_count is None else process_count
    if process_count < 1 or not 0 <= process_index < process_count:
        raise ValueError(f"need 0 <= process_index < process_count, got {process_index} of "
                         f"{process_count}")
    return int(process_index), int(process_count)


def batch_sharding(mesh, axis: str | tuple | None = None):
    """``NamedSharding`` splitting dimension 0 over ``axis`` (default: the mesh's first axis)."""
    from jax.sharding import NamedSharding, PartitionSpec  # noqa: PLC0415

    return NamedSharding(mesh, PartitionSpec(mesh.axis_names[0] if axis is None else axis))


def global_batch(batch, mesh=None, axis: str | tuple | None = None, sharding=None):
    """This process's ``batch`` (dict / list / tuple of numpy arrays) as global ``jax.Array`` s.

    Every process calls it with its own rows, in the same step; the result's leading dimension is
    the sum over processes. Byte-string arrays cannot live on a device: parse them first.
    """
    import jax  # noqa: PLC0415

    if sharding is None:
        if mesh is None:
            raise ValueError("give a mesh (jax.sharding.Mesh) or a sharding")
        sharding = batch_sharding(mesh, axis)

    def one(path, leaf):
        arr = np.asarray(leaf)
        if arr.dtype == object or arr.dtype.kind in "SUV":
            name = jax.tree_util.keystr(path)
            raise TypeError(f"batch entry {name} holds {arr.dtype} values, which cannot go to a "
                            f"device: parse or decode it on the host first (e.g. .parse(spec))")
        return jax.make_array_from_process_local_data(sharding, arr)

    return jax.tree_util.tree_map_with_path(one, batch)


__all__ = ["batch_sharding", "global_batch", "process_split"]
