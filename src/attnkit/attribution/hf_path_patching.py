"""Path patching's receiver run on a Hugging Face decoder-only model, through the model's own modules.

:mod:`attnkit.attribution.path_patching` recomputes the receiver head of attnkit's language model from its
weights. A ``transformers`` model's attention differs by family (fused projections, rotary variants, query
and key norms, grouped-query sharing), so here the model computes it itself: in one forward of the base
run, the receiver block's query, key or value projection (``via``) has its output replaced by what it gives
on the patched input ::

    x' = N₁( h_{l_r}^base + (z_s^source − z_s^base) W_O^{s} )      # (B, N, D)

(:func:`attnkit.hf.stream_sites.hf_head_inputs` names ``N₁`` and the projections' columns), and every head of
the receiver's layer but the receiver takes its base output back at the output projection
(:class:`~attnkit.attribution.interventions.HeadPatch`), so only the receiver's output changes, as it does in
the recomputed form; the later layers read it as they would. Pre-norm blocks only (the sender's change
reaches the stream as ``z W_O`` exactly).
"""

from __future__ import annotations

from torch import Tensor

from ..hooks import thread_hooks
from .interventions import HeadPatch, HeadRecording, HeadSite, intervene

__all__ = ["check_pre_norm", "head_write", "hf_receiver_run"]


def head_write(site: HeadSite, head: int, z: Tensor) -> Tensor:
    """What head ``head``'s output ``z (B, N, D_h)`` adds to the stream through the output projection of
    ``site``, bias left out: ``z W_O^{head}`` ``(B, N, D)`` (``nn.Linear``'s weight is ``(D, H·D_h)``, GPT-2's
    ``Conv1D``'s ``(H·D_h, D)``)."""
    dh = site.head_dim
    cols = slice(head * dh, (head + 1) * dh)
    w = site.projection.weight
    if type(site.projection).__name__ == "Conv1D":
        return z @ w[cols, :]  # (B, N, D)
    return z @ w[:, cols].T  # (B, N, D)


def hf_receiver_run(
    core,
    inputs,
    base: Tensor,
    resid: Tensor,
    delta: Tensor,
    receiver: tuple[int, int],
    via: str,
    rec_base: HeadRecording,
    logits_of,
) -> Tensor:
    """The base run's logits ``(B, N, V)`` with receiver head ``receiver = (layer, head)`` reading
    ``x' = N₁(resid + delta)`` through its ``via`` inputs (``inputs``: the block's
    :class:`~attnkit.hf.stream_sites.HeadInputs`) and every other head of its layer at its base output."""
    lr, hr = receiver
    norm = inputs.norm
    x_patched = resid + delta if norm is None else norm.forward(resid + delta)  # (B, N, D); .forward: no hooks

    def replace(columns):
        def hook(module, args, output):
            alt = module.forward(x_patched)  # the projection on x', the module's own weights
            if columns is None:
                return alt
            out = output.clone()
            out[..., columns] = alt[..., columns.to(out.device)]
            return out

        return hook

    hooks = [(module, replace(cols)) for c, (module, cols) in inputs.projections.items() if c in via]
    n_heads = rec_base.sites["self", lr].n_heads
    keep = [HeadPatch(lr, h, rec_base.get("self", lr, h)) for h in range(n_heads) if h != hr]
    with thread_hooks(hooks), intervene(core, keep):
        return logits_of(core, base)


def check_pre_norm(core, layer: int):
    """The receiver block's :class:`~attnkit.hf.stream_sites.HeadInputs`, or ``ValueError`` naming why path
    patching cannot read it."""
    from ..hf.loading import HFModelError
    from ..hf.stream_sites import hf_head_inputs

    try:
        return hf_head_inputs(core, layer)
    except HFModelError as exc:
        raise ValueError(str(exc)) from None
