"""Opening a language model's run or checkpoint (attnkit.service.open_model) and `attnkit generate`, against
LanguageModel.generate run directly."""

import json

import pytest
import torch

from attnkit.cli import main as cli_main
from attnkit.data.tokenizer import BOS_ID, EOS_ID
from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from attnkit.pretrained import model_task
from attnkit.service import ModelKind, open_model
from attnkit.tasks.language_model.inference import LanguageModelGenerator
from attnkit.training.checkpoint import save_checkpoint

PROMPTS = ["Y dijo Dios: Sea la luz", "In the beginning"]


@pytest.fixture(scope="module")
def lm(tokenizer, tmp_path_factory):
    """A tiny random Llama-shaped model saved as a training run's checkpoint; its embeddings scaled up so
    that the next-token distributions are far from uniform (a greedy pick is no near tie)."""
    torch.manual_seed(0)
    model = LanguageModel(
        LanguageModelConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=2, max_len=48)
    ).eval()
    with torch.no_grad():
        model.embed_tokens.weight.mul_(10)
    run = tmp_path_factory.mktemp("lm") / "run"
    run.mkdir()
    (run / "train_log.jsonl").write_text("")  # a training run's folder
    save_checkpoint(
        run / "step-00000003",
        model=model,
        config=model.to_config(),
        extra_files={"tokenizer.model": tokenizer.to_bytes()},
    )
    return model, run


def _direct(model, tokenizer, prompt, n, **kw):
    ids = torch.tensor([[BOS_ID, *tokenizer.encode(prompt)]])
    out = model.generate(ids, n, eos_id=EOS_ID, **kw)[0, ids.shape[1] :].tolist()
    return out[: out.index(EOS_ID) + 1] if EOS_ID in out else out


def test_a_run_opens_as_a_language_model(lm, tokenizer, capsys):
    model, run = lm
    assert model_task(run / "step-00000003") == "language-model"  # not "translation", though it has a tokenizer
    opened = open_model(run)
    assert opened.kind is ModelKind.LANGUAGE_MODEL and isinstance(opened.impl, LanguageModelGenerator)
    assert opened.path.name == "step-00000003" and "newest checkpoint" in capsys.readouterr().err
    ids = torch.tensor([[BOS_ID, *tokenizer.encode(PROMPTS[0])]])
    with torch.no_grad():
        assert torch.equal(opened.impl.model(ids).logits, model(ids).logits)


def test_greedy_generate_is_the_model_s_own_greedy_continuation(lm, tokenizer, capsys):
    model, run = lm
    argv = ["generate", str(run), "--max-new-tokens", "12", "--json"]
    assert cli_main([*argv, "--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--device", "cpu"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [c["prompt"] for c in got["continuations"]] == PROMPTS
    for prompt, c in zip(PROMPTS, got["continuations"]):
        new = _direct(model, tokenizer, prompt, 12)
        assert c["ids"] == new and c["ended"] == (EOS_ID in new)
        assert c["text"] == tokenizer.decode(tokenizer.encode(prompt) + [t for t in new if t != EOS_ID])
        full = torch.tensor([c["prompt_ids"] + new])
        with torch.no_grad():  # each piece's log-probability, float64
            logp = model(full).logits.double().log_softmax(-1)[0]
        want = [logp[len(c["prompt_ids"]) - 1 + i, t].item() for i, t in enumerate(new)]
        assert c["scores"] == pytest.approx(want, abs=1e-4)
    assert cli_main(["generate", str(run), "--prompt", PROMPTS[1], "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == got["continuations"][1]["text"] + "\n"  # the plain output: the text


def test_sampling_is_reproducible_by_seed(lm, tokenizer, capsys):
    model, run = lm
    sample = ["--temperature", "1.5", "--top-k", "50", "--max-new-tokens", "10", "--json", "--device", "cpu"]

    def run_with(seed):
        assert (
            cli_main(["generate", str(run), "--prompt", PROMPTS[0], "--prompt", PROMPTS[1], *sample, "--seed", seed])
            == 0
        )
        return [c["ids"] for c in json.loads(capsys.readouterr().out)["continuations"]]

    a, b, c = run_with("7"), run_with("7"), run_with("8")
    gen = torch.Generator().manual_seed(7)  # one generator, the prompts in order
    want = [_direct(model, tokenizer, p, 10, temperature=1.5, top_k=50, generator=gen) for p in PROMPTS]
    assert a == b == want
    assert c != a


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--top-k", "5"], "--top-k: only with --temperature"),
        (["--max-new-tokens", "47"], "past the model's context of 48"),
        (["--temperature", "-1"], "temperature must be"),
    ],
)
def test_bad_options_are_one_line(lm, capsys, flags, match):
    _, run = lm
    assert cli_main(["generate", str(run), "--prompt", PROMPTS[1], *flags]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("attnkit: error:") and match in err[-1]


def test_a_translator_is_refused_in_one_line(capsys):
    assert cli_main(["generate", "transformer-es-en", "--prompt", "hola"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a translation model" in err and "train language-model" in err


def test_models_lists_a_local_language_model_by_its_kind(lm, tmp_path, capsys):
    import shutil

    _, run = lm
    shutil.copytree(run / "step-00000003", tmp_path / "models" / "tiny-lm")
    assert cli_main(["--home", str(tmp_path), "models", "--json"]) == 0
    mine = [m for m in json.loads(capsys.readouterr().out) if m["name"] == "tiny-lm"]
    assert len(mine) == 1 and mine[0]["task"] == "language-model" and mine[0]["model_type"] == "language_model"
    assert cli_main(["--home", str(tmp_path), "models"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny-lm")]
    assert row and row[0].split()[:4] == ["tiny-lm", "local", "language-model", "language_model"]
