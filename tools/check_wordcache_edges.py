"""Check every code point tpudata.text.wordcache lets stand at a word's edge against SentencePiece.

For each code point ``c`` that ``wordcache._edge_safe`` accepts, and for BPE models normalizing
with ``nmt_nfkc``, ``nfkc`` and ``identity`` (trained here), SentencePiece's ids for a text must
equal its words' ids one after another, with ``c`` alone, ending a word, starting one, and after
a combining mark:

    python tools/check_wordcache_edges.py [--step 1]   # ~1 minute per model; prints mismatches

``--step K`` checks every K-th code point (the test suite checks a sample the same way).
"""

from __future__ import annotations

import argparse
import io
import random
import sys

from tpudata.text.wordcache import _edge_safe


def model(rule: str) -> bytes:
    import sentencepiece as spm

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyzéüßçñ"
    texts = [" ".join("".join(rng.choices(letters, k=rng.randint(1, 8))) for _ in range(12))
             for _ in range(400)]
    texts += ["Ünïcödé façade – “quotes” — ½ ﬁ ①", "日本語のテキスト 한국어 텍스트 中文"] * 20
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=out,
                                   vocab_size=1000, model_type="bpe", minloglevel=2,
                                   character_coverage=1.0, normalization_rule_name=rule,
                                   byte_fallback=True)
    return out.getvalue()


def mismatches(sp, step: int = 1, start: int = 0) -> list:
    """``(code point, text)`` where the word-by-word ids differ from SentencePiece's own."""
    def enc(s):
        return sp.encode(s, out_type=int)

    bad = []
    for o in range(start, 0x110000, step):
        if 0xD800 <= o <= 0xDFFF or not _edge_safe(chr(o)):
            continue
        c = chr(o)
        for whole, parts in (("a " + c + " b", ["a", c, "b"]), ("a" + c + " b", ["a" + c, "b"]),
                             ("a " + c + "b", ["a", c + "b"]),
                             ("\u0301" + c + " b", ["\u0301" + c, "b"])):
            if enc(whole) != [i for p in parts for i in enc(p)]:
                bad.append((o, whole))
    return bad


def main() -> int:
    import sentencepiece as spm

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", type=int, default=1)
    args = ap.parse_args()
    failed = 0
    for rule in ("nmt_nfkc", "nfkc", "identity"):
        sp = spm.SentencePieceProcessor(model_proto=model(rule))
        bad = mismatches(sp, args.step)
        failed += len(bad)
        print(f"{rule}: {len(bad)} mismatches" + "".join(f"\n  U+{o:04X} {t!r}" for o, t in bad[:20]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
