"""The byte edits of tests/data/make_hostile_jpeg_golden.py, rebuilt by tests/image/test_hostile_jpeg.py."""

XOR, SET_FF, TRUNCATE = 0, 1, 2


def apply_edit(data: bytes, kind: int, pos: int, value: int) -> bytes:
    """``data`` with one edit: a byte XORed with ``value``, a byte set to 0xFF, or cut at ``pos``."""
    if kind == TRUNCATE:
        return data[:pos]
    b = bytearray(data)
    b[pos] = b[pos] ^ value if kind == XOR else 0xFF
    return bytes(b)
