"""Markup translation beyond the PyTorch model: a CTranslate2 export (its alignment heads), a Hugging Face
export (the guided head it records in config.json), and a document split over processes.

References: the PyTorch engine on the attnkit checkpoint the export was made from (the same document, the
same word links), and the one-process run (byte for byte). Tiny random Transformers with a guided head
(layer 1, head 3, so that neither the default layer nor head can pass by chance)."""

from __future__ import annotations

import json

import pytest

from attnkit.cli import main as cli_main
from attnkit.deploy.ct2_engine import ct2_available
from tiny import saved_tiny_transformer

DOC = (
    "<!DOCTYPE html>\n<html><body>\n<h1>En el <b>principio</b></h1>\n"
    "<p>Y dijo <i>Dios</i>: Sea la <a href='#luz'>luz</a>; y <em>fue</em> la luz.</p>\n"
    "<p>Jesús <strong>lloró</strong>.</p>\n<p>Y vio Dios que la luz <code>x = 1</code> era buena.</p>\n"
    "</body></html>\n"
)
PAIRS = [
    (
        ["En", "el", "principio", "creó", "Dios", "los", "cielos", "y", "la", "tierra", "."],
        ["In", "the", "beginning", "God", "created", "the", "heaven", "."],
    ),
    (
        ["Y", "dijo", "Dios", ":", "Sea", "la", "luz", ";", "y", "fue", "la", "luz", "."],
        ["And", "God", "said", ",", "Let", "there", "be", "light", "."],
    ),
    (["Jesús", "lloró", "."], ["Jesus", "wept", "."]),
]


def _guided(tmp_path, name="g", **overrides):
    return saved_tiny_transformer(tmp_path / name, seed=0, alignment_layer=1, alignment_head=3, **overrides)


def _short(*translators):
    for tr in translators:  # random weights rarely stop: the same length limit on both sides
        tr.max_len = 20


# ------------------------------------------------------------------ CTranslate2

needs_ct2 = pytest.mark.skipif(ct2_available() is not None, reason=str(ct2_available()))


@needs_ct2
@pytest.mark.parametrize("guided", [True, False])
def test_ctranslate2_export_moves_tags_as_the_pytorch_model_does(tmp_path, guided):
    """The export's alignment (the guided head, moved first and read at the input step; or the last layer's
    head mean) gives the PyTorch aligner's links and so the same document, greedy and beam 5."""
    from attnkit.deploy.ct2_align import CT2Aligner
    from attnkit.deploy.ct2_engine import CT2Translator
    from attnkit.deploy.ct2_export import export_ctranslate2
    from attnkit.tasks.translation import Translator
    from attnkit.tasks.translation.markup import default_aligner, translate_document

    ckpt = _guided(tmp_path) if guided else saved_tiny_transformer(tmp_path / "p", seed=0)
    out = export_ctranslate2(ckpt, tmp_path / "ct2", quantization="float32")
    ours, ct2 = Translator.load(ckpt), CT2Translator.load(out, device="cpu", threads=1)
    _short(ours, ct2)
    theirs_aligner, our_aligner = CT2Aligner(ct2), default_aligner(ours)
    assert our_aligner.reading.method == ("guided" if guided else "attention")
    assert (
        theirs_aligner.reading.links is not None and theirs_aligner.reading.both_ways == our_aligner.reading.both_ways
    )
    want = list(our_aligner.align(PAIRS))
    assert list(theirs_aligner.align(PAIRS)) == want
    assert any(want) and want != list(default_aligner(ours, "shift").align(PAIRS))  # the reading matters
    for beam in (1, 5):
        a = translate_document(ours, DOC, "html", beam_size=beam)
        b = translate_document(ct2, DOC, "html", aligner=theirs_aligner, beam_size=beam)
        assert b.text == a.text and b.blocks == a.blocks == 4
    # the batched forced pass is each pair's own
    src = [ct2.encode_sources([" ".join(s)])[0] for s, _ in PAIRS]
    tgt = [ct2.tokenizer.encode(" ".join(t)) for _, t in PAIRS]
    batched = ct2.forced_alignments(list(zip(src, tgt)))
    for s, t, att in zip(src, tgt, batched):
        assert att.shape == (len(t), len(s))
        assert abs(att - ct2.forced_alignment(s, t)).max() < 1e-5


@needs_ct2
def test_cli_translate_html_with_ctranslate2_equals_pytorch(tmp_path, capsys):
    from attnkit.deploy.ct2_export import export_ctranslate2

    ckpt = _guided(tmp_path)
    export = export_ctranslate2(ckpt, tmp_path / "ct2", quantization="float32")
    doc = tmp_path / "doc.html"
    doc.write_text(DOC, encoding="utf-8")
    outs = {}
    for engine, model in (("pytorch", ckpt), ("ctranslate2", export)):
        outs[engine] = tmp_path / f"{engine}.html"
        argv = ["translate", "--model", str(model), "--format", "html", "--file", str(doc), "--beam", "1"]
        assert cli_main([*argv, "--engine", engine, "--output", str(outs[engine])]) == 0
        err = capsys.readouterr().err
        assert "guided" in err and "layer 1" in err, err
    assert outs["ctranslate2"].read_bytes() == outs["pytorch"].read_bytes()
    # the export has one alignment: another reading is refused in one line naming the engine that has it
    argv = ["translate", "--model", str(export), "--engine", "ctranslate2", "--format", "html", "--file", str(doc)]
    assert cli_main([*argv, "--align-method", "shift"]) != 0
    assert "PyTorch engine" in capsys.readouterr().err


# ------------------------------------------------------------------ Hugging Face


def test_huggingface_export_records_the_guided_head_and_aligns_with_it(tmp_path, capsys):
    pytest.importorskip("transformers")
    from attnkit.deploy.hf_export import export_huggingface
    from attnkit.tasks.translation import Translator
    from attnkit.tasks.translation.markup import default_aligner, translate_document
    from test_hf_export import _away_from_init

    ckpt = saved_tiny_transformer(
        tmp_path / "g", seed=0, perturb=_away_from_init, norm_first=True, alignment_layer=1, alignment_head=3
    )
    out = export_huggingface(ckpt, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["attnkit_alignment_heads"] == [[1, 3]]
    ours, hf = Translator.load(ckpt), Translator.load(str(out))
    _short(ours, hf)
    aligner = default_aligner(hf)
    r = aligner.reading
    assert (r.method, r.layer, r.head, r.shifted, r.both_ways) == ("guided", 1, 3, True, "intersection")
    want = list(default_aligner(ours).align(PAIRS))
    assert list(aligner.align(PAIRS)) == want
    assert want != list(default_aligner(hf, "attention").align(PAIRS))  # raw attention would move tags elsewhere
    assert (
        translate_document(hf, DOC, "html", beam_size=1).text == translate_document(ours, DOC, "html", beam_size=1).text
    )
    doc = tmp_path / "doc.html"
    doc.write_text(DOC, encoding="utf-8")
    got = {}
    for model in (ckpt, out):  # the command line: the HF folder writes the attnkit model's document
        assert cli_main(["translate", "--model", str(model), "--format", "html", "--file", str(doc)]) == 0
        got[model] = capsys.readouterr().out
    assert got[out] == got[ckpt] and got[out].count("<b>") == 1
    (tmp_path / "s.es").write_text("".join(" ".join(s) + "\n" for s, _ in PAIRS), encoding="utf-8")
    (tmp_path / "s.en").write_text("".join(" ".join(t) + "\n" for _, t in PAIRS), encoding="utf-8")
    for model in (ckpt, out):  # attnkit align: the guided head by default, for the folder as for the model
        argv = ["align", "--model", str(model), "--src", str(tmp_path / "s.es"), "--tgt", str(tmp_path / "s.en")]
        assert cli_main([*argv, "--no-progress", "--output", str(tmp_path / f"{model.name}.align")]) == 0
    capsys.readouterr()
    assert (tmp_path / "hf.align").read_text() == (tmp_path / "g.align").read_text()
    assert (tmp_path / "hf.align").read_text().strip()

    # a folder without the key aligns by its attention; a malformed key is refused, naming it
    config.pop("attnkit_alignment_heads")
    (out / "config.json").write_text(json.dumps(config))
    assert default_aligner(Translator.load(str(out))).reading.method == "attention"
    config["attnkit_alignment_heads"] = [[3, 1]]  # the model has 2 decoder layers
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(Exception, match="attnkit_alignment_heads must be"):
        Translator.load(str(out))


def test_a_model_without_a_guided_head_exports_no_alignment_heads(tmp_path):
    pytest.importorskip("transformers")
    from attnkit.deploy.hf_export import export_huggingface
    from test_hf_export import _away_from_init

    ckpt = saved_tiny_transformer(tmp_path / "p", seed=0, perturb=_away_from_init, norm_first=True)
    out = export_huggingface(ckpt, tmp_path / "hf")
    assert "attnkit_alignment_heads" not in json.loads((out / "config.json").read_text())


# ------------------------------------------------------------------ split over processes


def test_processes_2_write_the_one_process_document_byte_for_byte(tmp_path, capsys):
    """300 blocks: 5 translation batches of 64 and 2 alignment blocks of 256 pairs, so each of the two workers
    gets whole batches of both calls; the document must be the one-process run's, byte for byte."""
    import random

    rng = random.Random(3)
    words = [
        "En",
        "el",
        "principio",
        "creó",
        "Dios",
        "los",
        "cielos",
        "y",
        "la",
        "tierra",
        "luz",
        "agua",
        "tarde",
        "mañana",
        "día",
    ]
    blocks = []
    for k in range(300):
        w = [rng.choice(words) for _ in range(rng.randint(1, 9))]
        a = rng.randrange(len(w))
        w[a] = f"<b>{w[a]}</b>"
        blocks.append(f"<p id='p{k}'>{' '.join(w)}</p>")
    doc = tmp_path / "doc.html"
    doc.write_text("<div>\n" + "\n".join(blocks) + "\n</div>\n", encoding="utf-8")
    ckpt = _guided(tmp_path, max_len=24)
    argv = ["translate", "--model", str(ckpt), "--format", "html", "--file", str(doc), "--beam", "2"]
    assert cli_main([*argv, "--output", str(tmp_path / "one.html")]) == 0
    assert cli_main([*argv, "--output", str(tmp_path / "two.html"), "--processes", "2"]) == 0
    err = capsys.readouterr().err
    assert "300 blocks translated" in err, err
    assert (tmp_path / "two.html").read_bytes() == (tmp_path / "one.html").read_bytes()
    assert cli_main(["translate", "--format", "html", "--processes", "2"]) != 0  # a document on stdin: refused
    assert "--file" in capsys.readouterr().err
