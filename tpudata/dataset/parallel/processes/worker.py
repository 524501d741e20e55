"""The worker process of :class:`tpudata.dataset.parallel.processes.pool.ProcessMapper`.

A worker loads ``fn`` (pickled by the parent), then answers each message ``(task_id, payload,
freed)`` - a chunk of input elements, and the result segments the parent has read since - with
``("r", task_id, payload, fn_seconds)``, one entry per element: ``(True, result)`` or ``(False,
pickled exception, traceback text)``. ``None`` asks it to stop. A worker ends when its parent
dies (:func:`tpudata._processes.exit_with_parent`).
"""

from __future__ import annotations

import pickle
import signal
import time
import traceback
from collections.abc import Callable

from tpudata import _accel
from tpudata._processes import exit_with_parent
from tpudata import _shm_transport as _shm
from tpudata.errors import SharedMemoryFullError

__all__ = ["LEND_SLOTS", "RESULT_SLOTS", "STOP", "dumps", "main"]

# result slots the parent may hold as the memory of results it handed out (no copy); two more
# for results in flight, so that a worker rarely needs a one-off segment
LEND_SLOTS = 2
RESULT_SLOTS = LEND_SLOTS + 2
STOP = pickle.dumps(None)


def dumps(message: tuple) -> bytes:
    """A pipe message (payloads hold no out-of-band buffers: they are inline or in segments)."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def main(conn, fn_bytes: bytes, segment_prefix: str, parent_pid: int) -> None:
    """The worker's entry point: load ``fn``, then serve chunks until told to stop (see above)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    exit_with_parent(parent_pid)
    _accel.ensure_allocator_tuned()
    try:
        fn = pickle.loads(fn_bytes)
    except BaseException:
        _send_quietly(conn, ("fatal", None, traceback.format_exc()))
        return
    results = _shm.Sender(segment_prefix, slots=RESULT_SLOTS)
    inputs = _shm.Receiver()
    try:
        _serve(conn, fn, inputs, results)
    finally:
        inputs.close()
        results.close()


def _serve(conn, fn: Callable, inputs: _shm.Receiver, results: _shm.Sender) -> None:
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if message is None:
            return
        task_id, payload, freed = message
        for slot in freed:
            results.release(slot)
        start = time.perf_counter()
        entries = []
        for element in inputs.decode(payload):
            try:
                entries.append((True, fn(element)))
            except Exception as e:
                entries.append((False, _dumps_exception(e), traceback.format_exc()))
        seconds = time.perf_counter() - start
        try:
            try:
                out, _ = results.encode(entries)
            except SharedMemoryFullError:
                raise
            except Exception:
                out, _ = results.encode([_picklable_entry(e) for e in entries])
        except SharedMemoryFullError as e:  # the results find no room: each element says so
            error = (False, _dumps_exception(e), traceback.format_exc())
            out, _ = results.encode([error] * len(entries))
        if not _send_quietly(conn, ("r", task_id, out, seconds)):
            _shm.discard(out)
            return


def _picklable_entry(entry: tuple) -> tuple:
    """The entry, or an error entry in place of a result that does not pickle."""
    if not entry[0]:
        return entry
    try:
        pickle.dumps(entry[1], protocol=5, buffer_callback=lambda b: None)
        return entry
    except Exception as e:
        text = "the result of fn could not be pickled to send it back:\n" + traceback.format_exc()
        return (False, _dumps_exception(e), text)


def _dumps_exception(e: BaseException) -> bytes | None:
    try:
        data = pickle.dumps(e, protocol=5)
        pickle.loads(data)
        return data
    except Exception:
        return None


def _send_quietly(conn, message) -> bool:
    try:
        conn.send_bytes(dumps(message))
        return True
    except (OSError, EOFError):
        return False
