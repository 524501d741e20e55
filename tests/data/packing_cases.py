"""The packing cases that tests/text/test_pack_grain.py checks against grain's packers (live, and
through tests/data/golden/packing_grain.json, which tests/data/make_packing_golden.py writes with
grain). Each case: the documents (a seeded generator), the row lengths, tpudata's ``pack``
arguments, and the same configuration for grain."""

from __future__ import annotations

import numpy as np

# name: (seed, documents, two features, max document length, empty documents, method, pack kwargs)
CASES = {
    "first_fit_1_bin": (0, 80, True, 12, False, "first_fit", dict(num_bins=1, shuffle_bins=False)),
    "first_fit_4_shuffled": (1, 80, True, 12, False, "first_fit", dict(num_bins=4, seed=5)),
    "first_fit_max_segments": (2, 80, True, 12, True, "first_fit",
                               dict(num_bins=7, seed=3, max_segments=3)),
    "first_fit_one_feature": (3, 100, False, 14, False, "first_fit", dict(num_bins=3, seed=1)),
    "best_fit_1_bin": (4, 80, True, 12, False, "best_fit", dict(num_bins=1, shuffle_bins=False)),
    "best_fit_4_shuffled": (5, 80, True, 12, False, "best_fit", dict(num_bins=4, seed=5)),
    "best_fit_max_segments": (6, 80, True, 12, True, "best_fit",
                              dict(num_bins=7, seed=3, max_segments=3)),
    "best_fit_one_feature": (7, 100, False, 14, True, "best_fit", dict(num_bins=5, seed=2)),
    "best_fit_padding_alignment": (8, 80, True, 10, False, "best_fit",
                                   dict(num_bins=3, shuffle_bins=False, padding=-1,
                                        alignment={"inputs": 4})),
    "concat_then_split": (9, 80, True, 12, True, "concat_then_split", {}),
    "concat_then_split_full_length": (10, 80, True, 16, False, "concat_then_split",
                                      dict(split_full_length_features=False)),
    "concat_then_split_one_feature": (11, 100, False, 40, False, "concat_then_split", {}),
    "concat_then_split_bos": (12, 100, False, 20, False, "concat_then_split",
                              dict(bos_id=1, bos_features=["inputs"])),
    "concat_then_split_meta": (13, 80, True, 12, False, "concat_then_split",
                               dict(meta_features=["targets"])),
}
LENGTHS = {True: {"inputs": 16, "targets": 8}, False: {"inputs": 16}}


def documents(name: str) -> list:
    """The case's documents: ``{"inputs": int32 ids[, "targets": ...]}``."""
    seed, n, two, maxlen, empty, _, _ = CASES[name]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        doc = {"inputs": rng.integers(1, 100, rng.integers(0 if empty else 1, maxlen + 1))
               .astype(np.int32)}
        if two:
            doc["targets"] = rng.integers(1, 100, rng.integers(1, maxlen // 2 + 1)).astype(np.int32)
        out.append(doc)
    return out


def lengths(name: str) -> dict:
    return dict(LENGTHS[CASES[name][2]])


def grain_dataset(name: str, docs: list):
    """grain's packer for the case over ``docs`` (in their order)."""
    import grain
    from grain._src.python.dataset.transformations import packing
    from grain._src.python.dataset.transformations import packing_concat_then_split as cts

    *_, method, kw = CASES[name]
    parent = grain.MapDataset.source(docs).to_iter_dataset()
    length = lengths(name)
    if method == "concat_then_split":
        extra = {}
        if "bos_id" in kw:
            extra = dict(bos_handling=cts.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
                         bos_features=kw["bos_features"], bos_token_id=kw["bos_id"])
        return cts.ConcatThenSplitIterDataset(
            parent, length_struct=length, meta_features=kw.get("meta_features", ()),
            split_full_length_features=kw.get("split_full_length_features", True), **extra)
    cls = packing.FirstFitPackIterDataset if method == "first_fit" else packing.BestFitPackIterDataset
    per = lambda v, d: None if v is None else {k: (v.get(k, d) if isinstance(v, dict) else v)  # noqa: E731
                                                for k in length}
    return cls(parent, length_struct=length, num_packing_bins=kw["num_bins"],
               seed=kw.get("seed", 0), shuffle_bins=kw.get("shuffle_bins", True),
               max_sequences_per_bin=kw.get("max_segments"),
               padding_struct=per(kw.get("padding"), None),
               pack_alignment_struct=per(kw.get("alignment"), 1))
