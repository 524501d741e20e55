"""interleave: tf.data's cycle of ``cycle_length`` sub-datasets, ``block_length`` at a time.

The order is TensorFlow's (``InterleaveDatasetOp``): take ``block_length`` elements from the
sub-dataset in the current slot, move to the next slot; an exhausted sub-dataset is replaced by
the next input element's dataset in the same slot. With TF's documented example (cycle 2,
block 4, inputs 1..5 each repeated 6 times) the result is 1111 2222 11 22 3333 4444 33 44 5555 55.

When every slot holds at least ``block_length`` buffered elements, many whole rounds are emitted
at once with one index gather (no per-element Python). ``num_parallel_calls`` reads the open
sub-datasets on a bounded pool of reader threads (:mod:`tpudata.dataset.reader_pool`), and
opens the next ``cycle_length`` input elements' datasets ahead, so many small files cost no
thread each. The order stays TensorFlow's unless ``deterministic=False``: then, when the
current slot has nothing ready, the next slot (in cycle order) that has elements ready is read.
"""

from __future__ import annotations

import collections
import logging
import os

import numpy as np

from tpudata.dataset.base import BlockIterator, Cursor, Dataset, from_jsonable, jsonable
from tpudata.dataset.block import Block
from tpudata.dataset.iterator import wait_for
from tpudata.dataset.reader_pool import PooledReader, ReaderPool

logger = logging.getLogger(__name__)

AUTOTUNE = -1
MAX_ROUND_ELEMENTS = 65536


class InterleaveDataset(Dataset):
    def __init__(self, input_ds: Dataset, map_func, cycle_length=None, block_length=1,
                 num_parallel_calls=None, deterministic=None, use_processes: bool = False):
        super().__init__()
        if not callable(map_func):
            raise TypeError("interleave() needs a function returning a Dataset")
        cpus = os.cpu_count() or 2
        if cycle_length is None or cycle_length == AUTOTUNE:
            cycle_length = cpus
        block_length = 1 if block_length is None else block_length  # TF's None means 1
        if int(cycle_length) < 1 or int(block_length) < 1:
            raise ValueError("cycle_length and block_length must be >= 1")
        self.input = input_ds
        self.fn = map_func
        self.cycle_length = int(cycle_length)
        self.block_length = int(block_length)
        threads = num_parallel_calls
        self.use_processes = bool(use_processes)  # each file's dataset in a worker process
        if self.use_processes and not threads:
            threads = cpus
        self.parallel = bool(threads) and threads != 0
        self.threads = 0
        if self.parallel:
            n = cpus if int(threads) == AUTOTUNE else int(threads)
            if n < 1:
                raise ValueError(f"num_parallel_calls must be >= 1, None or AUTOTUNE, not {threads}")
            self.threads = min(n, self.cycle_length)
        self.deterministic = True if deterministic is None else bool(deterministic)
        self.deterministic_arg = deterministic  # None: Options.deterministic decides
        self.autotune = threads is not None and int(threads) == AUTOTUNE

    _functions = ("fn",)

    def _make_iterator(self, ctx):
        return _InterleaveIterator(self, ctx)

    def cardinality(self) -> int:
        """Over a known file list (``list_files``, maybe sharded): the sum of the datasets'
        cardinalities, e.g. exact record counts from shard manifests; else UNKNOWN (tf.data
        always says UNKNOWN here). Calls the function once per file (it should only build a
        reader, as ``lambda f: TFRecordDataset(f)`` does)."""
        from tpudata.dataset.base import INFINITE, UNKNOWN

        names = _known_files(self.input)
        if names is None:
            return UNKNOWN
        total = 0
        for name in names:
            try:
                sub = self.fn(name.encode("utf-8"))
            except Exception:  # a function that needs more than a file name
                return UNKNOWN
            c = sub.cardinality() if isinstance(sub, Dataset) else UNKNOWN
            if c < 0:
                return INFINITE if c == INFINITE else UNKNOWN
            total += c
        return total

    def _spec(self):
        """Traced: the function is called on dummy elements and its dataset's spec read."""
        from tpudata.dataset.spec import traced_spec

        return traced_spec(self.fn, self.input, "interleave", returns_dataset=True)


def _known_files(ds) -> list[str] | None:
    """The file names a file-list dataset yields (in some order), or None when unknown."""
    from tpudata.dataset.shard import ShardDataset
    from tpudata.dataset.sources import FileListDataset

    if isinstance(ds, FileListDataset):
        return list(ds.files)
    if isinstance(ds, ShardDataset) and isinstance(ds.input, FileListDataset):
        return list(ds.input.files)[ds.index::ds.num_shards]
    files = getattr(ds, "files", None)  # a shuffled list: the same files in another order
    if files is not None and getattr(ds, "unseeded_file_shuffle", None) is not None:
        return list(files)
    return None


class _Slot:
    __slots__ = ("index", "element", "it", "cursor", "saved_element")

    def __init__(self, index, element, it):
        self.index = index
        self.element = element
        self.it = it
        self.cursor = Cursor(it)
        self.saved_element = jsonable(element)  # for get_state, computed once


class _InterleaveIterator(BlockIterator):
    def __init__(self, ds: InterleaveDataset, ctx):
        self.ds = ds
        self.ctx = ctx
        self.input_it = ds.input._make_iterator(ctx)
        self.input = Cursor(self.input_it)
        self.slots: list[_Slot | None] = [None] * ds.cycle_length
        self.cycle_index = 0
        self.block_index = 0
        self.end_of_input = False
        self.opened = 0  # input elements turned into sub-datasets so far
        options = ctx.options
        self.deterministic = ds.deterministic if (ds.deterministic_arg is not None or
                                                  options.deterministic is None) \
            else options.deterministic
        threads = options.threads(ds.threads, ds.autotune)
        if ds.autotune:
            threads = min(threads, ds.cycle_length)
        if ds.use_processes:  # (tpudata.dataset.procinterleave)
            from tpudata.dataset.procinterleave import ProcessReaderPool

            self.pool = ProcessReaderPool(ds.fn, threads, ctx)
        else:
            self.pool = ReaderPool(threads, ctx) if ds.parallel else None
        # parallel mode: datasets of the next input elements, opened ahead:
        # (slot, input cursor state before its element)
        self.ahead: collections.deque = collections.deque()
        # deterministic=False: which slot serves next depends on timing, so a restore cannot
        # replay "snapshot + n elements"; blocks then hold at most ``want`` elements of one slot
        # and the state after each block is exact on its own
        self.exact_want = ds.parallel and not self.deterministic

    # -- slots -----------------------------------------------------------------------------------
    def _open(self, index: int, element) -> _Slot:
        if self.ds.use_processes:  # the function and its dataset run in a worker
            from tpudata.dataset.procinterleave import ProcessReader

            return _Slot(index, element, ProcessReader(self.pool, element,
                                                       self.ctx.child(index).path))
        args = element if isinstance(element, tuple) and not hasattr(element, "_fields") else (element,)
        sub = self.ds.fn(*args)
        if not isinstance(sub, Dataset):
            raise TypeError(f"interleave's function must return a Dataset, not {type(sub).__name__}")
        it = sub._make_iterator(self.ctx.child(index, in_background=self.ds.parallel or None))
        if self.ds.parallel:  # two blocks (read buffers) ahead per open sub-dataset
            it = PooledReader(it, self.pool, max_blocks=2, max_bytes=64 << 20)
        return _Slot(index, element, it)

    def _pull(self) -> _Slot | None:
        """The next input element's slot: opened ahead, or opened now; None at the end."""
        if self.ahead:
            return self.ahead.popleft()[0]
        if self.end_of_input:
            return None
        block = self.input.next_block(1)
        if block is None:
            self.end_of_input = True
            return None
        slot = self._open(self.opened, next(block.elements()))
        self.opened += 1
        return slot

    def _open_ahead(self) -> None:
        """Open the next input elements' datasets (files open in the pool meanwhile)."""
        while len(self.ahead) < self.ds.cycle_length and not self.end_of_input:
            before = self.input.get_state()
            block = self.input.next_block(1)
            if block is None:
                self.end_of_input = True
                return
            slot = self._open(self.opened, next(block.elements()))
            self.opened += 1
            slot.it.max_blocks = 1  # one read buffer until it is in the cycle
            slot.it.start()
            self.ahead.append((slot, before))

    def _close_slot(self, k: int) -> None:
        slot = self.slots[k]
        if slot is not None:
            slot.it.close()
            self.slots[k] = None

    def _advance(self) -> None:
        self.block_index = 0
        self.cycle_index = (self.cycle_index + 1) % self.ds.cycle_length

    def _fill_slots(self) -> None:
        """Parallel mode: open every empty slot now, so all sub-datasets read at once.

        Input elements go to empty slots in the order the sequential algorithm would visit
        them (from the current cycle position on), so the output order does not change.
        """
        C = self.ds.cycle_length
        for i in range(C):
            if self.end_of_input and not self.ahead:
                break
            k = (self.cycle_index + i) % C
            if self.slots[k] is None:
                slot = self._pull()
                if slot is None:
                    break
                slot.it.max_blocks = 2
                slot.it.start()
                self.slots[k] = slot
        self._open_ahead()

    # -- iteration -------------------------------------------------------------------------------
    def _ready(self, slot: _Slot) -> bool:
        c = slot.cursor
        return (c.block is not None and c.pos < c.block.n) or slot.it.ready()

    def _pick_ready(self) -> None:
        """deterministic=False: move to the first slot (in cycle order) with elements ready."""
        C = self.ds.cycle_length
        while True:
            for i in range(C):
                k = (self.cycle_index + i) % C
                slot = self.slots[k]
                if slot is not None and self._ready(slot):
                    if i:
                        self.cycle_index, self.block_index = k, 0
                    return
            if all(s is None for s in self.slots):
                return
            for slot in self.slots:
                if slot is not None:
                    slot.it.start()  # make sure every open slot is reading
            if self.ds.use_processes:  # nothing ready anywhere: wait for a worker's answer
                self.pool.wait_until(lambda: any(s is not None and s.it.ready() for s in self.slots))
                continue
            with self.pool.cond:  # nothing ready anywhere: wait for the first read to finish
                wait_for(self.pool.cond, lambda: any(
                    s is not None and s.it.ready() for s in self.slots), self.ctx)

    def next(self):
        free = self.ds.parallel and not self.deterministic
        while True:
            if self.ds.parallel:
                self._fill_slots()
            if free:
                self._pick_ready()
            if not free:
                fast = self._rounds()
                if fast is not None:
                    return fast
            k = self.cycle_index
            slot = self.slots[k]
            if slot is not None:
                avail = slot.cursor.available()
                if avail:
                    take = min(avail, self.ds.block_length - self.block_index)
                    if free:
                        take = min(take, max(1, int(self.want)))
                    out = slot.cursor.next_block(take)
                    self.block_index += take
                    if self.block_index == self.ds.block_length:
                        self._advance()
                    return out
                self._close_slot(k)
                self._advance()
            elif not self.end_of_input:
                block = self.input.next_block(1)
                if block is None:
                    self.end_of_input = True
                    continue
                element = next(block.elements())
                self.slots[k] = self._open(self.opened, element)
                self.opened += 1
            elif all(s is None for s in self.slots):
                return None
            else:
                self._advance()

    def _rounds(self) -> Block | None:
        """Whole rounds over the open slots at once, when every slot has enough buffered."""
        if self.block_index != 0:
            return None
        C, bl = self.ds.cycle_length, self.ds.block_length
        order = [(self.cycle_index + i) % C for i in range(C)]
        open_slots = []
        for k in order:
            slot = self.slots[k]
            if slot is None:
                if not self.end_of_input:
                    return None
                continue
            if slot.cursor.block is None or slot.cursor.pos >= slot.cursor.block.n:
                if slot.it.exact_want:  # (filter, scan, generators): a block read ahead here
                    return None  # would sit unconsumed, and their states name no such block
                if not slot.cursor._fill():
                    return None  # exhausted: the step-by-step path closes it
            open_slots.append(slot)
        if not open_slots:
            return None
        rounds = min((s.cursor.block.n - s.cursor.pos) // bl for s in open_slots)
        rounds = min(rounds, max(1, MAX_ROUND_ELEMENTS // (bl * len(open_slots))))
        if rounds < 1:
            return None
        per = rounds * bl
        parts = [s.cursor.next_block(per) for s in open_slots]
        if len(parts) == 1:
            return parts[0]
        m = len(parts)
        q = np.arange(rounds)[:, None, None]
        s = np.arange(m)[None, :, None]
        j = np.arange(bl)[None, None, :]
        perm = (s * per + q * bl + j).reshape(-1)
        return Block.concat(parts).take(perm)

    # -- state -----------------------------------------------------------------------------------
    def get_state(self):
        slots = []
        for slot in self.slots:
            if slot is None:
                slots.append(None)
            else:
                slots.append({"index": slot.index, "element": slot.saved_element,
                              "cursor": slot.cursor.get_state()})
        if self.ahead:  # datasets opened ahead are opened again after a restore
            first, before = self.ahead[0]
            return {"input": before, "cycle_index": self.cycle_index,
                    "block_index": self.block_index, "end_of_input": False,
                    "opened": first.index, "slots": slots}
        return {"input": self.input.get_state(), "cycle_index": self.cycle_index,
                "block_index": self.block_index, "end_of_input": self.end_of_input,
                "opened": self.opened, "slots": slots}

    def _close_ahead(self) -> None:
        while self.ahead:
            self.ahead.popleft()[0].it.close()

    def set_state(self, state):
        for k in range(len(self.slots)):
            self._close_slot(k)
        self._close_ahead()
        self.input.set_state(state["input"])
        self.cycle_index = int(state["cycle_index"])
        self.block_index = int(state["block_index"])
        self.end_of_input = bool(state["end_of_input"])
        self.opened = int(state["opened"])
        for k, saved in enumerate(state["slots"]):
            if saved is None:
                continue
            element = from_jsonable(saved["element"])
            if isinstance(element, list):
                element = tuple(element)
            slot = self._open(int(saved["index"]), element)
            slot.cursor.set_state(saved["cursor"])
            self.slots[k] = slot

    def close(self):
        for k in range(len(self.slots)):
            self._close_slot(k)
        self._close_ahead()
        if self.pool is not None:
            self.pool.close()
        self.input_it.close()
