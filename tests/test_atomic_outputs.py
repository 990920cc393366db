"""Every file a command writes appears whole or not at all, and every command that reads a model takes a
shipped name.

The one writer (:func:`attnkit.paths.atomic_writer`) is checked on its own (an exception keeps the old file,
success gives the whole new one, the mode is what a plain ``open`` gives under the umask); then through the
commands: ``attnkit align --output`` stopped by a NUL byte on a later line; a ``--plot`` picture whose drawing
fails midway; ``attnkit export`` of a shipped model by name. SIGKILL at random instants (``align --output``,
``translate --format html --output``, an export): tests/test_sigkill_outputs.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from attnkit.alignment.gold import GOLD_DIR
from attnkit.cli import main
from attnkit.paths import atomic_write_text, atomic_writer, current_umask

OLD = "my old alignments\n"


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


# ------------------------------------------------------------------ the one writer


def test_the_writer_keeps_the_old_file_when_the_block_fails(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text(OLD)
    with pytest.raises(RuntimeError, match="midway"), atomic_writer(path, "w", encoding="utf-8") as f:
        f.write("half of the new ")
        f.flush()  # on disk in the temp file, never under the final name
        assert path.read_text() == OLD
        raise RuntimeError("midway")
    assert path.read_text() == OLD
    assert _leftovers(tmp_path) == []  # the temp file is removed

    with pytest.raises(KeyboardInterrupt), atomic_writer(path) as f:  # Ctrl-C alike (a BaseException)
        f.write(b"x" * 100_000)
        raise KeyboardInterrupt
    assert path.read_text() == OLD and _leftovers(tmp_path) == []


def test_the_writer_puts_the_whole_new_file_in_place(tmp_path):
    path = tmp_path / "sub" / "out.bin"  # parents created
    data = os.urandom(3 * 1024 * 1024 + 17)
    with atomic_writer(path) as f:
        for i in range(0, len(data), 65536):
            f.write(data[i : i + 65536])
        assert not path.exists()  # nothing under the final name before the block ends
    assert path.read_bytes() == data
    atomic_write_text(path, "nuevo ñ\n")  # replaces it whole
    assert path.read_bytes() == "nuevo ñ\n".encode()
    assert _leftovers(path.parent) == []


def test_the_writer_with_a_named_temporary(tmp_path):
    """A folder whose manifest names its temporaries (a training run's) gives the temp file's name."""
    path, temporary = tmp_path / "train_config.json", tmp_path / "train_config.json.tmp"
    path.write_text(OLD)
    temporary.write_text("an interrupted save's leftover, longer than the new file")
    with pytest.raises(RuntimeError), atomic_writer(path, "w", temporary=temporary) as f:
        f.write("new")
        f.flush()
        assert temporary.read_text() == "new"  # the named file, truncated and written
        raise RuntimeError
    assert path.read_text() == OLD and not temporary.exists()
    atomic_write_text(path, "new", temporary=temporary)
    assert path.read_text() == "new" and not temporary.exists()
    with pytest.raises(ValueError, match="temporary must be another name in"):
        atomic_write_text(path, "x", temporary=tmp_path / "sub" / "t.tmp")
    target = tmp_path / "elsewhere.txt"
    target.write_text("not attnkit's")
    temporary.symlink_to(target)
    with pytest.raises(OSError):  # a link in the temporary's place is not followed
        atomic_write_text(path, "x", temporary=temporary)
    assert target.read_text() == "not attnkit's" and path.read_text() == "new"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077, 0o002])
def test_the_writers_permissions_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        assert current_umask() == umask
        plain = tmp_path / "plain.txt"
        with open(plain, "w") as f:  # the reference: what a plain open gives
            f.write("x")
        atomic_write_text(tmp_path / "atomic.txt", "x")
        (tmp_path / "replaced.txt").write_text(OLD)
        os.chmod(tmp_path / "replaced.txt", 0o600)
        atomic_write_text(tmp_path / "replaced.txt", "x")
    finally:
        os.umask(old)
    want = plain.stat().st_mode & 0o777
    assert want == 0o666 & ~umask
    assert (tmp_path / "atomic.txt").stat().st_mode & 0o777 == want  # not mkstemp's 0o600
    assert (tmp_path / "replaced.txt").stat().st_mode & 0o777 == want


# ------------------------------------------------------------------ the commands


def _gold_slice(tmp_path: Path, n: int, *, nul_at: int | None = None) -> tuple[Path, Path]:
    """The first ``n`` gold verses as a line-parallel pair of files; a NUL byte in source line ``nul_at``."""
    src = (GOLD_DIR / "es-en.es").read_text(encoding="utf-8").splitlines()[:n]
    tgt = (GOLD_DIR / "es-en.en").read_text(encoding="utf-8").splitlines()[:n]
    if nul_at is not None:
        src[nul_at - 1] = src[nul_at - 1].replace(" ", " \0", 1)
    (tmp_path / "s.es").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "s.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return tmp_path / "s.es", tmp_path / "s.en"


def test_align_output_stopped_by_a_nul_byte_keeps_the_old_file(tmp_path, capsys):
    src, tgt = _gold_slice(tmp_path, 150, nul_at=150)
    out = tmp_path / "links.txt"
    out.write_text(OLD)
    # batches of 4 (buckets of 32 pairs): 4 buckets of links are written before line 150 is read
    argv = ["align", "--src", str(src), "--tgt", str(tgt), "--method", "attention", "--layer", "2"]
    argv += ["--batch-size", "4", "--no-progress", "--output", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "line 150" in err[-1] and "NUL" in err[-1], err
    assert out.read_text() == OLD  # not truncated, not half-written
    assert _leftovers(tmp_path) == []

    src.write_text(src.read_text(encoding="utf-8").replace("\0", ""), encoding="utf-8")  # mended: the new file
    assert main(argv) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 150 and all(lines)


def test_a_plot_whose_drawing_fails_keeps_the_old_picture(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from attnkit.viz import plot_alignment

    out = tmp_path / "attn.png"
    out.write_bytes(b"my old picture")
    real = Figure.savefig

    def fails_midway(self, fname, **kw):
        real(self, fname, **kw)  # the whole PNG written to the temp file, then a failure
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", fails_midway)
    with pytest.raises(OSError, match="disk full"):
        plot_alignment([[0.5, 0.5], [0.2, 0.8]], ["a", "b"], ["c", "d"], out)
    assert out.read_bytes() == b"my old picture" and _leftovers(tmp_path) == []
    monkeypatch.setattr(Figure, "savefig", real)
    plot_alignment([[0.5, 0.5], [0.2, 0.8]], ["a", "b"], ["c", "d"], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ a shipped name wherever a model is read


def test_export_takes_a_shipped_model_name(tmp_path, capsys):
    from safetensors.torch import load_file

    from attnkit.pretrained import resolve_model
    from attnkit.tasks.translation.generation import read_generation_defaults

    out = tmp_path / "exported"
    assert main(["export", "transformer-es-en", str(out), "--fp32"]) == 0, capsys.readouterr().err
    shipped = resolve_model("transformer-es-en")
    theirs, ours = load_file(shipped / "model.safetensors"), load_file(out / "model.safetensors")
    assert theirs.keys() == ours.keys()
    assert all(ours[k].float().equal(theirs[k].float()) for k in theirs)  # the shipped weights, in float32
    assert json.loads((out / "config.json").read_text()) == json.loads((shipped / "config.json").read_text())

    assert main(["export", "transformer-es-en", str(tmp_path / "lp"), "--length-penalty", "1.25"]) == 0
    assert read_generation_defaults(tmp_path / "lp").length_penalty == 1.25  # read the named model's kind

    assert main(["export", "no-such-model", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "transformer-es-en" in err[0] and "attnkit models" in err[0]
    assert not (tmp_path / "x").exists()


def test_train_captioning_takes_a_shipped_name_to_start_from(tmp_path, capsys, monkeypatch):
    import attnkit.tasks.captioning as captioning

    started = []
    monkeypatch.setattr(captioning, "train_captioning", lambda cfg, **kw: started.append(cfg) or {})
    argv = ["train", "captioning", "--out-dir", str(tmp_path / "run")]
    assert main([*argv, "--init-from", "no-such-captioner"]) == 2
    err = capsys.readouterr().err
    assert "--init-from" in err and "captioner-soft" in err  # the known names, not "folder does not exist"
    assert started == []
    assert main([*argv, "--init-from", "captioner-soft"]) == 0, capsys.readouterr().err
    assert [c.init_from for c in started] == ["captioner-soft"]
