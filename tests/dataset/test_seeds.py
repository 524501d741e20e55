"""Unseeded random ops: a checkpoint restored into a freshly built pipeline goes on exactly as
the run that saved it (its seeds travel in the state), for every later epoch too."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tpudata import Dataset

PIPELINES = {
    "shuffle.repeat": lambda: Dataset.range(6).shuffle(5).repeat(4),
    "list_files.repeat": lambda: Dataset.list_files("tpudata/dataset/ops/*.py").repeat(3),
    "random": lambda: Dataset.random().take(5).repeat(5),
    "sample.shuffle": lambda: Dataset.sample_from_datasets(
        [Dataset.range(5), Dataset.range(10, 15)]).shuffle(3).repeat(3),
    "nested": lambda: Dataset.zip(Dataset.range(8).shuffle(8).repeat(3),
                                  Dataset.range(100, 108).shuffle(4).repeat(3)),
}


def _values(it, n):
    out = []
    for _ in range(n):
        try:
            out.append(np.asarray(next(it)).tolist())
        except StopIteration:
            break
    return out


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("k", [0, 1, 5, 9])
def test_restore_into_a_fresh_pipeline_keeps_the_saved_seeds(name, k):
    make = PIPELINES[name]
    it = iter(make())
    _values(it, k)
    state = json.loads(json.dumps(it.get_state()))
    rest = _values(it, 40)
    assert len(rest) >= 10
    fresh = make().iterator(state)
    assert _values(fresh, 40) == rest
    again = iter(make())
    again.set_state(state)
    assert _values(again, 40) == rest


def test_fresh_pipelines_still_draw_their_own_seeds():
    orders = {tuple(_values(iter(Dataset.range(50).shuffle(50)), 50)) for _ in range(3)}
    assert len(orders) == 3


def test_seeded_pipelines_carry_no_seeds():
    it = iter(Dataset.range(6).shuffle(5, seed=1).repeat())
    assert "seeds" not in it.get_state()
