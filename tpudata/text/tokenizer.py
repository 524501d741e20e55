"""Tokenizers behind one interface: Hugging Face ``tokenizers`` and SentencePiece.

:func:`load_tokenizer` takes a tokenizer object (``tokenizers.Tokenizer``, a
``sentencepiece.SentencePieceProcessor``, a ``transformers`` fast tokenizer, or a function
``texts -> token id lists``) or the path / URL of a tokenizer file (``tokenizer.json``, a
SentencePiece ``*.model``, or a folder holding one) and returns a :class:`Tokenizer`, which
encodes a whole list of texts in one call (``encode_batch``), pickles as its model bytes (for
worker processes) and knows its special tokens. Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any, Callable, Sequence

from tpudata._keywords import strict_keywords
from tpudata.errors import MissingExtraError, TokenizerError
from tpudata.text.wordcache import make_word_cache

# module -> the pip distribution that brings it; both are in the [text] extra
BACKENDS = {"tokenizers": "tokenizers", "sentencepiece": "sentencepiece"}
# the names BOS / EOS go by in tokenizer.json files, tried in this order
_BOS_NAMES = ("<s>", "<bos>", "<|begin_of_text|>", "<|bos|>", "[BOS]", "<|startoftext|>")
_EOS_NAMES = ("</s>", "<eos>", "<|end_of_text|>", "<|endoftext|>", "<|eos|>", "[EOS]")


def installed_backends() -> dict[str, str | None]:
    """``{backend: version or None}`` for the tokenizer libraries tpudata can use."""
    out: dict[str, str | None] = {}
    for module, dist in BACKENDS.items():
        try:
            out[module] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[module] = None
    return out


def _installed_text() -> str:
    parts = [f"{name} {version}" if version else f"{name} (not installed)"
             for name, version in installed_backends().items()]
    return ", ".join(parts)


def _import(backend: str):
    try:
        return __import__(backend)
    except ImportError as exc:
        raise MissingExtraError(
            f"this tokenizer needs the {backend} package, which is not installed: pip install "
            f"'tpudata[text]' (installed: {_installed_text()})", extra="text",
            name=backend) from exc


class Tokenizer:
    """A loaded tokenizer: ``encode_batch(texts) -> list of token id lists``.

    ``backend`` is ``"tokenizers"``, ``"sentencepiece"`` or ``"function"``;
    ``releases_gil`` says whether a batch encode lets other Python threads run (then the
    tokenize op encodes in line or on threads; otherwise ``use_processes=True`` is the way to
    use several cores).
    """

    def __init__(self, backend: str, impl: Any, model: bytes | None = None):
        self.backend = backend
        self.impl = impl
        self._model = model  # what the tokenizer pickles as (None: the object itself)
        self.releases_gil = backend in ("tokenizers", "sentencepiece")
        if backend == "tokenizers":
            fast = getattr(impl, "encode_batch_fast", None)  # no offsets: ~1.5x less CPU
            self._encode = fast if fast is not None else impl.encode_batch
        elif backend == "sentencepiece":
            self._encode = impl.encode
            self._sp_batch, self._sp_numpy = _sentencepiece_calls(impl)
            self._words = make_word_cache(impl, model)  # None: whole texts (the reason logged)

    def encode_batch(self, texts: Sequence[str]) -> list:
        """Token ids of each text (lists, or arrays), no special tokens added."""
        if self.backend == "sentencepiece":
            return [x.tolist() if not isinstance(x, list) else x for x in self.encode_ids(texts)]
        return self.encode_ids(texts)

    def encode_ids(self, texts: Sequence[str]) -> list:
        """:meth:`encode_batch`, with int32 arrays instead of lists where the library gives
        them (SentencePiece >= 0.2.1): what the tokenize op uses."""
        if self.backend == "tokenizers":
            return [e.ids for e in self._encode(list(texts), add_special_tokens=False)]
        if self.backend == "sentencepiece":
            if self._words is not None:  # the same ids, each word encoded once
                return self._words.encode(texts, self._sp_whole)
            return self._sp_whole(texts)
        return list(self.impl(list(texts)))

    def _sp_whole(self, texts: Sequence[str]) -> list:
        """SentencePiece's own ids for whole texts."""
        encode = self._encode
        if not self._sp_batch:  # one call per text
            return [encode(t) for t in texts]
        # one call for the block, on one thread (it releases the GIL: the op's own threads
        # spread blocks over cores): less CPU than a call per text or than its thread pool
        if self._sp_numpy:
            return encode(list(texts), out_type="numpy", num_threads=1)
        return encode(list(texts), num_threads=1)

    def token_id(self, token: str) -> int | None:
        """The id of a token string (None when the vocabulary has no such token)."""
        if self.backend == "tokenizers":
            return self.impl.token_to_id(token)
        if self.backend == "sentencepiece":
            i = self.impl.piece_to_id(token)
            return None if i == self.impl.unk_id() and token != self.impl.id_to_piece(i) else i
        return None

    def special_id(self, which: str) -> int | None:
        """The tokenizer's own BOS (``which="bos"``) or EOS id, None when it has none."""
        if self.backend == "sentencepiece":
            i = self.impl.bos_id() if which == "bos" else self.impl.eos_id()
            return None if i < 0 else int(i)
        for name in _BOS_NAMES if which == "bos" else _EOS_NAMES:
            i = self.token_id(name)
            if i is not None:
                return int(i)
        return None

    def resolve(self, value: int | str | bool | None, which: str) -> int | None:
        """A BOS/EOS setting as an id: an int as it is, a token string looked up, ``True``
        the tokenizer's own, ``False``/``None`` none."""
        if value is None or value is False:
            return None
        if value is True:
            found = self.special_id(which)
            if found is None:
                raise TokenizerError(
                    f"add_{which}=True but this {self.backend} tokenizer has no {which.upper()} "
                    f"token (tried {', '.join(_BOS_NAMES if which == 'bos' else _EOS_NAMES)}); "
                    f"give its id or token string: add_{which}=<id> or add_{which}='<token>'")
            return found
        if isinstance(value, str):
            found = self.token_id(value)
            if found is None:
                raise TokenizerError(f"the tokenizer has no token {value!r} (add_{which})")
            return int(found)
        if isinstance(value, bool) or int(value) != value or int(value) < 0:
            raise TokenizerError(f"add_{which} must be a token id >= 0, a token or a bool: "
                                 f"{value!r}")
        return int(value)

    def __reduce__(self):
        if self._model is None:
            return (Tokenizer, (self.backend, self.impl))
        return (_rebuild, (self.backend, self._model))

    def __repr__(self) -> str:
        return f"<Tokenizer {self.backend}>"


def _sentencepiece_calls(impl) -> tuple[bool, bool]:
    """Whether this SentencePiece takes ``encode(list, num_threads=1)``, and whether it also
    takes ``out_type="numpy"`` (int32 arrays, 0.2.1 on)."""
    try:
        impl.encode(["a"], out_type="numpy", num_threads=1)
        return True, True
    except (TypeError, ValueError, RuntimeError):
        pass
    try:
        impl.encode(["a"], num_threads=1)
        return True, False
    except (TypeError, ValueError, RuntimeError):
        return False, False


def _rebuild(backend: str, model: bytes) -> Tokenizer:
    return _from_bytes(backend, model, "a pickled tokenizer")


def _from_bytes(backend: str, data: bytes, where: str) -> Tokenizer:
    module = _import(backend)
    try:
        if backend == "tokenizers":
            impl = module.Tokenizer.from_str(data.decode("utf-8"))
        else:
            impl = module.SentencePieceProcessor(model_proto=data)
    except Exception as exc:  # the library's own words for a damaged file
        raise TokenizerError(f"{where} is not a {backend} tokenizer: {exc}") from exc
    return Tokenizer(backend, impl, data)


def _backend_of_path(path: str) -> str | None:
    name = os.path.basename(path.rstrip("/"))
    if name.endswith(".json"):
        return "tokenizers"
    if name.endswith(".model"):
        return "sentencepiece"
    return None


def _from_path(path: str, storage_options: dict | None) -> Tokenizer:
    from tpudata import storage

    opts = storage_options or {}
    backend = _backend_of_path(path)
    candidates = [path] if backend else [
        storage.join(path, name) for name in ("tokenizer.json", "tokenizer.model",
                                              "spiece.model", "sentencepiece.model")]
    for candidate in candidates:
        try:
            if not storage.exists(candidate, **opts):
                continue
            data = storage.read_bytes(candidate, **opts)
        except (OSError, ValueError):
            continue
        return _from_bytes(backend or _backend_of_path(candidate), data, candidate)
    raise TokenizerError(
        f"unknown tokenizer {path!r}: it is not a tokenizer file (tokenizer.json for tokenizers, "
        f"*.model for sentencepiece) nor a folder holding one, and tpudata downloads none. "
        f"Installed tokenizer libraries: {_installed_text()}. Give a path or URL to such a file, "
        "or a tokenizer object (tokenizers.Tokenizer, sentencepiece.SentencePieceProcessor, a "
        "transformers fast tokenizer, or a function texts -> token id lists)")


@strict_keywords
def load_tokenizer(tokenizer: Any, *, storage_options: dict | None = None) -> Tokenizer:
    """A :class:`Tokenizer` from an object or a file (see the module's docstring)."""
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    if isinstance(tokenizer, (str, os.PathLike)):
        return _from_path(os.fspath(tokenizer), storage_options)
    backend_tok = getattr(tokenizer, "backend_tokenizer", None)  # transformers' fast tokenizers
    if backend_tok is not None:
        tokenizer = backend_tok
    kind = type(tokenizer).__module__.split(".")[0]
    if kind == "tokenizers" and hasattr(tokenizer, "encode_batch"):
        return Tokenizer("tokenizers", tokenizer, tokenizer.to_str().encode("utf-8"))
    if kind == "sentencepiece" and hasattr(tokenizer, "serialized_model_proto"):
        return Tokenizer("sentencepiece", tokenizer, tokenizer.serialized_model_proto())
    if callable(tokenizer):
        return Tokenizer("function", tokenizer)
    raise TokenizerError(
        f"cannot tokenize with a {type(tokenizer).__name__}: give a tokenizers.Tokenizer, a "
        "sentencepiece.SentencePieceProcessor, a transformers fast tokenizer, a path to "
        f"tokenizer.json / *.model, or a function texts -> token id lists (installed: "
        f"{_installed_text()})")


def function_tokenizer(fn: Callable[[list], list]) -> Tokenizer:
    """A :class:`Tokenizer` of a function ``list of str -> list of token id lists`` (it holds
    the GIL as far as tpudata knows: use ``use_processes=True`` for several cores)."""
    return Tokenizer("function", fn)


__all__ = ["BACKENDS", "Tokenizer", "function_tokenizer", "installed_backends", "load_tokenizer"]
