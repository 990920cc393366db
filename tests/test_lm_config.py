"""LanguageModelTaskConfig: the options of `attnkit train language-model` and the model config they size."""

import pytest

from attnkit.errors import ConfigError
from attnkit.models.language_model import LanguageModel
from attnkit.tasks.language_model.config import LanguageModelTaskConfig


def test_model_config_carries_every_model_option():
    cfg = LanguageModelTaskConfig(
        shape="llama", layers=2, heads=4, kv_heads=2, d_model=32, d_ff=64, context=48, attention_only=True, dropout=0.1
    )
    mc = cfg.model_config(500)
    assert (mc.vocab_size, mc.n_layers, mc.n_heads, mc.n_kv_heads, mc.d_model, mc.d_ff, mc.max_len) == (
        500, 2, 4, 2, 32, 64, 48,
    )  # fmt: skip
    assert (mc.shape, mc.attention_only, mc.dropout) == ("llama", True, 0.1)
    model = LanguageModel(mc)  # the model accepts it
    assert len(model.layers) == 2
    assert cfg.run.out_dir == "runs/language-model"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"shape": "bert"}, "shape"),
        ({"shape": "gpt2", "kv_heads": 2}, "kv_heads"),
        ({"heads": 3, "d_model": 32}, "n_heads"),
        ({"heads": 4, "kv_heads": 3}, "n_kv_heads"),
        ({"repeats": 0.5, "repeat_min": 9, "repeat_max": 8}, "--repeat-min 9"),
        ({"repeats": 0.5, "repeat_max": 300, "context": 256}, "--context 256"),
        ({"repeats": 1.5}, "repeats"),
        ({"context": 0}, "context"),
        ({"batch_size": 0}, "batch_size"),
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_bad_options_are_one_config_error_naming_the_option(options, match):
    with pytest.raises(ConfigError, match=match):
        LanguageModelTaskConfig(**options)


def test_next_token_loss_matches_a_float64_loop():
    import math

    import torch

    from attnkit.tasks.language_model.loss import next_token_loss, perplexity

    torch.manual_seed(0)
    model = LanguageModel(LanguageModelTaskConfig(layers=1, heads=2, d_model=16, context=8).model_config(40))
    ids = torch.randint(0, 40, (2, 9))
    batch = {"ids": ids[:, :-1], "targets": ids[:, 1:]}
    loss = next_token_loss(model, batch)
    logits = model(batch["ids"]).logits.double()  # (2, 8, 40)
    total = 0.0
    for b in range(2):
        for t in range(8):
            total -= torch.log_softmax(logits[b, t], -1)[batch["targets"][b, t]].item()
    assert loss.item() == pytest.approx(total / 16, rel=1e-5)
    assert perplexity(loss.item()) == pytest.approx(math.exp(total / 16), rel=1e-5)
    assert perplexity(1e6) == math.inf
    with pytest.raises(ValueError, match="one shape"):
        next_token_loss(model, {"ids": ids, "targets": ids[:, 1:]})
