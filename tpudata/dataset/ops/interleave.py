"""interleave: tf.data's cycle of ``cycle_length`` sub-datasets, ``block_length`` at a time.

The order is TensorFlow's (``InterleaveDatasetOp``): take ``block_length`` elements from the
sub-dataset in the current slot, move to the next slot; an exhausted sub-dataset is replaced by
the next input element's dataset in the same slot. With TF's documented example (cycle 2,
block 4, inputs 1..5 each repeated 6 times) the result is 1111 2222 11 22 3333 4444 33 44 5555 55.

When every slot holds at least ``block_length`` buffered elements, many whole rounds are emitted
at once with one index gather (no per-element Python). ``num_parallel_calls`` reads the open
sub-datasets on a bounded pool of reader threads (:mod:`tpudata.dataset.parallel.reader_pool`), and
opens the next ``cycle_length`` input elements' datasets ahead, so many small files cost no
thread each. The order stays TensorFlow's unless ``deterministic=False``: then, when the
current slot has nothing ready, the next slot (in cycle order) that has elements ready is read.

Small files give small pieces (a round of a few records, the end of a file). ``next()`` gathers
pieces while more are ready, up to the consumer's ``want`` elements or about ``GATHER_BYTES``,
and joins them with one gather, so the stages downstream (and ``get_state``) run per block, not
per file. Pieces whose column kinds or dtypes differ are never joined.
"""

from __future__ import annotations

import collections
import logging

import numpy as np

from tpudata.dataset.core import registry
from tpudata.dataset.core.base import BlockIterator, Cursor, Dataset, from_jsonable, jsonable
from tpudata.dataset.core.block import Block
from tpudata.dataset.core.iterator import wait_for
from tpudata.dataset.core.options import AUTOTUNE, is_autotune, worker_count
from tpudata.dataset.parallel.reader_pool import PooledReader, ReaderPool, WholeFileReader

logger = logging.getLogger(__name__)

MAX_ROUND_ELEMENTS = 65536
# next() gathers small pieces into one block up to the consumer's ``want`` elements or about
# this many bytes (estimated from the first piece's elements): a bound on what gathering holds
# beyond the readers' own buffers
GATHER_BYTES = 8 << 20
# while sub-datasets are small files read whole, open this many ahead (topped up in runs of
# half): a few pool tasks read them all (tpudata.tfrecord.whole: at most 1 MiB each)
WHOLE_AHEAD_FILES = 32


class InterleaveDataset(Dataset):
    def __init__(self, input_ds: Dataset, map_func, cycle_length=None, block_length=1,
                 num_parallel_calls=None, deterministic=None, use_processes: bool = False):
        super().__init__()
        if not callable(map_func):
            raise TypeError("interleave() needs a function returning a Dataset")
        if cycle_length is None or cycle_length == AUTOTUNE:
            cycle_length = worker_count(AUTOTUNE)  # one per core
        block_length = 1 if block_length is None else block_length  # TF's None means 1
        if int(cycle_length) < 1 or int(block_length) < 1:
            raise ValueError("cycle_length and block_length must be >= 1")
        self.input = input_ds
        self.fn = map_func
        self.cycle_length = int(cycle_length)
        self.block_length = int(block_length)
        self.use_processes = bool(use_processes)  # each file's dataset in a worker process
        # use_processes without num_parallel_calls: one worker process per core
        threads = worker_count(num_parallel_calls, default=AUTOTUNE if self.use_processes else 0)
        self.parallel = threads > 0
        self.threads = min(threads, self.cycle_length)
        self.deterministic = True if deterministic is None else bool(deterministic)
        self.deterministic_arg = deterministic  # None: Options.deterministic decides
        self.autotune = is_autotune(num_parallel_calls)

    _functions = ("fn",)

    def _make_iterator(self, ctx):
        return _InterleaveIterator(self, ctx)

    def cardinality(self) -> int:
        """Over a known file list (``list_files``, maybe sharded): the sum of the datasets'
        cardinalities, e.g. exact record counts from shard manifests; else UNKNOWN (tf.data
        always says UNKNOWN here). Calls the function once per file (it should only build a
        reader, as ``lambda f: TFRecordDataset(f)`` does)."""
        from tpudata.dataset.core.base import INFINITE, UNKNOWN

        listed = self.input._file_names()
        if listed is None:
            return UNKNOWN
        names = listed[0]
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

    def _storage_options_for(self, path: str, depth: int = 0) -> dict | None:
        """The options of the reader the function builds for ``path`` (it is called on the
        path, as ``cardinality()`` does: it should only build a reader), else the inputs'."""
        if depth <= 64:
            try:
                sub = self.fn(path.encode("utf-8"))
            except Exception:  # a function that needs more than a file name
                sub = None
            if isinstance(sub, Dataset):
                found = sub._storage_options_for(path, depth + 1)
                if found is not None:
                    return found
        return super()._storage_options_for(path, depth)

    def _spec(self):
        """Traced: the function is called on dummy elements and its dataset's spec read."""
        from tpudata.dataset.core.spec import traced_spec

        return traced_spec(self.fn, self.input, "interleave", returns_dataset=True)


def _same_kind(a: Block, b: Block) -> bool:
    """Whether ``b`` joins ``a`` without changing a column's kind, dtype or element shape."""
    if (a.tree is not b.tree and a.tree != b.tree) or (a.origin is None) != (b.origin is None):
        return False
    if a.origin is not None and a.origin.kind != b.origin.kind:
        return False
    for x, y in zip(a.leaves, b.leaves):
        if type(x) is not type(y):
            return False
        if isinstance(x, np.ndarray) and (x.dtype != y.dtype or x.shape[1:] != y.shape[1:]):
            return False
    return True


def _assemble(steps: list) -> Block:
    """One block from interleave steps ``([(block, start) per slot], rounds, bl)``: step
    elements run round by round, ``bl`` from each slot's block in turn. A single contiguous
    piece is a slice (no copy); else the used spans are joined and gathered once."""
    if len(steps) == 1 and len(steps[0][0]) == 1:
        ((block, start),), rounds, bl = steps[0]
        return block.slice(start, start + rounds * bl)
    spans: dict = {}  # id(block) -> [block, lo, hi]
    for entries, rounds, bl in steps:
        n = rounds * bl
        for block, start in entries:
            span = spans.get(id(block))
            if span is None:
                spans[id(block)] = [block, start, start + n]
            else:
                span[1] = min(span[1], start)
                span[2] = max(span[2], start + n)
    parts, base, off = [], {}, 0
    for key, (block, lo, hi) in spans.items():
        base[key] = off - lo
        parts.append(block.slice(lo, hi))
        off += hi - lo
    order = _order(steps, base)
    whole = Block.concat(parts)
    if len(order) == whole.n and bool((order[1:] > order[:-1]).all()):
        return whole  # the pieces were already in order
    return whole.take(order)


SMALL_ORDER = 4096  # up to this many elements, a step order is built with Python ints


def _order(steps: list, base: dict) -> np.ndarray:
    """The gather order of :func:`_assemble`: for each step, ``rounds`` rounds of ``bl``
    elements from each slot's block in turn (``base``: where each block's span starts in the
    joined block). Small orders (rounds over small files) in Python ints, large ones in numpy."""
    if sum(len(e) * r * bl for e, r, bl in steps) <= SMALL_ORDER:
        out: list = []
        for entries, rounds, bl in steps:
            starts = [base[id(block)] + start for block, start in entries]
            if len(starts) == 1:
                out.extend(range(starts[0], starts[0] + rounds * bl))
            elif bl == 1:
                for r in range(rounds):
                    out.extend([s + r for s in starts])
            else:
                for r in range(rounds):
                    for s in starts:
                        out.extend(range(s + r * bl, s + (r + 1) * bl))
        return np.array(out, dtype=np.int64)
    idx = []
    for entries, rounds, bl in steps:
        if len(entries) == 1:
            b = base[id(entries[0][0])] + entries[0][1]
            idx.append(np.arange(b, b + rounds * bl))
            continue
        b = np.array([base[id(block)] + start for block, start in entries], dtype=np.int64)
        within = (np.arange(rounds) * bl)[:, None, None] + np.arange(bl)[None, None, :]
        idx.append((b[None, :, None] + within).reshape(-1))
    return np.concatenate(idx)


class _Slot:
    __slots__ = ("index", "element", "it", "cursor", "_saved")

    def __init__(self, index, element, it):
        self.index = index
        self.element = element
        self.it = it
        self.cursor = Cursor(it)
        self._saved = None

    @property
    def saved_element(self):
        """The element in JSON form (for get_state), computed once when first asked for."""
        if self._saved is None:
            self._saved = (jsonable(self.element),)
        return self._saved[0]


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
        if ds.use_processes:  # (tpudata.dataset.parallel.processes.interleave)
            from tpudata.dataset.parallel.processes.interleave import ProcessReaderPool

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
        self._last = None  # (cycle_index, block_index, [(cursor, n)]) of the last piece
        self.last_whole = False  # the last dataset opened is read whole (WholeFileReader)
        self.whole_probed = False  # the first file's size was checked

    # -- slots -----------------------------------------------------------------------------------
    def _open(self, index: int, element) -> _Slot:
        if self.ds.use_processes:  # the function and its dataset run in a worker
            from tpudata.dataset.parallel.processes.interleave import ProcessReader

            return _Slot(index, element, ProcessReader(self.pool, element,
                                                       self.ctx.child(index).path))
        args = element if isinstance(element, tuple) and not hasattr(element, "_fields") else (element,)
        sub = self.ds.fn(*args)
        if not isinstance(sub, Dataset):
            raise TypeError(f"interleave's function must return a Dataset, not {type(sub).__name__}")
        it = sub._make_iterator(self.ctx.child(index, in_background=self.ds.parallel or None))
        if self.ds.parallel:
            prepare = getattr(it, "prepare_whole", None)  # one local TFRecord file
            job = prepare() if prepare is not None and not self.pool.whole_off else None
            if job is not None and not self.whole_probed:  # the first file tells the rest's size
                self.whole_probed = True
                if not job.fits():  # (shards of a dataset are alike: large ones read in blocks)
                    self.pool.whole_off, job = True, None
            self.last_whole = job is not None
            if job is not None:  # read whole, with the next files, by one pool task
                return _Slot(index, element, WholeFileReader(it, job, self.pool))
            # else two blocks (read buffers) ahead per open sub-dataset
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

    def _ahead_limit(self) -> int:
        """How many input elements' datasets to open ahead: ``cycle_length``; while they are
        small files read whole (and the first run of them was), ``WHOLE_AHEAD_FILES`` (of at
        most ``MAX_WHOLE_BYTES`` each)."""
        C = self.ds.cycle_length
        pool = self.pool
        return max(C, WHOLE_AHEAD_FILES) if self.last_whole and pool.whole_ok and not \
            pool.whole_off else C

    def _open_ahead(self) -> None:
        """Open the next input elements' datasets (files open in the pool meanwhile)."""
        limit = self._ahead_limit()
        if len(self.ahead) >= limit or (limit > self.ds.cycle_length and len(self.ahead) > limit // 2):
            return  # (whole small files: topped up in runs, read by few pool tasks)
        while len(self.ahead) < limit and not self.end_of_input:
            before = self.input.get_state()
            block = self.input.next_block(1)
            if block is None:
                self.end_of_input = True
                break
            slot = self._open(self.opened, next(block.elements()))
            self.opened += 1
            slot.it.max_blocks = 1  # one read buffer until it is in the cycle
            if not isinstance(slot.it, WholeFileReader):
                slot.it.start()
            self.ahead.append((slot, before))
        if not self.ds.use_processes:
            self.pool.send_whole()

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
        if None not in self.slots:
            if not self.end_of_input:
                self._open_ahead()
            return
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
                if not slot.it.producer_done:  # (a small file opened ahead is read already)
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
        """About ``want`` elements. Small pieces (rounds over small files, the ends of files)
        are gathered while more are ready and joined with one gather, so downstream stages
        and ``get_state`` run per block, not per file."""
        steps: list = []
        have = self._step(steps)
        if not have:
            return None
        if not self.exact_want and have < self.want:
            first = steps[0][0][0][0]
            # the byte bound, in elements: estimated from the first piece's block
            most = max(have, int(GATHER_BYTES * first.n / max(1, first.nbytes)))
            want = min(self.want, most)
            while have < want and self._more_ready():
                got = self._step(steps, extra=True)
                if got <= 0:
                    break
                if not self._joins(first, steps[-1][0]):
                    steps.pop()  # never mix column kinds or dtypes in one block
                    self._untake()
                    break
                have += got
        return _assemble(steps)

    @staticmethod
    def _joins(first: Block, entries) -> bool:
        for block, _ in entries:
            if block is not first and not _same_kind(first, block):
                return False
        return True

    def _more_ready(self) -> bool:
        """Whether another piece comes without waiting for a reader (parallel mode)."""
        if not self.ds.parallel:
            return True
        self._fill_slots()
        for slot in self.slots:
            if slot is not None:
                c = slot.cursor
                if not ((c.block is not None and c.pos < c.block.n) or slot.it.ready()):
                    return False
        return True

    def _untake(self) -> None:
        """Give back the last step (its cursors step back; the cycle position returns)."""
        cycle_index, block_index, cursors, n = self._last
        for cursor in cursors:
            cursor.pos -= n
        self.cycle_index, self.block_index = cycle_index, block_index

    def _step(self, steps: list, extra: bool = False) -> int:
        """Append the next step ``([(block, start) per slot], rounds, block_length)`` to
        ``steps`` (see :func:`_assemble`); returns its element count, 0 at the end.

        ``extra`` (gathering more than the first step): return -1 instead of asking a
        sub-iterator that hands out exactly what it is asked for (filter, batch, ...) for a
        block, so a step given back by :meth:`_untake` never holds such a block's elements.
        """
        free = self.ds.parallel and not self.deterministic
        while True:
            if self.ds.parallel:
                self._fill_slots()
            if free:
                self._pick_ready()
            if not free:
                fast = self._rounds(steps, extra)
                if fast:
                    return fast
            k = self.cycle_index
            slot = self.slots[k]
            if slot is not None:
                cursor = slot.cursor
                if extra and self.ds.parallel and not self._ready(slot):
                    return -1  # gathering more: never wait for a reader (a file opened just now)
                if extra and cursor.it.exact_want and (cursor.block is None
                                                       or cursor.pos >= cursor.block.n):
                    return -1
                avail = cursor.available()
                if avail:
                    take = min(avail, self.ds.block_length - self.block_index)
                    if free:
                        take = min(take, max(1, int(self.want)))
                    self._last = (self.cycle_index, self.block_index, (cursor,), take)
                    steps.append((((cursor.block, cursor.pos),), 1, take))
                    cursor.pos += take
                    self.block_index += take
                    if self.block_index == self.ds.block_length:
                        self._advance()
                    return take
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
                return 0
            else:
                self._advance()

    def _rounds(self, steps: list, extra: bool = False) -> int:
        """Whole rounds over the open slots at once, when every slot has enough buffered
        (and their blocks agree in kind): appends one step, returns its element count.
        ``extra``: 0 rather than wait for a reader."""
        if self.block_index != 0:
            return 0
        C, bl = self.ds.cycle_length, self.ds.block_length
        open_slots = []
        for i in range(C):
            slot = self.slots[(self.cycle_index + i) % C]
            if slot is None:
                if not self.end_of_input:
                    return 0
                continue
            cursor = slot.cursor
            if cursor.block is None or cursor.pos >= cursor.block.n:
                if slot.it.exact_want:  # (filter, scan, generators): a block read ahead here
                    return 0  # would sit unconsumed, and their states name no such block
                if extra and self.ds.parallel and not slot.it.ready():
                    return 0
                if not cursor._fill():
                    return 0  # exhausted: the step-by-step path closes it
            open_slots.append(cursor)
        if not open_slots:
            return 0
        rounds = min((c.block.n - c.pos) // bl for c in open_slots)
        rounds = min(rounds, max(1, MAX_ROUND_ELEMENTS // (bl * len(open_slots))))
        if rounds < 1:
            return 0
        first = open_slots[0].block
        if not all(_same_kind(first, c.block) for c in open_slots[1:]):
            return 0  # one slot at a time: the blocks must not be joined
        per = rounds * bl
        self._last = (self.cycle_index, self.block_index, open_slots, per)
        steps.append((tuple((c.block, c.pos) for c in open_slots), rounds, bl))
        for c in open_slots:
            c.pos += per
        return per * len(open_slots)


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

registry.provide(InterleaveDataset)
