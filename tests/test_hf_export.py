"""``attnkit export --format huggingface``: the folder loads with plain ``transformers`` and computes
what attnkit computes.

The reference is attnkit's own model and sentencepiece tokenizer; the exported folder is read back
only with ``AutoModelForSeq2SeqLM`` / ``AutoTokenizer`` (no attnkit code on that side). Tiny random
Transformers (pre- and post-norm, tied and untied output) are built from configs, with weights
scaled up so that sentences get different outputs.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

pytest.importorskip("transformers")

from hypothesis import given, settings
from hypothesis import strategies as st

from tiny import es_en_tokenizer, saved_tiny_transformer

SENTENCES = [
    "En el principio creó Dios los cielos y la tierra.",
    "Jesús lloró.",
    "Y dijo Dios: Sea la luz; y fue la luz.",
    "Bienaventurados los pobres en espíritu, porque de ellos es el reino de los cielos.",
]


def _away_from_init(model) -> None:
    bias = model.out_bias if model.out_bias is not None else model.out_proj.bias
    bias.normal_(0.0, 1.0)  # a nonzero output bias: final_logits_bias must carry it
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):  # LayerNorm's γ, β away from 1, 0: the permutation shows
            m.weight.normal_(1.0, 0.3)
            m.bias.normal_(0.0, 0.3)


def _tiny(tmp_path, name, seed=0, **overrides):
    """A random tiny Transformer with the shipped tokenizer, saved as a checkpoint folder."""
    return saved_tiny_transformer(tmp_path / name, seed=seed, perturb=_away_from_init, **overrides)


CONFIGS = {
    "pre-norm-tied": (dict(norm_first=True, tie_embeddings=True), "PegasusForConditionalGeneration"),
    "post-norm-tied": (dict(norm_first=False, tie_embeddings=True), "MarianMTModel"),
    "post-norm-untied": (
        dict(norm_first=False, tie_embeddings=False, num_encoder_layers=1, num_decoder_layers=3),
        "MarianMTModel",
    ),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def exported(request, tmp_path_factory):
    """``(attnkit model, HF model, HF tokenizer, expected class name, export folder)`` for each tiny configuration."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from attnkit.deploy.hf_export import export_huggingface
    from attnkit.training.checkpoint import load_model

    overrides, cls = CONFIGS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    ckpt = _tiny(root, "ckpt", **overrides)
    out = export_huggingface(ckpt, root / "hf")
    ours, _, _ = load_model(ckpt)
    return ours.eval(), AutoModelForSeq2SeqLM.from_pretrained(out), AutoTokenizer.from_pretrained(out), cls, out


def _batch(tok, sentences):
    """Source ``(B, S)``, lengths ``(B,)`` and teacher-forced target input ``(B, T)`` (``<s>`` then the
    reversed source pieces: any ids do), both right-padded with ``<pad>``."""
    ids = [tok.encode(s) for s in sentences]
    lens = torch.tensor([len(i) for i in ids])
    src = torch.zeros(len(ids), int(lens.max()), dtype=torch.long)
    tgt = torch.zeros(len(ids), int(lens.max()) + 3, dtype=torch.long)
    for r, i in enumerate(ids):
        src[r, : len(i)] = torch.tensor(i)
        tgt[r, : len(i) + 1] = torch.tensor([tok.bos_id, *reversed(i)])
    return src, lens, tgt


@torch.no_grad()
def test_teacher_forced_logits_equal_attnkit(exported):
    ours, hf, _, cls, _ = exported
    assert type(hf).__name__ == cls
    src, lens, tgt = _batch(es_en_tokenizer(), SENTENCES)
    assert bool((src == 0).any()) and bool((tgt == 0).any())  # both sides padded
    want, _ = ours(src, lens, tgt)  # (B, T, V)
    got = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    assert float((want[0, 1] - want[1, 1]).abs().max()) > 1e-2  # the logits depend on the input


@torch.no_grad()
def test_greedy_generate_equals_attnkit_greedy(exported):
    from attnkit.tasks.translation import Translator

    ours, hf, hf_tok, _, _ = exported
    tr = Translator(ours, es_en_tokenizer(), max_len=20)  # random weights rarely stop: the length limit is compared too
    tr.normalize_spelling = False  # the exported tokenizer reads text as typed (no rewrite to the 1909 spelling)
    ids = tr.encode_sources(SENTENCES)
    want = [r.tokens for r in tr.translate_ids(ids, beam_size=1)]
    enc = hf_tok(SENTENCES, return_tensors="pt", padding=True)
    assert enc["input_ids"].tolist() == [i + [0] * (enc["input_ids"].shape[1] - len(i)) for i in ids]
    limit = min(tr.max_len, max(len(i) for i in ids) * 2 + 10)  # attnkit's step limit for this batch
    out = hf.generate(**enc, max_length=1 + limit)  # (B, 1 + steps): <s>, the tokens, </s>, <pad>...
    assert out[:, 0].tolist() == [1] * len(SENTENCES)
    got = []
    for row in out[:, 1:].tolist():
        got.append(row[: row.index(2)] if 2 in row else row)
    assert got == want
    assert len({tuple(t) for t in want}) > 1


def test_written_files_say_what_attnkit_does(exported):
    """float32 weights; config.json and generation_config.json: attnkit's conventions, not the family's."""
    from safetensors.torch import load_file

    _, _, _, cls, folder = exported
    weights = load_file(folder / "model.safetensors")
    assert {v.dtype for v in weights.values()} == {torch.float32}
    cfg = json.loads((folder / "config.json").read_text())
    gen = json.loads((folder / "generation_config.json").read_text())
    assert cfg["architectures"] == [cls] and cfg["scale_embedding"] and cfg["activation_function"] == "relu"
    assert (gen["decoder_start_token_id"], gen["eos_token_id"], gen["pad_token_id"]) == (1, 2, 0)
    assert gen.get("forced_eos_token_id") is None and gen["num_beams"] == 1
    manifest = json.loads((folder / "attnkit.json").read_text())
    assert manifest["engine"] == "huggingface" and manifest["self_check_max_logit_diff"] < 1e-4


def test_residual_permutation_sorts_interleaved_sinusoids_into_sines_then_cosines():
    from attnkit.attention.positional import sinusoidal_encoding
    from attnkit.deploy.hf_export import residual_permutation

    d, pos = 16, torch.arange(50)
    pe = sinusoidal_encoding(pos, d)[:, residual_permutation(d)]  # (N, D)
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = pos.double().unsqueeze(1) * freq  # (N, D/2)
    torch.testing.assert_close(pe.double(), torch.cat([angles.sin(), angles.cos()], 1), atol=1e-6, rtol=0)


# ------------------------------------------------------------------ the tokenizer
@pytest.fixture(scope="module")
def verses(bible_home):
    from attnkit.data.datasets.bible import load_pairs

    pairs = load_pairs("test", home=bible_home, limit=300)
    return [p.src for p in pairs] + [p.tgt for p in pairs]


@pytest.fixture(scope="module")
def shipped_tokenizer(tmp_path_factory):
    """The shipped model's tokenizer as the export writes it, loaded with AutoTokenizer."""
    from transformers import AutoTokenizer

    from attnkit.deploy.hf_export import _fast_tokenizer

    folder = tmp_path_factory.mktemp("tok")
    _fast_tokenizer(es_en_tokenizer(), 100).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


TRICKY = ["  Hola,   mundo  ", "ﬁn ½ Ａ", "emoji 😀 ∂ 中文", "tab\there\nnewline", "a\u00a0b", "x  ", "¿Qué?—¡Sí!"]


def test_tokenizer_ids_and_text_equal_sentencepiece_on_real_verses(verses, shipped_tokenizer):
    tok = es_en_tokenizer()
    for s in verses + TRICKY:
        ids = tok.encode(s)
        assert shipped_tokenizer(s)["input_ids"] == ids, s  # no </s> appended, as attnkit's source
        assert shipped_tokenizer.decode(ids, skip_special_tokens=True) == tok.decode(ids), s
    assert shipped_tokenizer.convert_ids_to_tokens(list(range(len(tok)))) == [
        tok.id_to_piece(i) for i in range(len(tok))
    ]
    assert (shipped_tokenizer.pad_token_id, shipped_tokenizer.eos_token_id) == (0, 2)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcdeñáéíóúüÁ ,.;:¿?¡!«»—'\"0123456789ÑZ😀中ǅ\u00a0\t")), max_size=40))
def test_tokenizer_agrees_on_any_text(shipped_tokenizer, text):
    tok = es_en_tokenizer()
    ids = tok.encode(text)
    assert shipped_tokenizer(text)["input_ids"] == ids
    assert shipped_tokenizer.decode(ids, skip_special_tokens=True) == tok.decode(ids)


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_tokenizers_trained_on_verses_convert_exactly(bible_home, verses, model_type):
    from attnkit.data.datasets.bible import load_pairs
    from attnkit.data.tokenizer import Tokenizer
    from attnkit.deploy.hf_tokenizer import build_tokenizer, tokenizer_mismatches

    train = load_pairs("train", home=bible_home, limit=400)
    tok = Tokenizer.train([p.src for p in train] + [p.tgt for p in train], vocab_size=600, model_type=model_type)
    assert tokenizer_mismatches(build_tokenizer(tok), tok, verses + TRICKY) == []


# ------------------------------------------------------------------ what cannot be represented
def test_refusals_name_their_reason(tmp_path):
    import dataclasses

    import torch.nn.functional as F

    from attnkit.deploy.hf_export import architecture_for, export_huggingface
    from attnkit.deploy.manifest import DeployError
    from attnkit.models.transformer import TransformerConfig, TransformerTranslator
    from attnkit.pretrained import resolve_model

    with pytest.raises(DeployError, match=r"rnnsearch is a recurrent \(GRU\) translator"):
        export_huggingface(resolve_model("rnnsearch-es-en"), tmp_path / "a")
    with pytest.raises(DeployError, match=r"rnnencdec is a recurrent"):
        export_huggingface(resolve_model("rnnencdec-es-en"), tmp_path / "a")
    with pytest.raises(DeployError, match="captioner model is not a Transformer translator"):
        export_huggingface(resolve_model("captioner-soft"), tmp_path / "b")
    tok = es_en_tokenizer()

    def model(**kw):
        return TransformerTranslator(TransformerConfig(**{"vocab_size": len(tok), "d_model": 8, "nhead": 2, **kw}))

    assert architecture_for(model(norm_first=True), tok) == "pegasus"
    assert architecture_for(model(norm_first=False), tok) == "marian"
    assert architecture_for(model(norm_first=False, tie_embeddings=False), tok) == "marian"
    with pytest.raises(DeployError, match="positional='learned': Marian and Pegasus add a fixed sinusoid table"):
        architecture_for(model(positional="learned", max_len=16, max_src_len=16), tok)
    with pytest.raises(DeployError, match="pre-norm model with separate source and target embeddings"):
        architecture_for(model(norm_first=True, tie_embeddings=False), tok)
    with pytest.raises(DeployError, match="separate source and target vocabularies"):
        architecture_for(model(src_vocab_size=500, tie_embeddings=False), tok)
    with pytest.raises(DeployError, match="tokenizer has 8000 pieces but the model's vocabulary is 100"):
        architecture_for(TransformerTranslator(TransformerConfig(vocab_size=100, d_model=8, nhead=2)), tok)
    gelu = model()
    gelu.encoder.layers[0].activation = F.gelu
    with pytest.raises(DeployError, match="activation is not ReLU"):
        architecture_for(gelu, tok)
    eps = model()
    eps.decoder.norm.eps = 1e-6
    with pytest.raises(DeployError, match="eps=1e-05"):
        architecture_for(eps, tok)

    @dataclasses.dataclass
    class WithRelative(TransformerConfig):  # an option a later attnkit might add
        relative_positions: int = 0

    rel = TransformerTranslator(WithRelative(vocab_size=len(tok), d_model=8, nhead=2, relative_positions=16))
    with pytest.raises(DeployError, match="relative_positions=16: the huggingface export does not know this option"):
        architecture_for(rel, tok)


# ------------------------------------------------------------------ the command line
def _main(capsys, *args):
    """``attnkit ARGS`` in this process: (exit status, stdout, stderr)."""
    from attnkit.cli import main

    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_writes_the_folder_and_refuses_bad_input_in_one_line(tmp_path, capsys, monkeypatch):
    from transformers import AutoModelForSeq2SeqLM

    ckpt = _tiny(tmp_path, "ckpt", norm_first=False)
    out = tmp_path / "hf"
    rc, stdout, stderr = _main(capsys, "export", ckpt, out, "--format", "huggingface")
    assert rc == 0 and "MarianMTModel" in stdout and stderr == "" and "AutoModelForSeq2SeqLM.from_pretrained" in stdout
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {
        p.name for p in out.iterdir()
    }
    assert type(AutoModelForSeq2SeqLM.from_pretrained(out)).__name__ == "MarianMTModel"
    capsys.readouterr()  # transformers' loading progress bar

    def one_line_error(*args, expect):
        rc, _, err = _main(capsys, "export", *args)
        assert rc == 2 and err.count("\n") == 1 and expect in err, err

    one_line_error(ckpt, out, "--format", "huggingface", expect="not empty; choose another folder")
    rc, _, _ = _main(capsys, "export", ckpt, out, "--format", "huggingface", "--force")
    assert rc == 0
    (out / "notes.txt").write_text("mine")  # a file of the user's: --force must not remove it
    one_line_error(ckpt, out, "--format", "huggingface", "--force", expect="nothing was removed")
    assert (out / "notes.txt").read_text() == "mine"
    one_line_error("rnnsearch-es-en", tmp_path / "x", "--format", "huggingface", expect="recurrent (GRU) translator")
    one_line_error(ckpt, tmp_path / "y", "--format", "huggingface", "--fp32", expect="--fp32: not for --format")
    one_line_error("no-such-model", tmp_path / "z", "--format", "huggingface", expect="no-such-model")
    (tmp_path / "file").write_text("x")
    one_line_error(ckpt, tmp_path / "file", "--format", "huggingface", expect="is a file; give a folder")
    pre_untied = _tiny(tmp_path, "pre-untied", norm_first=True, tie_embeddings=False)
    one_line_error(pre_untied, tmp_path / "w", "--format", "huggingface", expect="Pegasus, the stock pre-norm")
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    one_line_error(ckpt, tmp_path / "v", "--format", "huggingface", expect="pip install 'attnkit[hf]'")
    assert not (tmp_path / "v").exists()
