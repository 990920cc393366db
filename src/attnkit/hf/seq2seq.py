"""Pretrained encoder-decoder models (Marian, BART/mBART, M2M100/NLLB, T5) as attnkit translation models.

:class:`HFSeq2Seq` wraps a ``transformers`` ``...ForConditionalGeneration`` model behind the
translation-model protocol (:mod:`attnkit.models.base`), so attnkit's greedy and beam search, the
translator, the aligners, ``explain`` and the explorer use it as they use attnkit's own Transformer:

- ``start``/``step_features``/``reorder`` decode over the model's own key/value cache
  (``EncoderDecoderCache``), one step at a time; ``output_layer`` is the model's output projection
  (``lm_head``, plus Marian's and BART's ``final_logits_bias``; T5's ``d_model^-1/2`` rescaling of
  tied outputs is applied to the features), with the tokens the model's generation config bans
  (``bad_words_ids`` of one token: opus-mt's padding) given a bias of ``-inf``;
- ``attention_maps`` captures every layer's and head's ``enc_self``, ``dec_self`` and ``cross``
  from the running model (:mod:`attnkit.hf.capture`: no eager reload), ``alignment`` being the last
  decoder layer's cross-attention averaged over heads, as for attnkit's Transformer.

attnkit hands the model the pieces of the text only (``src`` without special tokens, ``tgt_in``
starting with ``bos``); the adapter adds what the family expects: the source's special tokens
(Marian's and T5's ``</s>``, BART's ``<s> … </s>``, M2M100's language code and ``</s>``, read from
the tokenizer), and the decoder's start (``decoder_start_token_id``, then the generation config's
``forced_bos_token_id``, e.g. BART's ``<s>`` or M2M100's target language) in place of ``bos``. The
maps show the pieces of the text: the special tokens' rows and columns are left out, so a row sums to
one minus the weight the model gave to them (often much of it: the ``</s>`` column is an attention sink).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..decoding.search import PER_SOURCE
from ..models.base import AttentionMaps
from .capture import attention_sites, capture_attention
from .languages import translator_languages
from .loading import HFModelError, load_pretrained
from .tokenizer import HFTokenizer
from .transformers_internals import fork_encoder_decoder_cache

__all__ = ["ALIGNMENT_HEADS_KEY", "HFSeq2Seq", "HFSeq2SeqConfig", "HFState", "alignment_heads", "load_seq2seq"]

FAMILIES = ("marian", "bart", "mbart", "m2m_100", "nllb-moe", "t5", "mt5", "pegasus")


#: ``config.json`` key of an attnkit export (:mod:`attnkit.deploy.hf_export`): ``[[layer, head]]``, 1-based, the
#: cross-attention head trained with guided alignment (read at the step whose input is each target piece).
ALIGNMENT_HEADS_KEY = "attnkit_alignment_heads"


def alignment_heads(cfg, layers: int, heads: int, source: str) -> tuple[int, int] | None:
    """``(layer, head)`` from ``cfg``'s :data:`ALIGNMENT_HEADS_KEY` (None without it); a value that is not one
    pair of 1-based numbers within the model's ``layers`` decoder layers and ``heads`` heads is an
    :class:`HFModelError` naming the key."""
    value = getattr(cfg, ALIGNMENT_HEADS_KEY, None)
    if value is None:
        return None
    ok = (
        isinstance(value, list)
        and len(value) == 1
        and isinstance(value[0], list)
        and len(value[0]) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value[0])
    )
    if not ok or not (1 <= value[0][0] <= layers and 1 <= value[0][1] <= heads):
        raise HFModelError(
            f"{source}: config.json's {ALIGNMENT_HEADS_KEY} must be [[layer, head]] (1-based, within "
            f"{layers} decoder layers of {heads} heads), got {value!r}"
        )
    return value[0][0], value[0][1]


@dataclass
class HFSeq2SeqConfig:
    """What attnkit reads from a translation model's config, for a Hugging Face model (not saved:
    the model's own ``config.json`` is the source of truth)."""

    model_type: str
    source: str
    vocab_size: int
    d_model: int
    nhead: int
    num_encoder_layers: int
    num_decoder_layers: int
    max_src_len: int
    pad_id: int
    eos_id: int
    bos_id: int  # the decoder's start token
    src_lang: str = "?"
    tgt_lang: str = "?"
    corpus: str = "?"
    source_spelling: str = "modern"  # what the Translator rewrites input to (an attnkit export's: its model's)
    alignment_layer: int | None = None  # the guided alignment head (1-based), from ALIGNMENT_HEADS_KEY
    alignment_head: int | None = None


@dataclass
class HFState:
    """Decoder state: the encoder output ``memory (B, S', D)`` and its mask ``(B, S')`` (with the
    special tokens), the model's key/value cache (None before the first step), the step number and
    where the text's pieces sit in the source: ``offset`` (the special tokens before them) and
    ``src_lengths (B,)``."""

    memory: Tensor = field(metadata=PER_SOURCE)
    memory_mask: Tensor = field(metadata=PER_SOURCE)
    src_lengths: Tensor = field(metadata=PER_SOURCE)
    offset: int = 0
    width: int = 0  # S: the pieces' width of the batch the search started with (its attention rows' width)
    cache: Any = None
    step: int = 0


class SourceEmbedding(nn.Module):
    """What the model's encoder makes of token ids before its first layer, as one module:
    ``embed_tokens(ids) · scale`` (Marian multiplies by ``√d_model`` in the encoder; BART's and M2M100's
    embedding modules scale themselves; T5 does not scale). attnkit's gradient attributions replace its
    output for the source pieces (:func:`attnkit.attribution.gradients.source_embedding_override`)."""

    def __init__(self, embed_tokens: nn.Module, scale: float):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.scale = float(scale)

    @property
    def weight(self) -> Tensor:
        return self.embed_tokens.weight

    def forward(self, ids: Tensor) -> Tensor:
        out = self.embed_tokens(ids)
        return out * self.scale if self.scale != 1.0 else out


class HFSeq2Seq(nn.Module):
    """A ``transformers`` encoder-decoder model as an attnkit translation model (see the module docstring)."""

    def __init__(self, model: nn.Module, tokenizer, *, source: str = "?"):
        super().__init__()
        cfg = model.config
        if not getattr(cfg, "is_encoder_decoder", False):
            raise HFModelError(f"{source} is a {cfg.model_type} model, not an encoder-decoder")
        self.hf = model
        gen = getattr(model, "generation_config", None)
        start = getattr(cfg, "decoder_start_token_id", None)
        if start is None and gen is not None:
            start = gen.decoder_start_token_id
        if start is None:
            raise HFModelError(f"{source}: its config names no decoder_start_token_id")
        forced = getattr(gen, "forced_bos_token_id", None) if gen is not None else None
        if forced is None:  # M2M100, NLLB, mBART-50: the target language's token, from the tokenizer's tgt_lang
            forced = _language_token(tokenizer, getattr(tokenizer, "tgt_lang", None))
        self.decoder_prefix = [int(start)] + ([int(forced)] if forced is not None else [])
        pad = cfg.pad_token_id if cfg.pad_token_id is not None else start
        eos = cfg.eos_token_id if cfg.eos_token_id is not None else gen.eos_token_id
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        self.pad_id, self.eos_id = int(pad), int(eos)
        # the source's special tokens, from the tokenizer: what it adds around the pieces of a text
        probe = tokenizer("a", add_special_tokens=False)["input_ids"]
        full = tokenizer("a")["input_ids"]
        at = next((i for i in range(len(full) - len(probe) + 1) if full[i : i + len(probe)] == probe), 0)
        self.src_prefix, self.src_suffix = list(full[:at]), list(full[at + len(probe) :])
        self.banned = sorted(
            int(w[0]) for w in (getattr(gen, "bad_words_ids", None) or []) if len(w) == 1
        )  # one-token bad words: banned at every step, as generate's NoBadWordsLogitsProcessor does
        self.feature_scale = cfg.d_model**-0.5 if getattr(cfg, "scale_decoder_outputs", False) else 1.0
        encoder = model.get_encoder()
        tokens = encoder.get_input_embeddings()
        plain = type(tokens) is nn.Embedding  # a scaled embedding module scales itself
        self.embedding = SourceEmbedding(tokens, getattr(encoder, "embed_scale", 1.0) if plain else 1.0)
        self.sites = attention_sites(model)
        kinds = {s.kind for s in self.sites}
        if kinds != {"enc_self", "dec_self", "cross"}:
            raise HFModelError(
                f"{source}: found attention modules of kinds {sorted(kinds)}, not enc_self/dec_self/cross"
            )
        n_dec = 1 + max(s.layer for s in self.sites if s.kind == "cross")
        n_enc = 1 + max(s.layer for s in self.sites if s.kind == "enc_self")
        heads = getattr(cfg, "decoder_attention_heads", None) or getattr(cfg, "num_heads", None)
        max_pos = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 512
        # an attnkit export's config says what the attnkit model's said (deploy/hf_export.py): its languages,
        # corpus, source spelling and longest source, so that attnkit reads the folder as it reads the model
        ours = getattr(cfg, "attnkit", None)
        ours = ours if isinstance(ours, dict) else {}
        langs = (
            (ours["src_lang"], ours["tgt_lang"])
            if "src_lang" in ours
            else translator_languages(
                tokenizer,
                source,
                source_tokens=tokenizer.convert_ids_to_tokens(self.src_prefix + self.src_suffix),
                target_tokens=tokenizer.convert_ids_to_tokens(self.decoder_prefix[1:]),
            )
        )
        max_src = int(max_pos) - len(self.src_prefix) - len(self.src_suffix)
        guided = alignment_heads(cfg, n_dec, int(heads), source)
        self.config = HFSeq2SeqConfig(
            model_type=str(cfg.model_type),
            source=source,
            vocab_size=int(model.get_output_embeddings().weight.shape[0]),
            d_model=int(cfg.d_model),
            nhead=int(heads),
            num_encoder_layers=n_enc,
            num_decoder_layers=n_dec,
            max_src_len=min(max_src, int(ours.get("max_src_len") or max_src)),
            pad_id=self.pad_id,
            eos_id=self.eos_id,
            bos_id=self.decoder_prefix[0],
            src_lang=langs[0],
            tgt_lang=langs[1],
            corpus=str(ours.get("corpus", "?")),
            source_spelling=str(ours.get("source_spelling", "modern")),
            alignment_layer=guided[0] if guided else None,
            alignment_head=guided[1] if guided else None,
        )
        self.model_type = f"hf-{cfg.model_type}"

    # -- the model's inputs, with its special tokens -------------------------------------------------
    def _source(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Pieces ``src (B, S)`` → the model's ``input_ids (B, S')`` with the special tokens around each
        row's pieces, and its ``attention_mask (B, S')``."""
        if src.dim() != 2 or src_lengths.shape != (src.shape[0],):
            raise ValueError(
                f"src must be (B, S) and src_lengths (B,), got {tuple(src.shape)} and {tuple(src_lengths.shape)}"
            )
        B, S = src.shape
        pre, suf = self.src_prefix, self.src_suffix
        ids = torch.full((B, len(pre) + S + len(suf)), self.pad_id, dtype=torch.long, device=src.device)
        mask = torch.zeros_like(ids)
        for b, n in enumerate(src_lengths.tolist()):
            row = [*pre, *src[b, :n].tolist(), *suf]
            ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[b, : len(row)] = 1
        return ids, mask

    def _encode(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``(encoder output (B, S', D), attention_mask (B, S'))``, from embeddings: the pieces' through
        :attr:`embedding` called on ``src`` itself (so that an attribution may replace them), the
        special tokens' and the padding's from their ids."""
        ids, mask = self._source(src, src_lengths)
        full = self.embedding(ids)  # (B, S', E)
        S, off = src.shape[1], len(self.src_prefix)
        pieces = self.embedding(src)  # (B, S, E)
        keep = (torch.arange(S, device=src.device)[None, :] < src_lengths[:, None].to(src.device))[..., None]
        middle = torch.where(keep, pieces.to(full.dtype), full[:, off : off + S])
        embeds = torch.cat([full[:, :off], middle, full[:, off + S :]], dim=1)  # (B, S', E)
        return self.hf.get_encoder()(inputs_embeds=embeds, attention_mask=mask).last_hidden_state, mask

    def _decoder_input(self, tgt_in: Tensor) -> Tensor:
        """``tgt_in (B, T)`` (``bos`` first) → the decoder's ``(B, P - 1 + T)``: the decoder prefix in place of ``bos``."""
        B = tgt_in.shape[0]
        prefix = torch.tensor(self.decoder_prefix, dtype=torch.long, device=tgt_in.device).expand(B, -1)
        return torch.cat([prefix, tgt_in[:, 1:]], dim=1)

    def _piece_columns(self, weights: Tensor, src_lengths: Tensor, width: int | None = None) -> Tensor:
        """``(..., S')`` over the model's source → ``(..., S)`` over the pieces (zero past each row's length;
        ``S`` = ``width``, default the longest row); dimension 0 is the batch."""
        S = int(src_lengths.max()) if width is None else width
        off = len(self.src_prefix)
        out = weights[..., off : off + S]
        keep = torch.arange(S, device=out.device)[None, :] < src_lengths[:, None].to(out.device)  # (B, S)
        return out * keep.view(keep.shape[0], *([1] * (out.dim() - 2)), S)

    def _logits_from(self, features: Tensor) -> Tensor:
        return F.linear(features, *self.output_layer())

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """``(weight (V, E), bias (V,))``: ``logits = features @ weight.T + bias`` as the model computes
        them (``final_logits_bias`` and ``lm_head.bias`` included; banned tokens at ``-inf``)."""
        head = self.hf.get_output_embeddings()
        weight = head.weight
        bias = head.bias if getattr(head, "bias", None) is not None else None
        extra = getattr(self.hf, "final_logits_bias", None)
        if extra is not None:
            bias = extra[0] if bias is None else bias + extra[0]
        if self.banned:
            bias = weight.new_zeros(weight.shape[0]) if bias is None else bias.clone()
            bias[self.banned] = float("-inf")
        return weight, bias

    # -- teacher forcing ---------------------------------------------------------------------------
    def _run(self, src, src_lengths, tgt_in, on_weights=None, sites=None):
        """The decoder's output for a teacher-forced pass (``on_weights``: called with the captured
        attention of ``sites``, default all)."""
        if on_weights is not None:
            with capture_attention(self.hf, on_weights, sites=sites):
                return self._run(src, src_lengths, tgt_in)
        memory, mask = self._encode(src, src_lengths)
        return self.hf.get_decoder()(
            input_ids=self._decoder_input(tgt_in),
            encoder_hidden_states=memory,
            encoder_attention_mask=mask,
            use_cache=False,
        )

    def _rows(self, t: Tensor, dim: int) -> Tensor:
        """The rows of the text's positions (``bos`` and the pieces) along ``dim``: the decoder prefix's
        last position onwards."""
        return t.narrow(dim, len(self.decoder_prefix) - 1, t.shape[dim] - len(self.decoder_prefix) + 1)

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, *, need_weights: bool | int = False, features_only=False
    ):
        """Teacher forcing: logits ``(B, T, V)`` (or the features ``(B, T, E)``) for ``tgt_in``; with
        ``need_weights`` the last decoder layer's cross-attention averaged over heads ``(B, T, S)`` (an
        int ``l``: layer ``l``'s per head, ``(B, H, T, S)``)."""
        layer = need_weights if isinstance(need_weights, int) and not isinstance(need_weights, bool) else None
        n = self.config.num_decoder_layers
        if layer is not None and not 1 <= layer <= n:
            raise ValueError(f"need_weights must be a bool or a layer 1..{n}, got {layer}")
        kept = {}
        if need_weights:
            want = (layer or n) - 1
            sites = [s for s in self.sites if s.kind == "cross" and s.layer == want]
            out = self._run(src, src_lengths, tgt_in, lambda s, w: kept.__setitem__("w", w), sites)
        else:
            out = self._run(src, src_lengths, tgt_in)
        features = self._rows(out.last_hidden_state, 1) * self.feature_scale  # (B, T, E)
        weights = None
        if kept:
            w = self._piece_columns(self._rows(kept["w"], 2), src_lengths)  # (B, H, T, S)
            weights = w if layer is not None else w.mean(dim=1)
        return (features if features_only else self._logits_from(features)), weights

    @torch.no_grad()
    def attention_maps(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> AttentionMaps:
        """Every layer's and head's attention for one teacher-forced pass, over the text's pieces (see
        the module docstring): ``enc_self (B, L, H, S, S)``, ``dec_self (B, L, H, T, T)``,
        ``cross (B, L, H, T, S)``, ``alignment`` the last layer's cross-attention's head mean."""
        got: dict[tuple[str, int], Tensor] = {}
        self._run(src, src_lengths, tgt_in, lambda s, w: got.__setitem__((s.kind, s.layer), w))
        off, S = len(self.src_prefix), int(src_lengths.max())

        def stack(kind):
            return torch.stack([got[(kind, i)] for i in range(1 + max(k[1] for k in got if k[0] == kind))], 1)

        enc = self._piece_columns(stack("enc_self").narrow(3, off, S), src_lengths)  # (B, L, H, S, S)
        dec = self._rows(self._rows(stack("dec_self"), 3), 4)  # (B, L, H, T, T)
        cross = self._piece_columns(self._rows(stack("cross"), 3), src_lengths)  # (B, L, H, T, S)
        return AttentionMaps(
            alignment=cross[:, -1].mean(dim=1),
            enc_self=enc,
            dec_self=dec,
            cross=cross,
            score=f"e_j = qᵀ k_j · scaling + bias ({self.config.model_type}, captured from the running model)",
        )

    # -- what the decomposition-based attributions read -----------------------------------------
    @property
    def decomposition_refusal(self) -> str | None:
        """Why attention-norm, value zeroing and ALTI+ are not defined for this model's family (one
        line), or None where they are (:func:`attnkit.hf.decomposition.refusal`)."""
        from .decomposition import refusal

        reason = refusal(self.config.model_type)
        return None if reason is None else f"not defined for {self.config.model_type} models: {reason}"

    def decomposition_trace(self, src: Tensor, tgt_in: Tensor):
        """The residual blocks of one teacher-forced pass, ``src (S,)``, ``tgt_in (T,)``
        (:func:`attnkit.hf.decomposition.trace_seq2seq`)."""
        from .decomposition import trace_seq2seq

        return trace_seq2seq(self, src, tgt_in)

    def full_attention(self, src: Tensor, tgt_in: Tensor):
        """Every layer's encoder self-attention and cross-attention with the special tokens kept, for
        rollout (:func:`attnkit.hf.decomposition.full_attention`)."""
        from .decomposition import full_attention

        return full_attention(self, src, tgt_in)

    # -- incremental decoding ---------------------------------------------------------------------
    @torch.no_grad()
    def start(self, src: Tensor, src_lengths: Tensor) -> HFState:
        """Encode the source once (with the model's special tokens)."""
        memory, mask = self._encode(src, src_lengths)
        return HFState(memory, mask, src_lengths.to(memory.device), len(self.src_prefix), int(src.shape[1]))

    @torch.no_grad()
    def step_features(self, prev_tokens: Tensor, state: HFState):
        """``prev_tokens (R,)`` → ``(features (R, E), new state, attention (R, S))``: one decoder step over
        the model's cache (at step 0 the decoder prefix replaces ``bos``); ``attention`` is the last
        layer's cross-attention averaged over heads, over the source's pieces."""
        R = state.memory.shape[0]
        if not isinstance(prev_tokens, Tensor) or prev_tokens.shape != (R,):
            raise ValueError(f"prev_tokens must have shape ({R},), got {getattr(prev_tokens, 'shape', prev_tokens)}")
        if state.step == 0:
            ids = torch.tensor(self.decoder_prefix, dtype=torch.long, device=prev_tokens.device).expand(R, -1)
        else:
            ids = prev_tokens.unsqueeze(1)
        cache = None if state.cache is None else fork_encoder_decoder_cache(state.cache)
        kept = {}
        last = [s for s in self.sites if s.kind == "cross" and s.layer == self.config.num_decoder_layers - 1]
        with capture_attention(self.hf, lambda s, w: kept.__setitem__("w", w), sites=last):
            out = self.hf.get_decoder()(
                input_ids=ids,
                encoder_hidden_states=state.memory,
                encoder_attention_mask=state.memory_mask,
                past_key_values=cache,
                use_cache=True,
            )
        features = out.last_hidden_state[:, -1] * self.feature_scale  # (R, E)
        attention = kept["w"][:, :, -1].mean(dim=1)  # (R, S')
        attention = self._piece_columns(attention, state.src_lengths, state.width)
        new = dataclasses.replace(state, cache=out.past_key_values, step=state.step + 1)
        return features, new, attention

    def step(self, prev_tokens: Tensor, state: HFState):
        """``log_softmax`` of the output layer over :meth:`step_features`."""
        features, state, attention = self.step_features(prev_tokens, state)
        return torch.log_softmax(self._logits_from(features), dim=-1), state, attention

    def reorder(self, state: HFState, index: Tensor, *, beams_only: bool = False) -> HFState:
        """Rows ``index`` of the state, in new containers (the old state is left as it was); with
        ``beams_only`` the encoder output and the cross-attention cache are kept as they are."""
        cache = None if state.cache is None else fork_encoder_decoder_cache(state.cache, index, cross=not beams_only)
        if beams_only:
            return dataclasses.replace(state, cache=cache)
        return dataclasses.replace(
            state,
            memory=state.memory.index_select(0, index),
            memory_mask=state.memory_mask.index_select(0, index),
            src_lengths=state.src_lengths.index_select(0, index),
            cache=cache,
        )


def _language_token(tok, lang: str | None) -> int | None:
    """The id of language ``lang``'s token (M2M100's ``__en__``, NLLB's ``eng_Latn``, mBART's ``en_XX``),
    or None when there is none."""
    if not lang:
        return None
    unk = getattr(tok, "unk_token_id", None)
    for token in (f"__{lang}__", lang):
        found = tok.convert_tokens_to_ids(token)
        if isinstance(found, int) and found != unk:
            return found
    return None


def load_seq2seq(source: str, *, device="cpu", dtype=None) -> tuple[HFSeq2Seq, HFTokenizer, HFTokenizer]:
    """``(model, source tokenizer, target tokenizer)`` for the Hugging Face encoder-decoder at ``source``
    (a hub name or a folder, see :mod:`attnkit.hf.loading`), on ``device`` in ``dtype``."""
    from ..device import INT8, place

    if dtype == INT8:
        raise HFModelError(
            "precision int8 is for attnkit's own models (their layers are quantized by name); "
            "run a Hugging Face model in fp32, bf16 or fp16"
        )
    model, tok = load_pretrained(source, seq2seq=True)
    adapter = HFSeq2Seq(model, tok, source=source)
    cfg = adapter.config
    src_tok = HFTokenizer(tok, side="source", bos_id=cfg.bos_id, eos_id=cfg.eos_id, pad_id=cfg.pad_id)
    tgt_tok = HFTokenizer(tok, side="target", bos_id=cfg.bos_id, eos_id=cfg.eos_id, pad_id=cfg.pad_id)
    return place(adapter, device, dtype), src_tok, tgt_tok
