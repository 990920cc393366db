"""The inference wrapper: a trained captioner with its vocabulary."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...data.vocab import CaptionVocab
from ...decoding import search
from ..results import ResultRecord
from ..wrapper import InferenceWrapper
from .config import VOCAB_FILE

# ---------------------------------------------------------------------------------------- model wrapper


@dataclass
class Caption(ResultRecord):
    """One image's caption: the words, their ids, the search's score and the attention
    ``(len(words), L)`` over the ``L`` grid cells (row t: the map that predicted word t)."""

    caption: str
    words: list[str]
    tokens: list[int]
    score: float
    attention: torch.Tensor | None = None


class Captioner(InferenceWrapper):
    """A trained captioner with its vocabulary: caption image tensors or files, keep the attention.
    :meth:`load` takes a name (``"captioner-soft"``) or a folder holding ``vocab.json``."""

    companion_file, kind, model_type = VOCAB_FILE, "a captioner", "captioner"

    def __init__(self, model, vocab: CaptionVocab):
        self.model = model
        self.vocab = vocab
        self.config = model.config

    read_companion = staticmethod(CaptionVocab.load)

    @property
    def canvas(self) -> int:
        return self.config.canvas

    @torch.no_grad()
    def caption(
        self, images: torch.Tensor, *, beam_size: int = 1, batch_size: int = 128, max_len: int | None = None
    ) -> list[Caption]:
        """Caption ``images (N, 1, C, C)`` in [0, 1]: one :class:`Caption` per image."""
        self.model.eval()
        max_len = max_len or self.config.max_len
        results = []
        for s in range(0, len(images), batch_size):
            first = next(self.model.parameters())
            inputs = {"images": images[s : s + batch_size].to(device=first.device, dtype=first.dtype)}
            hyps = search(
                self.model,
                inputs,
                beam_size=beam_size,
                bos_id=self.config.bos_id,
                eos_id=self.config.eos_id,
                max_len=max_len,
                return_attention=True,
            )
            for h in hyps:
                words = [self.vocab.itos[t] for t in h.tokens]
                results.append(Caption(" ".join(words), words, h.tokens, h.score, h.attention))
        return results

    def plot(self, image: torch.Tensor, result: Caption, path, *, boxes=None, title: str | None = None):
        """The per-word attention overlay of one captioned image (Xu et al., Fig. 2)."""
        from ...viz import plot_caption_attention

        words = result.words
        att = result.attention
        if not words:
            raise ValueError("the caption is empty: nothing to plot")
        return plot_caption_attention(
            image[0],
            words,
            att,
            path,
            grid_shape=self.model.grid_shape,
            boxes=boxes,
            title=title or result.caption,
            normalize="per_word",
        )
