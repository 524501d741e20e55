"""Dataset.map(fn, use_processes=True): the process pool behind the element-granular map."""

from __future__ import annotations

import json
import os
from collections import namedtuple

import numpy as np
import pytest

from tests.dataset.helpers import check_restore_everywhere, outputs
from tests.dataset.procpool_fns import die_on_seven, fail_on_five, tokens
from tpudata.dataset import Dataset
from tpudata.errors import WorkerError


def pipeline():
    return (Dataset.range(40).shuffle(8, seed=3).map(tokens, num_parallel_calls=2, use_processes=True)
            .filter(_even).map(_drop_pid).batch(3))


def _drop_pid(e):
    return {"id": e["id"], "feat": e["feat"]}


def _even(e):
    return e["id"] % 2 == 0


def test_process_map_runs_in_workers_in_order():
    out = outputs(Dataset.range(50).map(tokens, num_parallel_calls=2, use_processes=True))
    assert [int(e["id"]) for e in out] == list(range(50))
    pids = {int(e["pid"]) for e in out}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert all(e["feat"] == [e["id"] % 7] * 3 for e in out)
    with Dataset.range(3).map(tokens, num_parallel_calls=2, use_processes=True).iterator() as it:
        assert next(it)["feat"].dtype == np.float32


def test_process_map_restores_exactly_everywhere():
    out = check_restore_everywhere(pipeline, stride=3)
    ids = sorted(int(i) for b in out for i in b["id"])
    assert ids == list(range(0, 40, 2))


def _until_worker_error(fn, n: int, match: str) -> tuple[list[int], WorkerError]:
    """The elements of ``range(n).map(fn)`` on 2 processes before the WorkerError, and that error."""
    got = []
    with Dataset.range(n).map(fn, num_parallel_calls=2, use_processes=True).iterator() as it:
        with pytest.raises(WorkerError, match=match) as e:
            for x in it:
                got.append(int(x))
    return got, e.value


def test_process_map_error_names_the_worker_and_element():
    got, err = _until_worker_error(fail_on_five, 10, "no token for 5")
    assert got == [0, 1, 2, 3, 4]
    assert isinstance(err.__cause__, KeyError) and err.pid not in (None, os.getpid())


def test_a_worker_that_dies_is_named_with_the_input_elements_it_held():
    import signal

    got, err = _until_worker_error(die_on_seven, 20, "killed by signal SIGKILL")
    assert got == [2 * i for i in range(len(got))] and len(got) <= 7
    assert err.exitcode == -signal.SIGKILL and err.pid not in (None, os.getpid())
    # named by the map op and the input elements of the chunk the worker held, not the pool's
    # task number
    import re

    m = re.match(r"map\(die_on_seven\) on worker processes, at input elements? (\d+)(?:-(\d+))? ", str(err))
    assert m, str(err)
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    assert first <= 7 <= last and err.position == first


def _ragged_pipeline(deterministic=True):
    from tests.dataset.procpool_fns import ragged

    return (Dataset.range(60).map(ragged, num_parallel_calls=2, use_processes=True,
                                  deterministic=deterministic).map(_drop_pid2))


def _drop_pid2(e):
    return {"ids": e["ids"], "tag": e["tag"]}


def test_process_map_sends_chunks_and_keeps_order():
    from tests.dataset.procpool_fns import ragged

    out = outputs(Dataset.range(200).map(ragged, num_parallel_calls=2, use_processes=True))
    assert [e["tag"] for e in out] == [f"t{i}".encode() for i in range(200)]
    assert all(e["ids"] == list(range(i % 5)) for i, e in enumerate(out))
    # a chunk is mapped by one worker: after the first one-element chunks, runs of consecutive
    # elements come from the same process
    pids = [e["pid"] for e in out]
    runs = sum(1 for a, b in zip(pids, pids[1:]) if a != b) + 1
    assert runs < 200 // 2, runs


def test_process_map_restores_exactly_with_chunks_and_completion_order():
    check_restore_everywhere(_ragged_pipeline, stride=23)
    out = outputs(_ragged_pipeline(deterministic=False))
    assert sorted(e["tag"] for e in out) == sorted(f"t{i}".encode() for i in range(60))
    # completion order: a restore delivers exactly the elements not delivered before it
    for k in (5, 41):
        with _ragged_pipeline(False).map(_tag_only).iterator() as it:
            before = [next(it) for _ in range(k)]
            state = json.loads(json.dumps(it.get_state()))
        with _ragged_pipeline(False).map(_tag_only).iterator(state) as it:
            rest = list(it)
        assert sorted(before + rest) == sorted(f"t{i}".encode() for i in range(60)), k


def _tag_only(e):
    return e["tag"]


def test_process_map_bounds_the_elements_in_flight():
    from tpudata.dataset.parallel.processes import map as procmap

    pulled = []

    def count(x):  # runs in this process, upstream of the process map
        pulled.append(int(x))
        return x

    ds = Dataset.range(100_000).map(count).map(tokens, num_parallel_calls=2, use_processes=True)
    with ds.iterator() as it:
        for k in range(1, 300):
            next(it)
            assert len(pulled) - k <= procmap.WINDOW + procmap.CHUNK_MAX, (k, len(pulled))


def test_process_map_dtype_or_structure_change_inside_a_chunk_raises():
    from tests.dataset.procpool_fns import half_after_four, pair_after_four
    from tpudata.errors import SpecError

    for fn, what in ((half_after_four, "dtype float64"), (pair_after_four, "structure")):
        got = []
        with pytest.raises(SpecError, match=f"element 4 has.*{what}|element 4 has the {what}"):
            with Dataset.range(40).map(fn, num_parallel_calls=2, use_processes=True).iterator() as it:
                for x in it:
                    got.append(int(x))
        assert got == [0, 1, 2, 3]


Point = namedtuple("Point", "x y")


def _typed_block():
    from tpudata.dataset.core.block import Block, RecordColumn
    from tpudata.dataset.core.nest import flatten
    from tpudata.example.parse import VarLenValues

    n = 5
    dtypes = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
              np.uint64, np.float16, np.float32, np.float64, np.complex64]
    element = {"scalars": tuple(np.zeros((), d)[()] for d in dtypes),
               "image": np.zeros((2, 3), np.uint8), "text": "s", "raw": b"b",
               "point": Point(np.int64(0), "y"), "ragged": np.zeros(1, np.int32),
               "records": b"r", "varlen": np.zeros(1, np.int64)}
    tree, _ = flatten(element)
    cols = []
    for k, path in enumerate(_leaf_names(element)):
        if path.startswith("scalars"):
            cols.append(np.arange(n).astype(dtypes[int(path.split(".")[1])]))
        else:
            cols.append({"image": np.arange(n * 6, dtype=np.uint8).reshape(n, 2, 3),
                         "text": np.array([f"t{i}" for i in range(n)], dtype=object),
                         "raw": np.array([bytes([i]) * i for i in range(n)], dtype=object),
                         "point.0": np.arange(n, dtype=np.int64) - 2,
                         "point.1": np.array(["p"] * n, dtype=object),
                         "ragged": _object([np.arange(i, dtype=np.int32) for i in range(n)]),
                         "records": RecordColumn.from_bytes([b"rec%d" % i for i in range(n)]),
                         "varlen": VarLenValues(np.arange(6, dtype=np.int64),
                                                np.array([0, 1, 1, 3, 6, 6]))}[path])
    return Block(tree, cols, n)


def _object(values):
    out = np.empty(len(values), dtype=object)
    for k, v in enumerate(values):
        out[k] = v
    return out


def _leaf_names(element) -> list[str]:
    """Leaf names in flatten order (dict keys sorted)."""
    names = []
    for key in sorted(element):
        value = element[key]
        if isinstance(value, tuple):
            names += [f"{key}.{i}" for i in range(len(value))]
        else:
            names.append(key)
    return names


def _same_values(a, b) -> None:
    """Equal structure, types, dtypes and values."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            _same_values(a[k], b[k])
    elif isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_values(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b) and np.array_equal(a, b), (a, b)
    else:
        assert a == b, (a, b)


def test_process_map_chunk_encoding_round_trips_every_column_kind():
    from tpudata import _shm_transport as _shm
    from tpudata.dataset.core.block import Block
    from tpudata.dataset.parallel.processes.map import chunk_elements, chunk_of

    block = _typed_block()
    expected = list(block.elements())
    sender, receiver = _shm.Sender("tpd_test_chunk_"), _shm.Receiver()
    try:
        for i, j in ((0, 5), (1, 4), (2, 3)):  # slices, as the map takes them from its input
            chunk = chunk_of(block.slice(i, j))
            # numeric columns travel as one array each, not as an element per pickle
            kinds = [type(c) for c in chunk[2]]
            assert kinds.count(np.ndarray) == 15 and kinds.count(list) == 6, kinds
            payload, slot = sender.encode(chunk)
            got = chunk_elements(receiver.decode(payload))
            sender.release(slot)
            assert len(got) == j - i
            for a, b in zip(got, expected[i:j]):
                _same_values(a, b)
        # a list of elements (the path that skips delivered elements) passes through
        assert chunk_elements(expected[:2]) == expected[:2]
        single = Block.from_elements(*_flat_leaf(np.float32(1.5)))
        _same_values(chunk_elements(chunk_of(single)), list(single.elements()))
    finally:
        receiver.close()
        sender.close()
    assert _shm.sweep("tpd_test_chunk_") == []


def _flat_leaf(value):
    from tpudata.dataset.core.nest import flatten

    tree, leaves = flatten(value)
    return tree, [leaves, leaves]


def test_process_map_elements_of_every_kind_reach_the_worker_as_in_line():
    from tests.dataset.procpool_fns import same

    n = 70
    source = {"i8": np.arange(n, dtype=np.int8), "u64": np.arange(n, dtype=np.uint64),
              "f16": np.linspace(0, 1, n).astype(np.float16), "flag": np.arange(n) % 2 == 0,
              "img": np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2),
              "name": np.array([f"n{i}" for i in range(n)]),
              "raw": [bytes([i % 256]) * (i % 4) for i in range(n)],
              "pair": (np.arange(n, dtype=np.int32), [f"p{i}".encode() for i in range(n)])}
    ds = Dataset.from_tensor_slices(source)
    in_line = outputs(ds.map(same))
    assert outputs(ds.map(same, num_parallel_calls=2, use_processes=True)) == in_line
    with ds.map(same, num_parallel_calls=2, use_processes=True).iterator() as it:
        for k, e in enumerate(it):
            assert e["f16"].dtype == np.float16 and e["img"].shape == (2, 2), k
            assert isinstance(e["raw"], bytes) and e["pair"][0].dtype == np.int32


def test_process_map_error_inside_a_large_chunk_keeps_the_order():
    from tests.dataset.procpool_fns import fail_at_150

    got = []
    with Dataset.range(400).map(fail_at_150, num_parallel_calls=2, use_processes=True).iterator() as it:
        with pytest.raises(WorkerError, match="bad element 150") as e:
            for x in it:
                got.append(int(x))
    assert got == [2 * i for i in range(150)]
    assert isinstance(e.value.__cause__, ValueError) and e.value.position == 150


def test_process_map_large_outputs_come_back_stacked_and_exact():
    from tests.dataset.procpool_fns import wide

    ds = Dataset.range(150).map(wide, num_parallel_calls=2, use_processes=True)
    assert outputs(ds) == outputs(Dataset.range(150).map(wide))
    with ds.iterator() as it:
        for e in it:
            assert e["v"].dtype == np.float32 and e["v"].shape == (4, 128)
            e["v"][0, 0] = -1  # outputs are ordinary writable arrays


def test_process_map_outputs_kept_by_the_consumer_stay_intact():
    from tests.dataset.procpool_fns import wide

    with Dataset.range(300).map(wide, num_parallel_calls=2, use_processes=True).iterator() as it:
        kept = list(it)  # every output held: lent result slots must never be reused under them
    for n, e in enumerate(kept):
        assert int(e["x"]) == n and (e["v"] == n + np.arange(128, dtype=np.float32)).all(), n


def test_process_map_chunks_are_capped_by_the_bytes_of_their_outputs():
    from tests.dataset.procpool_fns import megabyte, wide
    from tpudata.dataset.parallel.processes import map as procmap

    for fn, most in ((megabyte, procmap.CHUNK_BYTES >> 20), (wide, None)):
        with Dataset.range(60).map(fn, num_parallel_calls=2, use_processes=True).iterator() as it:
            for k in range(40):
                value = next(it)
                assert int(np.asarray(value["x"] if fn is wide else value[0])) == k % 251
            mapper_it = it._it  # the map's ProcessMapIterator
            size = mapper_it._chunk_size()
            if most is not None:
                assert 1 <= size <= most, size
            else:  # 2 KB elements: as many as the count and the window allow
                assert size == mapper_it.chunk_max == procmap.CHUNK_MAX, size


def test_map_docstring_states_the_chunk_size_and_window_the_code_uses():
    from tpudata.dataset.parallel.processes.map import CHUNK_MAX, WINDOW

    doc = " ".join(Dataset.map.__doc__.split())
    assert f"chunk of up to {CHUNK_MAX} elements" in doc, doc
    assert f"max({WINDOW}, 32 * N) elements in flight" in doc, doc
