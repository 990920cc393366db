"""A language model decodes through the one search every attnkit model uses (:mod:`attnkit.decoding`): its
``start``/``step``/``reorder`` against plain loops that rerun the whole text at every step (no cache), greedy
and sampled with the same generator, beam search over it, and the sampling strategy's top-k and nucleus."""

from __future__ import annotations

import pytest
import torch

from attnkit.decoding import Sampling, beam_search, greedy_search
from attnkit.models.language_model import LanguageModel, LanguageModelConfig


def _model(shape: str, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    cfg = LanguageModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_len=40, shape=shape)
    model = LanguageModel(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(6.0)  # a peaked model: continuations differ from row to row
    return model


@torch.no_grad()
def _plain(model: LanguageModel, ids: list[int], n: int, eos: int | None, draw=None) -> list[int]:
    """A continuation by rerunning the model on the whole text at every step: argmax, or ``draw(log_probs)``."""
    out = list(ids)
    for _ in range(n):
        logp = torch.log_softmax(model(torch.tensor([out])).logits[0, -1].float(), -1)[None]  # (1, V)
        nxt = int(logp.argmax()) if draw is None else int(draw(logp)[0])
        out.append(nxt)
        if nxt == eos:
            break
    return out


@pytest.mark.parametrize("shape", ["llama", "gpt2"])
def test_greedy_through_the_search_is_the_plain_loop(shape):
    model = _model(shape)
    prompts = torch.tensor([[1, 5, 9, 4], [1, 7, 7, 30]])
    got = model.generate(prompts, 12, eos_id=2)
    for row, prompt in zip(got.tolist(), prompts.tolist()):
        want = _plain(model, prompt, 12, 2)
        assert row[: len(want)] == want and all(t == 2 for t in row[len(want) :])


def test_sampling_through_the_search_is_the_plain_loop_with_the_same_draws():
    model = _model("llama", 1)
    prompt = [1, 5, 9]
    a = model.generate(
        torch.tensor([prompt]), 15, temperature=0.8, top_k=10, generator=torch.Generator().manual_seed(3)
    )
    plain = Sampling(0.8, 10, None, torch.Generator().manual_seed(3))
    assert a[0].tolist() == _plain(model, prompt, 15, None, plain)
    b = model.generate(
        torch.tensor([prompt]), 15, temperature=0.8, top_k=10, generator=torch.Generator().manual_seed(3)
    )
    c = model.generate(
        torch.tensor([prompt]), 15, temperature=0.8, top_k=10, generator=torch.Generator().manual_seed(4)
    )
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_beam_search_decodes_a_language_model_and_beats_greedy_on_its_own_score():
    model = _model("llama", 2)
    prompt = torch.tensor([[1, 3, 8]])
    greedy = greedy_search(model, {"prompt": prompt}, bos_id=0, eos_id=2, max_len=10)[0]
    beams = beam_search(model, {"prompt": prompt}, beam_size=4, bos_id=0, eos_id=2, max_len=10, n_best=4)[0]
    assert len(beams) >= 1 and all(h.score <= 0 for h in beams)
    if greedy.finished and beams[0].finished:
        assert beams[0].score >= greedy.score - 1e-5  # beam search keeps the greedy path among its candidates


def test_top_k_and_the_nucleus_draw_only_from_their_sets():
    logp = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]])).repeat(400, 1)  # (400, 4)
    g = torch.Generator().manual_seed(0)
    nucleus = Sampling(top_p=0.5, generator=g)(logp)
    assert set(nucleus.tolist()) == {0, 1}  # 0.4 < 0.5: the second token joins, the rest never come
    top2 = Sampling(top_k=2, generator=g)(logp)
    assert set(top2.tolist()) == {0, 1}
    share = float((Sampling(generator=g)(logp) == 0).float().mean())
    assert 0.3 < share < 0.5  # T = 1: the model's own 0.4
    cold = Sampling(temperature=0.02, generator=g)(logp)  # (0.4 / 0.3) ** 50: the second token at ~5e-7
    assert set(cold.tolist()) == {0}
    for bad in (dict(temperature=0), dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            Sampling(**bad)


def test_a_hugging_face_language_model_decodes_through_the_same_search():
    """A ``transformers`` causal model (:class:`attnkit.hf.self_attention.HFDecoder`) through the shared search:
    greedy equals ``transformers``' own greedy ``generate``; beam search runs over its cache."""
    pytest.importorskip("transformers")
    from attnkit.hf.self_attention import HFDecoder
    from hf_tiny import build_tiny

    model, tok = build_tiny("gpt2")
    prompt = torch.tensor([tok("Jesús lloró en la tierra.")["input_ids"]])
    with torch.no_grad():
        own = model.generate(prompt, do_sample=False, max_new_tokens=8, eos_token_id=-1, pad_token_id=0)[0]
    mine = greedy_search(HFDecoder(model), {"prompt": prompt}, bos_id=0, eos_id=-1, max_len=8)[0]
    assert prompt[0].tolist() + mine.tokens == own.tolist()
    beams = beam_search(HFDecoder(model), {"prompt": prompt}, beam_size=3, bos_id=0, eos_id=-1, max_len=6, n_best=3)[0]
    short = greedy_search(HFDecoder(model), {"prompt": prompt}, bos_id=0, eos_id=-1, max_len=6)[0]
    assert len(beams) == 3 and short.tokens == mine.tokens[:6]
    assert beams[0].score >= short.score - 1e-4  # the best beam is at least as likely as the greedy path
