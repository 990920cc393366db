"""``attnkit export MODEL OUT --format ctranslate2``: a Transformer translator as a CTranslate2 model.

CTranslate2 (Klein et al. 2020) documents third-party export as a
:class:`ctranslate2.converters.Converter` whose ``_load()`` returns a filled
:class:`ctranslate2.specs.TransformerSpec`; :class:`AttnkitTransformerConverter` is that converter.
How attnkit's :class:`attnkit.models.TransformerTranslator` maps onto the spec:

- **Embeddings.** One shared table ``E (V, D)`` (or a source and a target table when untied) feeds
  the encoder's and the decoder's embeddings, multiplied by ``√D`` (the spec's
  ``scale_embeddings``); the output projection is ``E`` with attnkit's output bias.
- **Positions.** An explicit table: attnkit's sinusoids interleave (``sin`` on even, ``cos`` on odd
  dimensions) while CTranslate2's built-in table puts every sine first, so the export writes
  attnkit's own encodings (or its learned table) as ``position_encodings``.
- **Layers.** Pre-norm with a final LayerNorm on both stacks, or post-norm without one
  (``pre_norm``), ``ε`` as the model's (1e-5); ReLU feed-forward. Self-attention's packed
  ``in_proj`` ``[W_q; W_k; W_v]`` is the spec's fused QKV layer as it is; cross-attention splits it
  into a query layer ``W_q`` and a fused key/value layer ``[W_k; W_v]``.
- **Vocabulary.** The sentencepiece pieces in id order (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2,
  ``<unk>`` 3) are both vocabularies; decoding starts from ``<s>``.
- **Alignment.** ``alignment_layer=-1``, ``alignment_heads=H``: ``translate_batch(return_attention=True)``
  returns the last decoder layer's cross-attention averaged over all its heads, which is the
  alignment attnkit's own search reports.

A model the spec cannot express is refused with a :class:`attnkit.deploy.manifest.DeployError`
that names the reason: CTranslate2 has no recurrent networks (RNNsearch, RNNencdec), a captioner is
not a translator, and an option this converter does not know is not silently dropped.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from ..attention.positional import sinusoidal_encoding
from ..data.tokenizer import MODEL_FILENAME, Tokenizer
from ..output_folder import check_output_folder, replace_output_folder, staging_beside
from ..tasks.translation.generation import read_generation_defaults
from ..version import __version__
from .ct2_engine import ctranslate2_length_penalty
from .manifest import DeployError, tokenizer_sha256, write_manifest

__all__ = [
    "QUANTIZATIONS",
    "AttnkitTransformerConverter",
    "export_ctranslate2",
]

QUANTIZATIONS = ("int8", "int8_float32", "float32")
#: The most tokens attnkit's Translator decodes (its ``max_len``); the position table covers it.
MAX_DECODE = 200
#: TransformerConfig fields that make the network every export writes (or that do not change it at
#: inference); each export adds the fields only it reads. A field outside its set that differs from
#: the default stops the export, naming the field.
NETWORK_FIELDS = frozenset(
    {
        "vocab_size",
        "d_model",
        "nhead",
        "num_encoder_layers",
        "num_decoder_layers",
        "dim_feedforward",
        "dropout",
        "norm_first",
        "positional",
        "max_len",
        "tie_embeddings",
        "pad_id",
        "bos_id",
        "eos_id",
        "max_src_len",
        "alignment_layer",  # a guided alignment head: CTranslate2's alignment layer and heads; HF: attnkit_alignment_heads
        "alignment_head",
    }
)
#: TransformerConfig fields the converter maps (or that do not change the network at inference).
_KNOWN_FIELDS = NETWORK_FIELDS | {"src_spelling"}  # recorded in the manifest: the engine rewrites input to it


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().contiguous().numpy()


def check_model_type(
    model_type: str,
    target: str = "CTranslate2",
    rnn_reason: str = "CTranslate2 has no recurrent networks; only Transformer translators export to it "
    "(--precision int8 speeds up the RNNs instead)",
) -> None:
    """A :class:`DeployError` unless ``model_type`` is a Transformer translator, the one kind every export
    format (``target``) takes; ``rnn_reason`` says why the recurrent ones cannot be written."""
    if model_type in ("rnnsearch", "rnnencdec"):
        raise DeployError(f"{model_type} is a recurrent (GRU) translator and {rnn_reason}")
    if model_type != "transformer":
        raise DeployError(f"a {model_type} model is not a Transformer translator; only those export to {target}")


def check_expressible(model, tokenizer: Tokenizer) -> None:
    """Raise :class:`DeployError` with the reason when ``model`` cannot become a CTranslate2 TransformerSpec."""
    check_model_type(getattr(model, "model_type", type(model).__name__))
    c = model.config
    if getattr(c, "pruned_heads", None):
        raise DeployError(
            "the model has heads pruned (attnkit.models.head_pruning): a CTranslate2 TransformerSpec has one head "
            "count for every attention, so fewer heads in some layers cannot be written; export the unpruned model"
        )
    defaults = type(c)()
    for f in dataclasses.fields(c):
        if f.name not in _KNOWN_FIELDS and getattr(c, f.name) != getattr(defaults, f.name):
            raise DeployError(
                f"{f.name}={getattr(c, f.name)!r}: the CTranslate2 export does not know this option, "
                "so it cannot promise the same translations"
            )
    if c.positional not in ("sinusoidal", "learned"):
        raise DeployError(f"positional={c.positional!r}: CTranslate2 takes only a table of absolute positions")
    if len(tokenizer) != c.vocab_size:
        raise DeployError(f"the tokenizer has {len(tokenizer)} pieces but the model's vocabulary is {c.vocab_size}")
    pieces = {i: tokenizer.id_to_piece(i) for i in (c.bos_id, c.eos_id, tokenizer.unk_id)}
    if (pieces[c.bos_id], pieces[c.eos_id]) != ("<s>", "</s>"):
        raise DeployError(f"bos/eos pieces are {pieces[c.bos_id]!r}/{pieces[c.eos_id]!r}, CTranslate2 expects <s>/</s>")
    eps = {m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    if len(eps) != 1:
        raise DeployError(f"the LayerNorms use several epsilons {sorted(eps)}; CTranslate2 takes one")
    acts = {getattr(layer, "activation", None) for layer in [*model.encoder.layers, *model.decoder.layers]}
    if acts != {torch.nn.functional.relu}:
        raise DeployError("the feed-forward activation is not ReLU; this export maps ReLU only")


def position_table(model) -> np.ndarray:
    """``(N, D)`` the encodings CTranslate2 adds at positions ``0 .. N-1``: attnkit's own (interleaved
    sinusoids, or the learned table), long enough for the longest source and the longest output."""
    c = model.config
    if c.positional == "learned":
        return _np(model.positions.table.weight)
    n = max(c.max_len, c.max_src_len or 0, MAX_DECODE)
    return _np(sinusoidal_encoding(torch.arange(n), c.d_model))


class AttnkitTransformerConverter:
    """A :class:`ctranslate2.converters.Converter` for attnkit's Transformer translator (made a
    subclass on first use, so this module imports without ctranslate2 installed)."""

    def __new__(cls, model, tokenizer: Tokenizer):
        return _converter_class()(model, tokenizer)


def _converter_class():
    from ctranslate2.converters import Converter

    class _Converter(Converter):
        def __init__(self, model, tokenizer: Tokenizer):
            check_expressible(model, tokenizer)
            self.model, self.tokenizer = model, tokenizer

        def _load(self):
            return build_spec(self.model, self.tokenizer)

    _Converter.__name__ = _Converter.__qualname__ = "AttnkitTransformerConverter"
    return _Converter


def guided_head(config) -> tuple[int, int] | None:
    """``(layer, head)`` (1-based) of a Transformer trained with guided alignment, else None."""
    layer, head = getattr(config, "alignment_layer", None), getattr(config, "alignment_head", None)
    return (layer, head) if layer is not None and head is not None else None


def alignment_manifest(config) -> dict:
    """What ``translate_batch(return_attention=True)`` returns for this export, for ``attnkit.json``:
    the guided head, read at the step whose *input* is the target piece (how it was trained), or
    the last layer's head mean at the step that outputs it (attnkit's own alignment)."""
    guided = guided_head(config)
    if guided:
        return {
            "layer": guided[0],
            "heads": 1,
            "rows": "input",
            "what": f"the guided alignment head (layer {guided[0]}, head {guided[1]})",
        }
    return {
        "layer": -1,
        "heads": config.nhead,
        "rows": "output",
        "what": "last decoder layer's cross-attention, head mean",
    }


def build_spec(model, tokenizer: Tokenizer):
    """The filled :class:`ctranslate2.specs.TransformerSpec` (see the module docstring for the mapping)."""
    from ctranslate2.specs import common_spec, transformer_spec

    c = model.config
    sd = model.state_dict()
    guided = guided_head(c)
    spec = transformer_spec.TransformerSpec.from_config(
        (c.num_encoder_layers, c.num_decoder_layers),
        c.nhead,
        pre_norm=c.norm_first,
        activation=common_spec.Activation.RELU,
        alignment_layer=guided[0] - 1 if guided else -1,
        alignment_heads=1 if guided else c.nhead,
    )
    dh = c.d_model // c.nhead

    def heads_first(w, layer: int, dim: int = 0):
        """``w`` with the guided head's block moved first along ``dim`` in that layer's cross-attention:
        CTranslate2 averages the *first* ``alignment_heads`` heads. Exact: heads are concatenated and
        mixed by the output projection, whose columns move with them."""
        if not guided or layer != guided[0] - 1 or guided[1] == 1:
            return w
        order = [guided[1] - 1] + [h for h in range(c.nhead) if h != guided[1] - 1]
        return torch.cat([w.narrow(dim, h * dh, dh) for h in order], dim)

    spec.config.layer_norm_epsilon = float(next(m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm)))
    spec.config.decoder_start_token = "<s>"
    spec.config.unk_token = tokenizer.id_to_piece(tokenizer.unk_id)

    def linear(ls, w, b):
        ls.weight, ls.bias = _np(w), _np(b)

    def norm(ns, prefix):
        ns.gamma, ns.beta = _np(sd[prefix + ".weight"]), _np(sd[prefix + ".bias"])

    def self_attention(att, prefix):
        linear(att.linear[0], sd[prefix + ".in_proj_weight"], sd[prefix + ".in_proj_bias"])  # fused [q; k; v]
        linear(att.linear[1], sd[prefix + ".out_proj.weight"], sd[prefix + ".out_proj.bias"])

    def cross_attention(att, prefix, layer):
        w, b, d = sd[prefix + ".in_proj_weight"], sd[prefix + ".in_proj_bias"], c.d_model
        q, k, v = (
            (heads_first(w[i * d : (i + 1) * d], layer), heads_first(b[i * d : (i + 1) * d], layer)) for i in range(3)
        )
        linear(att.linear[0], *q)  # query
        linear(att.linear[1], torch.cat([k[0], v[0]]), torch.cat([k[1], v[1]]))  # fused [k; v]
        out_w = heads_first(sd[prefix + ".out_proj.weight"], layer, dim=1)
        linear(att.linear[2], out_w, sd[prefix + ".out_proj.bias"])

    def ffn(f, prefix):
        linear(f.linear_0, sd[prefix + ".linear1.weight"], sd[prefix + ".linear1.bias"])
        linear(f.linear_1, sd[prefix + ".linear2.weight"], sd[prefix + ".linear2.bias"])

    positions = position_table(model)
    src_emb = sd["embedding.weight"]
    tgt_emb = src_emb if c.tie_embeddings else sd["tgt_embedding.weight"]
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _np(src_emb)
    dec.embeddings.weight = _np(tgt_emb)
    enc.scale_embeddings = dec.scale_embeddings = True  # × √D, as attnkit's embed_scale
    enc.position_encodings.encodings = positions
    dec.position_encodings.encodings = positions
    if c.norm_first:
        norm(enc.layer_norm, "encoder.norm")
        norm(dec.layer_norm, "decoder.norm")
    for i, layer in enumerate(enc.layer):
        p = f"encoder.layers.{i}"
        self_attention(layer.self_attention, p + ".self_attn")
        norm(layer.self_attention.layer_norm, p + ".norm1")
        ffn(layer.ffn, p)
        norm(layer.ffn.layer_norm, p + ".norm2")
    for i, layer in enumerate(dec.layer):
        p = f"decoder.layers.{i}"
        self_attention(layer.self_attention, p + ".self_attn")
        norm(layer.self_attention.layer_norm, p + ".norm1")
        cross_attention(layer.attention, p + ".multihead_attn", i)
        norm(layer.attention.layer_norm, p + ".norm2")
        ffn(layer.ffn, p)
        norm(layer.ffn.layer_norm, p + ".norm3")
    if c.tie_embeddings:
        linear(dec.projection, src_emb, sd["out_bias"])
    else:
        linear(dec.projection, sd["out_proj.weight"], sd["out_proj.bias"])
    pieces = [tokenizer.id_to_piece(i) for i in range(len(tokenizer))]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def write_vocabulary_map(shortlist, tokenizer: Tokenizer, path: Path) -> Path:
    """A lexical shortlist as CTranslate2's vocabulary map (``vmap.txt``): a line
    ``source-piece<TAB>target pieces`` per source piece, and one with an empty source for the
    pieces every batch keeps (the shortlist's frequent ones, ``<s>``, ``</s>``, ``<unk>``).
    Decoding with ``use_vmap=True`` then scores the union of the batch's lines, as
    :meth:`attnkit.tasks.translation.LexicalShortlist.ids_for` does."""
    piece = tokenizer.id_to_piece
    always = sorted(
        {int(i) for i in shortlist.frequent.tolist()} | {tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id}
    )
    lines = ["\t" + " ".join(piece(i) for i in always)]
    for s, row in enumerate(shortlist.table.tolist()):
        targets = [piece(t) for t in row if t >= 0]
        if targets:
            lines.append(f"{piece(s)}\t{' '.join(targets)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def export_ctranslate2(
    model_dir: str | Path,
    out: str | Path,
    *,
    quantization: str = "int8",
    shortlist=None,
    force: bool = False,
    source_language: str | None = None,
    target_language: str | None = None,
) -> Path:
    """Write the translator in ``model_dir`` as a CTranslate2 model in ``out``, with its tokenizer
    and ``attnkit.json``; ``shortlist`` (a :class:`LexicalShortlist`) becomes its vocabulary map."""
    from ..training.checkpoint import load_model

    if quantization not in QUANTIZATIONS:
        raise DeployError(f"quantization must be one of {', '.join(QUANTIZATIONS)}; got {quantization!r}")
    model_dir, out = Path(model_dir), Path(out)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    check_model_type(str(config.get("model_type", "?")))
    if not (model_dir / MODEL_FILENAME).is_file():
        raise DeployError(f"{model_dir} has no {MODEL_FILENAME}: it is not a translation model")
    check_output_folder(out, force=force, sources=[model_dir])  # before the work; again before anything is replaced
    model, _, _ = load_model(model_dir)
    model.eval()
    tokenizer = Tokenizer.load(model_dir)
    converter = AttnkitTransformerConverter(model, tokenizer)
    with staging_beside(out) as tmp:  # the same file system as out: the final move is a rename
        vmap = None
        if shortlist is not None:
            from ..tasks.translation.lexical_shortlist import tokenizer_digest

            if shortlist.tokenizer_sha256 != tokenizer_digest(tokenizer):
                raise DeployError("the shortlist was built with another tokenizer than this model's")
            vmap = str(write_vocabulary_map(shortlist, tokenizer, Path(tmp) / "vmap.txt"))
        staging = Path(tmp) / "model"
        converter.convert(str(staging), vmap=vmap, quantization=quantization)
        shutil.copyfile(model_dir / MODEL_FILENAME, staging / MODEL_FILENAME)
        c = model.config
        alpha = read_generation_defaults(model_dir).length_penalty  # the model's own α, matched for CTranslate2
        write_manifest(
            staging,
            {
                "engine": "ctranslate2",
                "attnkit_version": __version__,
                "source_model": model_dir.name,
                "model_type": model.model_type,
                "quantization": quantization,
                "source_language": source_language or config.get("source_language", "es"),
                "target_language": target_language or config.get("target_language", "en"),
                "tokenizer": MODEL_FILENAME,
                "tokenizer_sha256": tokenizer_sha256(model_dir / MODEL_FILENAME),
                "length_penalty": ctranslate2_length_penalty(alpha),
                "gnmt_length_penalty": alpha,
                "max_src_len": c.max_src_len,
                "source_spelling": c.source_spelling,
                "max_len": min(MAX_DECODE, position_table(model).shape[0]),
                "vocabulary_map": vmap is not None,
                "alignment": alignment_manifest(c),
            },
        )
        replace_output_folder(staging, out, force=force, sources=[model_dir])
    return out
