"""The C accelerator (tpudata._native) given hostile arguments: errors, never a touched fd or memory.

``read_files`` once closed file descriptor 0 when a path was not bytes (its cleanup closed the fd
of every job, and jobs after the bad path still held calloc's 0), and ``decode`` wrote past its
output on negative counts, or when ``count * n * value size`` wrapped around. These run under
AddressSanitizer too (tools/sanitize.sh).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tpudata import _accel
from tpudata.example import parse, wire
from tpudata.example.codec import encode_example
from tpudata.tfrecord.batch import RecordBatch

nat = _accel.native
needs_native = pytest.mark.skipif(nat is None, reason="tpudata._native not built")


@pytest.fixture
def stdin_pipe():
    """fd 0 is the read end of a fresh pipe for the test (the caller's fd 0 is put back after)."""
    saved = os.dup(0) if _fd_open(0) else None
    r, w = os.pipe()
    os.dup2(r, 0)
    os.close(r)
    try:
        yield os.fstat(0)
    finally:
        os.close(w)
        if saved is None:
            os.close(0)
        else:
            os.dup2(saved, 0)
            os.close(saved)


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@needs_native
@pytest.mark.parametrize("bad", ["a/str/path", 17, None, bytearray(b"x")])
def test_read_files_rejects_a_non_bytes_path_and_leaves_fd_0_alone(tmp_path, stdin_pipe, bad):
    good = os.fsencode(tmp_path / "f.tfrecord")
    with open(good, "wb") as f:
        f.write(b"\0" * 16)
    with pytest.raises(TypeError, match="paths must be bytes"):
        nat.read_files([good, bad, good, good], 1 << 20, 100, True)
    st = os.fstat(0)  # still the same open file: nothing closed it
    assert (st.st_dev, st.st_ino) == (stdin_pipe.st_dev, stdin_pipe.st_ino)


@needs_native
def test_read_files_takes_any_sequence_and_skips_a_path_with_a_nul(tmp_path, stdin_pipe):
    good = os.fsencode(tmp_path / "f.tfrecord")
    with open(good, "wb") as f:
        f.write(b"\0" * 16)
    res = nat.read_files((good, good + b"\0/etc/passwd"), 1 << 20, 100, True)
    assert res[0] is not None and res[1] is None  # None: read the general way (which raises)
    with pytest.raises(TypeError, match="sequence of bytes"):
        nat.read_files(12, 1 << 20, 100, True)
    st = os.fstat(0)
    assert (st.st_dev, st.st_ino) == (stdin_pipe.st_dev, stdin_pipe.st_ino)


def _int64_batch():
    """Two records of an int64 VarLen feature with 3 and 2 values, located."""
    batch = RecordBatch.from_records([encode_example({"v": [1, 2, 3]}), encode_example({"v": [4, 5]})])
    return batch, parse._locate(batch, (b"v",))


@needs_native
def test_decode_rejects_negative_counts_instead_of_writing_past_out():
    """The exact input of the AddressSanitizer report at _native_example.c:354, through the entry
    point parse.py uses (``parse._decode``, mode 2: fill): counts (3, -3) sum to 0, so a 0-value
    ``out`` passed the size check and record 0's three values went past it."""
    batch, locs = _int64_batch()
    out = np.empty(0, np.int64)
    counts = np.array([3, -3], np.int64)
    with pytest.raises(ValueError, match=r"counts\[1\] = -3"):
        parse._decode(batch, locs, 0, wire.KIND_INT64, 2, 0, out, counts)
    huge = np.array([2**62, 2**62], np.int64)  # a sum past int64
    with pytest.raises(ValueError, match="counts"):
        parse._decode(batch, locs, 0, wire.KIND_INT64, 2, 0, out, huge)
    short = np.array([3, 2], np.int64)  # fine counts, too small an output
    with pytest.raises(ValueError, match="too small"):
        parse._decode(batch, locs, 0, wire.KIND_INT64, 2, 0, np.empty(4, np.int64), short)


@needs_native
def test_decode_sizes_are_checked_without_wrapping_around():
    batch, locs = _int64_batch()
    present = np.empty(2, np.uint8)
    # 2 records * 2**59 values * 16 bytes = 2**64: wrapped to 0, it passed a 0-byte output
    with pytest.raises(ValueError, match="too small"):
        nat.decode(batch.buffer, locs, 1, 0, wire.KIND_BYTES, 0, 2**59, np.empty(0, np.int64), present)
    with pytest.raises(ValueError, match="too small"):
        nat.decode(batch.buffer, locs, 1, 0, wire.KIND_INT64, 0, 2**61, np.empty(0, np.int64), present)
    # nkeys * 16 wrapped to 0 divided by zero
    with pytest.raises(ValueError, match="bad arguments"):
        nat.decode(batch.buffer, locs, 2**60, 0, wire.KIND_INT64, 1, 0, None, np.empty(2, np.int64))
    # the sound call still works
    counts = np.empty(2, np.int64)
    assert nat.decode(batch.buffer, locs, 1, 0, wire.KIND_INT64, 1, 0, None, counts)[0] == wire.E_OK
    out = np.empty(5, np.int64)
    assert nat.decode(batch.buffer, locs, 1, 0, wire.KIND_INT64, 2, 0, out, counts)[0] == wire.E_OK
    assert counts.tolist() == [3, 2] and out.tolist() == [1, 2, 3, 4, 5]
