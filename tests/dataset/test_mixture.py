"""Dataset.mix: weighted mixtures of named datasets whose state is keyed by name.

The exactly-once checks compare, for every component, the elements it delivered (before a
checkpoint, then after restoring it into a changed mixture) with that component's own sequence
in an uninterrupted run (docs/mixtures.md states what holds).
"""

from __future__ import annotations

import json
import logging
import pickle

import numpy as np
import pytest

from tests.dataset.helpers import check_restore_everywhere, plain, write_shards, SPEC
from tpudata.dataset import INFINITE, UNKNOWN, Dataset
from tpudata.errors import SpecError, StateError

SIZES = {"a": 23, "b": 41, "c": 7, "d": 16}
IDS = {name: k for k, name in enumerate(sorted(SIZES))}


def component(name: str, unseeded: bool = False) -> Dataset:
    """``{"src": id, "x": i}`` for i in a shuffled range of SIZES[name] (reshuffled per epoch)."""
    n = SIZES[name]
    ds = Dataset.from_tensor_slices({"src": np.full(n, IDS[name], np.int64), "x": np.arange(n)})
    return ds.shuffle(5, seed=None if unseeded else 10 + IDS[name])


def mixture(names, weights=None, repeat=False, stop=False, seed=7, **kw) -> Dataset:
    weights = {n: 1.0 for n in names} if weights is None else weights
    return Dataset.mix({n: component(n) for n in names}, weights, seed=seed,
                       stop_on_empty_dataset=stop, repeat=repeat, **kw)


def reference(name: str, length: int) -> list:
    """The component's own sequence in an uninterrupted mixture (its epochs one after another)."""
    with Dataset.mix({name: component(name)}, repeat=True, seed=0).take(length).iterator() as it:
        return [plain(e)["x"] for e in it]


def by_component(elements) -> dict:
    out: dict = {}
    for e in elements:
        out.setdefault(e["src"], []).append(e["x"])
    return {name: out.get(k, []) for name, k in IDS.items()}


def roundtrip(state):
    return json.loads(json.dumps(state))


# -- semantics -----------------------------------------------------------------------------------
def test_elements_are_the_components_plain_dicts_in_a_seeded_order():
    ds = mixture("abc")
    out = [plain(e) for e in ds]
    assert all(set(e) == {"src", "x"} for e in out)
    for name, xs in by_component(out).items():
        if name in "abc":
            assert sorted(xs) == list(range(SIZES[name])), name  # every element once
    assert out == [plain(e) for e in mixture("abc")]  # the seed decides
    assert out != [plain(e) for e in mixture("abc", seed=8)]
    e = next(iter(ds))
    assert type(e) is dict and e["x"].dtype == np.int64  # ordinary dicts, for a packer after


def test_the_dicts_order_does_not_matter_but_names_and_weights_do():
    comps = {n: component(n) for n in "abc"}
    forward = [plain(e) for e in Dataset.mix(comps, {"a": 1, "b": 2, "c": 3}, seed=1)]
    backward = [plain(e) for e in Dataset.mix(dict(reversed(list(comps.items()))),
                                              {"c": 3, "b": 2, "a": 1}, seed=1)]
    assert forward == backward


def test_weights_give_the_proportions():
    big = {n: Dataset.range(10**6).map(lambda x, k=k: np.int64(k)) for k, n in enumerate("xyz")}
    out = np.array(list(Dataset.mix(big, {"x": 0.6, "y": 0.3, "z": 0.1}, seed=3).take(20000)
                        .batch(20000).as_numpy_iterator())[0])
    share = np.bincount(out, minlength=3) / len(out)
    assert np.allclose(share, [0.6, 0.3, 0.1], atol=0.015), share


def test_the_same_stream_whatever_the_consumer_asks_for():
    """Draws are resolved a window at a time (the consumer's want); the stream may not depend
    on it, ends of components included."""
    for stop in (False, True):
        for repeat in (False, {"c": 3, "a": 2}):
            def make():
                return mixture("abc", {"a": 1, "b": 2, "c": 0.5}, repeat=repeat, stop=stop)

            one = [plain(e) for e in make()]
            for size in (2, 7, 1000):
                batched = [plain(e) for e in make().batch(size).unbatch()]
                assert batched == one, (stop, repeat, size)


def test_stop_on_empty_dataset():
    out = [plain(e) for e in mixture("abc", stop=True)]
    per = by_component(out)
    assert len(per["c"]) == SIZES["c"]  # the mixture ends at the first pick of an ended one
    assert len(per["a"]) < SIZES["a"] and len(per["b"]) < SIZES["b"]
    assert [plain(e) for e in mixture("abc", stop=False)].__len__() == sum(SIZES[n] for n in "abc")


def test_per_component_epochs():
    ds = mixture("abc", repeat={"a": True, "c": 3})
    assert ds.cardinality() == INFINITE
    out = [plain(e) for e in ds.take(3000)]
    per = by_component(out)
    assert len(per["b"]) == SIZES["b"] and len(per["c"]) == 3 * SIZES["c"]
    assert per["c"] == reference("c", 3 * SIZES["c"])  # each epoch reshuffled, all of it
    assert per["a"] == reference("a", len(per["a"]))
    assert mixture("abc", repeat={"c": 3}).cardinality() == SIZES["a"] + SIZES["b"] + 3 * SIZES["c"]
    assert mixture("abc", repeat=True, stop=True).cardinality() == INFINITE
    assert mixture("abc", stop=True).cardinality() == UNKNOWN


def test_an_empty_component_ends_even_when_repeated():
    comps = {"a": Dataset.range(5), "empty": Dataset.range(0)}
    assert sorted(int(x) for x in Dataset.mix(comps, seed=1, repeat=True).take(50)) == \
        sorted(list(range(5)) * 10)


def test_a_zero_weight_component_is_paused_not_dropped():
    out = [plain(e) for e in mixture("ab", {"a": 1, "b": 0})]
    assert by_component(out)["b"] == [] and len(out) == SIZES["a"]
    assert [plain(e) for e in mixture("ab", {"a": 0, "b": 0})] == []


def test_restore_everywhere():
    for kw in ({}, {"stop": True}, {"repeat": {"c": 2}}, {"repeat": True, "stop": True}):
        make = (lambda kw=kw: mixture("abc", {"a": 1, "b": 2, "c": 0.5}, **kw).take(150))
        check_restore_everywhere(make, stride=3)
        check_restore_everywhere(lambda make=make: make().batch(4), stride=2)


def test_spec_repr_errors_and_pickle():
    ds = mixture("ab", {"a": 0.7, "b": 0.3})
    assert repr(ds).endswith("mix(a=0.7, b=0.3)>")
    assert ds.element_spec["x"].dtype == np.int64
    assert [plain(e) for e in pickle.loads(pickle.dumps(ds))] == [plain(e) for e in ds]
    with pytest.raises(TypeError, match="dict of name"):
        Dataset.mix([component("a")])
    with pytest.raises(ValueError, match=r"missing \['b'\], unknown \['z'\]"):
        Dataset.mix({"a": component("a"), "b": component("b")}, {"a": 1, "z": 2})
    with pytest.raises(ValueError, match="finite and >= 0"):
        Dataset.mix({"a": component("a")}, {"a": -1})
    with pytest.raises(ValueError, match="repeat names"):
        Dataset.mix({"a": component("a")}, repeat={"b": True})
    with pytest.raises(ValueError, match="number of epochs"):
        Dataset.mix({"a": component("a")}, repeat=0)
    with pytest.raises(SpecError, match="mix"):
        Dataset.mix({"a": Dataset.range(3), "b": Dataset.range(3).map(lambda x: x * 0.5)})
    with pytest.raises(TypeError, match="shard_index"):
        Dataset.mix({"a": Dataset.range(3)}, shard_idx=0)


# -- restoring into a changed mixture -------------------------------------------------------------
# (components, weights, repeat); a checkpoint is taken at a random step of each phase and
# restored into the next one. Removals go through weight 0 first (exact whatever the ops after
# the mixture replay); DIRECT removes at once (exact when nothing after the mixture replays).
PHASES = [
    ("abc", {"a": 1, "b": 2, "c": 1}, {"a": True, "c": 2}),
    ("abc", {"a": 3, "b": 1, "c": 0.2}, {"a": True, "c": 2}),            # weights changed
    ("abcd", {"a": 1, "b": 1, "c": 0, "d": 2}, {"a": True, "d": True}),  # d added, c paused
    ("abd", {"a": 0, "b": 1, "d": 2}, {"a": True, "d": True}),           # c removed, a paused
    ("bcd", {"b": 0, "c": 1, "d": 1}, {"c": True}),                      # a removed, c back
    ("bcd", {"b": 1, "c": 1, "d": 1}, False),                            # to the end, once each
]
DIRECT = [
    ("abc", {"a": 1, "b": 2, "c": 1}, {"a": True, "c": 2}),
    ("abc", {"a": 3, "b": 1, "c": 0.2}, {"a": True, "c": 2}),
    ("abd", {"a": 1, "b": 1, "d": 2}, {"a": True, "d": True}),  # c removed, d added
    ("bcd", {"b": 0, "c": 1, "d": 1}, {"c": True}),             # a removed, c back, b paused
    ("bcd", {"b": 1, "c": 1, "d": 1}, False),
]


def run_phases(phases, seed: int, stop: bool, want: int):
    rng = np.random.default_rng(seed)
    state, spans = None, {}
    for k, (names, weights, repeat) in enumerate(phases):
        ds = Dataset.mix({n: component(n) for n in names}, weights, seed=100 + k,
                         stop_on_empty_dataset=stop, repeat=repeat)
        if want > 1:  # unbatch replays a partly used batch at a restore
            ds = ds.batch(want).unbatch()
        for n in set(names) - held(state):
            spans.setdefault(n, []).append([])  # a name the state does not hold: from its start
        last = k == len(phases) - 1
        with (ds.iterator(state) if state is not None else ds.iterator()) as it:
            # (long enough for this phase to draw with its own weights: the weight-0 step
            # of a removal takes effect where the saving run had got, see docs/mixtures.md)
            steps = None if last else int(rng.integers(2 * want + 1, 2 * want + 60))
            for e in (it if last else (next(it, None) for _ in range(steps))):
                if e is None:
                    break
                e = plain(e)
                name = sorted(IDS)[e["src"]]
                spans[name][-1].append(e["x"])
            state = roundtrip(it.get_state())
        assert held(state) == set(names)  # even where the op after it holds the restored state
    return spans


def held(state) -> set:
    """The component names a top-level state's mixture holds."""
    names: set = set()

    def walk(obj):
        if isinstance(obj, dict):
            if "configs" in obj and "components" in obj:
                names.update(obj["components"])
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk(state)
    return names


def check_spans(spans, to_the_end: bool) -> None:
    for name, runs in spans.items():
        for run in runs:  # each stay of a component: its own sequence, nothing skipped/repeated
            assert run == reference(name, len(run)), (name, runs)
    if to_the_end:
        for name in "cd":  # whole epochs of the components that stayed to the end
            assert spans[name][-1] and len(spans[name][-1]) % SIZES[name] == 0, (name, spans)
        assert len(spans["b"][0]) == SIZES["b"]


@pytest.mark.parametrize("want", [1, 5])
@pytest.mark.parametrize("seed", range(6))
def test_kill_and_restore_into_changed_mixtures_delivers_each_element_once(seed, want):
    check_spans(run_phases(PHASES, seed, stop=False, want=want), to_the_end=True)


@pytest.mark.parametrize("seed", range(6))
def test_removing_at_once_is_exact_when_nothing_after_the_mixture_replays(seed):
    check_spans(run_phases(DIRECT, seed, stop=False, want=1), to_the_end=True)


@pytest.mark.parametrize("seed", range(4))
def test_kill_and_restore_with_stops(seed):
    check_spans(run_phases(PHASES, seed, stop=True, want=3), to_the_end=False)


def test_a_restore_replays_with_the_saved_weights_up_to_where_the_saving_run_had_got():
    """unbatch holds a partly used batch: at a restore it reads the batch again from the
    mixture and skips what it had given out. The mixture draws those again with the weights of
    the run that took the state; the new weights apply from where that run had got."""
    old = mixture("ab", {"a": 1, "b": 1}).batch(10).unbatch()
    with old.iterator() as it:
        first = [plain(next(it)) for _ in range(13)]  # 3 of the second batch of 10
        state = roundtrip(it.get_state())
        old_rest = [plain(next(it)) for _ in range(7)]
    new = mixture("ab", {"a": 1, "b": 0}).batch(10).unbatch()
    with new.iterator(state) as it:
        rest = [plain(e) for e in it]
    assert rest[:7] == old_rest  # the rest of the batch the saving run had drawn
    assert {e["src"] for e in rest[7:]} == {IDS["a"]}  # then b's weight 0
    check_spans({n: [xs] for n, xs in by_component(first + rest).items() if n in "ab"}, False)


def test_removing_a_component_whose_draws_are_replayed_says_what_it_costs(caplog):
    old = mixture("abc").batch(10).unbatch()
    with old.iterator() as it:
        [next(it) for _ in range(13)]
        state = roundtrip(it.get_state())
    with caplog.at_level(logging.WARNING, logger="tpudata.dataset.ops.mixture"):
        mixture("ab").batch(10).unbatch().iterator(state).close()
    assert "['c'] are not in this mixture" in caplog.text
    assert "['c'] had a weight in the draws the saving run made" in caplog.text


def test_a_stop_hands_back_what_it_read_beyond_it():
    """At a stop the other components may have been read further than delivered (a window of
    draws is read at once): those elements travel in the state and come first when a mixture
    without the ended component goes on, so each is delivered once."""
    weights = {"a": 1, "b": 1, "c": 4}
    with mixture("abc", weights, stop=True).iterator() as it:
        first = []
        while (block := it._next_block()) is not None:  # windows of 64 draws
            first += [plain(e) for e in block.elements()]
        state = roundtrip(it.get_state())
    assert first == [plain(e) for e in mixture("abc", weights, stop=True)]
    components = state["cursor"]["before"]["components"]
    assert any("carry" in s for s in components.values()), "this seed's stop read past it"
    assert components["c"]["pos"] is None  # c ended: the stop
    with mixture("abc", weights, stop=True).iterator(state) as it:
        assert list(it) == []  # the same mixture: still stopped
    with mixture("ab", seed=9).iterator(state) as it:  # without c: goes on
        rest = [plain(e) for e in it]
    per = by_component(first + rest)
    for name in "ab":
        assert per[name] == reference(name, SIZES[name])  # all of it, once


def test_a_stop_hands_back_records_and_ragged_rows_too(tmp_path):
    """The handed-back elements of a stop travel in the state whatever their columns: records
    still in their read buffers, ragged arrays."""
    import tpudata

    files = write_shards(tmp_path / "a", 2, 40)

    def comps(names):
        out = {"recs": tpudata.TFRecordDataset(files).map(lambda r: {"r": r}),
               "ragged": Dataset.range(60).map(lambda i: {"r": np.arange(int(i) % 4).tobytes()}),
               "short": Dataset.from_tensor_slices({"r": np.array([b"x", b"y"], dtype=object)})}
        return {n: out[n] for n in names}

    with Dataset.mix(comps(["recs", "ragged", "short"]), {"recs": 1, "ragged": 1, "short": 3},
                     seed=2, stop_on_empty_dataset=True).iterator() as it:
        first = [e["r"] for b in iter(it._next_block, None) for e in b.elements()]
        state = roundtrip(it.get_state())
    carried = [n for n, c in state["cursor"]["before"]["components"].items() if "carry" in c]
    assert carried, "this seed's stop should have read past it"
    with Dataset.mix(comps(["recs", "ragged"]), seed=3).iterator(state) as it:
        rest = [e["r"] for e in it]
    delivered = sorted(bytes(r) for r in first + rest if r not in (b"x", b"y"))
    want = sorted([bytes(r) for r in tpudata.TFRecordDataset(files)] +
                  [np.arange(i % 4).tobytes() for i in range(60)])
    assert delivered == want


def test_an_ended_component_given_more_epochs_at_a_restore_goes_on():
    with mixture("ab").iterator() as it:
        first = [plain(e) for e in it]  # both ran once, to their ends
        state = roundtrip(it.get_state())
    with mixture("ab", repeat={"b": 2}).iterator(state) as it:
        rest = [plain(e) for e in it]
    assert by_component(rest)["a"] == [] and \
        by_component(first + rest)["b"] == reference("b", 2 * SIZES["b"])


def test_a_changed_component_pipeline_is_refused_by_name_and_a_new_name_restarts(caplog):
    ds = mixture("ab")
    with ds.iterator() as it:
        [next(it) for _ in range(10)]
        state = roundtrip(it.get_state())
    changed = Dataset.mix({"a": component("a").map(lambda e: e), "b": component("b")},
                          {"a": 1, "b": 1}, seed=7)
    with pytest.raises(StateError, match="component 'a'.*new name"):
        changed.iterator(state)
    renamed = Dataset.mix({"a2": component("a").map(lambda e: e), "b": component("b")},
                          {"a2": 1, "b": 1}, seed=7)
    with caplog.at_level(logging.INFO, logger="tpudata.dataset.ops.mixture"):
        renamed.iterator(state).close()
    assert "['a'] are not in this mixture: their positions are dropped" in caplog.text
    assert "['a2'] are new to the state" in caplog.text


def test_unseeded_components_keep_their_seeds_per_name():
    """An unseeded shuffle in a component: its seed travels in that component's state, so adding
    a component (which would shift a pipeline-wide list of seeds) keeps its order."""
    def comps(names):
        return {n: component(n, unseeded=(n == "a")) for n in names}

    ds = Dataset.mix(comps("ab"), seed=1, repeat={"a": True})
    with ds.iterator() as it:
        before = [plain(next(it)) for _ in range(30)]
        state = roundtrip(it.get_state())
        after_ref = [plain(next(it)) for _ in range(200)]
    resumed = Dataset.mix(comps("abd"), seed=2, repeat={"a": True})
    with resumed.iterator(state) as it:
        after = [plain(next(it)) for _ in range(200)]
    want = by_component(before + after_ref)["a"]
    got = by_component(before + after)["a"]
    n = min(len(want), len(got))
    assert n > 30 and got[:n] == want[:n]


def test_unseeded_mixture_carries_its_seed():
    comps = {n: component(n) for n in "ab"}
    ds = Dataset.mix(comps)
    with ds.iterator() as it:
        [next(it) for _ in range(5)]
        state = roundtrip(it.get_state())
        rest = [plain(e) for e in it]
    with Dataset.mix({n: component(n) for n in "ab"}).iterator(state) as it:
        assert [plain(e) for e in it] == rest


def test_state_is_small_for_tfrecord_components(tmp_path):
    """Three TFRecord corpora: the whole iterator state is under 2 KB (issue 26's bound per
    host): positions and the configuration, no buffers."""
    import tpudata

    def make():
        comps = {n: tpudata.TFRecordDataset(write_shards(tmp_path / n, 4, 50)).parse(SPEC)
                 for n in ("web", "code", "books")}
        return Dataset.mix(comps, {"web": 0.5, "code": 0.3, "books": 0.2}, seed=1,
                           repeat=True).batch(16)

    with make().iterator() as it:
        for _ in range(30):
            next(it)
        state = it.get_state()
        rest = [plain(next(it)) for _ in range(5)]
    assert len(json.dumps(state)) < 2048, len(json.dumps(state))
    with make().iterator(roundtrip(state)) as it:
        assert [plain(next(it)) for _ in range(5)] == rest


def test_ragged_elements_pad_and_scan_after_the_mixture():
    """What a packer after the mixture needs: ordinary dict elements with their own lengths."""
    def docs(k, n):
        return Dataset.range(n).map(lambda i, k=k: {"tokens": np.arange(int(i) % 5 + 1,
                                                                        dtype=np.int32) + k})

    ds = Dataset.mix({"web": docs(100, 30), "code": docs(200, 20)}, seed=4)
    lengths = ds.map(lambda e: np.int64(len(e["tokens"])))
    total = int(lengths.reduce(np.int64(0), lambda s, x: s + x))
    assert total == sum(i % 5 + 1 for i in range(30)) + sum(i % 5 + 1 for i in range(20))
    batch = next(iter(ds.padded_batch(8)))
    assert batch["tokens"].dtype == np.int32 and batch["tokens"].shape[0] == 8


def test_the_docs_example(caplog):
    """docs/mixtures.md's block, run as written."""
    from tests.readme import code_blocks

    (code,) = code_blocks("Mixtures of named datasets", "docs/mixtures.md")
    ns: dict = {}
    with caplog.at_level(logging.WARNING, logger="tpudata.dataset.ops.mixture"):
        exec(compile(code, "docs/mixtures.md", "exec"), ns)
    assert "['code'] are not in this mixture" in caplog.text
    assert "had a weight in the draws" not in caplog.text  # nothing after it replays
    docs = [int(d) for b in ns["first"] + ns["rest"] for d in b["doc"]]
    web = [d for d in docs if d < 10_000]
    assert web == list(range(len(web)))  # web went on where it was
    assert any(20_000 <= d for d in docs[40:]) and not any(20_000 <= d for d in docs[:40])
