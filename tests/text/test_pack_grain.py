"""pack() is grain's packers element for element on the same input order: live where grain is
installed, and always against tests/data/golden/packing_grain.json (written with grain by
tests/data/make_packing_golden.py, documents included)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from tests.text.helpers import assert_same_rows, docs_dataset
from tpudata.text import pack

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
sys.path.insert(0, DATA)
from packing_cases import CASES, documents, grain_dataset, lengths  # noqa: E402

with open(os.path.join(DATA, "golden", "packing_grain.json")) as _f:
    GOLDEN = json.load(_f)


def packed(name: str, docs: list) -> list:
    *_, method, kw = CASES[name]
    return list(pack(docs_dataset(docs), lengths(name), method=method, **kw))


def test_the_golden_file_has_every_case():
    assert sorted(GOLDEN["cases"]) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_rows_as_grain_golden(name):
    case = GOLDEN["cases"][name]
    docs = [{k: np.asarray(v, np.int32) for k, v in d.items()} for d in case["docs"]]
    cols = case["rows"]
    n = len(next(iter(cols.values()))["values"])
    want = [{k: np.asarray(c["values"][i], dtype=c["dtype"]) for k, c in cols.items()}
            for i in range(n)]
    assert case["lengths"] == lengths(name)
    assert_same_rows(packed(name, docs), want)


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_rows_as_grain_live(name):
    pytest.importorskip("grain")
    docs = documents(name)
    assert_same_rows(packed(name, docs), list(grain_dataset(name, docs)))


@pytest.mark.parametrize("method", ["first_fit", "best_fit"])
def test_same_as_grain_live_on_tokenized_text(method, hf_tokenizer):
    """Tokenized documents (tokenize's output) packed by both, 32 bins, rows shuffled."""
    grain = pytest.importorskip("grain")
    from grain._src.python.dataset.transformations import packing

    from tests.text.conftest import SENTENCES
    from tpudata.dataset import Dataset
    from tpudata.text import tokenize

    texts = [" ".join(SENTENCES[i % len(SENTENCES)] for i in range(k % 7 + 1)) for k in range(300)]
    ids = tokenize(Dataset.from_tensor_slices([t.encode() for t in texts]), hf_tokenizer,
                   add_bos="<s>", add_eos="</s>", max_length=64)
    docs = list(ids)
    cls = packing.FirstFitPackIterDataset if method == "first_fit" else packing.BestFitPackIterDataset
    want = list(cls(grain.MapDataset.source(docs).to_iter_dataset(), length_struct={"tokens": 128},
                    num_packing_bins=32, seed=7))
    got = list(pack(ids, {"tokens": 128}, method=method, num_bins=32, seed=7))
    assert_same_rows(got, want)
