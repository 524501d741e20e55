"""The damaged files of the TensorFlow-golden fuzz: base records and a seeded list of edits.

Shared by make_fuzz_golden.py (run once with TensorFlow) and tests/test_fuzz.py (no TensorFlow):
an edit is a small JSON-able dict, so both rebuild exactly the same damaged bytes from the
committed base files.
"""

from __future__ import annotations

import random

_R = random.Random(15)


def _mixed(n: int) -> bytes:
    """``n`` bytes: a random head and a repeated tail (small when compressed, yet not trivial)."""
    head = bytes(_R.randrange(256) for _ in range(2048))
    return (head + bytes(range(256)) * (n // 256 + 1))[:n]


BASES = {
    "small": [b"", b"a", b"hello world", bytes(range(40)), b"\x00" * 17,
              bytes(_R.randrange(256) for _ in range(300)), b"tail"],
    "big": [_mixed(100_000) for _ in range(4)],
}


# Item 3 of issue 15: ``good`` Examples {"id": i}, then one bad record, parsed with
# {"id": FixedLenFeature([], int64)}; TensorFlow's rows before the error are recorded.
PARSE_FILES = [(good, bad) for good in (16, 17, 5) for bad in ("malformed", "missing", "wrong_type")]
PARSE_BATCH = 4


# -- CRC32C (for crafted record lengths with valid header checksums) -------------------------------
def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_TABLE = _table()


def masked_crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record_starts(records: list[bytes]) -> list[int]:
    out, pos = [], 0
    for r in records:
        out.append(pos)
        pos += len(r) + 16
    return out + [pos]


# -- edits ----------------------------------------------------------------------------------------
def make_edits(name: str, compression: str, data: bytes) -> list[dict]:
    """The edits applied to one base file (deterministic for a given file)."""
    rng = random.Random(f"{name}/{compression}/{len(data)}")
    n = len(data)
    big = name == "big"
    edits: list[dict] = []
    for _ in range(40 if big else 60):
        edits.append({"op": "flip", "pos": rng.randrange(n), "xor": rng.randrange(1, 256)})
    for _ in range(10 if big else 20):
        k = rng.randrange(1, 9)
        pos = rng.randrange(n)
        edits.append({"op": "set", "pos": pos,
                      "bytes": bytes(rng.randrange(256) for _ in range(k)).hex()})
    cuts = set(rng.randrange(n) for _ in range(30 if big else 40))
    if not compression:
        cuts |= set(p for p in record_starts(BASES[name]) if p < n)  # record boundaries
        cuts |= set(p + d for p in record_starts(BASES[name])[:-1] for d in (5, 12, 15))
    edits += [{"op": "cut", "len": c} for c in sorted(c for c in cuts if c < n)]
    for _ in range(10):
        edits.append({"op": "insert", "pos": rng.randrange(n),
                      "bytes": bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6))).hex()})
        edits.append({"op": "delete", "pos": rng.randrange(n), "n": rng.randrange(1, 6)})
    edits += [
        {"op": "append", "bytes": bytes(rng.randrange(256) for _ in range(20)).hex()},
        {"op": "append", "bytes": (b"\x00" * 16).hex()},
        {"op": "append", "bytes": "00"},
        {"op": "append_self"},
        {"op": "append_self_cut", "len": n // 2},
    ]
    if compression == "GZIP":
        edits += [{"op": "flip", "pos": n - 6, "xor": 0xFF},  # the CRC32 only
                  {"op": "flip", "pos": n - 2, "xor": 0x01}]  # the size only
    elif compression == "ZLIB":
        edits += [{"op": "flip", "pos": n - 2, "xor": 0xFF}]  # the Adler-32 only
    else:
        starts = record_starts(BASES[name])
        for k in range(min(3, len(BASES[name]))):
            actual = len(BASES[name][k])
            for value in (actual + 1, actual + 1000, 1 << 20, max(actual - 1, 0)):
                if value != actual:
                    edits.append({"op": "length", "pos": starts[k], "value": value})
    return edits


def expected_records(name: str, edit: dict) -> list[bytes]:
    """The record stream a reader may deliver a prefix of (a file appended to itself doubles it)."""
    records = BASES[name]
    return records + records if edit["op"].startswith("append_self") else records


def apply_edit(data: bytes, edit: dict) -> bytes:
    op = edit["op"]
    b = bytearray(data)
    if op == "flip":
        b[edit["pos"]] ^= edit["xor"]
    elif op == "set":
        new = bytes.fromhex(edit["bytes"])
        pos = edit["pos"]
        b[pos : pos + len(new)] = new
    elif op == "cut":
        del b[edit["len"] :]
    elif op == "insert":
        b[edit["pos"] : edit["pos"]] = bytes.fromhex(edit["bytes"])
    elif op == "delete":
        del b[edit["pos"] : edit["pos"] + edit["n"]]
    elif op == "append":
        b += bytes.fromhex(edit["bytes"])
    elif op == "append_self":
        b += data
    elif op == "append_self_cut":
        b += data[: edit["len"]]
    elif op == "length":  # a crafted length whose header CRC is valid
        length = edit["value"].to_bytes(8, "little")
        b[edit["pos"] : edit["pos"] + 12] = length + masked_crc32c(length).to_bytes(4, "little")
    else:
        raise ValueError(f"unknown edit {edit}")
    return bytes(b)
