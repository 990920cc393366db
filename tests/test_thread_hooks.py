"""Hooks scoped to one thread (:func:`attnkit.hooks.thread_hooks`): a pass another thread runs on the same
model while one thread's hooks are in place is neither read nor changed by them, as in ``attnkit serve``,
whose two fast-lane threads share one model. No timing: the second thread runs its whole pass from inside
the first thread's hook, while the first thread's forward pass is half done and its hooks are registered."""

from __future__ import annotations

import threading

import torch

from attnkit.attribution.interventions import HeadAblation, intervene
from attnkit.attribution.tracers import block_tracer
from attnkit.hooks import thread_hooks
from attnkit.tasks.language_model.inference import LanguageModelGenerator
from test_hf_lm_export import tiny_lm
from tiny import es_en_tokenizer

IDS_A = [1, 40, 41, 42, 43, 44, 45, 46, 47, 48]
IDS_B = [1, 900, 901, 902, 903, 904]  # another length: a map of the other pass could not be stacked


def _in_other_thread(fn):
    """``fn()`` run to its end in a new thread; its result (or error raised here)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_hook_acts_on_its_own_threads_passes_only():
    layer = torch.nn.Linear(3, 3)
    seen = []
    x = torch.randn(2, 3)
    with thread_hooks([(layer, lambda m, a, out: seen.append(threading.get_ident()) or out * 0)]):
        other = _in_other_thread(lambda: layer(x))
        mine = layer(x)
    assert seen == [threading.get_ident()]  # the other thread's pass was not seen
    torch.testing.assert_close(other, torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert float(mine.detach().abs().sum()) == 0.0  # and this thread's output was replaced
    assert not layer._forward_hooks  # removed at the end of the block


def test_an_error_in_the_block_removes_the_hooks():
    layer = torch.nn.Linear(3, 3)
    try:
        with thread_hooks([(layer, lambda m, a: None)], pre=True):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert not layer._forward_pre_hooks


def test_two_threads_reading_one_language_model_each_get_their_own_maps():
    text = LanguageModelGenerator(tiny_lm(3), es_en_tokenizer())
    alone_a, alone_b = text.self_attention(IDS_A).attention, text.self_attention(IDS_B).attention
    callers: list[int] = []
    other: dict = {}
    got: dict[int, torch.Tensor] = {}

    def on_layer(layer, w):
        callers.append(threading.get_ident())
        if layer == 1:  # mid-pass, hooks in place: the other request runs its whole pass now
            other["maps"] = _in_other_thread(lambda: text.self_attention(IDS_B).attention)
        got[layer] = w

    text.stream(IDS_A, on_layer)
    assert set(callers) == {threading.get_ident()}
    torch.testing.assert_close(torch.stack([got[i] for i in sorted(got)]), alone_a)
    torch.testing.assert_close(other["maps"], alone_b)


def test_a_trace_and_an_ablation_leave_another_threads_pass_alone():
    model = tiny_lm(4)
    with torch.no_grad():
        clean = model(torch.tensor([IDS_B])).logits
    tracer = block_tracer(model)
    inside: dict = {}

    def on_layer(parts):
        if "trace" not in inside:
            with torch.no_grad():
                inside["trace"] = _in_other_thread(lambda: model(torch.tensor([IDS_B])).logits)

    tracer.trace(torch.tensor(IDS_A), on_layer)
    torch.testing.assert_close(inside["trace"], clean)
    with intervene(model, [HeadAblation(layer=0, head=h) for h in range(4)]), torch.no_grad():
        ablated = model(torch.tensor([IDS_B])).logits
        beside = _in_other_thread(lambda: model(torch.tensor([IDS_B])).logits)
    assert not torch.allclose(ablated, clean)  # the ablation acts on this thread
    torch.testing.assert_close(beside, clean)  # and not on the other
