"""The training loss of every translation model: label-smoothed NLL per target token."""

from __future__ import annotations

import torch

from ...training.checkpoint import unwrap_model
from ...training.linear_cross_entropy import linear_cross_entropy
from ...training.losses import label_smoothed_nll
from .guided import GuidedAlignment, guided_alignment_loss


def translation_loss_fn(pad_id: int, smoothing: float, guided: GuidedAlignment | None = None):
    """The trainer's loss: label-smoothed NLL summed over non-pad target tokens, and their count.

    Models with an ``output_layer`` (every attnkit translator) are trained in full precision
    through :func:`~attnkit.training.linear_cross_entropy.linear_cross_entropy`: the model returns
    the output layer's inputs, and only the real (non-pad) target positions are projected onto
    the vocabulary, in chunks, so the ``(B, T, V)`` logits are never made and padding costs no
    output GEMM. Under autocast (bf16/fp16 training) its matrix products run in autocast's dtype
    (softmax and loss in float32), as autocast runs the other layers.

    With ``guided`` (and batches holding ``"align"`` targets, :mod:`.guided`), the supervised
    attention's cross-entropy is added: ``loss_sum + λ · L_align``; the metrics report ``align_loss``
    (per target token).
    """
    need = False if guided is None else (guided.layer if guided.layer is not None else True)

    def alignment_term(weights, batch):
        if guided is None or "align" not in batch:
            return None
        att = weights[:, guided.head - 1] if guided.layer is not None else weights  # (B, T, S)
        if not guided.input_step:  # row t is the step that outputs piece t
            return guided_alignment_loss(att.float(), batch["align"])
        # target piece t is the input of row t + 1 (tgt_in = [bos, y_0, …]): the supervised rows are
        # 1 … T-1, against the targets of pieces 0 … T-2 (the last row of `align` is eos or padding)
        return guided_alignment_loss(att[:, 1:].float(), batch["align"][:, :-1])

    def loss_fn(model, batch):
        core = unwrap_model(model)  # the model inside DistributedDataParallel
        src, lengths, tgt_in, tgt_out = batch["src"], batch["src_lengths"], batch["tgt_in"], batch["tgt_out"]
        if hasattr(core, "output_layer"):
            feats, weights = model(src, lengths, tgt_in, features_only=True, need_weights=need)  # (B, T, E)
            real = tgt_out.ne(pad_id)  # (B, T)
            weight, bias = core.output_layer()
            device = tgt_out.device.type
            low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
            # feats[real]: (N, E), the N real target positions only
            loss_sum = linear_cross_entropy(
                feats[real], weight, bias, tgt_out[real], smoothing=smoothing, matmul_dtype=low
            )
            n = int(real.sum())
        else:
            logits, weights = model(src, lengths, tgt_in, need_weights=need)
            loss_sum, n = label_smoothed_nll(logits, tgt_out, pad_id, smoothing)
        align = alignment_term(weights, batch)
        if align is None:
            return loss_sum, n, {}
        return loss_sum + guided.weight * align, n, {"align_loss": float(align.detach()) / max(n, 1)}

    return loss_fn
