"""The training loss of every translation model: label-smoothed NLL per target token."""
from __future__ import annotations



from ...training.losses import label_smoothed_nll


def translation_loss_fn(pad_id: int, smoothing: float):
    """The trainer's loss: label-smoothed NLL summed over non-pad target tokens, and their count."""
    def loss_fn(model, batch):
        logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
        loss_sum, n = label_smoothed_nll(logits, batch["tgt_out"], pad_id, smoothing)
        return loss_sum, n, {}

    return loss_fn

