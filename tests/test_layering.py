"""Imports flow downward only (docs/architecture.md), function-level imports included.

Every ``import``/``from ... import`` of a tpudata module anywhere in a module's source (top level
or inside a function) is an edge; an edge to a higher layer fails the test, naming the file and
line. Inside ``tpudata/dataset/``, ``core/`` imports no sibling folder.
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "tpudata")

# lowest first; a unit may import units of a lower (or its own) rank
LAYERS = [
    {"errors"},
    {"_accel", "_native", "_keywords", "_outpool", "_objects", "_ranged", "_gcs", "_extras",
     "_processes", "_info", "_upload", "_pickling", "_shm", "_shm_pieces", "_shm_transport"},
    {"storage"},
    {"tfrecord"},
    {"example"},
    {"shards"},
    {"convert", "source"},
    {"dataset.core"},
    {"dataset.io"},
    {"dataset.parallel"},
    {"dataset.sources", "dataset.ops", "dataset"},
    {"image", "distribute", "text"},  # text: tokenize and pack, ops over dataset (and example)
    {"tpu"},
    {"jax", "ray", "torch"},
    {"tpudata"},  # the top-level package's __init__: the public names, re-exported
    {"commands", "cli"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

# Known upward edges inside dataset/, each with its reason; shrink this list, never grow it.
ALLOWED = {
    ("dataset.parallel", "dataset.ops"): "processes/map.py runs ops/map.py's MapperIterator",
    ("dataset.sources", "dataset.ops"): "generator.py names the user's function as map does",
}


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tpudata":
        return None
    if len(parts) == 1:
        return "tpudata"
    if parts[1] == "dataset" and len(parts) > 2 and parts[2] in ("core", "io", "parallel",
                                                                  "sources", "ops"):
        return f"dataset.{parts[2]}"
    return parts[1]


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(path: str):
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in ("tpudata", "tpudata.dataset"):
                for alias in node.names:  # "from tpudata import storage" names a module
                    yield f"{node.module}.{alias.name}", node.lineno
            else:
                yield node.module, node.lineno


def _edges():
    for dirpath, _, files in os.walk(PKG):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            src = unit_of(_module_name(path))
            for target, line in _imports(path):
                dst = unit_of(target)
                if dst is None and target.startswith("tpudata."):
                    dst = target.split(".")[1]
                if dst is not None and dst != src and dst in RANK:
                    yield src, dst, os.path.relpath(path, ROOT), line


def test_every_unit_has_a_layer():
    units = {unit_of(_module_name(os.path.join(d, f))) for d, _, fs in os.walk(PKG)
             for f in fs if f.endswith(".py")}
    assert units - set(RANK) == set(), "add these to LAYERS (and docs/architecture.md)"


def test_imports_flow_downward():
    upward = [f"{path}:{line}: {src} imports {dst}" for src, dst, path, line in _edges()
              if src in RANK and RANK[dst] > RANK[src] and (src, dst) not in ALLOWED]
    assert upward == [], "\n".join(upward)


def test_dataset_core_imports_no_sibling_folder():
    bad = [f"{path}:{line}: core imports {dst}" for src, dst, path, line in _edges()
           if src == "dataset.core" and dst.startswith("dataset")]
    assert bad == [], "\n".join(bad)


def test_allowed_exceptions_still_exist():
    edges = {(src, dst) for src, dst, _, _ in _edges()}
    assert set(ALLOWED) <= edges, f"remove from ALLOWED: {set(ALLOWED) - edges}"
