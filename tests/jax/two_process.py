"""One of two JAX processes on 127.0.0.1 (run by test_jax.py): feeds its half of each global batch."""

import json
import sys


def main(process_id: int, port: int, directory: str, out: str) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import tpudata.jax as tj
    from tests.torch.helpers import SPEC  # the shards' spec (plain numpy, no torch)
    from tpudata import storage

    files = sorted(storage.glob(f"{directory}/d-*"))
    mesh = Mesh(np.array(jax.devices()), ("data",))
    assert len(jax.devices()) == 4 and len(jax.local_devices()) == 2
    ds = tj.tfrecord_batches(files, 4, pipeline=lambda d, _: d.parse(SPEC), progress=False)
    total = jax.jit(lambda b: (b["id"] * b["weight"].astype(b["id"].dtype)).sum(),
                    out_shardings=NamedSharding(mesh, PartitionSpec()))
    steps, local_ids, global_sum, rows = 0, [], 0, 0
    for g in tj.DeviceIterator(ds.iterator(), mesh):
        rows = g["id"].shape[0]
        global_sum += int(np.asarray(total(g).addressable_data(0)))
        weights = {s.device: np.asarray(s.data) for s in g["weight"].addressable_shards}
        for shard in g["id"].addressable_shards:
            ids = np.asarray(shard.data)
            local_ids += ids[weights[shard.device] > 0].tolist()
        steps += 1
    with open(out, "w") as f:
        json.dump({"index": jax.process_index(), "count": jax.process_count(), "steps": steps,
                   "global_rows": rows, "local_ids": local_ids, "global_sum": global_sum}, f)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
