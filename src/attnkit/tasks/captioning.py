"""Captioning Fashion-MNIST scenes with Show, Attend and Tell: data, training, captioning, evaluating.

The glue between the scenes (:mod:`attnkit.data.scenes`), the model
(:mod:`attnkit.models.captioner`), the shared trainer and the shared decoding. The CLI
(``attnkit train captioning``, ``caption``, ``evaluate captioning``) and ``make demo`` call these.

Attention correctness: for a generated word that names an item of the scene (a class word;
the item is found from the class and the place the caption gives it), the share of the word's
attention mass that falls inside the item's ground-truth box. The ``h×w`` map is spread over
the canvas with nearest-neighbour upsampling (each cell's weight spread evenly over its
``C/h × C/w`` pixels), so a uniform map puts exactly ``box area / canvas area`` inside a box:
the uniform-attention baseline.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..data.idx import FASHION_WORDS
from ..data.scenes import PLACES, CaptionVocab, ScenesDataset, collate_captions, load_scenes
from ..decoding import beam_search, greedy_search
from ..device import to_device
from ..training.data import Batches, shuffled
from ..training.checkpoint import CheckpointError, load_model

__all__ = [
    "CaptioningTrainConfig",
    "scene_batches",
    "scene_order",
    "photo_batches",
    "caption_loss_fn",
    "update_reward_baseline",
    "train_captioning",
    "build_captioner",
    "CaptionModel",
    "load_image_file",
    "words_to_items",
    "attention_mass_in_box",
    "attention_correctness",
    "caption_scores",
    "evaluate_captioning",
    "caption_demo",
]

VOCAB_FILE = "vocab.json"


@dataclass
class CaptioningTrainConfig:
    """Everything ``attnkit train captioning`` takes; saved beside the checkpoints."""

    attention: str = "soft"  # soft | hard
    out_dir: str = "runs/captioner-soft"
    canvas: int = 64
    score: str = "additive"
    feature_dim: int = 128
    pos_dim: int = 32
    emb_dim: int = 64
    hidden_dim: int = 256
    attn_dim: int = 128
    dropout: float = 0.1
    lambda_ds: float = 0.2
    entropy_coef: float = 0.01
    baseline_decay: float = 0.9
    reinforce_weight: float = 1.0
    context_to_lstm: bool = False
    hard_soft_mix: float = 0.5
    batch_size: int = 32
    lr: float = 2e-3
    clip_grad_norm: float = 5.0
    epochs: int = 30
    scenes_per_epoch: int | None = 4000  # a validation (and `best` checkpoint) every this many scenes
    max_steps: int | None = None
    max_time_s: float | None = None
    patience: int | None = None
    save_every_steps: int = 200
    valid_scenes: int = 300
    limit_train: int | None = None
    encoder_from: str | None = None  # a `train classifier` checkpoint whose conv trunk initialises the encoder
    init_from: str | None = None  # warm start from a captioner checkpoint (every weight whose shape fits)
    seed: int = 0
    threads: int | None = None
    device: str = "auto"  # where to train (see attnkit.device)
    precision: str = "fp32"  # fp32, bf16, fp16 (autocast) or auto
    progress: bool = True


def scene_order(n: int, per_epoch: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The scene indices of ``epoch``: the stretch ``[e·S, (e+1)·S)`` (``S = per_epoch``) of an endless
    stream of permutations of the ``n`` scenes (permutation ``k`` drawn from ``(seed, k)``), so a
    short "epoch" still sees every scene in turn."""
    start, stop = epoch * per_epoch, (epoch + 1) * per_epoch
    out: list[int] = []
    while start < stop:
        k, off = divmod(start, n)
        take = min(n - off, stop - start)
        perm = shuffled(n, seed, k) if shuffle else list(range(n))
        out += perm[off:off + take]
        start += take
    return out


def scene_batches(dataset: ScenesDataset, *, batch_size: int, seed: int, scenes_per_epoch: int | None = None,
                  shuffle: bool = True) -> Batches:
    """Resumable batches of collated scenes (see :func:`scene_order` for what an epoch is)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n, per_epoch = len(dataset), int(scenes_per_epoch) if scenes_per_epoch else len(dataset)

    def plan(epoch):
        idx = scene_order(n, per_epoch, seed, epoch, shuffle)
        return [idx[i:i + batch_size] for i in range(0, len(idx), batch_size)]

    return Batches(plan, lambda idx, epoch, i: collate_captions([dataset[j] for j in idx]),
                   fingerprint={"seed": seed, "per_epoch": per_epoch})


# ---------------------------------------------------------------------------------------- loss


def caption_loss_fn(config, *, generator: torch.Generator | None = None):
    """The trainer's loss for a captioner with ``config``: ``loss_fn(model, batch) -> (loss_sum, n_tokens, metrics)``.

    soft: ``Σ NLL + λ Σ_sentences Σ_i (1 − Σ_t α_ti)²``;
    hard: ``Σ NLL(sampled path) + λ_r Σ_sentences −(R − b) Σ_t log p(s_t) − η Σ_t H(α_t)``, with
    ``R = −NLL`` of the sentence and ``b`` the model's moving-average baseline (the batch's mean
    reward until it is set). The loss only reads ``b``; the training step moves it
    (:func:`update_reward_baseline`, the trainer's ``after_step``), from ``metrics["reward"]``.
    """
    from ..models.captioner import doubly_stochastic_penalty, reinforce_terms

    def loss_fn(model, batch: dict):
        caps = batch["captions"]
        inp, tgt = caps[:, :-1], caps[:, 1:]
        out = model(batch["images"], inp, generator=generator) if generator is not None else model(batch["images"], inp)
        mask = tgt != config.pad_id
        nll_tok = F.cross_entropy(out.logits.transpose(1, 2), tgt, ignore_index=config.pad_id, reduction="none")
        nll_sent = nll_tok.sum(1)  # (B,)
        n = int(mask.sum())
        loss = nll_sent.sum()
        metrics = {"nll": float(loss.detach()) / max(n, 1)}
        if config.attention == "soft":
            if config.lambda_ds:
                ds = doubly_stochastic_penalty(out.alphas, mask)
                loss = loss + config.lambda_ds * ds.sum()
                metrics["ds"] = float(ds.detach().mean())
        elif out.log_probs is not None:  # hard attention, sampling
            reward = (-nll_sent.detach()).mean()
            baseline = out.baseline if out.baseline is not None else reward
            rf = reinforce_terms(nll_sent, out.log_probs, mask, baseline)
            ent = (out.entropies * mask).sum()
            loss = loss + config.reinforce_weight * rf.sum() - config.entropy_coef * ent
            metrics.update({"reward": float(reward), "baseline": float(baseline),
                            "entropy": float(ent.detach()) / max(n, 1)})
        metrics["beta"] = float((out.betas.detach() * mask).sum()) / max(n, 1)
        return loss, n, metrics

    return loss_fn


def update_reward_baseline(model, metrics: dict) -> None:
    """The training step's REINFORCE bookkeeping: ``b ← decay·b + (1 − decay)·R̄`` from the step's
    mean reward (hard attention only; a soft captioner reports no reward)."""
    if "reward" in metrics:
        model.update_baseline(metrics["reward"])


# ---------------------------------------------------------------------------------------- model wrapper


class CaptionModel:
    """A trained captioner with its vocabulary: caption image tensors or files, keep the attention."""

    def __init__(self, model, vocab: CaptionVocab):
        self.model = model
        self.vocab = vocab
        self.config = model.config

    @classmethod
    def load(cls, model_dir: str | Path, *, device: str | torch.device | None = "cpu",
             dtype: str | torch.dtype | None = None) -> "CaptionModel":
        """Load a captioner by name (``"captioner-soft"``) or folder, onto ``device`` in ``dtype``
        (as :meth:`attnkit.tasks.translation.Translator.load`)."""
        from ..device import place
        from ..pretrained import resolve_model

        model_dir = resolve_model(model_dir)
        model, _, _ = load_model(model_dir, model_type="captioner")
        vocab_path = model_dir / VOCAB_FILE
        if not vocab_path.is_file():
            raise CheckpointError(f"{vocab_path}: the checkpoint has no {VOCAB_FILE}; is {model_dir} a captioner?")
        return cls(place(model, device, dtype), CaptionVocab.load(vocab_path))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def canvas(self) -> int:
        return self.config.canvas

    @torch.no_grad()
    def caption(self, images: torch.Tensor, *, beam_size: int = 1, batch_size: int = 128,
                max_len: int | None = None) -> list[dict]:
        """Caption ``images (N, 1, C, C)`` in [0, 1]; each result has ``caption``, ``words``,
        ``tokens``, ``score`` and ``attention (len(words), L)`` (row t predicted word t)."""
        self.model.eval()
        max_len = max_len or self.config.max_len
        results = []
        for s in range(0, len(images), batch_size):
            first = next(self.model.parameters())
            inputs = {"images": images[s:s + batch_size].to(device=first.device, dtype=first.dtype)}
            if beam_size <= 1:
                hyps = greedy_search(self.model, inputs, bos_id=self.config.bos_id, eos_id=self.config.eos_id,
                                     max_len=max_len, return_attention=True)
            else:
                hyps = [h[0] for h in beam_search(self.model, inputs, beam_size=beam_size, bos_id=self.config.bos_id,
                                                  eos_id=self.config.eos_id, max_len=max_len, length_penalty=0.0,
                                                  return_attention=True)]
            for h in hyps:
                words = [self.vocab.itos[t] for t in h.tokens]
                results.append({"caption": " ".join(words), "words": words, "tokens": h.tokens, "score": h.score,
                                "attention": h.attention})
        return results

    def plot(self, image: torch.Tensor, result: dict, path, *, boxes=None, title: str | None = None):
        """The per-word attention overlay of one captioned image (Xu et al., Fig. 2)."""
        from ..viz import plot_caption_attention

        words = result["words"]
        att = result["attention"]
        if not words:
            raise ValueError("the caption is empty: nothing to plot")
        return plot_caption_attention(image[0], words, att, path, grid_shape=self.model.grid_shape, boxes=boxes,
                                      title=title or result["caption"], normalize="per_word")


def load_image_file(path: str | Path, canvas: int) -> torch.Tensor:
    """Read an image file as a ``(1, canvas, canvas)`` float tensor in [0, 1] (grayscale, resized).

    Any size or colour mode PIL reads is converted (``L`` mode, bilinear resize); transparency is
    composited on black (the scenes' background). Raises ``FileNotFoundError`` or ``ValueError``
    naming the file.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image {path} does not exist")
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
                im = im.convert("RGBA")
                bg = Image.new("RGBA", im.size, (0, 0, 0, 255))
                im = Image.alpha_composite(bg, im)
            im = im.convert("L")
            if im.size != (canvas, canvas):
                im = im.resize((canvas, canvas), Image.BILINEAR)
            arr = np.asarray(im, dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(f"cannot read image {path}: not a readable image file ({type(exc).__name__}: {exc})") from None
    return torch.from_numpy(arr.copy()).unsqueeze(0)


# ---------------------------------------------------------------------------------------- metrics


def words_to_items(words: Sequence[str], classes: Sequence[int], places: Sequence[int]) -> list[int]:
    """For each caption word, the index of the scene item it names, or -1.

    A class word names the item of that class at the place the caption gives next
    (``<class> at the <row> <col>``); failing that, the only item of that class. A class word
    that matches no item (a wrong word) names nothing.
    """
    classes, places = [int(c) for c in classes], [int(p) for p in places]
    out = []
    for i, w in enumerate(words):
        if w not in FASHION_WORDS:
            out.append(-1)
            continue
        c = FASHION_WORDS.index(w)
        tail = list(words[i + 1:i + 5])
        place = PLACES.index(f"{tail[2]} {tail[3]}") if (len(tail) == 4 and tail[:2] == ["at", "the"]
                                                          and f"{tail[2]} {tail[3]}" in PLACES) else None
        match = [k for k, (ck, pk) in enumerate(zip(classes, places)) if ck == c and (place is None or pk == place)]
        if not match and place is not None:
            match = [k for k, ck in enumerate(classes) if ck == c]
        out.append(match[0] if len(match) == 1 else -1)
    return out


def attention_mass_in_box(alphas, grid_shape: tuple[int, int], canvas: int, boxes) -> np.ndarray:
    """Share of each map's mass inside its box: ``alphas (T, L)`` or ``(T, h, w)``, ``boxes (T, 4)``
    half-open ``(x0, y0, x1, y1)`` canvas pixels. Maps are spread over the canvas with
    nearest-neighbour upsampling and normalised to sum 1. Returns ``(T,)`` float."""
    from ..viz import upsample_attention

    a = torch.as_tensor(np.asarray(alphas, dtype=np.float64))
    if a.dim() == 3:
        a = a.flatten(1)
    if a.dim() != 2:
        raise ValueError(f"alphas must have shape (T, L) or (T, h, w), got {tuple(a.shape)}")
    boxes = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    if len(boxes) != a.shape[0]:
        raise ValueError(f"boxes has {len(boxes)} rows for {a.shape[0]} maps; expected one box per map")
    if a.shape[0] == 0:
        return np.zeros(0)
    up = upsample_attention(a.numpy(), grid_shape, (canvas, canvas), mode="nearest").astype(np.float64)
    tot = up.sum(axis=(1, 2))
    out = np.zeros(len(boxes))
    for t, (x0, y0, x1, y1) in enumerate(boxes.tolist()):
        if tot[t] > 0:
            out[t] = up[t, max(y0, 0):y1, max(x0, 0):x1].sum() / tot[t]
    return out


def _distribution(values: Sequence[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return {"n": 0, "mean": None}
    hist, edges = np.histogram(v, bins=10, range=(0.0, 1.0))
    return {"n": int(len(v)), "mean": round(float(v.mean()), 4),
            "quantiles": {q: round(float(np.quantile(v, float(q))), 4) for q in ("0.1", "0.25", "0.5", "0.75", "0.9")},
            "histogram": {"edges": [round(float(e), 2) for e in edges], "counts": hist.tolist()}}


def attention_correctness(maps: Sequence, word_items: Sequence[Sequence[int]], scene_boxes: Sequence,
                          grid_shape: tuple[int, int], canvas: int) -> dict:
    """Attention correctness over a set of captions, against the uniform-attention baseline.

    ``maps[n]`` is caption n's ``(T_n, L)`` attention, ``word_items[n]`` its per-word item index
    (-1 for words naming nothing), ``scene_boxes[n]`` the ``(items, 4)`` boxes. Returns
    ``{"model": distribution, "uniform": distribution}`` (``n``, ``mean``, quantiles, histogram).
    """
    got, uniform = [], []
    L = grid_shape[0] * grid_shape[1]
    for att, items, boxes in zip(maps, word_items, scene_boxes):
        idx = [t for t, k in enumerate(items) if k >= 0]
        if not idx:
            continue
        boxes = np.asarray(boxes).reshape(-1, 4)
        b = boxes[[items[t] for t in idx]]
        a = np.asarray(att, dtype=np.float64).reshape(len(items), -1)[idx]
        got += attention_mass_in_box(a, grid_shape, canvas, b).tolist()
        uniform += attention_mass_in_box(np.full((len(idx), L), 1.0 / L), grid_shape, canvas, b).tolist()
    return {"model": _distribution(got), "uniform": _distribution(uniform)}


def caption_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """BLEU-1..4 (sacrebleu corpus BLEU with max n-gram order n) and the exact-match rate."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    out = {}
    for n in (1, 2, 3, 4):
        bleu = sacrebleu.BLEU(max_ngram_order=n, effective_order=True) if n < 4 else sacrebleu.BLEU()
        out[f"bleu{n}"] = round(bleu.corpus_score(list(hypotheses), [list(references)]).score, 2) if hypotheses else 0.0
    out["exact_match"] = round(float(np.mean([h == r for h, r in zip(hypotheses, references)])), 4) if hypotheses else 0.0
    return out


# ---------------------------------------------------------------------------------------- training


def _valid_fn(dataset: ScenesDataset, n: int, vocab: CaptionVocab):
    subset = [dataset[i] for i in range(min(n, len(dataset)))]
    batch = collate_captions(subset)

    def valid_fn(model):
        out = caption_loss_fn(model.config)(model, to_device(batch, next(model.parameters()).device))
        cm = CaptionModel(model, vocab)
        hyps = [r["caption"] for r in cm.caption(batch["images"])]
        sc = caption_scores(hyps, batch["texts"])
        return {"valid_nll": out[2]["nll"], "valid_bleu4": sc["bleu4"], "valid_exact_match": sc["exact_match"]}

    return valid_fn


def build_captioner(cfg: CaptioningTrainConfig, vocab_size: int):
    from ..models.captioner import Captioner, CaptionerConfig

    return Captioner(CaptionerConfig(
        vocab_size=vocab_size, canvas=cfg.canvas, feature_dim=cfg.feature_dim, pos_dim=cfg.pos_dim,
        grid=cfg.canvas // 8, emb_dim=cfg.emb_dim, hidden_dim=cfg.hidden_dim, attn_dim=cfg.attn_dim, score=cfg.score,
        attention=cfg.attention, dropout=cfg.dropout, lambda_ds=cfg.lambda_ds, entropy_coef=cfg.entropy_coef,
        baseline_decay=cfg.baseline_decay, reinforce_weight=cfg.reinforce_weight, context_to_lstm=cfg.context_to_lstm,
        hard_soft_mix=cfg.hard_soft_mix,
    ))


def train_captioning(cfg: CaptioningTrainConfig, *, resume: bool = False, home: str | Path | None = None) -> dict:
    """Train a soft or hard captioner on the scenes with the shared trainer; returns its summary."""
    from ..training import Trainer

    if cfg.attention not in ("soft", "hard"):
        raise ValueError(f"attention must be 'soft' or 'hard', got {cfg.attention!r}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    train = load_scenes("train", home, canvas=cfg.canvas)
    valid = load_scenes("valid", home, canvas=cfg.canvas)
    vocab = train.vocab
    if cfg.limit_train:
        train = ScenesDataset({k: (v[:cfg.limit_train] if getattr(v, "ndim", 0) and len(v) == len(train) else v)
                               for k, v in train.arrays.items()}, vocab)
    torch.manual_seed(cfg.seed)
    model = build_captioner(cfg, len(vocab))
    if cfg.encoder_from:
        _load_encoder_trunk(model, cfg.encoder_from)
    if cfg.init_from:
        warm_start(model, cfg.init_from)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    vocab_bytes = json.dumps({"type": "CaptionVocab", "itos": vocab.itos}, indent=1).encode()
    trainer = Trainer(
        model, optimizer, loss_fn=caption_loss_fn(model.config), after_step=update_reward_baseline,
        train_batches=scene_batches(train, batch_size=cfg.batch_size, seed=cfg.seed,
                                    scenes_per_epoch=cfg.scenes_per_epoch),
        valid_fn=_valid_fn(valid, cfg.valid_scenes, vocab), clip_grad_norm=cfg.clip_grad_norm, out_dir=out,
        save_every_steps=cfg.save_every_steps, max_epochs=cfg.epochs, max_steps=cfg.max_steps,
        max_time_s=cfg.max_time_s, early_stopping_patience=cfg.patience, metric_for_best="valid_bleu4",
        greater_is_better=True, seed=cfg.seed, log_every=20, progress=cfg.progress,
        extra_files={VOCAB_FILE: vocab_bytes}, device=cfg.device, precision=cfg.precision,
    )
    return trainer.fit(resume=resume)


def _load_encoder_trunk(model, classifier_dir: str | Path) -> None:
    """Copy a Fashion-MNIST classifier's conv encoder (trunk and head) into the captioner's."""

    clf, _, _ = load_model(classifier_dir)
    src = getattr(clf, "encoder", None)
    if src is None or not hasattr(src, "trunk"):
        raise CheckpointError(f"{classifier_dir}: not a classifier checkpoint with a conv encoder")
    try:
        model.encoder.trunk.load_state_dict(src.trunk.state_dict())
        model.encoder.head.load_state_dict(src.head.state_dict())
    except RuntimeError as exc:
        raise CheckpointError(f"{classifier_dir}: its encoder does not fit this captioner ({exc})") from None


def warm_start(model, captioner_dir: str | Path) -> list[str]:
    """Initialise ``model`` from another captioner's weights; returns the names copied.

    Every tensor whose name and shape match is copied. The LSTM's input weights are copied column
    by column when only the input size differs (a ``context_to_lstm`` model warm-starting one
    without: the word-embedding columns come first and are kept, the context columns dropped).
    """

    src, _, _ = load_model(captioner_dir, model_type="captioner")
    theirs, ours = src.state_dict(), model.state_dict()
    copied = []
    with torch.no_grad():
        for k, v in ours.items():
            if k not in theirs:
                continue
            w = theirs[k].to(v.dtype)
            if w.shape == v.shape:
                v.copy_(w)
            elif k == "cell.weight_ih" and w.shape[0] == v.shape[0]:
                n = min(w.shape[1], v.shape[1])
                v[:, :n].copy_(w[:, :n])
            else:
                continue
            copied.append(k)
    return copied


@dataclass
class ClassifierTrainConfig:
    """``attnkit train classifier``: Fashion-MNIST photos at random offsets on a small canvas."""

    out_dir: str = "runs/classifier"
    channels: str = "32,64,96"
    feature_dim: int = 128
    canvas: int = 32
    batch_size: int = 128
    lr: float = 2e-3
    epochs: int = 2
    max_steps: int | None = None
    max_time_s: float | None = None
    save_every_steps: int = 200
    seed: int = 0
    threads: int | None = None
    device: str = "auto"  # where to train (see attnkit.device)
    precision: str = "fp32"  # fp32, bf16, fp16 (autocast) or auto
    progress: bool = True


def photo_batches(photos: np.ndarray, labels: np.ndarray, *, batch_size: int, canvas: int, seed: int,
                  shuffle: bool = True) -> Batches:
    """Resumable batches of Fashion-MNIST photos pasted at random offsets on a ``canvas`` square (the
    offsets of batch ``i`` of epoch ``e`` drawn from ``(seed, e, i)``; ``shuffle=False``: in order, centred)."""
    photos_t = torch.from_numpy(photos)
    labels_t = torch.from_numpy(labels.astype(np.int64))
    n = len(labels_t)

    def plan(epoch):
        order = shuffled(n, seed * 7919, epoch) if shuffle else list(range(n))
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]

    def make(idx, epoch, i):
        g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 100_003 + i)
        slack = canvas - 28
        off = (torch.randint(0, slack + 1, (len(idx), 2), generator=g) if shuffle
               else torch.full((len(idx), 2), slack // 2))
        images = torch.zeros(len(idx), 1, canvas, canvas)
        for k, j in enumerate(idx):
            x, y = off[k].tolist()
            images[k, 0, y:y + 28, x:x + 28] = photos_t[j].float() / 255.0
        return {"images": images, "labels": labels_t[list(idx)]}

    return Batches(plan, make, fingerprint={"seed": seed})


def train_classifier(cfg: ClassifierTrainConfig, *, resume: bool = False) -> dict:
    """Train the Fashion-MNIST classifier on train photos ``[0, 55000)`` (the scenes' train pool);
    validate on the held-out ``[55000, 60000)``. Test photos are never seen."""
    from ..data.idx import load_fashion_mnist
    from ..data.scenes import VALID_HOLDOUT
    from ..models.captioner import ClassifierConfig, FashionClassifier
    from ..training import Trainer

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    photos, labels = load_fashion_mnist("train")
    cut = len(photos) - VALID_HOLDOUT
    channels = [int(c) for c in str(cfg.channels).split(",")]
    torch.manual_seed(cfg.seed)
    model = FashionClassifier(ClassifierConfig(channels=channels, feature_dim=cfg.feature_dim, canvas=cfg.canvas))
    valid = photo_batches(photos[cut:], labels[cut:], batch_size=500, canvas=cfg.canvas, seed=0, shuffle=False)

    def loss_fn(m, batch):
        logits = m(batch["images"])
        loss = F.cross_entropy(logits, batch["labels"], reduction="sum")
        acc = float((logits.argmax(-1) == batch["labels"]).float().mean())
        return loss, len(batch["labels"]), {"acc": acc}

    def valid_fn(m):
        right = n = 0
        valid.set_epoch(0)
        for b in valid:
            b = to_device(b, next(m.parameters()).device)
            right += int((m(b["images"]).argmax(-1) == b["labels"]).sum())
            n += len(b["labels"])
        return {"valid_acc": right / n}

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    trainer = Trainer(model, torch.optim.Adam(model.parameters(), lr=cfg.lr), loss_fn=loss_fn,
                      train_batches=photo_batches(photos[:cut], labels[:cut], batch_size=cfg.batch_size,
                                                  canvas=cfg.canvas, seed=cfg.seed),
                      valid_fn=valid_fn, out_dir=out, save_every_steps=cfg.save_every_steps, max_epochs=cfg.epochs,
                      max_steps=cfg.max_steps, max_time_s=cfg.max_time_s, metric_for_best="valid_acc",
                      greater_is_better=True, seed=cfg.seed, log_every=20, progress=cfg.progress,
                      device=cfg.device, precision=cfg.precision)
    return trainer.fit(resume=resume)


# ---------------------------------------------------------------------------------------- evaluation


def _teacher_forced_alphas(model, batch) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        p = next(model.parameters())
        images, captions = batch["images"].to(p.device, p.dtype), batch["captions"].to(p.device)
        return model(images, captions[:, :-1]).alphas.float().cpu()  # (B, T, L), row t predicts token t+1


def evaluate_captioning(model_dir: str | Path, *, split: str = "test", limit: int | None = None, beam_size: int = 1,
                        home: str | Path | None = None, device: str | None = "cpu",
                        dtype: str | torch.dtype | None = None) -> dict:
    """BLEU-1..4, exact match and attention correctness (vs uniform) of a captioner on the scenes."""
    cm = CaptionModel.load(model_dir, device=device, dtype=dtype)
    data = load_scenes(split, home, canvas=cm.canvas)
    if data.vocab != cm.vocab:
        raise ValueError(f"{model_dir}: the model's vocabulary differs from the scenes' vocabulary")
    n = len(data) if limit is None else min(int(limit), len(data))
    items = [data[i] for i in range(n)]
    t0 = time.perf_counter()
    results, tf_maps = [], []
    for s in range(0, n, 200):
        batch = collate_captions(items[s:s + 200])
        results += cm.caption(batch["images"], beam_size=beam_size)
        tf = _teacher_forced_alphas(cm.model, batch)
        for b, it in enumerate(items[s:s + 200]):
            tf_maps.append(tf[b, :len(it["word_item"])].numpy())
    elapsed = time.perf_counter() - t0
    hyps = [r["caption"] for r in results]
    refs = [it["caption"] for it in items]
    scores = caption_scores(hyps, refs)
    grid = cm.model.grid_shape
    gen_items = [words_to_items(r["words"], it["classes"].tolist(), it["places"].tolist()) for r, it in zip(results, items)]
    gen = attention_correctness([r["attention"].numpy() for r in results], gen_items,
                                [it["boxes"].numpy() for it in items], grid, cm.canvas)
    tf = attention_correctness(tf_maps, [it["word_item"].tolist() for it in items],
                               [it["boxes"].numpy() for it in items], grid, cm.canvas)
    # diagnostic: the map one word *before* each item word (the article "a"), teacher-forced. A decoder
    # that feeds the context into its LSTM can look at the item there and name it from memory.
    prev = attention_correctness(tf_maps, [it["word_item"].tolist()[1:] + [-1] for it in items],
                                 [it["boxes"].numpy() for it in items], grid, cm.canvas)
    return {
        "model": str(model_dir), "attention": cm.config.attention, "score": cm.config.score, "split": split,
        "n_scenes": n, "beam_size": beam_size, **scores,
        "attention_correctness": gen["model"]["mean"],
        "uniform_attention_correctness": gen["uniform"]["mean"],
        "teacher_forced_attention_correctness": tf["model"]["mean"],
        "previous_word_attention_correctness": prev["model"]["mean"],
        "attention_correctness_detail": {"generated": gen, "teacher_forced": tf, "previous_word": prev},
        "scenes_per_s": round(n / max(elapsed, 1e-9), 1),
        "examples": [{"reference": r, "output": h} for r, h in list(zip(refs, hyps))[:5]],
    }


# ---------------------------------------------------------------------------------------- demo


def _demo_picks(data: ScenesDataset, k: int = 4) -> list[int]:
    """The first test scenes with 1, 2, 3 and 4 items (a spread of caption lengths)."""
    picks = []
    n_items = data.arrays["n_items"]
    for m in range(1, k + 1):
        idx = np.nonzero(n_items == m)[0]
        if len(idx):
            picks.append(int(idx[0]))
    return picks


def overlay_for_scene(cm: CaptionModel, item: dict, result: dict, path, title: str | None = None):
    """Write the per-word overlay of a captioned scene, each item word with its true box."""
    wi = words_to_items(result["words"], item["classes"].tolist(), item["places"].tolist())
    boxes = [item["boxes"][k].tolist() if k >= 0 else None for k in wi]
    return cm.plot(item["image"], result, path, boxes=boxes, title=title)


def caption_demo(*, home=None, out_dir: Path = Path("out/demo"), model_dirs: Sequence[str | Path] = ()) -> dict:
    """Caption ~4 held-out test scenes with each model; print truth vs output; write overlays."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    data = None
    for d in model_dirs:
        cm = CaptionModel.load(d)
        if data is None:
            data = load_scenes("test", home, canvas=cm.canvas)
            picks = _demo_picks(data)
        name = Path(d).name
        items = [data[i] for i in picks]
        images = torch.stack([it["image"] for it in items])
        results = cm.caption(images)
        print(f"\n{name} ({cm.config.attention} attention, greedy):")
        rows = []
        for i, (it, r) in enumerate(zip(items, results)):
            ok = "=" if r["caption"] == it["caption"] else "≠"
            print(f"  scene {picks[i]:>4}  true: {it['caption']}")
            print(f"              {ok} out: {r['caption']}")
            png = overlay_for_scene(cm, it, r, out_dir / f"{name}-scene{picks[i]}.png")
            rows.append({"scene": picks[i], "truth": it["caption"], "output": r["caption"], "png": str(png)})
        print("  overlays: " + ", ".join(r["png"] for r in rows))
        report[name] = rows
    return report
