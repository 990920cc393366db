"""``attnkit explain --file SRC [--target-file TGT]``: every line of a file explained by a translator, one JSON
object a line, in one process or split across processes (``--processes N``, ``torchrun``, ``--job-dir``).

Line ``n`` of the output is the explanation of line ``n`` of ``SRC`` (forced to line ``n`` of ``TGT`` when
given, else the model's own translation with ``--beam``): ``{"line": n, "method", "params", "source",
"target", "scores", "raw", "extra", "words"}`` as ``attnkit explain --json`` prints it, without the
timing. Each line is explained on its own, whatever part it falls in, so a split run writes the
one-process bytes when each process runs as many threads as the one process did (``--processes N`` gives
each rank ``threads / N``: compare with ``OMP_NUM_THREADS=1``); the scores are floats, and a different
thread count sums in another order, which can move a last rounded digit. A line that cannot be explained (empty, or longer than the model reads) is
``{"line": n, "error": "..."}``, and the job goes on.
"""

from __future__ import annotations

import json

from .common import CLIError, _output_text
from .corpus_job import add_corpus_job_flags, corpus_job_wanted, job_options, launch, run_corpus_job
from .flags import _add_progress_flag


def add_explain_file_flags(parser) -> None:
    """``--file``, ``--target-file``, ``--output`` and the corpus-job flags of ``attnkit explain``."""
    parser.add_argument(
        "--file",
        default=None,
        metavar="SRC",
        help="translators: explain every line of this file (one JSON object a line, in input order) (default: none)",
    )
    parser.add_argument(
        "--target-file",
        default=None,
        metavar="TGT",
        help="with --file: force line n of this file as line n's translation (default: the model's own)",
    )
    parser.add_argument("--output", default=None, help="with --file: write the lines here (default: stdout)")
    add_corpus_job_flags(parser, "lines")
    _add_progress_flag(parser)


def explain_file(args, model, method: str) -> int:
    """Explain every line of ``args.file`` with ``model`` (a translator) by ``method`` (module docstring)."""
    from ..errors import AttnkitError
    from ..service import MethodOptions, ModelKind, TranslationRequest, analyse

    if model.kind is not ModelKind.TRANSLATOR:
        raise CLIError("--file is for translators; explain a language model's text with --text")
    if args.input is not None or args.target is not None or args.plot is not None:
        raise CLIError("--file explains the file's lines: give no text argument, --target or --plot with it")
    if args.processes is not None:
        return launch(args.argv, args.processes)
    options = MethodOptions(layer=args.layer, head=args.head, steps=args.steps, batch=args.batch)

    def record(n: int, source: str, target: str | None) -> str:
        source = source.strip()
        target = None if target is None else target.strip()
        if not source:
            out: dict = {"line": n, "error": "the line is empty"}
        else:
            try:
                request = TranslationRequest(
                    source, beam=args.beam, target=target or None, method=method, options=options
                )
                att = analyse(model, request).attribution
                if att is None:
                    raise AttnkitError("the target has no tokens: there is no output piece to explain")
                d = att.to_dict()
                d.pop("seconds")  # the one value that differs between two runs
                out = {"line": n, **d}
            except (AttnkitError, ValueError) as e:  # this line's own problem: said on its line, the job goes on
                out = {"line": n, "error": str(e).splitlines()[0]}
        return json.dumps(out, ensure_ascii=False) + "\n"

    inputs = [args.file] + ([args.target_file] if args.target_file else [])
    if corpus_job_wanted(args):

        def work(lines: list) -> tuple[bytes, dict]:  # rows (n, source), or ((n, source), (n, target))
            rows = [(row, None) for row in lines] if len(inputs) == 1 else lines
            text = [record(src[0], src[1], None if tgt is None else tgt[1]) for src, tgt in rows]
            return "".join(text).encode("utf-8"), {}

        run_corpus_job(
            args,
            command="explain",
            inputs=inputs,
            output=args.output,
            options=job_options(args, model_used=str(model.path or model.label), method_used=method),
            work=work,
            part_lines=args.part_lines,
            unit="line",
        )
        return 0
    from ..data.parallel import read_lines

    sources = list(read_lines(args.file))
    targets = [t for _, t in read_lines(args.target_file)] if args.target_file else None
    if targets is not None and len(targets) != len(sources):
        raise CLIError(f"--target-file has {len(targets)} lines and --file {len(sources)}: they must be line-parallel")
    with _output_text(args.output) as out:  # a file appears whole, or an earlier one is kept
        for i, (n, source) in enumerate(sources):
            out.write(record(n, source, None if targets is None else targets[i]))
    return 0
