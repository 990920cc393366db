"""``attnkit.service.open_model``: the one place a model is opened, for every kind of model and every front end.

Each kind opens through it (a shipped translator, a captioner, a training run's newest checkpoint, tiny Hugging
Face models), the model name is resolved exactly once per open, the library's errors come through as they are,
and no other module of the package picks a loader by the model's task.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnkit.pretrained as pretrained
from attnkit.pretrained import PRETRAINED_DIR, UnknownModelError
from attnkit.service import Model, ModelKind, ModelSpec, model_folder, model_kind, newest_spec, open_model
from attnkit.training.checkpoint import CheckpointError
from tiny import saved_tiny_transformer

SRC = Path(__file__).resolve().parents[1] / "src" / "attnkit"


@pytest.fixture
def resolves(monkeypatch):
    """The calls of :func:`attnkit.pretrained.resolve_model` while the test runs (every caller imports it
    from the module when it runs, so the counter sees them all)."""
    calls = []
    real = pretrained.resolve_model

    def counted(name, **kw):
        calls.append(str(name))
        return real(name, **kw)

    monkeypatch.setattr(pretrained, "resolve_model", counted)
    return calls


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A training run's folder (a log, no config of its own): complete checkpoints at steps 2 and 4, and a
    step-9 folder still being written (no COMPLETE marker)."""
    run = tmp_path_factory.mktemp("runs") / "run"
    run.mkdir()
    (run / "train_log.jsonl").write_text("")
    saved_tiny_transformer(run / "step-00000002", seed=0)
    saved_tiny_transformer(run / "step-00000004", seed=1)
    (run / "step-00000009").mkdir()
    return run


def test_a_shipped_translator_opens_by_name_with_its_spelling_rule(resolves):
    from attnkit.tasks.translation import Translator

    model = open_model("rnnsearch-es-en")
    assert isinstance(model, Model) and isinstance(model.impl, Translator)
    assert (model.kind, model.label, model.path) == (
        ModelKind.TRANSLATOR,
        "rnnsearch-es-en",
        PRETRAINED_DIR / "rnnsearch-es-en",
    )
    assert model.spec == ModelSpec("rnnsearch-es-en") and model.impl.normalize_spelling
    assert resolves == ["rnnsearch-es-en"]  # once, though Translator.load and InferenceWrapper.load read it too
    kept = open_model(None, default="rnnsearch-es-en", keep_spelling=True, length_penalty=1.5)
    assert not kept.impl.normalize_spelling and kept.impl.length_penalty == 1.5
    assert kept.spec.keep_spelling and kept.spec.length_penalty == 1.5
    assert len(resolves) == 2


def test_a_captioner_opens_as_the_default(resolves):
    from attnkit.tasks.captioning import Captioner

    model = open_model(default="captioner-soft")
    assert model.kind is ModelKind.CAPTIONER and isinstance(model.impl, Captioner)
    assert model.label == "captioner-soft" and resolves == ["captioner-soft"]
    assert model_kind(model.path) is ModelKind.CAPTIONER


def test_a_training_run_opens_at_its_newest_complete_checkpoint(run, resolves, capsys):
    model = open_model(str(run))
    newest = run / "step-00000004"
    assert (model.label, model.path, model.kind) == ("run", newest, ModelKind.TRANSLATOR)
    assert model.spec.name == str(run) and model.spec.checkpoint == str(newest) and model.spec.label == "run"
    assert "is a training run: using its newest checkpoint, step-00000004" in capsys.readouterr().err
    assert resolves == [str(run)]
    # what a worker process passes: the spec opens the checkpoint it names, without looking the name up
    again = open_model(dataclass_replace(model.spec, checkpoint=str(run / "step-00000002")))
    assert again.path == run / "step-00000002" and again.label == "run" and len(resolves) == 1
    assert newest_spec(again.spec).checkpoint == str(newest)  # a worker's job moves on to the newest one
    assert newest_spec(ModelSpec("rnnsearch-es-en")) == ModelSpec("rnnsearch-es-en")
    assert model_folder(str(run)) == newest  # the folder alone, for `export`


def dataclass_replace(spec, **changes):
    import dataclasses

    return dataclasses.replace(spec, **changes)


def test_a_run_with_no_complete_checkpoint_yet_is_a_checkpoint_error(tmp_path):
    empty = tmp_path / "starting"
    empty.mkdir()
    (empty / "train_log.jsonl").write_text("")
    for opening in (open_model, model_folder):
        with pytest.raises(CheckpointError, match="a training run with no complete checkpoint yet"):
            opening(str(empty))


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(UnknownModelError, match=r"known: .*transformer-es-en.*captioner-soft"):
        open_model("no-such-model")
    with pytest.raises(UnknownModelError, match="does not exist"):
        open_model("no/such/folder", default="transformer-es-en")


def test_bad_arguments_name_themselves():
    from attnkit.deploy.manifest import DeployError

    with pytest.raises(ValueError, match="ref"):
        open_model()
    with pytest.raises(DeployError, match="--engine ctranslate2 needs --model FOLDER"):
        open_model(engine="ctranslate2")
    with pytest.raises(ValueError, match="engine"):
        open_model("rnnsearch-es-en", engine="onnx")
    with pytest.raises(TypeError, match="kind"):
        open_model("rnnsearch-es-en", kind="translation")


def test_a_command_that_needs_a_translator_gets_the_translator_loaders_error():
    """``kind``: the wrapper of that kind loads the folder, so a captioner given to ``translate`` is the
    translator's own error, as before the one loader."""
    with pytest.raises(CheckpointError, match=r"tokenizer\.model.*translation model"):
        open_model("captioner-soft", kind=ModelKind.TRANSLATOR)


def test_hugging_face_models_open_by_their_own_kind(resolves):
    pytest.importorskip("transformers")
    from hf_tiny import saved_tiny

    marian, bert = saved_tiny("marian"), saved_tiny("bert")
    resolves.clear()
    seq2seq = open_model(str(marian))
    assert seq2seq.kind is ModelKind.TRANSLATOR and seq2seq.path == marian and seq2seq.label == marian.name
    assert seq2seq.impl.normalize_spelling and resolves == [str(marian)]
    encoder = open_model(str(bert))
    assert encoder.kind is ModelKind.SELF_ATTENTION and not encoder.impl.can_generate
    assert len(resolves) == 2


# -- the one place: no other module picks a loader by the model's task ---------------------------------------

ALLOWED = {SRC / "service" / "open.py"}
TASK_NAMES = {"translation", "captioning", "self-attention", "language-model"}
MODEL_LOADERS = {"load_self_attention", "load_seq2seq", "load_model"}  # called as functions
WRAPPERS = {"Translator", "Captioner", "CT2Translator"}  # whose .load opens a model


def _loads_a_model(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id in MODEL_LOADERS
    if isinstance(f, ast.Attribute):
        if f.attr == "load" and isinstance(f.value, ast.Name):
            return f.value.id in WRAPPERS
        return f.attr in MODEL_LOADERS
    return False


def _compares_a_task_name(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    return any(isinstance(c, ast.Constant) and c.value in TASK_NAMES for c in (node.left, *node.comparators))


def _calls_model_task(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "model_task") or (
        isinstance(f, ast.Attribute) and f.attr == "model_task"
    )


def offenders(src: Path = SRC) -> list[str]:
    """``file:line: what`` for each call of ``model_task`` outside :mod:`attnkit.service.open` (and
    :mod:`attnkit.pretrained`, where it is defined), and each function that both compares a task name and
    loads a model (a switch on the task to pick a loader)."""
    found = []
    for path in sorted(src.rglob("*.py")):
        if path in ALLOWED or "pretrained" in path.relative_to(src).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(src.parent)
        found += [f"{where}:{n.lineno}: calls model_task" for n in ast.walk(tree) if _calls_model_task(n)]
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            nodes = list(ast.walk(fn))
            if any(_compares_a_task_name(n) for n in nodes) and any(
                isinstance(n, ast.Call) and _loads_a_model(n) for n in nodes
            ):
                found.append(f"{where}:{fn.lineno}: {fn.name} switches on a task name and loads a model")
    return found


def test_no_module_but_open_model_picks_a_loader_by_task():
    assert offenders() == []


def test_the_check_finds_a_switch_on_the_task(tmp_path):
    """The check above can fail: a module of the old kind (a switch on ``model_task``) is found."""
    pkg = tmp_path / "attnkit" / "explorer"
    pkg.mkdir(parents=True)
    (pkg / "old.py").write_text(
        "def load_one(path):\n"
        "    from ..pretrained import model_task\n"
        "    if model_task(path) == 'translation':\n"
        "        return Translator.load(path)\n"
        "    return Captioner.load(path)\n"
    )
    found = offenders(tmp_path / "attnkit")
    assert any("calls model_task" in f for f in found) and any("load_one switches" in f for f in found)
