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


def doc_ids(cid: int, i: int, spread: int = 13) -> list:
    """The token ids of document ``i`` of corpus ``cid``: 1 to ``spread`` (<= 32) of them, each
    saying its corpus, document and place, so no two documents share one."""
    return [cid * 100_000 + i * 32 + j for j in range((i * 7 + cid) % spread + 1)]


def id_docs(cid: int, n: int, spread: int = 13) -> Dataset:
    """Corpus ``cid``'s ``n`` documents as ``{"tokens": int32 ids}`` elements."""
    return Dataset.range(n).map(
        lambda i: {"tokens": np.asarray(doc_ids(cid, int(i), spread), np.int32)})


def write_text_corpus(root, corpora: dict, spread: int = 13) -> None:
    """``root/<name>.tfrecord``: Examples whose bytes feature "text" is a document's ids written
    out (``corpora``: ``{name: (cid, documents)}``); :func:`ids_from_text` tokenizes them."""
    import tpudata

    for name, (cid, n) in corpora.items():
        with tpudata.TFRecordWriter(str(root / f"{name}.tfrecord")) as w:
            for i in range(n):
                text = " ".join(str(t) for t in doc_ids(cid, i, spread))
                w.write(tpudata.encode_example({"text": text.encode()}))


def ids_from_text(texts: list) -> list:
    """The tokenizer of :func:`write_text_corpus`'s documents: their ids written out."""
    return [[int(w) for w in t.split()] for t in texts]
