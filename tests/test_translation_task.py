"""End to end on a tiny slice of the real corpus: train, resume exactly, export, translate, evaluate, CLI errors."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from attnkit.cli import main as cli_main
from attnkit.errors import ConfigError
from attnkit.tasks.translation import (
    LexicalShortlist,
    ShortlistError,
    TranslationConfig,
    Translator,
    bleu_by_length,
    build_optimizer,
    build_translation_model,
    corpus_scores,
    evaluate_translation,
    get_tokenizer,
    train_translation,
    translation_loss_fn,
)
from attnkit.training.checkpoint import list_checkpoints, load_checkpoint
from tiny import TINY_RNN_TRAINING, tiny_transformer

TINY = dict(vocab_size=1000, **TINY_RNN_TRAINING)


@pytest.fixture(scope="module")
def trained(bible_home, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "rnnsearch"
    cfg = TranslationConfig.from_options("rnnsearch", out_dir=str(out), epochs=2, save_every_steps=3, **TINY)
    summary = train_translation(cfg, home=bible_home)
    return cfg, summary, out


def test_training_writes_checkpoints_and_summary(trained):
    _, summary, out = trained
    assert summary["epochs"] == 2 and summary["steps"] == 8  # 64 pairs / 16 per batch, 2 epochs
    ck = load_checkpoint(out / "best")
    assert ck.config["model_type"] == "rnnsearch" and "tokenizer.model" in ck.files
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    valid = [r for r in log if r["event"] == "valid"]
    assert len(valid) == 2 and all({"valid_loss", "valid_bleu", "valid_chrf"} <= r.keys() for r in valid)
    assert all(r["valid_s"] > 0 for r in valid)  # each validation's seconds


def test_resume_equals_uninterrupted_run(bible_home, tmp_path):
    # a budget extended on resume: the recipe's schedule (a budget-fitted one follows the budget it is given)
    base = TranslationConfig.from_options(
        "rnnsearch", epochs=3, save_every_steps=2, patience=None, lr_schedule="recipe", **TINY
    )
    straight = replace(base, run=replace(base.run, out_dir=str(tmp_path / "a"), max_steps=7))
    train_translation(straight, home=bible_home)
    first = replace(base, run=replace(base.run, out_dir=str(tmp_path / "b"), max_steps=3))
    train_translation(first, home=bible_home)
    rest = replace(first, run=replace(first.run, max_steps=7))
    s = train_translation(rest, home=bible_home, resume=True)
    assert s["resumed_from"] is not None and s["steps"] == 7
    a = load_checkpoint(tmp_path / "a" / "step-00000007").state_dict
    b = load_checkpoint(tmp_path / "b" / "step-00000007").state_dict
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_export_translate_and_evaluate(trained, bible_home, tmp_path):
    _, _, out = trained
    exported = tmp_path / "shipped"
    assert cli_main(["export", str(out / "best"), str(exported)]) == 0
    ck = load_checkpoint(exported)
    assert ck.trainer_state is None
    assert all(v.dtype == torch.float16 for v in ck.state_dict.values() if v.is_floating_point())
    tr = Translator.load(exported)
    res = tr.translate(
        ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios."], beam_size=3, return_attention=True
    )
    for r in res:
        assert isinstance(r["translation"], str)
        assert r["attention"].shape == (len(r["tokens"]), len(r["source_pieces"]))
    rep = evaluate_translation(exported, limit=12, home=bible_home)
    assert rep["n_sentences"] == 12 and 0 <= rep["bleu"] <= 100
    assert sum(b["n"] for b in rep["by_length"]) == 12


def test_export_average_last_is_the_mean_of_the_last_checkpoints(trained, tmp_path, capsys):
    _, _, out = trained
    last = list_checkpoints(out)[-2:]
    assert len(last) == 2
    exported = tmp_path / "avg"
    assert cli_main(["export", str(out), str(exported), "--average-last", "2", "--fp32"]) == 0
    a, b = (load_checkpoint(d).state_dict for d in last)
    got = load_checkpoint(exported).state_dict
    assert got.keys() == a.keys()
    differs = 0
    for k in a:
        want = ((a[k].double() + b[k].double()) / 2).float()
        torch.testing.assert_close(got[k], want, rtol=0, atol=1e-7, msg=k)
        differs += not torch.equal(a[k], b[k])
    assert differs > 0  # the two checkpoints really differ, so the test can tell a mean from a copy
    capsys.readouterr()
    assert cli_main(["export", str(out), str(tmp_path / "x"), "--average-last", "99"]) == 2
    assert "--average-last 99" in capsys.readouterr().err
    assert cli_main(["export", str(out), str(tmp_path / "x"), "--average-last", "0"]) == 2
    assert not (tmp_path / "x").exists()


def test_export_ships_a_length_penalty_that_translate_and_evaluate_use(
    trained, bible_home, tmp_path, capsys, monkeypatch
):
    import attnkit.tasks.translation.inference as inference

    _, _, out = trained
    exported = tmp_path / "lp"
    assert cli_main(["export", str(out / "best"), str(exported), "--length-penalty", "2.5"]) == 0
    assert "generation.json" in load_checkpoint(exported).files  # in the manifest: verified like the weights
    tr = Translator.load(exported)
    assert tr.length_penalty == 2.5 and Translator.load(out / "best").length_penalty == 0.6  # without it: Wu et al.'s
    searched = []  # the α each batch's search was given

    def search(*args, **kw):
        searched.append(kw["length_penalty"])
        return real(*args, **kw)

    real = inference.search
    monkeypatch.setattr(inference, "search", search)
    src = ["Y dijo Dios.", "Jesús lloró."]
    own = tr.translate(src, beam_size=3)
    given = tr.translate(src, beam_size=3, length_penalty=2.5)
    assert [(r.tokens, r.score) for r in own] == [(r.tokens, r.score) for r in given]
    tr.translate(src, beam_size=3, length_penalty=0)
    assert searched == [2.5, 2.5, 0.0]
    capsys.readouterr()
    args = ["--home", str(bible_home), "evaluate", "translation", "--model", str(exported), "--limit", "4", "--json"]
    assert cli_main([*args, "--beam", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["length_penalty"] == 2.5
    assert cli_main([*args, "--beam", "3", "--length-penalty", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["length_penalty"] == 1.0
    assert cli_main(args) == 0  # greedy: no penalty to apply
    assert json.loads(capsys.readouterr().out)["length_penalty"] is None


def test_a_bad_length_penalty_is_refused_with_its_name(trained, tmp_path, capsys):
    from attnkit.pretrained import resolve_model
    from attnkit.tasks.translation.generation import read_generation_defaults
    from attnkit.training.checkpoint import CheckpointError

    _, _, out = trained
    for bad in ("-1", "11", "nan", "x"):
        assert cli_main(["translate", "--model", str(out / "best"), "--length-penalty", bad, "Hola."]) == 2
        assert "argument --length-penalty" in capsys.readouterr().err
    with pytest.raises(ValueError, match="length_penalty"):
        Translator.load(out / "best").translate(["Hola."], beam_size=2, length_penalty=-0.5)
    captioner = resolve_model("captioner-soft")
    assert cli_main(["export", str(captioner), str(tmp_path / "c"), "--length-penalty", "1"]) == 2
    assert "--length-penalty is for translation models" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
    for text, why in (
        ("[2]", "not a JSON object"),
        ('{"length_penalty": -1}', "length_penalty"),
        ('{"beam": 4}', "beam"),
    ):
        (tmp_path / "g").mkdir(exist_ok=True)
        (tmp_path / "g" / "generation.json").write_text(text)
        with pytest.raises(CheckpointError, match=f"generation.json: not a valid generation.json.*{why}"):
            read_generation_defaults(tmp_path / "g")


def test_transformer_lr_peaks_at_cfg_lr_after_warmup():
    cfg = TranslationConfig.from_options(
        "transformer",
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dim_feedforward=32,
        warmup_steps=10,
        lr=2e-3,
        max_len=20,
    )
    model = build_translation_model(cfg, 50)
    opt, sched = build_optimizer(cfg, model)
    assert opt.defaults["betas"] == (0.9, 0.98)
    rates = []
    for _ in range(40):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # the k-th step (1-based) uses lr * min(k / w, sqrt(w / k))
    want = [2e-3 * min(k / 10, (10 / k) ** 0.5) for k in range(1, 41)]
    assert rates == pytest.approx(want, rel=1e-12)
    assert max(rates) == pytest.approx(2e-3) and rates.index(max(rates)) == 9
    rnn_cfg = TranslationConfig.from_options("rnnsearch", lr=2e-3, max_len=20, lr_schedule="recipe")
    opt2, sched2 = build_optimizer(rnn_cfg, build_translation_model(rnn_cfg, 50))
    assert sched2 is None and opt2.param_groups[0]["lr"] == 2e-3
    # auto: the same constant rate until the trainer fits it to a short budget (or keeps it)
    auto = TranslationConfig.from_options("rnnsearch", lr=2e-3, max_len=20)
    opt3, sched3 = build_optimizer(auto, build_translation_model(auto, 50))
    fn = sched3.lr_lambdas[0]
    assert opt3.param_groups[0]["lr"] == 2e-3 and fn.base == {"kind": "constant", "value": 1.0} and fn.peak == 1.0


def test_transformer_through_the_cli_train_export_plot_evaluate(bible_home, tmp_path, capsys):
    out = tmp_path / "tf"
    tiny = {**{k: v for k, v in TINY.items() if k not in ("emb_dim", "hidden_dim", "attn_dim")}, "dropout": 0.0}
    cfg = TranslationConfig.from_options(
        "transformer",
        out_dir=str(out),
        epochs=1,
        d_model=16,
        num_encoder_layers=1,
        num_decoder_layers=1,
        nhead=2,
        dim_feedforward=32,
        warmup_steps=2,
        lr=3e-3,
        save_every_steps=2,
        keep_last=2,
        **tiny,
    )
    summary = train_translation(cfg, home=bible_home)
    assert summary["steps"] == 4 and len(list_checkpoints(out)) == 2  # keep_last honoured
    shipped = tmp_path / "shipped"
    assert cli_main(["export", str(out), str(shipped), "--average-last", "2"]) == 0
    assert load_checkpoint(shipped).config["model_type"] == "transformer"
    png = tmp_path / "heads.png"
    capsys.readouterr()
    assert (
        cli_main(["--home", str(bible_home), "translate", "--model", str(shipped), "--plot", str(png), "Y dijo Dios."])
        == 0
    )
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert (
        cli_main(
            ["--home", str(bible_home), "evaluate", "translation", "--model", str(shipped), "--limit", "5", "--json"]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert rep["model_type"] == "transformer" and rep["n_sentences"] == 5 and 0 <= rep["bleu"] <= 100


def test_cli_reports_bad_input_without_traceback(trained, tmp_path, capsys):
    _, _, out = trained
    model = str(out / "best")
    assert cli_main(["translate", "--model", model, ""]) == 2
    assert "argument 1 is empty: give some text to translate" in capsys.readouterr().err
    assert cli_main(["translate", "--model", model, "palabra " * 200]) == 2
    assert "more than this model's maximum" in capsys.readouterr().err
    assert cli_main(["translate", "--model", str(tmp_path / "nope"), "Hola"]) == 2
    assert "does not exist" in capsys.readouterr().err
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-r", model, str(broken)], check=True)
    with open(broken / "model.safetensors", "r+b") as fh:
        fh.truncate(100)
    assert cli_main(["translate", "--model", str(broken), "Hola"]) == 2
    assert "model.safetensors" in capsys.readouterr().err
    assert cli_main(["translate", "--model", model, "And God said, let there be light and there was light."]) == 0
    assert "looks like English" in capsys.readouterr().err


def test_cli_evaluate_json_and_length_plot(trained, bible_home, capsys, tmp_path):
    _, _, out = trained
    code = cli_main(
        [
            "--home",
            str(bible_home),
            "evaluate",
            "translation",
            "--model",
            str(out / "best"),
            "--limit",
            "5",
            "--json",
            "--plot",
            str(tmp_path / "by_length.png"),
        ]
    )
    assert code == 0
    rep = json.loads(capsys.readouterr().out)
    assert {"bleu", "chrf", "n_sentences", "by_length"} <= rep.keys() and rep["n_sentences"] == 5
    from PIL import Image

    assert Image.open(tmp_path / "by_length.png").size[0] > 300


def test_scores_and_length_buckets():
    refs = ["the cat sat on the mat", "a b c d e f g h i j k l"]
    assert corpus_scores(refs, refs)["bleu"] == pytest.approx(100.0)
    rows = bleu_by_length(["uno dos", " ".join(["x"] * 12)], refs, refs)
    assert [r["n"] for r in rows][:2] == [1, 1] and rows[0]["bucket"] == "0-10" and rows[-1]["bucket"] == "60+"
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_scores(refs, refs[:1])


def test_tokenizer_is_cached_per_vocab_size(bible_home):
    a = get_tokenizer(1000, bible_home)
    b = get_tokenizer(1000, bible_home)
    assert a.to_bytes() == b.to_bytes() and a.vocab_size == 1000


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "attnkit.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("attnkit ")
    assert (
        Path(__file__).resolve().parents[1].joinpath("pyproject.toml").read_text().count('attnkit = "attnkit.cli:main"')
        == 1
    )


def _resume_a_copy(out, bible_home, tmp_path, *flags) -> int:
    """``train translation --resume`` on a copy of the run in ``out``, with ``flags``; the exit code."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(out), str(run)], check=True)
    return cli_main(
        [
            "--home",
            str(bible_home),
            "train",
            "translation",
            "--model",
            "rnnsearch",
            "--out-dir",
            str(run),
            "--resume",
            "--vocab-size",
            "1000",
            "--emb-dim",
            "16",
            "--attn-dim",
            "16",
            "--limit-train",
            "64",
            "--epochs",
            "3",
            "--no-progress",
            "--threads",
            "1",
            *flags,
        ]
    )


def test_resume_with_an_incompatible_config_is_reported(trained, bible_home, tmp_path, capsys):
    code = _resume_a_copy(trained[2], bible_home, tmp_path, "--hidden-dim", "8")
    err = capsys.readouterr().err
    assert code == 2
    assert "checkpoint" in err and "shape" in err


def test_each_model_gets_its_recipe_unless_the_options_are_given():
    rnn = TranslationConfig.from_options("rnnsearch")
    assert (rnn.lr, rnn.max_tokens, rnn.batch_size) == (3e-3, 2048, None)
    tf = TranslationConfig.from_options("transformer")
    assert (tf.lr, tf.max_tokens, tf.batch_size) == (1e-3, None, 64)
    given = TranslationConfig.from_options("rnnsearch", lr=5e-4, batch_size=32)
    assert (given.lr, given.max_tokens, given.batch_size) == (5e-4, None, 32)
    with pytest.raises(ConfigError, match="max_tokens"):
        TranslationConfig.from_options("rnnsearch", max_tokens=0)
    with pytest.raises(ConfigError, match="lr"):
        TranslationConfig.from_options("rnnsearch", lr=-1.0)


def test_resume_with_other_batches_is_refused(trained, bible_home, tmp_path, capsys):
    code = _resume_a_copy(
        trained[2],
        bible_home,
        tmp_path,
        "--hidden-dim",
        "16",
        "--max-len",
        "80",
        "--dropout",
        "0.1",
        "--batch-size",
        "16",
        "--max-tokens",
        "400",
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "max_tokens=None" in err and "400" in err


@pytest.mark.parametrize("kind", ["rnnsearch", "rnnsearch-luong", "rnnencdec", "transformer"])
def test_fused_loss_equals_the_logits_loss(kind):
    """The training loss projects only non-pad rows, in chunks; loss and gradients must equal the
    plain path: full (B, T, V) logits, then label_smoothed_nll ignoring padding (float64)."""
    from attnkit.models.registry import model_class
    from attnkit.models.seq2seq import Seq2SeqConfig
    from attnkit.training.losses import label_smoothed_nll

    torch.manual_seed(0)
    V = 30
    name, _, step = kind.partition("-")
    if name == "transformer":
        model = tiny_transformer(V, num_encoder_layers=1, num_decoder_layers=1).train()
    else:
        model = model_class(name).from_config(
            Seq2SeqConfig(
                vocab_size=V,
                emb_dim=12,
                hidden_dim=10,
                attn_dim=8,
                dropout=0.0,
                rnn_attention=step or "bahdanau",
                encoder_dim=6,
            ),
        )
    model.double()
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, V, (3, 6), generator=g)
    src[1, 4:] = 0
    tgt = torch.randint(4, V, (3, 5), generator=g)
    tgt[2, 3:] = 0  # padded target positions
    batch = {
        "src": src,
        "src_lengths": torch.tensor([6, 4, 6]),
        "tgt_in": torch.cat([torch.ones(3, 1, dtype=torch.long), tgt[:, :-1]], 1),
        "tgt_out": tgt,
    }
    loss, n, _ = translation_loss_fn(0, 0.1)(model, batch)
    fused = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
    ref, n_ref = label_smoothed_nll(logits, tgt, 0, 0.1)
    plain = torch.autograd.grad(ref, list(model.parameters()), allow_unused=True)
    assert n == n_ref == 13
    torch.testing.assert_close(loss, ref)
    for (name_, _), a, b in zip(model.named_parameters(), fused, plain):
        if b is None:
            assert a is None or not a.any(), name_
        else:
            torch.testing.assert_close(a, b, msg=name_)


def test_under_bf16_autocast_the_fused_loss_runs_bf16_products_and_matches_autocast_logits():
    """bf16 training (autocast) keeps the fused loss, its output-layer products in bf16 like every
    other layer's; its loss and gradients match the autocast path that makes all (B, T, V) logits in
    bf16 and takes label_smoothed_nll of them in float32, to bf16's rounding."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from attnkit.training.losses import label_smoothed_nll

    class OutputProducts(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.dtypes, self.rows = set(), set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm) and out.shape[-1] == V:
                self.dtypes.add(out.dtype)  # (rows, V) logits
                self.rows.add(out.shape[0])
            return out

    V = 40
    model = tiny_transformer(V, num_encoder_layers=1, num_decoder_layers=1).train()
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(4, V, (3, 6), generator=g), torch.randint(4, V, (3, 5), generator=g)
    tgt[2, 3:] = 0
    batch = {
        "src": src,
        "src_lengths": torch.tensor([6, 6, 6]),
        "tgt_in": torch.cat([torch.ones(3, 1, dtype=torch.long), tgt[:, :-1]], 1),
        "tgt_out": tgt,
    }
    params = list(model.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16), OutputProducts() as rec:
        loss, n, _ = translation_loss_fn(0, 0.1)(model, batch)
    assert rec.dtypes == {torch.bfloat16} and loss.dtype == torch.float32
    assert rec.rows == {13}  # the fused path: the 13 real target positions, not all 3 x 5
    fused = torch.autograd.grad(loss, params, allow_unused=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
    assert logits.dtype == torch.bfloat16
    ref, n_ref = label_smoothed_nll(logits, tgt, 0, 0.1)
    plain = torch.autograd.grad(ref, params, allow_unused=True)
    assert n == n_ref == 13
    torch.testing.assert_close(loss, ref, rtol=4e-3, atol=0)
    for (name_, _), a, b in zip(model.named_parameters(), fused, plain):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=2e-2 * float(b.abs().max()) + 1e-6, msg=name_)


def test_shortlist_cli_build_translate_evaluate(trained, bible_home, capsys, tmp_path):
    """`attnkit shortlist` builds the file; translate/evaluate --shortlist use it; a shortlist that
    holds every piece translates exactly as the whole vocabulary; errors are one line."""
    _, _, out = trained
    model, path = str(out / "best"), tmp_path / "sl.safetensors"
    assert (
        cli_main(
            [
                "--home",
                str(bible_home),
                "shortlist",
                "--model",
                model,
                "--split",
                "valid",
                "--frequent",
                "50",
                "--per-source",
                "5",
                "--output",
                str(path),
            ]
        )
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    sentences = ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz: y fué la luz."]
    assert cli_main(["translate", "--model", model, "--shortlist", str(path), "--beam", "3", *sentences]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    tr = Translator.load(model)
    sl = LexicalShortlist.load(path)
    ids = sl.ids_for(tr.encode_sources(sentences), always=(1, 2, 3))
    for r in tr.translate(sentences, beam_size=3, shortlist=sl):
        assert set(r["tokens"]) <= set(ids.tolist())  # only shortlisted pieces come out
    everything = LexicalShortlist(torch.arange(len(tr.tokenizer), dtype=torch.int32), sl.table, sl.tokenizer_sha256)
    for beam in (1, 3):
        full = tr.translate(sentences, beam_size=beam)
        listed = tr.translate(sentences, beam_size=beam, shortlist=everything)
        assert [r["tokens"] for r in listed] == [r["tokens"] for r in full]
    assert (
        cli_main(
            [
                "--home",
                str(bible_home),
                "evaluate",
                "translation",
                "--model",
                model,
                "--limit",
                "4",
                "--beam",
                "2",
                "--shortlist",
                str(path),
                "--json",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert rep["shortlist"] is True and rep["n_sentences"] == 4
    assert (
        cli_main(
            [
                "--home",
                str(bible_home),
                "evaluate",
                "translation",
                "--model",
                model,
                "--limit",
                "2",
                "--beam",
                "2",
                "--shortlist",
                str(path),
            ]
        )
        == 0
    )
    assert "(beam 2, length penalty 0.6, lexical shortlist)" in capsys.readouterr().out  # how it decoded
    with pytest.raises(ShortlistError, match="another tokenizer"):
        tr.translate(sentences, shortlist=LexicalShortlist(sl.frequent, sl.table, "0" * 64))
    assert cli_main(["translate", "--model", model, "--shortlist", str(tmp_path / "none.safetensors"), "Hola"]) == 2
    assert f"{tmp_path / 'none.safetensors'}: no such file; build a shortlist" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "--home",
                str(bible_home),
                "shortlist",
                "--model",
                model,
                "--split",
                "valid",
                "--per-source",
                "0",
                "--output",
                str(path),
            ]
        )
        == 2
    )
    assert "per_source must be an int in [1, 1_000_000]" in capsys.readouterr().err
    assert cli_main(["translate", "--model", model, "--truncate", "palabra " * 200]) == 0
    capsys.readouterr()
    copy = tmp_path / "model"  # without --output: beside the model's weights, and the model still loads
    subprocess.run(["cp", "-r", model, str(copy)], check=True)
    assert cli_main(["--home", str(bible_home), "shortlist", "--model", str(copy), "--split", "valid"]) == 0
    assert (copy / "shortlist.safetensors").is_file() and "wrote" in capsys.readouterr().out
    assert Translator.load(copy).translate(
        sentences[:1], shortlist=LexicalShortlist.load(copy / "shortlist.safetensors")
    )
