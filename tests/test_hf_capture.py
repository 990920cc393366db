"""Attention captured from tiny Hugging Face models left on their default attention (sdpa) equals the
eager implementation's ``output_attentions``, for every family, with padding."""

import pytest
import torch

from attnkit.hf.capture import attention_sites, attention_weights, capture_attention
from hf_tiny import ENC_DEC, FAMILIES, PAD, build_tiny, eager_copy


def _inputs(family, model, seed=1, padded=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, model.config.vocab_size, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 6:] = 0  # the second row is padded: 6 real tokens
        ids[1, 6:] = PAD
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family in ENC_DEC:
        dec = torch.randint(6, model.config.vocab_size, (2, 5), generator=g)
        inputs["decoder_input_ids"] = dec
    return inputs


def _eager_maps(family, inputs):
    model, _ = eager_copy(family)
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    if family in ENC_DEC:
        return {"enc_self": out.encoder_attentions, "dec_self": out.decoder_attentions, "cross": out.cross_attentions}
    return {"self": out.attentions}


@pytest.mark.parametrize(
    ("family", "padded"), [(f, True) for f in FAMILIES] + [("gpt2", False), ("llama", False), ("t5", False)]
)
def test_captured_equals_eager(family, padded):
    """Without padding, causal models call sdpa with no mask and is_causal: that path too."""
    model, _ = build_tiny(family)
    assert model.config._attn_implementation == "sdpa"  # left on its default: no eager reload
    inputs = _inputs(family, model, padded=padded)
    got = {}

    def keep(site, weights):
        got[(site.kind, site.layer)] = weights

    with torch.no_grad(), capture_attention(model, keep) as sites:
        model(**inputs)
    reference = _eager_maps(family, inputs)
    assert {s.kind for s in sites} == set(reference)
    for kind, layers in reference.items():
        for layer, expected in enumerate(layers):
            w = got[(kind, layer)]
            assert w.shape == expected.shape
            real = inputs["attention_mask"][:, None, :, None].bool() if kind in ("enc_self", "self") else None
            if real is not None and w.shape[-2] == real.shape[-2]:  # padded query rows are not compared
                w, expected = w * real, expected * real
            torch.testing.assert_close(w, expected.float(), atol=1e-5, rtol=0)
            # padding keys get no weight where the mask hides them
            if padded and kind in ("enc_self", "cross", "self"):
                assert float(w[1, :, :, 6:].abs().max()) < 1e-6


@pytest.mark.parametrize("family", ["marian", "llama"])
def test_only_asked_layers_and_heads_are_computed(family):
    model, _ = build_tiny(family)
    inputs = _inputs(family, model)
    sites = [s for s in attention_sites(model) if s.layer == 1][:1]
    got = []
    with torch.no_grad(), capture_attention(model, lambda s, w: got.append((s, w)), sites=sites, heads=[2]):
        model(**inputs)
    assert [s for s, _ in got] == sites
    full = {}
    with torch.no_grad(), capture_attention(model, lambda s, w: full.__setitem__(s, w)):
        model(**inputs)
    torch.testing.assert_close(got[0][1], full[sites[0]][:, [2]])
    # outside the block nothing is watched any more
    got.clear()
    with torch.no_grad():
        model(**inputs)
    assert got == []


def test_capture_does_not_change_the_output():
    model, _ = build_tiny("t5")
    inputs = _inputs("t5", model)
    with torch.no_grad():
        plain = model(**inputs).logits
        with capture_attention(model, lambda s, w: None):
            watched = model(**inputs).logits
    assert torch.equal(plain, watched)


def test_attention_weights_against_a_float64_loop():
    """The formula, on grouped-query heads with a causal mask and a bias, against a plain loop."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 3, 5, generator=g), torch.randn(1, 2, 3, 5, generator=g)
    bias = torch.randn(1, 4, 3, 3, generator=g)
    w = attention_weights(q, k, None, scaling=0.5, is_causal=True, position_bias=bias)
    for h in range(4):
        for i in range(3):
            s = [
                float(q[0, h, i].double() @ k[0, h // 2, j].double()) * 0.5 + float(bias[0, h, i, j])
                for j in range(i + 1)
            ]
            e = torch.tensor(s, dtype=torch.float64).softmax(0)
            torch.testing.assert_close(w[0, h, i, : i + 1].double(), e, atol=1e-6, rtol=0)
            assert float(w[0, h, i, i + 1 :].abs().sum()) == 0.0


@pytest.mark.parametrize("eager", [False, True])
def test_threads_capturing_one_model_at_once_each_get_their_own_weights(eager):
    """The server's fast lane may run two batches of one model at once, on two threads: each capture sees
    its own thread's pass only. A barrier in the first callback makes the two passes overlap."""
    import threading

    model = eager_copy("marian")[0] if eager else build_tiny("marian")[0]
    inputs = [_inputs("marian", model, seed=s) for s in (1, 2)]

    def alone(x):
        got = {}
        with torch.no_grad(), capture_attention(model, lambda s, w: got.__setitem__((s.kind, s.layer), w)):
            model(**x)
        return got

    reference = [alone(x) for x in inputs]
    barrier = threading.Barrier(2, timeout=60)
    results: list[dict] = [{}, {}]
    errors = []

    def run(i):
        first = [True]

        def keep(site, weights):
            if first[0]:  # both passes are under way before either goes past its first layer
                first[0] = False
                barrier.wait()
            results[i].setdefault((site.kind, site.layer), []).append(weights)

        try:
            with torch.no_grad(), capture_attention(model, keep):
                model(**inputs[i])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    for got, expected in zip(results, reference):
        assert set(got) == set(expected)
        for key, ws in got.items():
            assert len(ws) == 1, f"{key}: {len(ws)} maps, another thread's pass among them"
            torch.testing.assert_close(ws[0], expected[key], atol=1e-6, rtol=0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("family", FAMILIES)
def test_cuda_captured_equals_cpu_eager(family):
    """On a GPU, sdpa runs other kernels (flash, memory-efficient) than on the CPU: the weights captured there
    equal the CPU's eager ``output_attentions``, and watching leaves the GPU's output as it is."""
    model, _ = build_tiny(family)
    inputs = _inputs(family, model)
    reference = _eager_maps(family, inputs)
    model = model.cuda()
    on_gpu = {k: v.cuda() for k, v in inputs.items()}
    got = {}

    def keep(site, weights):
        got[(site.kind, site.layer)] = weights.cpu()

    with torch.no_grad():
        plain = model(**on_gpu)[0]  # logits, or the encoder's last hidden states (bert)
        with capture_attention(model, keep):
            watched = model(**on_gpu)[0]
    assert torch.equal(plain, watched)
    for kind, layers in reference.items():
        for layer, expected in enumerate(layers):
            w = got[(kind, layer)]
            real = inputs["attention_mask"][:, None, :, None].bool() if kind in ("enc_self", "self") else None
            if real is not None and w.shape[-2] == real.shape[-2]:  # padded query rows are not compared
                w, expected = w * real, expected * real
            torch.testing.assert_close(w, expected.float(), atol=1e-4, rtol=0)
