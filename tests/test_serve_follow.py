"""``attnkit serve`` on a model still training: a training run's folder is followed, so a newer complete
checkpoint is served once written (its answers and /api/models name it), a half-written or corrupt one is
not, and the heavy jobs' workers use the checkpoint the server shows. The reference for every answer is a
Translator loaded directly from the checkpoint the answer names. No timed assertions: the follower's clock
is a number the test moves."""

import base64
import io
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from attnkit.explorer import schema, worker
from attnkit.explorer.app import ServeOptions, create_app, load_models
from attnkit.explorer.follow import Follower
from attnkit.explorer.payload import caption_payload, translation_payload
from attnkit.explorer.routes.caption import decode_image
from attnkit.explorer.routes.translate import translation_reply
from attnkit.service import TranslationRequest
from attnkit.tasks.captioning import Captioner
from attnkit.tasks.translation import Translator
from attnkit.training.checkpoint import COMPLETE_NAME, WEIGHTS_NAME, save_checkpoint
from served import served
from tiny import saved_tiny_transformer

fastapi_testclient = pytest.importorskip("fastapi.testclient")
TEXT = "Y dijo Dios: Sea la luz: y fué la luz."
EVERY = 5.0  # seconds between two looks at the run, on the test's own clock


def _run(tmp_path):
    """A training run's folder (a log, no config of its own) with one complete checkpoint, step 2."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_log.jsonl").write_text("")
    saved_tiny_transformer(run / "step-00000002", seed=0)
    return run


def _save(run, step: int, seed: int):
    """A checkpoint of different weights (another seed) at ``step``."""
    return saved_tiny_transformer(run / f"step-{step:08d}", seed=seed)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _served(run, follow_every=EVERY, **options):
    """A client over the run's model, and the clock its follower reads."""
    models = load_models([str(run)])
    app = create_app(models, verses=[], options=ServeOptions(follow_every=follow_every, **options))
    clock = Clock()
    if follow_every:
        app.state.explorer.follower = Follower(models, follow_every, clock=clock)
    return fastapi_testclient.TestClient(app, base_url="http://127.0.0.1"), clock


def _translate(client, **extra) -> dict:
    r = client.post("/api/translate", json={"text": TEXT, "model": "run", "beam": 1, "heads": True, **extra})
    assert r.status_code == 200, r.text
    return schema.Translation.model_validate(r.json()).model_dump()


def _shown(client) -> tuple[str, int]:
    (info,) = client.get("/api/models").json()["models"]
    return info["checkpoint"], info["step"]


def _assert_made_with(answer, checkpoint) -> None:
    """``answer`` (the route's JSON, or the ``schema.Translation`` it is sent from) names ``checkpoint`` and is
    what a Translator loaded from it says: the same translation, and maps equal to its own payload's (1e-6) and
    to its own forced decoding's maps (within the payload's rounding)."""
    if not isinstance(answer, dict):
        answer = answer.model_dump(mode="json")
    assert answer["checkpoint"] == checkpoint.name and answer["step"] == int(checkpoint.name.split("-")[1])
    tr = Translator.load(checkpoint)
    ref = translation_payload(tr, TEXT, beam=1, heads=True, model="run")
    assert answer["translation"] == ref["translation"]
    assert torch.tensor(answer["attention"]) == pytest.approx(torch.tensor(ref["attention"]), abs=1e-6)
    for kind in ("enc_self", "dec_self", "cross"):
        got, want = torch.tensor(answer["heads"][kind]), torch.tensor(ref["heads"][kind])
        assert got.shape == want.shape and got == pytest.approx(want, abs=1e-6)
    tokens = tr.translate([TEXT], beam_size=1)[0]["tokens"]
    maps = tr.attention(TEXT, tokens).maps
    assert torch.tensor(answer["attention"]) == pytest.approx(maps.alignment.double(), abs=6e-6)  # rounded to 5
    assert torch.tensor(answer["heads"]["cross"]) == pytest.approx(maps.cross.double(), abs=6e-5)  # rounded to 4


def test_a_newer_checkpoint_is_served_once_due_and_its_answers_come_from_it(tmp_path):
    run = _run(tmp_path)
    client, clock = _served(run)
    first = _translate(client)
    _assert_made_with(first, run / "step-00000002")
    assert _shown(client) == ("step-00000002", 2)
    newer = _save(run, 4, seed=1)
    assert _translate(client)["step"] == 2  # written, but the last look was less than --follow-every ago
    clock.now += EVERY
    second = _translate(client)
    _assert_made_with(second, newer)
    assert _shown(client) == ("step-00000004", 4)
    # the swap is visible: the two checkpoints' maps differ
    assert (torch.tensor(first["attention"]) - torch.tensor(second["attention"])).abs().max() > 1e-3


def test_a_half_written_or_corrupt_checkpoint_is_skipped_and_the_old_one_serves_on(tmp_path, caplog):
    run = _run(tmp_path)
    client, clock = _served(run)
    assert _translate(client)["step"] == 2
    # a save under way: every file there but the COMPLETE marker
    half = _save(run, 6, seed=2)
    (half / COMPLETE_NAME).unlink()
    # a complete checkpoint whose weights were cut short afterwards
    corrupt = _save(run, 8, seed=3)
    weights = corrupt / WEIGHTS_NAME
    weights.write_bytes(weights.read_bytes()[:1000])
    with caplog.at_level(logging.WARNING, logger="attnkit.explorer"):
        for _ in range(2):
            clock.now += EVERY
            _assert_made_with(_translate(client), run / "step-00000002")
    reports = [r.getMessage() for r in caplog.records if r.name == "attnkit.explorer"]
    assert len(reports) == 1 and "step-00000008" in reports[0] and "still serving step-00000002" in reports[0]
    assert _shown(client) == ("step-00000002", 2)
    # the run goes on: its next good checkpoint is served, the broken and the half-written ones never are
    good = _save(run, 10, seed=4)
    clock.now += EVERY
    _assert_made_with(_translate(client), good)
    assert _shown(client) == ("step-00000010", 10)


def test_with_following_off_the_first_checkpoint_stays(tmp_path):
    run = _run(tmp_path)
    client, _ = _served(run, follow_every=0)
    assert _translate(client)["step"] == 2
    _save(run, 4, seed=1)
    assert client.app.state.explorer.follower.refresh("run") is None  # off: it never looks
    _assert_made_with(_translate(client), run / "step-00000002")
    assert _shown(client) == ("step-00000002", 2)


def test_a_heavy_job_uses_the_checkpoint_the_server_shows(tmp_path):
    """Attribution jobs run in worker processes, each started fresh (--worker-tasks 1), which preload the run's
    newest checkpoint: a job still carries the server's own, and the worker loads that one."""
    run = _run(tmp_path)
    client, clock = _served(run, workers=1)
    with client:  # the app's lifespan: its workers end with it
        job = {"method": "attention", "beam": 1}
        _assert_made_with(_translate(client, **job), run / "step-00000002")
        _save(run, 4, seed=1)
        answer = _translate(client, **job)  # not due yet: the server shows step 2, and so does the worker
        _assert_made_with(answer, run / "step-00000002")
        assert answer["attribution"]["method"] == "attention"
        clock.now += EVERY
        _assert_made_with(_translate(client, **job), run / "step-00000004")


def test_a_worker_keys_its_model_by_checkpoint_and_moves_on_when_one_is_removed(tmp_path, monkeypatch):
    """In-process: the worker's cache reloads when a job's checkpoint changes, and a job whose checkpoint the
    run's --keep-last removed meanwhile is made with the run's newest (and says so)."""
    run = _run(tmp_path)
    _save(run, 4, seed=1)
    spec = load_models([str(run)]).specs["run"]
    assert spec.checkpoint == str(run / "step-00000004")
    old = spec.__class__(**{**spec.__dict__, "checkpoint": str(run / "step-00000002")})
    monkeypatch.setattr(worker, "_MODELS", {})
    monkeypatch.setattr(worker, "_SPECS", {"run": spec})
    monkeypatch.setattr(worker, "_PROGRESS", [0.0])
    ask = TranslationRequest(TEXT, beam=1, heads=True)
    _assert_made_with(translation_reply(worker.run("run", 0, ask, old)), run / "step-00000002")
    _assert_made_with(translation_reply(worker.run("run", 0, ask, spec)), run / "step-00000004")
    assert worker._MODELS["run"][0] == spec and len(worker._MODELS) == 1  # one model per run, the newest asked
    shutil.rmtree(run / "step-00000002")
    _assert_made_with(translation_reply(worker.run("run", 0, ask, old)), run / "step-00000004")


def test_the_page_shows_the_step_beside_the_model_name_and_moves_on_with_the_run(tmp_path):
    """A real ``attnkit serve --model RUN_DIR`` in Debian's chromium: the answer's card says "step 2", and
    after the run writes step 4 the next answer's card says "step 4"."""
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    run = _run(tmp_path)
    args = ("--model", str(run), "--follow-every", "0.001", "--workers", "1")
    with served(*args, home=str(tmp_path / "home")) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=["--headless", "--no-sandbox"])
        page = browser.new_page()
        page.goto(url)
        page.fill("#text", TEXT)
        page.select_option("#beam", "1")
        shown = []
        for step in (2, 4):
            if step == 4:
                _save(run, 4, seed=1)
            page.click("#translate")
            page.wait_for_function(
                f"(document.querySelector(\".model-card[data-model='run'] h3 .step\") || {{}}).textContent "
                f"=== 'step {step} '",
                timeout=60_000,
            )
            badge = page.locator(".model-card[data-model='run'] h3 .step")
            shown.append((badge.inner_text().strip(), badge.get_attribute("title")))
        browser.close()
    assert shown == [("step 2", "checkpoint step-00000002"), ("step 4", "checkpoint step-00000004")]


def _saved_captioner(path, seed: int):
    """A tiny soft-attention captioner (16-pixel canvas, a 4 × 4 grid), seeded, saved with its vocabulary."""
    from attnkit.data.vocab import CaptionVocab
    from attnkit.models.captioner import CaptionerConfig, ShowAttendTell

    vocab = CaptionVocab({"a", "the", "seven", "three", "at", "top", "left"})
    torch.manual_seed(seed)
    cfg = CaptionerConfig(
        vocab_size=len(vocab), canvas=16, channels=[4], feature_dim=8, pos_dim=4, grid=4, emb_dim=8,
        hidden_dim=16, attn_dim=8, attention="soft", dropout=0.0, max_len=8,
    )  # fmt: skip
    m = ShowAttendTell(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)  # so that the two seeds' maps differ visibly
    vocab_file = json.dumps({"type": "CaptionVocab", "itos": vocab.itos}).encode()
    return save_checkpoint(path, model=m, config=m.to_config(), extra_files={"vocab.json": vocab_file})


def test_a_captioners_training_run_is_followed_too(tmp_path):
    from PIL import Image

    run = tmp_path / "caprun"
    run.mkdir()
    (run / "train_log.jsonl").write_text("")
    _saved_captioner(run / "step-00000003", seed=0)
    models = load_models([str(run)])
    app = create_app(models, verses=[], options=ServeOptions(follow_every=EVERY))
    clock = Clock()
    app.state.explorer.follower = Follower(models, EVERY, clock=clock)
    client = fastapi_testclient.TestClient(app, base_url="http://127.0.0.1")
    png = io.BytesIO()
    Image.fromarray((torch.arange(400).reshape(20, 20) % 251).numpy().astype("uint8"), "L").save(png, "PNG")
    body = {"image": base64.b64encode(png.getvalue()).decode(), "model": "caprun", "beam": 1}
    answers = []
    for step, seed in ((3, None), (9, 5)):
        if seed is not None:
            _saved_captioner(run / f"step-{step:08d}", seed=seed)
            clock.now += EVERY
        r = client.post("/api/caption", json=body)
        assert r.status_code == 200, r.text
        got = schema.Caption.model_validate(r.json()).model_dump()
        assert (got["checkpoint"], got["step"]) == (f"step-{step:08d}", step)
        cm = Captioner.load(run / got["checkpoint"])
        ref = caption_payload(cm, decode_image(png.getvalue(), cm.canvas, 10**6), model="caprun")
        assert got["caption"] == ref["caption"]
        assert torch.tensor(got["attention"]) == pytest.approx(torch.tensor(ref["attention"]), abs=1e-6)
        answers.append(got)
    assert answers[0]["attention"] != answers[1]["attention"]
