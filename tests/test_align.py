"""``attnkit align``: links read from attention (plain and Shift-Att rows) against a plain-loop
reference, the batched forced decoding against one pair at a time, and the command's file handling."""

import dataclasses
import json

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from attnkit.alignment import attention_links, column_links, invert, shift_rows, span_attention, symmetrize
from attnkit.alignment.gold import DEV_VERSES, load_gold, parse_links
from attnkit.cli import main as cli_main
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.alignment import AttentionReading, ModelAligner

# ------------------------------------------------------------------ the extraction, on tensors


def plain_links(piece_att, src_spans, tgt_spans, threshold=None):
    """Word attention and links by plain loops in float64: for target word j, the mean over its pieces
    of the summed attention on source word i's pieces; j linked to its first maximal i (and to every
    i at or above the threshold); a word without pieces gets no links."""
    a = piece_att.double().tolist()
    links = set()
    for j, tspan in enumerate(tgt_spans):
        if not tspan:
            continue
        row = []
        for sspan in src_spans:
            total = 0.0
            for t in tspan:
                total += sum(a[t][s] for s in sspan)
            row.append(total / len(tspan))
        if not row:
            continue
        best = max(range(len(row)), key=lambda i: (row[i], -i))
        links.add((best, j))
        if threshold is not None:
            links |= {(i, j) for i, v in enumerate(row) if v >= threshold}
    return links


def plain_column_values(piece_att, src_spans, tgt_spans):
    """Word attention by loops, float64, as a dict (target word, source word) → value."""
    a = piece_att.double().tolist()
    return {
        (j, i): sum(sum(a[t][s] for s in sspan) for t in tspan) / len(tspan)
        for j, tspan in enumerate(tgt_spans)
        if tspan
        for i, sspan in enumerate(src_spans)
    }


def random_spans(draw, n_words):
    sizes = [draw(st.integers(0 if k % 3 == 2 else 1, 3)) for k in range(n_words)]
    spans, start = [], 0
    for n in sizes:
        spans.append(list(range(start, start + n)))
        start += n
    return spans, start


@st.composite
def attention_case(draw):
    src_spans, s = random_spans(draw, draw(st.integers(1, 6)))
    tgt_spans, t = random_spans(draw, draw(st.integers(1, 6)))
    s, t = max(s, 1), max(t, 1)
    seed = draw(st.integers(0, 2**31 - 1))
    att = torch.softmax(torch.randn(t + 1, s, generator=torch.Generator().manual_seed(seed)) * 3, dim=-1)
    threshold = draw(st.sampled_from([None, 0.3, 0.6]))
    return att, src_spans, tgt_spans, threshold


@settings(max_examples=150, deadline=None)
@given(attention_case())
def test_links_equal_a_plain_loop(case):
    att, src_spans, tgt_spans, threshold = case
    plain = att[:-1]  # rows of the output steps over [bos, y_0 .. y_{T-2}]
    assert attention_links(span_attention(plain, src_spans, tgt_spans), threshold=threshold) == plain_links(
        plain, src_spans, tgt_spans, threshold
    )
    # the other direction of the same matrix, and the two symmetrised as a reading does it
    wa = span_attention(plain, src_spans, tgt_spans)
    cols, values = column_links(wa), plain_column_values(plain, src_spans, tgt_spans)
    linked = {i for i, span in enumerate(src_spans) if span and any(tgt_spans)}
    assert {i for i, _ in cols} == linked and len(cols) == len(linked)  # one link per source word with pieces
    for i, j in cols:  # to a target word of largest attention (float32 may break an exact tie either way)
        assert values[j, i] >= max(v for (_, i2), v in values.items() if i2 == i) - 1e-6
    reading = AttentionReading("attention", threshold=threshold, both_ways="grow-diag-final-and")
    assert reading.links(wa) == symmetrize(plain_links(plain, src_spans, tgt_spans, threshold), cols)
    shifted = shift_rows(att)  # Shift-Att: row t of the pass over [bos, y_0 .. y_{T-1}] is row t + 1
    assert torch.equal(shifted, att[1:])
    assert attention_links(span_attention(shifted, src_spans, tgt_spans), threshold=threshold) == plain_links(
        att[1:], src_spans, tgt_spans, threshold
    )


def test_extraction_errors():
    with pytest.raises(ValueError, match="T \\+ 1 >= 2 rows"):
        shift_rows(torch.ones(1, 3))
    with pytest.raises(ValueError, match="threshold must be in"):
        attention_links(torch.ones(2, 2), threshold=0)
    with pytest.raises(ValueError, match="source_spans name piece 5"):
        span_attention(torch.ones(2, 3), [[0], [5]], [[0], [1]])


# ------------------------------------------------------------------ a real model, batched against one pair


@pytest.fixture(scope="module")
def transformer():
    return Translator.load("transformer-es-en")


def one_pair_reference(tr, src_words, tgt_words, reading):
    """One pair at a time through the Translator's own sentence tokenisation and model.attention_maps."""
    tok = tr.tokenizer
    src_ids, tgt_ids = tok.encode(" ".join(src_words)), tok.encode(" ".join(tgt_words))
    shifted = reading.method in ("shift", "guided")  # the guided head is trained on the input step's row
    forced = [tok.bos_id] + (tgt_ids if shifted else tgt_ids[:-1])
    maps = tr.model.attention_maps(torch.tensor([src_ids]), torch.tensor([len(src_ids)]), torch.tensor([forced]))
    att = maps.cross[0, reading.layer - 1]
    att = att.mean(0) if reading.head is None else att[reading.head - 1]
    if shifted:
        att = att[1:]

    def spans(ids):
        out = []
        for k, p in enumerate(tok.id_to_piece(i) for i in ids):
            if p.startswith("\u2581") or not out:
                out.append([])
            out[-1].append(k)
        return out

    rows = plain_links(att, spans(src_ids), spans(tgt_ids), reading.threshold)
    if reading.both_ways in (None, "none"):
        return rows
    return symmetrize(rows, column_links(span_attention(att, spans(src_ids), spans(tgt_ids))), reading.both_ways)


@pytest.mark.parametrize(
    "reading",
    [
        AttentionReading("attention", 2, 3),
        AttentionReading("shift", 1),
        AttentionReading("attention", 3, None, 0.4),
        AttentionReading("guided", 2, 1),  # read both ways: the intersection of row and column argmaxes
        AttentionReading("guided", 2, 1, both_ways="none"),
    ],
)
def test_batched_links_equal_one_pair_at_a_time(transformer, reading):
    verses = load_gold()[:12]
    pairs = [(v.source, v.target) for v in verses]
    aligner = ModelAligner(transformer, reading)
    got = list(aligner.align(pairs, batch_size=5))
    with torch.no_grad():
        want = [one_pair_reference(transformer, s, t, aligner.reading) for s, t in pairs]
    assert got == want
    if (
        reading.method == "guided" and reading.both_ways is None
    ):  # read both ways unless told: each word the other's argmax
        assert aligner.reading.both_ways == "intersection"
        rows = list(
            ModelAligner(transformer, dataclasses.replace(reading, both_ways="none")).align(pairs, batch_size=5)
        )
        assert all(g <= r for g, r in zip(got, rows)) and sum(map(len, got)) < sum(map(len, rows))
    # reverse: the model reads the second side; links come back as (first side, second side)
    back = list(aligner.align([(t, s) for s, t in pairs[:3]], batch_size=2, reverse=True))
    assert back == [invert(x) for x in got[:3]]


def test_reading_defaults_and_errors(transformer):
    assert ModelAligner(transformer, AttentionReading("shift")).reading.layer == 2  # the penultimate of 3
    assert ModelAligner(transformer).reading.layer is None  # the model's own alignment
    guided = ModelAligner(transformer, AttentionReading("guided")).reading  # the shipped model's trained head
    assert (guided.layer, guided.head, guided.shifted) == (2, 1, True)
    cfg = transformer.model.config
    transformer.model.config = dataclasses.replace(cfg, alignment_layer=None, alignment_head=None)
    try:
        with pytest.raises(ValueError, match="not trained with guided alignment"):
            ModelAligner(transformer, AttentionReading("guided"))
    finally:
        transformer.model.config = cfg
    with pytest.raises(
        ValueError, match=r"head must be in 1\.\.4 \(this TransformerTranslator has 4 heads per layer\), got 9"
    ):
        ModelAligner(transformer, AttentionReading("attention", 1, 9))
    with pytest.raises(ValueError, match="method must be one of"):
        AttentionReading("hard")
    with pytest.raises(ValueError, match=r"both_ways must be one of intersection, .*, none"):
        AttentionReading("guided", both_ways="diagonal")
    with pytest.raises(ValueError, match="head needs a layer"):
        AttentionReading("attention", None, 2)


# ------------------------------------------------------------------ the command


def test_align_command_writes_pharaoh_lines(tmp_path, capsys):
    verses = load_gold()[:6]
    src, tgt = tmp_path / "a.es", tmp_path / "a.en"
    src.write_text("\n".join(" ".join(v.source) for v in verses[:3]) + "\n\n" + " ".join(verses[3].source) + "\n")
    tgt.write_text("\n".join(" ".join(v.target) for v in verses[:3]) + "\nsomething\n" + " ".join(verses[3].target))
    out = tmp_path / "out.align"
    argv = ["align", "--src", str(src), "--tgt", str(tgt), "--method", "attention", "--layer", "2"]
    assert cli_main([*argv, "--output", str(out)]) == 0
    lines = out.read_text().split("\n")
    assert len(lines) == 6 and lines[-1] == "" and lines[3] == ""  # one line per pair; an empty source: no links
    for k, line in zip([0, 1, 2, 4], [lines[0], lines[1], lines[2], lines[4]]):
        links = parse_links(line)
        v = verses[k if k < 3 else 3]
        assert links and all(i < len(v.source) and j < len(v.target) for i, j in links)
        assert {j for _, j in links} == set(range(len(v.target)))  # every target word has its argmax link
    err = capsys.readouterr().err
    assert "5 pairs" in err and "layer 2 head mean" in err

    # stdout, Shift-Att, symmetrised with a "reverse" model (here the same one, mechanically)
    capsys.readouterr()
    argv = ["align", "--src", str(src), "--tgt", str(tgt), "--method", "shift", "--no-progress"]
    assert cli_main([*argv, "--reverse-model", "transformer-es-en", "--symmetrize", "intersection"]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 6


def test_align_command_errors_are_one_line(tmp_path, capsys):
    src, tgt = tmp_path / "a.es", tmp_path / "b.en"
    src.write_text("uno\ndos\ntres\n")
    tgt.write_text("one\ntwo\n")
    cases = [
        (["--src", str(src), "--tgt", str(tgt)], f"{src} has 3 lines but {tgt} has 2"),
        (["--src", str(tmp_path / "none"), "--tgt", str(tgt)], f"{tmp_path / 'none'}: no such file"),
        (["--src", str(src), "--tgt", str(src), "--batch-size", "0"], "batch size must be an int in [1, 100_000]"),
        (["--src", str(src), "--tgt", str(src), "--model", "rnnencdec-es-en"], "has no attention"),
        (["--src", str(src), "--tgt", str(src), "--model", "rnnsearch-es-en", "--layer", "2"], "one attention"),
        (["--src", str(src), "--tgt", str(src), "--threshold", "1.5"], "threshold must be in (0, 1]"),
        (["--src", str(src), "--tgt", str(src), "--symmetrize", "none", "--reverse-model", "x"], "give no --reverse"),
        (["--src", str(src), "--tgt", str(src), "--symmetrize", "none", "--method", "eflomal"], "need a rule"),
    ]
    for argv, message in cases:
        assert cli_main(["align", *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)


# ------------------------------------------------------------------ evaluate alignment on a user's gold set


def test_evaluate_alignment_with_your_own_gold(tmp_path, capsys):
    verses = load_gold()[DEV_VERSES : DEV_VERSES + 8]
    (tmp_path / "s").write_text("".join(" ".join(v.source) + "\n" for v in verses))
    (tmp_path / "t").write_text("".join(" ".join(v.target) + "\n" for v in verses))
    gold_lines = [
        " ".join([f"{i}-{j}" for i, j in sorted(v.sure)] + [f"{i}p{j}" for i, j in sorted(v.possible - v.sure)])
        for v in verses
    ]
    (tmp_path / "g").write_text("\n".join(gold_lines) + "\n")
    argv = ["evaluate", "alignment", "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t")]
    argv += ["--gold", str(tmp_path / "g"), "--method", "attention", "--method", "shift", "--layer", "2"]
    assert cli_main([*argv, "--no-references", "--json", "--samples", "200"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["scored_verses"] == 8 and r["dev_verses"] == 0
    # the same AER as the built-in gold set's links of those verses, computed here from the files' words
    aligner = ModelAligner(Translator.load("transformer-es-en"), AttentionReading("attention", 2))
    from attnkit.alignment import AERCounts, aer_counts

    total = AERCounts()
    for v, links in zip(verses, aligner.align([(v.source, v.target) for v in verses])):
        total = total + aer_counts(links, v.sure, v.possible)
    first, second = r["rows"]
    assert first["aer"] == round(total.aer, 4)
    assert first["aer_95ci"][0] <= first["aer"] <= first["aer_95ci"][1]
    assert second["vs_first"]["difference"] == pytest.approx(second["aer"] - first["aer"], abs=2e-4)
    # a malformed gold line is one line naming the file and line
    (tmp_path / "g").write_text("\n".join(gold_lines[:-1]) + "\n0-0 1x1\n")
    assert cli_main([*argv, "--no-references"]) == 2
    assert f"{tmp_path / 'g'} line 8: '1x1' is not a link" in capsys.readouterr().err


def test_align_with_eflomal_itself(tmp_path, capsys):
    pytest.importorskip("eflomal")
    verses = load_gold()[:30]
    src, tgt = tmp_path / "a.es", tmp_path / "a.en"
    src.write_text("".join(" ".join(v.source) + "\n" for v in verses))
    tgt.write_text("".join(" ".join(v.target) + "\n" for v in verses))
    assert cli_main(["align", "--method", "eflomal", "--src", str(src), "--tgt", str(tgt)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 30
    for v, line in zip(verses, lines):
        links = parse_links(line)
        assert all(i < len(v.source) and j < len(v.target) for i, j in links)
    assert sum(len(parse_links(x)) for x in lines) > 300  # it aligns most words even on 30 pairs
    assert (
        cli_main(["align", "--method", "eflomal", "--model", "transformer-es-en", "--src", str(src), "--tgt", str(tgt)])
        == 2
    )
    assert "give no --model" in capsys.readouterr().err


def test_evaluate_alignment_symmetrize_reads_the_other_direction_as_align_does(tmp_path, capsys):
    """One default for --reverse-model in both commands: under --symmetrize, the shipped model of the other
    direction (transformer-en-es for transformer-es-en); 'none' reads both ways from the one model."""
    verses = load_gold()[DEV_VERSES : DEV_VERSES + 6]
    (tmp_path / "s").write_text("".join(" ".join(v.source) + "\n" for v in verses))
    (tmp_path / "t").write_text("".join(" ".join(v.target) + "\n" for v in verses))
    (tmp_path / "g").write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(v.sure)) + "\n" for v in verses))
    argv = ["evaluate", "alignment", "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t")]
    argv += ["--gold", str(tmp_path / "g"), "--method", "attention", "--layer", "2", "--no-references"]
    argv += ["--json", "--samples", "50", "--symmetrize", "intersection"]

    def run(*extra):
        assert cli_main([*argv, *extra]) == 0
        out = capsys.readouterr()
        return json.loads(out.out), out.err

    by_default, err = run()
    assert "evaluate alignment: --symmetrize reads the other direction with transformer-en-es" in err
    named, _ = run("--reverse-model", "transformer-en-es")
    one_model, err = run("--reverse-model", "none")
    assert "transformer-en-es" in by_default["rule"] and by_default["rows"] == named["rows"]
    assert "transformer-en-es" not in one_model["rule"] and "other direction" not in err
    # align names the same model for the same flags, through the same function
    src = tmp_path / "s"
    assert cli_main(["align", "--src", str(src), "--tgt", str(tmp_path / "t"), "--symmetrize", "intersection"]) == 0
    assert "align: --symmetrize reads the other direction with transformer-en-es" in capsys.readouterr().err
