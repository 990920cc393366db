"""``attnkit translate --file`` as a corpus job, with the one-process run's batches.

One process sorts all the sentences of the file by their number of source pieces and translates
them in batches of 64 in that order, and a batch's translations depend on its members (the padded
length, and the length cap of twice the longest source plus 10 pieces). To print byte for byte what
that run prints, a split job translates the same batches:

1. rank 0 reads the file once (the checks and warnings of the one-process run: empty lines left
   out, a line the model cannot read skipped and named), tokenises each kept sentence, and writes
   the kept sentences in that sorted order (``sorted.txt``) and, for each, its place in that order
   (``order.u64``);
2. the parts are runs of whole batches of ``sorted.txt`` (a multiple of 64 lines), translated on
   every rank; each part holds one JSON string per sentence (what is printed for it);
3. rank 0 prints the sentences' texts in input order, reading each one's record by its place.

Memory: rank 0's pass holds one 4-byte length per sentence while sorting; the rest is read through memory-mapped files.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import sys
from pathlib import Path

import numpy as np

from ..paths import atomic_write_bytes, atomic_write_text, atomic_writer
from ..pretrained import DEFAULT_TRANSLATION_MODEL
from .common import CLIError, _load_shortlist, _open_model
from .corpus_job import is_rank0, job_options, numbered_reader, run_corpus_job, start_group, torchrun_world
from .translate_lines import _readable, _result_text, _warn_if_english

__all__ = ["BATCH", "translate_corpus_job"]

BATCH = 64  # the batch of Translator.translate, which the one-process `translate` leaves at its default
_CHUNK = 4096  # lines read, checked and tokenised at a time by rank 0's pass
_OWN = ("sorted.txt", "order.u64", "prepared.json")


def _prepare(tr, args, options: dict, job_dir: Path) -> tuple[list[str], dict]:
    """Rank 0's pass over ``--file`` (module docstring, step 1): ``([sorted.txt], counts)``. The files
    are rewritten only when missing or made for other options or another input, so a resumed job's
    parts still match them."""
    from ..corpus_jobs.line_index import input_identity, open_line_index

    index = open_line_index(args.file, job_dir / "input")
    read = numbered_reader([str(args.file)])
    line_of, lengths, inputs = [], [], 0
    for start in range(0, index.n_lines, _CHUNK):
        lines = read([index], start, min(start + _CHUNK, index.n_lines))
        numbered = [(n, line.strip()) for n, line in lines if line.strip()]
        inputs += len(numbered)
        kept = _readable(tr, [(f"{args.file} line {n}", text) for n, text in numbered], alone=False)
        kept_where = {where for where, _ in kept}
        numbered = [(n, text) for n, text in numbered if f"{args.file} line {n}" in kept_where]
        sentences = [text for _, text in numbered]
        _warn_if_english(tr, sentences)
        try:
            ids = tr.encode_sources(sentences, truncate=args.truncate)
        except ValueError as exc:  # a sentence over the model's length, without --truncate
            raise CLIError(f"{args.file}: {exc}") from None
        line_of.append(np.array([n - 1 for n, _ in numbered], dtype=np.int64))
        lengths.append(np.array([len(x) for x in ids], dtype=np.int32))
    line_of_all = np.concatenate(line_of) if line_of else np.zeros(0, np.int64)
    counts = {"inputs": inputs, "skipped": inputs - len(line_of_all)}
    key = {"options": options, "input": input_identity(args.file)}
    sorted_txt, stamp = job_dir / "sorted.txt", job_dir / "prepared.json"
    with contextlib.suppress(OSError, ValueError):
        if json.loads(stamp.read_text(encoding="utf-8")) == key and sorted_txt.is_file():
            return [str(sorted_txt)], counts
    # the one-process run's order: a stable sort by length (translate_ids' `sorted(..., key=len)`)
    by_length = np.argsort(np.concatenate(lengths) if lengths else np.zeros(0, np.int32), kind="stable")
    place = np.empty(len(by_length), dtype=np.uint64)
    place[by_length] = np.arange(len(by_length), dtype=np.uint64)  # sentence k is line place[k] of sorted.txt
    with contextlib.suppress(FileNotFoundError):
        stamp.unlink()  # the old files are not this job's any more
    atomic_write_bytes(job_dir / "order.u64", place.tobytes())
    # the kept sentences in sorted order, each read by its byte range, streamed to the file
    with open(args.file, "rb") as f, atomic_writer(sorted_txt, "w", encoding="utf-8", newline="\n") as out:
        for k in by_length:
            line = int(line_of_all[k])
            lo, hi = int(index.offsets[line]), int(index.offsets[line + 1])
            f.seek(lo)
            out.write(read_one(f.read(hi - lo), line) + "\n")
    atomic_write_text(stamp, json.dumps(key, sort_keys=True))
    return [str(sorted_txt)], counts


def read_one(raw: bytes, line: int) -> str:
    """One line's text as the pass read it (decoded, line end and line 1's byte-order mark dropped, stripped)."""
    text = raw.decode("utf-8").rstrip("\n").removesuffix("\r")
    if line == 0:
        text = text.removeprefix("\ufeff")
    return text.strip()


def _deliver(job_dir: Path, assembled: Path) -> None:
    """Print each sentence's record in input order (module docstring, step 3), then delete the pass's files."""
    from ..corpus_jobs.line_index import open_line_index, remove_line_index

    path = job_dir / "order.u64"
    place = np.memmap(path, dtype=np.uint64, mode="r") if path.stat().st_size else np.zeros(0, np.uint64)
    index = open_line_index(assembled, job_dir / "assembled-index")
    sys.stdout.flush()
    binary = getattr(sys.stdout, "buffer", None)
    try:
        with open(assembled, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if len(place) else b""
            out: list[str] = []
            for k in range(len(place)):
                p = int(place[k])
                out.append(json.loads(data[int(index.offsets[p]) : int(index.offsets[p + 1])]))
                if len(out) == 4096 or k == len(place) - 1:
                    chunk = "".join(out)
                    if binary is not None:
                        binary.write(chunk.encode("utf-8"))
                    else:  # a text stream only (a caller's io.StringIO)
                        sys.stdout.write(chunk)
                    out = []
            if isinstance(data, mmap.mmap):
                data.close()
        (binary or sys.stdout).flush()
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    finally:
        del index, place
        remove_line_index(job_dir / "assembled-index")
        remove_line_index(job_dir / "input")
        for name in _OWN:
            with contextlib.suppress(FileNotFoundError):
                (job_dir / name).unlink()
        for pattern in (".assembled-*.out", *(f".{name}.*.tmp" for name in _OWN)):  # left by a killed run
            for leftover in job_dir.glob(pattern):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
        for d in (job_dir / "assembled-index", job_dir / "input"):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(FileNotFoundError):
            assembled.unlink()


def translate_corpus_job(args) -> int:
    """``translate --file`` as a corpus job (under torchrun, ``--processes`` or ``--job-dir``); prints what
    the one-process run prints. Exit status 1 when a line was skipped, as there."""
    from ..service import ModelKind

    device = start_group(args.device)  # under torchrun: this rank's own GPU, before the model is loaded
    model = _open_model(args, DEFAULT_TRANSLATION_MODEL, kind=ModelKind.TRANSLATOR, device=device)
    tr = model.impl
    shortlist = _load_shortlist(args.shortlist)
    part_lines = -(-args.part_lines // BATCH) * BATCH
    if is_rank0():
        ranks = torchrun_world()
        print(
            f"attnkit translate: {model.label}, parts of {part_lines} sentences"
            + (f" over {ranks} processes" if ranks > 1 else ""),
            file=sys.stderr,
        )
    options = job_options(args, model_used=str(model.path or model.label))

    def work(sentences: list[str]) -> bytes:
        results = tr.translate(
            sentences,
            beam_size=args.beam,
            return_attention=args.show_attention,
            truncate=args.truncate,
            shortlist=shortlist,
            length_penalty=args.length_penalty,
        )
        return "".join(
            json.dumps(_result_text(s, r, args), ensure_ascii=False) + "\n" for s, r in zip(sentences, results)
        ).encode("utf-8")

    totals = run_corpus_job(
        args,
        command="translate",
        inputs=[args.file],
        output=None,
        options=options,
        work=work,
        part_lines=part_lines,
        unit="sentence",
        prepare=lambda job_dir: _prepare(tr, args, options, job_dir),
        deliver=lambda assembled: _deliver(assembled.parent, assembled),
    )
    if totals is None:  # not rank 0
        return 0
    if not totals.get("inputs"):
        raise CLIError(f"nothing to translate: {args.file} has no sentence")
    if totals["skipped"] == totals["inputs"]:
        raise CLIError(f"nothing to translate: none of the {totals['inputs']} inputs has a word the model can read")
    return 1 if totals["skipped"] else 0
