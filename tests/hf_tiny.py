"""Tiny random Hugging Face models and tokenizers for the tests of :mod:`attnkit.hf`, built offline.

Each family's model is built from its config (a few layers of width 16-32), with weights drawn from a
seeded generator; the tokenizer is a small Unigram model trained with the ``tokenizers`` library on
the 300 lines of the gold alignment set (Spanish and English Bible verses shipped inside attnkit), so
no corpus and no network are needed. Everything is cached per test session.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import torch  # noqa: E402

from attnkit.alignment.gold import GOLD_DIR  # noqa: E402

ENC_DEC = ("marian", "bart", "m2m_100", "t5")
SELF_ATTENTION = ("bert", "gpt2", "llama")
FAMILIES = ENC_DEC + SELF_ATTENTION
#: encoder-only families (bidirectional self-attention, no language-model head)
ENCODER_ONLY = ("bert", "distilbert", "roberta", "xlm-roberta")
#: every encoder-only and decoder-only family attnkit reads (the families people use: issue 56); each
#: tiny model exercises what sets its attention apart (see :func:`_config`)
LM_FAMILIES = (
    *ENCODER_ONLY,
    "gpt2",
    "llama",
    "qwen2",
    "qwen3",
    "mistral",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "gpt_neox",
    "olmo2",
)

SPECIALS = ["<pad>", "</s>", "<unk>", "<s>", "__es__", "__en__"]
PAD, EOS, UNK, BOS, ES, EN = range(len(SPECIALS))


def gold_lines() -> list[str]:
    """The 300 Spanish and English verses of the gold set: the tiny tokenizers' training text."""
    return [
        line.strip()
        for name in ("es-en.es", "es-en.en")
        for line in (GOLD_DIR / name).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


#: The tiny tokenizer, trained once by :func:`train_tiny_tokenizer` and kept: the Unigram trainer's output
#: differs from one process to the next (its hash maps are seeded per process), and a test that needs
#: some hypotheses to finish depended on which vocabulary its pytest worker happened to train.
TINY_TOKENIZER = Path(__file__).resolve().parent / "hf_tiny_tokenizer.json"


def train_tiny_tokenizer(vocab_size: int = 300):
    """A sentencepiece-style (``▁`` word starts) Unigram tokenizer of ``vocab_size`` pieces trained on the
    gold verses, with :data:`SPECIALS` as ids 0-5 (how :data:`TINY_TOKENIZER` was made)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, unk_token="<unk>")
    tok.train_from_iterator(gold_lines(), trainer)
    return tok


@functools.cache
def tiny_tokenizer_object():
    """The tiny tokenizer (:data:`TINY_TOKENIZER`), the same in every process."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TINY_TOKENIZER))


def _hf_tokenizer(family: str):
    """The family's tokenizer: the tiny Unigram model with the family's special-token template."""
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_str(tiny_tokenizer_object().to_str())
    template = {
        "marian": "$A </s>",
        "t5": "$A </s>",
        "bart": "<s> $A </s>",
        "m2m_100": "__es__ $A </s>",
        "gpt2": "$A",
        "gpt_neox": "$A",
    }.get(family, "<s> $A </s>" if family in ENCODER_ONLY else "<s> $A")
    ids = {t: i for i, t in enumerate(SPECIALS)}
    tok.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(t, ids[t]) for t in SPECIALS if t in template.split()]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", bos_token="<s>"
    )


def _config(family: str, vocab: int):
    common = dict(vocab_size=vocab, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)
    seq2seq = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=256,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        init_std=0.3,
    )
    if family == "marian":
        return transformers.MarianConfig(**common, **seq2seq, decoder_start_token_id=PAD, scale_embedding=True)
    if family == "bart":
        return transformers.BartConfig(**common, **seq2seq, decoder_start_token_id=EOS)
    if family == "m2m_100":
        return transformers.M2M100Config(**common, **seq2seq, decoder_start_token_id=EOS)
    if family == "t5":
        return transformers.T5Config(
            **common,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=20,
            dropout_rate=0.0,
            decoder_start_token_id=PAD,
            initializer_factor=1.0,
        )
    if family == "bert":
        return transformers.BertConfig(
            **common,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=256,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            initializer_range=0.3,
        )
    if family == "gpt2":
        return transformers.GPT2Config(
            **common,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=256,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            initializer_range=0.3,
        )
    if family == "llama":
        return transformers.LlamaConfig(
            **common,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            initializer_range=0.3,
        )
    if family in ("distilbert",):
        return transformers.DistilBertConfig(
            **common,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=64,
            max_position_embeddings=256,
            dropout=0.0,
            attention_dropout=0.0,
            initializer_range=0.3,
        )
    if family in ("roberta", "xlm-roberta"):
        cls = transformers.RobertaConfig if family == "roberta" else transformers.XLMRobertaConfig
        return cls(  # positions start after the padding id, as the hub's RoBERTa and XLM-R
            **common,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=256,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            initializer_range=0.3,
        )
    if family == "gpt_neox":  # Pythia: rotary on a quarter of each head, attention and MLP in parallel
        return transformers.GPTNeoXConfig(
            **common,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=256,
            rotary_pct=0.25,
            use_parallel_residual=True,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            initializer_range=0.3,
        )
    # the Llama-like decoders: RMSNorm, rotary positions, grouped-query attention (4 query heads, 2 or 1
    # key/value heads), and what each family adds
    rotary = dict(
        **common,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.3,
    )
    if family == "llama":  # Llama 3: grouped-query attention (2 query heads per key/value head)
        return transformers.LlamaConfig(**rotary)
    if family == "qwen2":  # biases on the query, key and value projections
        return transformers.Qwen2Config(**rotary, use_sliding_window=False)
    if family == "qwen3":  # RMSNorm on every query and key head (q_norm, k_norm)
        return transformers.Qwen3Config(**rotary, head_dim=8, use_sliding_window=False)
    if family == "olmo2":  # RMSNorm on the whole query and key projections; norms after each block
        return transformers.Olmo2Config(**rotary)
    if family == "mistral":  # a sliding window of 4 keys: shorter than the test texts, so it bites
        return transformers.MistralConfig(**rotary, head_dim=8, sliding_window=4)
    if family == "phi3":  # one fused query/key/value projection
        return transformers.Phi3Config(
            **rotary, original_max_position_embeddings=256, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0
        )
    gemma = dict(rotary, num_key_value_heads=1, head_dim=8)  # multi-query attention, as gemma-2b
    if family == "gemma":
        return transformers.GemmaConfig(**gemma)
    if family == "gemma2":  # soft-capped scores (cap 2: it bites at this scale), local and global layers
        return transformers.Gemma2Config(
            **gemma,
            sliding_window=4,
            attn_logit_softcapping=2.0,
            query_pre_attn_scalar=8,
            layer_types=["sliding_attention", "full_attention"],
        )
    if family == "gemma3_text":  # query/key norms, local (window 4) and global layers, two rotary bases
        return transformers.Gemma3TextConfig(
            **gemma,
            sliding_window=4,
            query_pre_attn_scalar=8,
            layer_types=["sliding_attention", "full_attention"],
        )
    raise ValueError(f"unknown family {family!r}")


_MODEL_CLASSES = {
    "marian": "MarianMTModel",
    "bart": "BartForConditionalGeneration",
    "m2m_100": "M2M100ForConditionalGeneration",
    "t5": "T5ForConditionalGeneration",
    "bert": "BertModel",
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "distilbert": "DistilBertModel",
    "roberta": "RobertaModel",
    "xlm-roberta": "XLMRobertaModel",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
}


def build_tiny(family: str, *, attn_implementation: str | None = None, seed: int = 0):
    """``(model, tokenizer)``: a fresh tiny random model of ``family`` (default attention: sdpa) in eval mode."""
    tok = _hf_tokenizer(family)
    config = _config(family, len(tok))
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = getattr(transformers, _MODEL_CLASSES[family])(config).eval()
    gen = getattr(model, "generation_config", None)
    if gen is not None:
        gen.forced_eos_token_id = None  # generate would force </s> at max_length; attnkit's search does not
        model.config.forced_eos_token_id = None
    if family == "marian":
        gen.bad_words_ids = [[PAD]]  # as the hub's opus-mt models: never generate the padding token
    if family == "bart":
        gen.forced_bos_token_id = BOS  # as bart-large: the decoder starts with </s> <s>
    if family == "m2m_100":
        gen.forced_bos_token_id = EN  # the target language, as M2M100/NLLB are told with forced_bos_token_id
    return model, tok


def eager_copy(family: str, seed: int = 0):
    """The same tiny model (same seed, same weights) in eager attention: the reference."""
    return build_tiny(family, attn_implementation="eager", seed=seed)


@functools.cache
def _root() -> Path:
    """One temporary folder per test session for the saved tiny models, removed at exit."""
    import atexit
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="attnkit-tiny-hf-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@functools.cache
def saved_tiny(family: str) -> Path:
    """A folder holding the tiny model of ``family`` and its tokenizer (``save_pretrained``), built once per session."""
    model, tok = build_tiny(family)
    folder = _root() / f"tiny-{family}"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def bypass_attention_forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
    """``LlamaAttention.forward`` with its attention run by torch's own ``scaled_dot_product_attention``
    instead of through ``transformers``' attention interface, as a remote-code model or a module swapped
    in by another library does: the same output, and nothing for attnkit to watch. Returns no weights."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    shape = (*hidden_states.shape[:-1], -1, self.head_dim)
    q = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # (B, H, N, D)
    k = self.k_proj(hidden_states).view(shape).transpose(1, 2)  # (B, Hkv, N, D)
    v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
    cache = kwargs.get("past_key_values")
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx)
    mask = None if attention_mask is None else attention_mask[..., : k.shape[-2]]
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=mask is None and q.shape[2] > 1, scale=self.scaling, enable_gqa=True
    )  # (B, H, N, D)
    return self.o_proj(out.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)), None


def bypass_interface(model):
    """Make every attention module of a tiny Llama bypass the attention interface (:func:`bypass_attention_forward`)."""
    import types

    for layer in model.model.layers:
        layer.self_attn.forward = types.MethodType(bypass_attention_forward, layer.self_attn)
    return model
