"""The shared-memory transport's flag slots (the torch bridge's way: the receiver frees a slot by
its flag byte) and its pieces (Rows.of, Strings): what arrives equals what was sent, is the
receiver's own memory, and slots are reused, bounded and unlinked."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from tpudata import _shm_transport as t
from tpudata.dataset.core.columns import BytesColumn

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm listing here")


def _segments(prefix: str) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))


@pytest.fixture
def pair():
    prefix = f"tpd{os.getpid()}flag_"
    sender = t.Sender(prefix, slots=2, flag=True, max_slots=3)
    receiver = t.Receiver(keep=2)
    yield sender, receiver, prefix
    receiver.close()
    sender.close()
    assert _segments(prefix) == []


@pytest.fixture
def by_message():
    """A sender whose slots are freed by message (the process map's), for comparison."""
    prefix = f"tpd{os.getpid()}msg_"
    sender = t.Sender(prefix)
    yield sender
    sender.close()
    assert t.sweep(prefix) == []


def test_a_flag_slot_is_reused_once_the_receiver_has_read_it(pair):
    sender, receiver, prefix = pair
    x = np.arange(20_000, dtype=np.int64)
    p1, s1 = sender.encode({"x": x})
    p2, s2 = sender.encode({"x": x + 1})
    assert p1[0] == p2[0] == "f" and s1 != s2
    out = receiver.decode(p1)
    assert np.array_equal(out["x"], x) and out["x"].flags.writeable
    p3, s3 = sender.encode({"x": x + 2})
    assert s3 == s1 and p3[2] == p1[2]  # the same segment, read and free again
    assert np.array_equal(out["x"], x)  # what was decoded is not the slot
    p4, _ = sender.encode({"x": x + 3})  # slots 0 and 1 held: a third (max_slots)
    p5, _ = sender.encode({"x": x + 4})  # all three held: inline
    assert p4[0] == "f" and p5[0] == "i" and len(_segments(prefix)) == 3
    for k, p in [(1, p2), (2, p3), (3, p4), (4, p5)]:
        assert np.array_equal(receiver.decode(p)["x"], x + k)
    big = np.arange(200_000, dtype=np.int64)  # larger than any slot: one grows
    p6, _ = sender.encode({"x": big})
    assert p6[0] == "f" and np.array_equal(receiver.decode(p6)["x"], big)
    assert len(_segments(prefix)) == 3


def test_the_receiver_keeps_a_bounded_number_of_slots_mapped(pair):
    sender, receiver, _ = pair
    payloads = [sender.encode(np.full(10_000, k))[0] for k in range(3)]
    for k, p in enumerate(payloads):
        assert receiver.decode(p)[0] == k
    assert len(receiver._named) == 2  # keep=2: the oldest was unmapped


def test_a_dropped_or_discarded_payload_frees_its_slot(pair):
    sender, receiver, _ = pair
    a, slot_a = sender.encode(np.zeros(10_000))
    b, slot_b = sender.encode(np.zeros(10_000))
    receiver.drop(a)
    t.discard(b)
    again = {sender.encode(np.ones(10_000))[1], sender.encode(np.ones(10_000))[1]}
    assert again == {slot_a, slot_b}


def test_rows_of_one_array_arrives_contiguous_and_writable_in_every_kind_of_payload(pair,
                                                                                   by_message):
    sender, receiver, _ = pair
    strided = np.arange(40_000, dtype=np.float32).reshape(200, 200)[:, ::2]
    readonly = np.frombuffer(np.arange(5_000, dtype=np.int32).tobytes(), dtype=np.int32)
    for value in (strided, readonly, np.arange(6.0)):
        for payload in (sender.encode(t.Rows.of(value))[0], by_message.encode(t.Rows.of(value))[0]):
            out = receiver.decode(payload)
            if payload[1] is not None and payload[0] == "r":
                by_message.release(payload[1])
            assert np.array_equal(out, value) and out.dtype == value.dtype
            assert out.flags.c_contiguous and out.flags.writeable
    assert np.array_equal(pickle.loads(pickle.dumps(t.Rows.of(strided))), strided)


@pytest.mark.parametrize("as_values", [False, True])
def test_strings_arrive_as_bytes_or_one_array_from_lists_arrays_and_parsed_columns(
        pair, by_message, as_values):
    sender, receiver, _ = pair
    rng = np.random.default_rng(3)
    items = [rng.bytes(int(n)) for n in rng.integers(0, 30_000, 9)] + [b""]
    column = BytesColumn.concat([BytesColumn.from_bytes(items[:4]),
                                 BytesColumn.from_bytes(items[4:])])
    grid = np.array(items, dtype=object).reshape(2, 5)
    fixed = np.array([b"ab", b"c", b""] * 700, dtype="S2")
    cases = [(items, items), (column, items), (grid, grid.tolist()),
             (fixed, fixed.astype(object).tolist()), ([b"x"] * 3, [b"x"] * 3), ([], [])]
    for value, want in cases:
        strings = t.Strings.of(value, as_values=as_values)
        flat = np.array(want, dtype=object).ravel().tolist()
        for payload in (sender.encode({"s": strings, "n": 1})[0],
                        by_message.encode({"s": strings})[0]):
            got = receiver.decode(payload)["s"]
            if payload[0] == "r":
                by_message.release(payload[1])
            if as_values:
                assert isinstance(got, t.StringValues) and got.values.flags.writeable
                assert got.tolist() == flat and got.offsets[-1] == sum(map(len, flat))
            else:
                assert got == want
        back = pickle.loads(pickle.dumps(strings))  # pickled any other way: the same
        assert back.tolist() == flat if as_values else back == want
    assert t.Strings.of([b"a", None]) is None and t.Strings.of(np.array([b"a", 3], object)) is None


def test_a_payload_that_fails_to_write_leaves_its_slot_free(pair):
    sender, receiver, prefix = pair
    bad = t.Rows([np.zeros(5_000), np.zeros(10)])  # rows of two shapes: writing them fails
    with pytest.raises(ValueError):
        sender.encode(bad)
    payloads = [sender.encode(np.full(5_000, k))[0] for k in range(2)]
    assert [p[1] for p in payloads] == [0, 1] and len(_segments(prefix)) == 2
    assert [receiver.decode(p)[0] for p in payloads] == [0, 1]
