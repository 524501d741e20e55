"""SentencePiece BPE ids word by word, each word encoded once: the same ids, less CPU.

A SentencePiece BPE model normalizes a text, marks word starts with ``▁`` and merges adjacent
symbols only into pieces of its vocabulary. When no piece holds a ``▁`` after its first
character, no merge crosses a word boundary, and each word's merges happen in the same order
whatever surrounds it, so a text's ids are its space-separated words' ids one after another:
a word's ids can be kept and reused. :func:`word_cache_reason` says whether a model allows
that; :class:`WordCache` encodes texts through it, and hands SentencePiece itself every text it
cannot vouch for, so the ids always equal ``processor.encode(text)``.

Conditions (checked once, from the model's own bytes and a probe of the processor):

- a BPE model (``model_type=bpe``) whose pieces hold ``▁`` only first (or are all ``▁``);
- normalization ``nmt_nfkc``, ``nfkc`` or ``identity`` with no rule file that escapes
  whitespace and either adds the dummy prefix (SentencePiece's defaults, or LLaMA's identity
  normalization that keeps extra whitespace) or keeps extra whitespace without it (then the
  words after a text's first are encoded after a space); no ``treat_whitespace_as_suffix``;
- a processor that adds nothing per call (no BOS/EOS, reversal or sampling).

Texts: words split on single ASCII spaces (none first, last or doubled, and no ``▁`` in the
text) - or, for nmt_nfkc models that remove extra whitespace (SentencePiece's defaults), on any
run of whitespace, first and last included, except the few characters nmt_nfkc does not turn
into a space (``_ODD_SPACES``; checked against the processor once); a word's first and last
characters must be ones no normalization joins to a neighbouring space (letters, digits, punctuation, symbols: not marks, separators, controls, Hangul jamo or
``▁``; ``tools/check_wordcache_edges.py`` checks every such code point against SentencePiece on
both sides of a space). Anything else goes to SentencePiece whole.
"""

from __future__ import annotations

import functools
import itertools
import logging
import unicodedata
from typing import Any, Sequence

import numpy as np

from tpudata.example.wire import WT_VARINT, Malformed, iter_fields, read_varint

logger = logging.getLogger(__name__)

__all__ = ["MAX_WORDS", "WordCache", "make_word_cache", "word_cache_reason"]

MAX_WORDS = 1 << 18  # words kept; the cache starts again when full
_BPE = 2
_MARK = "\u2581".encode("utf-8")
_NORMALIZERS = ("nmt_nfkc", "nfkc", "identity")
_UNSAFE = None  # a word whose ids depend on what surrounds it: its text goes to SentencePiece
# Python's whitespace (what str.split() parts at; a test checks the list is whole), and those
# of it nmt_nfkc does not turn into a space
_SPACES = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
           "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_ODD_SPACES = "\x0b\x1c\x1d\x1e\x1f\x85"  # WordCache.encode looks for each by name


def _fields(buf: bytes):
    """``(field number, value)`` of a protobuf message (the wire walker of tf.train messages):
    ints for varints, the payload's bytes otherwise."""
    for field, wt, s, t, _ in iter_fields(buf, 0, len(buf)):
        yield field, read_varint(buf, s, t)[0] if wt == WT_VARINT else buf[s:t]


@functools.lru_cache(maxsize=8)  # a model read once per process (256k pieces: ~0.4 s)
def _model_layout(model: bytes) -> tuple[str | None, bool | str]:
    """(why not, the layout) from the model's bytes: ``"any"`` (nmt_nfkc, dummy prefix, extra
    whitespace removed: every whitespace run but ``_ODD_SPACES`` parts words), True (the dummy
    prefix; words part at single spaces) or False (no dummy prefix, whitespace kept)."""
    model_type, normalizer, suffix = 1, None, False
    pieces = 0
    for field, value in _fields(model):
        if field == 1:  # SentencePiece
            pieces += 1
            if value.find(_MARK, 3) < 0:  # no '▁' past the piece's first character
                continue
            for f, v in _fields(value):
                piece = v.decode("utf-8") if f == 1 else ""
                if "\u2581" in piece[1:] and piece.strip("\u2581"):
                    return f"the piece {piece!r} holds '\u2581' after its start", False
        elif field == 2:  # TrainerSpec
            for f, v in _fields(value):
                if f == 3:
                    model_type = v
                elif f == 24:
                    suffix = bool(v)
        elif field == 3:  # NormalizerSpec
            normalizer = dict(_fields(value))
    if model_type != _BPE:
        return "not a BPE model", False
    if suffix:
        return "treat_whitespace_as_suffix is set", False
    if not pieces:
        return "no pieces", False
    normalizer = normalizer or {}
    name = normalizer.get(1, b"").decode("utf-8")
    if name not in _NORMALIZERS or normalizer.get(6):
        return (f"normalization {name!r} (word ids are reused under "
                f"{', '.join(_NORMALIZERS)})"), False
    prefix, squeeze = bool(normalizer.get(3, 1)), bool(normalizer.get(4, 1))
    if not normalizer.get(5, 1):
        return "escape_whitespaces is off", False
    if not prefix and squeeze:
        return "add_dummy_prefix is off while remove_extra_whitespaces is on", False
    return None, "any" if prefix and squeeze and name == "nmt_nfkc" else prefix


def _processor_reason(impl: Any, layout: bool | str) -> str | None:
    for attr in ("_add_bos", "_add_eos", "_reverse", "_enable_sampling"):
        if getattr(impl, attr, False):
            return f"the processor was made with {attr[1:]}=True"
    probe = "Ab c, d-e! 12 f."
    alone = WordCache(impl, layout).encode([probe], lambda texts: [
        impl.encode(t, out_type=int) for t in texts])
    if list(impl.encode(probe, out_type=int)) != alone[0].tolist():
        return "the processor's ids for a probe text differ from its words' ids"
    return None


def _spaces_part_words(impl: Any) -> bool:
    """Whether every whitespace character but ``_ODD_SPACES`` parts words as a space does, alone
    or in runs, first or last (nmt_nfkc's normalization)."""
    want = impl.encode("a b", out_type=int)
    return all(impl.encode(c + "a" + c + c + "b" + c, out_type=int) == want
               for c in _SPACES if c not in _ODD_SPACES)


def word_cache_reason(impl: Any, model: bytes | None) -> str | None:
    """None when :class:`WordCache` gives this SentencePiece processor's own ids; else why not."""
    return _reason_and_layout(impl, model)[0]


def _reason_and_layout(impl: Any, model: bytes | None) -> tuple[str | None, bool | str]:
    if model is None:
        return "the model's bytes are not known", False
    try:
        reason, layout = _model_layout(bytes(model))
    except Malformed as exc:
        return f"the model could not be read (malformed protobuf at byte {exc.pos})", False
    except UnicodeDecodeError as exc:
        return f"the model could not be read ({exc})", False
    if reason is None:
        reason = _processor_reason(impl, bool(layout))
    return reason, layout


def make_word_cache(impl: Any, model: bytes | None) -> "WordCache | None":
    """A :class:`WordCache` for this processor, or None (then the reason is logged)."""
    reason, layout = _reason_and_layout(impl, model)
    if reason is not None:
        logger.debug("SentencePiece encodes whole texts: %s", reason)
        return None
    if layout == "any" and not _spaces_part_words(impl):
        layout = True
    return WordCache(impl, layout)


def _edge_safe(c: str) -> bool:
    """Whether no normalization joins ``c`` to a space beside it."""
    if " " < c < "\x7f":
        return True
    if c == "\u2581" or unicodedata.combining(c) or unicodedata.category(c)[0] not in "LNPS":
        return False
    o = ord(c)
    return not (0x1100 <= o <= 0x11FF or 0xA960 <= o <= 0xA97F or 0xD7B0 <= o <= 0xD7FF
                or 0x3130 <= o <= 0x318F)


class WordCache(dict):
    """word -> its ids (a tuple), filled on first sight; ``encode(texts)`` -> int32 arrays.

    ``layout``: True - SentencePiece adds a ``▁`` before the text (``add_dummy_prefix``), so
    each word's ids are those of the word alone, words parted by single spaces; ``"any"`` - the
    same, and any run of whitespace (but ``_ODD_SPACES``) parts words, first and last ones
    included (nmt_nfkc removes extra whitespace); False - no dummy prefix and whitespace kept,
    so a text's first word is encoded alone and every other word after a space.
    """

    def __init__(self, impl: Any, layout: bool | str = True):
        super().__init__()
        self._impl = impl
        self._any = layout == "any"
        self._lead = "" if layout else " "
        self._first = self if layout else _FirstWords(impl)

    def __missing__(self, word: str):
        if len(self) >= MAX_WORDS:
            self.clear()
        if not (_edge_safe(word[0]) and _edge_safe(word[-1])):
            ids = _UNSAFE
        else:
            ids = tuple(self._impl.encode(self._lead + word, out_type=int))
        self[word] = ids
        return ids

    def encode(self, texts: Sequence[str], whole) -> list:
        """Each text's ids as an int32 array; ``whole(list of texts)`` encodes the texts the
        cache cannot (SentencePiece's own call)."""
        out: list = [None] * len(texts)
        rest: list = []
        get, first = self.__getitem__, self._first.__getitem__
        chain = itertools.chain.from_iterable
        loose = self._any
        for k, t in enumerate(texts):
            if loose:  # seven scans for one character each cost less than one regex
                words = None if ("\u2581" in t or "\x0b" in t or "\x1c" in t or "\x1d" in t
                                 or "\x1e" in t or "\x1f" in t or "\x85" in t) else t.split()
            elif t and t[0] != " " and t[-1] != " " and "  " not in t and "\u2581" not in t:
                words = t.split(" ")
            else:
                words = None
            if not words:  # empty, or not for the cache: SentencePiece itself
                rest.append(k)
                continue
            parts = [first(words[0])]
            parts += map(get, words[1:]) if len(words) > 1 else ()
            if _UNSAFE in parts:
                rest.append(k)
                continue
            out[k] = np.fromiter(chain(parts), np.int32)
        if rest:
            for k, ids in zip(rest, whole([texts[k] for k in rest])):
                out[k] = np.asarray(ids, np.int32)
        return out


class _FirstWords(WordCache):
    """The words that open a text, for models without the dummy prefix (encoded alone)."""

    def __init__(self, impl: Any):
        dict.__init__(self)
        self._impl, self._lead = impl, ""
