"""Where a model runs and in what precision: ``--device`` and ``--precision``, one meaning everywhere.

- :func:`resolve_device`: ``"auto"`` picks CUDA, then Apple's MPS, then the CPU; ``"cpu"``,
  ``"cuda"``, ``"cuda:1"``, ``"mps"`` name one, and a device that is not there is an error that says so.
- :func:`resolve_precision`: ``"fp32"``, ``"bf16"``, ``"fp16"`` or ``"auto"``. Auto takes bf16 on a GPU
  that supports it (else fp16), and on a CPU bf16 **only where it is measured faster**: a short
  matmul probe, once per process (:func:`cpu_bf16_speedup`), since CPUs differ by a large factor
  either way (AVX512-BF16/AMX make it fast, others emulate it; benchmarks/RESULTS.md, section "Figures
  formerly in docstrings"). fp16 on a CPU is slow everywhere we
  measured, so auto never picks it there.
- Inference casts the weights to the precision (half the memory); training keeps fp32 master weights
  and runs forward and loss under :func:`autocast` (with a gradient scaler for fp16, in the trainer).
- ``"int8"`` (inference on the CPU only, :func:`quantize_int8`): dynamic quantization (PyTorch's
  ``quantize_dynamic``): the weights of the linear layers and the recurrent cells are stored as int8
  with one scale per output row, and each call quantizes its input on the fly
  (``y ≈ s_x s_w (x_q W_qᵀ) + b``), so no calibration data is needed.

We keep this to ~100 lines of our own rather than adopt Lightning Fabric or HF Accelerate: both would
bring their own checkpointing and launcher, while attnkit's atomic, manifest-checked checkpoints and
torchrun support stay; what is left for them to do is this module.
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings

import torch

from .errors import ConfigError

__all__ = [
    "PRECISIONS",
    "autocast",
    "cpu_bf16_speedup",
    "describe",
    "place",
    "quantize_int8",
    "resolve_device",
    "resolve_precision",
    "to_device",
]

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: Inference precisions that are not a dtype: ``place(model, "cpu", "int8")``.
INT8 = "int8"


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """The torch device ``spec`` names (``None`` or ``"auto"``: cuda, then mps, then cpu)."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    if spec is None or spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if not isinstance(spec, str):
        raise TypeError(f"device must be a string such as 'auto', 'cpu' or 'cuda:0', got {type(spec).__name__}")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise ConfigError(f"device {spec!r} is not a device name (use auto, cpu, cuda, cuda:N or mps)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {spec!r}: CUDA is not available on this machine (torch {torch.__version__}, "
                f"built {'with' if torch.version.cuda else 'without'} CUDA); use --device cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {spec!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type == "mps" and not _mps_available():
        raise ConfigError(f"device {spec!r}: Apple MPS is not available on this machine; use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device {spec!r}: attnkit runs on cpu, cuda or mps")
    return device


@functools.cache
def cpu_bf16_speedup(size: int = 256, seconds: float = 0.03) -> float:
    """How many times faster a bf16 matmul is than an fp32 one on this CPU (measured once per process)."""

    def rate(dtype):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        a @ b  # warm-up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ b
            n += 1
        return n / (time.perf_counter() - t0)

    return rate(torch.bfloat16) / rate(torch.float32)


def resolve_precision(spec: str | None, device: torch.device) -> torch.dtype:
    """The dtype ``spec`` names on ``device`` (see the module docstring for ``"auto"``)."""
    if spec is None or spec == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "cpu":
            return torch.bfloat16 if cpu_bf16_speedup() >= 1.2 else torch.float32
        return torch.float32
    if spec not in PRECISIONS:
        raise ConfigError(f"precision must be one of auto, {', '.join(PRECISIONS)}; got {spec!r}")
    return PRECISIONS[spec]


def autocast(device: torch.device, dtype: torch.dtype):
    """``torch.autocast`` for a lower precision, a no-op context for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (float32, CPU, eval) with its ``nn.Linear`` and recurrent layers (GRU, LSTM and their
    cells) dynamically quantized to int8 (see the module docstring), in place of the float ones.

    The attention layers' query/key/value projections, parameters rather than ``nn.Linear`` modules,
    are quantized the same way (:meth:`attnkit.attention.MultiHeadAttention.quantize_projections_int8`).
    A module the model reads by its ``.weight`` rather than calling it (a translator's untied
    ``out_proj``, which :meth:`output_layer` hands to the decoder) stays float here; the decoder
    quantizes the output layer itself (:class:`attnkit.decoding.OutputLayerDecoder`). The model is
    marked ``model.precision = "int8"`` so that the decoder knows."""
    with warnings.catch_warnings():  # importing it warns that it is deprecated
        warnings.simplefilter("ignore")
        from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    kinds = (torch.nn.Linear, torch.nn.GRU, torch.nn.GRUCell, torch.nn.LSTM, torch.nn.LSTMCell)
    spec = {}
    for name, module in model.named_modules():
        empty = isinstance(module, torch.nn.Linear) and module.in_features == 0  # an attention without heads
        if isinstance(module, kinds) and name != "out_proj" and not empty:
            spec[name] = per_channel_dynamic_qconfig if isinstance(module, torch.nn.Linear) else default_dynamic_qconfig
    with warnings.catch_warnings():  # torch.ao.quantization warns that torchao succeeds it
        warnings.simplefilter("ignore")
        model = quantize_dynamic(model.float().cpu().eval(), spec, dtype=torch.qint8)
    from .attention import MultiHeadAttention  # its packed q/k/v projections are parameters, not nn.Linear

    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.quantize_projections_int8()
    model.precision = INT8
    return model


def place(
    model: torch.nn.Module, device: str | torch.device | None = "cpu", dtype: str | torch.dtype | None = None
) -> torch.nn.Module:
    """Put an inference model on ``device`` with weights in ``dtype`` (a torch dtype, ``"fp32"``,
    ``"bf16"``, ``"fp16"``, ``"auto"``, or ``"int8"`` on the CPU; ``None`` = float32), in eval mode."""
    if dtype == INT8:
        dev = torch.device("cpu") if device in (None, "auto") else resolve_device(device)
        if dev.type != "cpu":
            raise ConfigError(f"precision int8 runs on the CPU (dynamic quantization has CPU kernels only), not {dev}")
        return quantize_int8(model)
    dev = resolve_device(device)
    if dtype is None or isinstance(dtype, torch.dtype):
        dt = dtype or torch.float32
    else:
        dt = resolve_precision(dtype, dev)
    if dt not in PRECISIONS.values():
        raise ConfigError(f"dtype must be float32, bfloat16 or float16, got {dt}")
    return model.to(device=dev, dtype=dt).eval()


def to_device(obj, device: torch.device):
    """``obj`` with every tensor (in dicts, lists, tuples) on ``device``; the same object when nothing moves."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device == device else obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def describe() -> str:
    """One line for ``attnkit --version``: torch, and the device ``auto`` picks."""
    dev = resolve_device("auto")
    name = (
        torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else torch.backends.cpu.get_cpu_capability()
        if dev.type == "cpu"
        else dev.type
    )
    return f"torch {torch.__version__}, device auto = {dev} ({name})"
