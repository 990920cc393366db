"""Checkpoint folders: round trip, fp16, tied weights, atomicity, corruption, registry."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from attnkit.models.registry import build_model, register_model
from attnkit.training import checkpoint
from attnkit.training.checkpoint import (
    CheckpointError,
    average_checkpoints,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_into,
    load_model,
    save_checkpoint,
)


@register_model("tiny-lm-test")
class TinyLM(torch.nn.Module):
    """Embedding tied to the output projection, plus an int buffer."""

    def __init__(self, vocab=7, dim=4):
        super().__init__()
        self.vocab, self.dim = vocab, dim
        self.emb = torch.nn.Embedding(vocab, dim)
        self.hidden = torch.nn.Linear(dim, dim)
        self.out = torch.nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.emb.weight  # tied
        self.register_buffer("counter", torch.tensor([3], dtype=torch.long))

    @classmethod
    def from_config(cls, config):
        return cls(vocab=config["vocab"], dim=config["dim"])

    def to_config(self):
        return {"vocab": self.vocab, "dim": self.dim}


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    return TinyLM(**kw)


def test_round_trip_with_trainer_state_and_extra_files(tmp_path):
    m = _model()
    ts = {"step": 5, "rng": torch.get_rng_state(), "nested": {"a": [1, 2.5, "x"]}}
    path = save_checkpoint(
        tmp_path / "c", model=m, config=m.to_config(), trainer_state=ts, extra_files={"tokenizer.model": b"\x00spm"}
    )
    ck = load_checkpoint(path)
    assert ck.config["model_type"] == "tiny-lm-test" and ck.config["vocab"] == 7 and "attnkit_version" in ck.config
    assert ck.step == 5 and torch.equal(ck.trainer_state["rng"], ts["rng"])
    assert ck.trainer_state["nested"] == {"a": [1, 2.5, "x"]}
    assert ck.files["tokenizer.model"].read_bytes() == b"\x00spm"
    for k, v in m.state_dict().items():
        assert torch.equal(ck.state_dict[k], v)
    m2, cfg, _ = load_model(path)
    assert isinstance(m2, TinyLM) and not m2.training and cfg["dim"] == 4
    for k, v in m.state_dict().items():
        assert torch.equal(m2.state_dict()[k], v)


def test_dataclass_config(tmp_path):
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        vocab: int = 7
        dim: int = 4

    save_checkpoint(tmp_path / "c", model=_model(), config=Cfg())
    assert load_checkpoint(tmp_path / "c").config["dim"] == 4


def test_tied_weights_survive(tmp_path):
    m = _model()
    save_checkpoint(tmp_path / "c", model=m, config=m.to_config())
    m2, _, _ = load_model(tmp_path / "c")
    assert m2.out.weight is m2.emb.weight
    assert torch.equal(m2.out.weight, m.emb.weight)


def test_fp16_save(tmp_path):
    m = _model()
    save_checkpoint(tmp_path / "c", model=m, config=m.to_config(), dtype=torch.float16)
    raw = load_file(str(tmp_path / "c" / "model.safetensors"))
    assert raw["hidden.weight"].dtype == torch.float16 and raw["counter"].dtype == torch.long
    m2, _, _ = load_model(tmp_path / "c")
    assert m2.hidden.weight.dtype == torch.float32
    torch.testing.assert_close(m2.hidden.weight, m.hidden.weight, atol=2e-3, rtol=2e-3)


def test_crash_midway_never_looks_valid(tmp_path, monkeypatch):
    m = _model()
    save_checkpoint(tmp_path / "step-00000001", model=m, config=m.to_config(), trainer_state={"step": 1})
    real = os.replace
    calls = {"n": 0}

    def flaky(src, dst):
        calls["n"] += 1
        if calls["n"] == 2:  # config.json landed, model.safetensors did not
            raise OSError("simulated crash")
        return real(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", flaky)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path / "step-00000002", model=m, config=m.to_config(), trainer_state={"step": 2})
    monkeypatch.setattr(checkpoint.os, "replace", real)
    assert not (tmp_path / "step-00000002").exists()
    leftovers = [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert len(leftovers) == 1
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(leftovers[0])
    assert latest_checkpoint(tmp_path) == tmp_path / "step-00000001"
    # a folder with every file but no COMPLETE marker is refused too
    (tmp_path / "step-00000001" / "COMPLETE").unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(tmp_path / "step-00000001")
    assert list_checkpoints(tmp_path) == []


def test_crash_in_final_rename_keeps_old_checkpoint(tmp_path, monkeypatch):
    m = _model()
    save_checkpoint(tmp_path / "best", model=m, config=m.to_config())
    real = os.replace

    def flaky(src, dst):
        if (
            str(src).endswith(tuple("0123456789abcdef"))
            and ".tmp-" in os.path.basename(str(src))
            and os.path.isdir(src)
        ):
            raise OSError("simulated crash")
        return real(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", flaky)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "fresh", model=_model(1), config=m.to_config())
    monkeypatch.setattr(checkpoint.os, "replace", real)
    assert not (tmp_path / "fresh").exists()
    load_checkpoint(tmp_path / "best")


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "trainer_state.pt"])
def test_corrupt_file_names_the_file(tmp_path, name):
    m = _model()
    path = save_checkpoint(tmp_path / "c", model=m, config=m.to_config(), trainer_state={"step": 1})
    f = path / name
    data = bytearray(f.read_bytes())
    f.write_bytes(bytes(data[: len(data) // 2]))  # truncated
    with pytest.raises(CheckpointError, match=name):
        load_checkpoint(path)
    # same size but garbage: caught by the hash, or (verify=False) by the parser itself
    f.write_bytes(b"\xff" * len(data))
    with pytest.raises(CheckpointError, match=name):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match=name) as ei:
        load_checkpoint(path, verify=False)
    assert ei.value.__cause__ is not None


def test_missing_folder_and_file(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    m = _model()
    path = save_checkpoint(tmp_path / "c", model=m, config=m.to_config())
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"missing file .*model\.safetensors"):
        load_checkpoint(path)


def test_shape_mismatch_and_keys_reported(tmp_path):
    m = _model(dim=4)
    save_checkpoint(tmp_path / "c", model=m, config=m.to_config())
    ck = load_checkpoint(tmp_path / "c")
    other = TinyLM(dim=5)
    with pytest.raises(CheckpointError, match=r"hidden.weight: checkpoint \(4, 4\) vs model \(5, 5\)"):
        load_into(other, ck.state_dict)
    sd = dict(ck.state_dict)
    sd.pop("hidden.bias")
    sd["extra.w"] = torch.zeros(2)
    with pytest.raises(
        CheckpointError, match=r"1 missing key\(s\): hidden.bias \(4,\).*1 unexpected key\(s\): extra.w \(2,\)"
    ):
        load_into(_model(), sd)
    with pytest.raises(CheckpointError, match="expected 'other'"):
        load_model(tmp_path / "c", model_type="other")


def test_registry_errors(tmp_path):
    with pytest.raises(ValueError, match="not registered"):
        build_model({"model_type": "no-such-model"})
    with pytest.raises(TypeError, match="from_config"):
        register_model("bad")(type("Bad", (torch.nn.Module,), {}))
    m = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path / "c", model=m, config={})
    assert json.loads((tmp_path / "c" / "config.json").read_text())["model_type"] == "Linear"
    with pytest.raises(CheckpointError, match=r"config\.json"):
        load_model(tmp_path / "c")
    with pytest.raises(ValueError, match="extra_files"):
        save_checkpoint(tmp_path / "d", model=m, config={}, extra_files={"../x": b""})


def test_average_checkpoints(tmp_path):
    dirs = []
    for i in range(3):
        m = _model(seed=i)
        dirs.append(save_checkpoint(tmp_path / f"step-{i:08d}", model=m, config=m.to_config()))
    avg = average_checkpoints(dirs)
    sds = [load_checkpoint(d).state_dict for d in dirs]
    torch.testing.assert_close(avg["hidden.weight"], sum(s["hidden.weight"] for s in sds) / 3)
    assert avg["counter"].dtype == torch.long
    load_into(_model(), avg)
