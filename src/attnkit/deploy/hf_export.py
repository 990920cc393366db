"""``attnkit export MODEL OUT --format huggingface``: a Transformer translator as a stock Hugging Face model.

The folder it writes loads with plain ``transformers`` —
``AutoModelForSeq2SeqLM.from_pretrained(OUT)`` and ``AutoTokenizer.from_pretrained(OUT)``, no
``trust_remote_code`` — and computes the same function as the attnkit model, so ``generate``,
pipelines, bertviz, inseq and the hub all work on models trained with attnkit.

**Which architecture.** The stock one that represents the network exactly:

- **post-norm** (Vaswani et al. 2017's LayerNorm after each residual sum): ``MarianMTModel``
  (Junczys-Dowmunt et al. 2018), whose layers are exactly that, without final LayerNorms;
- **pre-norm** (LayerNorm before each sub-layer, a final LayerNorm on each stack; the shipped
  ``transformer-es-en``): ``PegasusForConditionalGeneration`` (Zhang et al. 2020), Marian's pre-norm
  sibling with the same final LayerNorms.

**How the weights map.** Both take the embedding times ``√D`` (``scale_embedding``) plus a fixed
sinusoid table at positions ``0, 1, …`` (no offset), ReLU feed-forward blocks, biased
projections, LayerNorms with ``ε = 1e-5``, the output ``h Wᵀ + final_logits_bias``. Their
sinusoids put every sine first and every cosine after (``[sin ω₀p … sin ω_{D/2-1}p, cos ω₀p …]``)
where attnkit interleaves them (``[sin ω₀p, cos ω₀p, sin ω₁p, …]``), with the same frequencies
``ω_i = 10000^{-2i/D}``. So the export renames the residual stream's dimensions: HF dimension
``k`` is attnkit dimension ``π(k)``, ``π = [0, 2, 4, …, D-2, 1, 3, …, D-1]``. Every weight that
reads the residual stream has its input columns permuted (``W[:, π]``: the embeddings, the
query/key/value projections, the first feed-forward layer, the output layer), every weight that
writes it has its output rows permuted (``W[π]``, ``b[π]``: attention output projections, the
second feed-forward layer), and LayerNorm's ``γ, β`` are permuted (its mean and variance do not
depend on the order). The network computes the same function, every hidden state permuted by
``π``; the logits are untouched. Self-attention's packed ``[W_q; W_k; W_v]`` splits into
``q_proj``, ``k_proj``, ``v_proj``; the scaling ``1/√d_h`` is the same.

**Tokens.** ``<pad>`` 0 is ``pad_token_id``, ``<s>`` 1 the ``decoder_start_token_id`` (attnkit starts
decoding from ``<s>``, Marian and Pegasus by default from ``<pad>``), ``</s>`` 2 ``eos_token_id``;
``forced_eos_token_id`` is unset and ``generation_config.json`` says greedy with at most
:data:`MAX_DECODE` tokens, as attnkit's :class:`~attnkit.tasks.translation.Translator`. The source
has no ``</s>`` appended (attnkit's has none); the tokenizer is :mod:`attnkit.deploy.hf_tokenizer`'s.
``config.json`` also carries an ``attnkit`` entry (the languages, the corpus, the source spelling and
the longest source), which plain ``transformers`` ignores and attnkit's HF path reads, so that
``attnkit translate --model OUT`` rewrites today's Spanish to the 1909 Bible's spelling before
tokenizing, as the attnkit model does (plain ``transformers`` reads text as typed). A model trained with
guided alignment also gets ``"attnkit_alignment_heads": [[layer, head]]`` in ``config.json``
(:data:`ALIGNMENT_HEADS_KEY`; 1-based, as ``attnkit align --layer/--head`` count; the head is read at the
step whose *input* is each target piece, as it was trained), so that ``attnkit align``, ``translate
--format html`` and the explorer align an exported folder with that head, as they do the attnkit model;
the heads keep their order in the export (only the residual dimensions are permuted).

**What is refused**, with a :class:`~attnkit.deploy.manifest.DeployError` naming the reason:
recurrent translators and captioners; learned position tables (Marian's and Pegasus's tables are
fixed sinusoids); separate source and target vocabularies; a pre-norm model with separate source
and target embeddings (Pegasus has one shared table); an option this export does not know.

Before anything is written the export runs the HF model beside the attnkit one on a few
sentences and refuses if the logits differ by more than :data:`SELF_CHECK_TOLERANCE`, or if the
tokenizer cuts one of them differently.

``transformers`` is not imported here: the objects it makes (the config and model, the generation
config, the fast tokenizer, the saved folder) are built by :mod:`attnkit.hf.export` from the plain
values this module decides, only when exporting; without it the export says which extra to install.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from ..attention.positional import sinusoidal_encoding
from ..data.tokenizer import MODEL_FILENAME, Tokenizer
from ..hf.seq2seq import ALIGNMENT_HEADS_KEY
from ..output_folder import check_output_folder, replace_output_folder, staging_beside
from ..version import __version__
from .ct2_export import MAX_DECODE, NETWORK_FIELDS, check_model_type, guided_head
from .hf_folder import CHECK_SENTENCES
from .hf_folder import hf_objects as _hf_export
from .hf_folder import make_readable as _readable
from .hf_folder import portable_tokenizer_config as _portable_tokenizer_config
from .hf_tokenizer import build_tokenizer, tokenizer_mismatches
from .manifest import DeployError, tokenizer_sha256, write_manifest

__all__ = [
    "SELF_CHECK_TOLERANCE",
    "architecture_for",
    "export_huggingface",
    "hf_model",
    "residual_permutation",
]

#: The largest |Δ logit| the export accepts between the HF model and attnkit's on its own check.
SELF_CHECK_TOLERANCE = 1e-3
#: TransformerConfig fields this export maps, or that do not change the network at inference.
_KNOWN_FIELDS = NETWORK_FIELDS | {
    "src_lang",
    "tgt_lang",
    "corpus",
    "src_vocab_size",  # checked below: only None (one joint vocabulary) exports
}
_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which Marian and Pegasus use


def _check_model_type(model_type: str) -> None:
    check_model_type(
        model_type,
        "huggingface",
        "the Hugging Face seq2seq architectures this export writes (Marian, Pegasus) are Transformers; "
        "only Transformer translators export to huggingface",
    )


def architecture_for(model, tokenizer: Tokenizer) -> str:
    """``"pegasus"`` (pre-norm) or ``"marian"`` (post-norm): the stock architecture that represents
    ``model`` exactly; a :class:`DeployError` with the reason when none does."""
    _check_model_type(getattr(model, "model_type", type(model).__name__))
    c = model.config
    if getattr(c, "pruned_heads", None):
        raise DeployError(
            "the model has heads pruned (attnkit.models.head_pruning): Marian's and Pegasus's configs have one head "
            "count for all encoder (and one for all decoder) attentions, so fewer heads in some layers cannot be "
            "written; export the unpruned model"
        )
    defaults = type(c)()
    for f in dataclasses.fields(c):
        if f.name not in _KNOWN_FIELDS and getattr(c, f.name) != getattr(defaults, f.name):
            raise DeployError(
                f"{f.name}={getattr(c, f.name)!r}: the huggingface export does not know this option, "
                "so it cannot promise the same translations"
            )
    if c.positional != "sinusoidal":
        raise DeployError(
            f"positional={c.positional!r}: Marian and Pegasus add a fixed sinusoid table; "
            "only models with sinusoidal positions export to huggingface"
        )
    if c.src_vocab_size is not None:
        raise DeployError(
            "the model has separate source and target vocabularies; the huggingface export writes one "
            "tokenizer, so only models with one joint vocabulary export"
        )
    if c.norm_first and not c.tie_embeddings:
        raise DeployError(
            "a pre-norm model with separate source and target embeddings (tie_embeddings=false): Pegasus, "
            "the stock pre-norm architecture, shares one embedding between encoder and decoder; "
            "post-norm models (norm_first=false) export untied as Marian"
        )
    if len(tokenizer) != c.vocab_size:
        raise DeployError(f"the tokenizer has {len(tokenizer)} pieces but the model's vocabulary is {c.vocab_size}")
    ids = (c.pad_id, c.bos_id, c.eos_id)
    if ids != (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id):
        want = (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
        raise DeployError(f"pad/bos/eos ids are {ids}, the tokenizer's are {want}")
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    if {m.eps for m in norms} != {_LAYER_NORM_EPS} or any(m.bias is None for m in norms):
        raise DeployError(f"the LayerNorms are not all biased with eps={_LAYER_NORM_EPS}, as Marian's and Pegasus's")
    acts = {getattr(layer, "activation", None) for layer in [*model.encoder.layers, *model.decoder.layers]}
    if acts != {torch.nn.functional.relu}:
        raise DeployError("the feed-forward activation is not ReLU; this export maps ReLU only")
    return "pegasus" if c.norm_first else "marian"


def residual_permutation(d_model: int) -> torch.Tensor:
    """``π (D,)``: HF residual dimension ``k`` is attnkit dimension ``π[k]`` (sines first, then cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _hf_config(model, max_positions: int) -> tuple[dict, dict]:
    """The HF config's keyword arguments: those Marian and Pegasus share, and Marian's own."""
    c = model.config
    common = dict(
        vocab_size=c.vocab_size,
        d_model=c.d_model,
        encoder_layers=c.num_encoder_layers,
        decoder_layers=c.num_decoder_layers,
        encoder_attention_heads=c.nhead,
        decoder_attention_heads=c.nhead,
        encoder_ffn_dim=c.dim_feedforward,
        decoder_ffn_dim=c.dim_feedforward,
        max_position_embeddings=max_positions,
        activation_function="relu",
        dropout=c.dropout,  # attnkit's one rate: embeddings, sub-layer outputs,
        attention_dropout=c.dropout,  # attention weights,
        activation_dropout=c.dropout,  # and inside the feed-forward block
        scale_embedding=True,
        pad_token_id=c.pad_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None,
        tie_word_embeddings=c.tie_embeddings,
        architectures=None,  # set by the caller: the architecture's class name
        # what attnkit's Translator reads from the model's own config, for attnkit's HF path (plain
        # transformers keeps it as an attribute and ignores it): the languages, the corpus, the
        # source spelling input is rewritten to, and the longest source the model accepts
        attnkit={
            "src_lang": c.src_lang,
            "tgt_lang": c.tgt_lang,
            "corpus": c.corpus,
            "source_spelling": c.source_spelling,
            "max_src_len": c.max_src_len,
        },
    )
    guided = guided_head(c)
    if guided:  # the head trained to align (guided alignment), which attnkit's HF path aligns with
        common[ALIGNMENT_HEADS_KEY] = [list(guided)]
    return common, dict(decoder_vocab_size=c.vocab_size, share_encoder_decoder_embeddings=c.tie_embeddings)


def _hf_weights(model, arch: str) -> dict[str, torch.Tensor]:
    """attnkit's weights under the HF model's names, the residual dimensions permuted by π."""
    c = model.config
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    pi = residual_permutation(c.d_model)
    d = c.d_model
    out: dict[str, torch.Tensor] = {}

    def reads(w):  # (out, D) -> (out, D) with the input columns in HF order
        return w[:, pi].contiguous()

    def norm(dst, src):
        out[dst + ".weight"], out[dst + ".bias"] = sd[src + ".weight"][pi], sd[src + ".bias"][pi]

    def attention(dst, src):
        w, b = sd[src + ".in_proj_weight"], sd[src + ".in_proj_bias"]  # (3D, D), (3D,) packed [q; k; v]
        for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[f"{dst}.{name}.weight"] = reads(w[i * d : (i + 1) * d])
            out[f"{dst}.{name}.bias"] = b[i * d : (i + 1) * d].clone()
        out[dst + ".out_proj.weight"] = sd[src + ".out_proj.weight"][pi].contiguous()  # writes the residual
        out[dst + ".out_proj.bias"] = sd[src + ".out_proj.bias"][pi]

    def ffn(dst, src):
        out[dst + ".fc1.weight"], out[dst + ".fc1.bias"] = reads(sd[src + ".linear1.weight"]), sd[src + ".linear1.bias"]
        out[dst + ".fc2.weight"] = sd[src + ".linear2.weight"][pi].contiguous()
        out[dst + ".fc2.bias"] = sd[src + ".linear2.bias"][pi]

    for i in range(c.num_encoder_layers):
        dst, src = f"model.encoder.layers.{i}", f"encoder.layers.{i}"
        attention(dst + ".self_attn", src + ".self_attn")
        norm(dst + ".self_attn_layer_norm", src + ".norm1")
        ffn(dst, src)
        norm(dst + ".final_layer_norm", src + ".norm2")
    for i in range(c.num_decoder_layers):
        dst, src = f"model.decoder.layers.{i}", f"decoder.layers.{i}"
        attention(dst + ".self_attn", src + ".self_attn")
        norm(dst + ".self_attn_layer_norm", src + ".norm1")
        attention(dst + ".encoder_attn", src + ".multihead_attn")
        norm(dst + ".encoder_attn_layer_norm", src + ".norm2")
        ffn(dst, src)
        norm(dst + ".final_layer_norm", src + ".norm3")
    if arch == "pegasus":  # pre-norm: the stacks' final LayerNorms
        norm("model.encoder.layer_norm", "encoder.norm")
        norm("model.decoder.layer_norm", "decoder.norm")
    src_emb = reads(sd["embedding.weight"])
    if c.tie_embeddings:
        for k in ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            out[k] = src_emb
        out["lm_head.weight"], out["final_logits_bias"] = src_emb, sd["out_bias"].unsqueeze(0)
    else:  # Marian with separate encoder and decoder tables (checked: never Pegasus)
        out["model.encoder.embed_tokens.weight"] = src_emb
        out["model.decoder.embed_tokens.weight"] = reads(sd["tgt_embedding.weight"])
        out["lm_head.weight"] = reads(sd["out_proj.weight"])
        out["final_logits_bias"] = sd["out_proj.bias"].unsqueeze(0)
    return out


def _max_positions(model) -> int:
    c = model.config
    return max(c.max_len, c.max_src_len or 0, MAX_DECODE + 1)


def hf_model(model, tokenizer: Tokenizer):
    """The ``transformers`` model (eval mode, float32) that computes what ``model`` computes; a
    :class:`DeployError` when no stock architecture can (see :func:`architecture_for`)."""
    export = _hf_export()
    arch = architecture_for(model, tokenizer)
    config, marian = _hf_config(model, _max_positions(model))
    config["architectures"] = [export.ARCHITECTURES[arch]]
    hf = export.new_seq2seq_model(arch, config, marian)
    cls = type(hf)
    weights = _hf_weights(model, arch)
    state = hf.state_dict()
    # the positions are HF's own table; it must be attnkit's sinusoids with the dimensions permuted by π
    pi = residual_permutation(model.config.d_model)
    table = sinusoidal_encoding(torch.arange(config["max_position_embeddings"]), model.config.d_model)[:, pi]
    for side in ("encoder", "decoder"):
        key = f"model.{side}.embed_positions.weight"
        if (state[key] - table).abs().max() > 1e-5:
            raise DeployError(f"{cls.__name__}'s {side} position table is not attnkit's sinusoids reordered")
        weights[key] = state[key]
    missing = sorted(set(state) - set(weights))
    unused = sorted(set(weights) - set(state))
    if missing or unused:
        raise DeployError(f"internal: weights missing {missing} / not in {cls.__name__} {unused}")
    for k, v in weights.items():
        if tuple(v.shape) != tuple(state[k].shape):
            raise DeployError(
                f"internal: {k} has shape {tuple(v.shape)}, {cls.__name__} expects {tuple(state[k].shape)}"
            )
    hf.load_state_dict(weights, strict=True)
    return hf


def _generation_config(model):
    c = model.config
    return _hf_export().generation_config(
        decoder_start_token_id=c.bos_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        pad_token_id=c.pad_id,
        forced_eos_token_id=None,
        max_length=MAX_DECODE + 1,  # the decoder start token and at most MAX_DECODE tokens
        num_beams=1,
        do_sample=False,
    )


def _fast_tokenizer(tokenizer: Tokenizer, max_src_len: int):
    """The ``PreTrainedTokenizerFast`` over :func:`build_tokenizer`'s pipeline, with attnkit's specials."""
    return _hf_export().fast_tokenizer(
        build_tokenizer(tokenizer),
        pad_token=tokenizer.id_to_piece(tokenizer.pad_id),
        bos_token=tokenizer.id_to_piece(tokenizer.bos_id),
        eos_token=tokenizer.id_to_piece(tokenizer.eos_id),
        unk_token=tokenizer.id_to_piece(tokenizer.unk_id),
        model_max_length=max_src_len,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


@torch.no_grad()
def self_check(model, hf, tokenizer: Tokenizer, fast) -> float:
    """The largest |Δ logit| between ``model`` and its HF copy on :data:`CHECK_SENTENCES` (each the
    source and, shifted right after ``<s>``, the target: a padded batch), after checking that
    ``fast`` cuts them as ``tokenizer`` does; a DeployError when either disagrees."""
    bad = tokenizer_mismatches(fast.backend_tokenizer, tokenizer, CHECK_SENTENCES)
    if bad:
        raise DeployError(f"the exported tokenizer cuts {bad[0]!r} differently from sentencepiece")
    ids = [tokenizer.encode(s)[: model.config.max_src_len] for s in CHECK_SENTENCES]
    lens = torch.tensor([len(i) for i in ids])
    src = torch.full((len(ids), int(lens.max())), tokenizer.pad_id, dtype=torch.long)  # (B, S)
    for r, i in enumerate(ids):
        src[r, : len(i)] = torch.tensor(i)
    tgt_in = torch.cat([torch.full((len(ids), 1), tokenizer.bos_id), src[:, :-1]], dim=1)  # (B, S)
    ours, _ = model(src, lens, tgt_in)  # (B, S, V)
    theirs = hf(input_ids=src, attention_mask=src != tokenizer.pad_id, decoder_input_ids=tgt_in).logits
    keep = (torch.arange(src.shape[1]) < lens.unsqueeze(1)).unsqueeze(-1)  # (B, S, 1) real positions
    diff = float(((ours - theirs).abs() * keep).max())
    if not diff <= SELF_CHECK_TOLERANCE:
        raise DeployError(f"the exported model's logits differ from attnkit's by {diff:.2e}; nothing was written")
    return diff


def export_huggingface(model_dir: str | Path, out: str | Path, *, force: bool = False, precision: str = "fp32") -> Path:
    """Write the translator in ``model_dir`` as a Hugging Face model folder in ``out``
    (``config.json``, ``generation_config.json``, ``model.safetensors``, ``tokenizer.json``,
    ``tokenizer_config.json``, and ``attnkit.json``); see the module docstring. A language model's
    folder is :func:`attnkit.deploy.hf_lm_export.export_language_model_folder`'s (``precision``
    ``"fp32"`` or ``"fp16"``); a translator is written in float32 only."""
    from ..training.checkpoint import load_model

    model_dir, out = Path(model_dir), Path(out)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") == "language_model":
        from .hf_lm_export import export_language_model_folder

        return export_language_model_folder(model_dir, out, precision=precision, force=force)
    _check_model_type(str(config.get("model_type", "?")))
    if precision != "fp32":
        raise DeployError(
            f"precision {precision!r}: a translator exports to huggingface in float32 only (fp16 is for language models)"
        )
    if not (model_dir / MODEL_FILENAME).is_file():
        raise DeployError(f"{model_dir} has no {MODEL_FILENAME}: it is not a translation model")
    check_output_folder(out, force=force, sources=[model_dir])
    export = _hf_export()
    model, _, _ = load_model(model_dir)
    model = model.float().eval()
    tokenizer = Tokenizer.load(model_dir)
    hf = hf_model(model, tokenizer)
    fast = _fast_tokenizer(tokenizer, model.config.max_src_len)
    diff = self_check(model, hf, tokenizer, fast)
    hf.generation_config = _generation_config(model)
    c = model.config
    with staging_beside(out) as tmp:  # the same file system as out: the final move is a rename
        staging = Path(tmp) / "model"
        export.save(hf, fast, staging)
        _portable_tokenizer_config(staging / "tokenizer_config.json")
        write_manifest(
            staging,
            {
                "engine": "huggingface",
                "attnkit_version": __version__,
                "transformers_version": export.transformers_version(),
                "source_model": model_dir.name,
                "model_type": model.model_type,
                "architecture": hf.config.architectures[0],
                "source_language": c.src_lang,
                "target_language": c.tgt_lang,
                "tokenizer": "tokenizer.json",
                "tokenizer_sha256": tokenizer_sha256(staging / "tokenizer.json"),
                "sentencepiece_sha256": tokenizer_sha256(model_dir / MODEL_FILENAME),
                "max_src_len": c.max_src_len,
                "max_len": MAX_DECODE,
                "residual_permutation": "sines first: HF dimension k is attnkit dimension pi[k]",
                "self_check_max_logit_diff": diff,
            },
        )
        _readable(staging)
        return replace_output_folder(staging, out, force=force, sources=[model_dir])
