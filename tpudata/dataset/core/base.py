"""The fluent :class:`Dataset`: an immutable, picklable description of a pipeline.

Iterating it builds a chain of iterators (:mod:`tpudata.dataset.core.iterator`); each op lives in its
own module and is imported lazily by the method that builds it.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Callable

import numpy as np

from tpudata._keywords import strict_keywords
from tpudata._pickling import picklable_function
from tpudata.dataset.core import registry
from tpudata.dataset.core.iterator import BlockIterator, Cursor, IterContext, Iterator
from tpudata.dataset.core.state import from_jsonable, jsonable

logger = logging.getLogger(__name__)

INFINITE = -1
UNKNOWN = -2
_NOTHING = object()


class Dataset:
    """A tf.data-style input pipeline. Build with the sources below, chain transformations.

    >>> ds = Dataset.range(10).shuffle(4, seed=1).batch(3, drop_remainder=True)
    >>> [b.shape for b in ds]
    [(3,), (3,), (3,)]
    """

    _functions: tuple = ()  # attributes holding user functions (pickled specially)

    def __init__(self):
        self._lock = threading.Lock()
        self._iterations = 0

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"]  # a copy counts its iterations on from here
        for name in self._functions:
            if state.get(name) is not None:
                state[name] = picklable_function(state[name], f"a pickled Dataset ({type(self).__name__})")
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        """The pipeline, source first: ``<Dataset range(n=10) -> shuffle(buffer_size=4, seed=1)>``.

        Built from the ops' arguments only: it never runs the pipeline or user functions."""
        parts = []
        ds = self
        while isinstance(ds, Dataset) and len(parts) < 64:
            parts.append(ds._describe())
            ds = ds.__dict__.get("input")
        return "<Dataset " + " -> ".join(reversed(parts)) + ">"

    _REPR_FIELDS = ("n", "count", "batch_size", "sizes", "drop_remainder", "buffer_size", "seed",
                    "num_shards", "index", "cycle_length", "block_length", "size", "shift",
                    "stride", "start", "workers", "deterministic")

    def _describe(self) -> str:
        """This op, as ``name(arg=value, ...)`` (for ``repr``)."""
        name = self.__dict__.get("name")
        if isinstance(name, str) and "(" in name:  # map(fn), filter(fn), scan(fn), ...
            return name
        op = type(self).__name__.lstrip("_")
        op = op[:-len("Dataset")] if op.endswith("Dataset") and op != "Dataset" else op
        op = re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", op).lower()  # TFRecordFiles: tf_record_files
        args = []
        files = self.__dict__.get("files")
        if files is not None:
            args.append(f"{len(files)} files")
        nested = self.__dict__.get("datasets")
        if nested is not None:
            args.append(f"{len(nested)} datasets")
        for key in self._REPR_FIELDS:
            if key in self.__dict__ and not (key == "n" and files is not None):
                value = self.__dict__[key]
                if isinstance(value, (bool, int, float, str, list, tuple, type(None))) or \
                        isinstance(value, np.generic):
                    args.append(f"{key}={value!r}")
        return f"{op}({', '.join(args)})"

    # -- running ---------------------------------------------------------------------------------
    def _make_iterator(self, ctx: IterContext) -> BlockIterator:
        raise NotImplementedError

    def _next_iteration(self) -> int:
        with self._lock:
            k = self._iterations
            self._iterations += 1
        return k

    def __iter__(self) -> Iterator:
        return Iterator(self, self._next_iteration())

    def iterator(self, state: dict | None = None) -> Iterator:
        """A new iterator, positioned at ``state`` (from ``Iterator.get_state()``) if given."""
        return Iterator(self, self._next_iteration(), state)

    def as_numpy_iterator(self) -> Iterator:
        """Elements as numpy values (they already are; for tf.data compatibility)."""
        return iter(self)

    def cardinality(self) -> int:
        """Number of elements; ``INFINITE`` (-1) or ``UNKNOWN`` (-2) as in tf.data."""
        return UNKNOWN

    def _spec(self):
        """This op's declared element spec from its input's (None: it cannot say)."""
        return None

    def _file_names(self) -> tuple | None:
        """When this dataset yields file names (``list_files``): ``(names, order)``, order
        being "listed" (in this order), "seeded" or "unseeded" (shuffled); else None."""
        return None

    def _storage_options_for(self, path: str, depth: int = 0) -> dict | None:
        """The ``storage_options`` of the reader of ``path`` in this pipeline, or None. By
        default the inputs are asked in turn; a reader answers for its own files."""
        from tpudata.dataset.core.graph import inputs

        if depth > 64:
            return None
        for child in inputs(self):
            found = child._storage_options_for(path, depth + 1)
            if found is not None:
                return found
        return None

    @property
    def element_spec(self):
        """Structure of :class:`TensorSpec` (static shapes and dtypes) of the elements."""
        from tpudata.dataset.core.spec import element_spec_of

        return element_spec_of(self)

    # -- sources ---------------------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors) -> "Dataset":
        """Elements are the slices of ``tensors`` (arrays, tuples/dicts of arrays) along axis 0."""
        TensorSlicesDataset = registry.lookup("TensorSlicesDataset")

        return TensorSlicesDataset(tensors)

    @staticmethod
    def from_tensors(tensors) -> "Dataset":
        """A dataset of exactly one element, ``tensors``."""
        TensorSlicesDataset = registry.lookup("TensorSlicesDataset")

        return TensorSlicesDataset(tensors, single=True)

    @staticmethod
    def range(*args, dtype=np.int64) -> "Dataset":
        """``Dataset.range(stop)`` / ``(start, stop[, step])`` like Python's range."""
        RangeDataset = registry.lookup("RangeDataset")

        return RangeDataset(*args, dtype=dtype)

    @staticmethod
    def counter(start: int = 0, step: int = 1, dtype=np.int64) -> "Dataset":
        """``start, start + step, ...`` without end (``Dataset.range`` with no stop)."""
        CounterDataset = registry.lookup("CounterDataset")

        return CounterDataset(start, step, dtype)

    @staticmethod
    def random(seed: int | None = None, rerandomize_each_iteration: bool | None = None):
        """Random int64 values without end (numpy's PCG64, not TF's Philox: a seed gives
        another stream than TF's); the same each iteration unless
        ``rerandomize_each_iteration=True``."""
        RandomDataset = registry.lookup("RandomDataset")

        return RandomDataset(seed, rerandomize_each_iteration)

    @staticmethod
    @strict_keywords
    def list_files(file_pattern, shuffle: bool | None = None, seed: int | None = None,
                   storage_options: dict | None = None):
        """Files matching ``file_pattern`` (a glob or list of globs). As in TF they are shuffled
        unless ``shuffle=False`` (then sorted like TF's MatchingFiles); give ``seed`` when
        several hosts ``shard()`` the list, so that they agree on the order."""
        list_files = registry.lookup("list_files")

        return list_files(file_pattern, shuffle, seed, storage_options)

    @staticmethod
    def from_generator(generator: Callable, output_types=None, output_shapes=None, args=None,
                       output_signature=None) -> "Dataset":
        """Elements from ``generator(*args)`` (a callable returning an iterable), converted to
        ``output_signature`` (a structure of TensorSpec; tf.TensorSpec works too).

        Checkpoints replay by count: a restore calls ``generator`` again and skips the elements
        already taken, so it must yield the same sequence on every call.
        """
        GeneratorDataset = registry.lookup("GeneratorDataset")

        return GeneratorDataset(generator, output_types, output_shapes, args, output_signature)

    @staticmethod
    def load(path: str, element_spec=None, compression: str | None = None,
             reader_func: Callable | None = None, wait: bool = False, *,
             storage_options: dict | None = None, namedtuples=(),
             verify: bool = False) -> "Dataset":
        """A dataset written by :meth:`save` at ``path`` (any fsspec URL), in the saved order,
        with its element spec and cardinality. ``element_spec`` (optional) must match the saved
        one; ``reader_func(datasets)`` reads the per-shard datasets another way; ``wait=True``
        waits for a save in progress to complete. Not TensorFlow's snapshot format.

        The metadata is data only: namedtuple elements need their classes passed
        (``namedtuples=[Point]``, or an ``element_spec`` built with them), never imported by
        name. Each shard's size is checked on opening (its CRC32C too with ``verify=True``,
        which reads every shard once) and its record count when read to its end."""
        LoadDataset = registry.lookup("LoadDataset")

        return LoadDataset(path, element_spec, compression, reader_func, wait,
                           storage_options=storage_options, namedtuples=namedtuples,
                           verify=verify)

    @staticmethod
    def choose_from_datasets(datasets, choice_dataset: "Dataset",
                             stop_on_empty_dataset: bool = True) -> "Dataset":
        """The next element comes from ``datasets[i]`` for each ``i`` of ``choice_dataset``
        (scalar int64); ends with the choices, or at an exhausted dataset (TF's default)."""
        choose_from_datasets = registry.lookup("choose_from_datasets")

        return choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset)

    @staticmethod
    def sample_from_datasets(datasets, weights=None, seed: int | None = None,
                             stop_on_empty_dataset: bool = False,
                             rerandomize_each_iteration: bool | None = None) -> "Dataset":
        """Each element from a dataset picked at random with ``weights`` (uniform by default),
        seeded; by default (as in TF) runs until every dataset is exhausted. The picks come from
        numpy's generator, not TF's, so a seed gives a different (equally random) order."""
        sample_from_datasets = registry.lookup("sample_from_datasets")

        return sample_from_datasets(datasets, weights, seed, stop_on_empty_dataset,
                                    rerandomize_each_iteration)

    @staticmethod
    @strict_keywords
    def mix(datasets, weights=None, seed: int | None = None,
            stop_on_empty_dataset: bool = False, *, repeat=False,
            rerandomize_each_iteration: bool | None = None, num_shards: int | None = None,
            shard_index: int | None = None) -> "Dataset":
        """A weighted mixture of named datasets (``{name: Dataset}``, ``weights={name: w}``)
        whose state is keyed by name: a checkpoint restores into a mixture with other weights
        or components added / removed, each staying component exactly where it was.
        ``repeat``: True, False or a number of epochs, for all or per name (a dict);
        ``num_shards``/``shard_index``: host ``shard_index`` of an elastic split whose states
        restore on another host count. See docs/mixtures.md."""
        mix = registry.lookup("mix")

        return mix(datasets, weights, seed, stop_on_empty_dataset, repeat=repeat,
                   rerandomize_each_iteration=rerandomize_each_iteration,
                   num_shards=num_shards, shard_index=shard_index)

    @staticmethod
    def zip(*args, datasets=None) -> "Dataset":
        """Elements are tuples (or dicts) of the datasets' elements, until the shortest ends:
        ``zip((a, b))``, ``zip(a, b)`` or ``zip(datasets={"x": a, "y": b})`` as in TF."""
        ZipDataset = registry.lookup("ZipDataset")

        if args and datasets is not None:
            raise TypeError("zip(): give the datasets positionally or as datasets=, not both")
        if datasets is None:
            if not args:
                raise TypeError("zip() needs datasets: zip(a, b), zip((a, b)) or zip(datasets=...)")
            datasets = args[0] if len(args) == 1 else tuple(args)
        return ZipDataset(datasets)

    # -- transformations -------------------------------------------------------------------------
    def shard(self, num_shards: int, index: int) -> "Dataset":
        """Keep elements ``i`` with ``i % num_shards == index`` (shard files by host first)."""
        ShardDataset = registry.lookup("ShardDataset")

        return ShardDataset(self, num_shards, index)

    def take(self, count: int) -> "Dataset":
        TakeDataset = registry.lookup("TakeDataset")

        return TakeDataset(self, count)

    def skip(self, count: int) -> "Dataset":
        SkipDataset = registry.lookup("SkipDataset")

        return SkipDataset(self, count)

    def repeat(self, count: int | None = None) -> "Dataset":
        """Repeat the dataset ``count`` times (forever when None); each epoch reshuffles."""
        RepeatDataset = registry.lookup("RepeatDataset")

        return RepeatDataset(self, count)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True, *, spill_url: str | None = None,
                spill_bytes: int = 16 << 20, spill_keep: int | None = None) -> "Dataset":
        """tf.data's buffered shuffle: fill ``buffer_size`` elements, emit one at random, refill.

        Checkpoints name buffered TFRecord records by file and offset; other buffered elements
        are carried in the state, or - above ``spill_bytes`` with ``spill_url`` set (e.g. the
        checkpoint's directory) - written to a file there that the state names (by file name: a
        restore reads it from this ``spill_url`` only). Those files belong to the states naming
        them: ``spill_keep=N`` removes the files of states older than the iterator's last N;
        ``tpudata.dataset.io.spill.remove_spilled(state, spill_url)`` removes a deleted
        checkpoint's files, ``prune_spilled(spill_url, keep=states)`` any others.
        """
        ShuffleDataset = registry.lookup("ShuffleDataset")

        return ShuffleDataset(self, buffer_size, seed, reshuffle_each_iteration,
                              spill_url=spill_url, spill_bytes=spill_bytes, spill_keep=spill_keep)

    def interleave(self, map_func: Callable, cycle_length: int | None = None,
                   block_length: int | None = None,
                   num_parallel_calls: int | None = None, deterministic: bool | None = None, *,
                   use_processes: bool = False):
        """tf.data's interleave: ``cycle_length`` datasets in turn, ``block_length`` at a time.

        ``block_length=None`` means 1 (as in TF). ``num_parallel_calls`` reads the open
        datasets in background threads; with
        ``deterministic=False`` elements come from whichever dataset has one ready first.
        ``use_processes=True`` calls ``map_func`` and runs the dataset it returns in
        ``num_parallel_calls`` (default: one per core) forkserver/spawn worker processes, a
        file per worker at a time, blocks read ahead (per-file Python that holds the GIL;
        ``map_func`` must pickle). Same order and element-exact state.
        """
        InterleaveDataset = registry.lookup("InterleaveDataset")

        return InterleaveDataset(self, map_func, cycle_length, block_length, num_parallel_calls,
                                 deterministic, use_processes=use_processes)

    def flat_map(self, map_func: Callable) -> "Dataset":
        """Concatenate the datasets ``map_func`` returns for each element (called on demand)."""
        InterleaveDataset = registry.lookup("InterleaveDataset")

        return InterleaveDataset(self, map_func, 1, 1, None, None)

    def map(self, map_func: Callable, num_parallel_calls: int | None = None,
            deterministic: bool | None = None, *, output_signature=None,
            use_processes: bool = False) -> "Dataset":
        """Apply ``map_func`` to every element (tuples are unpacked into arguments, as in TF).

        The function is called element by element, only for elements the consumer asks for.
        ``num_parallel_calls=N`` (or ``AUTOTUNE``: one per core) runs up to N calls at once on
        threads (for work that releases the GIL: decoding, numpy), handing each thread a chunk
        of the elements the consumer wants (a batch's worth split N ways), so a cheap function
        costs a few microseconds per element, not a task each; ``use_processes=True`` runs
        them in N worker processes instead (forkserver, else spawn; N defaults to one per core)
        for Python that holds the GIL. The function must pickle: a module-level function, or
        with cloudpickle installed also a lambda or nested function. A task is a chunk of up to
        32 elements (about 10 ms of the function's work, at most ~4 MB of outputs), with at most
        max(192, 32 * N) elements in flight. ``deterministic=False`` yields results as they
        complete.
        ``output_signature`` (a structure of TensorSpec) declares the output spec (otherwise
        ``element_spec`` traces the function on dummy elements); outputs that disagree raise.
        """
        MapDataset = registry.lookup("MapDataset")

        return MapDataset(self, map_func, num_parallel_calls, deterministic,
                          output_signature=output_signature, use_processes=use_processes)

    def filter(self, predicate: Callable) -> "Dataset":
        """Keep the elements for which ``predicate`` returns True (called element by element)."""
        FilterDataset = registry.lookup("FilterDataset")

        return FilterDataset(self, predicate)

    def take_while(self, predicate: Callable) -> "Dataset":
        """Elements while ``predicate(element)`` is True; the first False ends the dataset."""
        TakeWhileDataset = registry.lookup("TakeWhileDataset")

        return TakeWhileDataset(self, predicate)

    def unique(self) -> "Dataset":
        """Each distinct element (integer or bytes scalars) once, in first-seen order."""
        UniqueDataset = registry.lookup("UniqueDataset")

        return UniqueDataset(self)

    def reduce(self, initial_state, reduce_func: Callable):
        """Run the whole dataset through ``reduce_func(state, element) -> state`` and return
        the final state (numpy values with ``scan``'s rules; the element is one argument).

        >>> int(Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x))
        10
        """
        reduce_dataset = registry.lookup("reduce_dataset")

        return reduce_dataset(self, initial_state, reduce_func)

    def get_single_element(self):
        """The dataset's only element; a dataset with none or more than one raises ValueError."""
        with self.iterator() as it:
            first = next(it, _NOTHING)
            if first is _NOTHING:
                raise ValueError("get_single_element(): the dataset is empty; it must have "
                                 "exactly one element")
            if next(it, _NOTHING) is not _NOTHING:
                raise ValueError("get_single_element(): the dataset has more than one element; "
                                 "take(1) or batch() it first")
        return first

    def parse(self, features, num_parallel_calls: int | None = None) -> "Dataset":
        """Parse serialized tf.train.Examples with a feature spec, batch-level wherever it sits.

        Before ``batch`` each element becomes ``{name: value}``; after ``batch`` each batch is
        parsed whole (``tf.io.parse_example``). Either way the parser sees whole blocks.
        """
        parse_dataset = registry.lookup("parse_dataset")

        return parse_dataset(self, features, num_parallel_calls)

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: int | None = None, deterministic: bool | None = None, *,
              pad_remainder: bool = False, mask_key: str = "weight",
              num_batches: int | None = None) -> "Dataset":
        """Combine consecutive elements into batches.

        ``num_parallel_calls`` and ``deterministic`` are accepted as in tf.data and change
        nothing: batches are built whole with numpy, in order.

        ``drop_remainder=True`` drops a final short batch (static batch dimension).
        ``pad_remainder=True`` (exact-epoch evaluation) pads the final batch with zeros / empty
        values to full size and adds a float32 ``mask_key`` entry to each (dict) element: 1.0 for
        real rows, 0.0 for padding. ``num_batches`` additionally pads with all-zero-weight batches
        up to that many (so every host runs the same number of steps).
        """
        BatchDataset = registry.lookup("BatchDataset")

        return BatchDataset(self, batch_size, drop_remainder, pad_remainder, mask_key, num_batches)

    def padded_batch(self, batch_size: int, padded_shapes=None, padding_values=None,
                     drop_remainder: bool = False) -> "Dataset":
        """Batch elements of different shapes, padding each component to a common shape."""
        PaddedBatchDataset = registry.lookup("PaddedBatchDataset")

        return PaddedBatchDataset(self, batch_size, padded_shapes, padding_values, drop_remainder)

    def unbatch(self) -> "Dataset":
        UnbatchDataset = registry.lookup("UnbatchDataset")

        return UnbatchDataset(self)

    def cache(self, filename: str = "", *, url: str | None = None) -> "Dataset":
        """Keep the elements of the first complete pass: in memory (``filename=""``, TF's
        default), or in files under the directory URL ``filename`` (``url=`` is the same)."""
        CacheDataset = registry.lookup("CacheDataset")

        if url is not None and filename:
            raise TypeError("cache(): give filename or url, not both")
        return CacheDataset(self, url if url is not None else filename)

    def prefetch(self, buffer_size: int = 2, max_bytes: int = 256 << 20) -> "Dataset":
        """Produce elements in a background thread, up to ``buffer_size`` elements ahead."""
        PrefetchDataset = registry.lookup("PrefetchDataset")

        return PrefetchDataset(self, buffer_size, max_bytes)

    @strict_keywords
    def distribute(self, executor=None, *, split: str = "files", split_size: int | None = None,
                   deterministic: bool | None = None, num_consumers: int = 1,
                   consumer_index: int = 0, max_in_flight: int | None = None,
                   chunk_bytes: int | None = None, speculate_after: float | None = None,
                   lost_after: float = 60.0, shared_memory: bool = True) -> "Dataset":
        """This pipeline's work on an executor's workers (a dask ``Client``, any
        ``concurrent.futures.Executor``; None: here), each element once: tf.data service's
        ``distribute("distributed_epoch", ...)``. Options: DistributeDataset's, docs/remote.md."""
        options = {k: v for k, v in locals().items() if k not in ("self", "executor")}
        return registry.lookup("DistributeDataset")(self, executor, **options)

    def apply(self, transformation_func: Callable[["Dataset"], "Dataset"]) -> "Dataset":
        """``transformation_func(self)``: chain a function that transforms a whole Dataset.

        >>> [int(x) for x in Dataset.range(6).apply(lambda ds: ds.filter(lambda x: x % 2 == 0))]
        [0, 2, 4]
        """
        out = transformation_func(self)
        if not isinstance(out, Dataset):
            raise TypeError(f"apply(): the function must return a Dataset, not "
                            f"{type(out).__name__}")
        return out

    def window(self, size: int, shift: int | None = None, stride: int = 1,
               drop_remainder: bool = False) -> "Dataset":
        """Windows of ``size`` elements, each a Dataset (a structure of them for structured
        elements), starting every ``shift`` (default ``size``) elements, taking every
        ``stride``-th; use ``flat_map`` to turn them back into elements or batches."""
        WindowDataset = registry.lookup("WindowDataset")

        return WindowDataset(self, size, shift, stride, drop_remainder)

    def group_by_window(self, key_func: Callable, reduce_func: Callable,
                        window_size: int | None = None,
                        window_size_func: Callable | None = None) -> "Dataset":
        """Group elements by ``key_func(element)`` (a scalar integer); each full group (or, at
        the end, each remaining group in key order) becomes ``reduce_func(key, window)``."""
        GroupByWindowDataset = registry.lookup("GroupByWindowDataset")

        return GroupByWindowDataset(self, key_func, reduce_func, window_size, window_size_func)

    def bucket_by_sequence_length(self, element_length_func: Callable, bucket_boundaries,
                                  bucket_batch_sizes, padded_shapes=None, padding_values=None,
                                  pad_to_bucket_boundary: bool = False, no_padding: bool = False,
                                  drop_remainder: bool = False) -> "Dataset":
        """Batch elements of similar length together: bucket ``k`` holds lengths in
        ``[boundaries[k-1], boundaries[k])`` and is padded-batched by ``bucket_batch_sizes[k]``."""
        bucket_by_sequence_length = registry.lookup("bucket_by_sequence_length")

        return bucket_by_sequence_length(self, element_length_func, bucket_boundaries,
                                         bucket_batch_sizes, padded_shapes, padding_values,
                                         pad_to_bucket_boundary, no_padding, drop_remainder)

    def rebatch(self, batch_size, drop_remainder: bool = False) -> "Dataset":
        """The rows of batched elements in batches of ``batch_size`` (or of a list of sizes,
        used in turn): ``unbatch().batch(batch_size)`` in one op."""
        RebatchDataset = registry.lookup("RebatchDataset")

        return RebatchDataset(self, batch_size, drop_remainder)

    def ignore_errors(self, log_warning: bool = True) -> "Dataset":
        """Drop elements that fail upstream: a ``map`` function that raises drops its element,
        a damaged TFRecord file is read up to the bad record; each skip is logged (file and
        offset). Other errors still raise."""
        IgnoreErrorsDataset = registry.lookup("IgnoreErrorsDataset")

        return IgnoreErrorsDataset(self, log_warning)

    def save(self, path: str, compression: str | None = None, shard_func: Callable | None = None,
             checkpoint_args=None, *, num_shards: int | None = None, progress: bool | None = None,
             storage_options: dict | None = None) -> None:
        """Write the elements to TFRecord shards in the directory ``path`` (any fsspec URL) with
        the element spec, for :meth:`load`. ``compression``: None, "GZIP" or "ZLIB". Elements go
        round-robin to ``num_shards`` shards (default: one per CPU, as TF) unless ``shard_func``
        (element -> shard id) picks. Atomic: an interrupted save is never loadable, and a save
        over an earlier one replaces it when complete. A progress bar shows on a terminal
        (``progress=True/False`` forces it). ``checkpoint_args`` (TF's resumable save) raises.
        """
        save = registry.lookup("save")

        save(self, path, compression, shard_func, checkpoint_args, num_shards=num_shards,
             progress=progress, storage_options=storage_options)

    def with_options(self, options) -> "Dataset":
        """This dataset with ``options`` (a :class:`~tpudata.dataset.core.options.Options`) applied to
        the whole pipeline: ``deterministic``, ``autotune.cpu_budget``,
        ``threading.private_threadpool_size``."""
        from tpudata.dataset.core.options import OptionsDataset

        return OptionsDataset(self, options)

    def options(self):
        """The pipeline's merged Options (those set by ``with_options`` anywhere in it)."""
        from tpudata.dataset.core.options import options_of

        return options_of(self)

    def enumerate(self, start: int = 0) -> "Dataset":
        """``(index, element)`` pairs; the index is int64 and counts from ``start``."""
        EnumerateDataset = registry.lookup("EnumerateDataset")

        return EnumerateDataset(self, start)

    def concatenate(self, dataset: "Dataset") -> "Dataset":
        """This dataset's elements, then ``dataset``'s (same structure and dtypes)."""
        ConcatenateDataset = registry.lookup("ConcatenateDataset")

        return ConcatenateDataset(self, dataset)

    def scan(self, initial_state, scan_func: Callable) -> "Dataset":
        """A running state: ``scan_func(state, element) -> (new_state, output_element)``.

        The state is a structure of numpy values (checkpointed with their dtypes); each new
        state keeps the initial state's structure and dtypes.
        """
        ScanDataset = registry.lookup("ScanDataset")

        return ScanDataset(self, initial_state, scan_func)


# Cursor, IterContext, Iterator and the JSON helpers are re-exported for the op modules
__all__ = ["BlockIterator", "Cursor", "Dataset", "INFINITE", "IterContext", "Iterator", "UNKNOWN",
           "from_jsonable", "jsonable", "picklable_function"]
