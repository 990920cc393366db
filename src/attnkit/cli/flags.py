"""The flags that several ``attnkit`` commands take, each defined once here: a command adds the ones it
needs by calling these helpers, so a flag has one spelling, one type, one range and one help text
everywhere (the command fills in what differs: its default, what it writes or reads)."""

from __future__ import annotations

import argparse

from ..checks import BEAM, COUNT, LAYERS, LENGTH_PENALTY, arg_type

SPLITS = ("train", "valid", "test")


def _add_home_flag(parser: argparse.ArgumentParser) -> None:
    """``--home``: the data and cache folder (``attnkit --home H COMMAND``)."""
    parser.add_argument(
        "--home", default=None, help="data and cache folder (default $ATTNKIT_HOME or ~/.cache/attnkit)"
    )


def _add_device_flags(parser: argparse.ArgumentParser, *, int8: bool = False) -> None:
    """``--device`` and ``--precision`` for a command that runs a model (see :mod:`attnkit.device`);
    ``int8``: the command runs translators, which also take ``--precision int8``."""
    parser.add_argument(
        "--device",
        default="auto",
        help="where to run: auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps (default: auto)",
    )
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=["fp32", "bf16", "fp16", *(["int8"] if int8 else []), "auto"],
        help="weights and arithmetic: fp32, bf16, fp16, "
        + ("int8 (dynamic quantization, CPU), " if int8 else "")
        + "or auto (bf16 where it is measured faster) (default: fp32)",
    )


def _add_engine_flag(parser: argparse.ArgumentParser) -> None:
    """``--engine``: attnkit's own PyTorch decoding, or a CTranslate2 export (:mod:`attnkit.deploy`)."""
    parser.add_argument(
        "--engine",
        default="pytorch",
        choices=["pytorch", "ctranslate2"],
        help="pytorch: attnkit's own decoding; ctranslate2: a model written by `attnkit export MODEL OUT "
        "--format ctranslate2` (pip install 'attnkit[deploy]'; no torch import) (default: pytorch)",
    )
    parser.add_argument(
        "--vmap",
        action="store_true",
        help="ctranslate2: decode over the export's vocabulary map, the lexical shortlist given to "
        "`attnkit export --shortlist` (default: off)",
    )


def _add_spelling_flag(parser: argparse.ArgumentParser) -> None:
    """``--keep-spelling``: give the model the input as typed (see :mod:`attnkit.data.spelling`)."""
    parser.add_argument(
        "--keep-spelling",
        action="store_true",
        help="give the model the source text as typed; by default a model trained on the 1909 Bible reads "
        "today's Spanish rewritten in the 1909 spelling (fue → fué, a → á, creó → crió) (default: off)",
    )


def _add_model_flag(parser: argparse.ArgumentParser, default: str, *, what: str = "a model") -> None:
    """``--model``: a shipped or local model name, or a checkpoint folder (``what``: which kind of model)."""
    parser.add_argument("--model", default=None, help=f"{what} name (`attnkit models`) or folder (default: {default})")


def _add_shortlist_flag(parser: argparse.ArgumentParser) -> None:
    """``--shortlist FILE`` for the commands that translate."""
    parser.add_argument(
        "--shortlist",
        default=None,
        metavar="FILE",
        help="search only each batch's lexical shortlist "
        "of the vocabulary (faster), from `attnkit shortlist` (default: none: the whole vocabulary)",
    )


def _add_json_flag(parser: argparse.ArgumentParser, what: str = "one JSON object") -> None:
    """``--json``: ``what`` (one JSON object, a JSON list) on stdout instead of the table."""
    parser.add_argument("--json", action="store_true", help=f"print {what} (default: off: a table)")


def _add_layer_head_flags(parser: argparse.ArgumentParser, layer_help: str, head_help: str) -> None:
    """``--layer`` and ``--head`` (1-based) for the commands that read one attention layer or head."""
    parser.add_argument("--layer", type=arg_type(LAYERS, "layer"), default=None, help=layer_help)
    parser.add_argument("--head", type=arg_type(LAYERS, "head"), default=None, help=head_help)


def _add_beam_flag(parser: argparse.ArgumentParser, default: int, what: str = "beam size, 1 = greedy") -> None:
    """``--beam``: the beam size of the command's search (1: greedy)."""
    parser.add_argument("--beam", type=arg_type(BEAM, "beam"), default=default, help=f"{what} (default: {default})")


def _add_length_penalty_flag(
    parser: argparse.ArgumentParser,
    default: str,
    what: str = "beam search ranks finished translations by log-probability / ((5 + length) / 6)^A (Wu et al. "
    "2016): 0 favours short outputs, larger A longer ones",
) -> None:
    """``--length-penalty A``: the GNMT ``α`` of beam search (``default`` says what applies without it)."""
    parser.add_argument(
        "--length-penalty",
        type=arg_type(LENGTH_PENALTY, "length_penalty"),
        default=None,
        metavar="A",
        help=f"{what} (default: {default})",
    )


def _add_split_flag(parser: argparse.ArgumentParser, default: str, what: str = "which split") -> None:
    """``--split``: train, valid or test of the model's (or the named) corpus."""
    parser.add_argument("--split", default=default, choices=SPLITS, help=f"{what} (default: {default})")


def _add_limit_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``--limit N``: use only the first N items (``what`` says which, and the default)."""
    parser.add_argument("--limit", type=arg_type(COUNT, "limit"), default=None, help=what)


def _add_output_flag(parser: argparse.ArgumentParser, what: str, *, required: bool = False) -> None:
    """``--output``: the file a command writes (``what``: which, and where it goes without the flag)."""
    parser.add_argument("--output", default=None, required=required, help=what)


def _add_plot_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``--plot PNG``: ``what`` (e.g. "write the alignment heatmap") to this PNG file."""
    parser.add_argument("--plot", default=None, help=f"{what} to this PNG (default: none)")


def _add_html_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``--html FILE``: the explorer's offline page of ``what`` (the command's translations or captions)."""
    parser.add_argument(
        "--html",
        default=None,
        help=f"write the explorer's views of {what} to this self-contained HTML file (opens offline) (default: none)",
    )


def _add_progress_flag(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: no progress bar on stderr."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr (default: off)")
