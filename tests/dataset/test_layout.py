"""The dataset package's layout stays as docs/architecture.md says: a folder per kind of code."""

from __future__ import annotations

import importlib
import os
import pkgutil

import tpudata
import tpudata.dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LINES = 650  # "split a file before it passes ~600 lines"
KINDS = ("core", "ops", "sources", "parallel", "io")


def _dataset_modules():
    for info in pkgutil.walk_packages(tpudata.dataset.__path__, "tpudata.dataset."):
        yield importlib.import_module(info.name)


def test_dataset_modules_are_small_and_export_sorted_names():
    seen = 0
    for module in _dataset_modules():
        with open(module.__file__) as f:
            lines = sum(1 for _ in f)
        assert lines <= MAX_LINES, f"{module.__name__} has {lines} lines: split it"
        names = getattr(module, "__all__", None)
        assert names is None or list(names) == sorted(names), f"{module.__name__}.__all__ is not sorted"
        seen += 1
    assert seen > 40


def test_dataset_has_a_folder_per_kind_and_no_loose_modules():
    here = os.path.join(ROOT, "tpudata", "dataset")
    loose = sorted(f for f in os.listdir(here) if f.endswith(".py") and f != "__init__.py")
    assert loose == [], f"tpudata/dataset/ holds modules outside the kind folders: {loose}"
    for kind in KINDS:
        assert os.path.exists(os.path.join(here, kind, "__init__.py")), kind


def test_one_op_per_file_for_the_core_transformations():
    for op in ("map", "filter", "interleave", "shuffle", "batch", "repeat", "take", "zip",
               "window", "scan"):
        assert os.path.exists(os.path.join(ROOT, "tpudata", "dataset", "ops", f"{op}.py")), op
    for op, kind in (("cache", "io"), ("prefetch", "parallel")):
        assert os.path.exists(os.path.join(ROOT, "tpudata", "dataset", kind, f"{op}.py")), op


def test_architecture_doc_names_every_package_and_dataset_folder():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    pkg = os.path.dirname(tpudata.__file__)
    for name in sorted(os.listdir(pkg)):
        if os.path.isdir(os.path.join(pkg, name)) and not name.startswith(("_", ".")):
            assert f"tpudata/{name}/" in text, f"docs/architecture.md does not name tpudata/{name}/"
    for root, dirs, files in os.walk(os.path.join(pkg, "dataset")):
        dirs[:] = [d for d in dirs if not d.startswith("_")]
        if "__init__.py" in files and root != os.path.join(pkg, "dataset"):
            rel = os.path.relpath(root, os.path.dirname(pkg)) + "/"
            # nested folders are drawn indented under tpudata/dataset/ by their own name
            assert f" {os.path.basename(root)}/ " in text, f"docs/architecture.md does not name {rel}"
