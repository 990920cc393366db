"""Markup translation: the tag projection against hand-made links, and whole documents (HTML, XML,
Markdown) through the shipped Spanish → English Transformer: every tag back once, nesting valid, the
output parses, what is not text kept byte for byte, and the repairs and errors of bad input."""

import random
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from attnkit.alignment.markup import TagSpan, project_spans, proportional_spans
from attnkit.cli import main as cli_main
from attnkit.errors import InputError
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.markup import decode_document, translate_document

# ------------------------------------------------------------------ projection, on hand-made links


def test_a_tag_goes_to_the_words_its_words_link_to():
    # "la casa roja" -> "the red house": <b>roja</b> (source word 2) -> "red" (target word 1)
    links = {(0, 0), (1, 2), (2, 1)}
    assert project_spans([TagSpan(2, 3)], links, 3, 3) == [(1, 2)]
    # a tag over two source words spans from the first to the last target word they link to
    assert project_spans([TagSpan(1, 3)], links, 3, 3) == [(1, 3)]


def test_nested_tags_stay_nested():
    # <b>a <i>b c</i></b> d, where c links outside b's other words' targets
    links = {(0, 3), (1, 1), (2, 0), (3, 2)}
    b, i = project_spans([TagSpan(0, 3), TagSpan(1, 3, parent=0)], links, 4, 4)
    assert b == (0, 4) and i == (0, 2)
    assert b[0] <= i[0] <= i[1] <= b[1]


def test_adjacent_tags_swap_without_overlapping():
    # <b>casa</b><i>roja</i> -> <i>red</i> <b>house</b>
    assert project_spans([TagSpan(0, 1), TagSpan(1, 2)], {(0, 1), (1, 0)}, 2, 2) == [(1, 2), (0, 1)]
    # siblings whose targets interleave are cut so that they do not overlap, and neither is dropped
    spans = project_spans([TagSpan(0, 1), TagSpan(1, 2)], {(0, 0), (0, 2), (1, 1)}, 2, 3)
    assert spans == [(0, 3), (3, 3)]


def test_unaligned_tags_go_where_their_position_says():
    # a tag over source word 1 of 4 whose word links to nothing: proportionally, target words 2..4 of 8
    assert project_spans([TagSpan(1, 2)], {(0, 0), (3, 7)}, 4, 8) == [(2, 4)]
    assert proportional_spans([TagSpan(1, 2)], 4, 8) == [(2, 4)]
    # an empty element goes after the target word its left neighbour links to, else before its right one's
    assert project_spans([TagSpan(2, 2)], {(1, 5), (2, 0)}, 3, 6) == [(6, 6)]
    assert project_spans([TagSpan(1, 1)], {(1, 3)}, 3, 6) == [(3, 3)]
    # no words at all on the target side: every tag still comes back, empty
    assert project_spans([TagSpan(0, 2), TagSpan(1, 1, parent=0)], (), 2, 0) == [(0, 0), (0, 0)]


def test_projection_refuses_what_is_not_a_tree_or_a_link():
    with pytest.raises(ValueError, match=r"spans\[1\].*not inside its parent"):
        project_spans([TagSpan(0, 1), TagSpan(1, 2, parent=0)], (), 2, 2)
    with pytest.raises(ValueError, match="links"):
        project_spans([TagSpan(0, 1)], {(0, 5)}, 2, 2)


def _random_tree(rng, n):
    spans = []

    def grow(lo, hi, parent, depth):
        pos = lo
        while pos <= hi and rng.random() < 0.6 and len(spans) < 8:
            a = rng.randint(pos, hi)
            b = rng.randint(a, hi)
            spans.append(TagSpan(a, b, parent))
            if depth < 2:
                grow(a, b, len(spans) - 1, depth + 1)
            pos = b + (b == a)

    grow(0, n, None, 0)
    return spans


def test_projection_always_gives_a_valid_tree():
    rng = random.Random(0)
    for _ in range(300):
        n, m = rng.randint(0, 7), rng.randint(0, 7)
        spans = _random_tree(rng, n)
        links = {(rng.randrange(n), rng.randrange(m)) for _ in range(rng.randint(0, 10))} if n and m else set()
        out = project_spans(spans, links, n, m)
        assert len(out) == len(spans)
        for k, (s, e) in enumerate(out):  # each inside its parent (or the sentence)
            lo, hi = out[spans[k].parent] if spans[k].parent is not None else (0, m)
            assert lo <= s <= e <= hi
        for k in range(len(spans)):  # siblings disjoint
            for j in range(k):
                if spans[j].parent == spans[k].parent:
                    (a, b), (c, d) = out[j], out[k]
                    assert b <= c or d <= a


# ------------------------------------------------------------------ documents, through the shipped model


@pytest.fixture(scope="module")
def tr():
    return Translator.load("transformer-es-en")


class _Nesting(HTMLParser):
    """An independent check: inline tags close in the order they opened."""

    VOID = frozenset({"br", "img", "hr", "meta", "link", "input", "wbr"})

    def __init__(self):
        super().__init__()
        self.stack, self.ok, self.starts = [], True, []

    def handle_starttag(self, tag, attrs):
        self.starts.append((tag, tuple(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.ok = False


def _parse(doc):
    p = _Nesting()
    p.feed(doc)
    p.close()
    return p


HTML = (
    "<!DOCTYPE html>\n<html><head><style>p { color: red; }</style></head>\n<body>\n"
    '  <p>En el principio creó <a href="/dios" title="Dios">Dios</a> los <em>cielos</em> y la <i>tierra</i>.</p>\n'
    "  <p>Y <b>la <i>luz</i></b> fue buena &amp; <code>x &lt; 1</code> siempre.<br>Y dijo Dios.</p>\n"
    '  <div translate="no">No traducir esto</div>\n</body></html>\n'
)


def test_html_tags_come_back_once_each_nested_and_the_rest_as_written(tr):
    out = translate_document(tr, HTML, "html", beam_size=1)
    assert out.blocks == 2 and out.notes == []
    src, dst = _parse(HTML), _parse(out.text)
    assert dst.ok and not dst.stack  # every tag closed, in order
    assert sorted(dst.starts) == sorted(src.starts)  # every tag, with its attributes, exactly once
    for kept in (
        "<code>x &lt; 1</code>",
        "<style>p { color: red; }</style>",
        '<div translate="no">No traducir esto</div>',
    ):
        assert out.text.count(kept) == 1
    assert out.text.startswith("<!DOCTYPE html>\n<html><head>") and out.text.endswith("</div>\n</body></html>\n")
    assert "creó" not in out.text and "God" in out.text  # the text was translated
    assert " & " not in out.text  # the entity's character escaped again


def test_xml_output_parses_and_keeps_empty_elements(tr):
    doc = (
        '<?xml version="1.0"?>\n<doc lang="es">\n  <p>En el principio creó <b>Dios</b> los cielos<x id="1"/> '
        'y la <i>tierra</i>.</p>\n  <p translate="no">Y la tierra</p>\n</doc>\n'
    )
    out = translate_document(tr, doc, "xml", beam_size=1).text
    root = ET.fromstring(out.encode())
    p = root.findall("p")
    assert sorted(e.tag for e in p[0]) == ["b", "i", "x"] and p[0].find("x").attrib == {"id": "1"}
    assert p[1].text == "Y la tierra" and root.attrib == {"lang": "es"}
    assert out.startswith('<?xml version="1.0"?>\n<doc lang="es">\n  <p>') and out.endswith("</p>\n</doc>\n")


def test_markdown_keeps_code_link_targets_and_emphasis(tr):
    doc = '# Título\n\nEn el principio creó **Dios** los [cielos](http://x.org/a "t") y `la tierra`.\n\n```\ncódigo\n```\n'
    out = translate_document(tr, doc, "markdown", beam_size=1).text
    from markdown_it import MarkdownIt

    kinds = [t.type for t in MarkdownIt("commonmark").parse(out)[4].children or []]  # the paragraph's inline
    assert kinds.count("strong_open") == kinds.count("strong_close") == 1
    assert kinds.count("link_open") == 1 and kinds.count("code_inline") == 1
    assert out.count('](http://x.org/a "t")') == 1 and out.count("`la tierra`") == 1
    assert out.endswith("\n\n```\ncódigo\n```\n") and out.startswith("# ")


@pytest.mark.parametrize(
    ("fmt", "doc"),
    [
        (
            "html",
            '<html>\n<head><script>var a = "hola";</script><style>b{}</style></head>\n'
            '<body class="x"><!-- hola mundo --><code>print("hola")</code>\n<pre>  dos\n espacios</pre>\n'
            '<img src="a.png" alt="una casa">\n</body></html>\n',
        ),
        ("xml", '<?xml version="1.0"?>\n<doc a="hola">\n  <e/>\n  <!-- hola -->\n  <p translate="no">hola</p>\n</doc>'),
        ("markdown", "```python\nprint('hola')\n```\n\n    código sangrado\n\n<div>hola</div>\n"),
    ],
)
def test_a_document_with_nothing_to_translate_comes_back_byte_identical(tr, fmt, doc):
    out = translate_document(tr, doc, fmt, beam_size=1)
    assert out.text == doc and out.blocks == 0


def test_unclosed_and_stray_tags_are_repaired_and_said(tr):
    out = translate_document(tr, "<p>Y la <b>luz</b> <i>fue buena</p><p>Y dijo</u> Dios.</p>", "html", beam_size=1)
    assert any("closed <i> left open" in n for n in out.notes)
    assert any("stray </u>" in n for n in out.notes)
    assert out.text.count("<i>") == out.text.count("</i>") == 1 and out.text.count("</u>") == 1
    assert out.text.index("<i>") < out.text.index("</i>") < out.text.index("</p>")


def test_a_tag_inside_a_word_wraps_the_word(tr):
    out = translate_document(tr, "<p>Y dijo Di<b>os</b>: sea la luz.</p>", "html", beam_size=1)
    assert any("inside a word" in n for n in out.notes)
    assert out.text.count("<b>") == out.text.count("</b>") == 1 and _parse(out.text).ok


def test_empty_elements_are_kept(tr):
    out = translate_document(tr, "<p>Y dijo <b></b>Dios: <span/>sea la luz.</p>", "html", beam_size=1).text
    assert out.count("<b></b>") == 1 and out.count("<span/>") == 1


def test_a_block_longer_than_the_input_is_split_at_sentence_ends(tr, monkeypatch):
    monkeypatch.setattr(tr, "max_src_len", 14)
    doc = "<p>Y dijo <b>Dios</b>: sea la luz. Y fue la luz. Y vio Dios que la <i>luz</i> era buena.</p>"
    out = translate_document(tr, doc, "html", beam_size=1)
    assert any("split 1 block" in n for n in out.notes)
    assert _parse(out.text).ok and out.text.count("<b>") == 1 and out.text.count("<i>") == 1


def test_bad_xml_and_bad_encoding_are_one_line_errors(tr):
    with pytest.raises(InputError, match=r"not well-formed XML: mismatched tag at line 1") as e:
        translate_document(tr, "<doc><p>hola</doc>", "xml")
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match=r"doc.html: not UTF-8 \(byte 0xff at line 2\)"):
        decode_document(b"<p>\n\xff</p>", "doc.html")


# ------------------------------------------------------------------ the command


def test_the_command_writes_the_document_and_says_its_repairs(tmp_path, capsys):
    src = tmp_path / "a.html"
    src.write_text("<p>Y la <b>luz</b> <i>fue buena</p>\n", encoding="utf-8")
    out = tmp_path / "b.html"
    argv = ["translate", "--format", "html", "--file", str(src), "--output", str(out), "--beam", "1"]
    assert cli_main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("attnkit translate: ") and "closed <i> left open" in err[0] and len(err) == 2
    text = out.read_text(encoding="utf-8")
    assert text.endswith("</p>\n") and text.count("<b>") == 1 and _parse(text).ok


def test_the_command_refuses_what_does_not_go_with_a_document(tmp_path, capsys):
    bad = tmp_path / "bad.html"
    bad.write_bytes(b"<p>\xff</p>")
    assert cli_main(["translate", "--format", "html", "--file", str(bad)]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    assert cli_main(["translate", "--format", "html", "hola"]) == 2
    assert "give no text arguments" in capsys.readouterr().err
    assert cli_main(["translate", "--output", str(tmp_path / "x"), "hola"]) == 2
    assert "--format" in capsys.readouterr().err


def test_tags_move_by_the_guided_head_unless_told(tr):
    from attnkit.tasks.translation.markup import default_aligner

    assert default_aligner(tr).describe().startswith("guided: layer 2 head 1")
    assert default_aligner(tr, "attention").describe().startswith("attention:")


# ------------------------------------------------------------------ the JSON API


@pytest.fixture(scope="module")
def api():
    testclient = pytest.importorskip("fastapi.testclient")
    from attnkit.explorer.app import ServeOptions, create_app, load_models

    app = create_app(load_models(["transformer-es-en"]), options=ServeOptions(max_text_chars=400, heavy_beam=2))
    return testclient.TestClient(app, base_url="http://127.0.0.1")


def test_the_api_translates_a_document(api):
    doc = "<p>Y dijo <b>Dios</b>: sea la luz.</p>\n<pre>hola</pre>\n"
    r = api.post("/api/translate-document", json={"document": doc, "format": "html", "beam": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "transformer-es-en" and body["blocks"] == 1 and body["notes"] == []
    assert body["aligned_by"].startswith("guided:") and body["document"].endswith("</p>\n<pre>hola</pre>\n")
    assert body["document"].count("<b>") == 1 and _parse(body["document"]).ok


def test_the_api_translates_an_xliff_file(api):
    doc = '<xliff version="1.2"><file><body><trans-unit id="1"><source>Y dijo <g id="1">Dios</g>.</source></trans-unit></body></file></xliff>'
    r = api.post("/api/translate-document", json={"document": doc, "format": "xliff", "beam": 1})
    assert r.status_code == 200, r.text
    target = ET.fromstring(r.json()["document"]).find("file/body/trans-unit/target")
    assert [(e.tag, e.get("id")) for e in target] == [("g", "1")] and r.json()["blocks"] == 1


@pytest.mark.parametrize(
    ("ask", "status", "words"),
    [
        ({"document": "<doc><p>hola</doc>", "format": "xml"}, 400, "mismatched tag at line 1"),
        ({"document": "hola", "format": "pdf"}, 400, "format must be one of"),
        ({"document": " ", "format": "html"}, 400, "empty"),
        ({"document": "<p>" + "hola " * 100 + "</p>", "format": "html"}, 413, "--max-text-chars"),
        ({"document": "<p>hola</p>", "format": "html", "beam": 3}, 413, "--heavy-beam"),
        ({"document": "<p>hola</p>", "format": "html", "method": "eflomal"}, 400, "method must be"),
    ],
)
def test_the_api_refuses_bad_documents_with_a_4xx(api, ask, status, words):
    r = api.post("/api/translate-document", json={"beam": 1, **ask})
    assert r.status_code == status and words in r.json()["error"]


def test_a_block_the_model_cannot_read_is_kept_as_it_was(tr):
    doc = "<p>\u200b\u200b</p>\n<p>Y dijo Dios.</p>\n"
    out = translate_document(tr, doc, "html", beam_size=1)
    assert out.text.startswith("<p>\u200b\u200b</p>\n<p>") and out.blocks == 1
    assert out.notes == ["kept the block at line 1 as it was: no word the model can read"]


def test_a_markdown_paragraph_over_several_quoted_lines_is_translated_in_its_quote(tr):
    doc = "> Y dijo Dios:\n> sea **la luz**.\n\n- En el principio\n  creó Dios los cielos.\n- y la tierra.\n"
    out = translate_document(tr, doc, "markdown", beam_size=1)
    assert out.notes == [] and out.blocks == 3
    lines = out.text.split("\n")
    assert lines[0].startswith("> ") and lines[1] == "" and lines[2].startswith("- ") and lines[3].startswith("- ")
    assert out.text.count("**") == 2 and "creó" not in out.text


def test_a_byte_order_mark_and_crlf_line_ends_are_kept(tr):
    doc = "\ufeff<p>Y dijo <b>Dios</b>.</p>\r\n<p>Y la luz.</p>\r\n"
    out = translate_document(tr, doc, "html", beam_size=1)
    assert out.text.startswith("\ufeff<p>") and out.text.count("</p>\r\n") == 2 and out.notes == []


def test_the_command_reads_stdin_and_keeps_an_earlier_output_when_it_fails(tmp_path, capsys, monkeypatch):
    import io
    import sys

    def stdin(data: bytes):
        s = io.TextIOWrapper(io.BytesIO(data))
        s.isatty = lambda: False
        monkeypatch.setattr(sys, "stdin", s)

    stdin(b"Y dijo **Dios**.\n")
    assert cli_main(["translate", "--format", "markdown", "--beam", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("**") == 2 and out.endswith("\n") and "dijo" not in out
    old = tmp_path / "out.xml"
    old.write_text("my old translation")
    stdin(b"<doc><p>Y dijo</doc>")
    assert cli_main(["translate", "--format", "xml", "--output", str(old)]) == 2
    assert "mismatched tag" in capsys.readouterr().err
    assert old.read_text() == "my old translation" and [p.name for p in tmp_path.iterdir()] == ["out.xml"]


# ------------------------------------------------------------------ XLIFF

XLIFF_12 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="es" target-language="en" datatype="html" original="p.html">
    <body>
      <trans-unit id="1">
        <source>En el principio creó <g id="1">Dios</g> los cielos<x id="2"/> y la tierra.</source>
      </trans-unit>
      <trans-unit id="2">
        <source>Y dijo Dios: <ph id="3">&lt;br/&gt;</ph>sea la <g id="4" ctype="bold">luz</g>.</source>
        <target state="new">old words</target>
      </trans-unit>
      <trans-unit id="3" translate="no">
        <source>Reina-Valera</source>
      </trans-unit>
    </body>
  </file>
</xliff>
"""

XLIFF_20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="es" trgLang="en">
  <file id="f1">
    <unit id="u1">
      <segment>
        <source>En el principio creó <pc id="1">Dios</pc> los cielos<ph id="2" equiv-text="{0}"/> y la tierra.</source>
      </segment>
      <segment>
        <source>Y dijo <pc id="3"><pc id="4">Dios</pc> sea</pc> la luz.</source>
        <target/>
      </segment>
    </unit>
  </file>
</xliff>
"""

NS12 = "{urn:oasis:names:tc:xliff:document:1.2}"
NS20 = "{urn:oasis:names:tc:xliff:document:2.0}"


def _placeholders(element) -> list[tuple]:
    """Every element inside ``element``: its name, attributes and (for ``<ph>``, whose content is code) text."""
    return sorted(
        (c.tag, tuple(sorted(c.attrib.items())), c.text if "ph" in c.tag else "")
        for c in element.iter()
        if c is not element
    )


def test_xliff_12_sources_go_into_their_targets_with_their_placeholders(tr):
    out = translate_document(tr, XLIFF_12, "xliff", beam_size=1)
    root = ET.fromstring(out.text.encode())
    for unit in list(root.iter(f"{NS12}trans-unit"))[:2]:
        source, target = unit.find(f"{NS12}source"), unit.find(f"{NS12}target")
        assert _placeholders(target) == _placeholders(source) and target.text  # every one once, as written
    assert out.blocks == 2 and "old words" not in out.text and '<target state="new">' in out.text
    # the sources and the unit marked translate="no" are as they were
    for line in XLIFF_12.splitlines():
        if "<source>" in line or "Reina-Valera" in line:
            assert line in out.text
    assert out.text.count("<target") == 2


def test_xliff_20_nested_pc_and_an_empty_target(tr):
    out = translate_document(tr, XLIFF_20, "xliff", beam_size=1)
    root = ET.fromstring(out.text.encode())
    segments = list(root.iter(f"{NS20}segment"))
    assert [len(s.findall(f"{NS20}target")) for s in segments] == [1, 1]
    first, second = (s.find(f"{NS20}target") for s in segments)
    assert sorted((e.tag, e.get("id")) for e in first) == [(f"{NS20}pc", "1"), (f"{NS20}ph", "2")]
    assert first.find(f"{NS20}ph").get("equiv-text") == "{0}" and first.find(f"{NS20}pc").text
    outer = second.find(f"{NS20}pc")
    assert outer.get("id") == "3" and outer.find(f"{NS20}pc").get("id") == "4"  # the nesting kept
    assert "\n        <target>" in out.text  # a new target on its own line, indented as its source


def test_xliff_with_nothing_to_translate_comes_back_byte_identical(tr):
    doc = '<?xml version="1.0"?>\n<xliff version="1.2"><file><body>\n<trans-unit id="1" translate="no"><source>Dios</source></trans-unit>\n<trans-unit id="2"><source><x id="1"/></source></trans-unit>\n</body></file></xliff>\n'
    out = translate_document(tr, doc, "xliff", beam_size=1)
    assert out.text == doc and out.blocks == 0
