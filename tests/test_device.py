"""--device and --precision: resolution, autocast training (bf16, fp16 with a scaler) on the CPU,
checkpoints that move between precisions, and the CUDA paths (run only where CUDA is)."""

import pytest
import torch

from attnkit import device as devices
from attnkit.cli import main as cli_main
from attnkit.errors import ConfigError
from attnkit.models.seq2seq import RNNSearch, Seq2SeqConfig
from attnkit.training import ListBatches, RunConfig, Trainer, load_checkpoint
from attnkit.training.losses import label_smoothed_nll

torch.set_num_threads(1)


def cuda(test):
    """A test for a CUDA device: marked ``cuda`` and skipped, with the reason, where there is none."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)")
    return pytest.mark.cuda(skip(test))


V = 40


def test_resolve_device_and_its_errors():
    auto = devices.resolve_device("auto")
    assert auto.type == ("cuda" if torch.cuda.is_available() else "mps" if devices._mps_available() else "cpu")
    assert devices.resolve_device("cpu") == torch.device("cpu") and devices.resolve_device(None) == auto
    with pytest.raises(ConfigError, match="not a device name"):
        devices.resolve_device("gpu0")
    with pytest.raises(ConfigError, match="attnkit runs on cpu, cuda or mps"):
        devices.resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available on this machine"):
            devices.resolve_device("cuda:0")


def test_resolve_precision_auto_follows_the_measured_speed(monkeypatch):
    cpu = torch.device("cpu")
    assert [devices.resolve_precision(p, cpu) for p in ("fp32", "bf16", "fp16")] == [
        torch.float32,
        torch.bfloat16,
        torch.float16,
    ]
    monkeypatch.setattr(devices, "cpu_bf16_speedup", lambda: 0.02)  # an emulating CPU: 50x slower
    assert devices.resolve_precision("auto", cpu) == torch.float32
    monkeypatch.setattr(devices, "cpu_bf16_speedup", lambda: 2.4)  # AVX512-BF16: faster
    assert devices.resolve_precision("auto", cpu) == torch.bfloat16
    with pytest.raises(ConfigError, match="precision must be one of"):
        devices.resolve_precision("int8", cpu)


def _batches(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src = torch.randint(3, V, (4, 7), generator=g)
        tgt = torch.randint(3, V, (4, 6), generator=g)
        out.append(
            {"src": src, "src_lengths": torch.tensor([7, 6, 5, 7]), "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
        )
    return out


class _Recorder:
    """A loss that records the dtype the model's logits were computed in."""

    def __init__(self):
        self.dtypes = []

    def __call__(self, model, batch):
        logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
        self.dtypes.append(logits.dtype)
        loss, n = label_smoothed_nll(logits, batch["tgt_out"], 0, 0.0)
        return loss, n, {}


def _run(out_dir, max_steps: int, device: str, precision: str = "fp32") -> RunConfig:
    """A quiet run of at most ``max_steps`` steps, a checkpoint every 2."""
    return RunConfig(
        out_dir=str(out_dir), save_every_steps=2, epochs=10, max_steps=max_steps, seed=0, log_every=1, progress=False,
        device=device, precision=precision,
    )  # fmt: skip


def _train(tmp_path, precision, steps, *, resume=False, name=None, seed=0):
    torch.manual_seed(seed)
    model = RNNSearch(Seq2SeqConfig(vocab_size=V, emb_dim=16, hidden_dim=16, attn_dim=16, dropout=0.0))
    rec = _Recorder()
    tr = Trainer(
        model,
        torch.optim.Adam(model.parameters(), 1e-2),
        _run(tmp_path / (name or precision), steps, "cpu", precision),
        loss_fn=rec,
        train_batches=ListBatches(_batches()),
    )
    summary = tr.fit(resume=resume)
    return model, rec, summary


def test_bf16_autocast_trains_on_cpu_with_fp32_master_weights(tmp_path):
    m32, rec32, _ = _train(tmp_path, "fp32", 6)
    m16, rec16, s = _train(tmp_path, "bf16", 6)
    assert set(rec32.dtypes) == {torch.float32} and set(rec16.dtypes) == {torch.bfloat16}  # autocast really ran
    assert all(p.dtype == torch.float32 for p in m16.parameters())  # the master copy stays fp32
    assert s["steps"] == 6
    # the same training in bf16 lands near the fp32 one, not on it
    diffs = [float((a - b).detach().abs().max()) for a, b in zip(m32.parameters(), m16.parameters())]
    assert 0 < max(diffs) < 0.1
    ck = load_checkpoint(tmp_path / "bf16" / "step-00000006")
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in ck.state_dict.values())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_validation_runs_in_the_training_precision(tmp_path, precision):
    """valid_fn runs under the autocast the steps run under (none for fp32), in eval mode, without grad."""
    seen = []

    def valid_fn(model):
        logits, _ = model(*(_batches(1)[0][k] for k in ("src", "src_lengths", "tgt_in")))
        seen.append((logits.dtype, model.training, torch.is_grad_enabled()))
        return {"valid_loss": 1.0}

    torch.manual_seed(0)
    model = RNNSearch(Seq2SeqConfig(vocab_size=V, emb_dim=16, hidden_dim=16, attn_dim=16, dropout=0.0))
    tr = Trainer(
        model,
        torch.optim.Adam(model.parameters(), 1e-2),
        _run(tmp_path, 4, "cpu", precision),
        loss_fn=_Recorder(),
        train_batches=ListBatches(_batches(2)),
        valid_fn=valid_fn,
        metric_for_best="valid_loss",
        greater_is_better=False,
    )
    tr.fit()
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    assert seen and all(s == (want, False, False) for s in seen)


def test_fp16_uses_a_gradient_scaler_that_is_saved_and_restored(tmp_path):
    _, rec, _ = _train(tmp_path, "fp16", 4, name="a")
    assert set(rec.dtypes) == {torch.float16}
    ts = load_checkpoint(tmp_path / "a" / "step-00000004").trainer_state
    assert ts["scaler"] is not None and ts["scaler"]["scale"] > 0
    _train(tmp_path, "fp16", 2, name="b")
    resumed, _, s = _train(tmp_path, "fp16", 4, name="b", resume=True)
    straight, _, _ = _train(tmp_path, "fp16", 4, name="c")
    assert s["resumed_from"].endswith("step-00000002")
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)  # resume is exact under fp16 too


def test_a_bf16_run_resumes_in_fp32_and_its_checkpoint_serves_both_precisions(tmp_path):
    _train(tmp_path, "bf16", 2, name="mixed")
    _, rec, s = _train(tmp_path, "fp32", 4, name="mixed", resume=True)  # precision is not part of a checkpoint
    assert s["steps"] == 4 and set(rec.dtypes) == {torch.float32}
    ck = load_checkpoint(tmp_path / "mixed" / "step-00000004")
    b = _batches()[0]
    outs = {}
    for dt in (torch.float32, torch.bfloat16):
        model = RNNSearch(Seq2SeqConfig(vocab_size=V, emb_dim=16, hidden_dim=16, attn_dim=16, dropout=0.0))
        model.load_state_dict(ck.state_dict)
        devices.place(model, "cpu", dt)
        assert next(model.parameters()).dtype == dt
        with torch.no_grad():
            outs[dt] = model(b["src"], b["src_lengths"], b["tgt_in"])[0].float().log_softmax(-1)
    torch.testing.assert_close(outs[torch.bfloat16], outs[torch.float32], rtol=0, atol=0.15)  # bf16: ~3 digits


def test_cli_device_errors_are_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli_main(["translate", "--device", "cuda", "Hola."]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUDA is not available" in err
    assert cli_main(["caption", "--device", "mps", "x.png"]) == 2


@cuda
def test_cuda_translate_matches_cpu():
    from attnkit.tasks.translation import Translator

    text = ["Y dijo Dios: Sea la luz: y fué la luz."]
    on_gpu = Translator.load("rnnsearch-es-en", device="cuda").translate(text, beam_size=5)
    on_cpu = Translator.load("rnnsearch-es-en", device="cpu").translate(text, beam_size=5)
    assert on_gpu[0]["tokens"] == on_cpu[0]["tokens"]


@cuda
def test_cuda_training_resumes_on_cpu(tmp_path):
    torch.manual_seed(0)
    model = RNNSearch(Seq2SeqConfig(vocab_size=V, emb_dim=16, hidden_dim=16, attn_dim=16, dropout=0.0))
    tr = Trainer(
        model,
        torch.optim.Adam(model.parameters(), 1e-2),
        _run(tmp_path / "run", 2, "cuda", "bf16"),
        loss_fn=_Recorder(),
        train_batches=ListBatches(_batches()),
    )
    tr.fit()
    model2 = RNNSearch(Seq2SeqConfig(vocab_size=V, emb_dim=16, hidden_dim=16, attn_dim=16, dropout=0.0))
    tr2 = Trainer(
        model2,
        torch.optim.Adam(model2.parameters(), 1e-2),
        _run(tmp_path / "run", 4, "cpu"),
        loss_fn=_Recorder(),
        train_batches=ListBatches(_batches()),
    )
    s = tr2.fit(resume=True)
    assert s["steps"] == 4 and next(model2.parameters()).device.type == "cpu"


@cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_half_attention_never_builds_cudnn_plans(dtype):
    """A new shape at every call (as translation batches and decoding steps have) must not reach cuDNN's
    attention, which builds a plan per shape; the result still matches float64 math."""
    from torch.profiler import ProfilerActivity, profile

    from attnkit import attend

    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for n in (17, 23, 31):
            q, k, v = (torch.randn(4, 4, n, 64, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
            out = attend(q, k, v, score="scaled_dot", need_weights=False).context
            out.sum().backward()
            ref = torch.softmax(q.double() @ k.double().transpose(-1, -2) / 8.0, -1) @ v.double()
            torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
    assert not [e.key for e in prof.key_averages() if "cudnn_attention" in e.key]


@cuda
@pytest.mark.parametrize("method", ["input_x_gradient", "integrated_gradients", "alti_plus"])
def test_cuda_explanations_match_cpu(method):
    """The shared-forward gradient engine (vmap over the backward) and a decomposition method on a GPU give
    the CPU's attributions for the same forced translation."""
    from attnkit.attribution import explain
    from attnkit.tasks.translation import Translator

    text, target = "Y dijo Dios: Sea la luz: y fué la luz.", "And God said, Let there be light: and there was light."
    steps = {"steps": 8} if method == "integrated_gradients" else {}
    on_gpu = explain(Translator.load("transformer-es-en", device="cuda"), text, target=target, method=method, **steps)
    on_cpu = explain(Translator.load("transformer-es-en", device="cpu"), text, target=target, method=method, **steps)
    assert (on_gpu.source, on_gpu.target) == (on_cpu.source, on_cpu.target)
    torch.testing.assert_close(on_gpu.scores.cpu(), on_cpu.scores, atol=1e-4, rtol=1e-3)
    if on_cpu.raw is not None:
        torch.testing.assert_close(on_gpu.raw.cpu(), on_cpu.raw, atol=1e-4, rtol=1e-3)
