"""Shift-Att (Chen et al. 2020) in ``evaluate alignment``: a row for every model with attention, read
from row t + 1 (the step whose input is target word t) of the layer chosen on the dev verses only;
checked on tiny random models against a plain loop over the gold verses."""

import json
import weakref

import pytest
import torch

from attnkit.alignment import AERCounts, aer_counts
from attnkit.alignment.gold import DEV_VERSES, load_gold
from attnkit.data.tokenizer import Tokenizer
from attnkit.pretrained import resolve_model
from attnkit.tasks.translation.alignment_evaluate import evaluate_alignment


def _tiny(tmp_path, kind: str):
    """A tiny random translator with the shipped tokenizer, saved as a checkpoint folder."""
    from attnkit.models.seq2seq import Seq2SeqConfig
    from attnkit.models.transformer import TransformerConfig, TransformerTranslator
    from attnkit.training.checkpoint import save_checkpoint

    tok = Tokenizer.load(resolve_model("transformer-es-en"))
    torch.manual_seed(0)
    if kind == "transformer":
        cfg = TransformerConfig(
            vocab_size=len(tok), d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=3, dim_feedforward=64
        )
        model = TransformerTranslator(cfg)
    else:
        from attnkit.models.registry import model_class

        model = model_class("rnnsearch")(Seq2SeqConfig(vocab_size=len(tok), emb_dim=16, hidden_dim=16, attn_dim=16))
    model.eval()
    with torch.no_grad():  # larger weights than the init's, so the layers attend differently
        for p in model.parameters():
            p.mul_(3.0)
    return save_checkpoint(
        tmp_path / kind, model=model, config=model.to_config(), extra_files={"tokenizer.model": tok.to_bytes()}
    )


#: model -> {verse ref: its forced pass}; weak, so a freed model's maps go with it (an ``id()`` key could be
#: taken by the next test's model and hand it the other model's maps).
_MAPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _shift_links(model, tok, verse, layer, shift=1):
    """Plain loop: force [bos, y_0 .. y_{T-1}], take row t + 1 of the layer's head mean (the model's one
    attention for an RNN), word attention = mean over the target word's pieces of the sum over the
    source word's pieces, each target word linked to its argmax source word."""
    src_pieces = [tok.encode(w) for w in verse.source]
    tgt_pieces = [tok.encode(w) for w in verse.target]
    cache = _MAPS.setdefault(model, {})
    if verse.ref not in cache:  # one forced pass per verse and model, every layer read from it
        src = [i for p in src_pieces for i in p]
        tgt = [i for p in tgt_pieces for i in p]
        with torch.no_grad():
            cache[verse.ref] = model.attention_maps(
                torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([[tok.bos_id, *tgt]])
            )
    maps = cache[verse.ref]
    att = maps.alignment[0] if layer is None else maps.cross[0, layer - 1].mean(0)  # (T + 1, S)
    att = att[shift : len(att) - 1 + shift]  # row t + 1: the step whose input is y_t (shift=0: the one that outputs it)
    links, row = set(), 0
    for j, tp in enumerate(tgt_pieces):
        col, scores = 0, []
        for sp in src_pieces:
            scores.append(sum(float(att[row + a, col + b]) for a in range(len(tp)) for b in range(len(sp))) / len(tp))
            col += len(sp)
        # float64 sums, compared in float32 as the table's are: exact ties (saturated random attention) go to the first
        links.add((int(torch.tensor(scores, dtype=torch.float32).argmax()), j))
        row += len(tp)
    return links


def _aer(links, verses):
    total = AERCounts()
    for a, v in zip(links, verses):
        total = total + aer_counts(a, v.sure, v.possible)
    return total.aer


@pytest.mark.parametrize("kind", ["transformer", "rnnsearch"])
def test_shift_att_row_is_row_t_plus_one_of_the_dev_chosen_layer(tmp_path, kind):
    from attnkit.training.checkpoint import load_model

    ckpt = _tiny(tmp_path, kind)
    # the Transformer unpadded, as the loop (its saturated random attention has exact ties that padding's
    # rounding can break); the RNN step by step is slow, so batched
    r = evaluate_alignment(ckpt, references=False, samples=50, batch_size=1 if kind == "transformer" else 32)
    shift = [row for row in r["rows"] if "shift" in row["name"]]
    assert [row["method"] for row in r["rows"]] == ["attention", "shift"] and len(shift) == 1
    shift = shift[0]
    assert shift["input_step"] and "Shift-Att" in shift["name"]

    model, _, _ = load_model(ckpt)
    model.eval()
    tok = Tokenizer.load(ckpt)
    verses = load_gold()
    dev, scored = verses[:DEV_VERSES], verses[DEV_VERSES:]
    layers = [1, 2, 3] if kind == "transformer" else [None]
    dev_aer = {L: round(_aer([_shift_links(model, tok, v, L) for v in dev], dev), 4) for L in layers}
    chosen = min(layers, key=lambda L: dev_aer[L])  # the first of equals, as the table's choice
    assert shift["layer"] == chosen
    if kind == "transformer":
        assert "(layer chosen on dev)" in shift["name"] and shift["dev_aer"] == dev_aer[chosen]
        assert len(set(dev_aer.values())) > 1  # the layers differ, so the choice means something
    assert shift["aer"] == pytest.approx(_aer([_shift_links(model, tok, v, chosen) for v in scored], scored), abs=1e-4)
    if kind == "transformer":  # the rows of the output step give another AER: the test tells the two apart
        plain = _aer([_shift_links(model, tok, v, chosen, 0) for v in scored], scored)
        assert shift["aer"] != pytest.approx(plain, abs=1e-3)


def test_layer_is_chosen_on_dev_never_on_the_scored_verses(tmp_path):
    """Gold files whose scored links are replaced by links that one layer gets exactly right: the
    scored AER changes, the chosen layer does not."""
    from attnkit.training.checkpoint import load_model

    ckpt = _tiny(tmp_path, "transformer")
    verses = load_gold()
    base = evaluate_alignment(ckpt, references=False, samples=50, methods=("shift",))
    model, _, _ = load_model(ckpt)
    model.eval()
    tok = Tokenizer.load(ckpt)
    other = 1 if base["rows"][0]["layer"] != 1 else 2
    files = [tmp_path / n for n in ("s", "t", "g")]
    files[0].write_text("".join(" ".join(v.source) + "\n" for v in verses))
    files[1].write_text("".join(" ".join(v.target) + "\n" for v in verses))
    lines = []
    for k, v in enumerate(verses):
        links = v.sure if k < DEV_VERSES else _shift_links(model, tok, v, other)
        possible = v.possible - v.sure if k < DEV_VERSES else set()
        lines.append(" ".join([f"{i}-{j}" for i, j in sorted(links)] + [f"{i}p{j}" for i, j in sorted(possible)]))
    files[2].write_text("\n".join(lines) + "\n")
    r = evaluate_alignment(ckpt, references=False, samples=50, methods=("shift",), gold=files, dev=DEV_VERSES)
    assert r["rows"][0]["layer"] == base["rows"][0]["layer"]  # chosen on the same dev verses
    assert r["rows"][0]["aer"] != base["rows"][0]["aer"]


def test_cli_json_has_a_shift_row_for_models_with_attention(tmp_path, capsys):
    from attnkit.cli import main as cli_main

    ckpt = _tiny(tmp_path, "rnnsearch")
    assert (
        cli_main(["evaluate", "alignment", "--model", str(ckpt), "--no-references", "--json", "--samples", "50"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [row["method"] for row in rows] == ["attention", "shift"] and "shift" in rows[1]["name"]
    assert "vs_first" in rows[1]  # paired against the model's attention
