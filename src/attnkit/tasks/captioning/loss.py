"""The training loss of Show, Attend and Tell (soft: NLL + doubly stochastic term; hard: REINFORCE)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------- loss


def caption_loss_fn(config, *, generator: torch.Generator | None = None):
    """The trainer's loss for a captioner with ``config``: ``loss_fn(model, batch) -> (loss_sum, n_tokens, metrics)``.

    soft: ``Σ NLL + λ Σ_sentences Σ_i (1 − Σ_t α_ti)²``;
    hard: ``Σ NLL(sampled path) + λ_r Σ_sentences −(R − b) Σ_t log p(s_t) − η Σ_t H(α_t)``, with
    ``R = −NLL`` of the sentence and ``b`` the model's moving-average baseline (the batch's mean
    reward until it is set). The loss only reads ``b``; the training step moves it
    (:func:`update_reward_baseline`, the trainer's ``after_step``), from ``metrics["reward"]``.
    """
    from ...models.captioner import doubly_stochastic_penalty, reinforce_terms

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
            metrics.update(
                {"reward": float(reward), "baseline": float(baseline), "entropy": float(ent.detach()) / max(n, 1)}
            )
        metrics["beta"] = float((out.betas.detach() * mask).sum()) / max(n, 1)
        return loss, n, metrics

    return loss_fn


def update_reward_baseline(model, metrics: dict) -> None:
    """The training step's REINFORCE bookkeeping: ``b ← decay·b + (1 − decay)·R̄`` from the step's
    mean reward (hard attention only; a soft captioner reports no reward)."""
    if "reward" in metrics:
        model.update_baseline(metrics["reward"])
