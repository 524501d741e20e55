"""Packing after a mixture, killed and restored into a changed mixture: every token of every
component once. The packer restores by packing its current batch again from where it began, so
the mixture must give that stretch again as the saving run drew it (docs/mixtures.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tpudata.dataset import Dataset

text = pytest.importorskip("tpudata.text")
pack = getattr(text, "pack", None)
if pack is None:  # pragma: no cover - the packer is not there yet
    pytest.skip("tpudata.text.pack is not there", allow_module_level=True)

ROW = 16
DOCS = {"a": 40, "b": 30, "c": 25}


def lengths(cid: int, n: int) -> np.ndarray:
    return (np.arange(n) * 7 + cid) % 6 + 1


def corpus(cid: int, n: int) -> Dataset:
    """Documents whose tokens say which corpus, document and position they are."""
    lens = lengths(cid, n)
    def doc(i):
        i = int(i)
        return {"tokens": (cid * 100_000 + i * 8 + np.arange(lens[i])).astype(np.int32)}

    return Dataset.range(n).map(doc)


def packed(names: str, weights: dict, seed: int) -> Dataset:
    comps = {n: corpus(k + 1, DOCS[n]) for k, n in enumerate("abc") if n in names}
    return pack(Dataset.mix(comps, weights, seed=seed), {"tokens": ROW}, method="first_fit",
                num_bins=4, shuffle_bins=False)


def real_tokens(row) -> list:
    return row["tokens"][row["tokens_segment_ids"] != 0].tolist()


@pytest.mark.parametrize("seed", range(8))
def test_packed_mixture_restored_with_new_weights_and_a_new_component(seed):
    steps = int(np.random.default_rng(seed).integers(0, 15))
    got = []
    with packed("ab", {"a": 1, "b": 1}, seed=1).iterator() as it:
        for _ in range(steps):
            got += real_tokens(next(it))
        state = json.loads(json.dumps(it.get_state()))
    with packed("abc", {"a": 3, "b": 1, "c": 1}, seed=2).iterator(state) as it:
        for row in it:
            got += real_tokens(row)
    assert len(got) == len(set(got))  # no token twice
    for k, (name, n) in enumerate(DOCS.items()):
        cid = k + 1
        want = {cid * 100_000 + i * 8 + j for i in range(n) for j in range(lengths(cid, n)[i])}
        assert {t for t in got if t // 100_000 == cid} == want, name  # none skipped
