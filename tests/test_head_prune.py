"""Heads pruned for good (attnkit.models.head_pruning, ``attnkit export --prune-heads``): the pruned model
against the full model with the same heads zero-ablated (HeadAblation through intervene, an independent path:
hooks on the full model's output projections), in teacher forcing, greedy and beam search; its parameter
count against the rows and columns removed; the save/load round trip; the command line."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.attention import MultiHeadAttention
from attnkit.attention.head_pruning import pruned_attention
from attnkit.attribution.intervention_effects import forced_batch
from attnkit.attribution.interventions import HeadAblation, intervene
from attnkit.errors import ConfigError
from attnkit.models.head_pruning import head_counts, prune_heads
from attnkit.models.transformer import TransformerConfig, TransformerTranslator
from attnkit.tasks.translation import Translator
from attnkit.training.checkpoint import load_model, save_checkpoint
from tiny import nonzero_biases, saved_tiny_transformer, tiny_transformer

SOURCES = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra.", "Jesús lloró."]
REFERENCES = [
    "And God said, Let there be light.",
    "In the beginning God created the heavens and the earth.",
    "Jesus wept.",
]
# a head here and there, every head of the encoder's second layer and of the first cross-attention
HEADS = [
    ("encoder", 0, 1),
    *(("encoder", 1, h) for h in range(4)),
    ("self", 0, 0),
    ("self", 1, 3),
    *(("cross", 0, h) for h in range(4)),
    ("cross", 1, 2),
]


def _model(dtype=torch.float64):
    return nonzero_biases(tiny_transformer(seed=0, nhead=4)).to(dtype)


def _ablations(heads):
    return [HeadAblation(layer, head, site=site) for site, layer, head in heads]


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-6), (torch.float32, 1e-5)])
def test_pruned_model_equals_zero_ablation_teacher_forced(tokenizer, dtype, tol):
    model = _model(dtype)
    pruned = prune_heads(model, HEADS)
    batch = forced_batch(Translator(model, tokenizer), SOURCES, REFERENCES)
    with intervene(model, _ablations(HEADS)):
        want = torch.log_softmax(model(batch.src, batch.src_lengths, batch.tgt_in)[0], -1)
    got = torch.log_softmax(pruned(batch.src, batch.src_lengths, batch.tgt_in)[0], -1)
    assert (got - want).abs().max() <= tol
    clean = torch.log_softmax(model(batch.src, batch.src_lengths, batch.tgt_in)[0], -1)
    assert (got - clean).abs().max() > 1e-3  # the heads mattered: the check can fail
    assert head_counts(pruned.config) == {"encoder": [3, 0], "self": [3, 3], "cross": [0, 3]}
    assert model.encoder.layers[1].self_attn.num_heads == 4  # copy=True left the model as it was


@pytest.mark.parametrize("beam", [1, 3])
def test_pruned_model_decodes_as_the_ablated_one(tokenizer, beam):
    model = _model()
    full, pruned = Translator(model, tokenizer), Translator(prune_heads(model, HEADS), tokenizer)
    with intervene(model, _ablations(HEADS)):
        want = [(d.tokens, round(d.score, 9)) for d in full.translate(SOURCES, beam_size=beam)]
    assert [(d.tokens, round(d.score, 9)) for d in pruned.translate(SOURCES, beam_size=beam)] == want


def test_parameter_count_falls_by_the_rows_and_columns_removed():
    model = _model()
    e, dh = 16, 4
    per_head = 3 * dh * e + 3 * dh + e * dh  # W_Q, W_K, W_V rows and their biases; W_O columns (b_O stays)
    pruned = prune_heads(model, HEADS)
    before, after = (sum(p.numel() for p in m.parameters()) for m in (model, pruned))
    assert before - after == len(HEADS) * per_head
    empty = pruned.encoder.layers[1].self_attn
    assert empty.num_heads == 0 and empty.in_proj_weight.shape == (0, e) and empty.out_proj.weight.shape == (e, 0)


def test_an_attention_without_heads_outputs_its_bias():
    torch.manual_seed(0)
    mha = nonzero_biases(MultiHeadAttention(8, 2)).double().eval()
    none = pruned_attention(mha, [0, 1])
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    out, w = none(x, need_weights=True)
    assert torch.equal(out, mha.out_proj.bias.expand(2, 5, 8)) and w.shape == (2, 0, 5, 5)
    one = pruned_attention(mha, [1])
    with torch.no_grad():
        mha.out_proj.weight[:, 4:] = 0  # head 2 zeroed by hand: the float64 reference
    assert (one(x)[0] - mha(x)[0]).abs().max() <= 1e-12


def test_heads_renumbered_and_pruned_twice_recorded_in_the_unpruned_numbering():
    model = _model()
    once = prune_heads(model, [("encoder", 0, 1)])
    twice = prune_heads(once, [("encoder", 0, 1)])  # now the unpruned model's head 3
    assert twice.config.pruned_heads["encoder"] == [[1, 2], []]
    with intervene(model, _ablations([("encoder", 0, 1), ("encoder", 0, 2)])):
        src, lengths = torch.tensor([[5, 6, 7, 8]]), torch.tensor([4])
        want = model(src, lengths, torch.tensor([[1, 9, 10]]))[0]
    assert (twice(src, lengths, torch.tensor([[1, 9, 10]]))[0] - want).abs().max() <= 1e-6
    maps = twice.attention_maps(src, lengths, torch.tensor([[1, 9, 10]]))
    assert maps.enc_self.shape == (1, 2, 4, 4, 4)
    assert maps.enc_self[0, 0, 1:3].abs().sum() == 0 and maps.enc_self[0, 0, 0].abs().sum() > 0


def test_guided_alignment_head_renumbered_or_cleared():
    model = _model()
    model.config.alignment_layer, model.config.alignment_head = 2, 3
    assert prune_heads(model, [("cross", 1, 0)]).config.alignment_head == 2
    gone = prune_heads(model, [("cross", 1, 2)]).config
    assert (gone.alignment_layer, gone.alignment_head) == (None, None)


def test_save_and_load_round_trip(tokenizer, tmp_path):
    model = _model(torch.float32)
    pruned = prune_heads(model, HEADS)
    save_checkpoint(tmp_path / "p", model=pruned, config=pruned.to_config())
    loaded, config, _ = load_model(tmp_path / "p")
    assert config["pruned_heads"] == pruned.config.pruned_heads
    assert head_counts(loaded.config) == head_counts(pruned.config)
    batch = forced_batch(Translator(model, tokenizer), SOURCES, REFERENCES)
    args = batch.src, batch.src_lengths, batch.tgt_in
    assert torch.equal(loaded(*args)[0], pruned(*args)[0])


@pytest.mark.parametrize(
    "heads,match",
    [
        ([("decoder", 0, 0)], "site must be one of"),
        ([("encoder", 2, 0)], "layer must be an int in 0..1"),
        ([("cross", 0, 4)], "has heads 0..3"),
        (["encoder:1.1"], "triples"),
        ("encoder", "triples"),
    ],
)
def test_bad_heads_refused(heads, match):
    with pytest.raises((ValueError, TypeError), match=match):
        prune_heads(_model(), heads)


def test_bad_pruned_heads_config_refused():
    with pytest.raises(ConfigError, match="pruned_heads"):
        TransformerConfig(nhead=4, pruned_heads={"encoder": [[4], [], []]})
    with pytest.raises(ConfigError, match="one list per layer"):
        TransformerConfig(nhead=4, pruned_heads={"cross": [[0]]})
    assert isinstance(
        TransformerTranslator(TransformerConfig(d_model=16, nhead=4, vocab_size=50)), TransformerTranslator
    )


# --- the command line --------------------------------------------------------------------------------------


def test_cli_export_pruned_and_translate(tmp_path, capsys):
    from attnkit.cli import main

    src = saved_tiny_transformer(tmp_path / "tiny")
    out = tmp_path / "pruned"
    assert main(["export", str(src), str(out), "--fp32", "--prune-heads", "encoder:1.2,cross:2.1,cross:2.3"]) == 0
    said = capsys.readouterr().out
    assert "pruned 3 of 24 heads" in said and "encoder 3,4; self 4,4; cross 4,2" in said
    config = json.loads((out / "config.json").read_text())
    assert config["pruned_heads"] == {"encoder": [[1], []], "self": [[], []], "cross": [[], [0, 2]]}
    full = Translator.load(src)
    with intervene(full.model, _ablations([("encoder", 0, 1), ("cross", 1, 0), ("cross", 1, 2)])):
        want = [t.translation for t in full.translate(SOURCES, beam_size=1)]
    assert main(["translate", "--model", str(out), "--beam", "1", *SOURCES]) == 0
    assert capsys.readouterr().out.splitlines() == want


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--prune-heads", "encoder:0.1"], "--prune-heads: 'encoder:0.1' is not site:layer.head"),
        (["--prune-heads", "decoder:1.1"], "--prune-heads: 'decoder:1.1' is not site:layer.head"),
        (["--prune-heads", "cross:1.1,cross:1.1"], "names a head twice"),
        (["--prune-heads", "cross:3.1"], "--prune-heads: cross layer must be an int in 0..1"),
        (["--prune-heads", "cross:1.5"], "--prune-heads: cross layer 0 has heads 0..3"),
        (["--prune-share", "0.5"], "--prune-share: for --prune-heads-by"),
        (["--prune-heads", "cross:1.1", "--prune-heads-by", "ablation"], "give one"),
        (["--prune-heads", "cross:1.1", "--format", "ctranslate2"], "one head count for every attention"),
        (["--prune-heads-by", "gradient", "--format", "huggingface"], "--prune-heads-by: for --format attnkit"),
    ],
)
def test_cli_bad_pruning_refused_in_one_line(tmp_path, capsys, flags, message):
    from attnkit.cli import main

    src = saved_tiny_transformer(tmp_path / "tiny")
    assert main(["export", str(src), str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_pruned_model_refused_by_the_ctranslate2_and_hf_exports(tmp_path):
    from attnkit.deploy.ct2_export import check_expressible
    from attnkit.deploy.hf_export import architecture_for
    from attnkit.deploy.manifest import DeployError
    from tiny import es_en_tokenizer

    tok = es_en_tokenizer()
    pruned = prune_heads(tiny_transformer(seed=0, nhead=4), [("self", 0, 0)])
    for check in (check_expressible, architecture_for):
        with pytest.raises(DeployError, match="heads pruned"):
            check(pruned, tok)


def test_a_model_with_headless_layers_scores_its_heads_and_runs_in_int8(tokenizer):
    """A layer with no heads left: ``head_importance`` scores the other heads (the ones the masked model's
    scores would list, less the removed), and int8 quantization leaves its empty projections alone."""
    import copy

    from attnkit.attribution.head_importance import head_importance
    from attnkit.device import quantize_int8

    pruned = prune_heads(_model(torch.float32), HEADS)
    report = head_importance(Translator(pruned, tokenizer), SOURCES[:2], REFERENCES[:2])
    assert len(report.heads) == 24 - len(HEADS)
    assert all(h.gradient == h.gradient and h.ablation == h.ablation for h in report.heads)  # no NaN
    int8 = Translator(quantize_int8(copy.deepcopy(pruned)), tokenizer)
    assert len(int8.translate(SOURCES[:1], beam_size=1)[0].tokens) >= 1
