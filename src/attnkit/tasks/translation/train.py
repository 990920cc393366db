"""Training a translation model with the shared trainer: model, optimizer and schedule, validation."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ...data.batching import Example, encode_pairs
from ...data.corpus import SOURCE_TOKENIZER_FILE, CorpusError, open_corpus
from ...data.tokenizer import MODEL_FILENAME, Tokenizer
from ...device import to_device
from ...errors import ConfigError
from ...models.registry import model_class
from ...models.transformer import TransformerConfig
from ...training.losses import label_smoothed_nll
from .config import TranslationConfig
from .data import cached_translation_batches, translation_batches
from .inference import Translator
from .loss import translation_loss_fn
from .metrics import corpus_scores


def build_translation_model(
    cfg: TranslationConfig, vocab_size: int, *, src_vocab_size: int | None = None, corpus=None
) -> torch.nn.Module:
    """The model ``cfg.model`` names, built from its nested config, for a vocabulary of ``vocab_size``
    (and a separate source vocabulary of ``src_vocab_size``), with ``corpus``'s languages."""
    return model_class(cfg.model)(cfg.sized_model_config(vocab_size, src_vocab_size=src_vocab_size, corpus=corpus))


def _valid_fn(
    valid_examples: list[Example],
    valid_pairs,
    tokenizer: Tokenizer,
    n_bleu: int,
    max_len: int,
    src_tokenizer: Tokenizer | None = None,
):
    batches = translation_batches(valid_examples, batch_size=64, max_tokens=None, seed=0, shuffle=False)

    def valid_fn(model):
        total, n = 0.0, 0
        device = next(model.parameters()).device
        batches.set_epoch(0)
        for b in batches:
            b = to_device(b, device)
            logits, _ = model(b["src"], b["src_lengths"], b["tgt_in"])
            s, k = label_smoothed_nll(logits, b["tgt_out"], tokenizer.pad_id, 0.0)
            total += float(s)
            n += k
        tr = Translator(model, tokenizer, max_len=max_len, src_tokenizer=src_tokenizer)
        subset = valid_pairs[:n_bleu]
        hyps = tr.translate_ids([e.src for e in valid_examples[:n_bleu]], beam_size=1)  # already cut to max_len
        scores = corpus_scores([h.translation for h in hyps], [p.tgt for p in subset])
        return {
            "valid_loss": total / max(n, 1),
            "valid_ppl": math.exp(min(total / max(n, 1), 50)),
            "valid_bleu": scores["bleu"],
            "valid_chrf": scores["chrf"],
        }

    return valid_fn


def _guided_links(cfg: TranslationConfig, train_pairs, src_tok: Tokenizer, tokenizer: Tokenizer) -> list[torch.Tensor]:
    """Each training pair's piece links for guided alignment, from the word links file (:mod:`.guided`)."""
    from .guided import piece_links, read_links_file

    words = read_links_file(cfg.guided_alignment, len(train_pairs))
    src_ids = src_tok.encode_batch([p.src for p in train_pairs])
    tgt_ids = tokenizer.encode_batch([p.tgt for p in train_pairs])
    return [
        piece_links(
            [src_tok.id_to_piece(i) for i in s],
            [tokenizer.id_to_piece(i) for i in t],
            w,
            (len(p.src.split()), len(p.tgt.split())),
            cfg.max_len,
        )
        for p, s, t, w in zip(train_pairs, src_ids, tgt_ids, words)
    ]


def warm_start(model: torch.nn.Module, cfg: TranslationConfig, tokenizer: Tokenizer, src_tok: Tokenizer) -> int:
    """Copy every weight of the translation model ``cfg.init_from`` into ``model`` (fine-tuning, as
    OpenNMT-py's ``train_from`` with a reset optimizer); returns the number of tensors copied.

    The two must be the same kind of model with the same sizes, and the corpus's tokenizer(s) must be
    the ones the model was trained with (else a :class:`ConfigError` that names the difference): a
    weight copied onto other pieces or other shapes would silently mean something else.
    """
    from ...pretrained import resolve_model
    from ...training.checkpoint import load_checkpoint

    ckpt = load_checkpoint(resolve_model(cfg.init_from), load_trainer_state=False)
    kind = ckpt.config.get("model_type")
    if kind != cfg.model:
        raise ConfigError(f"--init-from {cfg.init_from}: it is a {kind!r} model, and this run trains {cfg.model!r}")
    wanted = {MODEL_FILENAME: tokenizer}
    if src_tok is not tokenizer:
        wanted[SOURCE_TOKENIZER_FILE] = src_tok
    for name, tok in wanted.items():
        path = ckpt.files.get(name)
        if path is None or path.read_bytes() != tok.to_bytes():
            raise ConfigError(
                f"--init-from {cfg.init_from}: its {name} is not the tokenizer of corpus {cfg.data!r}; fine-tune on a "
                "corpus prepared with the same sentencepiece model (the pieces would mean other words)"
            )
    ours = model.state_dict()
    missing = sorted(set(ours) - set(ckpt.state_dict))
    if missing:
        raise ConfigError(f"--init-from {cfg.init_from}: it has no {', '.join(missing[:3])}: a different architecture")
    for name, value in ours.items():
        theirs = ckpt.state_dict[name]
        if theirs.shape != value.shape:
            raise ConfigError(
                f"--init-from {cfg.init_from}: {name} is {tuple(theirs.shape)} there and {tuple(value.shape)} here; "
                "give the model options it was trained with (its config.json)"
            )
    with torch.no_grad():
        for name, value in ours.items():
            value.copy_(ckpt.state_dict[name].to(value.dtype))
    return len(ours)


def build_optimizer(cfg: TranslationConfig, model: torch.nn.Module):
    """``(optimizer, scheduler)``: Adam at ``cfg.lr`` for the RNNs; for the Transformer Vaswani et al.'s.

    The Transformer gets Adam(β = (0.9, 0.98), ε = 1e-9) with linear warm-up then 1/√step decay;
    ``cfg.lr`` is the peak, reached at step ``warmup_steps``:
    lr(k) = cfg.lr · min(k / warmup, √(warmup / k)), i.e. factor · d^-0.5 · min(k^-0.5, k · warmup^-1.5)
    with factor = cfg.lr · √(d · warmup).

    Unless ``cfg.lr_schedule`` is ``recipe``, that recipe is the base of a
    :class:`~attnkit.training.budget.BudgetSchedule` (peak ``cfg.lr``), which the trainer fits to the
    run's budget: a warm-up of ``cfg.warmup_fraction`` of the steps, then linear decay to 0 at the last.
    """
    from ...training.budget import budget_schedule
    from ...training.optim import adam
    from ...training.schedules import inverse_sqrt_with_warmup

    mode = {"auto": "auto", "budget": "always"}.get(cfg.lr_schedule)
    if not isinstance(cfg.model_config, TransformerConfig):
        optimizer = adam(model.parameters(), lr=cfg.lr)
        if mode is None:
            return optimizer, None
        base = {"kind": "constant", "value": 1.0}
        return optimizer, budget_schedule(optimizer, 1.0, base, warmup_fraction=cfg.warmup_fraction, mode=mode)
    d, warmup = cfg.model_config.d_model, cfg.recipe_warmup_steps()
    factor = cfg.lr * (d * warmup) ** 0.5
    optimizer = adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    if mode is None:
        return optimizer, inverse_sqrt_with_warmup(optimizer, d, warmup, factor=factor)
    base = {"kind": "inverse_sqrt", "d_model": d, "warmup_steps": warmup, "factor": factor}
    return optimizer, budget_schedule(optimizer, cfg.lr, base, warmup_fraction=cfg.warmup_fraction, mode=mode)


def train_translation(cfg: TranslationConfig, *, resume: bool = False, home: str | Path | None = None) -> dict:
    """Train ``cfg.model`` on the training split of corpus ``cfg.data`` (the Bible by default) with
    the shared trainer; returns its summary. The Bible is tokenised in memory; a prepared corpus is
    streamed from its memory-mapped token cache (:func:`cached_translation_batches`)."""
    from ...training import Trainer

    corpus = open_corpus(cfg.data, home)
    src_tok, tokenizer = corpus.tokenizers(cfg.vocab_size)
    valid_pairs = corpus.pairs("valid")
    if not valid_pairs:
        raise CorpusError(
            f"corpus {corpus.name!r} has no validation pairs: prepare it again with --valid SRC TGT "
            "(or with more training pairs, for a held-out share)"
        )
    valid_ex = encode_pairs(valid_pairs, src_tok, cfg.max_len, tgt_tokenizer=tokenizer)
    batching = {"batch_size": cfg.batch_size, "max_tokens": cfg.max_tokens, "seed": cfg.run.seed}
    cache = corpus.token_cache("train")
    if cache is None or cfg.guided_alignment:
        # the Bible, or any corpus whose pairs get their word links: tokenised in memory
        train_pairs = corpus.pairs("train", limit=cfg.limit_train)
        train_ex = encode_pairs(train_pairs, src_tok, cfg.max_len, tgt_tokenizer=tokenizer)
        links = _guided_links(cfg, train_pairs, src_tok, tokenizer) if cfg.guided_alignment else None
        train_batches = translation_batches(train_ex, **batching, links=links)
    else:
        train_batches = cached_translation_batches(*cache, max_len=cfg.max_len, limit=cfg.limit_train, **batching)
    cfg.run.start()
    separate = src_tok is not tokenizer
    # the record (train_config.json) holds the model config that runs: the corpus's languages and sizes
    cfg.model_config = cfg.sized_model_config(
        tokenizer.vocab_size, src_vocab_size=src_tok.vocab_size if separate else None, corpus=corpus
    )
    model = model_class(cfg.model)(cfg.model_config)
    if cfg.init_from:
        warm_start(model, cfg, tokenizer, src_tok)
    optimizer, scheduler = build_optimizer(cfg, model)
    extra_files = {MODEL_FILENAME: tokenizer.to_bytes()}
    if separate:
        extra_files[SOURCE_TOKENIZER_FILE] = src_tok.to_bytes()
    trainer = Trainer(
        model,
        optimizer,
        cfg.run,
        task_config=cfg,
        loss_fn=translation_loss_fn(tokenizer.pad_id, cfg.label_smoothing, cfg.guided()),
        train_batches=train_batches,
        valid_fn=_valid_fn(valid_ex, valid_pairs, tokenizer, cfg.valid_bleu_sentences, cfg.max_len, src_tok),
        scheduler=scheduler,
        metric_for_best="valid_bleu",
        greater_is_better=True,
        extra_files=extra_files,
    )
    return trainer.fit(resume=resume)
