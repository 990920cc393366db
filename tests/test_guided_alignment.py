"""Guided alignment: word links → piece targets, the loss against hand-computed values, the
training loss of real (tiny) models, and the options that configure it."""

import math

import pytest
import torch

from attnkit.data.batching import Example, collate
from attnkit.errors import ConfigError, InputError
from attnkit.models.seq2seq import RNNSearch, Seq2SeqConfig
from attnkit.models.transformer import TransformerConfig, TransformerTranslator
from attnkit.tasks.translation import TranslationConfig
from attnkit.tasks.translation.guided import (
    GuidedAlignment,
    add_alignment_targets,
    guided_alignment_loss,
    piece_links,
    read_links_file,
)
from attnkit.tasks.translation.loss import translation_loss_fn
from attnkit.training.losses import label_smoothed_nll


def test_loss_by_hand():
    # one sentence, 2 target pieces × 3 source pieces
    att = torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]]])
    # piece 0 linked to sources 0 and 1 (half each), piece 1 unlinked
    links = [torch.tensor([[0, 0], [0, 1]])]
    batch = {"tgt_out": torch.zeros(1, 2, dtype=torch.long), "src": torch.zeros(1, 3, dtype=torch.long)}
    g = add_alignment_targets(batch, links)["align"]
    assert g.tolist() == [[[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]]
    # − (½ log 0.5 + ½ log 0.25) = ½ (log 2 + log 4) = 1.5 log 2
    assert guided_alignment_loss(att, g).item() == pytest.approx(1.5 * math.log(2))
    # a second row linked to source 2 only: + (− log 0.7)
    g2 = add_alignment_targets(batch, [torch.tensor([[0, 0], [0, 1], [1, 2]])])["align"]
    assert guided_alignment_loss(att, g2).item() == pytest.approx(1.5 * math.log(2) - math.log(0.7))
    with pytest.raises(ValueError, match=r"attention \(1, 2, 3\) and targets \(1, 3, 2\)"):
        guided_alignment_loss(att, g.transpose(1, 2))


def test_word_links_to_piece_links():
    src = ["▁En", "▁el", "▁princip", "io"]  # words: En | el | principio
    tgt = ["▁In", "▁the", "▁begin", "n", "ing"]  # words: In | the | beginning
    got = piece_links(src, tgt, {(0, 0), (1, 1), (2, 2)}, (3, 3))
    assert sorted(map(tuple, got.tolist())) == [(0, 0), (1, 1), (2, 2), (2, 3), (3, 2), (3, 3), (4, 2), (4, 3)]
    # training cuts each side at max_len pieces: links to later pieces go
    cut = piece_links(src, tgt, {(0, 0), (1, 1), (2, 2)}, (3, 3), max_len=3)
    assert sorted(map(tuple, cut.tolist())) == [(0, 0), (1, 1), (2, 2)]
    # the pieces do not make the text's words: no links rather than wrong ones
    assert piece_links(src, tgt, {(0, 0)}, (4, 3)).shape == (0, 2)
    # a link past the words is dropped
    assert piece_links(src, tgt, {(7, 0)}, (3, 3)).shape == (0, 2)


def test_links_file_must_match_the_pairs(tmp_path):
    f = tmp_path / "links.txt"
    f.write_text("0-0 1-1\n0-1\n")
    assert read_links_file(f, 2) == [{(0, 0), (1, 1)}, {(0, 1)}]
    with pytest.raises(InputError, match="has 2 lines of links but the training data has 3 pairs"):
        read_links_file(f, 3)
    f.write_text("0-0\n0_1\n")
    with pytest.raises(InputError, match="line 2: '0_1' is not a link"):
        read_links_file(f, 2)


def _batch_with_links():
    torch.manual_seed(0)
    examples = [
        Example(torch.tensor([5, 6, 7, 8]), torch.tensor([9, 10, 11])),
        Example(torch.tensor([12, 13]), torch.tensor([14, 15, 16, 17])),
    ]
    links = [torch.tensor([[0, 0], [1, 1], [2, 3], [2, 2]]), torch.tensor([[0, 1], [3, 0]])]
    return add_alignment_targets(collate(examples), links)


@pytest.mark.parametrize("kind", ["transformer", "rnnsearch"])
def test_training_loss_adds_the_weighted_alignment_term(kind):
    torch.manual_seed(0)
    if kind == "transformer":
        model = TransformerTranslator(
            TransformerConfig(
                vocab_size=20, d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16
            )
        )
        guided = GuidedAlignment(0.3, layer=1, head=2)
    else:
        model = RNNSearch(Seq2SeqConfig(vocab_size=20, emb_dim=8, hidden_dim=8, attn_dim=8, dropout=0.0))
        guided = GuidedAlignment(0.3, input_step=False)  # Bahdanau's RNNsearch: the output step's row
    model.eval()  # no dropout: the two passes below see the same weights
    batch = _batch_with_links()
    loss_sum, n, metrics = translation_loss_fn(0, 0.0, guided)(model, batch)
    # reference: the plain NLL and, by loops, − Σ G log A over the supervised head's weights
    with torch.no_grad():
        logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
        nll, n_ref = label_smoothed_nll(logits, batch["tgt_out"], 0, 0.0)
        if kind == "transformer":
            m = model.attention_maps(batch["src"], batch["src_lengths"], batch["tgt_in"])
            att = m.cross[:, 0, 1]  # layer 1, head 2: (B, T, S)
        else:
            att = model.attention_maps(batch["src"], batch["src_lengths"], batch["tgt_in"]).alignment
    g = batch["align"]
    assert g[:, -1].sum() == 0  # the last target position is eos or padding: never linked
    hand = 0.0
    shift = int(guided.input_step)  # piece t is the input of row t + 1 (tgt_in = [bos, y_0, …])
    for b in range(g.shape[0]):
        for t in range(g.shape[1] - 1):
            for s in range(g.shape[2]):
                if g[b, t, s] > 0:
                    hand -= float(g[b, t, s]) * math.log(float(att[b, t + shift, s]))
    assert n == n_ref
    assert loss_sum.item() == pytest.approx(float(nll) + 0.3 * hand, rel=1e-5)
    assert metrics["align_loss"] == pytest.approx(hand / n, rel=1e-5)
    # the alignment term trains the attention: it changes the gradient of the attention's parameters
    attn = model.decoder.layers[0].multihead_attn if kind == "transformer" else model.attention

    def grads(fn):
        model.zero_grad()
        fn(model, batch)[0].backward()
        return torch.cat([p.grad.flatten() for p in attn.parameters() if p.grad is not None])

    assert not torch.allclose(grads(translation_loss_fn(0, 0.0, guided)), grads(translation_loss_fn(0, 0.0)))
    # without guided alignment the loss is the NLL alone
    plain, _, extra = translation_loss_fn(0, 0.0)(model, batch)
    assert plain.item() == pytest.approx(float(nll), rel=1e-5) and extra == {}


def test_one_decoder_layers_weights_on_request():
    torch.manual_seed(0)
    model = TransformerTranslator(
        TransformerConfig(
            vocab_size=20, d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=3, dim_feedforward=16
        )
    ).eval()
    b = _batch_with_links()
    m = model.attention_maps(b["src"], b["src_lengths"], b["tgt_in"])
    for layer in (1, 2, 3):
        _, w = model(b["src"], b["src_lengths"], b["tgt_in"], need_weights=layer)
        torch.testing.assert_close(w, m.cross[:, layer - 1])
    with pytest.raises(ValueError, match=r"layer 1\.\.3, got 4"):
        model(b["src"], b["src_lengths"], b["tgt_in"], need_weights=4)


def test_guided_options():
    cfg = TranslationConfig.from_options("transformer", guided_alignment="links.txt", num_decoder_layers=4)
    assert (cfg.model_config.alignment_layer, cfg.model_config.alignment_head) == (3, 1)  # penultimate, head 1
    assert cfg.guided() == GuidedAlignment(0.05, 3, 1)
    cfg = TranslationConfig.from_options("transformer", guided_alignment="x", alignment_layer=1, alignment_head=4)
    assert cfg.guided() == GuidedAlignment(0.05, 1, 4)
    rnn = TranslationConfig.from_options("rnnsearch", guided_alignment="x").guided()
    assert rnn == GuidedAlignment(0.05, input_step=False)  # Bahdanau's: s_{t-1} has not read y_t
    luong = TranslationConfig.from_options("rnnsearch", guided_alignment="x", rnn_attention="luong").guided()
    assert luong.input_step and cfg.guided().input_step  # Luong's RNN and the Transformer read it
    assert TranslationConfig.from_options("transformer").guided() is None
    with pytest.raises(ConfigError, match="rnnencdec has none"):
        TranslationConfig.from_options("rnnencdec", guided_alignment="x")
    with pytest.raises(ConfigError, match=r"guided_alignment_weight must be in \(0, 10000\]"):
        TranslationConfig.from_options("rnnsearch", guided_alignment="x", guided_alignment_weight=0.0)
    with pytest.raises(ConfigError, match=r"alignment_head must be an int in 1..4"):
        TranslationConfig.from_options("transformer", guided_alignment="x", alignment_head=5)
