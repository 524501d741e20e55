"""pack(): segment ids, positions, loss masks, max segments, overflow, seqio's convention, the
checks at construction, and exact restores with a small state whatever the buffer sizes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.text.helpers import assert_same_rows, docs_dataset, killed_and_restored
from tpudata.dataset import Dataset, TextLineDataset
from tpudata.errors import PackingError
from tpudata.text import loss_mask, pack, tokenize


def docs_of(*lengths, start=1):
    out, k = [], start
    for n in lengths:
        out.append({"tokens": np.arange(k, k + n, dtype=np.int32)})
        k += n
    return out


def test_segment_ids_positions_padding_and_loss_masks():
    ds = docs_dataset(docs_of(3, 2, 4, 5))
    rows = list(pack(ds, {"tokens": 6}, method="first_fit", num_bins=3, shuffle_bins=False,
                     loss_mask="next_token"))
    assert [r["tokens"].tolist() for r in rows] == [
        [1, 2, 3, 4, 5, 0], [6, 7, 8, 9, 0, 0], [10, 11, 12, 13, 14, 0]]
    assert rows[0]["tokens_segment_ids"].tolist() == [1, 1, 1, 2, 2, 0]
    assert rows[0]["tokens_positions"].tolist() == [0, 1, 2, 0, 1, 0]
    assert rows[0]["tokens_loss_mask"].tolist() == [1, 1, 0, 1, 0, 0]
    assert rows[0]["tokens_loss_mask"].dtype == np.float32
    assert loss_mask(rows[0]["tokens_segment_ids"], "tokens").tolist() == [1, 1, 1, 1, 1, 0]
    spec = pack(ds, {"tokens": 6}, num_bins=2, loss_mask="tokens").element_spec
    assert spec["tokens"].shape == (6,) and spec["tokens"].dtype == np.int32
    assert spec["tokens_segment_ids"].dtype == np.int32 and "tokens_loss_mask" in spec


def test_two_features_and_at_most_max_segments_per_row():
    docs = [{"inputs": np.full(2, i + 1, np.int32), "targets": np.full(1, i + 1, np.int32),
             "id": np.int64(i)} for i in range(10)]
    rows = list(pack(docs_dataset(docs), {"inputs": 8, "targets": 8}, method="best_fit",
                     num_bins=2, max_segments=3))
    assert all(r["inputs_segment_ids"].max() <= 3 for r in rows)
    assert sorted(rows[0]) == ["inputs", "inputs_positions", "inputs_segment_ids", "targets",
                               "targets_positions", "targets_segment_ids"]  # "id" is dropped
    assert sum(int((r["targets_segment_ids"] > 0).sum()) for r in rows) == 10


def test_a_document_longer_than_a_row_is_reported_or_truncated():
    ds = docs_dataset(docs_of(3, 9, 2))
    with pytest.raises(PackingError, match=r"element 1 of the packed input has 9 'tokens' values"):
        list(pack(ds, {"tokens": 6}, num_bins=2))
    rows = list(pack(ds, {"tokens": 6}, method="first_fit", num_bins=2, shuffle_bins=False,
                     overflow="truncate"))
    assert [r["tokens"].tolist() for r in rows] == [[1, 2, 3, 13, 14, 0], [4, 5, 6, 7, 8, 9]]


def test_seqio_trim_and_pack_convention():
    """seqio's trim_and_pack_dataset docstring example, and its quirks: a row ends at every
    max(lengths) inputs, ids are int32 and trimmed to their length."""
    docs = [{"inputs": np.array([8, 7, 1], np.int64), "targets": np.array([4, 1], np.int64),
             "idx": np.int64(0)},
            {"inputs": np.array([2, 3, 4, 1], np.int64), "targets": np.array([5, 6, 1], np.int64),
             "idx": np.int64(1)}]
    (row,) = list(pack(docs_dataset(docs), {"inputs": 10, "targets": 10}, method="seqio"))
    want = {"inputs": [8, 7, 1, 2, 3, 4, 1, 0, 0, 0],
            "inputs_segment_ids": [1, 1, 1, 2, 2, 2, 2, 0, 0, 0],
            "inputs_positions": [0, 1, 2, 0, 1, 2, 3, 0, 0, 0],
            "targets": [4, 1, 5, 6, 1, 0, 0, 0, 0, 0],
            "targets_segment_ids": [1, 1, 2, 2, 2, 0, 0, 0, 0, 0],
            "targets_positions": [0, 1, 0, 1, 2, 0, 0, 0, 0, 0]}
    assert {k: v.tolist() for k, v in row.items()} == want
    assert all(v.dtype == np.int32 for v in row.values())
    rows = list(pack(docs_dataset(docs_of(1, 1, 1, 9)), {"tokens": 4}, method="seqio"))
    assert [r["tokens"].tolist() for r in rows] == [[1, 2, 3, 0], [4, 5, 6, 7]]


@pytest.mark.parametrize("bad, match", [
    (dict(lengths={}), "lengths must be"),
    (dict(method="worst_fit"), "method must be one of"),
    (dict(num_bins=None), "needs num_bins"),
    (dict(max_segments=0), "max_segments must be"),
    (dict(overflow="chunk"), "overflow must be"),
    (dict(loss_mask="all"), "loss_mask must be"),
    (dict(meta_features=["tokens"]), "concat_then_split's"),
    (dict(lengths={"tokens": 0}), "no room for a token"),
])
def test_refused_at_construction(bad, match):
    kw = dict(lengths={"tokens": 8}, method="best_fit", num_bins=2)
    kw.update(bad)
    with pytest.raises(ValueError, match=match):
        pack(docs_dataset(docs_of(2)), kw.pop("lengths"), **kw)


@pytest.mark.parametrize("method, kw", [
    ("first_fit", dict(num_bins=3)), ("best_fit", dict(num_bins=512, max_segments=4)),
    ("concat_then_split", {}), ("seqio", {})])
def test_restored_at_random_steps_gives_the_same_rows_from_a_small_state(method, kw):
    rng = np.random.default_rng(0)
    docs = docs_of(*rng.integers(1, 30, 700).tolist())
    ds = pack(docs_dataset(docs).prefetch(4), {"tokens": 32}, method=method, **kw)
    want = list(ds)
    for seed in range(3):
        got, sizes = killed_and_restored(ds, seed, most=40)
        assert_same_rows(got, want)
        assert max(sizes) < 2048, sizes  # whatever num_bins: a position, not the rows


def test_text_file_to_packed_rows_restores_exactly(tmp_path):
    """TextLineDataset -> tokenize (chunks, BOS/EOS) -> best-fit: kill and restore anywhere."""
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\n".join(b"w" * (i % 50) + str(i).encode() for i in range(600)))
    ids = tokenize(TextLineDataset(str(path)), lambda t: [[ord(c) for c in x] for x in t],
                   add_bos=1, add_eos=2, max_length=40, block_docs=33)
    ds = pack(ids, {"tokens": 64}, method="best_fit", num_bins=8, seed=3, loss_mask="next_token")
    want = list(ds)
    real = sum(int((r["tokens_segment_ids"] > 0).sum()) for r in want)
    assert real == sum(len(e["tokens"]) for e in ids)  # every token, once
    for seed in range(3):
        got, sizes = killed_and_restored(ds, seed, most=25)
        assert_same_rows(got, want)
        assert max(sizes) < 2048


def test_an_empty_input_packs_nothing():
    ds = Dataset.from_tensor_slices({"tokens": np.zeros((0, 3), np.int32)})
    for method in ("first_fit", "concat_then_split", "seqio"):
        assert list(pack(ds, {"tokens": 4}, method=method, num_bins=2)) == [] \
            if method == "first_fit" else list(pack(ds, {"tokens": 4}, method=method)) == []
