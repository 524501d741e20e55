"""The one decompression stream every reader shares (TFRecord, text lines, fixed-length records)."""

from __future__ import annotations

import gzip
import io
import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpudata.errors import DataLossError, TruncatedRecordError
from tpudata.tfrecord.compression import DecompressedStream, open_stream


def _lines(n=1000):
    return b"".join(b"line %d %s\n" % (i, os.urandom(20).hex().encode()) for i in range(n))


def _compress(data, compression):
    return gzip.compress(data, mtime=0) if compression == "GZIP" else zlib.compress(data)


def _drain(stream, size):
    out = bytearray()
    while True:
        chunk = stream.read(size)
        if not chunk:
            return bytes(out)
        out += chunk


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
@pytest.mark.parametrize("read_size", [1, 7, 4096, 1 << 20])
def test_stream_cut_delivers_every_intact_byte_then_data_loss(tmp_path, compression, read_size):
    """A text reader over a cut file gets every byte that decodes, then a DataLossError with the
    file and the decompressed offset - never a silent short read (ZLIB) or an EOFError (GZIP)."""
    text = _lines()
    blob = _compress(text, compression)
    p = tmp_path / "cut"
    p.write_bytes(blob[: len(blob) - 40])
    out = bytearray()
    with open_stream(str(p), compression) as s:
        with pytest.raises(TruncatedRecordError) as info:
            while True:
                chunk = s.read(read_size)
                assert chunk, "the stream ended without an error"
                out += chunk
    assert text.startswith(bytes(out)) and len(out) > len(text) - 400
    assert info.value.path == str(p) and info.value.offset == len(out)
    assert "ends before its end marker" in info.value.message


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_stream_damage_offsets_do_not_depend_on_read_sizes(tmp_path, compression):
    text = _lines(3000)
    blob = bytearray(_compress(text, compression))
    blob[len(blob) // 2] ^= 0x40
    p = tmp_path / "bad"
    p.write_bytes(bytes(blob))
    seen = set()
    for read_size in (3, 1000, 1 << 20):
        out = bytearray()
        with open_stream(str(p), compression) as s, pytest.raises(DataLossError) as info:
            while chunk := s.read(read_size):
                out += chunk
        assert info.value.offset == len(out) and info.value.path == str(p)
        seen.add((bytes(out), info.value.message))
    assert len(seen) == 1  # the same bytes and the same error whatever the read size


def test_stream_multi_member_empty_and_past_the_end(tmp_path):
    p = tmp_path / "m.gz"
    p.write_bytes(gzip.compress(b"abc\n") + gzip.compress(b"def\n"))
    with open_stream(str(p), "GZIP") as s:
        assert _drain(s, 3) == b"abc\ndef\n"
    (tmp_path / "empty").write_bytes(b"")
    for c in ("", "GZIP", "ZLIB"):
        with open_stream(str(tmp_path / "empty"), c) as s:
            assert s.read() == b""
    data = b"0123456789"
    for c in ("", "GZIP", "ZLIB"):
        q = tmp_path / f"d{c}"
        q.write_bytes(_compress(data, c) if c else data)
        with open_stream(str(q), c, start=4) as s:
            assert s.read() == data[4:] and s.pos == 10
        with open_stream(str(q), c, start=1) as s:  # short reads at the end, every compression
            assert [s.read(4), s.read(4), s.read(4), s.read(4)] == [b"1234", b"5678", b"9", b""]
        with open_stream(str(q), c, start=10) as s:
            assert s.read() == b""
        with pytest.raises(ValueError, match="start offset 11 is past the end of"):
            open_stream(str(q), c, start=11)
    with pytest.raises(ValueError, match="GZIP' or 'ZLIB'"):
        DecompressedStream(io.BytesIO(b""), "")


def _byte_by_byte(blob: bytes, compression: str) -> bytes:
    """Reference: every byte zlib can decode from ``blob``, fed one byte at a time."""
    d = zlib.decompressobj(31 if compression == "GZIP" else 15)
    out = []
    for i in range(len(blob)):
        try:
            out.append(d.decompress(blob[i : i + 1]))
        except zlib.error:
            break
        if d.eof:
            break
    return b"".join(out)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=4000) | st.builds(lambda n: b"ab" * n, st.integers(0, 30_000)),
       cut=st.floats(0, 1), flip=st.one_of(st.none(), st.integers(0, 10**6)),
       read_size=st.integers(1, 5000), compression=st.sampled_from(["GZIP", "ZLIB"]))
def test_stream_delivers_all_that_decodes_whatever_the_damage(data, cut, flip, read_size,
                                                              compression):
    blob = bytearray(gzip.compress(data, mtime=0) if compression == "GZIP" else zlib.compress(data))
    if flip is not None:
        blob[flip % len(blob)] ^= 1 + flip % 255
    blob = bytes(blob[: round(cut * len(blob))])
    out = bytearray()
    err = None
    s = DecompressedStream(io.BytesIO(blob), compression, "f")
    try:
        while chunk := s.read(read_size):
            out += chunk
    except DataLossError as exc:
        err = exc
    assert bytes(out) == _byte_by_byte(blob, compression)  # every decodable byte, no more
    if err is None:  # silence only for the intact stream (or harmless gzip header fields) or none
        assert bytes(out) == data or (not blob and not out)
    else:
        assert err.offset == len(out) == s.pos and err.path == "f"
    if flip is None and cut == 1:
        assert err is None
