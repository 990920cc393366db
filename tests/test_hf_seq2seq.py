"""Hugging Face encoder-decoders behind attnkit's translation-model protocol: the adapter's logits,
attention maps, greedy and beam search against the model's own forward, eager attention and generate."""

import functools

import pytest
import torch

from attnkit.decoding import OutputLayerDecoder, beam_search, greedy_search
from attnkit.hf.seq2seq import HFSeq2Seq
from attnkit.hf.tokenizer import HFTokenizer
from hf_tiny import ENC_DEC, EOS, build_tiny, eager_copy

SENTENCES = [
    "En el principio creó Dios los cielos y la tierra.",
    "Y dijo Dios: Sea la luz.",
    "Y fue la tarde y la mañana un día.",
    "Jesús lloró.",
]


def _eos_likelier(model):
    """Marian and BART have a final_logits_bias: raise </s> in it so that some hypotheses finish."""
    if hasattr(model, "final_logits_bias"):
        with torch.no_grad():
            model.final_logits_bias[0, EOS] += 4.5
    return model


@functools.cache
def _setup(family, seed=2):
    model, tok = build_tiny(family, seed=seed)
    _eos_likelier(model)
    adapter = HFSeq2Seq(model, tok, source=family).eval()
    src_tok = HFTokenizer(
        tok, side="source", bos_id=adapter.config.bos_id, eos_id=adapter.eos_id, pad_id=adapter.pad_id
    )
    return model, tok, adapter, src_tok


def _batch(src_tok, sentences=SENTENCES):
    ids = src_tok.encode_batch(sentences)
    lengths = torch.tensor([len(i) for i in ids])
    src = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)  # attnkit pads with 0, whatever the model's pad
    for b, i in enumerate(ids):
        src[b, : len(i)] = torch.tensor(i)
    return src, lengths


@pytest.mark.parametrize("family", ENC_DEC)
def test_logits_are_the_models(family):
    model, tok, adapter, src_tok = _setup(family)
    src, lengths = _batch(src_tok, SENTENCES[:1])
    tgt_in = torch.tensor([[adapter.config.bos_id, 40, 41, 42, 43]])
    logits, weights = adapter(src, lengths, tgt_in, need_weights=True)
    P = len(adapter.decoder_prefix)
    enc = tok(SENTENCES[:1], return_tensors="pt")
    dec = torch.cat([torch.tensor([adapter.decoder_prefix]), tgt_in[:, 1:]], 1)
    with torch.no_grad():
        ref = model(**enc, decoder_input_ids=dec).logits[:, P - 1 :]
    finite = torch.isfinite(logits)
    assert finite.sum() >= logits.numel() - logits.shape[1] * len(adapter.banned)
    torch.testing.assert_close(logits[finite], ref[finite], atol=1e-4, rtol=1e-4)
    assert weights.shape == (1, 5, lengths.item())


@pytest.mark.parametrize("family", ENC_DEC)
def test_attention_maps_equal_eager_output_attentions(family):
    _model, tok, adapter, src_tok = _setup(family)
    src, lengths = _batch(src_tok, SENTENCES[:2])
    T = 4
    tgt_in = torch.tensor([[adapter.config.bos_id, 50, 51, 52]] * 2)
    maps = adapter.attention_maps(src, lengths, tgt_in)
    eager, _ = eager_copy(family, seed=2)
    enc = tok(SENTENCES[:2], return_tensors="pt", padding=True)
    dec = torch.cat([torch.tensor([adapter.decoder_prefix] * 2), tgt_in[:, 1:]], 1)
    with torch.no_grad():
        out = eager(**enc, decoder_input_ids=dec, output_attentions=True)
    P, off = len(adapter.decoder_prefix), len(adapter.src_prefix)
    L = adapter.config.num_decoder_layers
    assert maps.cross.shape == (2, L, adapter.config.nhead, T, int(lengths.max()))
    for b in range(2):
        n = int(lengths[b])
        for layer in range(L):
            torch.testing.assert_close(
                maps.enc_self[b, layer, :, :n, :n],
                out.encoder_attentions[layer][b, :, off : off + n, off : off + n],
                atol=1e-5,
                rtol=0,
            )
            torch.testing.assert_close(
                maps.cross[b, layer, :, :, :n],
                out.cross_attentions[layer][b, :, P - 1 :, off : off + n],
                atol=1e-5,
                rtol=0,
            )
            torch.testing.assert_close(
                maps.dec_self[b, layer], out.decoder_attentions[layer][b, :, P - 1 :, P - 1 :], atol=1e-5, rtol=0
            )
        assert float(maps.cross[b, :, :, :, n:].abs().sum()) == 0.0  # past the row's pieces: nothing
    torch.testing.assert_close(maps.alignment, maps.cross[:, -1].mean(1))


@pytest.mark.parametrize("family", ENC_DEC)
def test_greedy_equals_generate(family):
    model, tok, adapter, src_tok = _setup(family)
    src, lengths = _batch(src_tok)
    max_len = 15
    hyps = greedy_search(
        OutputLayerDecoder(adapter),
        {"src": src, "src_lengths": lengths},
        bos_id=adapter.config.bos_id,
        eos_id=adapter.eos_id,
        max_len=max_len,
        return_attention=True,
    )
    P = len(adapter.decoder_prefix)
    enc = tok(SENTENCES, return_tensors="pt", padding=True)
    out = model.generate(**enc, do_sample=False, num_beams=1, max_new_tokens=max_len + P - 1)
    for b, (h, row) in enumerate(zip(hyps, out.tolist())):
        assert row[:P] == adapter.decoder_prefix
        expected = h.tokens + [adapter.eos_id] * h.finished
        assert row[P : P + len(expected)] == expected, (b, h.tokens, row)
        # the attention of each step is the teacher-forced alignment's row
        if h.tokens:
            tgt_in = torch.tensor([[adapter.config.bos_id, *h.tokens[:-1]]])
            n = int(lengths[b])
            maps = adapter.attention_maps(src[b : b + 1, :n], lengths[b : b + 1], tgt_in)
            torch.testing.assert_close(h.attention[:, :n], maps.alignment[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ENC_DEC)
def test_beam_equals_generate_without_length_penalty(family):
    """With length_penalty 0 both rank by the summed log-probability, and generate's early_stopping=True
    (stop at num_beams finished) meets attnkit's stop (no live beam can still win): the same best
    hypothesis. With a length penalty they differ by definition: attnkit's GNMT ((5 + L) / 6)^α
    against generate's L^α."""
    model, tok, adapter, src_tok = _setup(family)
    src, lengths = _batch(src_tok)
    max_len = 15
    found = beam_search(
        OutputLayerDecoder(adapter),
        {"src": src, "src_lengths": lengths},
        beam_size=5,
        bos_id=adapter.config.bos_id,
        eos_id=adapter.eos_id,
        max_len=max_len,
        length_penalty=0.0,
    )
    P = len(adapter.decoder_prefix)
    enc = tok(SENTENCES, return_tensors="pt", padding=True)
    out = model.generate(
        **enc, do_sample=False, num_beams=5, max_new_tokens=max_len + P - 1, length_penalty=0.0, early_stopping=True
    )
    for n_best, row in zip(found, out.tolist()):
        best = n_best[0]
        expected = best.tokens + [adapter.eos_id] * best.finished
        assert row[P : P + len(expected)] == expected


def test_some_hypotheses_finish():
    """The tests above see finished hypotheses, not only max_len ones (Marian with </s> raised)."""
    _, _, adapter, src_tok = _setup("marian")
    src, lengths = _batch(src_tok)
    hyps = greedy_search(
        OutputLayerDecoder(adapter),
        {"src": src, "src_lengths": lengths},
        bos_id=adapter.config.bos_id,
        eos_id=adapter.eos_id,
        max_len=15,
    )
    assert any(h.finished for h in hyps)


def test_the_banned_padding_is_never_chosen():
    _, _, adapter, _ = _setup("marian")
    _weight, bias = adapter.output_layer()
    assert adapter.banned == [adapter.pad_id] and bias[adapter.pad_id] == float("-inf")


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_saliency_equals_autograd_through_the_hf_model(family):
    """attnkit's saliency on the adapter against ∂ log p(y_t) / ∂(source embeddings) taken directly through
    the Hugging Face model's own forward (inputs_embeds), for every target piece."""
    pytest.importorskip("captum")
    from attnkit.attribution import explain
    from attnkit.tasks.translation import Translator

    model, tok, adapter, src_tok = _setup(family)
    tgt_tok = HFTokenizer(
        tok, side="target", bos_id=adapter.config.bos_id, eos_id=adapter.eos_id, pad_id=adapter.pad_id
    )
    tr = Translator(adapter, tgt_tok, src_tokenizer=src_tok)
    att = explain(tr, "Jesús lloró.", target="Jesus wept.", method="saliency")
    src_ids, tgt_ids = src_tok.encode("Jesús lloró."), tgt_tok.encode("Jesus wept.")
    full = tok("Jesús lloró.", return_tensors="pt")["input_ids"]
    off = len(adapter.src_prefix)
    emb = adapter.embedding(full).detach()  # what the encoder would make of the ids
    dec = torch.tensor([[*adapter.decoder_prefix, *tgt_ids[:-1]]])
    P = len(adapter.decoder_prefix)
    expected = []
    for t, y in enumerate(tgt_ids):
        x = emb.clone().requires_grad_(True)
        logits = model(inputs_embeds=x, decoder_input_ids=dec).logits[0, P - 1 + t]
        torch.log_softmax(logits, -1)[y].backward()
        expected.append(x.grad[0, off : off + len(src_ids)].norm(dim=-1))
    expected = torch.stack(expected)  # (T, S); the registry normalises each row to sum 1
    torch.testing.assert_close(att.scores.float(), expected / expected.sum(-1, keepdim=True), atol=1e-5, rtol=1e-4)


def test_m2m100_target_language_from_the_tokenizer():
    """M2M100/NLLB checkpoints name no forced first token; the tokenizer's tgt_lang gives it (__en__)."""
    from hf_tiny import EN

    model, tok = build_tiny("m2m_100")
    model.generation_config.forced_bos_token_id = None
    tok.tgt_lang = "en"
    adapter = HFSeq2Seq(model, tok, source="m2m")
    assert adapter.decoder_prefix == [EOS, EN]
    assert adapter.src_prefix == [tok.convert_tokens_to_ids("__es__")] and adapter.src_suffix == [EOS]
