"""No command deletes or replaces a file it did not write (issue 54).

The user's files (a file, a sub-folder, ``x.tmp-123`` and ``y.old-456`` as a file and as a folder, a
``best/`` and a ``step-00000001/`` without ``COMPLETE``, a ``train_config.json`` of their own) are
planted in every folder a command writes, and every byte of them is compared after the command,
whether it refused or succeeded: ``attnkit export`` (default format), the Trainer and
``attnkit train --out-dir``, ``attnkit demo --out``, and the helper itself
(:mod:`attnkit.output_folder`)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from attnkit.cli import main
from attnkit.output_folder import (
    FOLDER_MANIFEST,
    OutputFolderError,
    WrittenFolder,
    check_output_folder,
    owned_files,
)
from attnkit.training import ListBatches, RunConfig, Trainer, list_checkpoints, save_checkpoint
from attnkit.training.checkpoint import rotate_checkpoints
from attnkit.training.run_folder import check_run_folder, open_run_folder, save_in_run
from tiny import tiny_transformer, toy_batches

torch.set_num_threads(1)


def snapshot(folder) -> dict[str, bytes | None]:
    """Every entry under ``folder``: a file's bytes, ``None`` for a folder."""
    return {
        p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))
    }


def plant(folder, *, checkpoints: bool = True) -> dict[str, bytes | None]:
    """The user's files, in ``folder``; returns their snapshot (paths relative to ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "thesis.txt": b"years of work",
        "sub/deep/notes.md": b"# mine",
        "x.tmp-123": b"a user's tmp file",
        "y.old-456": b"a user's old file",
        "x.tmp-789/inside.txt": b"a user's tmp folder",
        "y.old-012/inside.txt": b"a user's old folder",
    }
    if checkpoints:
        files |= {
            "best/weights.bin": b"\x00\x01 not attnkit's",
            "step-00000001/model.safetensors": b"a fake checkpoint without COMPLETE",
            "train_config.json": b'{"mine": true}',
        }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return {k: v for k, v in snapshot(folder).items() if k.split("/")[0] in {n.split("/")[0] for n in files}}


def assert_kept(folder, planted) -> None:
    now = snapshot(folder)
    assert {k: now.get(k, "MISSING") for k in planted} == planted


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnkit: error: ") and "Traceback" not in err, err
    return err


# ----------------------------------------------------------------------------------- the helper


def test_a_written_folder_names_each_entry_before_writing_it(tmp_path):
    folder = WrittenFolder.open(tmp_path / "run", "training-run")
    assert json.loads((tmp_path / "run" / FOLDER_MANIFEST).read_text())["files"] == []
    planted = plant(tmp_path / "run")  # the user's files, put in after: never claimed, never removed
    path = folder.claim("log.txt")[0]
    path.write_text("mine now")
    with pytest.raises(OutputFolderError, match=r"holds thesis\.txt, which attnkit did not write"):
        folder.claim("thesis.txt")
    tmp = folder.claim_temporaries("a.tmp-1")[0]
    tmp.mkdir()
    (tmp / "half").write_bytes(b"x")
    again = WrittenFolder.open(tmp_path / "run", "training-run")  # the manifest, read back
    assert again.files == {"log.txt"} and again.temporaries == {"a.tmp-1"}
    assert again.clean_temporaries() == [tmp] and not tmp.exists()
    assert again.temporaries == set()
    assert_kept(tmp_path / "run", planted)
    with pytest.raises(OutputFolderError, match="not a demo one"):
        WrittenFolder.open(tmp_path / "run", "demo")


@pytest.mark.parametrize("kind_of_folder", ["files", "a file", "bad manifest"])
def test_a_written_folder_refuses_a_folder_of_the_users(tmp_path, kind_of_folder):
    out = tmp_path / "out"
    if kind_of_folder == "a file":
        out.write_text("x")
        planted = {}
        message = "is a file"
    else:
        planted = plant(out)
        if kind_of_folder == "bad manifest":
            (out / FOLDER_MANIFEST).write_text("not json")
            planted[FOLDER_MANIFEST] = b"not json"
            message = "not an attnkit manifest"
        else:
            message = r"is not empty and attnkit did not write it .*best/weights\.bin"
    with pytest.raises(OutputFolderError, match=message):
        WrittenFolder.open(out, "demo")
    if planted:
        assert snapshot(out).keys() == planted.keys()
        assert_kept(out, planted)


def test_owned_files_reads_a_checkpoints_complete(tmp_path):
    m = tiny_transformer(64)
    path = save_checkpoint(tmp_path / "c", model=m, config=m.config)
    assert owned_files(path) == {p.name for p in path.iterdir()}
    (path / "sub").mkdir()  # even an empty folder of the user's is in the way of --force
    with pytest.raises(OutputFolderError, match=r"did not write \(sub/\)"):
        check_output_folder(path, force=True)
    assert owned_files(tmp_path) is None


# -------------------------------------------------------------------------- save_checkpoint and rotation


def test_save_checkpoint_refuses_a_folder_holding_the_users_files(tmp_path):
    m = tiny_transformer(64)
    for name in ("mine", "best"):
        planted = plant(tmp_path / name, checkpoints=False)
        with pytest.raises(OutputFolderError, match=str(tmp_path / name)):
            save_checkpoint(tmp_path / name, model=m, config=m.config)
        assert snapshot(tmp_path / name) == planted
    path = save_checkpoint(tmp_path / "ok", model=m, config=m.config)
    (path / "README.md").write_text("my notes on this checkpoint")
    with pytest.raises(OutputFolderError, match=r"README\.md"):
        save_checkpoint(path, model=m, config=m.config)
    assert (path / "README.md").read_text() == "my notes on this checkpoint"
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name] == []


def test_rotation_never_removes_a_checkpoint_holding_a_users_file(tmp_path):
    m = tiny_transformer(64)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path / f"step-{step:08d}", model=m, config=m.config)
    (tmp_path / "step-00000001" / "notes.txt").write_text("mine")
    with pytest.warns(UserWarning, match=r"step-00000001 holds files attnkit did not write \(notes\.txt\)"):
        removed = rotate_checkpoints(tmp_path, 1)
    assert [p.name for p in removed] == ["step-00000002"]  # the run goes on; the user's checkpoint stays
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001", "step-00000003"]
    assert (tmp_path / "step-00000001" / "notes.txt").read_text() == "mine"
    (tmp_path / "step-00000001" / "notes.txt").unlink()
    assert [p.name for p in rotate_checkpoints(tmp_path, 1)] == ["step-00000001"]


# ------------------------------------------------------------------------------------- the trainer


def make_trainer(out_dir, *, max_steps=6, keep_last=1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    valid_x, valid_y = toy_batches(1, 8, seed=9)[0]
    run = RunConfig(
        out_dir=str(out_dir),
        epochs=100,
        max_steps=max_steps,
        seed=1,
        progress=False,
        device="cpu",
        save_every_steps=2,
        valid_every_steps=2,
        keep_last=keep_last,
    )

    def loss(m, batch):
        x, y = batch
        return F.cross_entropy(m(x), y, reduction="sum"), y.numel(), {}

    return Trainer(
        model,
        opt,
        run,
        loss_fn=loss,
        train_batches=ListBatches(toy_batches(4), shuffle_seed=1),
        valid_fn=lambda m: {"valid_loss": F.cross_entropy(m(valid_x), valid_y).item()},
        task_config=run,
    )


def test_a_run_refuses_a_folder_of_the_users(tmp_path):
    out = tmp_path / "mine"
    planted = plant(out)
    with pytest.raises(OutputFolderError, match="attnkit did not write it"):
        check_run_folder(out)
    with pytest.raises(OutputFolderError, match="attnkit did not write it"):
        make_trainer(out)
    assert snapshot(out) == planted


def test_a_run_keeps_every_file_of_the_users_beside_it(tmp_path):
    out = tmp_path / "run"
    first = make_trainer(out, max_steps=4).fit()
    assert first["steps"] == 4 and (out / "best").is_dir()
    manifest = json.loads((out / FOLDER_MANIFEST).read_text())
    assert {"train_config.json", "train_log.jsonl", "best", "step-00000004"} <= set(manifest["files"])
    assert manifest["temporaries"] == []
    # the user's files beside the run (no best/ or step folder of theirs: the run has its own)
    planted = plant(out, checkpoints=False)
    # an interrupted save's leftover, named by the manifest: the next start removes it
    leftover = out / "step-00000006.tmp-deadbeef"
    leftover.mkdir()
    (leftover / "config.json").write_text("{}")
    manifest["temporaries"] = [leftover.name]
    (out / FOLDER_MANIFEST).write_text(json.dumps(manifest))
    t = make_trainer(out, max_steps=10)
    summary = t.fit(resume=True)
    assert summary["steps"] == 10 and summary["resumed_from"].endswith("step-00000004")
    assert not leftover.exists()
    assert [p.name for p in list_checkpoints(out)] == ["step-00000010"]  # rotated: only the run's own
    assert_kept(out, planted)


@pytest.mark.parametrize("name", ["best", "step-00000002"])
def test_a_run_refuses_a_checkpoint_name_the_user_took(tmp_path, name):
    out = tmp_path / "run"
    WrittenFolder.open(out, "training-run")  # a run's folder, that has not written `name` yet
    (out / name).mkdir()
    (out / name / "weights.bin").write_bytes(b"mine")
    with pytest.raises(OutputFolderError, match=rf"holds {name}, which attnkit did not write"):
        make_trainer(out, max_steps=2).fit()
    assert (out / name / "weights.bin").read_bytes() == b"mine"
    assert [p.name for p in out.iterdir() if ".tmp-" in p.name or ".old-" in p.name] == []


def test_a_run_refuses_to_replace_its_best_holding_a_users_file(tmp_path):
    out = tmp_path / "run"
    make_trainer(out, max_steps=2).fit()
    (out / "best" / "my-eval.txt").write_text("BLEU 30")
    before = snapshot(out / "best")
    with pytest.raises(
        OutputFolderError,
        match=r"best holds files the earlier attnkit export or checkpoint there did not write \(my-eval\.txt\)",
    ):
        make_trainer(out, max_steps=4).save(best=True)
    assert snapshot(out / "best") == before
    assert [p.name for p in out.iterdir() if ".tmp-" in p.name or ".old-" in p.name] == []


def test_a_run_from_before_manifests_resumes(tmp_path):
    out = tmp_path / "run"
    make_trainer(out, max_steps=4).fit()
    (out / FOLDER_MANIFEST).unlink()  # as an older attnkit left it
    planted = plant(out, checkpoints=False)
    summary = make_trainer(out, max_steps=6).fit(resume=True)
    assert summary["steps"] == 6 and summary["resumed_from"].endswith("step-00000004")
    assert [p.name for p in list_checkpoints(out)] == ["step-00000006"]
    assert_kept(out, planted)


# ------------------------------------------------------------------------------------- the commands


@pytest.fixture
def checkpoint(tmp_path):
    m = tiny_transformer(64)
    return save_checkpoint(tmp_path / "model", model=m, config=m.config)


def test_cli_export_never_touches_a_folder_of_the_users(tmp_path, checkpoint, capsys):
    mine = tmp_path / "m"
    planted = plant(mine)
    for force in ([], ["--force"]):
        assert main(["export", str(checkpoint), str(mine), *force]) == 2
        assert str(mine.resolve()) in one_line(capsys)
        assert snapshot(mine) == planted


def test_cli_export_refuses_its_own_source(tmp_path, checkpoint, capsys):
    source = snapshot(checkpoint)
    for out, message in (
        (checkpoint, "is the folder being exported"),
        (checkpoint.parent, "holds"),
        (checkpoint / "fp16", "lies inside"),
    ):
        for force in ([], ["--force"]):
            assert main(["export", str(checkpoint), str(out), *force]) == 2
            assert message in one_line(capsys)
            assert snapshot(checkpoint) == source


def test_cli_export_a_run_into_itself_is_refused_and_a_new_folder_inside_is_fine(tmp_path, capsys):
    run = tmp_path / "run"
    folder = open_run_folder(run)
    folder.claim("train_log.jsonl")[0].write_text("{}\n")
    m = tiny_transformer(64)
    for name in ("step-00000001", "step-00000002", "best"):
        save_in_run(folder, name, model=m, config=m.config)
    planted = plant(run, checkpoints=False)
    before = snapshot(run)
    assert main(["export", str(run / "best"), str(run)]) == 2  # the user's report: `export runs/x/best runs/x`
    assert "holds" in one_line(capsys) and snapshot(run) == before
    assert main(["export", str(run / "best"), str(run), "--force"]) == 2
    one_line(capsys)
    assert snapshot(run) == before
    assert main(["export", str(run), str(run / "avg"), "--average-last", "2"]) == 0
    capsys.readouterr()
    assert {k: v for k, v in snapshot(run).items() if not k.startswith("avg")} == before
    assert_kept(run, planted)


def test_cli_export_force_replaces_only_its_own_export(tmp_path, checkpoint, capsys):
    out = tmp_path / "out"
    assert main(["export", str(checkpoint), str(out)]) == 0
    capsys.readouterr()
    written = snapshot(out)
    assert main(["export", str(checkpoint), str(out)]) == 2
    assert "pass --force" in one_line(capsys)
    assert main(["export", str(checkpoint), str(out), "--force", "--fp32"]) == 0
    capsys.readouterr()
    assert snapshot(out).keys() == written.keys() and snapshot(out) != written  # replaced: fp32 now
    (out / "x.tmp-123").write_text("mine")
    assert main(["export", str(checkpoint), str(out), "--force"]) == 2
    assert "x.tmp-123" in one_line(capsys) and (out / "x.tmp-123").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out"]  # no temporaries left about


def test_cli_train_refuses_an_out_dir_of_the_users(tmp_path, capsys):
    mine = tmp_path / "mine"
    planted = plant(mine)
    assert main(["train", "classifier", "--out-dir", str(mine), "--no-progress"]) == 2
    assert "attnkit did not write it" in one_line(capsys)
    assert snapshot(mine) == planted


def test_cli_demo_refuses_an_out_folder_of_the_users(tmp_path, capsys):
    mine = tmp_path / "mine"
    planted = plant(mine, checkpoints=False)
    (mine / "alignment.png").write_bytes(b"my own picture")
    planted["alignment.png"] = b"my own picture"
    assert main(["demo", "--out", str(mine)]) == 2
    assert "attnkit did not write it" in one_line(capsys)
    assert snapshot(mine) == planted


def test_a_demo_folder_from_before_manifests_is_adopted_only_when_it_holds_the_demos_files_alone(tmp_path):
    from attnkit.demo import DEMO_KIND, _earlier_demo
    from attnkit.output_folder import WrittenFolder

    old = tmp_path / "old"
    old.mkdir()
    for name in ("alignment.png", "explorer.html", "captioner-soft-scene3.png"):
        (old / name).write_bytes(b"demo")
    folder = WrittenFolder.open(old, DEMO_KIND, adopt=_earlier_demo)
    assert all(folder.owns(n) for n in ("alignment.png", "explorer.html", "captioner-soft-scene3.png"))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "alignment.png").write_bytes(b"demo")
    (mixed / "thesis.txt").write_bytes(b"mine")
    with pytest.raises(OutputFolderError, match="attnkit did not write it"):
        WrittenFolder.open(mixed, DEMO_KIND, adopt=_earlier_demo)
    assert (mixed / "thesis.txt").read_bytes() == b"mine" and sorted(p.name for p in mixed.iterdir()) == [
        "alignment.png",
        "thesis.txt",
    ]
