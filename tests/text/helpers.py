"""Shared pieces of the text tests: documents as a Dataset, rows compared exactly, restores."""

from __future__ import annotations

import json

import numpy as np

from tpudata.dataset import Dataset, TensorSpec


def docs_dataset(docs: list) -> Dataset:
    """``docs`` (dicts of int32 id arrays) in order, as a dataset."""
    spec = {k: TensorSpec((None,) * np.ndim(v), np.dtype(np.asarray(v).dtype))
            for k, v in docs[0].items()}
    return Dataset.from_generator(lambda: iter(docs), output_signature=spec)


def assert_same_rows(got: list, want: list) -> None:
    assert len(got) == len(want), (len(got), len(want))
    for i, (a, b) in enumerate(zip(got, want)):
        assert sorted(a) == sorted(b), (i, sorted(a), sorted(b))
        for k in a:
            assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, (i, k)
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"row {i}, {k}")


def killed_and_restored(ds: Dataset, seed: int, most: int = 12) -> tuple[list, list]:
    """The elements of ``ds`` read in runs of 0..``most``, each run by a new iterator restored
    from the JSON of the last one's state; and the sizes of those states in bytes."""
    rng = np.random.default_rng(seed)
    out, sizes = [], []
    state = None
    while True:
        it = ds.iterator(state)
        for _ in range(int(rng.integers(0, most + 1))):
            x = next(it, None)
            if x is None:
                it.close()
                return out, sizes
            out.append(x)
        text = json.dumps(it.get_state())
        sizes.append(len(text))
        state = json.loads(text)
        it.close()
