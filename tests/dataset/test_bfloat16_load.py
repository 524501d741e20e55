"""Dataset.load of a saved bfloat16 dataset where ml_dtypes is missing names the extra to install
(MissingExtraError, an ImportError), not a bare ModuleNotFoundError."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tpudata import Dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_loading_bfloat16_without_ml_dtypes_names_the_extra(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    path = str(tmp_path / "saved")
    Dataset.from_tensor_slices(np.ones((3, 2), ml_dtypes.bfloat16)).save(path)
    assert [x.dtype for x in Dataset.load(path)] == [np.dtype(ml_dtypes.bfloat16)] * 3
    # a fresh process (numpy knows bfloat16 by name once ml_dtypes was imported) without it
    script = textwrap.dedent(f"""
        import sys
        sys.modules["ml_dtypes"] = None  # as if it were not installed
        from tpudata import Dataset
        from tpudata.errors import MissingExtraError
        try:
            list(Dataset.load({path!r}))
        except MissingExtraError as e:
            assert isinstance(e, ImportError) and e.extra == "bfloat16", e
            print("RAISED:", e)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RAISED:" in out.stdout and "pip install 'tpudata[bfloat16]'" in out.stdout
    assert "bfloat16 tensor" in out.stdout
