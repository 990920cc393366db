"""Store the tutorials with their outputs, and check that what is stored is what they print today.

The tutorials (``docs/tutorials/*.ipynb``) are kept with their outputs and figures, so that they read on a
repository page without running, and the documentation site shows those stored outputs (mkdocs-jupyter with
``execute: false``). This module executes a notebook the way the tests do (:func:`execute`), compares a fresh
execution with the stored one (:func:`differences`), and writes a notebook back with its fresh outputs
(:func:`store`).

    .venv/bin/python tools/notebooks.py                 # execute every tutorial and store its outputs
    .venv/bin/python tools/notebooks.py 03 09           # only those whose name starts with 03 or 09
    .venv/bin/python tools/notebooks.py --check         # execute and compare; exit 1 naming each difference

What is compared, cell by cell (:func:`differences`):

- the outputs' kinds, in order: stdout and stderr (each cell's text of a stream joined: how a stream is cut
  into outputs depends on timing), results and displays (the same MIME types), errors (never allowed);
- text (streams, ``text/plain``, ``text/html``): equal once every decimal number is set aside; the decimal
  numbers (``0.123``, ``-1.5e-07``, ``2.``) are printed with the same digits (the same count of decimals, the
  same exponent form; a float's full repr, 7 decimals or more, may vary in length) and their values agree
  within :data:`REL_TOL` (1e-3) of the larger, or :data:`ABS_TOL` (1e-6), or one unit of the last printed
  digit when it follows the point (a value near a rounding boundary may print either way on another CPU:
  ``0.86`` against ``0.85`` passes, ``0.86`` against ``0.84`` fails; ``1.`` against ``0.`` fails). Integers
  and words are exact. Runs of spaces count as one (torch pads columns by the widest number);
- ``image/png``: present, with the same width and height in pixels (read from the PNG header): a figure is
  drawn by the same code, not compared pixel by pixel;
- :data:`MASKS` hide what changes on every run (memory addresses, temporary folders, durations).

Storing (:func:`store`) writes the fresh outputs but keeps a stored text output that matches its fresh one by
the rules above, so a rerun on another machine writes no diff for float noise; execution counts run 1, 2, …;
no timing metadata is recorded; the notebook's and cells' metadata and cell ids stay as they were.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import struct
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
#: A decimal number agrees with the stored one within this share of the larger of the two, ...
REL_TOL = 1e-3
#: ... or within this absolute difference (float noise, ``3.6e-07`` against ``2.4e-07``), ...
ABS_TOL = 1e-6
#: ... or within one unit of its last printed digit (``0.124`` against ``0.123``). A number with this many
#: decimals or more is a float's full repr (JSON inside an HTML view): compared by value alone.
FULL_PRECISION = 7
CELL_TIMEOUT_S = 900
#: (pattern, replacement) applied to every text before it is compared: what differs on every run.
MASKS = [
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x…"),  # memory addresses in reprs
    (re.compile(r"/tmp/[\w./-]*|/var/folders/[\w./-]*"), "/tmp/…"),  # temporary folders
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|seconds|min)\b(?!\w)"), "<duration>"),  # timings
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:it/s|s/it)\b"), "<rate>"),
    # a timing or rate field of a repr or of JSON ("tokens_per_s": 6616.7), the explorer's views' too (&quot;seconds&quot;:0.29)
    (
        re.compile(
            r"((?:seconds|time_s|elapsed_s|wall_s|\w*_per_s)(?:&quot;|[\"'])?\s*[:=]\s*)[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
        ),
        r"\1<duration>",
    ),
    # tutorial 05's reference row: eflomal samples without a seed (attnkit.alignment.eflomal), so its AER on
    # twelve verses moves by a few hundredths from run to run (0.130, 0.158)
    (re.compile(r"(eflomal \(the teacher\) +AER) [\d.]+ +precision [\d.]+ +recall [\d.]+"), r"\1 <sampled>"),
]
# A decimal number (a point, or an exponent), with its sign; not part of a word or of a version (1.2.3).
_DECIMAL = re.compile(
    r"(?<![\w.])[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)(?![\w.]*\d)"
)
_SPACES = re.compile(r"[ \t]+")
_TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")


def notebooks(names: list[str] | None = None) -> list[Path]:
    """The tutorials, or those whose file name starts with one of ``names`` (``03`` or ``03-transformer``)."""
    found = sorted(TUTORIALS.glob("*.ipynb"))
    if names:
        unknown = [n for n in names if not any(p.name.startswith(n) for p in found)]
        if unknown:
            raise ValueError(f"names: no tutorial starts with {unknown} (there are {[p.stem for p in found]})")
        found = [p for p in found if any(p.name.startswith(n) for n in names)]
    return found


def environment(folder: Path, home: Path | None = None) -> dict[str, str]:
    """The kernel's environment: offline, one thread, its temporary files inside ``folder``. ATTNKIT_HOME is
    ``home`` if given, else the caller's (unset: attnkit's default, ``~/.cache/attnkit``), as a reader's would be:
    tutorial 05 reads the prepared Bible and eflomal's links of it from there, made once per machine (~2 min,
    mostly eflomal) and then cached, as the documentation build's execution did before."""
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TMPDIR=str(folder),
        PYTHONHASHSEED="0",
        MPLBACKEND="module://matplotlib_inline.backend_inline",
        PYDEVD_DISABLE_FILE_VALIDATION="1",  # ipykernel's debugger would warn about frozen modules on stderr
    )
    if os.environ.get("PYTHONPATH"):  # the kernel runs in ``folder``: a relative entry (src) would name nothing there
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in os.environ["PYTHONPATH"].split(os.pathsep))
    if home is not None:
        env["ATTNKIT_HOME"] = str(home)
    return env


def execute(path: Path, home: Path | None = None) -> nbformat.NotebookNode:
    """The notebook at ``path`` executed top to bottom in a fresh ``python3`` kernel (this Python's ipykernel)
    in a temporary folder (:func:`environment`; ``home``: its ATTNKIT_HOME if given), without timing metadata; an error raises ``nbclient.exceptions.CellExecutionError``."""
    import nbclient

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="attnkit-nb-") as tmp:
        client = nbclient.NotebookClient(
            nb,
            timeout=CELL_TIMEOUT_S,
            kernel_name="python3",
            allow_errors=False,
            record_timing=False,
            coalesce_streams=True,
            resources={"metadata": {"path": tmp}},
        )
        client.execute(env=environment(Path(tmp), home))
    return nb


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _masked(text: str) -> str:
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return text


def _decimals(number: str) -> int:
    """How many digits a number has after its point: ``0.123`` → 3, ``1.5e-07`` → 1, ``2.`` → 0."""
    return len(number.lower().partition("e")[0].partition(".")[2])


def _unit(number: str) -> float:
    """One unit of the last printed digit: ``0.123`` → 0.001, ``1.5e-07`` → 1e-08."""
    return 10.0 ** (int(number.lower().partition("e")[2] or 0) - _decimals(number))


def numbers_agree(stored: str, fresh: str) -> bool:
    """Whether two printed decimal numbers agree (module doc): printed alike (the same count of decimals, both
    with an exponent or neither) unless both carry :data:`FULL_PRECISION` decimals or more (a float's repr, as
    in JSON, whose length varies with its last bits); values within :data:`REL_TOL` or :data:`ABS_TOL`, or one
    unit of the last printed digit when there is a digit after the point (``1.`` and ``0.`` in a tensor are
    exact values)."""
    ds, df = _decimals(stored), _decimals(fresh)
    full = min(ds, df) >= FULL_PRECISION
    if not full and (ds != df or ("e" in stored.lower()) != ("e" in fresh.lower())):
        return False
    a, b = float(stored), float(fresh)
    allowed = max(ABS_TOL, REL_TOL * max(abs(a), abs(b)))
    if ds and not full:
        allowed = max(allowed, _unit(stored) * (1 + 1e-9))
    return abs(a - b) <= allowed


def text_difference(stored: str, fresh: str) -> str | None:
    """None when ``fresh`` reads as ``stored`` (the module doc's rules), else where they first differ."""
    stored, fresh = _masked(stored), _masked(fresh)
    s_words, f_words = _DECIMAL.split(stored), _DECIMAL.split(fresh)
    s_nums, f_nums = _DECIMAL.findall(stored), _DECIMAL.findall(fresh)
    if len(s_nums) != len(f_nums):
        return _first_line_difference(stored, fresh)
    for s, f in zip(s_words, f_words):
        if _SPACES.sub(" ", s).strip(" ") != _SPACES.sub(" ", f).strip(" "):
            return _first_line_difference(stored, fresh)
    for i, (s, f) in enumerate(zip(s_nums, f_nums)):
        if not numbers_agree(s, f):
            context = _SPACES.sub(" ", s_words[i][-40:]).lstrip()
            return f"number {i + 1} (after {context!r}): stored {s}, now {f}"
    return None


def _first_line_difference(stored: str, fresh: str) -> str:
    s_lines, f_lines = stored.splitlines(), fresh.splitlines()
    for i, (s, f) in enumerate(zip(s_lines, f_lines)):
        if s != f:
            return f"line {i + 1}: stored {s[:200]!r}, now {f[:200]!r}"
    return f"stored {len(s_lines)} lines, now {len(f_lines)}"


def png_size(data: str) -> tuple[int, int]:
    """(width, height) in pixels of a base64 PNG, from its IHDR chunk."""
    head = base64.b64decode(data[:64] if isinstance(data, str) else _text(data)[:64])
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError("data: not a PNG")
    return struct.unpack(">II", head[16:24])


def _parts(outputs) -> tuple[dict[str, str], list]:
    """A cell's outputs as its streams' text by name, and its other outputs in order."""
    streams: dict[str, str] = {}
    others = []
    for out in outputs:
        if out.output_type == "stream":
            streams[out.name] = streams.get(out.name, "") + _text(out.text)
        else:
            others.append(out)
    return streams, others


def output_difference(stored, fresh) -> str | None:
    """None when a fresh result or display output matches the stored one, else what differs."""
    if stored.output_type != fresh.output_type:
        return f"stored a {stored.output_type}, now a {fresh.output_type}"
    if fresh.output_type == "error":
        return f"an error: {fresh.ename}: {fresh.evalue}"
    if set(stored.data) != set(fresh.data):
        return f"stored {sorted(stored.data)}, now {sorted(fresh.data)}"
    for mime in sorted(stored.data):
        s, f = stored.data[mime], fresh.data[mime]
        if mime == "image/png":
            if png_size(s) != png_size(f):
                return f"image/png: stored {png_size(s)} pixels, now {png_size(f)}"
        elif mime in _TEXT_TYPES or mime.startswith("text/"):
            if mime == "application/json":
                s, f = repr(s), repr(f)
            why = text_difference(_text(s), _text(f))
            if why:
                return f"{mime}: {why}"
        elif s != f:
            return f"{mime}: differs"
    return None


def cell_difference(stored_outputs, fresh_outputs) -> str | None:
    """None when a cell's fresh outputs match its stored ones, else the first difference."""
    s_streams, s_others = _parts(stored_outputs)
    f_streams, f_others = _parts(fresh_outputs)
    for out in f_others:
        if out.output_type == "error":
            return f"an error: {out.ename}: {out.evalue}"
    if f_streams.get("stderr"):
        return f"writes to stderr (a warning?): {f_streams['stderr'][:300]!r}"
    for name in sorted(set(s_streams) | set(f_streams)):
        if name not in f_streams or name not in s_streams:
            return f"{name}: stored {name in s_streams}, now {name in f_streams}"
        why = text_difference(s_streams[name], f_streams[name])
        if why:
            return f"{name}: {why}"
    if len(s_others) != len(f_others):
        kinds = lambda outs: [o.output_type for o in outs]
        return f"stored {kinds(s_others)}, now {kinds(f_others)}"
    for i, (s, f) in enumerate(zip(s_others, f_others)):
        why = output_difference(s, f)
        if why:
            return f"output {i + 1}: {why}"
    return None


def has_outputs(nb: nbformat.NotebookNode) -> bool:
    """Whether a notebook is stored executed: every code cell has an execution count."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    return bool(code) and all(c.get("execution_count") for c in code)


#: The output types a repository page renders (GitHub's notebook view): widgets and the like would not show.
RENDERED = {"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/svg+xml"}
#: The most a stored tutorial may weigh: over it, draw its figures at a lower dpi.
MAX_BYTES = 2_000_000


def storage_problems(path: Path) -> list[str]:
    """What keeps the stored notebook at ``path`` from reading on a repository page: a code cell never executed,
    an error or stderr output, an output type such a page does not render, a PNG that does not decode, an
    invalid notebook, or more than :data:`MAX_BYTES`. Empty when it reads."""
    nb = nbformat.read(path, as_version=4)
    problems = []
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        problems.append(f"not a valid nbformat 4 notebook: {exc.message}")
    if path.stat().st_size > MAX_BYTES:
        problems.append(f"{path.stat().st_size / 1e6:.1f} MB stored (at most {MAX_BYTES / 1e6:.0f}): lower the dpi")
    for n, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        if not cell.get("execution_count"):
            problems.append(f"code cell {n}: stored without its outputs (never executed)")
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                problems.append(f"code cell {n}: an error: {out.ename}")
            elif out.output_type == "stream" and out.name == "stderr":
                problems.append(f"code cell {n}: stderr (a warning?): {_text(out.text)[:200]!r}")
            elif out.output_type in ("display_data", "execute_result"):
                problems += [
                    f"code cell {n}: {m} does not render on a repository page" for m in set(out.data) - RENDERED
                ]
                if "image/png" in out.data:
                    try:
                        png_size(out.data["image/png"])
                    except (ValueError, TypeError) as exc:
                        problems.append(f"code cell {n}: image/png does not decode: {exc}")
    return problems


def differences(stored: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> list[str]:
    """Each code cell whose fresh outputs differ from the stored ones (and a changed cell list): empty when
    the stored notebook reads as a fresh execution does."""
    s_cells = [c for c in stored.cells if c.cell_type == "code"]
    f_cells = [c for c in fresh.cells if c.cell_type == "code"]
    if [c.source for c in s_cells] != [c.source for c in f_cells]:
        return ["the code cells differ from the executed ones"]
    out = []
    for n, (s, f) in enumerate(zip(s_cells, f_cells), start=1):
        why = cell_difference(s.get("outputs", []), f.get("outputs", []))
        if why:
            first = s.source.strip().splitlines()[0][:60] if s.source.strip() else ""
            out.append(f"code cell {n} ({first!r}): {why}")
    return out


def stored_form(stored: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook to write: ``stored``'s cells, ids and metadata, with ``fresh``'s outputs, except that a
    text output matching its stored one is kept as stored (no diff for float noise); counts 1, 2, …"""
    out = nbformat.from_dict(stored)
    count = 0
    for cell, new in zip(out.cells, fresh.cells):
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        old = cell.get("outputs", [])
        outputs = [nbformat.from_dict(o) for o in new.outputs]
        for o in outputs:
            if "execution_count" in o:
                o.execution_count = count
        if old and cell_difference(old, outputs) is None:
            outputs = _keep_text(old, outputs)
        cell.outputs = outputs
        cell.metadata.pop("execution", None)
    return out


def _keep_text(old, outputs):
    """``outputs`` with each text kept as stored (they match by the rules) when they are the same outputs in the
    same order (a stream may be cut elsewhere on another run: then the fresh ones); images as drawn now."""
    if [(o.output_type, o.get("name")) for o in old] != [(o.output_type, o.get("name")) for o in outputs]:
        return outputs
    for o, prev in zip(outputs, old):
        if o.output_type == "stream":
            o.text = prev.text
        else:
            for mime in o.data:
                if mime != "image/png" and mime in prev.data:
                    o.data[mime] = prev.data[mime]
    return outputs


def store(path: Path) -> bool:
    """Execute the notebook at ``path`` and write it back with its outputs; whether the file changed."""
    stored = nbformat.read(path, as_version=4)
    fresh = execute(path)
    new = stored_form(stored, fresh)
    nbformat.validate(new)
    text = nbformat.writes(new) + "\n"
    changed = text != path.read_text(encoding="utf-8")
    if changed:
        path.write_text(text, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="tutorials whose file name starts with these (default: all)")
    parser.add_argument("--check", action="store_true", help="compare with the stored outputs; write nothing")
    args = parser.parse_args(argv)
    failed = 0
    for path in notebooks(args.names):
        name = path.relative_to(ROOT)
        if args.check:
            stored = nbformat.read(path, as_version=4)
            found = differences(stored, execute(path)) if has_outputs(stored) else ["stored without outputs"]
            failed += bool(found)
            print(f"{name}: " + ("\n  ".join(["differs", *found]) if found else "as stored"), flush=True)
        else:
            changed = store(path)
            size = path.stat().st_size / 1e6
            problems = storage_problems(path)
            failed += bool(problems)
            print(f"{name}: {'stored' if changed else 'unchanged'} ({size:.2f} MB)", *problems, sep="\n  ", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
