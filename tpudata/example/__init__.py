"""tf.train.Example / SequenceExample codec, feature specs and batch parsing."""

from tpudata.example.batching import concat_parsed, parse_batches, rebatch
from tpudata.example.codec import (
    decode_example,
    decode_sequence_example,
    encode_example,
    encode_feature,
    encode_sequence_example,
)
from tpudata.example.features import FixedLenSequenceFeature, RaggedFeature, SparseFeature
from tpudata.example.parse import VarLenValues, parse_examples, parse_single_example
from tpudata.example.raw import decode_raw
from tpudata.example.spec import FixedLenFeature, VarLenFeature
from tpudata.example.structured import RaggedValues, SparseValues

__all__ = [
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "RaggedFeature",
    "RaggedValues",
    "SparseFeature",
    "SparseValues",
    "VarLenFeature",
    "VarLenValues",
    "concat_parsed",
    "decode_example",
    "decode_raw",
    "decode_sequence_example",
    "encode_example",
    "encode_feature",
    "encode_sequence_example",
    "parse_batches",
    "parse_examples",
    "parse_single_example",
    "rebatch",
]
