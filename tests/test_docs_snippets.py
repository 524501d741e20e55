"""Every ```python block of README.md and docs/*.md runs under test, or says why it cannot.

``SNIPPETS`` decides, for each block (by file, the start of the heading above it, and its index
under that heading), one of:

- ``RUN``: a test in this file executes the block as written (``gs://bucket`` is a fake GCS
  server here; names the text says come from elsewhere are given by the test, and named there);
- ``elsewhere(test file)``: another test file executes it (checked to read that block);
- ``not_runnable(reason)``: not a whole program, with the reason.

A new block that nobody decided on fails :func:`test_every_block_is_run_or_marked`.
"""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest

from fake_gcs.pytest_plugin import fake_gcs_server  # noqa: F401 - the fixture
from tests.readme import ROOT, markdown_files, python_blocks

RUN = "run here"


def elsewhere(test_file: str) -> str:
    return "elsewhere: " + test_file


def not_runnable(reason: str) -> str:
    return "not runnable: " + reason


SNIPPETS = {
    ("README.md", "A pipeline in 15 lines", 0): RUN,  # test_readme_pipeline
    ("docs/records.md", "Write and read TFRecord files", 0): RUN,  # test_records_snippets
    ("docs/records.md", "Parse whole batches into numpy", 0): RUN,  # test_records_snippets
    ("docs/dataset.md", "An input_fn", 0): RUN,  # test_input_fn_and_executor_snippets
    ("docs/dataset.md", "Saving a dataset", 0): RUN,  # test_saving_snippet
    ("docs/images.md", "Image preprocessing", 0): not_runnable(
        "tf.data and tpudata side by side in two columns, not one program; the tpudata column's "
        "ops are tested in tests/image/"),
    ("docs/images.md", "The per-element form, fused", 0): elsewhere("tests/image/test_fusion.py"),
    ("docs/shards.md", "Building shards", 0): not_runnable(
        "the shape of a call with the reader's own `items` and `encoder` (1024 shards); "
        "build_shards is tested in tests/test_shards.py"),
    ("docs/tpu.md", 'A "TPU" executor', 0): RUN,  # test_input_fn_and_executor_snippets
    ("docs/tpu.md", 'A "TPU" executor', 1): RUN,  # test_input_fn_and_executor_snippets (JAX)
    ("docs/tpu.md", "TensorBoard", 0): not_runnable(
        "a fragment of a model_fn (it ends in `return`); its host_fn runs in "
        "tests/tpu/test_summaries.py::test_the_readme_host_call"),
    ("docs/random_access.md", "Random access", 0): not_runnable(
        "reads record 123,456 of docs/records.md's data/train-*, which holds 1,000; "
        "TFRecordSource is tested in tests/source/"),
    ("docs/torch.md", "PyTorch", 0): elsewhere("tests/torch/test_readme_torch.py"),
    ("docs/torch.md", "PyTorch", 1): elsewhere("tests/torch/test_readme_torch.py"),
    ("docs/jax.md", "JAX:", 0): elsewhere("tests/jax/test_readme_jax.py"),
    ("docs/remote.md", "From a laptop to a cluster", 0): elsewhere(
        "tests/distribute/test_remote_docs.py"),
    ("docs/remote.md", "Ray", 0): not_runnable(
        "continues the laptop example (SPEC, features) on a Ray cluster; tests/ray runs both "
        "calls, opt-in: Ray's servers listen on every interface"),
    ("docs/mixtures.md", "Mixtures of named datasets", 0): elsewhere("tests/dataset/test_mixture.py"),
    ("docs/text.md", "A pipeline: JSON lines to packed rows", 0): RUN,  # test_text_snippet
    ("docs/text.md", "Training: a tiny causal LM", 0): elsewhere("tests/jax/test_text_jax.py"),
    ("docs/architecture.md", "Adding an op", 0): RUN,  # test_adding_an_op
}


def _decision(path: str, heading: str, n: int) -> list:
    return [key for key in SNIPPETS if key[0] == path and heading.startswith(key[1]) and key[2] == n]


def test_every_block_is_run_or_marked():
    found = [(path, heading, n) for path in markdown_files() for heading, n, _ in python_blocks(path)]
    undecided = [b for b in found if len(_decision(*b)) != 1]
    assert not undecided, f"add these ```python blocks to SNIPPETS (run them or say why not): {undecided}"
    used = {_decision(*b)[0] for b in found}
    assert used == set(SNIPPETS), f"SNIPPETS entries without a block: {set(SNIPPETS) - used}"
    for key, decision in SNIPPETS.items():
        if decision.startswith("elsewhere: "):  # that test reads the block by its heading
            test_file = decision.split(": ", 1)[1]
            source = open(os.path.join(ROOT, test_file), encoding="utf-8").read()
            assert f'code_blocks("{key[1].rstrip(":")}", "{key[0]}")' in source, (key, test_file)
        else:
            assert decision == RUN or decision.startswith("not runnable: ") and len(decision) > 30


def block(path: str, heading: str, n: int = 0) -> str:
    (code,) = [c for h, i, c in python_blocks(path) if h.startswith(heading) and i == n]
    assert SNIPPETS[(path, heading, n)] == RUN
    return code


def run(path: str, heading: str, namespace: dict, n: int = 0) -> dict:
    exec(compile(block(path, heading, n), f"{path}[{heading} #{n}]", "exec"), namespace)
    return namespace


def test_relative_links_resolve_inside_the_repository():
    """Every relative link of README.md and docs/*.md names a file of this repository (never one
    outside it, such as ../shared)."""
    for path in markdown_files():
        text = open(os.path.join(ROOT, path), encoding="utf-8").read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), target.split("#")[0]))
            top = os.path.relpath(file, ROOT).split(os.sep)[0]
            assert top not in ("..", "shared") and os.path.exists(file), (path, target)


# -- README.md -----------------------------------------------------------------------------------------
def test_readme_pipeline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # it writes data/train-0000N-of-00004
    ns = run("README.md", "A pipeline in 15 lines", {})
    assert ns["batch"]["x"].dtype == np.float32 and ns["batch"]["x"].shape == (128, 16)
    assert ns["batch"]["label"].dtype == np.int64 and ns["batch"]["label"].shape == (128,)
    assert list(ns["ds"].iterator(ns["state"])) == []  # the state was taken after the last batch


# -- docs/architecture.md -----------------------------------------------------------------------------
def test_adding_an_op():
    ns = run("docs/architecture.md", "Adding an op", {})
    assert ns["first"] == [0, 3, 6] and ns["ds"].element_spec == ns["Dataset"].range(1).element_spec


# -- docs/records.md ----------------------------------------------------------------------------------
def test_records_snippets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # it writes data/train-00000-of-00001
    ns = run("docs/records.md", "Write and read TFRecord files", {})
    assert sorted(ns["features"]) == ["image/encoded", "label", "x"]
    run("docs/records.md", "Parse whole batches into numpy", ns)
    assert ns["batch"]["x"].dtype == np.float32 and ns["batch"]["x"].shape[1:] == (16,)
    assert ns["batch"]["label"].dtype == np.int64


# -- gs://bucket: a fake GCS server ------------------------------------------------------------------
@pytest.fixture
def bucket(fake_gcs_server):  # noqa: F811 - the fixture imported above
    import tpudata
    from tpudata import storage

    storage.gcs_filesystem().mkdir("bucket")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 10))
    for split, n, shards in (("train", 2000, 20), ("validation", 200, 10)):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        y = (x @ w).argmax(1)
        tpudata.write_shards([tpudata.encode_example({"x": x[i], "label": int(y[i])}) for i in range(n)],
                             "gs://bucket/data", split, num_shards=shards, progress=False)
    return "gs://bucket"


def test_saving_snippet(bucket):
    ns = run("docs/dataset.md", "Saving a dataset", {})
    assert [e["id"] for e in ns["restored"]] == list(range(1000))


def eval_input_fn(params):
    """docs/tpu.md's eval_input_fn (the text leaves it to the reader): an exact epoch."""
    from tpudata import Dataset, FixedLenFeature, TFRecordDataset

    spec = {"x": FixedLenFeature([64], np.float32), "label": FixedLenFeature([], np.int64)}
    ctx = params["context"]
    files = Dataset.list_files("gs://bucket/data/validation-*", shuffle=False)
    return (files.shard(ctx.num_hosts, ctx.current_host).interleave(TFRecordDataset).parse(spec)
            .batch(params["batch_size"], pad_remainder=True)
            .map(lambda f: ({"x": f["x"], "weight": f["weight"]}, f["label"])))


def test_input_fn_and_executor_snippets(bucket):
    """docs/dataset.md's input_fn trains docs/tpu.md's model_fns: numpy, then JAX (from the numpy
    run's checkpoint: the same variables and slots)."""
    from tpudata import tpu

    ns = run("docs/dataset.md", "An input_fn", {"eval_input_fn": eval_input_fn})
    run("docs/tpu.md", 'A "TPU" executor', ns)  # trains to step 1000, evaluates
    est = ns["est"]
    assert est.global_step == 1000 and est.latest_checkpoint() == "model.ckpt-00001000.npz"
    result = est.evaluate(eval_input_fn)
    assert result["examples"] == 200 and result["accuracy"] > 0.8

    # docs/dataset.md's input_fn on two hosts: each reads its half of the files (params["context"])
    two_hosts = tpu.RunConfig(tpu_config=tpu.TPUConfig(iterations_per_loop=2, num_shards=8, num_hosts=2))
    seen = []

    def recording(params):
        seen.append(params["context"].current_input_fn_deployment())
        return ns["input_fn"](params)

    tpu.TPUEstimator(ns["model_fn"], two_hosts, train_batch_size=128).train(recording, steps=4)
    assert [(d[1], d[2], d[3]) for d in seen] == [(0, 2, 4), (1, 2, 4)]

    if importlib.util.find_spec("jax") is None:
        return
    run("docs/tpu.md", 'A "TPU" executor', ns, 1)  # the JAX model_fn, same config (and model_dir)
    est = ns["est"]
    assert est.backend == "jax"
    est.train(ns["input_fn"], steps=20)  # resumes from the numpy run's checkpoint
    assert est.global_step == 1020
    assert est.evaluate(eval_input_fn)["accuracy"] > 0.8


# -- docs/text.md -------------------------------------------------------------------------------------
def test_text_snippet(tmp_path, monkeypatch):
    pytest.importorskip("tokenizers")
    monkeypatch.chdir(tmp_path)  # it writes corpus.jsonl
    ns = run("docs/text.md", "A pipeline: JSON lines to packed rows", {})
    assert ns["row"]["text"].shape == (64,) and ns["row"]["text_loss_mask"].dtype == np.float32
    assert len(str(ns["state"])) < 2048
