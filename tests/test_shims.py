"""The shims over other libraries' internals: ``attnkit.hf.transformers_internals``,
``attnkit.explorer.pebble_internals`` and ``attnkit.explorer.uvicorn_internals``.

Against the installed (pinned) versions each accessor works; an installed version outside a shim's range
gives its one-line message (a warning for transformers and pebble, an error for uvicorn), also at import; a
missing internal gives a clear error naming it; and the private names appear in no other module.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from pathlib import Path

import pytest
import torch

from attnkit import version
from attnkit.errors import AttnkitError
from attnkit.explorer import pebble_internals, uvicorn_internals
from attnkit.hf import transformers_internals as ti
from attnkit.tasks.translation import sacrebleu_internals

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnkit"

#: Each shim, and the private names of its library that only it may name.
PRIVATE = {
    "hf/transformers_internals.py": [
        r"\._global_mapping\b",
        r"\b_attn_implementation\b",
        r"\bis_updated\b",
        r"\breorder_cache\b",
        r"\bself_attention_cache\b",
        r"\bcross_attention_cache\b",
        r"\bAttentionInterface\b",
    ],
    "explorer/pebble_internals.py": [r"\b_pool_manager\b", r"\bworker_manager\b"],
    "explorer/uvicorn_internals.py": [r"\bh11_impl\b", r"\bconn\.their_state\b"],
    "tasks/translation/sacrebleu_internals.py": [r"\b_extract_corpus_statistics\b", r"\b_compute_score_from_stats\b"],
}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        name, sep, pinned = line.partition("==")
        if sep:
            pins[name.strip().lower()] = pinned.strip()
    return pins


# -- the private names live in their shim only -------------------------------------------------------------


def test_private_names_appear_only_in_their_shim():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text(encoding="utf-8")
        for shim, patterns in PRIVATE.items():
            if rel == shim:
                continue
            for pattern in patterns:
                for m in re.finditer(pattern, text):
                    found.append(f"src/attnkit/{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)} (-> {shim})")
    assert not found, "another library's internals named outside its shim:\n" + "\n".join(found)


def test_each_shim_names_what_it_guards():
    """The patterns above are not stale: each still occurs in its own shim."""
    for shim, patterns in PRIVATE.items():
        text = (PACKAGE / shim).read_text(encoding="utf-8")
        assert all(re.search(p, text) for p in patterns), shim


# -- versions ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shim", "dist"),
    [
        (ti, "transformers"),
        (pebble_internals, "pebble"),
        (uvicorn_internals, "uvicorn"),
        (sacrebleu_internals, "sacrebleu"),
    ],
)
def test_the_pinned_versions_are_inside_the_supported_ranges(shim, dist):
    pinned = _pins()[dist]
    assert version.outside_range(dist, pinned, *shim.SUPPORTED) is None, (dist, pinned, shim.SUPPORTED)


def test_release_and_range():
    assert version.release("5.23.0") == (5, 23, 0)
    assert version.release("6.0.0rc1") == (6, 0, 0)
    assert version.release("0.54.0.dev3") == (0, 54, 0)
    assert version.outside_range("x", "5.10.1", "5.9", "6") is None  # 5.10 is above 5.9
    assert version.outside_range("x", None, "5.0", "6") is None  # not installed: nothing to say
    assert version.outside_range("x", "6.0.0rc1", "5.0", "6") == (
        "x 6.0.0rc1 is outside the range attnkit's use of its internals was written for (>=5.0,<6)"
    )
    assert version.outside_range("x", "4.57.1", "5.0", "6") is not None


def test_inside_the_range_nothing_is_said():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ti.check_version() is None
        assert pebble_internals.check_version() is None
        assert uvicorn_internals.check_version() is None


def _reimport(module, monkeypatch, fake: str):
    """Import ``module`` again with the installed version read as ``fake``; then as it really is."""
    monkeypatch.setattr(version, "installed_version", lambda dist: fake)
    try:
        importlib.reload(module)
    finally:
        monkeypatch.undo()
        importlib.reload(module)


def test_an_out_of_range_transformers_warns_at_import(monkeypatch):
    with pytest.warns(UserWarning, match=r"^transformers 4\.57\.1 is outside .*\(>=5\.0,<6\); attnkit's Hugging Face"):
        _reimport(ti, monkeypatch, "4.57.1")


def test_an_out_of_range_pebble_warns_at_import(monkeypatch):
    with pytest.warns(UserWarning, match=r"^pebble 6\.0\.0 is outside .*\(>=5\.1,<6\); the server's worker count"):
        _reimport(pebble_internals, monkeypatch, "6.0.0")


def test_an_out_of_range_uvicorn_is_refused_at_import(monkeypatch):
    # a reload makes the error class anew: caught by its base, checked by name
    with pytest.raises(AttnkitError, match=r"^uvicorn 1\.0\.0 is outside .*\(>=0\.29,<1\)") as refused:
        _reimport(uvicorn_internals, monkeypatch, "1.0.0")
    assert type(refused.value).__name__ == "UvicornInternalsError"
    assert uvicorn_internals.check_version() is None  # imported again as it is


# -- pebble ------------------------------------------------------------------------------------------------


def test_worker_pids_of_a_tiny_pool():
    from pebble import ProcessPool

    pool = ProcessPool(max_workers=1)
    try:
        pid = pool.schedule(os.getpid).result(timeout=60)
        assert pebble_internals.worker_pids(pool) == [pid]
    finally:
        pool.stop()
        pool.join(timeout=10)


def test_a_missing_pebble_internal_is_named():
    with pytest.raises(pebble_internals.PebbleInternalsError, match=r"pebble \S+ has no ProcessPool\._pool_manager"):
        pebble_internals.worker_pids(object())


def test_jobs_reads_worker_pids_through_the_shim(monkeypatch):
    from attnkit.explorer import jobs

    monkeypatch.setattr(jobs, "worker_pids", lambda pool: [4242])
    queue = jobs.JobQueue.__new__(jobs.JobQueue)
    queue._pool = object()
    assert queue.worker_pids() == [4242]
    queue._pool = None
    assert queue.worker_pids() == []


# -- uvicorn -----------------------------------------------------------------------------------------------


def test_uvicorn_accessors():
    import asyncio

    import h11

    cls = uvicorn_internals.h11_protocol()
    assert issubclass(cls, asyncio.Protocol) and cls.__name__ == "H11Protocol"

    class Fake:
        cycle = None
        conn = h11.Connection(h11.SERVER)

    assert uvicorn_internals.request_cycle(Fake()) is None
    assert uvicorn_internals.their_state(Fake()) is h11.IDLE


def test_a_missing_uvicorn_internal_is_named(monkeypatch):
    with pytest.raises(uvicorn_internals.UvicornInternalsError, match=r"uvicorn \S+ has no H11Protocol\.cycle"):
        uvicorn_internals.request_cycle(object())
    with pytest.raises(uvicorn_internals.UvicornInternalsError, match=r"has no H11Protocol\.conn"):
        uvicorn_internals.their_state(object())
    from uvicorn.protocols.http import h11_impl

    monkeypatch.delattr(h11_impl.H11Protocol, "handle_events")
    with pytest.raises(uvicorn_internals.UvicornInternalsError, match=r"has no H11Protocol\.handle_events"):
        uvicorn_internals.h11_protocol()


# -- transformers ------------------------------------------------------------------------------------------


def test_attention_registry_and_implementation():
    pytest.importorskip("transformers")
    from attnkit.hf.capture import capture_attention
    from hf_tiny import build_tiny, eager_copy

    model, _ = build_tiny("bert")
    assert ti.attention_implementation(model) == "sdpa"
    assert ti.attention_implementation(eager_copy("bert")[0]) == "eager"
    assert ti.attention_implementation(torch.nn.Linear(2, 2)) == "eager"  # not a transformers model
    assert callable(ti.attention_function("sdpa"))
    assert ti.attention_function("no-such-attention") is None
    with capture_attention(model, lambda site, w: None):
        pass
    assert getattr(ti.attention_function("sdpa"), "_attnkit_capture", False)  # capture wrapped it


def test_register_attention_function(monkeypatch):
    pytest.importorskip("transformers")
    from transformers.modeling_utils import AttentionInterface

    monkeypatch.setitem(AttentionInterface._global_mapping, "attnkit-test", None)  # removed again afterwards

    def attention(*args, **kwargs):
        return None

    ti.register_attention_function("attnkit-test", attention)
    assert ti.attention_function("attnkit-test") is attention


def _decoded_cache():
    """A tiny Marian's EncoderDecoderCache after two decoding steps, for two rows."""
    from attnkit.hf.seq2seq import HFSeq2Seq
    from hf_tiny import build_tiny

    model, tok = build_tiny("marian")
    adapter = HFSeq2Seq(model, tok)
    state = adapter.start(torch.tensor([[7, 8, 9], [10, 11, 12]]), torch.tensor([3, 3]))
    _, state, _ = adapter.step_features(torch.tensor([adapter.config.bos_id] * 2), state)
    _, state, _ = adapter.step_features(torch.tensor([20, 21]), state)  # the rows' inputs differ from here
    return state.cache


def test_fork_encoder_decoder_cache():
    pytest.importorskip("transformers")
    cache = _decoded_cache()
    before_self = cache.self_attention_cache.layers[0].keys.clone()  # (2, H, T, D)
    before_cross = cache.cross_attention_cache.layers[0].keys.clone()  # (2, H, S', D)
    assert not torch.equal(before_self[0], before_self[1]) and not torch.equal(before_cross[0], before_cross[1])
    index = torch.tensor([1, 0])
    fork = ti.fork_encoder_decoder_cache(cache, index)
    assert torch.equal(fork.self_attention_cache.layers[0].keys, before_self[index])
    assert torch.equal(fork.cross_attention_cache.layers[0].keys, before_cross[index])
    assert torch.equal(cache.self_attention_cache.layers[0].keys, before_self)  # the old cache as it was
    assert fork.is_updated == cache.is_updated and fork.is_updated is not cache.is_updated
    beams_only = ti.fork_encoder_decoder_cache(cache, index, cross=False)
    assert torch.equal(beams_only.cross_attention_cache.layers[0].keys, before_cross)


def test_a_missing_transformers_internal_is_named(monkeypatch):
    pytest.importorskip("transformers")
    from transformers.modeling_utils import AttentionInterface

    cache = _decoded_cache()
    del cache.is_updated
    with pytest.raises(
        ti.TransformersInternalsError, match=r"^transformers \S+ has no EncoderDecoderCache\.is_updated"
    ):
        ti.fork_encoder_decoder_cache(cache)
    monkeypatch.setattr(AttentionInterface, "_global_mapping", None)
    with pytest.raises(ti.TransformersInternalsError, match=r"has no AttentionInterface\._global_mapping"):
        ti.attention_function("sdpa")

    class Config:  # a transformers config without the attribute
        __module__ = "transformers.configuration_fake"

    class Model:
        config = Config()

    with pytest.raises(ti.TransformersInternalsError, match=r"has no Config\._attn_implementation"):
        ti.attention_implementation(Model())
