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

Memory: rank 0's pass holds a few numpy bytes per sentence (:func:`_prepare`); the rest is read through
memory-mapped files or by byte range.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import sys
from pathlib import Path

import numpy as np

from ..paths import atomic_write_text, atomic_writer
from ..pretrained import DEFAULT_TRANSLATION_MODEL
from .common import CLIError, _load_shortlist, _open_model
from .corpus_job import job_options, numbered_reader, run_corpus_job, start_group
from .translate_lines import _result_text, _warn_if_english

__all__ = ["BATCH", "translate_corpus_job"]

BATCH = 64  # the batch of Translator.translate, which the one-process `translate` leaves at its default
_CHUNK = 4096  # lines read, checked and tokenised at a time by rank 0's pass
_OWN = ("sorted.txt", "order.u64", "prepared.json")


def _chunk_lines(index, read, start: int, stop: int) -> list[tuple[int, str]]:
    """Lines ``[start, stop)`` of the file as ``(line number from 1, text)``, as ``read`` (the corpus job's
    numbered reader) gives them, decoded as one block rather than line by line. A block that is not UTF-8 or
    holds a NUL byte is read again by ``read``, whose error names the file's line and byte offset."""
    raw = index.read_bytes(start, stop)
    try:
        text = raw.decode("utf-8")  # "\n" is no byte of a longer UTF-8 character: lines decode alike
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        return read([index], start, stop)
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if start == 0 and lines:
        lines[0] = lines[0].removeprefix("\ufeff")  # the file's line 1 only
    return [(start + 1 + i, line.removesuffix("\r")) for i, line in enumerate(lines)]


def _source_lengths(tr, sentences: list[str]) -> list[int]:
    """The number of source pieces ``tr.encode_sources`` gives each (stripped, non-empty) sentence, untruncated,
    0 for one the model cannot read: each sentence is put in the model's spelling once and the tokenizer
    is called once for all (``encode_sources`` does both a sentence at a time). No lone surrogate can reach
    here (the lines were decoded as UTF-8), the one text error ``encode_sources`` checks besides no piece."""
    from ..data.spelling import normalize_source

    spelling = tr.spelling
    return [len(ids) for ids in tr.src_tokenizer.encode_batch([normalize_source(s, spelling) for s in sentences])]


def _prepare(tr, args, options: dict, job_dir: Path) -> tuple[list[str], dict]:
    """Rank 0's pass over ``--file`` (module docstring, step 1): ``([sorted.txt], counts)``. The files
    are rewritten only when missing or made for other options or another input, so a resumed job's
    parts still match them.

    Memory: 6 bytes a kept line (its line number and length as numpy arrays, no Python object per line
    kept), the stable sort's 8, and the place of each in ``order.u64``'s order (4), whatever the file's
    size; the lines themselves are read ``_CHUNK`` at a time, and again one at a time by byte range."""
    from ..corpus_jobs.line_index import input_identity, open_line_index
    from ..data.text import no_readable_word

    index = open_line_index(args.file, job_dir / "input")
    read = numbered_reader([str(args.file)])
    n_lines, max_len = index.n_lines, tr.max_src_len
    line_of = np.empty(n_lines, dtype=np.uint32 if n_lines < 2**32 else np.uint64)  # file line (0-based) of kept k
    lengths = np.empty(n_lines, dtype=np.uint16 if max_len < 2**16 else np.uint32)  # its pieces (as translate sorts)
    kept = inputs = 0
    for start in range(0, n_lines, _CHUNK):
        numbered = [(n, line.strip()) for n, line in _chunk_lines(index, read, start, min(start + _CHUNK, n_lines))]
        numbered = [(n, text) for n, text in numbered if text]
        inputs += len(numbered)
        pieces = _source_lengths(tr, [text for _, text in numbered])
        for (n, _), k in zip(numbered, pieces):  # as `_readable` says it, in the same order
            if not k:
                print(f"attnkit: warning: {args.file} line {n}: {no_readable_word()}; skipped", file=sys.stderr)
        numbered = [(n, text, k) for (n, text), k in zip(numbered, pieces) if k]
        _warn_if_english(tr, [text for _, text, _ in numbered])
        for n, _, k in numbered:
            if k > max_len and not args.truncate:
                raise CLIError(
                    f"{args.file} line {n} has {k} subword tokens, more than this model's maximum of {max_len}; "
                    "split it into shorter sentences (or give --truncate)"
                )
        end = kept + len(numbered)
        line_of[kept:end] = [n - 1 for n, _, _ in numbered]
        lengths[kept:end] = [min(k, max_len) for _, _, k in numbered]
        kept = end
    line_of, lengths = line_of[:kept], lengths[:kept]
    counts = {"inputs": inputs, "skipped": inputs - kept}
    key = {"options": options, "input": input_identity(args.file)}
    sorted_txt, stamp = job_dir / "sorted.txt", job_dir / "prepared.json"
    with contextlib.suppress(OSError, ValueError):
        if json.loads(stamp.read_text(encoding="utf-8")) == key and sorted_txt.is_file():
            return [str(sorted_txt)], counts
    # the one-process run's order: a stable sort by length (translate_ids' `sorted(..., key=len)`)
    by_length = np.argsort(lengths, kind="stable")
    del lengths
    with contextlib.suppress(FileNotFoundError):
        stamp.unlink()  # the old files are not this job's any more
    _write_places(job_dir / "order.u64", by_length)
    # the kept sentences in sorted order, each read by its byte range, streamed to the file
    fd = os.open(args.file, os.O_RDONLY)
    try:
        with atomic_writer(sorted_txt, "w", encoding="utf-8", newline="\n") as out:
            for lo in range(0, kept, _CHUNK):
                lines = line_of[by_length[lo : lo + _CHUNK]]
                starts, stops = index.offsets[lines], index.offsets[lines + 1]
                out.write(
                    "".join(
                        read_one(os.pread(fd, int(b - a), int(a)), int(line)) + "\n"
                        for line, a, b in zip(lines, starts, stops)
                    )
                )
    finally:
        os.close(fd)
    atomic_write_text(stamp, json.dumps(key, sort_keys=True))
    return [str(sorted_txt)], counts


def _write_places(path: Path, by_length: np.ndarray) -> None:
    """``order.u64``: for each kept sentence ``k`` (input order), ``place[k]``, its line in ``sorted.txt``
    (the inverse of the permutation ``by_length``), as uint64, atomically; built as uint32 below 2**32 lines."""
    n = len(by_length)
    place = np.empty(n, dtype=np.uint32 if n < 2**32 else np.uint64)
    place[by_length] = np.arange(n, dtype=place.dtype)  # sentence k is line place[k] of sorted.txt
    with atomic_writer(path) as out:
        for lo in range(0, n, 1 << 20):
            out.write(place[lo : lo + (1 << 20)].astype(np.uint64).tobytes())


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
    finally:  # a reader that stops early (`| head`) ends the command quietly: attnkit.cli.main
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
    part_lines = None if args.part_lines is None else -(-args.part_lines // BATCH) * BATCH
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
        part_unit=BATCH,
        describe=lambda lines: f"attnkit translate: {model.label}, parts of {lines} sentences",
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
