"""The shipped ``transformer-es-en`` as a float32 CTranslate2 export against the PyTorch engine, on an HTML
document of the first N test verses with random tags (``markup_transfer.draw_tags``): blocks identical, blocks
with the same words (tags stripped), and of those, blocks identical with their tags, at beam 1 and beam 5.

    PYTHONPATH=src python benchmarks/markup_ct2_parity.py 200 benchmarks/results/markup_ct2_parity.json
"""

import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from attnkit.data.datasets.bible import load_pairs
from attnkit.deploy.ct2_align import CT2Aligner
from attnkit.deploy.ct2_engine import CT2Translator
from attnkit.deploy.ct2_export import export_ctranslate2
from attnkit.tasks.translation import Translator
from attnkit.tasks.translation.markup import translate_document
from markup_transfer import _stripped, as_html, draw_tags

n = int(sys.argv[1])
rng = random.Random(0)
verses = load_pairs("test", limit=n)
doc = (
    "\n".join(
        as_html(p.src.split(), draw_tags(rng, len(p.src.split()), set(range(len(p.src.split()))))) for p in verses
    )
    + "\n"
)
d = Path(tempfile.mkdtemp())
out = export_ctranslate2("src/attnkit/pretrained/transformer-es-en", d / "ct2", quantization="float32")
pt, ct2 = Translator.load("transformer-es-en"), CT2Translator.load(out, device="cpu")
report = {"blocks": n}
for beam in (1, 5):
    a = translate_document(pt, doc, "html", beam_size=beam).text.splitlines()
    b = translate_document(ct2, doc, "html", aligner=CT2Aligner(ct2), beam_size=beam).text.splitlines()
    strip = _stripped
    same_words = sum(strip(x) == strip(y) for x, y in zip(a, b))
    same = sum(x == y for x, y in zip(a, b))
    same_tags_given_words = sum(x == y for x, y in zip(a, b) if strip(x) == strip(y))
    report[f"beam{beam}"] = {
        "identical_blocks": same,
        "same_words": same_words,
        "identical_given_same_words": same_tags_given_words,
    }
    print(beam, report[f"beam{beam}"], flush=True)
Path(sys.argv[2]).write_text(json.dumps(report, indent=1) + "\n")
