"""What the golden files in tests/data/golden contain - shared by make_golden.py (which writes
them with TensorFlow) and the tests (which check every value without TensorFlow).

Feature values are ``(kind, values)`` with kind "bytes", "float", "int64" or "unset" (a Feature
with no list set), so both sides agree on types exactly.
"""

from __future__ import annotations

import numpy as np

SEED = 20261121
LARGE_RECORD_BYTES = 17 * 1024 * 1024 + 123  # > 16 MB


def plain_records() -> list[bytes]:
    """Raw records for the framing files (none/GZIP/ZLIB)."""
    rng = np.random.RandomState(SEED)
    records = [b"", b"a", bytes(range(256)), b"\x00" * 5, b""]
    for n in (1, 11, 12, 13, 16, 100, 1000, 4095, 70000):
        records.append(rng.randint(0, 256, n, dtype=np.uint8).tobytes())
    records.append("unicode ✓ records".encode("utf-8"))
    return records


def large_record() -> bytes:
    """One record larger than 16 MB: compressible, but with a position-dependent pattern."""
    block = np.arange(4096, dtype=np.uint32) * 2654435761 % 251
    data = np.resize(block.astype(np.uint8), LARGE_RECORD_BYTES)
    data[::65536] = 7  # not purely periodic
    return data.tobytes()


def examples() -> list[dict]:
    """Examples exercising every feature type and edge case."""
    rng = np.random.RandomState(SEED + 1)
    out = []
    for i in range(12):
        nvar = int(rng.randint(0, 6))
        ex = {
            "bytes_scalar": ("bytes", [f"item-{i}".encode()]),
            "bytes_list": ("bytes", [b"", b"\x00\xff", rng.bytes(int(rng.randint(0, 300)))]),
            "utf8": ("bytes", ["héllo wörld ✓".encode("utf-8")]),
            "float_scalar": ("float", [float(np.float32(rng.randn()))]),
            "float_vec": ("float", [float(v) for v in rng.randn(4).astype(np.float32)]),
            "float_matrix": ("float", [float(v) for v in rng.randn(6).astype(np.float32)]),
            "float_special": ("float", [float("inf"), float("-inf"), -0.0, 1e-45, 3.4028235e38]),
            "float_nan": ("float", [float("nan")]),
            "int_scalar": ("int64", [int(rng.randint(-1000, 1000))]),
            "int_list": ("int64", [-1, 0, 1, 127, 128, 300, 2**31, 2**40, 2**63 - 1, -(2**63)]),
            "int_var": ("int64", [int(v) for v in rng.randint(-50, 50, nvar)]),
            "float_var": ("float", [float(v) for v in rng.randn(nvar).astype(np.float32)]),
            "bytes_var": ("bytes", [rng.bytes(3) for _ in range(nvar)]),
            "empty_float": ("float", []),
            "empty_int": ("int64", []),
            "empty_bytes": ("bytes", []),
            "unset": ("unset", []),
        }
        if i % 3 == 0:
            del ex["int_scalar"]  # missing in some records: exercises default_value
        out.append(ex)
    return out


def sequence_examples() -> list[tuple[dict, dict]]:
    """SequenceExamples as (context, feature_lists) with feature lists of (kind, values) steps."""
    rng = np.random.RandomState(SEED + 2)
    out = []
    for i in range(4):
        steps = int(rng.randint(0, 5))
        context = {
            "id": ("bytes", [f"seq-{i}".encode()]),
            "length": ("int64", [steps]),
            "weight": ("float", [float(np.float32(rng.rand()))]),
        }
        lists = {
            "tokens": [("int64", [int(v) for v in rng.randint(0, 1000, int(rng.randint(0, 4)))])
                       for _ in range(steps)],
            "frames": [("float", [float(v) for v in rng.randn(3).astype(np.float32)])
                       for _ in range(steps)],
            "words": [("bytes", [rng.bytes(2)]) for _ in range(steps)],
        }
        if i == 3:
            lists["empty_list"] = []
        out.append((context, lists))
    return out


def corruptions(good: bytes) -> dict[str, bytes]:
    """Damaged copies of a framing file (the first four plain records), for comparing error
    messages with TensorFlow's."""
    def flip(data: bytes, i: int) -> bytes:
        b = bytearray(data)
        b[i] ^= 0x40
        return bytes(b)

    second = 12 + 0 + 4  # the first record is empty: record 1 starts at 16
    return {
        "header_crc_first": flip(good, 9),
        "length_second": flip(good, second + 1),
        "data_second": flip(good, second + 12),
        "data_crc_second": flip(good, second + 12 + 1),
        "truncated_data": good[: second + 12],
        "truncated_in_crc": good[: second + 12 + 1 + 2],
        "not_tfrecord": b"this is plainly not a TFRecord file\n" * 3,
    }
