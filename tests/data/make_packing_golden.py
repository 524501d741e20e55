"""Write tests/data/golden/packing_grain.json: the rows grain's packers make of the documents of
each case in packing_cases.py, with those documents. Run from the repository root where grain is
installed (`pip install grain`; never a tpudata dependency):

    .venv/bin/python tests/data/make_packing_golden.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from packing_cases import CASES, documents, grain_dataset, lengths  # noqa: E402


def columns(rows: list) -> dict:
    """``{key: {"dtype", "values": one list per row}}`` of the packed rows."""
    return {k: {"dtype": str(rows[0][k].dtype), "values": [r[k].tolist() for r in rows]}
            for k in sorted(rows[0])}


def main() -> None:
    out = {"grain": importlib.metadata.version("grain"), "cases": {}}
    for name in sorted(CASES):
        docs = documents(name)
        rows = columns(list(grain_dataset(name, docs)))
        out["cases"][name] = {"lengths": lengths(name),
                              "docs": [{k: v.tolist() for k, v in d.items()} for d in docs],
                              "rows": rows}
    path = os.path.join(HERE, "golden", "packing_grain.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(CASES)} cases, grain {out['grain']}")


if __name__ == "__main__":
    main()
