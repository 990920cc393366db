"""Attention through the one interface every translation model implements, and piece → word attention."""

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from attnkit.alignment import word_attention, word_spans, words_from_pieces
from attnkit.pretrained import resolve_model
from attnkit.tasks.translation import Translator

SOURCE = "Y dijo Dios: Sea la luz: y fué la luz."
REFERENCE = "God said, “Let there be light,” and there was light."


@pytest.fixture(scope="module", params=["rnnsearch-es-en", "rnnencdec-es-en", "transformer-es-en"])
def shipped(request):
    return request.param, Translator.load(resolve_model(request.param))


def test_forced_attention_of_every_shipped_model(shipped):
    name, tr = shipped
    ta = tr.attention(SOURCE, REFERENCE)
    T, S = len(ta.target_pieces), len(ta.source_pieces)
    assert words_from_pieces(ta.source_pieces) == SOURCE.split()
    m = ta.maps
    if name == "rnnencdec-es-en":  # no attention: nothing to show, and it says so by None
        assert m.alignment is None and m.scores is None and m.cross is None
        assert ta.word_alignment()[2] is None
        return
    assert m.alignment.shape == (T, S)
    torch.testing.assert_close(m.alignment.sum(-1), torch.ones(T))
    if name == "transformer-es-en":
        L, H = m.cross.shape[:2]
        assert m.cross.shape == (L, H, T, S) and m.enc_self.shape == (L, H, S, S) and m.dec_self.shape[2:] == (T, T)
        torch.testing.assert_close(m.alignment, m.cross[-1].mean(0))
    else:  # the three steps: softmax of the raw scores is the weights; the context is their weighted sum
        torch.testing.assert_close(torch.softmax(m.scores, -1), m.alignment, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(m.context, m.alignment @ m.annotations, rtol=1e-4, atol=1e-5)
    # forced decoding of the model's own translation reproduces the search's attention
    r = tr.translate([SOURCE], beam_size=1, return_attention=True)[0]
    torch.testing.assert_close(tr.attention(SOURCE, r["tokens"]).maps.alignment, r["attention"], rtol=1e-4, atol=1e-5)
    src_words, tgt_words, wa = ta.word_alignment()
    assert wa.shape == (len(tgt_words), len(src_words))
    torch.testing.assert_close(wa.sum(-1), torch.ones(len(tgt_words)))


def test_a_padded_batch_of_pairs_gives_each_pair_the_maps_it_has_alone(shipped):
    """``attention_batch`` (one padded pass, as a server's batch draws its maps) equals each pair forced alone,
    every field cut to the pair's own rows and columns; texts and token ids as targets alike."""
    _, tr = shipped
    sources = [SOURCE, "Jesús lloró.", "En el principio crió Dios los cielos y la tierra."]
    targets = [REFERENCE, [int(t) for t in tr.tokenizer.encode("Jesus wept.")], "In the beginning God created."]
    batch = tr.attention_batch(sources, targets)
    for s, t, got in zip(sources, targets, batch):
        alone = tr.attention(s, t)
        assert got.source_pieces == alone.source_pieces and got.target_pieces == alone.target_pieces
        for f in ("alignment", "scores", "context", "annotations", "enc_self", "dec_self", "cross"):
            a, b = getattr(alone.maps, f), getattr(got.maps, f)
            if a is None:
                assert b is None, f
                continue
            assert a.shape == b.shape, (f, a.shape, b.shape)
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)  # -inf (scores at padding) compare equal
    with pytest.raises(ValueError, match="differ in number: 2 and 1"):
        tr.attention_batch(sources[:2], targets[:1])


def test_a_guided_model_reads_its_guided_head_from_the_same_pass(shipped):
    """The shipped Transformer was trained with guided alignment, its head on the rows of the steps whose
    input is each target piece: ``attention_batch`` forces one step more to get them. Its maps are still
    those of the plain pass (no extra step, the model called directly), and its ``guided`` rows give the
    word matrix that ``attnkit align``'s aligner reads in a pass of its own (words encoded one by one)."""
    from attnkit.tasks.translation.alignment import AttentionReading, ModelAligner, has_guided_head

    name, tr = shipped
    sources = [SOURCE, "Jesús lloró.", "En el principio crió Dios los cielos y la tierra."]
    targets = [REFERENCE, "Jesus wept.", "In the beginning God created the heavens and the earth."]
    batch = tr.attention_batch(sources, targets)
    if not has_guided_head(tr):
        assert name != "transformer-es-en" and all(got.guided is None for got in batch)
        return
    aligner = ModelAligner(tr, AttentionReading("guided"))
    assert (aligner.reading.layer, aligner.reading.head, aligner.reading.input_step) == (2, 1, True)
    for s, t, got in zip(sources, targets, batch):
        src = torch.tensor(tr.encode_sources([s]))
        tgt = tr.tokenizer.encode(t)
        plain = tr.model.attention_maps(
            src, torch.tensor([src.shape[1]]), torch.tensor([[tr.tokenizer.bos_id, *tgt[:-1]]])
        )
        for f in ("alignment", "enc_self", "dec_self", "cross"):
            torch.testing.assert_close(getattr(got.maps, f), getattr(plain, f)[0], rtol=1e-4, atol=1e-5)
        assert got.guided.shape == (len(tgt), src.shape[1])
        torch.testing.assert_close(got.guided.sum(-1), torch.ones(len(tgt)))
        words = (words_from_pieces(got.source_pieces), words_from_pieces(got.target_pieces))
        theirs = aligner.word_attention_batch([words])[0]
        torch.testing.assert_close(word_attention(got.guided, got.source_pieces, got.target_pieces), theirs)
        # not the plain rows of that head: the input-step rows are one step later
        assert not torch.allclose(got.guided, got.maps.cross[1, 0], atol=1e-3)


def test_empty_target_is_a_clear_error(shipped):
    _, tr = shipped
    with pytest.raises(ValueError, match="target is empty"):
        tr.attention(SOURCE, "  ")
    with pytest.raises(ValueError, match="no output token"):
        tr.attention(SOURCE, [])


def _loop_reference(attn, src_pieces, tgt_pieces):
    """Plain loops over words: mean over a target word's pieces of the sum over a source word's pieces."""

    def groups(pieces):
        out = []
        for i, p in enumerate(pieces):
            if p.startswith("▁") or not out:
                out.append([])
            out[-1].append(i)
        return out

    sg, tg = groups(src_pieces), groups(tgt_pieces)
    ref = torch.zeros(len(tg), len(sg), dtype=torch.float64)
    for a, trow in enumerate(tg):
        for b, scol in enumerate(sg):
            ref[a, b] = sum(float(attn[t, s]) for t in trow for s in scol) / len(trow)
    return ref


pieces = st.lists(st.sampled_from(["▁a", "▁bb", "c", "d", "▁", "."]), min_size=1, max_size=9)


@settings(max_examples=60, deadline=None)
@given(src=pieces, tgt=pieces, seed=st.integers(0, 10_000))
def test_word_attention_equals_a_plain_loop_and_keeps_rows_normalised(src, tgt, seed):
    g = torch.Generator().manual_seed(seed)
    attn = torch.rand(len(tgt), len(src), generator=g, dtype=torch.float64).softmax(-1)
    wa = word_attention(attn, src, tgt)
    torch.testing.assert_close(wa, _loop_reference(attn, src, tgt))
    torch.testing.assert_close(wa.sum(-1), torch.ones(len(word_spans(tgt)), dtype=torch.float64))


def test_word_helpers_and_errors():
    assert word_spans(["▁En", "▁el", "▁princip", "io"]) == [[0], [1], [2, 3]]
    assert words_from_pieces(["▁En", "▁el", "▁princip", "io"]) == ["En", "el", "principio"]
    with pytest.raises(ValueError, match=r"expected \(1, 2\)"):
        word_attention(torch.ones(2, 2), ["▁a", "▁b"], ["▁x"])
