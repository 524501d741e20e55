"""Tiny tokenizers trained here, on a few sentences (no network, no files from elsewhere)."""

from __future__ import annotations

import io

import pytest

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A packed row holds several short documents, one after the other.",
    "Segment ids start at one; padding is zero.",
    "Positions restart at zero at the start of every document.",
    "Tokenizers turn text into integer ids, a batch of documents at a time.",
    "SentencePiece and Hugging Face tokenizers both release the GIL in batch calls.",
    "Élan, naïve café: accents are text too.",
]


@pytest.fixture(scope="session")
def hf_tokenizer():
    """A byte-level BPE ``tokenizers.Tokenizer`` with <pad>, <unk>, <s> and </s>."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(SENTENCES * 4, trainer)
    return tok


@pytest.fixture(scope="session")
def sp_processor():
    """A SentencePiece BPE model trained on the fly (bos 1, eos 2)."""
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTENCES * 4), model_writer=model,
                                   vocab_size=120, model_type="bpe", minloglevel=2,
                                   hard_vocab_limit=False, character_coverage=1.0)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())
