"""Training a language model with the shared trainer (``attnkit train language-model``).

The text is one side of a corpus (the Bible's ``en`` or ``es``, or a corpus prepared with ``attnkit data
prepare``) as a stream of blocks (:mod:`.data`); the model is :class:`~attnkit.models.language_model.LanguageModel`
sized by :class:`.config.LanguageModelTaskConfig`. Everything a run needs besides (the ``--max-time-s``
budget and its fitted schedule, checkpoints and ``keep_last``, exact ``--resume``, torchrun, the precision,
the thread governor) is :class:`~attnkit.training.Trainer`'s, used as the translation task uses it.

- **Tokenizer**: the one the translation task uses for that side (the Bible's joint sentencepiece model of
  ``--vocab-size`` pieces, cached under ``$ATTNKIT_HOME``; a prepared corpus's own, its source tokenizer
  for the source side when it has two), saved in every checkpoint as ``tokenizer.model``. A resumed run
  reads it back from the checkpoint it resumes, so it is never trained again behind the user's back.
- **Optimizer**: AdamW (Loshchilov & Hutter 2019; ``β = (0.9, 0.95)`` as GPT-3 and Llama), decoupled weight
  decay on the matrices and embeddings only; the learning rate is a
  :class:`~attnkit.training.budget.BudgetSchedule` (linear warm-up over ``warmup_fraction`` of the budget's
  steps to ``lr``, then linear decay to 0 at its last step), fitted by the trainer to the run's budget.
- **Validation**: the mean next-token loss and its perplexity over the first ``valid_blocks`` blocks of the
  valid split, and the induction measurements of :mod:`attnkit.models.induction` (Olsson et al. 2022), so
  the phase change in which induction heads form is a curve in the run's log: per layer the best head's
  prefix-matching score (and that head's number and copying score, over a sample of :data:`COPYING_TOKENS`
  tokens) and the best previous-token score, on repeated random token sequences; and the
  in-context-learning score on the first 8 valid blocks. The best checkpoint is the one of lowest valid
  loss.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ...data.corpus import CorpusError, open_corpus
from ...data.tokenizer import MODEL_FILENAME, Tokenizer
from ...errors import ConfigError
from ...models.induction import InductionScores, induction_scores
from ...models.language_model import LanguageModel
from .config import LanguageModelTaskConfig
from .data import block_count, lm_batches, resolve_side, side_texts, token_stream
from .loss import next_token_loss_sum, perplexity

__all__ = [
    "COPYING_TOKENS",
    "ICL_BLOCKS",
    "build_optimizer",
    "induction_metrics",
    "lm_tokenizer",
    "mean_block_loss",
    "train_language_model",
    "valid_blocks",
]

#: How many valid blocks the in-context-learning score reads (the first ones).
ICL_BLOCKS = 8
#: How many tokens' copying scores a validation averages (a seeded sample; each ranked against the whole
#: vocabulary): all of an 8,000-piece vocabulary would cost ``V² · d_model`` per head, most of a validation.
COPYING_TOKENS = 512
#: The warm-up of the schedule a time budget follows while it measures the first steps' speed, before the
#: trainer fits the budget's own (inverse square root, peaking at ``lr`` after this many steps).
PROBE_WARMUP_STEPS = 100


#: The model options a resumed run must share with its checkpoint, with their flags (dropout may change).
_RESUMED_FIELDS = {
    "vocab_size": "--vocab-size",
    "d_model": "--d-model",
    "n_layers": "--layers",
    "n_heads": "--heads",
    "n_kv_heads": "--kv-heads",
    "d_ff": "--d-ff",
    "max_len": "--context",
    "shape": "--shape",
    "attention_only": "--attention-only",
}


def _resumed_checkpoint(cfg: LanguageModelTaskConfig) -> Path | None:
    """The checkpoint ``--resume`` will continue (the trainer's choice: the newest that loads), or None."""
    from ...training.resume import Resumer

    return Resumer.find_checkpoint(Path(cfg.run.out_dir), is_main=False)


def _check_resumed_model(found: Path, wanted: dict, out_dir: str) -> None:
    """A :class:`ConfigError` naming each model option that differs from the checkpoint's ``config.json``:
    heads and their width can change without any weight changing shape, so the weights would load and mean
    something else."""
    saved = json.loads((found / "config.json").read_text(encoding="utf-8"))
    diff = [
        f"{flag} ({name}={saved.get(name)!r} there, {wanted[name]!r} here)"
        for name, flag in _RESUMED_FIELDS.items()
        if saved.get(name) != wanted[name]
    ]
    if diff:
        raise ConfigError(
            f"--resume: the run in {out_dir} was trained with other model options: {', '.join(diff)}; give the "
            "options it was trained with (its train_config.json)"
        )


def lm_tokenizer(cfg: LanguageModelTaskConfig, corpus, *, resume: bool = False) -> Tokenizer:
    """The tokenizer of ``cfg.side`` of ``corpus`` (see the module docstring); resuming, the one saved in the
    checkpoint the run resumes from (a ``--vocab-size`` that differs from it is a :class:`ConfigError`)."""
    side = resolve_side(corpus, cfg.side)
    if resume:
        found = _resumed_checkpoint(cfg)
        if found is not None and (found / MODEL_FILENAME).is_file():
            tok = Tokenizer.load(found / MODEL_FILENAME)
            if cfg.vocab_size is not None and cfg.vocab_size != tok.vocab_size:
                raise ConfigError(
                    f"--vocab-size {cfg.vocab_size}: the run in {cfg.run.out_dir} was trained with a tokenizer of "
                    f"{tok.vocab_size} pieces (its {found.name}/{MODEL_FILENAME}); resume without --vocab-size"
                )
            return tok
    src, tgt = corpus.tokenizers(cfg.vocab_size)
    return src if side == "src" else tgt


def _stream(corpus, split: str, cfg: LanguageModelTaskConfig, tokenizer: Tokenizer, limit: int | None = None):
    return token_stream(side_texts(corpus, split, cfg.side, limit), tokenizer)


def valid_blocks(stream: np.ndarray, context: int, n: int) -> torch.Tensor:
    """The first ``n`` blocks of ``context + 1`` ids of ``stream``, in order: ``(min(n, blocks), context + 1)``
    int64 (the ids are ``[:, :-1]``, the targets ``[:, 1:]``, as :func:`.data.lm_batches` cuts them)."""
    k = min(n, block_count(len(stream), context))
    rows = [stream[j * context : j * context + context + 1] for j in range(k)]
    return torch.from_numpy(np.stack(rows).astype(np.int64)) if rows else torch.empty(0, context + 1, dtype=torch.long)


def induction_metrics(scores: InductionScores) -> dict[str, float]:
    """What a validation logs of :func:`~attnkit.models.induction.induction_scores`, layers and heads
    numbered from 1: per layer ``induction_prefix_matching_layerL`` (its best head's score),
    ``induction_head_layerL`` (that head), ``induction_copying_layerL`` (that head's copying score) and
    ``induction_previous_token_layerL`` (the best previous-token score of the layer); and
    ``in_context_learning`` when it was measured."""
    out: dict[str, float] = {}
    for li, row in enumerate(scores.prefix_matching):
        best = max(range(len(row)), key=row.__getitem__)
        out[f"induction_prefix_matching_layer{li + 1}"] = row[best]
        out[f"induction_head_layer{li + 1}"] = float(best + 1)
        out[f"induction_copying_layer{li + 1}"] = scores.copying[li][best]
        out[f"induction_previous_token_layer{li + 1}"] = max(scores.previous_token[li])
    if scores.in_context_learning is not None:
        out["in_context_learning"] = scores.in_context_learning
    return out


def mean_block_loss(model: LanguageModel, blocks: torch.Tensor, batch_size: int) -> float:
    """The mean next-token cross-entropy of ``model`` over ``blocks (N, T + 1)`` (ids ``[:, :-1]``, targets
    ``[:, 1:]``), ``batch_size`` blocks at a time: what validation and a held-out perplexity report."""
    device = next(model.parameters()).device
    total, n = 0.0, 0
    for i in range(0, len(blocks), batch_size):
        b = blocks[i : i + batch_size].to(device)  # (b, T + 1)
        s, k, _ = next_token_loss_sum(model, {"ids": b[:, :-1], "targets": b[:, 1:]})
        total += float(s)
        n += k
    return total / max(n, 1)


def _valid_fn(blocks: torch.Tensor, batch_size: int):
    """Validation on ``blocks (N, T + 1)``: mean loss and perplexity, and the induction measurements."""

    def valid_fn(model: LanguageModel) -> dict[str, float]:
        device = next(model.parameters()).device
        loss = mean_block_loss(model, blocks, batch_size)
        scores = induction_scores(model, text_ids=blocks[:ICL_BLOCKS, :-1].to(device), copying_tokens=COPYING_TOKENS)
        return {"valid_loss": loss, "valid_ppl": perplexity(loss), **induction_metrics(scores)}

    return valid_fn


def build_optimizer(cfg: LanguageModelTaskConfig, model: torch.nn.Module):
    """``(optimizer, scheduler)``: AdamW (β = (0.9, 0.95), ε = 1e-8), weight decay ``cfg.weight_decay`` on
    the parameters of two dimensions or more (matrices, embeddings) and none on norms' gains and biases,
    fused where PyTorch can; a :class:`~attnkit.training.budget.BudgetSchedule` of peak ``cfg.lr`` that the
    trainer fits to the budget (always: ``warmup_fraction`` of the steps up, then linearly down to 0)."""
    from ...training.budget import budget_schedule

    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda", "mps") for p in params)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=1.0,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=fused or None,
    )
    w = PROBE_WARMUP_STEPS  # the recipe a time budget's first steps follow: peak cfg.lr at step w
    base = {"kind": "inverse_sqrt", "d_model": 1, "warmup_steps": w, "factor": cfg.lr * w**0.5}
    return optimizer, budget_schedule(optimizer, cfg.lr, base, warmup_fraction=cfg.warmup_fraction, mode="always")


def train_language_model(cfg: LanguageModelTaskConfig, *, resume: bool = False, home: str | Path | None = None) -> dict:
    """Train a language model on side ``cfg.side`` of corpus ``cfg.data`` with the shared trainer; returns
    its summary (see the module docstring)."""
    from ...training import Trainer

    if not isinstance(cfg, LanguageModelTaskConfig):
        raise TypeError(f"cfg must be a LanguageModelTaskConfig, got {type(cfg).__name__}")
    corpus = open_corpus(cfg.data, home)
    tokenizer = lm_tokenizer(cfg, corpus, resume=resume)
    train_stream = _stream(corpus, "train", cfg, tokenizer, cfg.limit_train)
    if block_count(len(train_stream), cfg.context) == 0:
        raise ConfigError(
            f"--context {cfg.context}: the train split's text holds {len(train_stream)} tokens, too few for one "
            "block; give a smaller --context (or more text: --limit-train)"
        )
    blocks = valid_blocks(_stream(corpus, "valid", cfg, tokenizer), cfg.context, cfg.valid_blocks)
    if len(blocks) == 0:
        raise CorpusError(
            f"corpus {corpus.name!r}: its valid split holds no block of {cfg.context} + 1 tokens; give a smaller "
            "--context, or prepare the corpus again with more valid text (--valid SRC TGT)"
        )
    train_batches = lm_batches(
        train_stream,
        context=cfg.context,
        batch_size=cfg.batch_size,
        seed=cfg.run.seed,
        repeats=cfg.repeats,
        repeat_period=(cfg.repeat_min, cfg.repeat_max),
        vocab_size=tokenizer.vocab_size,
    )
    model_config = cfg.model_config(tokenizer.vocab_size)
    found = _resumed_checkpoint(cfg) if resume else None
    if found is not None:
        _check_resumed_model(found, model_config.to_dict(), cfg.run.out_dir)
    cfg.run.start()
    model = LanguageModel(model_config)
    optimizer, scheduler = build_optimizer(cfg, model)
    trainer = Trainer(
        model,
        optimizer,
        cfg.run,
        task_config=cfg,
        loss_fn=next_token_loss_sum,
        train_batches=train_batches,
        valid_fn=_valid_fn(blocks, cfg.batch_size),
        scheduler=scheduler,
        metric_for_best="valid_loss",
        greater_is_better=False,
        extra_files={MODEL_FILENAME: tokenizer.to_bytes()},
    )
    return trainer.fit(resume=resume)
