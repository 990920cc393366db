"""Tiny models and toy data that several test files build alike, each defined once here.

Test files import it by name (``from tiny import tiny_transformer``): pytest puts ``tests/`` on ``sys.path``.
Fixtures (the shipped tokenizer, the prepared Bible) are in ``conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

# the models the package ships, in index.json's order (the tests that check the catalogue, the API and the wheel)
SHIPPED = [
    "transformer-es-en",
    "transformer-en-es",
    "rnnsearch-es-en",
    "rnnencdec-es-en",
    "captioner-soft",
    "captioner-hard",
    "attention-only-2l-en",
    "lm-4l-en",
]
# What the server tests serve: the shipped translators and captioners. A shipped language model is served
# as its transformers twin, which costs each server process and worker about 4 s (importing transformers,
# building the twin); the tests that need one name it, and test_explorer_api serves every shipped model.
SERVED_IN_TESTS = [n for n in SHIPPED if n not in ("attention-only-2l-en", "lm-4l-en")]

# a few optimizer steps of an RNN translator on 64 pairs: the run options the training tests share
TINY_RNN_TRAINING = dict(
    emb_dim=16,
    hidden_dim=16,
    attn_dim=16,
    batch_size=16,
    limit_train=64,
    valid_bleu_sentences=8,
    max_len=80,
    progress=False,
    threads=1,
    dropout=0.1,
)


def es_en_tokenizer():
    """The shipped Spanish-English translators' sentencepiece tokenizer (8,000 pieces)."""
    from attnkit.data.tokenizer import Tokenizer
    from attnkit.pretrained import resolve_model

    return Tokenizer.load(resolve_model("transformer-es-en"))


def tiny_transformer(vocab_size: int = 8000, *, seed: int = 0, **overrides):
    """A random Transformer translator, seeded, in eval mode: d_model 16, 2 heads, 2+2 layers, feed-forward
    32, no dropout (``overrides``: any other config field)."""
    from attnkit.models.transformer import TransformerConfig, TransformerTranslator

    torch.manual_seed(seed)
    cfg = dict(
        vocab_size=vocab_size,
        d_model=16,
        nhead=2,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=32,
        dropout=0.0,
    )
    return TransformerTranslator(TransformerConfig(**{**cfg, **overrides})).eval()


def nonzero_biases(model: torch.nn.Module, std: float = 0.1) -> torch.nn.Module:
    """Draw every bias from N(0, std²) in place (a fresh init's are zero), so a decomposition has biases to
    account for; returns ``model``."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, std)
    return model


def saved_tiny_transformer(
    path: Path, *, seed: int = 0, perturb: Callable[[torch.nn.Module], None] | None = None, **overrides
) -> Path:
    """A random Transformer translator (d_model 32, 4 heads, 2+2 layers, max_len 64; ``overrides``) over the
    shipped tokenizer, its weights ×3 so that its outputs differ between sentences, then ``perturb(model)``
    (under ``torch.no_grad``), saved as a checkpoint folder at ``path``."""
    from attnkit.models.transformer import TransformerConfig, TransformerTranslator
    from attnkit.training.checkpoint import save_checkpoint

    tok = es_en_tokenizer()
    cfg = dict(
        vocab_size=len(tok),
        d_model=32,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=64,
        dropout=0.0,
        max_len=64,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = TransformerTranslator(TransformerConfig(**cfg)).eval()
    with torch.no_grad():  # larger weights than the init's, so the outputs differ between sentences
        for p in model.parameters():
            p.mul_(3.0)
        if perturb is not None:
            perturb(model)
    return save_checkpoint(path, model=model, config=model.to_config(), extra_files={"tokenizer.model": tok.to_bytes()})


def toy_batches(n_batches: int, bs: int = 6, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n_batches`` batches ``(x (bs, 4), y (bs,))`` of a 3-class problem a small MLP learns: y = argmax(x W)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(4, 3, generator=g)
    out = []
    for _ in range(n_batches):
        x = torch.randn(bs, 4, generator=g)
        out.append((x, (x @ w).argmax(-1)))
    return out
