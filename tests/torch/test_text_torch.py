"""Packed, mixed text through the torch bridge: DatasetIterable yields the packed batches as
tensors (segment ids and positions with their tokens), and a StatefulDataLoader checkpoint taken
mid-run resumes with the batches of the uninterrupted run (the packers' positions in each
worker's state)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from torch.utils.data import DataLoader  # noqa: E402

from tests.text.helpers import doc_ids, id_docs  # noqa: E402
from tpudata.dataset import Dataset, elastic_hosts  # noqa: E402
from tpudata.text import pack  # noqa: E402
from tpudata.torch import DatasetIterable  # noqa: E402

L = 20


def host(hosts: int, index: int, steps: int | None = None) -> Dataset:
    mixed = Dataset.mix({"a": id_docs(1, 150, 17), "b": id_docs(2, 60, 17)}, {"a": 1, "b": 1}, seed=2,
                        repeat=steps is not None, num_shards=hosts, shard_index=index)
    rows = pack(mixed, {"tokens": L}, method="first_fit", num_bins=6, loss_mask="next_token")
    batches = rows.batch(4)
    return batches if steps is None else batches.take(steps)


def reader(split):
    return elastic_hosts(host, split.count, split.index)


def host_15_steps(hosts: int, index: int) -> Dataset:
    return host(hosts, index, 15)


def reader_15_steps(split):  # module level: DataLoader workers come from a forkserver
    return elastic_hosts(host_15_steps, split.count, split.index)


def test_packed_batches_as_tensors_every_token_once():
    loader = DataLoader(DatasetIterable(reader), batch_size=None)
    got = []
    for batch in loader:
        assert batch["tokens"].dtype == torch.int32 and batch["tokens"].shape[1] == L
        assert batch["tokens_segment_ids"].shape == batch["tokens_positions"].shape == \
            batch["tokens"].shape
        got += batch["tokens"][batch["tokens_segment_ids"] != 0].tolist()
    want = [t for cid, n in ((1, 150), (2, 60)) for i in range(n) for t in doc_ids(cid, i, 17)]
    assert sorted(got) == sorted(want)
    with pytest.raises(TypeError, match="length"):
        len(DatasetIterable(reader, num_workers=1))


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_with_the_uninterrupted_batches(workers):
    def loader():
        kw = {"multiprocessing_context": "forkserver"} if workers else {}
        return stateful.StatefulDataLoader(DatasetIterable(reader_15_steps, num_workers=workers),
                                           batch_size=None, num_workers=workers, **kw)

    whole = list(loader())
    assert len(whole) == 15 * max(1, workers)
    first = loader()
    it = iter(first)
    head = [next(it) for _ in range(7)]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(head + rest) == len(whole)
    for a, b in zip(head + rest, whole):
        for k in b:
            assert torch.equal(a[k], b[k]), k
