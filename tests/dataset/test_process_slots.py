"""Process-map results through the workers' shared-memory slots: held in the slot until their
turn, read in place (views of the slot) with a lifetime, copied out only when a worker would run
short of slots; every kind of result exact; restore, errors and a killed worker."""

from __future__ import annotations

import gc
import json
import mmap
import os
import signal

import numpy as np
import pytest

from tests.dataset.helpers import check_restore_everywhere, outputs, plain
from tests.dataset.procpool_fns import apply, ragged_big, varied, wide
from tpudata.dataset import Dataset
from tpudata import _shm_transport as _shm
from tpudata.dataset.parallel.processes.pool import ProcessMapper
from tpudata.errors import WorkerError

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="counts segments in /dev/shm")

N = _shm.INLINE_LIMIT  # bytes: a payload this large goes through a slot


def in_slot(a: np.ndarray) -> bool:
    """Whether ``a`` is a view of a mapped segment (read in place) rather than a copy."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return isinstance(getattr(a, "obj", a), mmap.mmap)


def segments(prefix: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"tpd{os.getpid()}{prefix}")]


@pytest.fixture
def pair(request):
    prefix = f"{request.node.name[-12:]}_"
    sender = _shm.Sender(f"tpd{os.getpid()}{prefix}", slots=4)
    receiver = _shm.Receiver(lend=2, slots=4)
    yield sender, receiver
    receiver.close()
    sender.close()
    gc.collect()
    assert not segments(prefix)


def test_held_payloads_are_read_in_place_at_their_turn(pair):
    sender, receiver = pair
    sent = [sender.encode({"x": np.full(N, k, np.uint8), "k": k}) for k in range(3)]
    held = [receiver.hold(payload) for payload, _ in sent]
    assert [slot for _, slot in sent] == [0, 1, 2]
    assert receiver.take_freed(need=1) == []  # a slot is left for the sender: nothing copied
    first, second = held[0].value(), held[1].value()
    assert held[0].value() is first  # read once
    assert in_slot(first["x"]) and in_slot(second["x"])  # lent: no copy
    third = held[2].value()  # two slots lent already: copied, and its slot is free at once
    assert not in_slot(third["x"]) and receiver.take_freed() == [2]
    assert [int(v["x"].sum()) for v in (first, second, third)] == [0, N, 2 * N]
    first["x"][:2] = 9  # lent arrays are ordinary writable arrays
    del first, held[0]  # (a Held keeps what it read)
    gc.collect()
    assert receiver.take_freed() == [0]
    assert second["k"] == 1 and int(second["x"][-1]) == 1


def test_take_freed_copies_held_payloads_out_only_where_the_sender_would_run_short(pair):
    sender, receiver = pair
    sent = [sender.encode({"x": np.full(N, k, np.uint8)}) for k in range(3)]
    held = [receiver.hold(payload) for payload, _ in sent]
    kept = held[0].value()  # lent: slot 0 stays with the receiver
    # the sender is about to write 2 payloads: 4 slots - 1 lent - 2 held leaves 1, so the oldest
    # held payload (slot 1) is copied out and its slot reported free
    assert receiver.take_freed(need=2) == [1]
    assert receiver.take_freed(need=2) == []
    copied, lent = held[1].value(), held[2].value()
    assert not in_slot(copied["x"]) and in_slot(lent["x"])
    sender.release(1)
    again, slot = sender.encode({"x": np.full(N, 7, np.uint8)})  # writes over slot 1
    assert slot == 1 and again[0] == "r"
    assert int(copied["x"].sum()) == N and int(lent["x"].sum()) == 2 * N
    assert int(kept["x"].sum()) == 0
    assert int(receiver.decode(again)["x"][0]) == 7


def test_held_payloads_dropped_settled_and_after_close(pair):
    sender, receiver = pair
    held = [receiver.hold(sender.encode({"x": np.full(N, k, np.uint8)})[0]) for k in range(3)]
    small = receiver.hold(sender.encode({"x": 5})[0])  # inline: holds no slot
    held[0].drop()
    held[0].drop()  # once
    assert receiver.take_freed() == [0]
    receiver.settle()  # the sender's slots are going away: copy out what is held
    assert sorted(receiver.take_freed()) == [1, 2]
    late = receiver.hold(sender.encode({"x": np.full(N, 3, np.uint8)})[0])
    receiver.close()
    sender.close()
    assert not in_slot(held[1].value()["x"]) and int(held[2].value()["x"].sum()) == 2 * N
    assert small.value() == {"x": 5}
    with pytest.raises(ValueError, match="closed"):
        late.value()
    late.drop()  # nothing to free any more


def test_streamed_results_are_views_of_the_workers_slots():
    sizes = [30_000 + 7 * i for i in range(40)]
    with ProcessMapper(apply, num_workers=1, max_in_flight=2) as mapper:
        for round_ in range(2):
            got = mapper.imap([("array", s) for s in sizes])
            for k, (position, value) in enumerate(got):
                assert position == k and value["x"].shape == (sizes[k],)
                assert (value["x"] == sizes[k] % 251).all() and int(value["n"]) == sizes[k]
                assert in_slot(value["x"]), (round_, k)  # read in place, never copied
                if round_ == 0 and k == 5:
                    got.close()  # abandoned with results still held: their slots come back
                    break
                del value


def test_results_of_every_kind_come_back_exact_and_stay_intact():
    tasks = list(range(60))
    with ProcessMapper(varied, num_workers=2, max_in_flight=16) as mapper:
        kept = [value for _, value in mapper.imap(tasks)]  # all held: no slot reused under them
    for task, value in zip(tasks, kept):
        expect = varied(task)
        assert _same(value, expect), task


def _same(a, b) -> bool:
    if isinstance(b, np.ndarray):
        return (type(a) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape
                and (plain(a) == plain(b)))
    if isinstance(b, dict):
        return type(a) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b)
    if isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _ragged_big(deterministic=True, n=45):
    return Dataset.range(n).map(ragged_big, num_parallel_calls=2, use_processes=True,
                                 deterministic=deterministic)


def test_process_map_outputs_of_changing_shapes_are_exact_and_kept_intact():
    expect = outputs(Dataset.range(240).map(ragged_big))
    with _ragged_big(n=240).iterator() as it:
        kept = list(it)
    assert [plain(e) for e in kept] == expect
    assert all(e["v"].dtype == np.float64 and e["w"].dtype == np.float32 for e in kept)


def test_process_map_restores_mid_stream_through_slots():
    out = check_restore_everywhere(_ragged_big, stride=11)
    assert [e["tag"] for e in out] == [f"e{i}".encode() for i in range(45)]
    everything = sorted(repr(e) for e in out)
    for k in (4, 30):  # completion order: exactly the elements not delivered before the state
        with _ragged_big(False).iterator() as it:
            before = [plain(next(it)) for _ in range(k)]
            state = json.loads(json.dumps(it.get_state()))
        with _ragged_big(False).iterator(state) as it:
            rest = [plain(e) for e in it]
        assert sorted(repr(e) for e in before + rest) == everything, k


def test_outputs_delivered_before_a_worker_is_killed_stay_intact():
    from tests.dataset.procpool_fns import wide_then_die

    from tpudata.dataset.parallel.processes.map import CHUNK_MAX, WINDOW

    got = []
    with Dataset.range(800).map(wide_then_die, num_parallel_calls=2,
                                use_processes=True).iterator() as it:
        with pytest.raises(WorkerError, match="killed by signal SIGKILL") as e:
            for x in it:
                got.append(x)  # views of the worker's slots, kept
    # element 600 killed its worker: those before it, but for the ones in flight, came
    assert e.value.exitcode == -signal.SIGKILL and 600 - WINDOW - CHUNK_MAX <= len(got) <= 600
    gc.collect()
    for n, x in enumerate(got):  # the dead worker's segments are gone; the views are not
        expect = wide(n)
        assert int(x["x"]) == n and np.array_equal(x["v"], expect["v"]), n
