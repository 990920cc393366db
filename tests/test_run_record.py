"""The run record (``train_config.json``) of a translation run says what ran: the corpus's languages and
name and the model's sizes (as the model's own ``config.json``), and the schedule fitted to the budget;
an explicit schedule that the budget cannot finish is kept, with a warning that gives the numbers."""

import json

import pytest

from attnkit.cli import main as cli_main
from attnkit.data.corpus import prepare_parallel
from attnkit.training.checkpoint import list_checkpoints, load_checkpoint
from test_corpus import synthetic_pairs, write_aligned

SIZES = ["--d-model", "16", "--nhead", "2", "--dim-feedforward", "32", "--num-encoder-layers", "1"]
SIZES += ["--num-decoder-layers", "1", "--batch-size", "16", "--valid-bleu-sentences", "8", "--threads", "1"]


@pytest.fixture(scope="module")
def toy_home(tmp_path_factory):
    """A made-up corpus, not the Bible: each target word is its source word reversed (xx -> yy)."""
    folder = tmp_path_factory.mktemp("toy")
    home = folder / "home"
    pairs = synthetic_pairs(240, seed=5)
    train = write_aligned(folder, "train", pairs[:200], "xx", "yy")
    valid = write_aligned(folder, "valid", pairs[200:220], "xx", "yy")
    test = write_aligned(folder, "test", pairs[220:], "xx", "yy")
    prepare_parallel(
        "toy", src_lang="xx", tgt_lang="yy", train=train, valid=valid, test=test, vocab_size=400, home=home
    )
    return home


def train(home, out, *flags):
    argv = ["--home", str(home), "train", "translation", "--data", "toy", "--model", "transformer"]
    return cli_main([*argv, *SIZES, "--out-dir", str(out), "--no-progress", *flags])


def test_the_record_names_the_corpus_languages_sizes_and_fitted_schedule(toy_home, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(toy_home, out, "--max-steps", "6") == 0
    record = json.loads((out / "train_config.json").read_text())
    model = json.loads((list_checkpoints(out)[-1] / "config.json").read_text())
    assert record["data"] == "toy" and record["model"] == "transformer" == model["model_type"]
    mc = record["model_config"]
    assert (mc["src_lang"], mc["tgt_lang"], mc["corpus"]) == ("xx", "yy", "toy")
    for key, value in mc.items():  # every field of the model's config, as the model has it
        assert model[key] == value, key
    assert mc["vocab_size"] == model["vocab_size"] < 8000 and mc["d_model"] == 16
    schedule = record["schedule"]
    # 6 steps of a 13-step epoch: fitted, warm-up of max(1, round(0.05 * 6)) = 1 step, 0 at step 6
    assert schedule["schedule"] == "budget" and schedule["total_steps"] == 6 and schedule["warmup_steps"] == 1
    assert schedule["knots"] == [[-1.0, 0.0], [0.0, 1e-3], [6.0, 0.0]]
    assert "linear decay to 0 at step 6" in capsys.readouterr().err


def test_an_explicit_warmup_is_kept_and_the_budget_warns(toy_home, tmp_path, capsys):
    out = tmp_path / "run"
    assert train(toy_home, out, "--max-steps", "5", "--warmup-steps", "2000") == 0
    err = capsys.readouterr().err
    assert "warm-up of 2000 steps cannot finish: this budget allows about 5 steps" in err
    record = json.loads((out / "train_config.json").read_text())
    assert record["lr_schedule"] == "recipe" and record["warmup_steps"] == 2000
    assert record["schedule"]["schedule"] == "recipe"
    state = load_checkpoint(list_checkpoints(out)[-1]).trainer_state
    w, peak = 2000, 1e-3
    # the recipe as given: lr(k) = peak * k / warmup during the warm-up (k = steps done + 1)
    assert state["scheduler"]["_last_lr"][0] == pytest.approx(peak * 6 / w)


def test_without_a_model_the_written_rule_picks_one_and_says_why(toy_home, tmp_path, capsys):
    """No --model: the rule's model and sizes, except a flag the user gave, which wins; the record says so."""
    from attnkit.tasks.translation.budget_defaults import pick_model

    argv = ["--home", str(toy_home), "train", "translation", "--data", "toy", "--max-time-s", "600"]
    rnn = ["--emb-dim", "16", "--hidden-dim", "16", "--attn-dim", "16", "--batch-size", "16", "--threads", "1"]
    out = tmp_path / "run"
    given = ["--encoder-dim", "8"]  # the rule would set 128
    assert cli_main([*argv, *rnn, *given, "--max-steps", "2", "--out-dir", str(out), "--no-progress"]) == 0
    pick = pick_model(600)
    assert pick.options == {"rnn_attention": "luong", "encoder_dim": 128, "dropout": 0.1}
    err = capsys.readouterr().err
    assert f"attnkit: no --model given: training rnnsearch (--rnn-attention luong --dropout 0.1): {pick.why}" in err
    record = json.loads((out / "train_config.json").read_text())
    assert record["model"] == pick.model == "rnnsearch"
    mc = record["model_config"]
    assert mc["rnn_attention"] == "luong" and mc["encoder_dim"] == 8 and mc["dropout"] == 0.1
    # no budget: the shipped recipe's model, nothing set
    assert pick_model(None).options == {} and pick_model(None).model == "rnnsearch"


def test_a_transformer_asked_for_with_a_short_budget_gets_the_rule_s_size_unless_given(toy_home, tmp_path, capsys):
    """`--model transformer --max-time-s 600`: the size rule sets the layers, the feed-forward width and the learning
    rate the user left unset (here the user gives d_model, the heads and one encoder layer), says so, and the record
    and the model have them; past the rule's bound, or without a time budget, the recipe's sizes stand, unannounced."""
    from attnkit.tasks.translation.budget_defaults import pick_for

    tiny = ["--d-model", "16", "--nhead", "2", "--num-encoder-layers", "1", "--batch-size", "16", "--threads", "1"]
    argv = ["--home", str(toy_home), "train", "translation", "--data", "toy", "--model", "transformer", *tiny]
    out = tmp_path / "run"
    assert cli_main([*argv, "--max-time-s", "600", "--max-steps", "2", "--out-dir", str(out), "--no-progress"]) == 0
    pick = pick_for("transformer", 600)
    assert pick.options == {
        "d_model": 128,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "dim_feedforward": 512,
        "lr": 4e-3,
    }
    err = capsys.readouterr().err
    said = "--num-decoder-layers 2 --dim-feedforward 512 --lr 0.004"
    assert f"attnkit: a 600-s budget: training transformer ({said}): {pick.why}" in err
    record = json.loads((out / "train_config.json").read_text())
    mc = record["model_config"]
    assert record["lr"] == 4e-3
    assert (mc["d_model"], mc["nhead"], mc["num_encoder_layers"], mc["num_decoder_layers"]) == (16, 2, 1, 2)
    assert mc["dim_feedforward"] == 512
    model = json.loads((list_checkpoints(out)[-1] / "config.json").read_text())
    assert (model["num_decoder_layers"], model["dim_feedforward"]) == (2, 512)
    # an hour, or no time budget: the recipe (3+3 layers, FFN 1,024, peak 1e-3), nothing said
    assert pick_for("transformer", 3600) is None and pick_for("transformer", None) is None
    assert pick_for("rnnsearch", 600) is None and pick_for(None, 600).model == "rnnsearch"
    # measured on a CPU only: on a GPU the recipe's size learns more in 10 minutes, and stands
    assert pick_for("transformer", 600, "cuda") is None and pick_for("transformer", 600, "mps") is None
    assert pick_for("transformer", 600, "cpu") == pick and pick_for(None, 600, "cuda").model == "rnnsearch"
    out = tmp_path / "long"
    assert cli_main([*argv, "--max-time-s", "3600", "--max-steps", "2", "--out-dir", str(out), "--no-progress"]) == 0
    assert "a 3600-s budget" not in capsys.readouterr().err
    record = json.loads((out / "train_config.json").read_text())
    assert record["lr"] == 1e-3 and record["model_config"]["num_decoder_layers"] == 3
    assert record["model_config"]["dim_feedforward"] == 1024


def test_a_run_folder_opens_as_its_newest_complete_checkpoint(toy_home, tmp_path, capsys):
    """`serve`/`translate --model RUN_FOLDER` on a model still training: its newest complete checkpoint."""
    from attnkit.service import model_folder, open_model
    from attnkit.training.checkpoint import CheckpointError

    out = tmp_path / "run"
    assert train(toy_home, out, "--max-steps", "4", "--save-every-steps", "2") == 0
    (out / "step-00000009").mkdir()  # a save under way: no COMPLETE marker yet
    newest = out / "step-00000004"
    assert model_folder(str(out), default="unused") == newest and (newest / "COMPLETE").is_file()
    assert "is a training run: using its newest checkpoint, step-00000004" in capsys.readouterr().err
    spec = open_model(str(out)).spec  # serve's spec
    assert spec.checkpoint == str(newest) and spec.label == "run"
    assert open_model("rnnsearch-es-en").spec.checkpoint is None
    assert cli_main(["translate", "--model", str(out), "a b c"]) == 0
    empty = tmp_path / "starting"
    empty.mkdir()
    (empty / "train_log.jsonl").write_text("")
    with pytest.raises(CheckpointError, match="no complete checkpoint yet"):
        model_folder(str(empty), default="unused")
    assert cli_main(["translate", "--model", str(empty), "a b c"]) == 2
    assert "a training run with no complete checkpoint yet" in capsys.readouterr().err


def test_a_model_of_a_one_language_corpus_is_evaluated_in_the_direction_it_was_trained(tmp_path):
    """A corpus with one language on both sides (``en`` -> ``en``, as King James -> World English Bible) is
    never read turned around: `evaluate translation` translates its sources and scores against its targets."""
    from attnkit.data.corpus import Corpus, open_corpus
    from attnkit.tasks.translation.translation_quality import evaluate_translation

    assert not Corpus("same", "en", "en").turned_around("en", "en")
    assert Corpus("bible", "es", "en").turned_around("en", "es")
    assert not Corpus("bible", "es", "en").turned_around("es", "en")
    home = tmp_path / "home"
    pairs = synthetic_pairs(120, seed=7)
    files = {
        split: write_aligned(tmp_path, split, part, "old", "new")  # file suffixes; both sides are English
        for split, part in (("train", pairs[:100]), ("valid", pairs[100:110]), ("test", pairs[110:]))
    }
    prepare_parallel("one-language", src_lang="en", tgt_lang="en", vocab_size=400, home=home, **files)
    out = tmp_path / "run"
    argv = ["--home", str(home), "train", "translation", "--data", "one-language", "--model", "transformer"]
    assert cli_main([*argv, *SIZES, "--max-steps", "1", "--out-dir", str(out), "--no-progress"]) == 0
    report = evaluate_translation(list_checkpoints(out)[-1], limit=3, home=home)
    test = open_corpus("one-language", home).pairs("test", limit=3)
    assert [(e["source"], e["reference"]) for e in report["examples"]] == [(p.src, p.tgt) for p in test]
    assert any(p.src != p.tgt for p in test)  # the two sides differ, so a swap could not pass unseen
