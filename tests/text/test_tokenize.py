"""tokenize(): text lines, Examples, SequenceExamples and dict elements -> ids, with both
backends; BOS/EOS, truncate and chunk; in line, on threads and in worker processes; errors that
name the file and record; exact restores."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tpudata
from tests.text.conftest import SENTENCES
from tests.text.helpers import killed_and_restored
from tpudata.dataset import Dataset, TextLineDataset, TFRecordDataset
from tpudata.errors import InvalidTextError, MissingExtraError, SpecError, TokenizerError
from tpudata.text import load_tokenizer, tokenize


def chars(texts):
    """A Python tokenizer (holds the GIL): one id per character."""
    return [[ord(c) for c in t] for t in texts]


def lines_file(tmp_path, lines, name="docs.txt") -> str:
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    return path


def test_text_lines_with_tokenizers_are_its_ids_plus_bos_eos(tmp_path, hf_tokenizer):
    path = lines_file(tmp_path, [s.encode() for s in SENTENCES])
    out = list(tokenize(TextLineDataset(path), hf_tokenizer, add_bos=True, add_eos=True))
    bos, eos = hf_tokenizer.token_to_id("<s>"), hf_tokenizer.token_to_id("</s>")
    assert [e["tokens"].tolist() for e in out] == [
        [bos] + hf_tokenizer.encode(s, add_special_tokens=False).ids + [eos] for s in SENTENCES]
    assert all(e["tokens"].dtype == np.int32 for e in out)
    assert hf_tokenizer.decode(out[6]["tokens"].tolist(), skip_special_tokens=True) == SENTENCES[6]


def test_sentencepiece_ids_and_its_own_specials(sp_processor):
    ds = Dataset.from_tensor_slices([s.encode() for s in SENTENCES])
    out = list(tokenize(ds, sp_processor, add_bos=True, add_eos=True, output="ids"))
    assert [e["ids"].tolist() for e in out] == [[1] + sp_processor.encode(s) + [2] for s in SENTENCES]


def test_tokenizer_files_load_by_path(tmp_path, hf_tokenizer, sp_processor):
    hf_tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "spiece.model").write_bytes(sp_processor.serialized_model_proto())
    assert load_tokenizer(str(tmp_path / "tokenizer.json")).backend == "tokenizers"
    assert load_tokenizer(str(tmp_path)).backend == "tokenizers"  # a folder holding one
    sp = load_tokenizer(str(tmp_path / "sp"))
    assert sp.backend == "sentencepiece" and sp.encode_batch(["fox"]) == [sp_processor.encode("fox")]


def test_an_unknown_tokenizer_name_says_what_is_installed():
    with pytest.raises(TokenizerError) as err:
        tokenize(Dataset.range(1), "gpt2")
    message = str(err.value)
    assert "unknown tokenizer 'gpt2'" in message and "downloads none" in message
    for name, version in tpudata.text.installed_backends().items():
        assert (f"{name} {version}" if version else f"{name} (not installed)") in message


def test_a_missing_backend_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_sentencepiece(name, *args, **kwargs):
        if name == "sentencepiece":
            raise ImportError("no")
        return real(name, *args, **kwargs)

    (tmp_path / "x.model").write_bytes(b"\0")
    monkeypatch.setattr(builtins, "__import__", no_sentencepiece)
    with pytest.raises(MissingExtraError, match=r"tpudata\[text\]") as err:
        load_tokenizer(str(tmp_path / "x.model"))
    assert err.value.extra == "text"


def test_examples_text_feature_and_a_missing_one_names_the_record(tmp_path, hf_tokenizer):
    path = str(tmp_path / "docs.tfrecord")
    records = [tpudata.encode_example({"text": s.encode(), "id": i}) for i, s in enumerate(SENTENCES)]
    tpudata.write_records(path, records)
    out = list(tokenize(TFRecordDataset(path), hf_tokenizer, feature="text", record="example"))
    assert [e["text"].tolist() for e in out] == [
        hf_tokenizer.encode(s, add_special_tokens=False).ids for s in SENTENCES]

    tpudata.write_records(path, records[:3] + [tpudata.encode_example({"id": 9})] + records[3:])
    offset = sum(len(r) + 16 for r in records[:3])
    with pytest.raises(SpecError) as err:
        list(tokenize(TFRecordDataset(path), hf_tokenizer, feature="text", record="example"))
    assert "'text'" in str(err.value) and "record 3" in str(err.value)
    assert f"{path} at offset {offset}" in str(err.value)


def test_sequence_examples_context_feature_or_joined_feature_list(tmp_path, sp_processor):
    path = str(tmp_path / "seq.tfrecord")
    tpudata.write_records(path, [
        tpudata.encode_sequence_example({"title": b"the fox"},
                                        {"lines": [[b"quick brown"], [b"lazy dog"]]}),
        tpudata.encode_sequence_example({"title": b"rows"}, {"lines": [[b"a", b"b"]]}),
    ])
    titles = list(tokenize(TFRecordDataset(path), sp_processor, feature="title",
                           record="sequence_example"))
    assert [e["title"].tolist() for e in titles] == [sp_processor.encode("the fox"),
                                                      sp_processor.encode("rows")]
    lines = list(tokenize(TFRecordDataset(path), sp_processor, feature="lines",
                          record="sequence_example", join=" "))
    assert [e["lines"].tolist() for e in lines] == [sp_processor.encode("quick brown lazy dog"),
                                                     sp_processor.encode("a b")]
    with pytest.raises(SpecError, match=r"'body' is missing from the SequenceExample .*seq.tfrecord, "
                                        r"record at offset 0"):
        list(tokenize(TFRecordDataset(path), sp_processor, feature="body",
                      record="sequence_example"))


def test_dict_elements_keep_their_other_entries():
    ds = Dataset.from_tensor_slices({"text": [b"abcdefg", b"xy"], "id": [1, 2]})
    out = list(tokenize(ds, chars, feature="text", add_bos=0, add_eos=1, max_length=5))
    assert [(int(e["id"]), e["text"].tolist()) for e in out] == [
        (1, [0, 97, 98, 99, 1]), (1, [0, 100, 101, 102, 1]), (1, [0, 103, 1]), (2, [0, 120, 121, 1])]
    assert tokenize(ds, chars, feature="text").element_spec["text"].dtype == np.int32


@pytest.mark.parametrize("overflow", ["chunk", "truncate", "error"])
def test_long_documents_are_chunked_truncated_or_reported(overflow):
    text = "".join(chr(97 + i % 26) for i in range(23)).encode()
    ds = Dataset.from_tensor_slices([b"hi", text])
    run = tokenize(ds, chars, add_bos=1, add_eos=2, max_length=8, overflow=overflow)
    if overflow == "error":
        with pytest.raises(tpudata.errors.PackingError, match="document 1 of the input has 23 tokens"):
            list(run)
        return
    out = [e["tokens"].tolist() for e in run]
    assert out[0] == [1, 104, 105, 2]
    assert all(len(x) <= 8 and x[0] == 1 and x[-1] == 2 for x in out)
    body = [t for x in out[1:] for t in x[1:-1]]
    assert body == list(text) if overflow == "chunk" else body == list(text[:6])
    assert len(out) == (1 + 4 if overflow == "chunk" else 2)


@pytest.mark.parametrize("overflow", ["chunk", "truncate", "error"])
@pytest.mark.parametrize("specials", [(None, None), (1, None), (None, 2), (1, 2)])
@pytest.mark.parametrize("kind", ["lists", "int32 arrays", "int64 arrays"])
def test_shaped_column_is_shape_ids_then_pieces_column(overflow, specials, kind):
    from tpudata.text.tokenize import pieces_column, shape_ids, shaped_column

    rng = np.random.default_rng(7)
    ids = [rng.integers(0, 1000, n).tolist() for n in (0, 3, 6, 7, 8, 13, 19, 1, 6)]
    if kind != "lists":
        ids = [np.asarray(x, np.int32 if kind == "int32 arrays" else np.int64) for x in ids]
    bos, eos = specials
    for max_length in (None, 8, 8 + 8 * (overflow == "error") * 2):
        if overflow == "error" and max_length == 8:
            with pytest.raises(tpudata.errors.PackingError) as want_err:
                shape_ids(ids, bos, eos, max_length, overflow)
            with pytest.raises(tpudata.errors.PackingError) as got_err:
                shaped_column(ids, bos, eos, max_length, overflow)
            assert str(got_err.value) == str(want_err.value)
            continue
        pieces, reps = shape_ids(ids, bos, eos, max_length, overflow)
        col, got_reps = shaped_column(ids, bos, eos, max_length, overflow)
        assert [x.tolist() for x in col] == [list(map(int, p)) for p in pieces]
        assert all(x.dtype == np.int32 for x in col)
        assert [x.tolist() for x in col] == [x.tolist() for x in pieces_column(pieces)]
        want = np.ones(len(ids), np.int64) if reps is None else reps
        assert (np.ones(len(ids), np.int64) if got_reps is None else got_reps).tolist() == \
            want.tolist()


def test_sentencepiece_long_documents_chunk_as_its_ids_do(sp_processor):
    texts = [" ".join(SENTENCES[: 1 + i % 7]) for i in range(40)]
    ds = Dataset.from_tensor_slices([t.encode() for t in texts])
    got = [e["tokens"].tolist() for e in tokenize(ds, sp_processor, add_bos=True, add_eos=True,
                                                  max_length=9, block_docs=16)]
    want = []
    for t in texts:
        x = sp_processor.encode(t)
        want += [[1] + x[i:i + 7] + [2] for i in range(0, max(len(x), 1), 7)]
    assert got == want


def test_a_length_without_room_besides_bos_eos_is_refused():
    with pytest.raises(TokenizerError, match="max_length=2 leaves no room"):
        tokenize(Dataset.range(1), chars, add_bos=1, add_eos=2, max_length=2)
    ids = tokenize(Dataset.from_tensor_slices([b"a"]), chars, add_bos=1, add_eos=2)
    with pytest.raises(tpudata.errors.PackingError, match=r"row of 2 'tokens' tokens has no room"):
        tpudata.text.pack(ids, {"tokens": 2}, num_bins=2)


def test_unknown_special_tokens_say_so(hf_tokenizer):
    with pytest.raises(TokenizerError, match="no token '<bos>'"):
        tokenize(Dataset.range(1), hf_tokenizer, add_bos="<bos>")
    with pytest.raises(TokenizerError, match="has no BOS token"):
        tokenize(Dataset.range(1), chars, add_bos=True)


def test_invalid_utf8_names_the_file_and_record_or_is_skipped(tmp_path, caplog):
    good = [b"fine", b"also fine"]
    path = lines_file(tmp_path, good[:1] + [b"bad \xff byte"] + good[1:])
    with pytest.raises(InvalidTextError) as err:
        list(tokenize(TextLineDataset(path), chars))
    assert err.value.path == path and err.value.record == "document 1 of the input"
    assert "not valid UTF-8" in str(err.value)
    with caplog.at_level(logging.WARNING, logger="tpudata.text"):
        out = list(tokenize(TextLineDataset(path), chars, skip_invalid=True))
    assert [bytes(e["tokens"].astype(np.uint8)) for e in out] == good
    assert path in caplog.text and "document 1" in caplog.text

    rec = str(tmp_path / "bad.tfrecord")
    records = [tpudata.encode_example({"text": t}) for t in (b"ok", b"\xc3\x28")]
    tpudata.write_records(rec, records)
    with pytest.raises(InvalidTextError) as err:
        list(tokenize(TFRecordDataset(rec), chars, feature="text", record="example"))
    assert err.value.path == rec and err.value.record == f"record at offset {len(records[0]) + 16}"


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_threads_and_processes_give_the_same_ids(how, hf_tokenizer):
    texts = [f"{SENTENCES[i % 7]} {i}".encode() for i in range(300)]
    ds = Dataset.from_tensor_slices(texts)
    want = [e["tokens"].tolist() for e in tokenize(ds, chars, add_eos=0, max_length=20)]
    kw = dict(num_parallel_calls=2, use_processes=how == "processes", block_docs=16)
    got = [e["tokens"].tolist() for e in tokenize(ds, chars, add_eos=0, max_length=20, **kw)]
    assert got == want
    if how == "threads":
        hf = [e["tokens"].tolist() for e in tokenize(ds, hf_tokenizer, num_parallel_calls=2,
                                                     block_docs=7)]
        assert hf == [hf_tokenizer.encode(t.decode(), add_special_tokens=False).ids for t in texts]


@pytest.mark.parametrize("threads", [None, 2])
def test_restored_at_random_steps_gives_the_same_elements(threads):
    texts = [("x" * (i % 37)).encode() + str(i).encode() for i in range(400)]
    ds = tokenize(Dataset.from_tensor_slices(texts).prefetch(3), chars, add_bos=1, max_length=9,
                  num_parallel_calls=threads, block_docs=13)
    want = [e["tokens"].tolist() for e in ds]
    for seed in range(3):
        got, _ = killed_and_restored(ds, seed)
        assert [e["tokens"].tolist() for e in got] == want
