"""Check tpudata.text.wordcache against SentencePiece for every code point at a word's edge.

For each code point ``c`` and for BPE models of each layout the word cache serves (``MODELS``:
nmt_nfkc, nfkc and identity normalization; extra whitespace kept, with and without the dummy
prefix; trained here), the cache's ids for texts with ``c`` alone, ending a word, starting one,
and after a combining mark must equal SentencePiece's own (a text the cache cannot vouch for
goes to SentencePiece whole):

    python tools/check_wordcache_edges.py [--step 1]   # ~1 minute per model; prints mismatches

``--step K`` checks every K-th code point (the test suite checks a sample the same way).
"""

from __future__ import annotations

import argparse
import io
import random
import sys



MODELS = {  # name: SentencePiece trainer options besides the BPE model
    "nmt_nfkc": {},
    "nfkc": {"normalization_rule_name": "nfkc"},
    "identity": {"normalization_rule_name": "identity"},
    "identity, extra whitespace kept": {  # as LLaMA's tokenizer
        "normalization_rule_name": "identity", "remove_extra_whitespaces": False,
        "allow_whitespace_only_pieces": True, "split_digits": True},
    "identity, kept, no dummy prefix": {
        "normalization_rule_name": "identity", "remove_extra_whitespaces": False,
        "add_dummy_prefix": False, "allow_whitespace_only_pieces": True},
}


def model(name: str) -> bytes:
    import sentencepiece as spm

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyzéüßçñ"
    texts = [" ".join("".join(rng.choices(letters, k=rng.randint(1, 8))) for _ in range(12))
             for _ in range(400)]
    texts += ["Ünïcödé façade – “quotes” — ½ ﬁ ①", "日本語のテキスト 한국어 텍스트 中文",
              "indent    four  spaces\tand tabs"] * 20
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=out,
                                   vocab_size=1000, model_type="bpe", minloglevel=2,
                                   character_coverage=1.0, byte_fallback=True, **MODELS[name])
    return out.getvalue()


def mismatches(sp, model_bytes: bytes, step: int = 1, start: int = 0) -> list:
    """``(code point, text)`` where tpudata's word-by-word ids differ from SentencePiece's own:
    each code point alone between spaces, ending a word, starting one, after a combining mark."""
    from tpudata.text.wordcache import make_word_cache

    cache = make_word_cache(sp, model_bytes)
    if cache is None:
        raise SystemExit("the word cache is not used for this model")

    def whole(texts):
        return [sp.encode(t, out_type=int) for t in texts]

    bad = []
    for o in range(start, 0x110000, step):
        if 0xD800 <= o <= 0xDFFF:
            continue
        c = chr(o)
        texts = ["a " + c + " b", "a" + c + " b", "a " + c + "b", "\u0301" + c + " b", c + " b",
                 "a " + c]
        for t, got in zip(texts, cache.encode(texts, whole)):
            if got.tolist() != sp.encode(t, out_type=int):
                bad.append((o, t))
    return bad


def main() -> int:
    import sentencepiece as spm

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", type=int, default=1)
    args = ap.parse_args()
    failed = 0
    for name in MODELS:
        data = model(name)
        bad = mismatches(spm.SentencePieceProcessor(model_proto=data), data, args.step)
        failed += len(bad)
        print(f"{name}: {len(bad)} mismatches" + "".join(f"\n  U+{o:04X} {t!r}" for o, t in bad[:20]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
