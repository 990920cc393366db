"""An attnkit Transformer exported to the Hugging Face format and read back through attnkit's HF
path (:mod:`attnkit.hf.seq2seq`, attention captured from the running ``sdpa`` model) shows the same
attention as the native model: every layer's and head's ``enc_self``, ``dec_self`` and ``cross`` to
1e-5, and ``attnkit align`` writes the same links, one way and both ways.

The reference is attnkit's own model (its attention computed by its own layers); the other side
never sees attnkit's weights except through the exported folder. Tiny random Transformers, pre-norm
(exported as Pegasus) and post-norm (as Marian), with the shipped tokenizer; sentences from the
built-in gold set."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

SHAPES = {"pre-norm": dict(norm_first=True), "post-norm": dict(norm_first=False)}
N_VERSES = 6
# the init's weights times this: attention far from uniform (a cross-attention row's largest weight
# ~0.2-0.3 against ~0.07 at 1.0) while float32 rounding stays ~2e-6, as in the shipped trained model
SCALE = 2.0


def _tokenizer():
    from attnkit.data.tokenizer import Tokenizer
    from attnkit.pretrained import resolve_model

    return Tokenizer.load(resolve_model("transformer-es-en"))


def _checkpoint(folder, *, seed, **overrides):
    """A random tiny Transformer with the shipped tokenizer, saved as a checkpoint folder; weights
    scaled up (and LayerNorms moved off 1, 0) so that attention is far from uniform."""
    from attnkit.models.transformer import TransformerConfig, TransformerTranslator
    from attnkit.training.checkpoint import save_checkpoint

    tok = _tokenizer()
    cfg = TransformerConfig(
        vocab_size=len(tok),
        d_model=32,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=64,
        dropout=0.0,
        **overrides,
    )
    torch.manual_seed(seed)
    model = TransformerTranslator(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(SCALE)
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.3)
                m.bias.normal_(0.0, 0.3)
    return save_checkpoint(
        folder, model=model, config=model.to_config(), extra_files={"tokenizer.model": tok.to_bytes()}
    )


@pytest.fixture(scope="module", params=list(SHAPES))
def pair(request, tmp_path_factory):
    """``(native checkpoint, exported folder, reverse native checkpoint, reverse exported folder)``."""
    from attnkit.deploy.hf_export import export_huggingface

    root = tmp_path_factory.mktemp(request.param)
    out = []
    for name, seed, langs in (("fwd", 0, ("es", "en")), ("rev", 1, ("en", "es"))):
        # the reverse model reads English: the native translator must not rewrite it to the 1909 Spanish spelling
        ckpt = _checkpoint(root / name, seed=seed, src_lang=langs[0], tgt_lang=langs[1], **SHAPES[request.param])
        out += [ckpt, export_huggingface(ckpt, root / f"{name}-hf")]
    return tuple(out)


def _gold(n=N_VERSES):
    from attnkit.alignment.gold import load_gold

    return load_gold()[:n]


def _batch(tr, verses):
    """``(src (B, S), lengths (B,), tgt_in (B, T))`` as ``align`` builds them (the translator's own
    tokenizers; ``<s>`` then the reference's pieces), right-padded with 0."""
    src_ids = tr.encode_sources([" ".join(v.source) for v in verses])
    tgt_ids = [[tr.tokenizer.bos_id, *tr.tokenizer.encode(" ".join(v.target))] for v in verses]
    lengths = torch.tensor([len(i) for i in src_ids])
    src = torch.zeros(len(verses), int(lengths.max()), dtype=torch.long)
    tgt = torch.zeros(len(verses), max(map(len, tgt_ids)), dtype=torch.long)
    for b, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        src[b, : len(s)] = torch.tensor(s)
        tgt[b, : len(t)] = torch.tensor(t)
    return src, lengths, tgt


def test_attention_maps_equal_the_native_models(pair):
    from attnkit.hf.seq2seq import HFSeq2Seq
    from attnkit.tasks.translation import Translator

    ckpt, folder, _, _ = pair
    native, hf = Translator.load(ckpt), Translator.load(folder)
    assert isinstance(hf.model, HFSeq2Seq) and hf.model.config.model_type in ("pegasus", "marian")
    verses = _gold()
    src, lengths, tgt = _batch(native, verses)
    src_hf, _, tgt_hf = _batch(hf, verses)
    assert torch.equal(src, src_hf) and torch.equal(tgt, tgt_hf)  # the exported tokenizer cuts the same pieces
    assert int(lengths.min()) < src.shape[1]  # padded rows: the masks are compared too
    want = native.model.attention_maps(src, lengths, tgt)
    got = hf.model.attention_maps(src, lengths, tgt)
    B, T, S = src.shape[0], tgt.shape[1], src.shape[1]
    assert want.enc_self.shape == (B, 2, 4, S, S) and want.cross.shape == (B, 2, 4, T, S)
    for name in ("enc_self", "dec_self", "cross", "alignment"):
        w, g = getattr(want, name), getattr(got, name)
        assert g.shape == w.shape, name
        torch.testing.assert_close(g.float(), w.float(), atol=1e-5, rtol=0, msg=name)
    assert (
        float(want.cross.amax(-1).median()) > 0.15
    )  # peaked, not uniform (1/S ~ 0.03): the comparison means something
    # the rows over real keys sum to one on both sides (the HF side drops no special token here)
    rows = got.cross[0, :, :, :, : int(lengths[0])].sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)


def _align(capsys, tmp_path, model, *extra):
    from attnkit.cli import main

    verses = _gold()
    (tmp_path / "g.es").write_text("".join(" ".join(v.source) + "\n" for v in verses))
    (tmp_path / "g.en").write_text("".join(" ".join(v.target) + "\n" for v in verses))
    capsys.readouterr()
    files = ["--src", tmp_path / "g.es", "--tgt", tmp_path / "g.en", "--no-progress"]
    code = main([str(a) for a in ("align", "--model", model, *files, *extra)])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out.splitlines()


def test_align_writes_the_native_models_links_one_way_and_both_ways(pair, tmp_path, capsys):
    ckpt, folder, rev, rev_folder = pair
    for method in ("attention", "shift"):
        want = _align(capsys, tmp_path, ckpt, "--method", method)
        assert len(want) == N_VERSES and all(want)
        assert _align(capsys, tmp_path, folder, "--method", method) == want
    want = _align(capsys, tmp_path, ckpt, "--reverse-model", rev)
    got = _align(capsys, tmp_path, folder, "--reverse-model", rev_folder)
    assert got == want
    one_way = _align(capsys, tmp_path, ckpt)
    assert want != one_way  # the reverse model's links changed something: both ways was compared


def test_the_export_reads_input_as_the_native_model_does(pair):
    """Today's spelling is rewritten to the 1909 Bible's before tokenizing by both (the export's config
    carries the model's languages, corpus, source spelling and longest source)."""
    from attnkit.data.spelling import modernize
    from attnkit.tasks.translation import Translator

    ckpt, folder, rev, rev_folder = pair
    native, hf = Translator.load(ckpt), Translator.load(folder)
    assert (hf.spelling, hf.language_pair, hf.corpus) == (native.spelling, native.language_pair, "bible")
    assert hf.spelling == "rv1909" and hf.max_src_len == native.max_src_len
    modern = [modernize(" ".join(v.source)) for v in _gold(40)]
    assert sum(m != " ".join(v.source) for m, v in zip(modern, _gold(40))) >= 5  # the rewrite has work to do
    assert hf.encode_sources(modern) == native.encode_sources(modern)
    back, back_hf = Translator.load(rev), Translator.load(rev_folder)  # reads English: as typed, both
    assert back_hf.spelling == back.spelling == "modern" and back_hf.language_pair == "en → es"
    words = ["a plot was made against him"]
    assert back_hf.encode_sources(words) == back.encode_sources(words)
