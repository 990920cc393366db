"""Spanish → English translation on the verse-aligned Bible: data, training, translating, evaluating.

The glue between the corpus (:mod:`attnkit.data.bible`), the models
(:mod:`attnkit.models.seq2seq`, :mod:`attnkit.models.transformer`), the shared trainer and the
shared decoding. The CLI (``attnkit train translation``, ``translate``, ``evaluate translation``)
calls these functions; so can a notebook.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch

from ..data.batching import BucketBatchSampler, Example, collate, encode_pairs
from ..data.bible import load_pairs
from ..paths import attnkit_home
from ..data.tokenizer import Tokenizer
from ..decoding import beam_search, greedy_search
from ..training.data import Batches
from ..device import to_device
from ..config import config_from_dict, config_from_json, option, option_names
from ..errors import ConfigError, InputError
from ..models.base import AttentionMaps
from ..models.registry import model_class
from ..models.seq2seq import Seq2SeqConfig
from ..models.transformer import TransformerConfig
from ..training.checkpoint import CheckpointError, load_model
from ..training.losses import label_smoothed_nll

__all__ = [
    "TRANSLATION_MODELS",
    "TranslationConfig",
    "model_config_class",
    "translation_batches",
    "get_tokenizer",
    "build_translation_model",
    "build_optimizer",
    "translation_loss_fn",
    "train_translation",
    "Translator",
    "TranslationAttention",
    "corpus_scores",
    "bleu_by_length",
    "LENGTH_BUCKETS",
    "evaluate_translation",
]

LENGTH_BUCKETS = [(0, 10), (10, 20), (20, 30), (30, 40), (40, 50), (50, 60), (60, None)]


#: The models ``attnkit train translation --model`` accepts (registry names). A new translation
#: model is added here and in the registry; the CLI, the decoders and the viewers need no edit.
TRANSLATION_MODELS = ("rnnsearch", "rnnencdec", "transformer")


def model_config_class(model: str) -> type:
    """The config dataclass of translation model ``model`` (its class's ``config_class``)."""
    if model not in TRANSLATION_MODELS:
        raise ConfigError(f"model must be one of {', '.join(TRANSLATION_MODELS)}; got {model!r}")
    return model_class(model).config_class


@dataclass
class TranslationConfig:
    """Everything ``attnkit train translation`` takes: the task's options and, nested, the model's
    config (``model_config``, a :class:`Seq2SeqConfig` or :class:`TransformerConfig`). Saved as
    ``train_config.json`` beside the checkpoints.

    Two model fields are derived from the task, in :meth:`sized_model_config` only: the model's
    ``vocab_size`` is the tokenizer's, and its ``max_src_len`` is ``max_len`` (a Transformer's
    position table is made at least that long).
    """

    model: str = option("rnnsearch", "the model to train", choices=TRANSLATION_MODELS)
    out_dir: str | None = option(None, "checkpoint folder (default: runs/MODEL)")
    vocab_size: int = option(8000, "size of the joint Spanish+English sentencepiece vocabulary")
    max_len: int = option(100, "drop training pairs longer than this many subword tokens; the model's longest source")
    limit_train: int | None = option(None, "train on the first N verse pairs only")
    batch_size: int = option(64, "verse pairs per batch (when --max-tokens is not given)")
    max_tokens: int | None = option(None, "batches of about this many tokens instead of --batch-size pairs")
    lr: float = option(1e-3, "Adam's learning rate; for the Transformer the peak, reached at the end of warm-up")
    warmup_steps: int = option(2000, "Transformer: linear warm-up steps before the 1/sqrt(step) decay")
    clip_grad_norm: float = option(1.0, "clip the gradient norm to this")
    label_smoothing: float = option(0.1, "label smoothing of the cross-entropy")
    epochs: int = option(10, "at most this many passes over the training data")
    max_steps: int | None = option(None, "stop after this many optimizer steps")
    max_time_s: float | None = option(None, "stop (with a checkpoint) after this many seconds")
    patience: int | None = option(3, "stop after this many validations without a better BLEU")
    save_every_steps: int = option(500, "write a step checkpoint this often")
    keep_last: int = option(3, "step checkpoints kept (keep at least K for export --average-last K)")
    valid_bleu_sentences: int = option(300, "validation verses translated for BLEU at every validation")
    seed: int = option(0, "random seed (weights, batches, dropout)")
    threads: int | None = option(None, "torch CPU threads (default: torch's choice)")
    device: str = option("auto", "where to train: auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps")
    precision: str = option("fp32", "training precision: fp32, bf16 or fp16 (autocast; fp32 master weights), "
                            "or auto (bf16 where it is measured faster)", choices=("fp32", "bf16", "fp16", "auto"))
    progress: bool = option(True, "show a progress bar", cli=False)
    model_config: Seq2SeqConfig | TransformerConfig | None = option(None, "the model's config", cli=False)

    def __post_init__(self) -> None:
        cls = model_config_class(self.model)
        if self.model_config is None:
            self.model_config = cls()
        elif isinstance(self.model_config, dict):
            self.model_config = config_from_json(cls, self.model_config)
        if not isinstance(self.model_config, cls):
            raise ConfigError(f"model_config must be a {cls.__name__} for model {self.model!r}, "
                              f"got {type(self.model_config).__name__}")
        if self.out_dir is None:
            self.out_dir = f"runs/{self.model}"

    @classmethod
    def from_options(cls, model: str = "rnnsearch", **options) -> "TranslationConfig":
        """Build from flat options, as the command line gives them: each name goes to the task or to
        the model's config, whichever has it (``TranslationConfig.from_options("transformer",
        d_model=128, lr=5e-4)``). A name neither has is a :class:`ConfigError`."""
        mcls = model_config_class(model)
        task_names, model_names = option_names(cls), option_names(mcls)
        unknown = set(options) - task_names - model_names - {"progress"}
        if unknown:
            raise ConfigError(f"{', '.join(sorted(unknown))}: not an option of the {model} model or of training")
        model_config = config_from_dict(mcls, {k: v for k, v in options.items() if k in model_names})
        task = {k: v for k, v in options.items() if k in task_names or k == "progress"}
        return cls(model=model, model_config=model_config, **task)

    def sized_model_config(self, vocab_size: int):
        """The model config for a tokenizer of ``vocab_size`` (see the class docstring)."""
        extra = {"max_len": max(self.model_config.max_len, self.max_len)} if hasattr(self.model_config, "max_len") else {}
        return dataclasses.replace(self.model_config, vocab_size=vocab_size, max_src_len=self.max_len, **extra)

    def to_dict(self) -> dict:
        return asdict(self)


def translation_batches(examples: Sequence[Example], *, batch_size: int | None, max_tokens: int | None, seed: int,
                        shuffle: bool = True) -> Batches:
    """Resumable batches of similar-length pairs (:class:`BucketBatchSampler` plans each epoch;
    ``shuffle=False``: one fixed order, for validation)."""
    examples = list(examples)
    lengths = [max(len(e.src), len(e.tgt) + 1) for e in examples]
    sampler = BucketBatchSampler(lengths, batch_size=batch_size, max_tokens=max_tokens, seed=seed, shuffle=shuffle)
    return Batches(sampler.batches, lambda idx, epoch, i: collate([examples[j] for j in idx]),
                   fingerprint={"num_examples": len(examples), "seed": seed})


def get_tokenizer(vocab_size: int = 8000, home: str | Path | None = None) -> Tokenizer:
    """The joint Spanish+English sentencepiece model, trained on the training split once and cached."""
    folder = attnkit_home(home) / "bible" / f"spm-joint-{vocab_size}"
    if (folder / "tokenizer.model").is_file():
        return Tokenizer.load(folder)
    train = load_pairs("train", home=home)
    texts = [p.src for p in train] + [p.tgt for p in train]
    return Tokenizer.train(texts, folder, vocab_size=vocab_size)


def build_translation_model(cfg: TranslationConfig, vocab_size: int) -> torch.nn.Module:
    """The model ``cfg.model`` names, built from its nested config, for a vocabulary of ``vocab_size``."""
    return model_class(cfg.model)(cfg.sized_model_config(vocab_size))


def translation_loss_fn(pad_id: int, smoothing: float):
    """The trainer's loss: label-smoothed NLL summed over non-pad target tokens, and their count."""
    def loss_fn(model, batch):
        logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
        loss_sum, n = label_smoothed_nll(logits, batch["tgt_out"], pad_id, smoothing)
        return loss_sum, n, {}

    return loss_fn


def _valid_fn(valid_examples: list[Example], valid_pairs, tokenizer: Tokenizer, n_bleu: int, max_len: int):
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
        tr = Translator(model, tokenizer, max_len=max_len)
        subset = valid_pairs[:n_bleu]
        hyps = tr.translate_ids([e.src for e in valid_examples[:n_bleu]], beam_size=1)  # already cut to max_len
        scores = corpus_scores([h["translation"] for h in hyps], [p.tgt for p in subset])
        return {"valid_loss": total / max(n, 1), "valid_ppl": math.exp(min(total / max(n, 1), 50)),
                "valid_bleu": scores["bleu"], "valid_chrf": scores["chrf"]}

    return valid_fn


def build_optimizer(cfg: TranslationConfig, model: torch.nn.Module):
    """``(optimizer, scheduler)``: Adam at ``cfg.lr`` for the RNNs; for the Transformer Vaswani et al.'s.

    The Transformer gets Adam(β = (0.9, 0.98), ε = 1e-9) with linear warm-up then 1/√step decay;
    ``cfg.lr`` is the peak, reached at step ``warmup_steps``:
    lr(k) = cfg.lr · min(k / warmup, √(warmup / k)), i.e. factor · d^-0.5 · min(k^-0.5, k · warmup^-1.5)
    with factor = cfg.lr · √(d · warmup).
    """
    from ..training.schedules import inverse_sqrt_with_warmup

    if not isinstance(cfg.model_config, TransformerConfig):
        return torch.optim.Adam(model.parameters(), lr=cfg.lr), None
    d = cfg.model_config.d_model
    factor = cfg.lr * (d * cfg.warmup_steps) ** 0.5
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    return optimizer, inverse_sqrt_with_warmup(optimizer, d, cfg.warmup_steps, factor=factor)


def train_translation(cfg: TranslationConfig, *, resume: bool = False, home: str | Path | None = None) -> dict:
    """Train ``cfg.model`` on the Bible training split with the shared trainer; returns its summary."""
    from ..training import Trainer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    tokenizer = get_tokenizer(cfg.vocab_size, home)
    train_pairs = load_pairs("train", home=home, limit=cfg.limit_train)
    valid_pairs = load_pairs("valid", home=home)
    train_ex = encode_pairs(train_pairs, tokenizer, cfg.max_len)
    valid_ex = encode_pairs(valid_pairs, tokenizer, cfg.max_len)
    torch.manual_seed(cfg.seed)
    model = build_translation_model(cfg, tokenizer.vocab_size)
    optimizer, scheduler = build_optimizer(cfg, model)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    trainer = Trainer(
        model, optimizer,
        loss_fn=translation_loss_fn(tokenizer.pad_id, cfg.label_smoothing),
        train_batches=translation_batches(train_ex, batch_size=cfg.batch_size, max_tokens=cfg.max_tokens, seed=cfg.seed),
        valid_fn=_valid_fn(valid_ex, valid_pairs, tokenizer, cfg.valid_bleu_sentences, cfg.max_len),
        scheduler=scheduler, clip_grad_norm=cfg.clip_grad_norm, out_dir=out,
        save_every_steps=cfg.save_every_steps, keep_last=cfg.keep_last, max_epochs=cfg.epochs, max_steps=cfg.max_steps,
        max_time_s=cfg.max_time_s, early_stopping_patience=cfg.patience, metric_for_best="valid_bleu",
        greater_is_better=True, seed=cfg.seed, log_every=20, progress=cfg.progress, device=cfg.device,
        precision=cfg.precision,
        extra_files={"tokenizer.model": tokenizer.to_bytes()},
    )
    return trainer.fit(resume=resume)


@dataclass
class TranslationAttention:
    """Every attention of a translation model for one sentence pair, with the pieces it is over.

    ``maps`` is the model's :class:`attnkit.models.AttentionMaps` with the batch dimension removed
    (CPU float32): e.g. ``maps.alignment (T, S)``, ``maps.cross (L, H, T, S)``. Row ``t`` belongs
    to ``target_pieces[t]``, column ``j`` to ``source_pieces[j]``.
    """

    source_pieces: list[str]
    target_pieces: list[str]
    maps: AttentionMaps

    def word_alignment(self) -> tuple[list[str], list[str], torch.Tensor | None]:
        """``(source words, target words, word attention (T_words, S_words) or None)``: the
        alignment aggregated over pieces by :func:`attnkit.alignment.word_attention`."""
        from ..alignment import word_attention, words_from_pieces

        src, tgt = words_from_pieces(self.source_pieces), words_from_pieces(self.target_pieces)
        if self.maps.alignment is None:
            return src, tgt, None
        return src, tgt, word_attention(self.maps.alignment, self.source_pieces, self.target_pieces)


class Translator:
    """Translate with a trained model: tokenise, batch, search, detokenise, keep the attention."""

    def __init__(self, model, tokenizer: Tokenizer, *, max_len: int = 200):
        self.model = model
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.max_src_len = getattr(getattr(model, "config", None), "max_src_len", None) or max_len

    @classmethod
    def load(cls, model_dir: str | Path, *, device: str | torch.device | None = "cpu",
             dtype: str | torch.dtype | None = None) -> "Translator":
        """Load a model by name (``"transformer-es-en"``, see ``attnkit models``) or from a checkpoint
        folder (config.json, model.safetensors, tokenizer.model), onto ``device`` (``"auto"``: cuda,
        then mps, then cpu) with weights in ``dtype`` (``torch.bfloat16`` or ``"bf16"``, ``"fp16"``,
        ``"auto"``; default float32)."""
        from ..device import place
        from ..pretrained import resolve_model

        model_dir = resolve_model(model_dir)
        model, config, ckpt = load_model(model_dir)
        tok_path = model_dir / "tokenizer.model"
        if not tok_path.is_file():
            raise CheckpointError(f"{tok_path}: the checkpoint has no tokenizer.model; is {model_dir} a translation model?")
        return cls(place(model, device, dtype), Tokenizer.load(model_dir))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_sources(self, sentences: Sequence[str], *, truncate: bool = False) -> list[list[int]]:
        """Subword ids of each sentence; too long raises ``ValueError`` unless ``truncate``."""
        out = []
        for i, s in enumerate(sentences):
            if not isinstance(s, str) or not s.strip():
                raise InputError(f"sentence {i + 1} is empty: give some Spanish text to translate")
            ids = self.tokenizer.encode(s.strip())
            if len(ids) > self.max_src_len:
                if not truncate:
                    raise InputError(
                        f"sentence {i + 1} has {len(ids)} subword tokens, more than this model's maximum of "
                        f"{self.max_src_len}; split it into shorter sentences"
                    )
                ids = ids[:self.max_src_len]
            out.append(ids)
        return out

    @torch.no_grad()
    def attention(self, source: str, target: str | Sequence[int]) -> TranslationAttention:
        """All the model's attention when it reads ``source`` and is forced to write ``target``
        (teacher forcing): ``target`` is English text (tokenised here, e.g. a reference) or the
        token ids of a translation (``result["tokens"]``)."""
        src_ids = self.encode_sources([source])[0]
        if isinstance(target, str):
            if not target.strip():
                raise InputError("target is empty: give the English text (or token ids) to align with")
            tgt_ids = self.tokenizer.encode(target.strip())
        else:
            tgt_ids = [int(t) for t in target]
        if not tgt_ids:
            raise InputError("target has no tokens: there is no output token to show attention for")
        device = self.device
        src = torch.tensor([src_ids], dtype=torch.long, device=device)
        tgt_in = torch.tensor([[self.tokenizer.bos_id] + tgt_ids[:-1]], dtype=torch.long, device=device)
        maps = self.model.attention_maps(src, torch.tensor([len(src_ids)], device=device), tgt_in)
        return TranslationAttention(
            source_pieces=[self.tokenizer.id_to_piece(t) for t in src_ids],
            target_pieces=[self.tokenizer.id_to_piece(t) for t in tgt_ids],
            maps=maps.map_tensors(lambda t: t[0].float().cpu()),
        )

    def translate(self, sentences: Sequence[str], *, beam_size: int = 1, length_penalty: float = 0.6,
                  batch_size: int = 64, return_attention: bool = False, truncate: bool = False) -> list[dict]:
        """Translate ``sentences``; each result has ``translation``, ``tokens``, ``score`` and, on
        request, ``attention (T_out, S_in)`` with the source/target subword pieces. Sentences
        longer than the model's maximum raise ``ValueError`` (or are cut, with ``truncate``)."""
        ids = self.encode_sources(sentences, truncate=truncate)
        results = self.translate_ids(ids, beam_size=beam_size, length_penalty=length_penalty,
                                     batch_size=batch_size, return_attention=return_attention)
        for r, s in zip(results, sentences):
            r["source"] = s
        return results

    @torch.no_grad()
    def translate_ids(self, ids: Sequence[Sequence[int]], *, beam_size: int = 1, length_penalty: float = 0.6,
                      batch_size: int = 64, return_attention: bool = False) -> list[dict]:
        """Translate already-tokenised sources (lists of subword ids), batching similar lengths."""
        self.model.eval()
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths share a batch
        results: list[dict | None] = [None] * len(ids)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            lens = torch.tensor([len(ids[i]) for i in chunk])
            src = torch.zeros(len(chunk), int(lens.max()), dtype=torch.long)
            for r, i in enumerate(chunk):
                src[r, :len(ids[i])] = torch.as_tensor(list(ids[i]), dtype=torch.long)
            inputs = {"src": src.to(self.device), "src_lengths": lens.to(self.device)}
            max_len = min(self.max_len, int(lens.max()) * 2 + 10)
            if beam_size <= 1:
                hyps = greedy_search(self.model, inputs, bos_id=self.tokenizer.bos_id, eos_id=self.tokenizer.eos_id,
                                     max_len=max_len, return_attention=return_attention)
            else:
                hyps = [h[0] for h in beam_search(self.model, inputs, beam_size=beam_size, bos_id=self.tokenizer.bos_id,
                                                  eos_id=self.tokenizer.eos_id, max_len=max_len,
                                                  length_penalty=length_penalty, return_attention=return_attention)]
            for i, h in zip(chunk, hyps):
                res = {"translation": self.tokenizer.decode(h.tokens), "tokens": h.tokens, "score": h.score}
                if return_attention and h.attention is not None:
                    res["attention"] = h.attention[:, :len(ids[i])]
                    res["source_pieces"] = [self.tokenizer.id_to_piece(t) for t in ids[i]]
                    res["target_pieces"] = [self.tokenizer.id_to_piece(t) for t in h.tokens]
                results[i] = res
        return results  # type: ignore[return-value]


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """sacrebleu corpus BLEU and chrF (default settings: 13a tokenisation, chrF2)."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        return {"bleu": 0.0, "chrf": 0.0, "n_sentences": 0}
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu = bleu_metric.corpus_score(list(hypotheses), [list(references)])
    chrf = chrf_metric.corpus_score(list(hypotheses), [list(references)])
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2), "n_sentences": len(hypotheses),
            "bleu_signature": str(bleu_metric.get_signature())}


def bleu_by_length(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str]) -> list[dict]:
    """Corpus BLEU per source-length bucket (in words): 0–10, 10–20, … 60+ (Bahdanau et al., Fig. 2)."""
    rows = []
    for lo, hi in LENGTH_BUCKETS:
        idx = [i for i, s in enumerate(sources) if len(s.split()) >= lo and (hi is None or len(s.split()) < hi)]
        sc = corpus_scores([hypotheses[i] for i in idx], [references[i] for i in idx])
        rows.append({"bucket": f"{lo}-{hi}" if hi is not None else f"{lo}+", "n": len(idx), "bleu": sc["bleu"],
                     "chrf": sc["chrf"]})
    return rows


def evaluate_translation(model_dir: str | Path, *, split: str = "test", limit: int | None = None,
                         beam_size: int = 1, home: str | Path | None = None, device: str | None = "cpu",
                         dtype: str | torch.dtype | None = None) -> dict:
    """BLEU/chrF of a model on a split (optionally its first ``limit`` verses), and BLEU by length."""
    tr = Translator.load(model_dir, device=device, dtype=dtype)
    pairs = load_pairs(split, home=home, limit=limit)
    t0 = time.perf_counter()
    hyps = tr.translate([p.src for p in pairs], beam_size=beam_size, truncate=True)
    elapsed = time.perf_counter() - t0
    out_text = [h["translation"] for h in hyps]
    scores = corpus_scores(out_text, [p.tgt for p in pairs])
    return {
        "model": str(model_dir), "model_type": getattr(tr.model, "model_type", "?"), "split": split,
        "beam_size": beam_size, **scores, "sentences_per_s": round(len(pairs) / max(elapsed, 1e-9), 2),
        "by_length": bleu_by_length([p.src for p in pairs], out_text, [p.tgt for p in pairs]),
        "examples": [{"ref": p.ref, "source": p.src, "reference": p.tgt, "output": o}
                     for p, o in list(zip(pairs, out_text))[:5]],
    }


def read_lines(stream: Iterable[str]) -> list[str]:
    """Non-empty stripped lines of a file or stdin."""
    return [line.strip() for line in stream if line.strip()]
