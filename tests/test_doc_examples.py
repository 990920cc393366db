"""The documentation's Python examples, run: every fenced ``python`` block of README.md and ``docs/**/*.md``
(the notebooks have tests of their own) runs here against the shipped models, unless :data:`SKIP` names it
with its reason (a network model, a user's folder, a fragment of a larger program). A new block runs by
default, so a page cannot gain an example that nothing runs.

Blocks are read with markdown-it-py (as :mod:`test_doc_commands` reads the shell blocks) and run statement by
statement in one namespace, each compiled with the page's own line numbers, so a failure points at the
page's line. What a page says an example gives is checked against what it gave; the comment after a
statement is the claim:

- after a ``print(…)``: a comment holding a number or a quote is its output. Every decimal number in it must
  appear in what that call printed, at its quoted precision and with its sign (``-0.07`` matches a printed
  ``-0.0712``); a comment with no number must appear in the output as written (spaces aside).
- after an expression or an assignment: a comment that starts with a Python literal (``'text'``,
  ``[(1, 2)]``, ``(2, 5, 32), (2, 5, 9)``; what follows a ``:`` after it is prose) is the value: an
  expression must equal it; the names an assignment binds must have those shapes (tensors) or values.

Pages ship these claims; pytest-examples' ``#>`` print check was weighed and not taken: it compares whole
printed lines, so pages would print full float reprs that change in the last digit between CPUs.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_SIGNED = re.compile(r"-?\d+\.\d+")


@dataclass(frozen=True)
class DocExample:
    """One ``python`` block: its page (relative to the repository root), the line its code starts on
    (1-based), and its source."""

    page: str
    line: int
    source: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def examples_of(page: Path, text: str | None = None) -> list[DocExample]:
    """Every ``python`` fence of the page (``text``: the page's text, read if None)."""
    text = page.read_text(encoding="utf-8") if text is None else text
    name = str(page.relative_to(ROOT)) if page.is_absolute() else str(page)
    return [
        DocExample(name, token.map[0] + 2, token.content)
        for token in MarkdownIt().parse(text)
        if token.type == "fence" and (token.info.split() or [""])[0] in ("python", "py")
    ]


_NET = (
    "needs the network: a Hugging Face hub model (hf:NAME) is downloaded on first use (test_hf_*.py: tiny local ones)"
)
_FRAGMENT = "a fragment of a larger program (names defined elsewhere on the page, or `...` for the reader's code)"
_PLACEHOLDER = "reads a folder the page names as a placeholder (path/to/model)"
_RUN_DIR = "reads a run folder (runs/…) that only a training run of minutes writes (test_lm_training.py)"
_EXPORTED = (
    "reads the folder the page's export command writes (test_hf_export.py and test_hf_lm_export.py load such "
    "an export with plain transformers and compare its outputs)"
)

#: ``(page, a text of the block, reason)``: the blocks not run, and why; the first match wins.
SKIP: list[tuple[str, str, str]] = [
    ("docs/howto/huggingface.md", 'Translator.load("hf:', _NET),
    ("docs/howto/huggingface.md", 'load_self_attention("hf:', _NET),
    ("docs/howto/huggingface.md", 'open_model("hf:gpt2")', _NET),
    ("docs/howto/huggingface.md", "capture_attention(model, lambda", _FRAGMENT),
    ("docs/howto/huggingface.md", 'tr = Translator.load("hf:...") as above', _FRAGMENT),
    ("docs/howto/inside-a-language-model.md", 'open_model("hf:gpt2")', _NET),
    ("docs/howto/inside-a-language-model.md", '"path/to/', _PLACEHOLDER),
    ("docs/howto/add-a-method.md", "def my_rows(", _FRAGMENT),
    ("docs/howto/add-a-method.md", "_spec(", _FRAGMENT),
    ("docs/howto/train-a-language-model.md", "runs/", _RUN_DIR),
    ("docs/howto/export-huggingface.md", 'from_pretrained("hf-', _EXPORTED),
]


def skip_reason(example: DocExample) -> str | None:
    for page, text, reason in SKIP:
        if example.page == page and text in example.source:
            return reason
    return None


ALL = [e for p in PAGES for e in examples_of(p)]


# ---------------------------------------------------------------------------------------------------------
# The claims: a statement's trailing comment, and the check of it against what the statement gave.
# ---------------------------------------------------------------------------------------------------------


def trailing_comments(source: str) -> dict[int, str]:
    """``{line: comment}`` (1-based lines of ``source``) of each comment that follows code on its line."""
    found: dict[int, str] = {}
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if tok.start[0] in code_lines:
                found[tok.start[0]] = tok.string[1:].strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.add(tok.start[0])
            code_lines.add(tok.end[0])
    return found


def literal_claim(comment: str):
    """The Python literal a comment starts with (all of it, or what comes before its first ``:``), or
    :data:`NotImplemented` when it starts with none."""
    for text in (comment, comment.split(":", 1)[0]):
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return NotImplemented


def printed_at_precision(number: str, output: str) -> bool:
    """Whether ``output`` holds ``number`` at its precision and sign (``-0.07`` matches ``-0.0712``)."""
    places = len(number.split(".")[1])
    return any(
        f"{float(found):.{places}f}" == number
        for found in _SIGNED.findall(output)
        if len(found.split(".")[1]) >= places
    )


def print_mismatches(comment: str, output: str) -> list[str]:
    """What the comment after a ``print`` claims and the output does not hold (see the module docstring)."""
    numbers = _SIGNED.findall(comment)
    if numbers:
        return [n for n in numbers if not printed_at_precision(n, output)]
    if re.search(r"\d|[\"'“”‘’]", comment) and " ".join(comment.split()) not in " ".join(output.split()):
        return [comment]
    return []


def _shape_or_value(value):
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else value


def value_mismatch(claim, node: ast.stmt, namespace: dict, value) -> str | None:
    """Whether an expression's ``value``, or what an assignment bound, differs from the claimed literal."""
    if isinstance(node, ast.Expr):
        got = _shape_or_value(value) if isinstance(claim, tuple) and hasattr(value, "shape") else value
        return None if got == claim else f"{ast.unparse(node)} gave {got!r}, the page says {claim!r}"
    targets = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
    if isinstance(targets, ast.Tuple) and isinstance(claim, tuple) and len(claim) == len(targets.elts):
        pairs = list(zip(targets.elts, claim))
    elif isinstance(targets, ast.Name):
        pairs = [(targets, claim)]
    else:
        return None
    for target, want in pairs:
        if isinstance(target, ast.Name) and target.id in namespace:
            got = _shape_or_value(namespace[target.id])
            if got != want:
                return f"{target.id} is {got!r}, the page says {want!r}"
    return None


def run_example(example: DocExample, namespace: dict | None = None) -> list[str]:
    """Run the example statement by statement; the claims its comments make that did not hold."""
    namespace = {"__name__": "__doc_example__"} if namespace is None else namespace
    tree = ast.parse(example.source)
    comments = trailing_comments(example.source)
    wrong: list[str] = []
    for node in tree.body:
        comment = comments.get(node.end_lineno)
        where = f"{example.page}:{example.line + node.end_lineno - 1}"
        is_expr = isinstance(node, ast.Expr)
        code = ast.Expression(node.value) if is_expr else ast.Module([node], type_ignores=[])
        ast.increment_lineno(code, example.line - 1)
        compiled = compile(code, str(ROOT / example.page), "eval" if is_expr else "exec")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            value = eval(compiled, namespace) if is_expr else exec(compiled, namespace)
        if comment is None:
            continue
        call = node.value if is_expr else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
            wrong += [
                f"{where}: {m} not printed (it printed {out.getvalue().strip()!r})"
                for m in print_mismatches(comment, out.getvalue())
            ]
            continue
        claim = literal_claim(comment)
        if claim is not NotImplemented and isinstance(node, (ast.Expr, ast.Assign)):
            mismatch = value_mismatch(claim, node, namespace, value)
            if mismatch:
                wrong.append(f"{where}: {mismatch}")
    return wrong


# ---------------------------------------------------------------------------------------------------------
# The run: one folder holding what the examples read, one thread, offline.
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory):
    """A folder holding ``page.html``: the page translate-markup.md shows."""
    import torch

    folder = tmp_path_factory.mktemp("doc-examples")
    markup = (ROOT / "docs/howto/translate-markup.md").read_text(encoding="utf-8")
    page = next(t.content for t in MarkdownIt().parse(markup) if t.type == "fence" and t.info.strip() == "html")
    (folder / "page.html").write_text(page, encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.chdir(folder)
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("ATTNKIT_HOME", str(folder / "home"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield folder
    torch.set_num_threads(threads)
    mp.undo()


def test_pages_have_examples():
    assert len(ALL) >= 20
    assert {e.page for e in ALL} >= {"README.md", "docs/index.md", "docs/howto/does-a-head-matter.md"}


def test_every_skip_names_a_block():
    """A skip whose block is gone (or was rewritten) is stale: it must go."""
    for page, text, _ in SKIP:
        assert any(e.page == page and text in e.source for e in ALL), f"no block of {page} holds {text!r}"


@pytest.mark.parametrize("example", [e for e in ALL if skip_reason(e) is None], ids=lambda e: e.id)
def test_doc_example_runs_and_gives_what_the_page_says(example, example_dir):
    assert run_example(example) == []


def test_a_stale_claim_fails():
    """Planted: a number a print no longer gives, a literal an expression no longer equals, a shape."""
    source = (
        "x = 2.0 / 3\n"
        "print(x, -x)  # 0.67 -0.66\n"
        "'abc'.upper()  # 'ABd'\n"
        "import torch\n"
        "a, b = torch.zeros(2, 3), torch.zeros(4)  # (2, 3), (5,)\n"
        "print('God said, “Let there be light.”')  # God said, “Let the light be.”\n"
    )
    wrong = run_example(DocExample("docs/planted.md", 10, source))
    assert len(wrong) == 4
    assert "-0.66 not printed" in wrong[0] and wrong[0].startswith("docs/planted.md:11:")
    assert wrong[1].startswith("docs/planted.md:12:") and "'ABd'" in wrong[1]
    assert wrong[2].startswith("docs/planted.md:14:") and "b is (4,)" in wrong[2] and "Let the light be" in wrong[3]


def test_true_claims_pass():
    source = (
        "x = 2.0 / 3\n"
        "print(x, -x)  # 0.67 -0.667\n"
        "[(1, 2)]  # [(1, 2)]: a list\n"
        "import torch\n"
        "a, b = torch.zeros(2, 3), torch.zeros(4)  # (2, 3), (4,)\n"
        "print('done')  # the run ends: prose, not checked\n"
    )
    assert run_example(DocExample("docs/planted.md", 1, source)) == []


def test_an_error_points_at_the_pages_line():
    with pytest.raises(ZeroDivisionError) as err:
        run_example(DocExample("docs/planted.md", 40, "x = 1\ny = 1 / 0\n"))
    assert err.traceback[-1].lineno + 1 == 41 and str(err.traceback[-1].path).endswith("docs/planted.md")
