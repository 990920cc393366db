"""SIGKILL at random instants, ten trials per command: what a command writes is the old output, the new
one whole, or (with no old one, or for a folder between its two renames) absent — never a part.

Commands: ``attnkit align --output`` (the shipped model on 30 gold verses; its links are written as they
come, so the temp file lives long enough to be hit), ``attnkit translate --format html --file … --output``
(a tiny model), and ``attnkit export … --format ctranslate2 --force`` over an earlier export of another
model (the folder is assembled in a hidden ``.OUT.tmp-*`` beside it and renamed in place,
:func:`attnkit.output_folder.staging_beside`). A first run, whole, gives the new output and times the run and
its writing (from the temporary's appearance to the end); then five trials are killed at an instant drawn
over the whole run (start-up included) and five at one drawn over the writing. Two trials run at a time
(each at one thread), so that the three commands' thirty runs fit in about a minute of a two-core machine.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attnkit.alignment.gold import GOLD_DIR
from attnkit.deploy.ct2_engine import ct2_available
from tiny import saved_tiny_transformer

pytestmark = pytest.mark.slow
TRIALS = 10
OLD = b"my old output\n"


def _spawn(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "attnkit", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _state(out: Path) -> str | None:
    """A digest of ``out`` (a file's bytes, or a folder's files and their bytes), or None when absent."""
    if not out.exists():
        return None
    h = hashlib.sha256()
    files = [out] if out.is_file() else sorted(p for p in out.rglob("*") if p.is_file())
    for p in files:
        h.update(str(p.relative_to(out)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _temporaries(folder: Path) -> list[str]:
    """The hidden temporaries of attnkit's writers in ``folder`` (``.NAME.*.tmp`` files, ``.NAME.tmp-*`` folders)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and ".tmp" in p.name)


def _until(test, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not test() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)


def _kill_trials(tmp_path: Path, argv, make_old, *, folder_output: bool = False) -> list[str]:
    """``argv(out)``: the command writing ``out``; ``make_old(out)``: an earlier output there. Runs the
    reference and :data:`TRIALS` killed trials; asserts each outcome; returns them. ``folder_output``: a
    whole folder, which may also be absent for an instant between its two renames."""
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref = ref_dir / "out"
    started = time.monotonic()
    proc = _spawn(argv(ref))
    _until(lambda: _temporaries(ref_dir), proc)
    writing_from = time.monotonic()
    assert proc.wait(timeout=300) == 0
    writing, whole_run = time.monotonic() - writing_from, time.monotonic() - started
    new = _state(ref)
    rng = random.Random(17)
    draws = [rng.uniform(0.05, whole_run) if k < TRIALS // 2 else rng.uniform(0.0, writing) for k in range(TRIALS)]

    def trial(k: int) -> str:
        folder = tmp_path / f"trial{k}"
        folder.mkdir()
        out = folder / "out"
        if k % 5 != 4:  # two trials with no earlier output
            make_old(out)
        old = _state(out)
        proc = _spawn(argv(out))
        try:
            if k >= TRIALS // 2:
                _until(lambda: _temporaries(folder), proc)
            time.sleep(draws[k])
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=60)
        got = _state(out)
        allowed = {old, new} | ({None} if old is None or folder_output else set())
        assert got in allowed, (k, "partial output", _temporaries(folder))
        return "new" if got == new else "absent" if got is None else "old"

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(trial, range(TRIALS)))


def test_align_output_killed_at_random_instants(tmp_path):
    src = (GOLD_DIR / "es-en.es").read_text(encoding="utf-8").splitlines()[:30]
    tgt = (GOLD_DIR / "es-en.en").read_text(encoding="utf-8").splitlines()[:30]
    (tmp_path / "s.es").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "s.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    base = ["align", "--src", str(tmp_path / "s.es"), "--tgt", str(tmp_path / "s.en"), "--no-progress"]
    outcomes = _kill_trials(
        tmp_path, lambda out: [*base, "--batch-size", "4", "--output", str(out)], lambda out: out.write_bytes(OLD)
    )
    assert len(outcomes) == TRIALS


def test_translate_html_output_killed_at_random_instants(tmp_path):
    ckpt = saved_tiny_transformer(tmp_path / "model", seed=0, alignment_layer=1, alignment_head=3, max_len=24)
    doc = tmp_path / "doc.html"
    doc.write_text("".join(f"<p>Y dijo <b>Dios</b>: Sea la luz {k}.</p>\n" for k in range(20)), encoding="utf-8")
    outcomes = _kill_trials(
        tmp_path,
        lambda out: [
            "translate",
            "--model",
            str(ckpt),
            "--format",
            "html",
            "--file",
            str(doc),
            "--beam",
            "1",
            "--output",
            str(out),
        ],
        lambda out: out.write_bytes(OLD),
    )
    assert len(outcomes) == TRIALS


@pytest.mark.skipif(ct2_available() is not None, reason=str(ct2_available()))
def test_export_folder_killed_at_random_instants(tmp_path):
    """The export folder is the earlier export (of another model), the new one, or absent (killed between
    setting the old one aside and renaming the new one in: the old one is then at ``.out.old-PID``)."""
    from attnkit.deploy.ct2_export import export_ctranslate2

    new_model = saved_tiny_transformer(tmp_path / "new", seed=0)
    old_model = saved_tiny_transformer(tmp_path / "old", seed=1)
    outcomes = _kill_trials(
        tmp_path,
        lambda out: [
            "export",
            str(new_model),
            str(out),
            "--format",
            "ctranslate2",
            "--quantization",
            "float32",
            "--force",
        ],
        lambda out: export_ctranslate2(old_model, out, quantization="float32"),
        folder_output=True,
    )
    assert len(outcomes) == TRIALS
