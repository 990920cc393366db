"""Greedy and beam search against a toy Markov decoder whose optimum can be brute-forced."""

import itertools

import pytest
import torch

from attnkit.decoding import IncrementalDecoder, beam_search, gnmt_length_penalty, greedy_search

V, BOS, EOS, NK = 5, 4, 0, 3  # tokens 0..3 can be generated (0 = eos); 4 = bos only


class MarkovDecoder:
    """log p(next | prev, example) = log_softmax(T[prev] + bias[example]); bos is never generated.

    The state is (bias rows, step counter per row); attention is a fake, row- and step-specific
    distribution so the test can check it follows reorders.
    """

    def __init__(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.T = torch.randn(V, V, generator=g) * 1.5
        self.calls = 0
        self.rows_per_call = []

    def start(self, bias):
        return {"bias": bias, "ex": torch.arange(bias.size(0)), "t": torch.zeros(bias.size(0), dtype=torch.long)}

    def logp(self, prev, bias):
        logits = self.T[prev] + bias
        logits[..., BOS] = float("-inf")
        return torch.log_softmax(logits, dim=-1)

    def step(self, prev, state):
        self.calls += 1
        self.rows_per_call.append(prev.size(0))
        lp = self.logp(prev, state["bias"])
        # attention encodes (example, previous token, step) so a wrong reorder shows up
        attn = torch.stack([state["ex"].float(), prev.float(), state["t"].float()], dim=1)
        new = dict(state, t=state["t"] + 1)
        return lp, new, attn

    def reorder(self, state, index):
        return {k: v.index_select(0, index) for k, v in state.items()}


def brute_force(model, bias_row, max_len, alpha):
    """Best finished sequence (ending in eos, at most max_len steps) under the length penalty."""
    best = None
    for L in range(1, max_len + 1):
        for body in itertools.product(range(1, V - 1), repeat=L - 1):
            seq = [*list(body), EOS]
            prev, score = BOS, 0.0
            for tok in seq:
                score += float(model.logp(torch.tensor([prev]), bias_row.unsqueeze(0))[0, tok])
                prev = tok
            pen = score / gnmt_length_penalty(L, alpha)
            if best is None or pen > best[0]:
                best = (pen, list(body), score)
    return best


def make_inputs(B=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    bias = torch.randn(B, V, generator=g)
    bias[:, EOS] -= 1.0  # make eos less eager so sequences have a few tokens
    return {"bias": bias}


def test_protocol_is_runtime_checkable():
    assert isinstance(MarkovDecoder(), IncrementalDecoder)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_large_beam_finds_exact_argmax(alpha):
    model, inputs = MarkovDecoder(), make_inputs(B=4)
    max_len = 4
    res = beam_search(model, inputs, beam_size=64, bos_id=BOS, eos_id=EOS, max_len=max_len, length_penalty=alpha)
    for b in range(4):
        pen, body, score = brute_force(model, inputs["bias"][b], max_len, alpha)
        hyp = res[b][0]
        assert hyp.finished
        assert hyp.tokens == body
        assert hyp.score == pytest.approx(score, abs=1e-5)
        assert hyp.penalized_score(alpha) == pytest.approx(pen, abs=1e-5)


@pytest.mark.parametrize("max_len", [1, 3, 8])
def test_beam_size_one_equals_greedy(max_len):
    model, inputs = MarkovDecoder(seed=3), make_inputs(B=5, seed=4)
    g = greedy_search(model, inputs, bos_id=BOS, eos_id=EOS, max_len=max_len, return_attention=True)
    bm = beam_search(model, inputs, beam_size=1, bos_id=BOS, eos_id=EOS, max_len=max_len, return_attention=True)
    for gh, (bh,) in zip(g, bm):
        assert gh.tokens == bh.tokens
        assert gh.score == bh.score  # bit-identical: same additions in the same order
        assert gh.finished == bh.finished
        assert torch.equal(gh.attention, bh.attention)


def test_batched_equals_per_sentence():
    model, inputs = MarkovDecoder(seed=5), make_inputs(B=4, seed=6)
    kw = dict(beam_size=3, bos_id=BOS, eos_id=EOS, max_len=6, length_penalty=0.6, n_best=2, return_attention=True)
    batched = beam_search(model, inputs, **kw)
    for b in range(4):
        single = beam_search(model, {"bias": inputs["bias"][b : b + 1]}, **kw)[0]
        assert len(single) == len(batched[b]) == 2
        for h1, h2 in zip(single, batched[b]):
            assert h1.tokens == h2.tokens
            assert h1.score == pytest.approx(h2.score, abs=1e-6)
            # example index column differs (0 vs b); the rest of the history must agree
            assert torch.equal(h1.attention[:, 1:], h2.attention[:, 1:])
            assert torch.all(h2.attention[:, 0] == b)


def test_attention_follows_back_pointers():
    model, inputs = MarkovDecoder(seed=7), make_inputs(B=3, seed=8)
    res = beam_search(model, inputs, beam_size=4, bos_id=BOS, eos_id=EOS, max_len=7, n_best=3, return_attention=True)
    for b, hyps in enumerate(res):
        for h in hyps:
            assert h.attention.shape == (len(h.tokens), NK)
            if len(h.tokens):
                # row t was produced at step t from previous token (bos, tokens[0], ...)
                assert h.attention[:, 0].eq(b).all()
                assert h.attention[:, 1].tolist() == [BOS, *h.tokens[:-1]]
                assert h.attention[:, 2].tolist() == list(range(len(h.tokens)))


def test_max_len_and_unfinished():
    model, inputs = MarkovDecoder(seed=9), make_inputs(B=3, seed=10)
    inputs["bias"][:, EOS] = -1e4  # eos essentially impossible
    g = greedy_search(model, inputs, bos_id=BOS, eos_id=EOS, max_len=5)
    bm = beam_search(model, inputs, beam_size=3, bos_id=BOS, eos_id=EOS, max_len=5, n_best=2)
    for h in g + [h for hs in bm for h in hs]:
        assert len(h.tokens) == 5 and not h.finished and EOS not in h.tokens and BOS not in h.tokens
        assert h.attention is None


def test_eos_first_gives_empty_hypothesis_and_stops_early():
    model, inputs = MarkovDecoder(seed=11), make_inputs(B=2, seed=12)
    inputs["bias"][:, EOS] = 1e4  # eos certain
    g = greedy_search(model, inputs, bos_id=BOS, eos_id=EOS, max_len=10, return_attention=True)
    assert all(h.tokens == [] and h.finished for h in g)
    assert g[0].attention.shape == (0, NK)
    model.calls = 0
    bm = beam_search(model, inputs, beam_size=3, bos_id=BOS, eos_id=EOS, max_len=10)
    assert all(hs[0].tokens == [] and hs[0].finished for hs in bm)
    assert model.calls <= 2  # the early-stop bound ends the search long before max_len


def test_finished_sentences_leave_the_batch():
    model, inputs = MarkovDecoder(seed=13), make_inputs(B=2, seed=14)
    inputs["bias"][0, EOS] = 1e4  # sentence 0 finishes at once, sentence 1 runs on
    inputs["bias"][1, EOS] = -1e4
    beam_search(model, inputs, beam_size=2, bos_id=BOS, eos_id=EOS, max_len=4)
    # the first step runs one row per sentence (both beams would start from bos), then 2 beams each,
    # and sentence 0 leaves the batch once it has finished
    assert model.rows_per_call[0] == 2 and all(r == 2 for r in model.rows_per_call[1:])


def test_greedy_finished_sentences_leave_the_batch_and_the_rest_decode_as_alone():
    """Greedy drops a sentence once it has produced eos (fewer rows each step after that); every
    sentence's tokens, score and attention equal decoding it alone (the reference)."""
    model, inputs = MarkovDecoder(seed=21), make_inputs(B=5, seed=22)
    inputs["bias"][0, EOS] = 1e4  # sentence 0 ends at once; 3 never ends; the others when they do
    inputs["bias"][3, EOS] = -1e4
    kw = dict(bos_id=BOS, eos_id=EOS, max_len=8, return_attention=True)
    batched = greedy_search(model, inputs, **kw)
    rows = model.rows_per_call
    assert rows[0] == 5 and rows[1] < 5 and rows == sorted(rows, reverse=True)
    assert rows[-1] == sum(not h.finished for h in batched)  # at the last step only the unfinished ones
    for b in range(5):
        alone = greedy_search(MarkovDecoder(seed=21), {"bias": inputs["bias"][b : b + 1]}, **kw)[0]
        h = batched[b]
        assert (h.tokens, h.finished) == (alone.tokens, alone.finished)
        assert h.score == pytest.approx(alone.score, abs=1e-6)
        assert torch.equal(h.attention[:, 1:], alone.attention[:, 1:]) and h.attention[:, 0].eq(b).all()
    assert batched[0].tokens == [] and batched[0].finished and batched[0].attention.shape == (0, NK)
    assert len(batched[3].tokens) == 8 and not batched[3].finished


def test_argument_errors():
    model, inputs = MarkovDecoder(), make_inputs()
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, inputs, beam_size=0, bos_id=BOS, eos_id=EOS, max_len=3)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, inputs, beam_size=2, n_best=3, bos_id=BOS, eos_id=EOS, max_len=3)
    with pytest.raises(ValueError, match="max_len"):
        greedy_search(model, inputs, bos_id=BOS, eos_id=EOS, max_len=0)
    with pytest.raises(TypeError, match="IncrementalDecoder"):
        greedy_search(object(), inputs, bos_id=BOS, eos_id=EOS, max_len=3)
    with pytest.raises(ValueError, match="batch-first tensor"):
        greedy_search(model, {}, bos_id=BOS, eos_id=EOS, max_len=3)


# -- beams_only: per-source state is shared, not copied, while no sentence leaves ---------------------
from dataclasses import dataclass, field  # noqa: E402

from attnkit.attention import KVCache  # noqa: E402
from attnkit.decoding import PER_SOURCE, reorder_state  # noqa: E402


@dataclass
class _State:
    bias: torch.Tensor = field(metadata=PER_SOURCE)  # (R, V) the same for every beam of a sentence
    ex: torch.Tensor = field(metadata=PER_SOURCE)
    t: torch.Tensor = None  # (R,) per beam


class SharingMarkovDecoder(MarkovDecoder):
    """The Markov decoder with a typed state whose source part is marked PER_SOURCE; records how
    beam search called reorder."""

    def __init__(self, seed=0):
        super().__init__(seed)
        self.reorders = []  # (rows in, rows out, beams_only)

    def start(self, bias):
        d = super().start(bias)
        return _State(d["bias"], d["ex"], d["t"])

    def step(self, prev, state):
        lp, new, attn = super().step(prev, {"bias": state.bias, "ex": state.ex, "t": state.t})
        return lp, _State(state.bias, state.ex, new["t"]), attn

    def reorder(self, state, index, *, beams_only=False):
        self.reorders.append((state.t.shape[0], index.shape[0], beams_only))
        return reorder_state(state, index, beams_only=beams_only)


def test_reorder_state_beams_only_shares_per_source_parts():
    s = _State(torch.arange(6.0).reshape(3, 2), torch.arange(3), torch.tensor([7, 8, 9]))
    idx = torch.tensor([1, 1, 0])
    shared = reorder_state(s, idx, beams_only=True)
    assert shared.bias is s.bias and shared.ex is s.ex  # kept, not copied
    assert shared.t.tolist() == [8, 8, 7]  # per-beam rows follow the index
    copied = reorder_state(s, idx)
    assert copied.bias.tolist() == [[2.0, 3.0], [2.0, 3.0], [0.0, 1.0]] and copied.ex.tolist() == [1, 1, 0]
    # a static (cross-attention) cache is per source; a growing (self-attention) one is per beam
    k = torch.arange(3.0).reshape(3, 1, 1, 1)
    caches = [KVCache(k, k + 10, static=True), KVCache(k, k + 10)]
    kept = reorder_state(caches, idx, beams_only=True)
    assert kept[0] is caches[0] and kept[1].k.flatten().tolist() == [1.0, 1.0, 0.0]
    assert reorder_state(caches, idx)[0].k.flatten().tolist() == [1.0, 1.0, 0.0]


def test_beams_only_reorders_give_the_same_search():
    """Sentences finish at different steps (some beams_only steps, some not); a per-source row kept
    when a sentence left would give another sentence's bias, so results would differ."""
    inputs = make_inputs(B=6, seed=21)
    inputs["bias"][0, EOS] += 3.0  # some sentences end early, others late
    inputs["bias"][3, EOS] -= 3.0
    kw = dict(beam_size=3, bos_id=BOS, eos_id=EOS, max_len=8, length_penalty=0.6, n_best=2, return_attention=True)
    plain = beam_search(MarkovDecoder(seed=20), inputs, **kw)
    sharing_model = SharingMarkovDecoder(seed=20)
    shared = beam_search(sharing_model, inputs, **kw)
    for hs_a, hs_b in zip(plain, shared):
        assert len(hs_a) == len(hs_b)
        for a, b in zip(hs_a, hs_b):
            assert a.tokens == b.tokens and a.score == b.score and torch.equal(a.attention, b.attention)
    calls = sharing_model.reorders
    assert calls[0] == (6, 18, False)  # the expansion to beams
    assert any(only for _, _, only in calls) and any(n_in != n_out for n_in, n_out, _ in calls[1:])
    assert all(n_in == n_out for n_in, n_out, only in calls if only)  # never while sentences leave


# ---------------------------------------------------------------- candidate selection
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from attnkit.decoding.search import CHUNK, _top_candidates, row_argmax  # noqa: E402


@settings(max_examples=80, deadline=None)
@given(
    A=st.integers(1, 4),
    R=st.integers(1, 5),
    V=st.integers(1, 3 * CHUNK + 5),
    k=st.integers(1, 5),
    dead=st.integers(0, 4),
    seed=st.integers(0, 10_000),
)
def test_top_candidates_equal_one_topk_over_every_candidate(A, R, V, k, dead, seed):
    """The chunked selection (and the small-vocabulary path) give the same best 2K candidates as
    one topk over all R*V of each sentence; dead beams (-inf) and padding never yield a real one."""
    g = torch.Generator().manual_seed(seed)
    n = 2 * k
    scores = torch.randn(A, R, generator=g) * 3
    d = min(dead, R - 1)  # the last d beams are empty; one is always live
    if d:
        scores[:, R - d :] = float("-inf")
    log_probs = torch.randn(A * R, V, generator=g).log_softmax(-1)
    cand = (scores.reshape(-1, 1) + log_probs).reshape(A, R * V)
    top_s, row, tok = _top_candidates(scores, log_probs, n)
    assert top_s.shape == row.shape == tok.shape == (A, n)
    want = cand.topk(min(n, R * V), dim=1).values
    torch.testing.assert_close(top_s[:, : want.shape[1]], want, rtol=0, atol=0)
    assert torch.isneginf(top_s[:, want.shape[1] :]).all()
    a = torch.arange(A).unsqueeze(1)
    assert ((row >= a * R) & (row < (a + 1) * R)).all() and ((tok >= 0) & (tok < V)).all()
    real = torch.isfinite(top_s)
    got = scores.reshape(-1)[row] + log_probs[row, tok]  # the candidate each (row, token) names
    assert torch.equal(got[real], top_s[real])
    for s in range(A):  # no candidate named twice
        pairs = [(r, t) for r, t, ok in zip(row[s].tolist(), tok[s].tolist(), real[s].tolist()) if ok]
        assert len(pairs) == len(set(pairs))


@settings(max_examples=120, deadline=None)
@given(
    R=st.integers(1, 6),
    chunks=st.integers(0, 5),
    extra=st.sampled_from([0, 0, 1, CHUNK - 1]),
    levels=st.integers(1, 40),
    special=st.sampled_from(["none", "-inf", "inf", "nan"]),
    seed=st.integers(0, 10_000),
)
def test_row_argmax_is_torch_argmax(R, chunks, extra, levels, special, seed):
    """The chunked argmax of greedy search gives torch.argmax's index on every row: the first maximum
    when values tie (few distinct levels), with -inf/inf entries, and the first NaN where a row has one;
    vocabularies that are not a multiple of CHUNK (or smaller than two) take torch.argmax itself."""
    V = chunks * CHUNK + extra
    if V == 0:
        V = 1
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, levels, (R, V), generator=g).float()  # many ties when levels is small
    if special != "none":
        where = torch.rand(R, V, generator=g) < 0.05
        x[where] = float(special)
    assert torch.equal(row_argmax(x), x.argmax(dim=1))
