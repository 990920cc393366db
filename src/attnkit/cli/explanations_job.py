"""``attnkit evaluate explanations`` of a translator as a corpus job: the gold verses split over processes
(``--processes N``, ``torchrun``) or run in resumable parts (``--job-dir``), the report combined exactly.

Rank 0 writes the scored verses' numbers, one a line, to ``verses.txt`` in the job folder (kept when a
resumed job finds it made for the same options, so the finished parts still match it); the parts
(``--part-lines`` verses, 1 by default: the first verses also carry the costly sanity check, and single
verses dealt round robin spread it over the processes) are dealt to the ranks, each writing every verse's
values as one JSON line (:func:`attnkit.attribution.explanation_verses.score_verse`); rank 0 reads the
assembled lines and combines them (:func:`~attnkit.attribution.explanation_verses.combine_verse_scores`)
into the one-process report, its milliseconds per verse aside.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from ..paths import atomic_write_text, atomic_writer
from .corpus_job import is_rank0, run_corpus_job, start_group, torchrun_world

__all__ = ["evaluate_explanations_job"]

_OWN = ("verses.txt", "verses.json")


def _prepare(run, options: dict, job_dir: Path) -> tuple[list[str], dict]:
    """Rank 0: ``verses.txt`` (line ``k``: verse ``k``'s number and reference), rewritten only when missing
    or made for other options."""
    verses, stamp = job_dir / "verses.txt", job_dir / "verses.json"
    with contextlib.suppress(OSError, ValueError):
        if json.loads(stamp.read_text(encoding="utf-8")) == options and verses.is_file():
            return [str(verses)], {}
    job_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        stamp.unlink()  # the old list is not this job's any more
    with atomic_writer(verses, "w", encoding="utf-8", newline="\n") as out:
        for k, v in enumerate(run.verses):
            out.write(f"{k}\t{v.ref}\n")
    atomic_write_text(stamp, json.dumps(options, sort_keys=True))
    return [str(verses)], {}


def evaluate_explanations_job(args, path) -> dict | None:
    """Score the translator at ``path`` on the gold verses as a corpus job (module docstring); the report on
    rank 0, None on the other ranks."""
    from ..alignment.gold import GOLD_DIR
    from ..attribution.explanation_quality import open_translator_run
    from ..attribution.explanation_verses import combine_verse_scores, score_verse

    device = start_group(args.device)  # under torchrun: this rank's own GPU, before the model is loaded
    run = open_translator_run(
        path,
        methods=args.method,
        limit=args.limit,
        sanity_verses=args.sanity_verses,
        device=device,
        dtype=args.precision,
    )
    options = {
        "command": "evaluate explanations",
        "model": str(run.path),
        "methods": run.names,
        "verses": [v.ref for v in run.verses],
        "sanity_verses": run.sanity_verses,
        "seed": run.seed,
        "device": args.device,
        "precision": str(args.precision),
    }
    if is_rank0():
        ranks = torchrun_world()
        print(
            f"attnkit evaluate explanations: {run.path.name}, {len(run.verses)} gold verses, parts of "
            f"{args.part_lines} verses" + (f" over {ranks} processes" if ranks > 1 else ""),
            file=sys.stderr,
        )
    report: dict = {}

    def work(lines: list[str]) -> bytes:
        records = [score_verse(run, int(line.split("\t", 1)[0])) for line in lines]
        return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")

    def deliver(assembled: Path) -> None:  # the job's files are deleted once the report is made, not before
        records = [json.loads(line) for line in assembled.read_text(encoding="utf-8").splitlines()]
        report.update(combine_verse_scores(run, records))
        for name in (*_OWN, assembled.name):
            with contextlib.suppress(FileNotFoundError):
                (assembled.parent / name).unlink()

    gold = [GOLD_DIR / f"es-en.{x}" for x in ("refs", "es", "en", "sure", "possible")]
    run_corpus_job(
        args,
        command="evaluate-explanations",
        inputs=[str(p) for p in gold],
        output=None,
        options=options,
        work=work,
        part_lines=args.part_lines,
        unit="verse",
        prepare=lambda job_dir: _prepare(run, options, job_dir),
        deliver=deliver,
    )
    return report if is_rank0() else None
