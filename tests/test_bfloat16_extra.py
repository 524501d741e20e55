"""bfloat16 needs ml_dtypes: every place that builds bfloat16 arrays names an extra that has it."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tpudata.example.raw import decode_raw
from tpudata.image.ops import to_bfloat16

EXTRAS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]


@pytest.mark.parametrize("call", [lambda: decode_raw(b"\x80\x3f", "bfloat16"),
                                  lambda: to_bfloat16(np.ones(2, np.float32))])
def test_missing_ml_dtypes_names_an_extra_that_brings_it(call, monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # as if it were not installed
    with pytest.raises(ImportError) as info:
        call()
    extra = re.search(r"tpudata\[(\w+)\]", str(info.value)).group(1)
    assert any(dep.startswith("ml_dtypes") for dep in EXTRAS[extra]), (extra, EXTRAS[extra])


def test_bfloat16_extra_is_enough_for_decode_raw():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert [d.split(">")[0] for d in EXTRAS["bfloat16"]] == ["ml_dtypes"]
    out = decode_raw(b"\x80\x3f\x00\x40", "bfloat16")
    assert out.dtype == np.dtype(ml_dtypes.bfloat16) and out.astype(np.float32).tolist() == [1.0, 2.0]
