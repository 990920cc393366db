"""`attnkit train language-model` end to end on ~30 Bible verses, through the in-process CLI: the checkpoints
rebuild the model, a resumed run is bit for bit the run without a stop, the logged induction scores are the
saved model's, and bad options are one line."""

import json

import pytest
import torch
from safetensors.torch import load_file

from attnkit.cli import main as cli_main
from attnkit.data.corpus import open_corpus
from attnkit.data.datasets.bible import get_tokenizer
from attnkit.models.induction import induction_scores
from attnkit.models.language_model import LanguageModel, LanguageModelConfig
from attnkit.tasks.language_model.data import side_texts, token_stream
from attnkit.tasks.language_model.train import COPYING_TOKENS, ICL_BLOCKS, valid_blocks
from attnkit.training import Trainer
from attnkit.training.checkpoint import list_checkpoints, load_model

TINY = [
    "train", "language-model", "--vocab-size", "1000", "--limit-train", "30", "--context", "32",
    "--batch-size", "8", "--d-model", "32", "--layers", "2", "--heads", "2", "--valid-blocks", "8",
    "--no-progress", "--threads", "1",
]  # fmt: skip


def _train(home, out, *flags) -> int:
    return cli_main(["--home", str(home), *TINY, "--out-dir", str(out), *flags])


def _log(out) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run(bible_home, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm") / "run"
    assert _train(bible_home, out, "--epochs", "2", "--save-every-steps", "4", "--shape", "gpt2") == 0
    return out


def test_checkpoints_rebuild_the_model_with_its_tokenizer_and_logits(run, bible_home, capsys):
    log = _log(run)
    end = log[-1]
    assert end["event"] == "end" and end["stop_reason"] == "max_epochs" and end["best_checkpoint"]
    steps = list_checkpoints(run)
    assert steps and steps[-1].name == f"step-{end['steps']:08d}"
    model, config, _ = load_model(steps[-1])
    assert isinstance(model, LanguageModel) and config["model_type"] == "language_model"
    assert (model.config.shape, model.config.n_layers, model.config.d_model, model.config.max_len) == (
        "gpt2",
        2,
        32,
        32,
    )
    tok = get_tokenizer(1000, bible_home)  # the translation task's Bible tokenizer, saved beside the weights
    assert (steps[-1] / "tokenizer.model").read_bytes() == tok.to_bytes()
    # the same logits as a model built by hand from config.json and the safetensors file
    fields = {k: v for k, v in config.items() if k in LanguageModelConfig.__dataclass_fields__}
    by_hand = LanguageModel(LanguageModelConfig(**fields)).eval()
    weights = load_file(steps[-1] / "model.safetensors")
    weights.setdefault("lm_head.weight", weights["embed_tokens.weight"])  # tied
    by_hand.load_state_dict(weights)
    ids = torch.tensor([[1, *tok.encode("In the beginning God created the heavens")]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, by_hand(ids).logits)
        assert not torch.equal(model(ids).logits, LanguageModel(model.config).eval()(ids).logits)  # trained


def _valid(bible_home):
    corpus = open_corpus("bible", home=bible_home)
    stream = token_stream(side_texts(corpus, "valid", "en"), get_tokenizer(1000, bible_home))
    return valid_blocks(stream, 32, 8)  # (8, 33)


def test_logged_validation_is_the_saved_model_measured_again(run, bible_home):
    last = [r for r in _log(run) if r["event"] == "valid"][-1]
    model, _, _ = load_model(run / f"step-{last['step']:08d}")  # validated, then saved at the epoch's end
    blocks = _valid(bible_home)
    with torch.no_grad():  # float64 reference for the loss
        logits = model(blocks[:, :-1]).logits.double()  # (8, 32, V)
    nll = -logits.log_softmax(-1).gather(-1, blocks[:, 1:, None]).mean().item()
    assert last["valid_loss"] == pytest.approx(nll, rel=1e-5)
    assert last["valid_ppl"] == pytest.approx(torch.tensor(nll).exp().item(), rel=1e-5)
    s = induction_scores(model, text_ids=blocks[:ICL_BLOCKS, :-1], copying_tokens=COPYING_TOKENS)
    for layer in (1, 2):
        row = s.prefix_matching[layer - 1]
        head = max(range(len(row)), key=row.__getitem__)
        assert last[f"induction_prefix_matching_layer{layer}"] == pytest.approx(row[head], abs=1e-6)
        assert last[f"induction_head_layer{layer}"] == head + 1  # numbered from 1
        assert last[f"induction_copying_layer{layer}"] == pytest.approx(s.copying[layer - 1][head], abs=1e-6)
        assert last[f"induction_previous_token_layer{layer}"] == pytest.approx(max(s.previous_token[layer - 1]))
    assert last["in_context_learning"] == pytest.approx(s.in_context_learning, abs=1e-5)


def test_resuming_is_bit_for_bit(bible_home, tmp_path, monkeypatch):
    import attnkit.cli.train as cli_train

    config_of = cli_train.task_config_from_args

    def every_step_logged(cls, args):  # log_every is no flag: one train line a step, to compare the losses
        cfg = config_of(cls, args)
        cfg.run.log_every = 1
        return cfg

    monkeypatch.setattr(cli_train, "task_config_from_args", every_step_logged)
    flags = ["--max-steps", "8", "--valid-every-steps", "4", "--dropout", "0.1", "--layers", "1"]
    flags += ["--repeats", "0.5", "--repeat-min", "4", "--repeat-max", "16"]  # the repeated blocks resume too
    assert _train(bible_home, tmp_path / "a", *flags) == 0

    step = Trainer.train_step

    def stop_after_four(self, batch):  # what SIGINT does: a stop request, honoured at the step's end
        out = step(self, batch)
        if self.step + 1 == 4:
            self.request_stop()
        return out

    with monkeypatch.context() as m:
        m.setattr(Trainer, "train_step", stop_after_four)
        assert _train(bible_home, tmp_path / "b", *flags) == 0
    first = _log(tmp_path / "b")
    assert first[-1]["stop_reason"] == "interrupted" and first[-1]["steps"] == 4
    assert _train(bible_home, tmp_path / "b", *flags, "--resume") == 0
    straight, resumed = _log(tmp_path / "a"), _log(tmp_path / "b")
    assert resumed[-1]["steps"] == 8 and resumed[-1]["resumed_from"].endswith("step-00000004")

    def losses(log, event, keys):
        return {r["step"]: tuple(r[k] for k in keys) for r in log if r["event"] == event}

    train_keys, valid_keys = ("loss", "lr", "grad_norm"), ("valid_loss", "induction_prefix_matching_layer1")
    assert losses(straight, "train", train_keys) == losses(resumed, "train", train_keys)
    assert len(losses(straight, "train", train_keys)) == 8
    assert losses(straight, "valid", valid_keys) == losses(resumed, "valid", valid_keys)
    a, _, _ = load_model(tmp_path / "a" / "step-00000008")
    b, _, _ = load_model(tmp_path / "b" / "step-00000008")
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--side", "fr"], "side must be src, tgt, es or en"),
        (["--heads", "3"], "n_heads"),
        (["--data", "nosuchcorpus"], "unknown corpus 'nosuchcorpus'"),
        (["--context", "0"], "--context"),
        (["--shape", "gpt2", "--kv-heads", "1"], "kv_heads"),
    ],
)
def test_bad_options_are_one_line(bible_home, tmp_path, capsys, flags, match):
    out = tmp_path / "run"
    assert _train(bible_home, out, *flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnkit: error:") and err.count("\n") == 1 and match in err
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--vocab-size", "500"], ["--vocab-size 500", "1000 pieces"]),
        # four heads of width 8 instead of two of 16: no weight changes shape, so only the config can tell
        ([*TINY[2:], "--shape", "gpt2", "--heads", "4"], ["--heads (n_heads=2 there, 4 here)"]),
    ],
)
def test_resuming_with_other_model_options_is_refused(run, bible_home, tmp_path, capsys, flags, match):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    code = cli_main(["--home", str(bible_home), *TINY[:2], *flags, "--out-dir", str(copy), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and all(m in err for m in match)
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in run.iterdir())  # nothing written


def test_a_prepared_corpus_trains_on_the_side_asked_with_that_side_s_tokenizer(tmp_path, capsys):
    import random

    from attnkit.data.corpus import prepare_parallel

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghilmnoprstu") for _ in range(rng.randint(3, 7))) for _ in range(300)]
    lines = []
    for _ in range(400):
        src = " ".join(rng.choice(words) for _ in range(rng.randint(4, 9)))
        lines.append(f"{src}\t{' '.join(w[::-1].upper() for w in src.split())}\n")
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(lines), encoding="utf-8")
    home = tmp_path / "home"
    corpus = prepare_parallel(
        "toy", src_lang="xx", tgt_lang="yy", train=(tsv,), vocab_size=300, separate_vocab=True, home=home, workers=1
    )
    src_tok, tgt_tok = corpus.tokenizers()
    out = tmp_path / "run"
    argv = ["--home", str(home), *TINY[:2], "--data", "toy", "--side", "xx", "--context", "16", "--batch-size", "4"]
    small = ["--d-model", "16", "--layers", "1", "--heads", "2", "--max-steps", "2", "--valid-blocks", "2"]
    assert cli_main([*argv, *small, "--out-dir", str(out), "--no-progress", "--threads", "1"]) == 0
    step = list_checkpoints(out)[-1]
    assert (step / "tokenizer.model").read_bytes() == src_tok.to_bytes() != tgt_tok.to_bytes()
    model, _, _ = load_model(step)
    assert model.config.vocab_size == src_tok.vocab_size
    capsys.readouterr()
    assert cli_main([*argv, "--vocab-size", "500", "--out-dir", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "prepared with a vocabulary of 300" in err
