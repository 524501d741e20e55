"""Batch outputs (image preprocessing, Dataset batches) reuse the memory of dropped earlier
batches, never of one still in use (or any view of it), from any thread; what is kept is bounded
and can be released."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tpudata.image as ti
from tpudata import _outpool
from tests.image.helpers import jpeg, mode  # noqa: F401

SHAPE = (6, 256, 256, 3)  # 4.7 MB of float32: above MIN_BYTES


@pytest.fixture(autouse=True)
def _empty_pool():
    _outpool.release_batch_memory()
    yield
    _outpool.release_batch_memory()


def test_memory_comes_back_only_when_every_view_is_gone():
    a = _outpool.empty(SHAPE, np.float32)
    assert a.shape == SHAPE and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    pointer = a.ctypes.data
    a[:] = 7.0
    views = [a[2], a.reshape(-1)[100:200], a[:, ::2], a.view(np.uint32)]
    del a
    b = _outpool.empty(SHAPE, np.float32)  # the views still use the first one's memory
    assert b.ctypes.data != pointer
    b[:] = -1.0
    assert all(np.all(v == 7.0) for v in views[:3]) and np.all(views[3] == np.float32(7.0).view(np.uint32))
    del views
    c = _outpool.empty(SHAPE, np.float32)
    assert c.ctypes.data == pointer  # now free: reused, not faulted in afresh
    small = _outpool.empty((4, 4), np.float32)
    assert small.flags.owndata  # small arrays are plain np.empty
    other = _outpool.empty(SHAPE, np.uint8)  # another size: its own memory
    assert other.ctypes.data not in (pointer, b.ctypes.data)


def test_what_is_kept_is_bounded_and_released():
    size = int(np.prod(SHAPE)) * 4
    arrays = [_outpool.empty(SHAPE, np.float32) for _ in range(_outpool.KEEP + 3)]
    del arrays
    assert _outpool.free_bytes() == _outpool.KEEP * size
    assert ti.release_batch_memory() == _outpool.KEEP * size
    assert _outpool.free_bytes() == 0


def test_threads_never_share_memory_in_use():
    errors = []

    def work(k: int) -> None:
        for i in range(30):
            a = _outpool.empty(SHAPE, np.float32)
            a[:] = k * 1000 + i
            held = a[1:3]  # a view outlives the array
            del a
            b = _outpool.empty(SHAPE, np.float32)
            b[:] = -1
            if not np.all(held == k * 1000 + i):
                errors.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _outpool.free_bytes() <= _outpool.KEEP * int(np.prod(SHAPE)) * 4


def test_preprocess_batch_outputs_are_recycled_and_exact(mode):  # noqa: F811
    images = [jpeg(300 + 5 * i, 280 - 3 * i, seed=i) for i in range(8)]  # 8 x 224 x 224 x 3 float32
    first = ti.resnet_preprocess_batch(images, False)
    expected = first.copy()
    pointer = first.ctypes.data
    kept = first[5]
    del first
    second = ti.resnet_preprocess_batch(images, False)  # `kept` still uses the first batch
    assert second.ctypes.data != pointer and np.array_equal(kept, expected[5])
    assert np.array_equal(second, expected)
    reused = {pointer, second.ctypes.data}
    del kept, second
    third = ti.resnet_preprocess_batch(images, False)
    assert third.ctypes.data in reused  # both are free again: one of them, not fresh memory
    assert np.array_equal(third, expected)
    into = np.empty_like(expected)
    assert ti.resnet_preprocess_batch(images, False, out=into) is into
    assert np.array_equal(into, expected)



def _row(i):
    return np.full(16384, i, np.float32)  # 64 KB: a batch of 128 is 8 MB


def test_dataset_batches_reuse_dropped_memory_and_never_overwrite_kept_batches():
    from tpudata import Dataset

    ds = Dataset.range(768).map(_row).batch(128)
    kept = list(ds)  # all six held: each has memory of its own, untouched by the later ones
    assert len({b.ctypes.data for b in kept}) == 6
    for k, b in enumerate(kept):
        rows = np.arange(128 * k, 128 * (k + 1), dtype=np.float32)[:, None]
        np.testing.assert_array_equal(b, np.broadcast_to(rows, (128, 16384)))
    del kept, b
    addresses = []
    for k, b in enumerate(ds):  # dropped as the loop goes: their memory serves later batches
        assert b[0, 0] == 128 * k and b[-1, -1] == 128 * k + 127
        addresses.append(b.ctypes.data)
    assert len(set(addresses)) < len(addresses)
    import tpudata

    kept_bytes = _outpool.free_bytes()
    assert kept_bytes >= 128 * 16384 * 4
    assert tpudata.release_batch_memory() == kept_bytes and _outpool.free_bytes() == 0


@pytest.mark.parametrize("arrays", [
    [np.ones((64, 8192), np.int32), np.ones((64, 8192), np.float64)],  # promoted as numpy does
    [np.ones((300, 4096), np.float32)] * 3,
    [np.ones((2, 3), np.float32)] * 2,  # small: numpy's own result
    [np.array([b"a", b"bc"], dtype=object)] * 2,
])
def test_concatenate_and_stack_are_numpys(arrays):
    got = _outpool.concatenate(arrays)
    assert got.dtype == np.concatenate(arrays).dtype and np.array_equal(got, np.concatenate(arrays))
    got = _outpool.stack(arrays)
    assert got.dtype == np.stack(arrays).dtype and np.array_equal(got, np.stack(arrays))


def test_concatenate_and_stack_raise_as_numpy_does():
    a, b = np.ones((600, 4096), np.float32), np.ones((600, 4095), np.float32)
    for fn, ref in ((_outpool.concatenate, np.concatenate), (_outpool.stack, np.stack)):
        with pytest.raises(ValueError) as want:
            ref([a, b])
        with pytest.raises(ValueError) as got:
            fn([a, b])
        assert str(got.value) == str(want.value)


def test_a_forked_child_does_not_inherit_a_held_lock_or_the_parents_free_memory():
    """A DataLoader worker forked while another thread holds the pool's lock can still allocate."""
    import subprocess
    import sys

    code = """if True:
        import os, threading
        import numpy as np
        from tpudata import _outpool
        _outpool.empty((8, 1 << 20), np.uint8)  # dropped at once: one free mapping in the parent
        held, done = threading.Event(), threading.Event()
        def hold():
            with _outpool._lock:
                held.set()
                done.wait()
        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            import signal
            signal.alarm(20)  # a child that hangs on the lock ends itself
            a = _outpool.empty((8, 1 << 20), np.uint8)
            a[:] = 1
            os._exit(0 if _outpool.free_bytes() == 0 and int(a.sum()) == 8 << 20 else 3)
        _, status = os.waitpid(pid, 0)
        done.set()
        t.join()
        print(os.waitstatus_to_exitcode(status), _outpool.free_bytes())
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", str(8 << 20)]
