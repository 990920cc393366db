"""The context-mixing decompositions (attention-norm, value zeroing, ALTI+) and rollout on Hugging Face
encoder-decoders: a tiny post-norm Marian and a tiny pre-norm M2M100, in float64, each checked against a
reference that reads the HF model itself (its eager attention weights, its value projections and layer
outputs through forward hooks, its layers rerun with a value vector zeroed), never attnkit's trace; T5
refused in one line; the methods reached through the CLI, the Python API and the explorer."""

from __future__ import annotations

import functools
import json
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attribution import UnknownMethodError, explain, forced_translation, methods_for
from attnkit.attribution.decomposition import alti_contributions
from attnkit.attribution.trace import trace_model
from attnkit.cli import main
from attnkit.hf.loading import HFModelError
from attnkit.tasks.translation.inference import Translator
from hf_tiny import saved_tiny, transformers

SOURCE = "En el principio creó Dios los cielos y la tierra."
TARGET = "In the beginning God created the heaven."
FAMILIES = ("marian", "m2m_100")  # post-norm, pre-norm
DECOMPOSITIONS = ("attention_norm", "value_zeroing", "alti_plus")
TOL = 1e-9  # float64 reference vs float64 trace


@functools.cache
def _translator(family: str) -> Translator:
    tr = Translator.load(saved_tiny(family))
    tr.model.double()
    return tr


@functools.cache
def _eager(family: str):
    """The same saved model in eager attention (it returns its weights), float64: the reference."""
    return transformers.AutoModelForSeq2SeqLM.from_pretrained(saved_tiny(family), attn_implementation="eager").double()


@functools.cache
def _pair(family: str):
    return forced_translation(_translator(family), SOURCE, TARGET)


def _ids(family: str):
    """The model's full input ids (special tokens included) and where the text's pieces sit."""
    ad, pair = _translator(family).model, _pair(family)
    src = [*ad.src_prefix, *pair.src.tolist(), *ad.src_suffix]
    tok = transformers.AutoTokenizer.from_pretrained(saved_tiny(family))
    assert src == tok(SOURCE)["input_ids"]  # the adapter adds what the model's own tokenizer adds
    dec = [*ad.decoder_prefix, *pair.tgt_in[1:].tolist()]
    off = len(ad.src_prefix)
    return (
        torch.tensor([src]),
        torch.tensor([dec]),
        slice(len(ad.decoder_prefix) - 1, None),
        slice(off, off + len(pair.src)),
    )


def _record(family: str, zero: tuple[str, int] | None = None) -> dict:
    """Run the eager float64 HF model once, keeping through forward hooks every attention module's query
    input, output and weights, every value projection's output, every LayerNorm's output and every layer's
    input and output; ``zero = (value projection's name, j)`` zeroes value vector j of that projection."""
    model = _eager(family)
    src, dec, _, _ = _ids(family)
    rec, hooks = {}, []
    for name, mod in model.named_modules():
        short = name.split("model.", 1)[-1]
        if name.endswith("v_proj"):

            def v_hook(m, a, out, short=short):
                if zero is not None and zero[0] == short:
                    out = out.clone()
                    out[0, zero[1]] = 0.0
                rec[short] = out[0]
                return out

            hooks.append(mod.register_forward_hook(v_hook))
        elif type(mod).__name__.endswith("Attention"):

            def a_hook(m, args, kwargs, out, short=short):
                rec[short] = {"in": (args[0] if args else kwargs["hidden_states"])[0], "out": out[0][0], "w": out[1][0]}

            hooks.append(mod.register_forward_hook(a_hook, with_kwargs=True))
        elif isinstance(mod, nn.LayerNorm):
            hooks.append(mod.register_forward_hook(lambda m, a, out, short=short: rec.__setitem__(short, out[0])))
        elif re.fullmatch(r"(encoder|decoder)\.layers\.\d+", short):

            def l_hook(m, args, kwargs, out, short=short):
                x = args[0] if args else kwargs["hidden_states"]
                rec[short] = {"in": x[0], "out": (out[0] if isinstance(out, tuple) else out)[0]}

            hooks.append(mod.register_forward_hook(l_hook, with_kwargs=True))
    try:
        with torch.no_grad():
            rec["memory"] = model.get_encoder()(input_ids=src).last_hidden_state[0]
            model(input_ids=src, decoder_input_ids=dec)
    finally:
        for h in hooks:
            h.remove()
    return rec


def _ref_terms(family: str, rec: dict, attn: str) -> torch.Tensor:
    """``(Nq, Nk, D)``: T_ij = Σ_h α^h_ij (v_j^h W_O^hᵀ), head by head, from the eager weights and the
    hooked value vectors."""
    module = _eager(family).get_submodule("model." + attn)
    w, v, wo = rec[attn]["w"], rec[attn + ".v_proj"], module.out_proj.weight  # (H, Nq, Nk), (Nk, D), (D, D)
    dh = v.shape[1] // w.shape[0]
    terms = torch.zeros(w.shape[1], w.shape[2], wo.shape[0], dtype=torch.float64)
    for h in range(w.shape[0]):
        f = v[:, h * dh : (h + 1) * dh] @ wo[:, h * dh : (h + 1) * dh].T  # (Nk, D): f^h(u_j)
        terms += w[h][:, :, None] * f[None]
    return terms


def _blocks(family: str, rec: dict):
    """``[(kind, attention module name, residual (Nq, D), post-norm LayerNorm name or None)]`` in model
    order, the residuals read from the hooked layers (post-norm: the norm's output before the block)."""
    post = family in ("marian", "bart")
    n_enc = sum(1 for k in rec if re.fullmatch(r"encoder\.layers\.\d+", k))
    n_dec = sum(1 for k in rec if re.fullmatch(r"decoder\.layers\.\d+", k))
    out = []
    for i in range(n_enc):
        p = f"encoder.layers.{i}"
        out.append(("enc", p + ".self_attn", rec[p]["in"], p + ".self_attn_layer_norm" if post else None))
    for i in range(n_dec):
        p = f"decoder.layers.{i}"
        x = rec[p]["in"]
        out.append(("self", p + ".self_attn", x, p + ".self_attn_layer_norm" if post else None))
        cross_res = rec[p + ".self_attn_layer_norm"] if post else x + rec[p + ".self_attn"]["out"]
        out.append(("cross", p + ".encoder_attn", cross_res, p + ".encoder_attn_layer_norm" if post else None))
    return out


def _norm_rows(x: torch.Tensor) -> torch.Tensor:
    return x / x.sum(-1, keepdim=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_terms_add_up_to_the_models_own_outputs(family):
    """Every traced block's per-key terms equal the eager model's head-by-head terms, and they, plus the
    output bias, the residual and (post-norm) the LayerNorm, give the sub-layer's real output (the record's
    ``mid``; its ``out`` is the layer's); each traced
    decoder layer's output is the HF layer's output."""
    ad, pair = _translator(family).model, _pair(family)
    trace, rows, cols = trace_model(ad, pair.src, pair.tgt_in)
    rec = _record(family)
    traced = list(trace.encoder) + [b for lt in trace.decoder for b in (lt.self_block, lt.cross_block)]
    for blk, (_, attn, residual, norm) in zip(traced, _blocks(family, rec), strict=True):
        terms = blk.terms()
        assert torch.allclose(terms, _ref_terms(family, rec, attn), atol=TOL), attn
        assert torch.allclose(terms.sum(1) + blk.out_bias, rec[attn]["out"], atol=TOL), attn
        real = rec[norm] if norm else residual + rec[attn]["out"]
        assert torch.allclose(blk.residual, residual, atol=TOL) and torch.allclose(blk.mid, real, atol=TOL), attn
    for i, lt in enumerate(trace.decoder):
        assert torch.allclose(lt.out, rec[f"decoder.layers.{i}"]["out"], atol=TOL)
    assert torch.allclose(trace.memory, rec["memory"], atol=TOL)
    assert (rows.start, cols.stop - cols.start) == (len(ad.decoder_prefix) - 1, len(pair.src))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer", [1, None])
def test_attention_norm_is_the_norm_of_the_models_terms(family, layer):
    rec = _record(family)
    _, _, rows, cols = _ids(family)
    li = 1 if layer is None else layer - 1
    ref = _ref_terms(family, rec, f"decoder.layers.{li}.encoder_attn").norm(dim=-1)[rows, cols]
    att = explain(_translator(family), SOURCE, target=TARGET, method="attention_norm", layer=layer)
    assert att.scores.shape == ref.shape and torch.allclose(att.scores.double(), _norm_rows(ref), atol=1e-6)


def _ref_contributions(family: str, rec: dict, attn: str, residual, norm, *, residual_column: bool):
    """ALTI's contributions of one block, position by position: each input's vector (its term, plus the
    residual on the diagonal or in column 0), through the LayerNorm's linear part in post-norm; c_ij =
    max(0, ‖x̃_i‖₁ − ‖x̃_i − v_ij‖₁) over the row's sum."""
    terms = _ref_terms(family, rec, attn)
    ln = _eager(family).get_submodule("model." + norm) if norm else None
    out = []
    for i in range(terms.shape[0]):
        vecs = [residual[i], *terms[i]] if residual_column else list(terms[i])
        if not residual_column:
            vecs[i] = vecs[i] + residual[i]
        if ln is not None:
            summed = residual[i] + rec[attn]["out"][i]
            sigma = (summed.var(unbiased=False) + ln.eps).sqrt()
            vecs = [(v - v.mean()) / sigma * ln.weight for v in vecs]
        total = sum(vecs)
        c = torch.stack([(total.abs().sum() - (total - v).abs().sum()).clamp_min(0) for v in vecs])
        out.append(c / c.sum())
    return torch.stack(out)


@pytest.mark.parametrize("family", FAMILIES)
def test_alti_plus_equals_a_loop_over_the_models_blocks(family):
    rec = _record(family)
    _, dec, rows, cols = _ids(family)
    blocks = _blocks(family, rec)
    s = rec["memory"].shape[0]
    r_enc = torch.eye(s, dtype=torch.float64)
    for kind, attn, res, norm in blocks:
        if kind == "enc":
            r_enc = _ref_contributions(family, rec, attn, res, norm, residual_column=False) @ r_enc
    t = dec.shape[1]
    r = torch.cat([torch.zeros(t, s, dtype=torch.float64), torch.eye(t, dtype=torch.float64)], 1)  # (T', S' + T')
    dec_blocks = [b for b in blocks if b[0] != "enc"]
    for (_, sa, sres, snorm), (_, ca, cres, cnorm) in zip(dec_blocks[::2], dec_blocks[1::2], strict=True):
        c_self = _ref_contributions(family, rec, sa, sres, snorm, residual_column=False)
        c_cross = _ref_contributions(family, rec, ca, cres, cnorm, residual_column=True)
        new = torch.zeros_like(r)
        for i in range(t):  # residual share of the self-mixed row, plus the source through cross-attention
            new[i] = c_cross[i, 0] * (c_self[i] @ r)
            new[i, :s] += c_cross[i, 1:] @ r_enc
        r = new
    ref = r[rows, cols]
    att = explain(_translator(family), SOURCE, target=TARGET, method="alti_plus")
    assert torch.allclose(att.scores.double(), _norm_rows(ref), atol=1e-6)
    assert att.extra["source_share"] == pytest.approx(ref.sum(-1).tolist(), abs=1e-4)
    assert all(0 < v < 1 for v in att.extra["source_share"])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer", [1, None])
def test_value_zeroing_equals_rerunning_the_model_with_a_value_zeroed(family, layer):
    src, _, rows, cols = _ids(family)
    n_dec = _eager(family).config.decoder_layers
    li = n_dec - 1 if layer is None else layer - 1
    name = f"decoder.layers.{li}"
    base = _record(family)[name]["out"]  # (T', D)
    cos = []
    for j in range(src.shape[1]):  # every source position, special tokens included: they are values too
        zeroed = _record(family, zero=(f"{name}.encoder_attn.v_proj", j))[name]["out"]
        cos.append(1 - F.cosine_similarity(base, zeroed, dim=-1))  # (T',)
    ref = torch.stack(cos, 1).clamp_min(0)[rows, cols]  # (T, S)
    att = explain(_translator(family), SOURCE, target=TARGET, method="value_zeroing", layer=layer)
    assert torch.allclose(att.scores.double(), _norm_rows(ref), atol=1e-6)


@pytest.mark.parametrize("family", (*FAMILIES, "t5"))
@pytest.mark.parametrize("layer", [1, None])
def test_rollout_equals_a_float64_loop_over_the_eager_attention(family, layer):
    """Rollout over every source token (special tokens included), then the pieces' columns: T5 has it too."""
    src, dec, rows, cols = _ids(family)
    with torch.no_grad():
        out = _eager(family)(input_ids=src, decoder_input_ids=dec, output_attentions=True)
    rollout = torch.eye(src.shape[1], dtype=torch.float64)
    for a in out.encoder_attentions:
        hat = a[0].mean(0) + torch.eye(src.shape[1], dtype=torch.float64)
        rollout = _norm_rows(hat) @ rollout
    li = len(out.cross_attentions) - 1 if layer is None else layer - 1
    ref = (out.cross_attentions[li][0].mean(0) @ rollout)[rows, cols]
    tr = Translator.load(saved_tiny(family)) if family == "t5" else _translator(family)
    att = explain(tr, SOURCE, target=TARGET, method="rollout", layer=layer)
    assert torch.allclose(att.scores.double(), _norm_rows(ref), atol=1e-5)


@pytest.mark.parametrize("family", ["bart", "mbart", "pegasus"])
def test_the_other_layernorm_families_replay_exactly(family):
    """BART (post-norm, with an embedding LayerNorm), mBART and Pegasus (pre-norm, final LayerNorms): the
    trace's replay of every layer gives the layer's real output (it raises otherwise), and ALTI+'s rows
    are shares of one."""
    from hf_tiny import _hf_tokenizer

    tok = _hf_tokenizer("bart")
    config = getattr(transformers, {"bart": "BartConfig", "mbart": "MBartConfig", "pegasus": "PegasusConfig"}[family])(
        vocab_size=len(tok),
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=3,
        decoder_start_token_id=1,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        init_std=0.3,
    )
    torch.manual_seed(0)
    from attnkit.hf.seq2seq import HFSeq2Seq

    adapter = HFSeq2Seq(transformers.AutoModelForSeq2SeqLM.from_config(config).double().eval(), tok, source=family)
    src = torch.tensor(tok(SOURCE, add_special_tokens=False)["input_ids"])
    trace, rows, cols = trace_model(adapter, src, torch.tensor([1, 10, 20, 30]))
    r, _ = alti_contributions(trace)  # (T', S' + T'): every row's shares of the source and the target prefix
    assert torch.allclose(r.sum(-1), torch.ones(r.shape[0], dtype=torch.float64), atol=1e-9)
    assert r[rows, cols].shape == (4, len(src)) and bool((r[rows, cols] >= 0).all())


def test_the_methods_each_family_has():
    full = [
        "attention",
        "rollout",
        "attention_norm",
        "value_zeroing",
        "attention_flow",
        "attention_relevance",
        "alti_plus",
    ]
    for family in FAMILIES:
        assert methods_for(_translator(family).model)[:7] == full
    t5 = methods_for(Translator.load(saved_tiny("t5")).model)
    assert t5[:3] == ["attention", "rollout", "attention_flow"] and not set(DECOMPOSITIONS) & set(t5)


@pytest.mark.parametrize("method", DECOMPOSITIONS)
def test_t5_is_refused_in_one_line(method, capsys):
    tr = Translator.load(saved_tiny("t5"))
    with pytest.raises(
        UnknownMethodError, match=rf"^{method} is not defined for t5 models: .*RMSNorm.*; this model has"
    ):
        explain(tr, SOURCE, target=TARGET, method=method)
    capsys.readouterr()
    code = main(["explain", "--model", str(saved_tiny("t5")), "--method", method, "--target", TARGET, SOURCE])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "not defined for t5 models" in err and "Traceback" not in err


def test_a_model_whose_layers_are_not_the_traced_blocks_is_refused():
    """A layer whose output is not what its modules compute as residual attention blocks (here a hook adds
    to it) fails the replay's check: nothing is decomposed by guess."""
    tr = Translator.load(saved_tiny("marian"))
    layer = tr.model.hf.get_encoder().layers[1]
    handle = layer.register_forward_hook(lambda m, a, out: out + 0.5)
    try:
        with pytest.raises(HFModelError, match=r"encoder layer 2 .* does not give its output"):
            explain(tr, SOURCE, target=TARGET, method="alti_plus")
    finally:
        handle.remove()
    assert explain(tr, SOURCE, target=TARGET, method="alti_plus").scores.shape[1] == len(_pair("marian").src)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_cli_explains_with_every_decomposition(family, capsys):
    """`attnkit explain --model FOLDER --method M --json` (float32) gives the API's float64 scores, to float32 rounding."""
    for method in ("rollout", *DECOMPOSITIONS):
        capsys.readouterr()
        args = ["explain", "--model", str(saved_tiny(family)), "--method", method, "--target", TARGET, "--json", SOURCE]
        assert main(args) == 0, capsys.readouterr().err
        data = json.loads(capsys.readouterr().out)
        assert data["method"] == method
        ref = explain(_translator(family), SOURCE, target=TARGET, method=method).scores
        assert torch.tensor(data["scores"]) == pytest.approx(ref, abs=1e-4)


def test_the_explorer_lists_and_computes_the_decompositions():
    """The explorer lists the methods of an HF folder, and its payload (what a heavy job computes in its
    worker process) carries the method's view: the API's scores."""
    fastapi_testclient = pytest.importorskip("fastapi.testclient")
    from attnkit.explorer.app import create_app, load_models
    from attnkit.explorer.payload import translation_payload

    folder = saved_tiny("m2m_100")
    models = load_models([str(folder)])
    client = fastapi_testclient.TestClient(create_app(models), base_url="http://127.0.0.1")
    listed = {m["name"]: [x["name"] for x in m["methods"]] for m in client.get("/api/models").json()["models"]}
    assert set(DECOMPOSITIONS) <= set(listed[folder.name])
    tr = models.translators[folder.name]
    a = translation_payload(tr, SOURCE, target=TARGET, method="alti_plus", model=folder.name)["attribution"]
    att = explain(tr, SOURCE, target=TARGET, method="alti_plus")
    assert a["method"] == "alti_plus" and torch.tensor(a["scores"]) == pytest.approx(att.scores, abs=1e-5)
