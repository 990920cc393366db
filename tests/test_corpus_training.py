"""Training on a prepared corpus: the memory-mapped batches equal the in-memory ones (and resume
exactly), the Bible written out as files trains step for step like ``--data bible``, and a model of
another language pair (separate vocabularies too) trains, loads, translates and evaluates."""

import json
from dataclasses import replace

import pytest
import torch

from attnkit.cli import main as cli_main
from attnkit.data.batching import encode_pairs
from attnkit.data.corpus import open_corpus, prepare_parallel
from attnkit.data.datasets.bible import load_pairs
from attnkit.data.tokenizer import Tokenizer
from attnkit.explorer.payload import translation_payload
from attnkit.pretrained import known_models
from attnkit.tasks.translation import TranslationConfig, Translator, train_translation, translation_batches
from attnkit.tasks.translation.data import cached_translation_batches
from attnkit.training.checkpoint import load_checkpoint
from attnkit.training.data import Batches
from test_corpus import synthetic_pairs, write_aligned
from tiny import TINY_RNN_TRAINING

TINY = TINY_RNN_TRAINING


@pytest.fixture(scope="module")
def bible_files(bible_home, tmp_path_factory):
    """The Bible's three splits written out as aligned text files, prepared as corpus ``bible-files``."""
    folder = tmp_path_factory.mktemp("bible_files")
    files = {}
    for split in ("train", "valid", "test"):
        ps = load_pairs(split, home=bible_home)
        files[split] = write_aligned(folder, split, [(p.src, p.tgt) for p in ps], "es", "en")
    prepare_parallel("bible-files", src_lang="es", tgt_lang="en", vocab_size=1000, home=bible_home, **files)
    return open_corpus("bible-files", bible_home)


def _batches_equal(a: Batches, b: Batches, epochs=(0, 1)) -> None:
    for epoch in epochs:
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        xs, ys = list(a), list(b)
        assert len(xs) == len(ys) > 0
        for x, y in zip(xs, ys):
            assert x.keys() == y.keys()
            for k in x:
                assert torch.equal(x[k], y[k]), k


def _check_memory_mapped_batches_equal_the_in_memory_ones_and_resume_exactly(bible_files):
    """The map's batches equal encode_pairs + translation_batches over the same pairs, and resume exactly."""
    _, tok = bible_files.tokenizers()
    pairs = bible_files.pairs("train", limit=500)
    kw = dict(batch_size=None, max_tokens=600, seed=3)
    memory = translation_batches(encode_pairs(pairs, tok, 40), **kw)
    cached = cached_translation_batches(*bible_files.token_cache("train"), max_len=40, limit=500, **kw)
    _batches_equal(memory, cached)
    # resume mid-epoch from the saved position: the rest of the epoch, then the next, as uninterrupted
    cached.set_epoch(1)
    it = iter(cached)
    for _ in range(3):
        next(it)
    state = cached.state_dict()
    rest = list(it)
    fresh = cached_translation_batches(*bible_files.token_cache("train"), max_len=40, limit=500, **kw)
    fresh.load_state_dict(state)
    resumed = list(fresh)
    assert len(resumed) == len(rest) > 0
    for x, y in zip(rest, resumed):
        assert torch.equal(x["src"], y["src"]) and torch.equal(x["tgt_out"], y["tgt_out"])


def test_each_rank_makes_only_its_share_of_the_batches():
    made = []
    groups = [[i] for i in range(7)]
    b = Batches(lambda e: groups, lambda idx, e, i: made.append(i) or i)
    b.set_epoch(0)
    assert list(b.shard(1, 3)) == [1, 4] and made == [1, 4]  # batch 6 is the incomplete last group
    assert b.position == 7
    b.set_epoch(0)
    b.position = 3  # resumed after one step of 3 ranks
    assert list(b.shard(0, 3)) == [3]
    with pytest.raises(ValueError, match="rank must be in"):
        list(b.shard(3, 3))


def test_the_bible_as_files_batches_and_trains_step_for_step_like_the_built_in_bible(bible_home, bible_files, tmp_path):
    # one test, so that the corpus is prepared once (the module fixture is per xdist worker)
    _check_memory_mapped_batches_equal_the_in_memory_ones_and_resume_exactly(bible_files)
    assert bible_files.tokenizers()[1].to_bytes() == open_corpus("bible", bible_home).tokenizers(1000)[1].to_bytes()
    base = TranslationConfig.from_options("rnnsearch", epochs=2, save_every_steps=100, patience=None, **TINY)
    logs = {}
    for data in ("bible", "bible-files"):
        vocab = 1000 if data == "bible" else None  # the Bible's default is 8,000; bible-files has its own
        cfg = replace(base, data=data, vocab_size=vocab, run=replace(base.run, out_dir=str(tmp_path / data)))
        train_translation(cfg, home=bible_home)
        log = [json.loads(line) for line in (tmp_path / data / "train_log.jsonl").read_text().splitlines()]
        logs[data] = [
            {k: r[k] for k in ("step", "valid_loss", "valid_bleu", "valid_chrf")} for r in log if r["event"] == "valid"
        ]
    assert len(logs["bible"]) == 2 and logs["bible"] == logs["bible-files"]
    a = load_checkpoint(tmp_path / "bible" / "best").state_dict
    b = load_checkpoint(tmp_path / "bible-files" / "best").state_dict
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_checkpoint(tmp_path / "bible-files" / "best").config["corpus"] == "bible-files"


@pytest.mark.parametrize("model, separate", [("rnnsearch", False), ("transformer", True)])
def test_another_pair_trains_translates_and_evaluates(model, separate, tmp_path, capsys):
    home = tmp_path / "home"
    pairs = synthetic_pairs(600, seed=7)
    train = write_aligned(tmp_path, "train", pairs[:500], "xx", "yy")
    test = write_aligned(tmp_path, "test", pairs[500:], "xx", "yy")
    prepare_parallel(
        "toy", src_lang="xx", tgt_lang="yy", train=train, test=test, vocab_size=400, separate_vocab=separate, home=home
    )
    out = tmp_path / "run"
    opts = ["--d-model", "16", "--nhead", "2", "--dim-feedforward", "32"] if model == "transformer" else []
    argv = ["--home", str(home), "train", "translation", "--data", "toy", "--model", model, "--out-dir", str(out)]
    argv += ["--epochs", "1", "--batch-size", "64", "--threads", "1", "--no-progress", "--valid-bleu-sentences", "4"]
    assert cli_main(argv + opts) == 0
    capsys.readouterr()
    config = json.loads((out / "best" / "config.json").read_text())
    assert (config["src_lang"], config["tgt_lang"], config["corpus"]) == ("xx", "yy", "toy")
    assert (config["src_vocab_size"] == 400) == separate and config["vocab_size"] == 400
    assert (out / "best" / "source_tokenizer.model").is_file() == separate

    tr = Translator.load(out / "best")
    assert (tr.src_lang, tr.tgt_lang, tr.corpus) == ("xx", "yy", "toy")
    assert (tr.src_tokenizer is not tr.tokenizer) == separate
    r = tr.translate([pairs[0][0]], return_attention=True)[0]
    assert r.source_pieces == tr.src_tokenizer.pieces(pairs[0][0])
    if separate:  # each side's embedding has its own table; the output layer is the target's
        assert tr.model.src_embedding.weight.shape[0] == 400 and tr.model.output_layer()[0] is tr.model.embedding.weight

    assert cli_main(["--home", str(home), "translate", "--model", str(out / "best"), "--beam", "2", pairs[1][0]]) == 0
    assert capsys.readouterr().out.strip()
    # its own test split, and the user's files, give the same scores on the same sentences
    assert cli_main(["--home", str(home), "evaluate", "translation", "--model", str(out / "best"), "--json"]) == 0
    on_split = json.loads(capsys.readouterr().out)
    argv = ["--home", str(home), "evaluate", "translation", "--model", str(out / "best"), "--json"]
    assert cli_main([*argv, "--src", str(test[0]), "--ref", str(test[1])]) == 0
    on_files = json.loads(capsys.readouterr().out)
    assert on_split["n_sentences"] == on_files["n_sentences"] == 100 and on_split["bleu"] == on_files["bleu"]
    assert (on_files["split"], on_files["src_lang"], on_files["tgt_lang"]) == ("files", "xx", "yy")
    assert cli_main([*argv, "--src", str(test[0]), "--ref", str(train[1])]) == 2
    assert f"{test[0]} has 100 lines but {train[1]} has 500" in capsys.readouterr().err
    assert cli_main([*argv, "--src", str(test[0])]) == 2
    assert "--src and --ref go together" in capsys.readouterr().err
    assert (
        cli_main(["--home", str(home), "shortlist", "--model", str(out / "best"), "--output", str(tmp_path / "s")]) == 0
    )


def test_models_saved_before_languages_were_recorded_load_as_the_bible_es_en():
    for name in ("rnnsearch-es-en", "transformer-es-en", "rnnencdec-es-en"):
        tr = Translator.load(name)
        assert (tr.src_lang, tr.tgt_lang, tr.corpus) == ("es", "en", "bible")
        assert tr.src_tokenizer is tr.tokenizer
    infos = {m.name: m for m in known_models()}
    assert (infos["rnnsearch-es-en"].src_lang, infos["rnnsearch-es-en"].corpus) == ("es", "bible")
    assert infos["captioner-soft"].src_lang is None


def test_guided_alignment_and_fine_tuning_on_your_own_corpus(tmp_path, capsys):
    """``data links NAME`` (eflomal) on a prepared corpus, a guided Transformer trained from those
    links, then fine-tuned from it with ``--init-from`` (weights copied exactly; wrong kind, sizes or
    tokenizer refused in one line)."""
    pytest.importorskip("eflomal")
    from attnkit.errors import ConfigError
    from attnkit.tasks.translation.train import build_translation_model, warm_start

    home = tmp_path / "home"
    pairs = synthetic_pairs(300, seed=3)
    train = write_aligned(tmp_path, "train", pairs[:260], "xx", "yy")
    test = write_aligned(tmp_path, "test", pairs[260:], "xx", "yy")
    prepare_parallel("toy", src_lang="xx", tgt_lang="yy", train=train, test=test, vocab_size=400, home=home)
    corpus = open_corpus("toy", home)
    links = tmp_path / "train.links"
    base = ["--home", str(home)]
    assert cli_main([*base, "data", "links", "toy", "--output", str(links)]) == 0
    lines = links.read_text().splitlines()
    assert len(lines) == corpus.split_size("train") > 200
    # each word of the toy "translation" is its source word reversed, in order: eflomal finds the diagonal
    diagonal = sum(i == j for line in lines for i, j in (map(int, x.split("-")) for x in line.split()))
    assert diagonal > 0.8 * sum(len(line.split()) for line in lines)
    assert cli_main([*base, "data", "links", "nope", "--output", str(links)]) == 2
    assert "nope" in capsys.readouterr().err

    sizes = ["--d-model", "16", "--nhead", "2", "--dim-feedforward", "32"]
    argv = [*base, "train", "translation", "--data", "toy", "--model", "transformer", "--batch-size", "32"]
    argv += ["--threads", "1", "--no-progress", "--valid-bleu-sentences", "4", *sizes]
    guided = tmp_path / "guided"
    assert cli_main([*argv, "--out-dir", str(guided), "--max-steps", "3", "--guided-alignment", str(links)]) == 0
    guided = max(guided.glob("step-*"))  # the checkpoint at the last step
    assert json.loads((guided / "config.json").read_text())["alignment_layer"] == 2  # the penultimate of 3
    # align with no --method reads the guided head of a model that has one (the reading that learnt to align)
    src_file, tgt_file = tmp_path / "a.xx", tmp_path / "a.yy"
    src_file.write_text("".join(p[0] + "\n" for p in pairs[260:266]))
    tgt_file.write_text("".join(p[1] + "\n" for p in pairs[260:266]))
    align = [*base, "align", "--model", str(guided), "--src", str(src_file), "--tgt", str(tgt_file), "--no-progress"]
    capsys.readouterr()
    outs = {}
    for how in ([], ["--method", "guided"], ["--method", "attention"]):
        assert cli_main([*align, *how]) == 0
        outs[tuple(how)] = capsys.readouterr()
    assert "guided: layer 2 head 1" in outs[()].err and outs[()].out == outs[("--method", "guided")].out
    assert "attention: the model's attention" in outs[("--method", "attention")].err
    # the explorer draws the same links for it: its guided head's, read both ways (by intersection)
    assert cli_main(align) == 0
    both = capsys.readouterr().out.splitlines()
    tr = Translator.load(guided)
    for (src, tgt), line in zip(pairs[260:263], both):
        words = translation_payload(tr, src, target=tgt)["words"]
        assert words["links_from"] == "the guided head (layer 2, head 1)"
        assert words["links_rule"] == "argmax both ways, intersection"
        matrix = words["links_matrix"]  # the head's word matrix, which the page shows with its links
        assert len(matrix) == len(words["target"]) and {len(r) for r in matrix} == {len(words["source"])}
        assert words["links"] == sorted([int(i), int(j)] for i, j in (x.split("-") for x in line.split()))
    plain = translation_payload(Translator.load("rnnsearch-es-en"), "Jesús lloró.", beam=1)["words"]
    assert (
        plain["links_from"] is None and plain["links_matrix"] is None and plain["links"]
    )  # a model without a guided head: its matrix's links

    cfg = TranslationConfig.from_options(
        "transformer", data="toy", init_from=str(guided), d_model=16, nhead=2, dim_feedforward=32
    )
    src_tok, tok = corpus.tokenizers()
    model = build_translation_model(cfg, tok.vocab_size, corpus=corpus)
    assert warm_start(model, cfg, tok, src_tok) == len(model.state_dict())
    theirs = load_checkpoint(guided).state_dict
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items())
    wider = replace(cfg, model_config=replace(cfg.model_config, dim_feedforward=64))
    with pytest.raises(ConfigError, match=r"is \(32, 16\) there and \(64, 16\) here"):
        warm_start(build_translation_model(wider, tok.vocab_size, corpus=corpus), wider, tok, src_tok)
    other_tok = Tokenizer.train([p[1] for p in pairs], vocab_size=400)
    with pytest.raises(ConfigError, match="is not the tokenizer of corpus 'toy'"):
        warm_start(model, cfg, other_tok, other_tok)

    tuned = tmp_path / "tuned"
    assert cli_main([*argv, "--out-dir", str(tuned), "--max-steps", "2", "--init-from", str(guided)]) == 0
    assert cli_main([*argv, "--out-dir", str(tmp_path / "x"), "--init-from", "rnnsearch-es-en"]) == 2
    assert "it is a 'rnnsearch' model, and this run trains 'transformer'" in capsys.readouterr().err
