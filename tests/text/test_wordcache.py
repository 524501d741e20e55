"""SentencePiece BPE ids word by word (tpudata.text.wordcache): always SentencePiece's own ids,
and used only where the model and processor allow it."""

from __future__ import annotations

import io
import pickle
import random

import numpy as np
import pytest

from tests.text.conftest import SENTENCES
from tpudata.text import wordcache
from tpudata.text.tokenizer import Tokenizer, load_tokenizer

spm = pytest.importorskip("sentencepiece")

# characters that stress the edges: accents precomposed and combining, NBSP and ideographic
# space, tab/newline, zero-width and control characters, Hangul jamo and syllables, full-width
# forms NFKC folds, ligatures, the '▁' SentencePiece uses itself, emoji, CJK
ALPHABET = list("abcdefghij ABC,.!?-'0123") + [
    "é", "e\u0301", "\u0301", "\u00a0", "\u3000", "\t", "\n", "\u200b", "\u0007", "\u1100",
    "\u1161", "\u11a8", "한", "Ａ", "ﬁ", "½", "\u2581", "😀", "日本", "ü", "´", " ", " ", " "]


def _model(**options) -> bytes:
    out = io.BytesIO()
    texts = SENTENCES * 4 + ["".join(random.Random(i).choices(ALPHABET, k=40)) for i in range(40)]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=out,
                                   vocab_size=options.pop("vocab_size", 150), minloglevel=2,
                                   hard_vocab_limit=False, character_coverage=1.0, **options)
    return out.getvalue()


def _texts(seed: int, n: int = 400) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:  # words of plain letters: what the cache serves
            out.append(" ".join(rng.choice(SENTENCES).split()[:rng.randint(1, 9)]))
        else:  # anything: it must still give SentencePiece's ids
            out.append("".join(rng.choices(ALPHABET, k=rng.randint(0, 30))))
    return out


@pytest.mark.parametrize("options", [
    {"model_type": "bpe"},
    {"model_type": "bpe", "normalization_rule_name": "nfkc", "byte_fallback": True, "vocab_size": 600},
    {"model_type": "bpe", "normalization_rule_name": "identity", "user_defined_symbols": ["<sep>", "ab"]},
    {"model_type": "bpe", "normalization_rule_name": "identity", "remove_extra_whitespaces": False,
     "allow_whitespace_only_pieces": True, "byte_fallback": True, "split_digits": True,
     "vocab_size": 600},  # as LLaMA's tokenizer
    {"model_type": "bpe", "normalization_rule_name": "identity", "remove_extra_whitespaces": False,
     "add_dummy_prefix": False, "allow_whitespace_only_pieces": True},
])
def test_word_by_word_gives_sentencepiece_ids_for_any_text(options):
    sp = spm.SentencePieceProcessor(model_proto=_model(**options))
    tok = load_tokenizer(sp)
    assert tok._words is not None  # the cache is in use for these models
    for seed in range(3):
        texts = _texts(seed) + ["a <sep> b", "x<sep>y zab", "", " ", "a", "a  b", " a", "a ",
                                "    indented code", "tab\tand  two", "x" * 40 + " y"]
        got = tok.encode_ids(texts)
        assert [list(map(int, g)) for g in got] == [sp.encode(t) for t in texts]
        assert all(g.dtype == np.int32 for g in got)
    assert len(tok._words) > 0


def test_a_full_cache_starts_again_and_stays_right(monkeypatch):
    monkeypatch.setattr(wordcache, "MAX_WORDS", 5)
    sp = spm.SentencePieceProcessor(model_proto=_model(model_type="bpe"))
    tok = load_tokenizer(sp)
    texts = _texts(7)
    assert [g.tolist() for g in tok.encode_ids(texts)] == [sp.encode(t) for t in texts]
    assert len(tok._words) <= 5


def test_a_pickled_tokenizer_keeps_using_the_cache():
    sp = spm.SentencePieceProcessor(model_proto=_model(model_type="bpe"))
    back = pickle.loads(pickle.dumps(load_tokenizer(sp)))
    texts = _texts(3)
    assert back._words is not None
    assert [g.tolist() for g in back.encode_ids(texts)] == [sp.encode(t) for t in texts]


@pytest.mark.parametrize("options, processor, why", [
    ({"model_type": "unigram"}, {}, "not a BPE model"),
    ({"model_type": "bpe", "normalization_rule_name": "nmt_nfkc_cf"}, {}, "normalization"),
    ({"model_type": "bpe", "split_by_whitespace": False}, {}, "after its start"),
    ({"model_type": "bpe", "treat_whitespace_as_suffix": True}, {}, "'▁'"),
    ({"model_type": "bpe", "add_dummy_prefix": False}, {}, "add_dummy_prefix"),
    ({"model_type": "bpe"}, {"add_bos": True}, "add_bos"),
    ({"model_type": "bpe"}, {"enable_sampling": True}, "enable_sampling"),
])
def test_models_and_processors_the_cache_cannot_serve_encode_whole_texts(options, processor, why):
    model = _model(**options)
    sp = spm.SentencePieceProcessor(model_proto=model, **processor)
    assert why in wordcache.word_cache_reason(sp, model)
    tok = load_tokenizer(sp)
    assert tok._words is None
    if not processor.get("enable_sampling"):
        texts = _texts(5, 50)
        assert [list(g) for g in tok.encode_ids(texts)] == [sp.encode(t) for t in texts]


def test_a_processor_that_adds_ids_per_call_is_caught_by_the_probe():
    class Marked(spm.SentencePieceProcessor):
        """A processor whose every call ends with id 0 (as options set inside it would)."""

        def encode(self, text, **kw):
            return super().encode(text, **kw) + [0]

    model = _model(model_type="bpe")
    sp = Marked(model_proto=model)
    assert "probe" in wordcache.word_cache_reason(sp, model)
    tok = Tokenizer("sentencepiece", sp, model)
    assert tok._words is None


@pytest.mark.parametrize("layout", ["nmt_nfkc", "nfkc", "identity", "identity, extra whitespace kept",
                                    "identity, kept, no dummy prefix"])
def test_code_points_at_a_word_edge_keep_sentencepiece_ids(layout):
    """A sample of tools/check_wordcache_edges.py (every 61st code point; the tool checks all)."""
    from tools.check_wordcache_edges import mismatches, model

    data = model(layout)
    sp = spm.SentencePieceProcessor(model_proto=data)
    assert mismatches(sp, data, step=61, start=len(layout) % 61) == []


def test_the_whitespace_list_is_pythons():
    """str.split() parts words at exactly these characters (nmt_nfkc models split texts so)."""
    assert set(wordcache._SPACES) == {chr(o) for o in range(0x110000) if chr(o).isspace()}
    assert set(wordcache._ODD_SPACES) < set(wordcache._SPACES)


def test_nmt_nfkc_texts_with_newlines_and_runs_of_spaces_are_served_word_by_word():
    sp = spm.SentencePieceProcessor(model_proto=_model(model_type="bpe"))
    tok = load_tokenizer(sp)
    texts = ["  The quick\n\nbrown fox.\tA packed\u3000row  holds\u00a0short documents.\r\n",
             "Segment ids\n start at one;\u2003padding is zero. ", "\n", "   "]
    odd = ["a\x0bb", "a\x1cb c", "a\x85b", "x \u2581 y"]  # not spaces to nmt_nfkc, or '▁'
    sent = []

    def whole(batch):
        sent.extend(batch)
        return [sp.encode(t) for t in batch]

    got = tok._words.encode(texts + odd, whole)
    assert [g.tolist() for g in got] == [sp.encode(t) for t in texts + odd]
    assert sent == ["\n", "   "] + odd  # the paragraphs went word by word


def test_a_model_whose_spaces_do_not_all_part_words_splits_at_single_spaces(monkeypatch):
    monkeypatch.setattr(wordcache, "_ODD_SPACES", "")  # as if \x0b, \x1c... were spaces too
    sp = spm.SentencePieceProcessor(model_proto=_model(model_type="bpe"))
    assert not wordcache._spaces_part_words(sp)
    cache = load_tokenizer(sp)._words
    assert cache is not None and not cache._any
    texts = _texts(11)
    assert [g.tolist() for g in cache.encode(texts, lambda b: [sp.encode(t) for t in b])] == [
        sp.encode(t) for t in texts]


def test_a_damaged_model_encodes_whole_texts_and_says_where():
    model = _model(model_type="bpe")
    sp = spm.SentencePieceProcessor(model_proto=model)
    assert "malformed protobuf at byte" in wordcache.word_cache_reason(sp, model[:-7])
    assert Tokenizer("sentencepiece", sp, model[:-7])._words is None
