"""The distributed transport's worker side: the slots it writes stay mapped (mapping one again
costs its page tables), those their consumer unlinked are let go, and the byte bound holds."""

from __future__ import annotations

import numpy as np
import pytest

from tpudata.dataset.remote import transport as tr


@pytest.fixture
def mapped(monkeypatch):
    """This process as a worker, with a fresh table of mapped slots."""
    monkeypatch.setattr(tr, "_MAPPED", type(tr._MAPPED)())
    yield tr._MAPPED
    for m in tr._MAPPED.values():
        m.close()


def _chunk(i: int) -> list:
    return [np.full(100_000, i, np.int64)]


def test_every_slot_a_worker_wrote_stays_mapped_and_reads_back(mapped):
    t = tr.Transport(1 << 20, max_slots=24)
    try:
        slots = [t.take() for _ in range(24)]
        for round_ in range(2):
            for i, slot in enumerate(slots):
                payload = tr.encode(_chunk(i + round_), t.marker, slot)
                assert payload[0] == "r" and payload[1] == slot[0]
                back = t.decode(payload)
                assert int(back[0][0]) == i + round_ and int(back[0].sum()) == (i + round_) * 100_000
                del back
            if round_ == 0:
                first = {name: id(m) for name, m in mapped.items()}
        assert set(mapped) == {name for name, _ in slots}  # all 24 (more than the old 16)
        assert {name: id(m) for name, m in mapped.items()} == first  # none mapped a second time
    finally:
        t.close()


def test_slots_their_consumer_unlinked_are_let_go_at_the_next_new_one(mapped):
    t = tr.Transport(1 << 20, max_slots=8)
    try:
        slots = [t.take() for _ in range(4)]
        for i, slot in enumerate(slots[:3]):
            tr.encode(_chunk(i), t.marker, slot)
        t.retire(slots[0])  # the consumer drops two slots (unlinked now)
        t.retire(slots[1])
        assert slots[0][0] in mapped  # still held until this worker maps a new one
        tr.encode(_chunk(3), t.marker, slots[3])
        assert set(mapped) == {slots[2][0], slots[3][0]}
    finally:
        t.close()


def test_the_mapped_bytes_stay_under_the_bound(mapped, monkeypatch):
    t = tr.Transport(1 << 20, max_slots=8)
    try:
        slots = [t.take() for _ in range(6)]
        monkeypatch.setattr(tr, "MAX_MAPPED_BYTES", 3 * slots[0][1])
        for i, slot in enumerate(slots):
            tr.encode(_chunk(i), t.marker, slot)
        assert list(mapped) == [name for name, _ in slots[3:]]  # the least recently used went
        back = t.decode(tr.encode(_chunk(9), t.marker, slots[0]))  # mapped again: still right
        assert int(back[0][-1]) == 9
        del back
    finally:
        t.close()
