"""The documentation's commands, run: every ``attnkit …`` line of a fenced ``bash``/``sh``/``console`` block in
README.md and ``docs/**/*.md`` (the notebooks have tests of their own) is either run here against the shipped
models or skipped for a reason named in one table, :data:`SKIP`; a command in neither fails
:func:`test_every_doc_command_is_classified`, so a command added to a page must be classified.

The blocks are read with markdown-it-py (a CommonMark parser, already attnkit's dependency for markup).
On top of it, the only thing of our own is the number matching: :data:`QUOTED` declares, for a command that is
run, the places in a page's prose (an anchor text; the numbers right after it) that present that command's
output, and each quoted number must appear, at its quoted precision, in what the command printed. Lines a
``console`` block shows after a ``$ attnkit …`` command are that command's output and must appear as printed.

Commands run in-process through :func:`attnkit.cli.main` (one torch import for all), in a temporary folder
holding tiny real files made from the built-in gold verses where a command reads one (``verses.es``), one
thread, each command once per session (its output cached for every test that reads it).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_FENCES = {"bash", "sh", "shell", "console"}
_REDIRECT = re.compile(r"^(?:\d?>>?|<|\||&&|;)")  # a shell operator token (shlex leaves them as words)
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:\.\d+)?")
_DECIMAL = re.compile(r"\d+\.\d+")


@dataclass(frozen=True)
class DocCommand:
    """One ``attnkit …`` line of a page: the text as written (continuations joined, comment and ``$ `` cut),
    the comment after it, and the lines a ``console`` block shows as its output."""

    page: str  # relative to the repository root
    line: int  # the fence's first line, 1-based
    text: str
    comment: str
    shown_output: tuple[str, ...]


def _split_comment(line: str) -> tuple[str, str]:
    """``attnkit x "a # b"   # note`` -> (``attnkit x "a # b"``, ``note``): the first ``#`` outside quotes."""
    words = shlex.split(line, comments=True)
    for match in re.finditer(r"\s#", line):
        head = line[: match.start()]
        try:
            if shlex.split(head) == words:
                return head.strip(), line[match.end() :].strip()
        except ValueError:  # the # is inside an open quote
            continue
    return line.strip(), ""


def commands_of(page: Path, text: str | None = None) -> list[DocCommand]:
    """Every ``attnkit`` command line of the page's shell fences (``text``: the page's text, read if None)."""
    text = page.read_text(encoding="utf-8") if text is None else text
    found: list[DocCommand] = []
    for token in MarkdownIt().parse(text):
        if token.type != "fence" or (token.info.split() or [""])[0] not in SHELL_FENCES:
            continue
        console = token.info.split()[0] == "console"
        lines = re.sub(r"\\\n\s*", " ", token.content).splitlines()
        for index, raw in enumerate(lines):
            line = raw.strip()
            if console:
                if not line.startswith("$ "):
                    continue
                line = line[2:].strip()
            if not line.startswith("attnkit "):
                continue
            shown: list[str] = []
            if console:
                for after in lines[index + 1 :]:
                    if after.startswith("$ "):
                        break
                    if after.strip():
                        shown.append(after.strip())
            command, comment = _split_comment(line)
            name = page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name
            found.append(DocCommand(name, token.map[0] + 1, " ".join(command.split()), comment, tuple(shown)))
    return found


def all_commands() -> list[DocCommand]:
    return [command for page in PAGES for command in commands_of(page)]


# ---------------------------------------------------------------------------------------------------------
# The one table: every command a page shows is run (RUN) or skipped for the reason given (SKIP, first match).
# ---------------------------------------------------------------------------------------------------------

#: Commands run as written (the page's text, comment cut, whitespace collapsed). A redirection ``> FILE`` is
#: dropped: its output is what the test reads.
RUN: set[str] = {
    "attnkit models",
    'attnkit translate "En el principio creó Dios los cielos y la tierra."',
    'attnkit translate --show-attention --plot align.png "Y dijo Dios: Sea la luz: y fué la luz."',
    'attnkit translate --model transformer-es-en --plot heads.png "Jesús lloró."',
    'attnkit translate --device auto --precision bf16 "Jesús lloró."',
    'attnkit translate --html out.html "Y dijo Dios: Sea la luz: y fué la luz."',
    'attnkit translate --model rnnsearch-es-en --keep-spelling "En el principio creó Dios los cielos y la tierra."',
    'attnkit translate --model rnnsearch-es-en "En el principio creó Dios los cielos y la tierra."',
    "attnkit translate --file verses.txt --report-time",
    "attnkit translate --file verses.txt --json",
    "attnkit evaluate alignment --model transformer-es-en --all-heads",
    "attnkit evaluate alignment --model transformer-es-en --layer 2 --symmetrize grow-diag-final-and "
    "--reverse-model none --json",
    "attnkit align --src verses.es --tgt verses.en --layer 2 --symmetrize grow-diag-final-and > verses.align",
    "attnkit align --model transformer-es-en --src verses.es --tgt verses.en --layer 2 "
    "--symmetrize grow-diag-final-and > verses.align",
    'attnkit explain --model transformer-es-en --method alti_plus --plot att.html "Jesús lloró."',
    'attnkit explain --model transformer-es-en --method alti_plus "Y dijo Dios: Sea la luz: y fué la luz."',
    "attnkit explain --model transformer-es-en --method attention --layer 2 --head 3 --target "
    '"And God said, Let there be light." "Y dijo Dios: Sea la luz."',
    'attnkit explain "Y dijo Dios: Sea la luz."',
    'attnkit explain "Y dijo Dios: Sea la luz." --target "And God said, Let there be light."',
    'attnkit explain "Y dijo Dios: Sea la luz." --method alti_plus --plot alti.png',
    'attnkit explain --model rnnsearch-es-en "Jesús lloró." --method input_x_gradient',
    'attnkit explain --model lm-4l-en --text "In the beginning God created the heaven and the earth." '
    "--method alti_logit",
    'attnkit explain --model lm-4l-en --text "In the beginning God created the heaven and the earth." --method routes',
    'attnkit explain --model lm-4l-en "In the beginning" --sample --seed 3 --method saliency',
    "attnkit explain --model attention-only-2l-en --repeated 20",
    "attnkit explain --model attention-only-2l-en --repeated 20 --plot stripe.png",
    "attnkit explain --model attention-only-2l-en --repeated 20 --layer 1 --head 1 --plot heads.html",
    "attnkit explain --model attention-only-2l-en --repeated 20 --json",
    "attnkit data scene 3 --out scene.png",
    "attnkit caption --model captioner-soft scene.png --plot overlay.png",
    "attnkit caption --html out.html scene.png",
    "attnkit explain --model captioner-soft scene.png --method saliency",
    "attnkit explain --model captioner-soft --method input_x_gradient --plot overlays.png scene.png",
    "attnkit heads --model transformer-es-en --limit 16",
    "attnkit heads --model transformer-es-en --roles --limit 16",
    "attnkit heads --model attention-only-2l-en",
    "attnkit heads --model attention-only-2l-en --composition",
    "attnkit heads --model attention-only-2l-en --patching",
    'attnkit heads --model attention-only-2l-en --qk 2.2 --text "In the beginning God created the heaven and the '
    'earth. In the beginning God created" --position 24',
    "attnkit evaluate alignment --model rnnsearch-es-en",
    "attnkit evaluate alignment --model transformer-es-en --method attention --method shift",
    "attnkit align --method eflomal --src verses.es --tgt verses.en > verses.align",
    'attnkit explain "Y dijo Dios: Sea la luz." --method integrated_gradients --json',
    'attnkit explain --model rnnsearch-es-en --method integrated_gradients --json "Jesús lloró."',
}

_NET = "needs the network: a Hugging Face hub model (hf:NAME, $MINILM) is downloaded on first use (test_hf_*.py: tiny local ones)"
_TRAINS = "trains a model: minutes to hours (training is tested on tiny models: test_trainer.py, test_lm_training.py)"
_RUN_DIR = "reads a run folder (runs/…) that only a training run of minutes writes"
_EXPORTED = (
    "reads the export a skipped command before it writes (out/hf: 17 s to export, 97 s to score through "
    "transformers on 2 CPUs; test_hf_export.py, test_ct2.py; out/pruned: test_head_prune.py)"
)
_SERVER = "starts a server that runs until stopped (test_serve_*.py, test_explorer_api.py, test_api_fuzz.py)"
_USER_FILE = "reads a user's file or folder the page names as an example (my.src, page.html, train.de, ./my-lm, …)"
_TEST_SPLIT = "translates or scores the test split or the gold verses with slow methods: minutes on 2 CPUs"
_PREPARE = "prepares a corpus under $ATTNKIT_HOME: the Bible ~35 s, the scenes minutes (test_bible.py, test_scenes.py)"
_PROCESSES = "splits the work over 2-4 processes on a user's corpus (test_corpus_job_commands.py, tiny inputs)"
_EXPORT = "writes a full-size export (test_hf_export.py, test_ct2.py, test_export_output_folder.py)"
_LINKS = "runs eflomal over the prepared Bible's 28,937 training pairs (40 s, after preparing it)"
_SHORTLIST = "builds a lexical shortlist from the prepared Bible's training pairs (test_shortlist.py)"

#: ``(regular expression over the command's text, reason)``, the first match wins.
SKIP: list[tuple[str, str]] = [
    (r"--model (hf:|\"\$MINILM\")", _NET),
    (r"^attnkit train ", _TRAINS),
    (r"^attnkit serve", _SERVER),
    (r"^attnkit data links ", _LINKS),
    (r"^attnkit data prepare (bible|scenes)$", _PREPARE),
    (
        r"^attnkit data prepare parallel |--model (\./|M |path/)|--file (page|chapter)\.|--format (markdown|xliff)",
        _USER_FILE,
    ),
    (r"--src (my|news)\.|--captions ", _USER_FILE),
    (r"--processes \d|--job-dir", _PROCESSES),
    (r"runs/", _RUN_DIR),
    (r"--model (out/hf|out/pruned|ct2-)", _EXPORTED),
    (r"^attnkit export ", _EXPORT),
    (r"^attnkit evaluate (translation|explanations|captioning) ", _TEST_SPLIT),
    (r"^attnkit shortlist |--shortlist ", _SHORTLIST),
    (r"^attnkit heads .*--json", "the same scores as the table, which is run: ~10 s more on 2 CPUs"),
]


#: Flags the harness adds to a command it runs, with the reason: (command prefix, flags, reason).
ADDED_FLAGS: list[tuple[str, list[str], str]] = [
    (
        "attnkit evaluate alignment",
        ["--no-references"],
        "its eflomal reference row trains eflomal on the prepared Bible (~70 s from a fresh ATTNKIT_HOME) and "
        "eflomal samples (no seed): its figure comes from benchmarks/eflomal_runs.py; the rows quoted are the model's",
    ),
]


def classify(command: DocCommand) -> str | None:
    """``"run"``, the reason it is skipped, or None: not classified."""
    if command.text in RUN:
        return "run"
    for pattern, reason in SKIP:
        if re.search(pattern, command.text):
            return reason
    return None


# ---------------------------------------------------------------------------------------------------------
# The numbers a page quotes from a command it shows or names, declared: (page, command) -> anchors. Each
# anchor is the page's text right before the quoted numbers (whitespace collapsed, Markdown's ** and `
# kept), with how many numbers follow it; each must be printed by the command at the quoted precision.
# ---------------------------------------------------------------------------------------------------------

_ALL_HEADS = "attnkit evaluate alignment --model transformer-es-en --all-heads"
_ONE_WAY = "attnkit evaluate alignment --model transformer-es-en --symmetrize none"
_BOTH_WAYS_ONE_MODEL = (
    "attnkit evaluate alignment --model transformer-es-en --layer 2 --symmetrize grow-diag-final-and "
    "--reverse-model none --json"
)
_TWO_MODELS = "attnkit evaluate alignment --model transformer-es-en --symmetrize grow-diag-final-and"

QUOTED: dict[tuple[str, str], list[tuple[str, int]]] = {
    ("README.md", "attnkit models"): [
        ("| RNNencdec (Cho et al. 2014, no attention) | 3.3 M | ", 2),
        ("| RNNsearch (Bahdanau et al. 2015) | 4.2 M | ", 2),
        ("guided alignment) | 7.6 M | ", 2),
        ("Transformer English → Spanish (the same network) | 7.6 M | ", 2),
        ("modern input scores within 0.3 BLEU of the 1909 text (", 3),
    ],
    ("README.md", _ALL_HEADS): [
        ("| Transformer, layer 3 (last), head mean — what is usually plotted | ", 1),
        ("| Transformer, layer 2, head mean | ", 1),
        ("what `attnkit align` reads | **", 1),
    ],
    ("README.md", _ONE_WAY): [("each English word's argmax (`--symmetrize none`) | ", 1)],
    ("README.md", _BOTH_WAYS_ONE_MODEL): [("| the same head read both ways, grow-diag-final-and | ", 1)],
    ("README.md", _TWO_MODELS): [("`attnkit align --symmetrize grow-diag-final-and` | **", 1)],
    ("docs/howto/align-a-corpus.md", _ALL_HEADS): [
        ("(the intersection of each target word's best source word and each source word's best target word: AER ", 1),
        ("the shipped Transformer's layer 2 head mean reaches AER ", 1),
    ],
    ("docs/howto/align-a-corpus.md", _ONE_WAY): [("on the gold set for `transformer-es-en`, against ", 1)],
    ("docs/howto/align-a-corpus.md", _BOTH_WAYS_ONE_MODEL): [
        ("it reads the one matrix both ways by that rule instead (grow-diag-final-and: ", 1),
        ("(the `--all-heads` table's `L2 mean` row), and ", 1),
    ],
    ("docs/howto/align-a-corpus.md", _TWO_MODELS): [("(`transformer-en-es` for `transformer-es-en`: **AER ", 1)],
    ("docs/findings.md", "attnkit evaluate alignment --model rnnsearch-es-en"): [
        ("print (`tests/test_doc_commands.py` checks these): RNNsearch ", 2)
    ],
    ("docs/findings.md", _ALL_HEADS): [("the Transformer's layer 3 mean ", 1), ("layer 2 mean ", 1)],
    ("docs/findings.md", _BOTH_WAYS_ONE_MODEL): [("layer 2 mean both ways ", 1)],
    ("docs/howto/does-a-head-matter.md", "attnkit heads --model transformer-es-en --limit 16"): [
        ("the largest ablation score was a cross-attention head of layer 2 (", 1),
    ],
    ("docs/howto/does-a-head-matter.md", "attnkit heads --model attention-only-2l-en --composition"): [
        ("The K-composition table's top line is L1H1 → L2H2 at ", 2),
    ],
    ("docs/howto/train-a-language-model.md", "attnkit explain --model attention-only-2l-en --repeated 20"): [
        ("--repeated 20 # the table: layer 2 head 2, ", 1),
    ],
}


def _flat(text: str) -> str:
    return " ".join(text.split())


def quoted_numbers(page_text: str, anchor: str, count: int, start: int = 0) -> tuple[list[str], int]:
    """The ``count`` decimal numbers right after ``anchor`` (searched from ``start`` of the page's flattened
    text), and where the anchor ends; an anchor missing is an error."""
    flat = _flat(page_text)
    at = flat.find(anchor, start)
    assert at >= 0, f"anchor not in the page any more: {anchor!r}"
    end = at + len(anchor)
    numbers = _DECIMAL.findall(flat[end : end + 80])
    assert len(numbers) >= count, f"fewer than {count} numbers after {anchor!r}"
    return numbers[:count], end


def printed(number: str, output: str) -> bool:
    """Whether the output holds ``number`` at its precision (``0.122`` matches a printed ``0.1224``)."""
    places = len(number.split(".")[1])
    return any(
        f"{float(found):.{places}f}" == number
        for found in _DECIMAL.findall(output)
        if len(found.split(".")[1]) >= places
    )


def mismatches(page_text: str, anchors: list[tuple[str, int]], output: str) -> list[str]:
    """The quoted numbers the output does not hold; each anchor is looked for after the one before it."""
    wrong, start = [], 0
    for anchor, count in anchors:
        numbers, start = quoted_numbers(page_text, anchor, count, start)
        wrong += [f"{number} (after {anchor!r})" for number in numbers if not printed(number, output)]
    return wrong


# ---------------------------------------------------------------------------------------------------------
# Running a command in-process, once per session, in a folder with the files the pages' commands read.
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """``verses.es`` / ``verses.en`` (five gold verses, one per line), ``verses.txt`` (the Spanish) and
    ``scene.png`` (test scene 3, written by the command cli.md gives for it)."""
    from attnkit.alignment.gold import load_gold
    from attnkit.cli import main

    folder = tmp_path_factory.mktemp("doc-commands")
    verses = load_gold()[:5]
    spanish = "".join(" ".join(v.source) + "\n" for v in verses)
    (folder / "verses.es").write_text(spanish, encoding="utf-8")
    (folder / "verses.txt").write_text(spanish, encoding="utf-8")
    (folder / "verses.en").write_text("".join(" ".join(v.target) + "\n" for v in verses), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("ATTNKIT_HOME", str(folder / "home"))
        mp.setenv("ATTNKIT_MALLOC", "default")
        assert main(["data", "scene", "3", "--out", "scene.png"]) == 0
    return folder


@pytest.fixture(scope="module")
def run_command(workdir):
    """``run(text) -> (status, stdout + stderr)``, each text run once."""
    import torch

    from attnkit.cli import main

    done: dict[str, tuple[int, str]] = {}
    mp = pytest.MonkeyPatch()
    mp.chdir(workdir)
    mp.setenv("OMP_NUM_THREADS", "1")
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("ATTNKIT_MALLOC", "default")  # the test worker's allocator left as it is (main() tunes the CLI's)
    mp.setenv("ATTNKIT_HOME", str(workdir / "home"))  # eflomal's cached links and the like stay in the run
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def run(text: str, capfd) -> tuple[int, str]:
        if text not in done:
            words = shlex.split(text)
            if ">" in words:  # `> FILE`: the output is what we read
                words = words[: words.index(">")]
            assert not any(_REDIRECT.match(w) for w in words), f"a shell operator left in {text!r}"
            words += [flag for prefix, flags, _ in ADDED_FLAGS if text.startswith(prefix + " ") for flag in flags]
            capfd.readouterr()
            status = main(words[1:])
            out, err = capfd.readouterr()
            done[text] = (status, out + err)
        return done[text]

    yield run
    torch.set_num_threads(threads)
    mp.undo()


DOC_COMMANDS = all_commands()


def test_pages_have_commands():
    """The collector finds the pages' commands (a parser that found none would pass everything)."""
    assert len(DOC_COMMANDS) > 150
    assert {c.page for c in DOC_COMMANDS} >= {"README.md", "docs/cli.md", "docs/howto/align-a-corpus.md"}


def test_every_doc_command_is_classified():
    unclassified = [f"{c.page}:{c.line}: {c.text}" for c in DOC_COMMANDS if classify(c) is None]
    assert not unclassified, "classify these in RUN or SKIP:\n" + "\n".join(unclassified)


def test_run_table_names_only_doc_commands():
    """A RUN entry no page shows any more is stale."""
    assert not RUN - {c.text for c in DOC_COMMANDS}


_TO_RUN = sorted({c.text: c for c in DOC_COMMANDS if classify(c) == "run"}.values(), key=lambda c: c.text)


@pytest.mark.parametrize("command", _TO_RUN, ids=[c.text[8:60] for c in _TO_RUN])
def test_doc_command_runs(command, run_command, capfd):
    status, output = run_command(command.text, capfd)
    assert status == 0, output
    assert "Traceback" not in output
    for shown in (c for c in DOC_COMMANDS if c.text == command.text):
        missing = [line for line in shown.shown_output if line not in output]
        assert not missing, f"{shown.page}:{shown.line} shows lines the command does not print: {missing}"


@pytest.mark.parametrize("page, command", sorted(QUOTED), ids=[f"{p}|{c[8:50]}" for p, c in sorted(QUOTED)])
def test_quoted_numbers_are_printed(page, command, run_command, capfd):
    status, output = run_command(command, capfd)
    assert status == 0, output
    assert not mismatches((ROOT / page).read_text(encoding="utf-8"), QUOTED[page, command], output)


def test_a_stale_number_fails(run_command, capfd):
    """A copy of the README with one quoted AER changed (0.343 -> 0.334) is caught; the real one is not."""
    page = (ROOT / "README.md").read_text(encoding="utf-8")
    anchors = QUOTED["README.md", _ALL_HEADS]
    _, output = run_command(_ALL_HEADS, capfd)
    assert not mismatches(page, anchors, output)
    stale = page.replace("| Transformer, layer 2, head mean | 0.343", "| Transformer, layer 2, head mean | 0.334")
    assert stale != page
    assert mismatches(stale, anchors, output) == ["0.334 (after '| Transformer, layer 2, head mean | ')"]


def test_a_new_command_must_be_classified(tmp_path):
    """A page that gains a command no table names fails the classification."""
    page = tmp_path / "new.md"
    page.write_text("```bash\nattnkit frobnicate --all   # new\n```\n\n```console\n$ attnkit models\nx\n```\n")
    found = commands_of(page)
    assert [(c.text, c.comment, c.shown_output) for c in found] == [
        ("attnkit frobnicate --all", "new", ()),
        ("attnkit models", "", ("x",)),
    ]
    assert classify(found[0]) is None
    assert classify(found[1]) == "run"


def test_printed_matches_at_the_quoted_precision():
    assert printed("0.122", '"aer": 0.1224')
    assert not printed("0.122", '"aer": 0.1234')
    assert not printed("0.12", "0.1")  # a coarser print does not vouch for a finer quote
    assert printed("34.68", "BLEU 34.68 greedy")
