"""Corpus jobs split into parts: line index, plan, resume and assembly, checked in-process."""

from __future__ import annotations

import os

import pytest

from attnkit.corpus_jobs import PartPlan, PartStore, open_line_index
from attnkit.corpus_jobs.parts import PartFailed

TEXT = "alpha\n\nβeta gamma\r\ndelta\nlast line without end"


def _write(tmp_path, text=TEXT):
    p = tmp_path / "in.txt"
    p.write_bytes(text.encode("utf-8"))
    return p


def test_line_index_matches_plain_split(tmp_path):
    p = _write(tmp_path)
    idx = open_line_index(p, tmp_path / "job")
    ref = TEXT.split("\n")
    assert idx.n_lines == len(ref)
    assert idx.read_lines(0, idx.n_lines) == [ln.rstrip("\r") for ln in ref]
    assert idx.read_bytes(2, 4) == "βeta gamma\r\ndelta\n".encode()
    assert int(idx.offsets[-1]) == os.path.getsize(p)
    with pytest.raises(ValueError, match="line range"):
        idx.read_bytes(3, 99)


def test_line_index_trailing_newline_and_empty(tmp_path):
    p = _write(tmp_path, "a\nb\n")
    assert open_line_index(p, tmp_path / "j1").read_lines(0, 2) == ["a", "b"]
    e = _write(tmp_path, "")
    assert open_line_index(e, tmp_path / "j2").n_lines == 0


def test_line_index_rebuilt_when_input_changes(tmp_path):
    p = _write(tmp_path, "a\nb\n")
    assert open_line_index(p, tmp_path / "j").n_lines == 2
    p.write_bytes(b"a\nb\nc\nd\n")
    os.utime(p, ns=(1, 1))  # a different mtime even on coarse clocks
    assert open_line_index(p, tmp_path / "j").read_lines(2, 4) == ["c", "d"]


@pytest.mark.parametrize("n_lines,part_lines,world", [(0, 3, 2), (7, 3, 2), (10, 1, 3), (5, 10, 4)])
def test_plan_covers_every_line_once(n_lines, part_lines, world):
    plan = PartPlan(n_lines, part_lines, world)
    seen = []
    for rank in range(world):
        for part in plan.parts_of_rank(rank):
            seen.extend(range(*plan.part_range(part)))
    assert sorted(seen) == list(range(n_lines))


def test_plan_rejects_bad_arguments():
    with pytest.raises(ValueError, match="part_lines"):
        PartPlan(5, 0)
    with pytest.raises(ValueError, match="rank"):
        PartPlan(5, 2, 2).parts_of_rank(2)


def _work(lines):
    return "".join(f"{ln.upper()}|{len(ln)}\n" for ln in lines).encode()


def _job(tmp_path, n=23, part_lines=4, world=2, key=None):
    p = tmp_path / "corpus.txt"
    if not p.exists():
        p.write_text("".join(f"line {i} {'x' * (i % 5)}\n" for i in range(n)), encoding="utf-8")
    idx = open_line_index(p, tmp_path / "job")
    plan = PartPlan(idx.n_lines, part_lines, world)
    store = PartStore(tmp_path / "job", key or {"cmd": "upper", "input": str(p)}, plan)
    store.open()
    return p, idx, store


def test_two_ranks_give_the_single_process_bytes(tmp_path):
    p, idx, store = _job(tmp_path)
    for rank in (1, 0):  # order of ranks must not matter
        store.run_rank(rank, idx.read_lines, _work)
    out = store.assemble(tmp_path / "out.txt")
    reference = _work(p.read_text(encoding="utf-8").splitlines())  # one process, plain loop
    assert out.read_bytes() == reference


def test_resume_after_failure_redoes_only_unfinished_parts(tmp_path):
    p, idx, store = _job(tmp_path)
    calls = []

    def flaky(lines):
        calls.append(lines[0])
        if lines[0].startswith("line 16 "):
            raise RuntimeError("boom")
        return _work(lines)

    store.run_rank(1, idx.read_lines, flaky)  # parts 2, 4, 6 (1-based)
    with pytest.raises(PartFailed, match=r"part 5 \(lines 17-20\) failed: boom"):
        store.run_rank(0, idx.read_lines, flaky)  # parts 1, 3 done, 5 fails
    assert store.missing() == [4]
    with pytest.raises(ValueError, match="not finished"):
        store.assemble(tmp_path / "out.txt")
    calls.clear()
    _, idx2, store2 = _job(tmp_path)  # the rerun of the same command
    assert store2.run_rank(0, idx2.read_lines, _work) == [4]
    assert store2.run_rank(1, idx2.read_lines, _work) == []
    out = store2.assemble(tmp_path / "out.txt")
    assert out.read_bytes() == _work(p.read_text(encoding="utf-8").splitlines())


def test_resume_with_other_options_is_refused(tmp_path):
    _job(tmp_path)
    with pytest.raises(ValueError, match="different job"):
        _job(tmp_path, key={"cmd": "lower"})


def test_run_job_in_one_process_and_in_a_one_rank_gloo_group(tmp_path):
    import torch.distributed as dist

    from attnkit.corpus_jobs import run_job

    p = tmp_path / "c.txt"
    p.write_text("".join(f"w{i}\n" for i in range(11)), encoding="utf-8")
    reference = _work(p.read_text(encoding="utf-8").splitlines())
    assert run_job(p, tmp_path / "a.out", tmp_path / "ja", {"cmd": "upper"}, _work, part_lines=3) == [0, 1, 2, 3]
    assert (tmp_path / "a.out").read_bytes() == reference
    assert run_job(p, tmp_path / "a.out", tmp_path / "ja", {"cmd": "upper"}, _work, part_lines=3) == []  # resumed

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        seen = []
        run_job(p, tmp_path / "b.out", tmp_path / "jb", {"cmd": "upper"}, _work, 4, lambda part, n: seen.append(n))
        assert seen == [4, 4, 3]
        assert (tmp_path / "b.out").read_bytes() == reference

        def bad(lines):
            raise ValueError("no")

        with pytest.raises(PartFailed, match=r"rank 0: part 1 \(lines 1-4\) failed: no"):
            run_job(p, tmp_path / "c.out", tmp_path / "jc", {"cmd": "bad"}, bad, 4)
        assert not (tmp_path / "c.out").exists()
    finally:
        dist.destroy_process_group()


def test_run_job_over_line_parallel_inputs_with_counts_and_cleanup(tmp_path):
    from attnkit.corpus_jobs import run_job
    from attnkit.corpus_jobs.parts import lines_done

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("".join(f"a{i}\n" for i in range(7)), encoding="utf-8")
    b.write_text("".join(f"b{i}\n" for i in range(7)), encoding="utf-8")
    seen = {}

    def pair_work(lines):
        return "".join(f"{x}-{y}\n" for x, y in lines).encode(), {"pairs": len(lines), "odd": len(lines) % 2}

    def assembled(store):
        seen["totals"] = store.totals()
        seen["progress"] = lines_done(store.folder)

    job = tmp_path / "job"
    user_file = job / "notes.txt"  # a file of the user's in the job folder is left alone
    user_file.parent.mkdir()
    user_file.write_text("mine", encoding="utf-8")
    run_job([a, b], tmp_path / "out.txt", job, {"cmd": "pair"}, pair_work, 3, on_assembled=assembled, clean=True)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "".join(f"a{i}-b{i}\n" for i in range(7))
    assert seen == {"totals": {"pairs": 7, "odd": 3}, "progress": (7, 7)}  # parts of 3, 3, 1 lines
    assert sorted(p.name for p in job.iterdir()) == ["notes.txt"]

    b.write_text("b0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"has 7 lines but .* has 1 lines"):
        run_job([a, b], tmp_path / "o2.txt", tmp_path / "j2", {"cmd": "pair"}, pair_work, 3)
