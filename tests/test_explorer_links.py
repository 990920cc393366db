"""The explorer's links: the links read from the matrix it shows (attention, or the chosen attribution
method's word scores) both ways, as `attnkit align --symmetrize grow-diag-final-and` reads them."""

import pytest

from attnkit.alignment import symmetrize
from attnkit.alignment.gold import DEV_VERSES, load_gold
from attnkit.explorer.payload import translation_payload
from attnkit.explorer.schema import Translation
from attnkit.tasks.translation import Translator


def both_ways_by_loops(matrix):
    """Row argmax (first maximum) and column argmax by plain loops, then grow-diag-final-and."""
    rows = {(max(range(len(r)), key=lambda i: (r[i], -i)), j) for j, r in enumerate(matrix)}
    cols = set()
    for i in range(len(matrix[0])):
        col = [matrix[j][i] for j in range(len(matrix))]
        cols.add((i, max(range(len(col)), key=lambda j: (col[j], -j))))
    return sorted([i, j] for i, j in symmetrize(rows, cols, "grow-diag-final-and"))


@pytest.mark.parametrize("method", [None, "attention_norm"])
def test_payload_links_are_the_shown_matrix_read_both_ways(method):
    verse = load_gold()[DEV_VERSES + 3]
    tr = Translator.load("rnnsearch-es-en")
    p = translation_payload(tr, " ".join(verse.source), target=" ".join(verse.target), method=method)
    Translation.model_validate(p)  # the schema knows the field
    view = p["attribution"] if method else p["words"]
    matrix = view["words"] if method else view["attention"]
    assert view["links"] == both_ways_by_loops(matrix)
    assert {j for _, j in view["links"]} == set(range(len(verse.target)))  # every target word has a link
