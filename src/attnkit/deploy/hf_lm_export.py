"""``attnkit export LM OUT --format huggingface``: attnkit's language model as a stock Hugging Face causal LM.

The folder it writes loads with plain ``transformers`` — ``AutoModelForCausalLM.from_pretrained(OUT)``
and ``AutoTokenizer.from_pretrained(OUT)``, no ``trust_remote_code`` — and computes the same function
as the :class:`~attnkit.models.language_model.LanguageModel`: the same logits and, so, the same greedy
continuation (``model.generate(do_sample=False)``), and through attnkit's HF path
(:mod:`attnkit.hf.self_attention`) the same attention maps.

**Which architecture.** The one of the model's shape:

- ``shape="llama"`` → ``LlamaForCausalLM`` (Touvron et al. 2023): the parameter names are already
  Llama's, so the export is a renaming (``model.`` before every name but ``lm_head``). RoPE with
  ``rope_theta`` (Llama's rotate-half layout, as :class:`~attnkit.attention.RotaryEmbedding`), RMSNorm
  with ``rms_norm_eps``, SwiGLU (``hidden_act="silu"``), ``num_key_value_heads`` (grouped-query
  attention, Ainslie et al. 2023), ``attention_bias=False``, ``mlp_bias=False``;
- ``shape="gpt2"`` → ``GPT2LMHeadModel`` (Radford et al. 2019): the learned position table is
  ``wpe``; GPT-2's ``Conv1D`` computes ``x W + b`` with ``W (in, out)``, the transpose of
  ``nn.Linear``'s ``(out, in)``, so every projection is transposed, and the query, key and value
  projections are packed into one ``c_attn`` (``W = [W_q; W_k; W_v]ᵀ``). Its MLP's activation is
  ``"gelu"``, the exact (erf) GELU ``x·Φ(x)`` that attnkit's :class:`~attnkit.attention.GeluMLP` uses
  (``"gelu_new"``, GPT-2's original, is the tanh approximation: not the same function).

``tie_word_embeddings`` is the model's ``tie_embeddings``. **Attention-only models** (Olsson et al.
2022) have no MLP block, which neither architecture can leave out: each layer gets an MLP of width 1
whose weights (and biases) are all zero, whose output is exactly 0, so the residual stream is the
attention's alone (its norm, whose output nothing reads, has gain 1).

**Tokens.** attnkit's text convention is bos before each text and eos after it
(:mod:`attnkit.tasks.language_model.data`), so a prompt is ``<s>`` and its pieces: the exported
tokenizer (:func:`attnkit.deploy.hf_tokenizer.build_tokenizer`, the sentencepiece model as a
``tokenizer.json``) has a post-processor that puts ``<s>`` first, so ``tokenizer(text)["input_ids"]``
is ``[1] + Tokenizer.encode(text)``, as Llama's tokenizers do, and no ``</s>`` after (a continuation
writes it). ``generation_config.json`` names ``bos_token_id`` 1, ``eos_token_id`` 2 (generation stops
there), ``pad_token_id`` 0, greedy decoding, and the longest sequence (``max_len``).

**Precision.** ``"fp32"`` writes the weights as they are; ``"fp16"`` rounds them to float16 (half the
size): the export is then exactly the model with its weights rounded, which the self-check compares
(computed in float32 on both sides), and a weight float16 cannot hold (``|w| > 65504``) is refused.

**Dropout** is a training-time setting: ``attention_dropout`` (Llama) and GPT-2's three rates carry
the model's one rate; Llama has no dropout on its residual stream, so fine-tuning the export in
``transformers`` drops less than attnkit would. Inference is unaffected.

**What is refused**, with a :class:`~attnkit.deploy.manifest.DeployError` in one line: a model that is
not a language model, an option of :class:`~attnkit.models.language_model.LanguageModelConfig` this
export does not know, a tokenizer whose size differs from the model's vocabulary, an fp16 weight out
of range. Before anything is written the export runs the HF model beside attnkit's on a few sentences
and refuses if the logits differ by more than :data:`SELF_CHECK_TOLERANCE` or the tokenizer cuts one
of them differently.

As in :mod:`attnkit.deploy.hf_export`, ``transformers`` itself is imported only by :mod:`attnkit.hf.export`
(through :func:`attnkit.deploy.hf_folder.hf_objects`, which names the extra to install when it is missing).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from pathlib import Path

import torch

from ..data.tokenizer import MODEL_FILENAME, Tokenizer
from ..output_folder import check_output_folder, replace_output_folder, staging_beside
from ..version import __version__
from .hf_folder import CHECK_SENTENCES, hf_objects, make_readable, portable_tokenizer_config
from .hf_tokenizer import build_tokenizer, tokenizer_mismatches
from .manifest import DeployError, tokenizer_sha256, write_manifest

__all__ = [
    "PRECISIONS",
    "SELF_CHECK_TOLERANCE",
    "export_language_model",
    "export_language_model_folder",
    "hf_language_model",
    "lm_architecture",
    "lm_fast_tokenizer",
]

#: The largest |Δ logit| the export accepts between the HF model and attnkit's on its own check.
SELF_CHECK_TOLERANCE = 1e-4
#: The weights' types the export writes.
PRECISIONS = ("fp32", "fp16")
MODEL_TYPE = "language_model"
#: LanguageModelConfig fields this export maps (every one today: a new field is refused until it is mapped).
_KNOWN_FIELDS = {
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "max_len",
    "shape",
    "attention_only",
    "dropout",
    "tie_embeddings",
    "rope_theta",
    "norm_eps",
}
ARCHITECTURE_NAMES = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}


def lm_architecture(model, tokenizer: Tokenizer) -> str:
    """``"llama"`` or ``"gpt2"``: the stock architecture that represents ``model`` exactly (its shape);
    a :class:`DeployError` with the reason when none does."""
    model_type = getattr(model, "model_type", type(model).__name__)
    if model_type != MODEL_TYPE:
        raise DeployError(f"a {model_type} model is not a language model; this export writes language models")
    c = model.config
    defaults = type(c)(vocab_size=c.vocab_size)
    for f in dataclasses.fields(c):
        if f.name not in _KNOWN_FIELDS and getattr(c, f.name) != getattr(defaults, f.name):
            raise DeployError(
                f"{f.name}={getattr(c, f.name)!r}: the huggingface export does not know this option, "
                "so it cannot promise the same logits"
            )
    if len(tokenizer) != c.vocab_size:
        raise DeployError(f"the tokenizer has {len(tokenizer)} pieces but the model's vocabulary is {c.vocab_size}")
    return c.shape


def _llama_config(c) -> dict:
    return dict(
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        intermediate_size=1 if c.attention_only else c.ff_width,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.kv_heads,
        head_dim=c.d_model // c.n_heads,
        hidden_act="silu",
        max_position_embeddings=c.max_len,
        rms_norm_eps=float(c.norm_eps),
        rope_parameters={"rope_type": "default", "rope_theta": float(c.rope_theta)},
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=float(c.dropout),
        tie_word_embeddings=c.tie_embeddings,
    )


def _gpt2_config(c) -> dict:
    return dict(
        vocab_size=c.vocab_size,
        n_positions=c.max_len,
        n_embd=c.d_model,
        n_layer=c.n_layers,
        n_head=c.n_heads,
        n_inner=1 if c.attention_only else c.ff_width,
        activation_function="gelu",  # the exact (erf) GELU of attnkit's GeluMLP; "gelu_new" is tanh's
        layer_norm_epsilon=float(c.norm_eps),
        resid_pdrop=float(c.dropout),
        embd_pdrop=float(c.dropout),
        attn_pdrop=float(c.dropout),
        scale_attn_weights=True,  # 1/√d_h
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        tie_word_embeddings=c.tie_embeddings,
    )


def _hf_config(model, arch: str) -> dict:
    """The HF config's keyword arguments: the shape's own, the token ids, the architecture's name."""
    c = model.config
    config = _llama_config(c) if arch == "llama" else _gpt2_config(c)
    config.update(pad_token_id=0, bos_token_id=1, eos_token_id=2, architectures=[ARCHITECTURE_NAMES[arch]])
    return config


def _llama_weights(sd: dict[str, torch.Tensor], c) -> dict[str, torch.Tensor]:
    """attnkit's weights under LlamaForCausalLM's names (the same names, ``model.`` before them)."""
    out = {("" if k.startswith("lm_head.") else "model.") + k: v for k, v in sd.items()}
    if c.attention_only:  # a zero MLP of width 1: silu(0)·0 = 0, down_proj 0
        d = c.d_model
        for i in range(c.n_layers):
            p = f"model.layers.{i}."
            out[p + "post_attention_layernorm.weight"] = torch.ones(d)
            out[p + "mlp.gate_proj.weight"] = torch.zeros(1, d)
            out[p + "mlp.up_proj.weight"] = torch.zeros(1, d)
            out[p + "mlp.down_proj.weight"] = torch.zeros(d, 1)
    return out


def _gpt2_weights(sd: dict[str, torch.Tensor], c) -> dict[str, torch.Tensor]:
    """attnkit's weights under GPT2LMHeadModel's names, transposed for its Conv1D (``(in, out)``)."""
    d = c.d_model
    out = {
        "transformer.wte.weight": sd["embed_tokens.weight"],
        "transformer.wpe.weight": sd["embed_positions.weight"],
        "transformer.ln_f.weight": sd["norm.weight"],
        "transformer.ln_f.bias": sd["norm.bias"],
        "lm_head.weight": sd["lm_head.weight"],
    }
    for i in range(c.n_layers):
        src, dst = f"layers.{i}.", f"transformer.h.{i}."
        attn = src + "self_attn."
        out[dst + "ln_1.weight"], out[dst + "ln_1.bias"] = (
            sd[src + "input_layernorm.weight"],
            sd[src + "input_layernorm.bias"],
        )
        qkv = [attn + p for p in ("q_proj", "k_proj", "v_proj")]
        out[dst + "attn.c_attn.weight"] = torch.cat([sd[p + ".weight"] for p in qkv]).t().contiguous()  # (D, 3D)
        out[dst + "attn.c_attn.bias"] = torch.cat([sd[p + ".bias"] for p in qkv])  # (3D,)
        out[dst + "attn.c_proj.weight"] = sd[attn + "o_proj.weight"].t().contiguous()  # (D, D)
        out[dst + "attn.c_proj.bias"] = sd[attn + "o_proj.bias"]
        if c.attention_only:  # a zero MLP of width 1: gelu(0)·0 + 0 = 0
            out[dst + "ln_2.weight"], out[dst + "ln_2.bias"] = torch.ones(d), torch.zeros(d)
            out[dst + "mlp.c_fc.weight"], out[dst + "mlp.c_fc.bias"] = torch.zeros(d, 1), torch.zeros(1)
            out[dst + "mlp.c_proj.weight"], out[dst + "mlp.c_proj.bias"] = torch.zeros(1, d), torch.zeros(d)
            continue
        norm2 = src + "post_attention_layernorm."
        out[dst + "ln_2.weight"], out[dst + "ln_2.bias"] = sd[norm2 + "weight"], sd[norm2 + "bias"]
        mlp = src + "mlp."
        out[dst + "mlp.c_fc.weight"] = sd[mlp + "up_proj.weight"].t().contiguous()  # (D, d_ff)
        out[dst + "mlp.c_fc.bias"] = sd[mlp + "up_proj.bias"]
        out[dst + "mlp.c_proj.weight"] = sd[mlp + "down_proj.weight"].t().contiguous()  # (d_ff, D)
        out[dst + "mlp.c_proj.bias"] = sd[mlp + "down_proj.bias"]
    return out


def hf_language_model(model, tokenizer: Tokenizer):
    """The ``transformers`` model (eval mode, float32) that computes what ``model`` computes; a
    :class:`DeployError` when no stock architecture can (see :func:`lm_architecture`)."""
    export = hf_objects()
    arch = lm_architecture(model, tokenizer)
    hf = export.new_causal_lm(arch, _hf_config(model, arch))
    cls = type(hf).__name__
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    weights = (_llama_weights if arch == "llama" else _gpt2_weights)(sd, model.config)
    state = hf.state_dict()
    missing, unused = sorted(set(state) - set(weights)), sorted(set(weights) - set(state))
    if missing or unused:
        raise DeployError(f"internal: weights missing {missing} / not in {cls} {unused}")
    for k, v in weights.items():
        if tuple(v.shape) != tuple(state[k].shape):
            raise DeployError(f"internal: {k} has shape {tuple(v.shape)}, {cls} expects {tuple(state[k].shape)}")
    hf.load_state_dict(weights, strict=True)
    tied = hf.lm_head.weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()
    if tied != model.config.tie_embeddings:
        raise DeployError(f"internal: {cls}'s output layer is {'' if tied else 'not '}tied to its embedding")
    return hf


def lm_fast_tokenizer(tokenizer: Tokenizer, max_len: int):
    """The ``PreTrainedTokenizerFast`` over :func:`build_tokenizer`'s pipeline with a post-processor that
    puts ``<s>`` before each text (attnkit's convention), and attnkit's special tokens."""
    from tokenizers import processors

    pipeline = build_tokenizer(tokenizer)
    bos = tokenizer.id_to_piece(tokenizer.bos_id)
    pipeline.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.bos_id)]
    )
    return hf_objects().fast_tokenizer(
        pipeline,
        pad_token=tokenizer.id_to_piece(tokenizer.pad_id),
        bos_token=bos,
        eos_token=tokenizer.id_to_piece(tokenizer.eos_id),
        unk_token=tokenizer.id_to_piece(tokenizer.unk_id),
        model_max_length=max_len,
        padding_side="left",  # a batch of prompts is continued from its right end
        clean_up_tokenization_spaces=False,
    )


def _generation_config(c):
    return hf_objects().generation_config(
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        max_length=c.max_len,
        num_beams=1,
        do_sample=False,
    )


@torch.no_grad()
def self_check(model, hf, tokenizer: Tokenizer, fast) -> float:
    """The largest |Δ logit| between ``model`` and its HF copy on :data:`CHECK_SENTENCES` (each read
    alone, ``<s>`` first, as the exported tokenizer gives it), after checking that ``fast`` cuts them
    as ``tokenizer`` does; a DeployError when either disagrees."""
    bad = tokenizer_mismatches(fast.backend_tokenizer, tokenizer, CHECK_SENTENCES)
    if bad:
        raise DeployError(f"the exported tokenizer cuts {bad[0]!r} differently from sentencepiece")
    diff = 0.0
    for s in CHECK_SENTENCES:
        ids = fast(s)["input_ids"]
        if ids != [tokenizer.bos_id, *tokenizer.encode(s)]:
            raise DeployError(f"the exported tokenizer does not put <s> before {s!r}")
        x = torch.tensor([ids[: model.config.max_len]])  # (1, T)
        ours = model(x).logits  # (1, T, V)
        theirs = hf(input_ids=x).logits
        diff = max(diff, float((ours.float() - theirs.float()).abs().max()))
    if not diff <= SELF_CHECK_TOLERANCE:
        raise DeployError(f"the exported model's logits differ from attnkit's by {diff:.2e}; nothing was written")
    return diff


def _round_weights(model, precision: str) -> None:
    """Round ``model``'s parameters (float32, in place) to what ``precision`` holds: nothing for fp32,
    float16 and back for fp16 (a DeployError naming a weight float16 cannot hold, before any is rounded).
    Parameters only: the rotary frequencies (a buffer) stay float32, as Llama's own."""
    if precision == "fp32":
        return
    limit = torch.finfo(torch.float16).max
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()) or float(p.detach().abs().max()) > limit:
            raise DeployError(f"--precision fp16: {name} holds values float16 cannot (|w| > {limit:g}); use fp32")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


def export_language_model(
    model,
    tokenizer: Tokenizer,
    out_dir: str | Path,
    *,
    precision: str = "fp32",
    force: bool = False,
    source: str | Path | None = None,
) -> Path:
    """Write the language model ``model`` with ``tokenizer`` as a Hugging Face model folder in
    ``out_dir`` (``config.json``, ``generation_config.json``, ``model.safetensors``, ``tokenizer.json``,
    ``tokenizer_config.json``, and ``attnkit.json``); see the module docstring. ``source``: the
    checkpoint folder it came from (never written into; named in the manifest)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be an attnkit.data.Tokenizer, got {type(tokenizer).__name__}")
    out = Path(out_dir)
    sources = [] if source is None else [Path(source)]
    lm_architecture(model, tokenizer)  # refuse before touching the output folder
    check_output_folder(out, force=force, sources=sources)
    export = hf_objects()
    model = copy.deepcopy(model).float().cpu().eval()  # the caller's model is left as it is
    _round_weights(model, precision)
    hf = hf_language_model(model, tokenizer)
    fast = lm_fast_tokenizer(tokenizer, model.config.max_len)
    diff = self_check(model, hf, tokenizer, fast)
    hf.generation_config = _generation_config(model.config)
    if precision == "fp16":
        hf = hf.half()
    c = model.config
    with staging_beside(out) as tmp:  # the same file system as out: the final move is a rename
        staging = Path(tmp) / "model"
        export.save(hf, fast, staging)
        portable_tokenizer_config(staging / "tokenizer_config.json")
        write_manifest(
            staging,
            {
                "engine": "huggingface",
                "attnkit_version": __version__,
                "transformers_version": export.transformers_version(),
                "source_model": None if source is None else Path(source).name,
                "model_type": MODEL_TYPE,
                "architecture": hf.config.architectures[0],
                "shape": c.shape,
                "attention_only": c.attention_only,
                "precision": precision,
                "tokenizer": "tokenizer.json",
                "tokenizer_sha256": tokenizer_sha256(staging / "tokenizer.json"),
                "sentencepiece_sha256": hashlib.sha256(tokenizer.to_bytes()).hexdigest(),
                "max_len": c.max_len,
                "text_convention": "<s> before each text, </s> after it; the tokenizer adds the <s>",
                "self_check_max_logit_diff": diff,
            },
        )
        make_readable(staging)
        return replace_output_folder(staging, out, force=force, sources=sources)


def export_language_model_folder(
    model_dir: str | Path, out: str | Path, *, precision: str = "fp32", force: bool = False
) -> Path:
    """:func:`export_language_model` of the checkpoint folder ``model_dir`` (what ``save_checkpoint``
    writes for a :class:`~attnkit.models.language_model.LanguageModel`, with its ``tokenizer.model``)."""
    from ..training.checkpoint import load_model

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != MODEL_TYPE:
        raise DeployError(f"{model_dir} holds a {config.get('model_type', '?')} model, not a language model")
    if not (model_dir / MODEL_FILENAME).is_file():
        raise DeployError(f"{model_dir} has no {MODEL_FILENAME}: the language model's tokenizer is missing")
    check_output_folder(out, force=force, sources=[model_dir])  # before loading: a refusal costs nothing
    model, _, _ = load_model(model_dir)
    return export_language_model(
        model, Tokenizer.load(model_dir), out, precision=precision, force=force, source=model_dir
    )
