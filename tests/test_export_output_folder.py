"""``attnkit export --force`` replaces only a folder an earlier attnkit export wrote, and nothing of the
user's: a folder of the user's files, an export with a file of the user's added, a manifest of
another kind, a symbolic link are all refused by name, and every file in them is still there after
(compared byte for byte with what was written)."""

from __future__ import annotations

import json
import os

import pytest

from attnkit.cli import main
from attnkit.deploy.manifest import FILENAME, write_manifest
from attnkit.output_folder import OutputFolderError, check_output_folder, owned_files, replace_output_folder

pytest.importorskip("ctranslate2")


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _fake_export(folder, files=("model.bin", "tokenizer.model")):
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(name.encode())
    write_manifest(folder, {"engine": "ctranslate2"})
    return folder


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnkit: error: ") and "Traceback" not in err, err
    return err


# ----------------------------------------------------------------------- the function, without a model


def test_manifest_lists_the_files_written_before_it(tmp_path):
    folder = _fake_export(tmp_path / "e", files=("model.bin", "sub/vocab.txt"))
    manifest = json.loads((folder / FILENAME).read_text())
    assert manifest["files"] == ["model.bin", "sub/vocab.txt"]
    assert owned_files(folder) == {"model.bin", "sub/vocab.txt", FILENAME}


def test_a_new_or_empty_folder_is_always_fine(tmp_path):
    check_output_folder(tmp_path / "new", force=False)
    (tmp_path / "empty").mkdir()
    check_output_folder(tmp_path / "empty", force=False)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda d: (d / "thesis.tex").write_text("years of work"),
            r"is not a folder attnkit wrote \(no attnkit export attnkit\.json",
        ),
        (lambda d: (d / FILENAME).write_text('{"format": "something-else"}'), "is not a folder attnkit wrote"),
        (lambda d: (d / FILENAME).write_text("not json"), "is not a folder attnkit wrote"),
    ],
)
def test_force_refuses_a_folder_no_export_wrote(tmp_path, make, message):
    folder = tmp_path / "mine"
    folder.mkdir()
    make(folder)
    (folder / "notes" / "deep").mkdir(parents=True)
    (folder / "notes" / "deep" / "a.txt").write_text("keep me")
    before = _snapshot(folder)
    with pytest.raises(OutputFolderError, match=message) as e:
        check_output_folder(folder, force=True)
    assert str(folder) in str(e.value)
    with pytest.raises(OutputFolderError, match="nothing was removed"):
        replace_output_folder(tmp_path / "staging-not-used", folder, force=True)
    assert _snapshot(folder) == before


def test_force_refuses_an_export_with_a_file_of_the_users(tmp_path):
    folder = _fake_export(tmp_path / "e")
    (folder / "my-notes.txt").write_text("mine")
    before = _snapshot(folder)
    with pytest.raises(
        OutputFolderError,
        match=r"holds files the earlier attnkit export or checkpoint there did not write \(my-notes\.txt\)",
    ):
        check_output_folder(folder, force=True)
    assert _snapshot(folder) == before


def test_without_force_a_non_empty_folder_is_refused_even_an_export(tmp_path):
    folder = _fake_export(tmp_path / "e")
    with pytest.raises(OutputFolderError, match="exists and is not empty; choose another folder, or pass --force"):
        check_output_folder(folder, force=False)


def test_a_symbolic_link_and_a_file_are_refused(tmp_path):
    target = _fake_export(tmp_path / "real")
    link = tmp_path / "link"
    os.symlink(target, link)
    with pytest.raises(OutputFolderError, match="is a symbolic link"):
        check_output_folder(link, force=True)
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputFolderError, match="is a file"):
        check_output_folder(tmp_path / "f", force=True)


def test_replace_swaps_an_earlier_export_for_the_new_one(tmp_path):
    out = _fake_export(tmp_path / "out", files=("old.bin",))
    staging = _fake_export(tmp_path / "staging", files=("model.bin",))
    new = _snapshot(staging)
    replace_output_folder(staging, out, force=True)
    assert _snapshot(out) == new and not staging.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the old one is gone


# -------------------------------------------------------------------- the command, on the shipped model


def test_cli_force_keeps_a_users_folder_and_replaces_its_own_export(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "photo.jpg").write_bytes(bytes(range(256)))
    (mine / "docs").mkdir()
    (mine / "docs" / "cv.txt").write_text("curriculum")
    before = _snapshot(mine)
    argv = ["export", "transformer-es-en", str(mine), "--format", "ctranslate2", "--quantization", "int8"]
    assert main([*argv, "--force"]) == 2
    err = _one_line(capsys)
    assert str(mine) in err and "is not a folder attnkit wrote" in err
    assert _snapshot(mine) == before  # every file of the user's is still there, unchanged

    out = tmp_path / "ct2"
    argv = ["export", "transformer-es-en", str(out), "--format", "ctranslate2", "--quantization", "int8"]
    assert main(argv) == 0
    capsys.readouterr()
    written = set(_snapshot(out))
    assert owned_files(out) == written and {"model.bin", "tokenizer.model", FILENAME} <= written
    assert main(argv) == 2 and "pass --force" in _one_line(capsys)
    assert main([*argv, "--force"]) == 0  # its own export: replaced
    capsys.readouterr()
    assert set(_snapshot(out)) == written
    (out / "README-mine.md").write_text("notes")
    assert main([*argv, "--force"]) == 2
    assert "README-mine.md" in _one_line(capsys) and (out / "README-mine.md").read_text() == "notes"
