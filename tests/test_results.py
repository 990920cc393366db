"""decoding.search is the one greedy-or-beam choice, and the inference results are typed."""

import pytest
import torch

from attnkit.decoding import beam_search, greedy_search, search
from attnkit.tasks.captioning import Caption, Captioner
from attnkit.tasks.translation import Translation, Translator


class Toy:
    """A 5-token model whose next-token distribution depends only on the previous token."""

    def __init__(self):
        g = torch.Generator().manual_seed(3)
        self.table = torch.log_softmax(torch.randn(5, 5, generator=g) * 2, -1)

    def start(self, x):
        return torch.zeros(x.size(0))

    def step(self, prev, state):
        return self.table[prev], state, None

    def reorder(self, state, index, beams_only=False):
        return state[index]


def test_search_is_greedy_for_one_beam_and_the_best_of_a_beam_otherwise():
    m, inputs = Toy(), {"x": torch.zeros(3, 1)}
    kw = dict(bos_id=0, eos_id=1, max_len=6)
    assert [h.tokens for h in search(m, inputs, beam_size=1, **kw)] == [
        h.tokens for h in greedy_search(m, inputs, **kw)
    ]
    got = search(m, inputs, beam_size=3, length_penalty=0.6, **kw)
    want = [n[0] for n in beam_search(m, inputs, beam_size=3, length_penalty=0.6, **kw)]
    assert [(h.tokens, h.score) for h in got] == [(h.tokens, h.score) for h in want]
    for bad in (0, -3):
        with pytest.raises(ValueError, match="beam_size must be an int >= 1"):
            search(m, inputs, beam_size=bad, **kw)


def test_results_are_typed_and_optional_parts_are_none():
    tr = Translator.load("transformer-es-en")
    plain, with_attn = tr.translate(["Jesús lloró."]), tr.translate(["Jesús lloró."], return_attention=True)
    assert isinstance(plain[0], Translation) and plain[0].attention is None and "attention" not in plain[0]
    r = with_attn[0]
    assert r.translation == plain[0].translation and r.source == "Jesús lloró."
    assert r.attention.shape == (len(r.target_pieces), len(r.source_pieces))
    assert r["translation"] == r.translation and r.get("attention") is r.attention  # mapping reads still work
    cm = Captioner.load("captioner-soft")
    (c,) = cm.caption(torch.zeros(1, 1, cm.canvas, cm.canvas))
    assert isinstance(c, Caption) and c.caption == " ".join(c.words) and c.attention.shape[0] == len(c.words)
