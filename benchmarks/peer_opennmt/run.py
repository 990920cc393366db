"""attnkit against OpenNMT-py 3.5.1 on equal terms: same split, same subwords, same size, same threads,
same wall-clock budget, trained at the same time; then both decode the same test verses.

    PYTHONPATH=src .venv/bin/python benchmarks/peer_opennmt/run.py --model rnn --minutes 60
    PYTHONPATH=src .venv/bin/python benchmarks/peer_opennmt/run.py --model transformer --minutes 60

What it does, in order (everything under --work, default runs/peer_opennmt/MODEL):

1. OpenNMT-py in its own virtualenv (setup.sh: --no-deps beside torch 2.13.0, stub spacy/fasttext).
2. The data: attnkit's Bible split, each verse written as attnkit's 8k joint sentencepiece pieces, so
   both toolkits read identical subwords; OpenNMT builds its vocabulary from those files (shared).
3. Training: both start together, one process each with --threads threads, for --minutes. attnkit
   stops itself (--max-time-s) with a checkpoint; OpenNMT saves every 100 steps and is stopped at the
   budget; its last checkpoint written within the budget is the one scored.
4. Decoding: both translate the test verses greedily and with beam 5 (attnkit: its last step
   checkpoint; no test data is used for choosing) with their own translate command
   (``onmt_translate``, ``attnkit translate --file``), timed as sentences/s of the whole process
   (loading included), scored afterwards with sacrebleu (attnkit's corpus_scores) after turning
   pieces back into text. With beam 5 attnkit also decodes over a lexical shortlist of the
   vocabulary (``attnkit shortlist``: the 1,000 most frequent English pieces and each Spanish
   piece's 20 best by Dice over the training pairs), a row of its own.
5. One table (BLEU greedy / beam, training target tokens/s, decoding sentences/s), also as JSON.
   Training tokens/s is, for both, all target tokens of the run over its training seconds. Neither
   validates during the race: OpenNMT-py validates every 10,000 steps, so never here, and attnkit is
   given ``--valid-every-epochs 0`` (``--attnkit-validates`` restores its own recipe, a validation at
   every epoch end, whose seconds the table then prints beside the training steps' own rate).

Model sizes: RNN: bidirectional GRU encoder and GRU decoder, embeddings 256, additive ("mlp")
attention, no input feeding, 256 units in each toolkit's terms. OpenNMT's ``brnn``
splits ``hidden_size`` 256 over the two directions (128 each) and has a 256 decoder and separate
source/target embeddings and generator; attnkit has 256 per direction by default (``--encoder-dim``
sets it), a 256 decoder and one tied embedding matrix; the table prints both parameter counts. (A 512 OpenNMT model, 256 per direction,
was slower per step and lower in BLEU at the same budget.) Transformer: 3+3 layers, d 256, 4 heads,
FFN 1024, shared embeddings, on both sides. Both get batches of 2,048 tokens (attnkit:
``--max-tokens 2048``). Each toolkit otherwise uses its own default recipe (attnkit's
`train translation` defaults; OpenNMT's defaults plus Adam 1e-3 for the RNN). The Transformer's
schedule is the same on both sides: 500 warm-up steps to a peak of 1e-3, then 1/sqrt(step)
(``TRANSFORMER_WARMUP``, ``TRANSFORMER_PEAK_LR``).

attnkit's RNNsearch is Bahdanau's by default (the context enters the GRU; OpenNMT-py calls that
input feeding). ``--attnkit-args "--rnn-attention luong"`` gives it OpenNMT-py's ``input_feed 0``
decoder instead (attention after the GRU step); adding ``--encoder-dim 128`` gives its encoder
OpenNMT-py's ``brnn`` width (128 per direction), so both models are then the same network:

    PYTHONPATH=src .venv/bin/python benchmarks/peer_opennmt/run.py --model rnn --minutes 60 \
        --attnkit-args "--rnn-attention luong --encoder-dim 128" --work runs/peer_opennmt/rnn-brnn
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnkit.data.datasets.bible import load_pairs  # noqa: E402
from attnkit.tasks.translation import corpus_scores, get_tokenizer  # noqa: E402
from attnkit.training.trainer import run_totals  # noqa: E402

ONMT_RNN = {
    "encoder_type": "brnn",
    "decoder_type": "rnn",
    "rnn_type": "GRU",
    "layers": 1,
    "hidden_size": 256,
    "word_vec_size": 256,
    "global_attention": "mlp",
    "input_feed": 0,
    "bridge": True,
    "optim": "adam",
    "learning_rate": 0.001,
    "batch_type": "tokens",
    "batch_size": 2048,
}
#: The Transformer's schedule, the same on both sides: a 60-minute budget on one thread is about 2,500
#: steps of 2,048 tokens, so both warm up for 500 steps to a peak of 1e-3 (attnkit's default peak), then
#: decay as 1/sqrt(step). OpenNMT-py's noam rate is ``learning_rate * (d * warmup) ** -0.5`` at its peak;
#: its WMT recipe (learning_rate 2, warmup 8,000, d 512) peaks at 9.9e-4. (A first run with
#: learning_rate 2 and warmup 500, a 5.6e-3 peak, left OpenNMT-py at perplexity 89 and 2 BLEU.)
TRANSFORMER_WARMUP, TRANSFORMER_PEAK_LR = 500, 1e-3
ONMT_TRANSFORMER = {
    "encoder_type": "transformer",
    "decoder_type": "transformer",
    "layers": 3,
    "hidden_size": 256,
    "word_vec_size": 256,
    "heads": 4,
    "transformer_ff": 1024,
    "dropout": [0.1],
    "attention_dropout": [0.1],
    "position_encoding": True,
    "share_embeddings": True,
    "share_decoder_embeddings": True,
    "optim": "adam",
    "adam_beta2": 0.98,
    "decay_method": "noam",
    "warmup_steps": TRANSFORMER_WARMUP,
    "learning_rate": TRANSFORMER_PEAK_LR * (256 * TRANSFORMER_WARMUP) ** 0.5,
    "label_smoothing": 0.1,
    "param_init": 0.0,
    "param_init_glorot": True,
    "normalization": "tokens",
    "batch_type": "tokens",
    "batch_size": 2048,
    "max_grad_norm": 0.0,
}
ATTNKIT_MODEL = {"rnn": "rnnsearch", "transformer": "transformer"}
#: attnkit's side of the Transformer: the same schedule, and its size given as flags: with a budget of up to 15
#: minutes on a CPU, ``train translation --model transformer`` would otherwise train the ten-minute rule's
#: quarter size (``tasks/translation/budget_defaults.py``), not OpenNMT-py's network.
ATTNKIT_RECIPE = {
    "rnn": [],
    "transformer": [
        *("--warmup-steps", TRANSFORMER_WARMUP, "--lr", TRANSFORMER_PEAK_LR),
        *("--d-model", ONMT_TRANSFORMER["hidden_size"], "--dim-feedforward", ONMT_TRANSFORMER["transformer_ff"]),
        *("--num-encoder-layers", ONMT_TRANSFORMER["layers"], "--num-decoder-layers", ONMT_TRANSFORMER["layers"]),
        *("--nhead", ONMT_TRANSFORMER["heads"]),
    ],
}


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("$", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd)), check=True, **kw)


def prepare_data(work: Path) -> dict:
    """attnkit's split as piece files (one verse a line, OpenNMT-py's input) and as plain text
    (``*.txt``: attnkit's input and the references)."""
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    tok = get_tokenizer(8000)
    files = {}
    for split in ("train", "valid", "test"):
        pairs = load_pairs(split)
        for side, attr in (("es", "src"), ("en", "tgt")):
            path = data / f"{split}.{side}"
            if not path.exists():
                path.write_text(
                    "".join(" ".join(tok.id_to_piece(i) for i in tok.encode(getattr(p, attr))) + "\n" for p in pairs),
                    encoding="utf-8",
                )
            files[f"{split}.{side}"] = path
            (data / f"{split}.{side}.txt").write_text("".join(getattr(p, attr) + "\n" for p in pairs), encoding="utf-8")
    return files


def onmt_env(threads: int) -> dict:
    """OpenNMT-py's environment: the threads, the stubs, and torch.load as OpenNMT-py 3.5.1 expects it
    (it pickles argparse.Namespace into its own checkpoints, which torch >= 2.6 refuses by default;
    these are checkpoints this script just wrote)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = str(HERE / "stubs")
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    return env


def onmt_config(work: Path, files: dict, model: str, seed: int) -> Path:
    cfg = {
        "save_data": str(work / "onmt" / "data"),
        "src_vocab": str(work / "onmt" / "vocab.src"),
        "tgt_vocab": str(work / "onmt" / "vocab.tgt"),
        "share_vocab": True,
        "overwrite": True,
        "data": {
            "corpus_1": {
                "path_src": str(files["train.es"]),
                "path_tgt": str(files["train.en"]),
                "transforms": ["filtertoolong"],
            },
            "valid": {"path_src": str(files["valid.es"]), "path_tgt": str(files["valid.en"])},
        },
        "src_seq_length": 100,
        "tgt_seq_length": 100,
        "src_vocab_size": 9000,
        "tgt_vocab_size": 9000,
        "save_model": str(work / "onmt" / "model"),
        "save_checkpoint_steps": 100,
        "keep_checkpoint": -1,
        "train_steps": 10_000_000,
        "valid_steps": 10_000_000,
        "report_every": 50,
        "seed": seed,
        "num_workers": 0,
        "log_file": str(work / "onmt" / "train.log"),
        **(ONMT_RNN if model == "rnn" else ONMT_TRANSFORMER),
    }
    (work / "onmt").mkdir(parents=True, exist_ok=True)
    path = work / "onmt" / "config.yaml"
    path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
    return path


def train_both(work: Path, files: dict, args) -> dict:
    """Start both trainings together; stop OpenNMT at the budget; return both runs' facts."""
    venv = work.parent / "onmt-venv"
    if not (venv / "bin" / "onmt_train").exists():
        sh(["bash", HERE / "setup.sh", venv])
    env = onmt_env(args.threads)
    cfg = onmt_config(work, files, args.model, args.seed)
    sh([venv / "bin" / "onmt_build_vocab", "-config", cfg, "-n_sample", "-1"], env=env)
    budget = args.minutes * 60
    ours_dir = work / "attnkit"
    ours_cmd = [
        sys.executable,
        "-m",
        "attnkit.cli",
        "train",
        "translation",
        "--model",
        ATTNKIT_MODEL[args.model],
        "--out-dir",
        ours_dir,
        "--max-time-s",
        budget,
        "--threads",
        args.threads,
        "--seed",
        args.seed,
        "--epochs",
        1000,
        *(["--patience", 1000] if args.attnkit_validates else ["--valid-every-epochs", 0]),
        "--max-tokens",
        2048,
        "--no-progress",
        *ATTNKIT_RECIPE[args.model],
        *args.attnkit_args.split(),
    ]
    theirs_cmd = [venv / "bin" / "onmt_train", "-config", cfg]
    t0 = time.time()
    # The children hold their own copies of the log descriptors; the parent's close when Popen returns.
    with open(work / "attnkit.log", "w") as ours_log, open(work / "onmt.log", "w") as theirs_log:
        ours = subprocess.Popen(
            list(map(str, ours_cmd)),
            env=dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=str(ROOT / "src")),
            stdout=ours_log,
            stderr=subprocess.STDOUT,
        )
        theirs = subprocess.Popen(list(map(str, theirs_cmd)), env=env, stdout=theirs_log, stderr=subprocess.STDOUT)
    while time.time() - t0 < budget and theirs.poll() is None:
        time.sleep(5)
    if theirs.poll() is None:
        theirs.send_signal(signal.SIGTERM)
        theirs.wait(timeout=120)
    ours.wait()
    if ours.returncode != 0:
        raise SystemExit(f"attnkit training failed; see {work / 'attnkit.log'}")
    ckpts = sorted((work / "onmt").glob("model_step_*.pt"), key=lambda p: int(re.findall(r"\d+", p.name)[-1]))
    in_budget = [p for p in ckpts if p.stat().st_mtime - t0 <= budget + 5]
    if not in_budget:
        raise SystemExit("OpenNMT-py saved no checkpoint within the budget")
    ours_steps = sorted(ours_dir.glob("step-*"))
    return {
        "budget_s": budget,
        "onmt_checkpoint": str(in_budget[-1]),
        "attnkit_checkpoint": str(ours_steps[-1]),
        "onmt_tokens_per_s": onmt_target_tokens_per_s(work / "onmt.log"),
    }


def parameter_counts(facts: dict, venv: Path) -> dict:
    """Trainable parameters of both scored checkpoints (OpenNMT-py's model plus its generator; a
    matrix its state dicts list twice, shared embeddings or a tied generator, counts once)."""
    from attnkit.training.checkpoint import load_model

    ours = sum(p.numel() for p in load_model(facts["attnkit_checkpoint"])[0].parameters())
    code = (
        "import sys, torch; c = torch.load(sys.argv[1], map_location='cpu', weights_only=False); "
        "print(sum({(t.untyped_storage().data_ptr(), t.storage_offset(), t.shape): t.numel() "
        "for k in ('model', 'generator') for n, t in c[k].items() if not n.endswith('.pe')}.values()))"
    )
    theirs = int(
        subprocess.run(
            [venv / "bin" / "python", "-c", code, facts["onmt_checkpoint"]],
            check=True,
            capture_output=True,
            text=True,
            env=onmt_env(1),
        ).stdout.split()[-1]
    )
    return {"attnkit_parameters": ours, "onmt_parameters": theirs}


def onmt_target_tokens_per_s(log: Path) -> float | None:
    """OpenNMT's target tokens over its whole run / its training seconds, as attnkit's ``run_totals``
    counts: from its step reports ("Step N/...; bsz: src/tgt/sents; ...; S sec"), each window's
    steps times its mean target tokens per batch, over the seconds at the last report."""
    reports = re.findall(r"Step (\d+)/.*?bsz:\s*[\d.]+/\s*([\d.]+)/.*?;\s*(\d+) sec", log.read_text(errors="replace"))
    tokens, last_step = 0.0, 0
    for step, tgt_per_batch, _ in reports:
        tokens += (int(step) - last_step) * float(tgt_per_batch)
        last_step = int(step)
    return tokens / int(reports[-1][2]) if reports else None


def decode_both(work: Path, files: dict, facts: dict, args) -> list[dict]:
    """Each toolkit's own translate command on the same source file, timed as a whole process
    (loading included), its output scored afterwards the same way for both. attnkit decodes
    twice with beam > 1: over the whole vocabulary (as OpenNMT-py does), and over each batch's
    lexical shortlist (``attnkit shortlist``, built once from the training pairs and timed apart)."""
    tok = get_tokenizer(8000)
    refs = (work / "data" / "test.en.txt").read_text(encoding="utf-8").splitlines()
    srcs = files["test.es"].read_text(encoding="utf-8").splitlines()
    n = len(refs) if args.test_limit is None else min(args.test_limit, len(refs))
    (work / "test.es").write_text("\n".join(srcs[:n]) + "\n", encoding="utf-8")
    plain = (work / "data" / "test.es.txt").read_text(encoding="utf-8").splitlines()  # attnkit tokenises itself
    (work / "test.es.txt").write_text("\n".join(plain[:n]) + "\n", encoding="utf-8")
    venv = work.parent / "onmt-venv"
    attnkit_env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=str(ROOT / "src"))
    attnkit = [sys.executable, "-m", "attnkit.cli"]
    shortlist = work / "attnkit.shortlist.safetensors"
    t = time.perf_counter()
    subprocess.run(
        [*attnkit, "shortlist", "--model", facts["attnkit_checkpoint"], "--output", shortlist],
        env=attnkit_env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    facts["attnkit_shortlist_build_s"] = round(time.perf_counter() - t, 1)
    rows = []

    def timed(cmd, env, stdout_to: Path | None = None) -> float:
        t = time.perf_counter()
        with open(stdout_to or os.devnull, "w", encoding="utf-8") as fh:
            subprocess.run([str(c) for c in cmd], env=env, stdout=fh, stderr=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t

    for beam in (1, args.beam):
        out = work / f"onmt.beam{beam}.txt"
        secs = timed(
            [
                venv / "bin" / "onmt_translate",
                "-model",
                facts["onmt_checkpoint"],
                "-src",
                work / "test.es",
                "-output",
                out,
                "-beam_size",
                beam,
                "-batch_size",
                64,
                "-batch_type",
                "sents",
                "-max_length",
                250,
            ],
            onmt_env(args.threads),
        )
        hyps = [
            tok.decode([tok.piece_to_id(p) for p in line.split()])
            for line in out.read_text(encoding="utf-8").splitlines()
        ]
        rows.append(
            {
                "toolkit": "OpenNMT-py 3.5.1",
                "beam": beam,
                **corpus_scores(hyps, refs[:n]),
                "sentences_per_s": round(n / secs, 2),
            }
        )
        for listed in [False, True] if beam > 1 else [False]:
            out = work / f"attnkit.beam{beam}{'.shortlist' if listed else ''}.txt"
            cmd = [
                *attnkit,
                "translate",
                "--model",
                facts["attnkit_checkpoint"],
                "--file",
                work / "test.es.txt",
                "--beam",
                beam,
                "--truncate",
                "--device",
                "cpu",
            ] + (["--shortlist", shortlist] if listed else [])
            secs = timed(cmd, attnkit_env, out)
            hyps = out.read_text(encoding="utf-8").splitlines()
            rows.append(
                {
                    "toolkit": "attnkit" + (" shortlist" if listed else ""),
                    "beam": beam,
                    **corpus_scores(hyps, refs[:n]),
                    "sentences_per_s": round(n / secs, 2),
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["rnn", "transformer"], default="rnn")
    ap.add_argument("--minutes", type=float, default=60.0, help="training budget for each toolkit (default 60)")
    ap.add_argument("--threads", type=int, default=1, help="threads for each toolkit (default 1)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=None, help="decode only the first N test verses")
    ap.add_argument("--attnkit-args", default="", help="extra flags for `attnkit train translation`")
    ap.add_argument(
        "--attnkit-validates",
        action="store_true",
        help="attnkit validates at every epoch end, as its own recipe does (default: neither toolkit validates "
        "during the race, as OpenNMT-py's configuration here never does)",
    )
    ap.add_argument("--work", default=None, help="work folder (default runs/peer_opennmt/MODEL)")
    ap.add_argument(
        "--decode-only", action="store_true", help="skip training: decode the checkpoints of a finished run"
    )
    args = ap.parse_args()
    work = Path(args.work or ROOT / "runs" / "peer_opennmt" / args.model).resolve()
    work.mkdir(parents=True, exist_ok=True)
    files = prepare_data(work)
    if args.decode_only:
        facts = json.loads((work / "train_facts.json").read_text())
    else:
        facts = train_both(work, files, args)
        (work / "train_facts.json").write_text(json.dumps(facts, indent=2))
    # both rates from the logs, so that --decode-only reports them as a fresh run would
    totals = run_totals(work / "attnkit")  # its run folder's own log
    facts["attnkit_tokens_per_s"] = totals["tokens_per_s"]
    # with --attnkit-validates, attnkit validates at every epoch end; OpenNMT-py here never does (valid_steps 10^7)
    facts["attnkit_valid_s"], facts["attnkit_tokens_per_step_s"] = totals["valid_s"], totals["tokens_per_step_s"]
    if (work / "onmt.log").is_file():  # a work folder copied without its logs keeps the recorded rate
        facts["onmt_tokens_per_s"] = onmt_target_tokens_per_s(work / "onmt.log")
    rows = decode_both(work, files, facts, args)
    facts.update(parameter_counts(facts, work.parent / "onmt-venv"))
    report = {"model": args.model, "minutes": args.minutes, "threads": args.threads, **facts, "rows": rows}
    (work / "report.json").write_text(json.dumps(report, indent=2))
    print(f"\n{args.model}: {args.minutes:g} min each, {args.threads} thread(s) each, trained at the same time")
    print(f"{'toolkit':<18} {'beam':>4} {'BLEU':>6} {'chrF':>6} {'sent/s':>7}  train tgt tok/s")
    for r in rows:
        tps = facts["attnkit_tokens_per_s"] if r["toolkit"].startswith("attnkit") else facts["onmt_tokens_per_s"]
        print(
            f"{r['toolkit']:<18} {r['beam']:>4} {r['bleu']:>6.2f} {r['chrf']:>6.2f} {r['sentences_per_s']:>7.1f}  "
            f"{tps if tps is None else round(tps)}"
        )
    if facts.get("attnkit_valid_s"):
        print(
            f"attnkit's validations took {facts['attnkit_valid_s']:.0f} s of its run (OpenNMT-py's none); "
            f"its training steps alone: {facts['attnkit_tokens_per_step_s']:.0f} tgt tok/s"
        )
    print(f"parameters: attnkit {facts['attnkit_parameters']:,}, OpenNMT-py {facts['onmt_parameters']:,}")
    print(f"attnkit's shortlist was built in {facts['attnkit_shortlist_build_s']} s (once per model)")
    print(f"report: {work / 'report.json'}")


if __name__ == "__main__":
    main()
