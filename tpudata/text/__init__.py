"""Text for language models: read documents, tokenize them, pack the tokens into rows.

>>> from tpudata.dataset import Dataset
>>> from tpudata import text
>>> docs = Dataset.from_tensor_slices([b"ab", b"abcde", b"abc"])
>>> ids = text.tokenize(docs, lambda texts: [[ord(c) - 96 for c in t] for t in texts], add_eos=0)
>>> rows = text.pack(ids, {"tokens": 8}, method="first_fit", num_bins=2, shuffle_bins=False)
>>> [r["tokens"].tolist() for r in rows]
[[1, 2, 0, 1, 2, 3, 0, 0], [1, 2, 3, 4, 5, 0, 0, 0]]

- :func:`JsonLinesDataset`: fields of JSON-lines files; plain text lines come from
  :func:`~tpudata.dataset.TextLineDataset`, Examples and SequenceExamples from
  :func:`~tpudata.dataset.TFRecordDataset` (``tokenize(record=...)`` reads their text feature).
- :func:`tokenize`: token ids with Hugging Face ``tokenizers`` or SentencePiece (the ``[text]``
  extra), a block of documents per call; BOS/EOS; trim or chunk long documents.
- :func:`pack`: first-fit, best-fit, concat-then-split (element for element grain's packers) and
  seqio's trim-and-pack, with ``<feature>_segment_ids`` / ``<feature>_positions``.

The guide is docs/text.md.
"""

from tpudata.text.jsonl import JsonLinesDataset
from tpudata.text.pack import PackDataset, loss_mask, pack
from tpudata.text.tokenize import TokenizeDataset, tokenize
from tpudata.text.tokenizer import Tokenizer, installed_backends, load_tokenizer

__all__ = [
    "JsonLinesDataset",
    "PackDataset",
    "TokenizeDataset",
    "Tokenizer",
    "installed_backends",
    "load_tokenizer",
    "loss_mask",
    "pack",
    "tokenize",
]
