"""The work behind the page's head interventions (``/api/ablate``, ``/api/patching``, ``/api/head-why``), each a
light job run in the fast lane once its route has checked every bound.

- :func:`ablation_answer` — a translator's clean and ablated translation and the forced log-likelihood change
  (:func:`attnkit.attribution.intervention_effects.translation_effect`: Michel et al. 2019; Voita et al. 2019);
  or a language model's clean and ablated greedy continuation, next-token top-k and forced log-likelihood of
  the clean continuation (:func:`~attnkit.attribution.intervention_effects.lm_effect` for the next token).
- :func:`patching_answer` — activation patching of every head and path patching into the best induction head
  on repeated random tokens, as ``attnkit heads --patching`` computes them (Wang et al. 2022); attnkit's
  language models and the Hugging Face decoder-only ones.
- :func:`head_why_answer` — one head's role scores (:func:`attnkit.attribution.head_roles.language_model_roles`
  over :data:`ROLE_TEXTS`, cached per model) and, for attnkit's own language models, the QK decomposition of
  its score on the most-attended key (Elhage et al. 2021).

Layers and heads are 1-based in and out; the library's interventions count from 0.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from ..attribution.interventions import HeadAblation, intervenable, intervene, record_heads

__all__ = [
    "ROLE_TEXTS",
    "ablation_answer",
    "head_why_answer",
    "interventions_for",
    "lm_ablation",
    "patching_answer",
    "patching_subject",
    "roles_of",
    "translator_ablation",
]

#: the page's sites (as /api/head-step names them) → the interventions' sites
SITES = {"self": "self", "decoder self": "self", "encoder": "encoder", "cross": "cross"}
#: the texts a text model's roles are read over (the World English Bible's Genesis 1:1-8, public domain): the
#: same for every model, so a model's roles are computed once per server (``attnkit heads`` reads 16 test verses)
ROLE_TEXTS = (
    "In the beginning, God created the heavens and the earth.",
    "The earth was formless and empty. Darkness was on the surface of the deep.",
    "God's Spirit was hovering over the surface of the waters.",
    "God said, Let there be light, and there was light.",
    "God saw the light, and saw that it was good. God divided the light from the darkness.",
    "God called the light Day, and the darkness he called Night. There was evening and there was morning, the first day.",
    "God said, Let there be an expanse in the middle of the waters, and let it divide the waters from the waters.",
    "God called the expanse sky. There was evening and there was morning, a second day.",
)
_ROLES_LOCK = threading.Lock()


def interventions_for(model, heads: list[tuple[str, int, int]], mode: str, reference=None) -> list[HeadAblation]:
    """One :class:`HeadAblation` per ``(site, layer, head)`` (1-based, the page's site names). ``mode="mean"``
    sets each head to its mean output over the positions of ``reference`` (a :class:`HeadRecording` of this
    input's own forward pass): a mean over this input, not over a data set."""
    out = []
    for site, layer, head in heads:
        s = SITES[site]
        if mode == "mean":
            out.append(
                HeadAblation(layer - 1, head - 1, mode="mean", site=s, reference=reference.get(s, layer - 1, head - 1))
            )
        else:
            out.append(HeadAblation(layer - 1, head - 1, site=s))
    return out


def _transformer_ablation(tr, source: str, reference: str | None, heads, mode: str, beam: int) -> dict:
    """A translator's clean and ablated translation (beam ``beam``) and the forced log-likelihood of
    ``reference`` (default: the clean translation) clean and ablated."""
    from ..attribution.intervention_effects import (
        forced_batch,
        forced_log_likelihood,
        translation_effect,
        translator_of,
    )

    tr = translator_of(tr)
    forced = (
        reference if reference is not None else tr.translate([source], beam_size=beam, truncate=True)[0].translation
    )
    rec = None
    if mode == "mean":
        batch = forced_batch(tr, [source], [forced])
        with torch.no_grad(), record_heads(tr.model) as rec:
            forced_log_likelihood(tr.model, batch)
    effect = translation_effect(tr, source, forced, interventions_for(tr.model, heads, mode, rec), beam=beam)
    return {
        "source": source,
        "reference": forced,
        "reference_given": reference is not None,
        "beam": beam,
        "clean": effect.clean_translation,
        "ablated": effect.translation,
        "clean_log_likelihood": effect.clean_log_likelihood,
        "log_likelihood": effect.log_likelihood,
        "log_likelihood_change": effect.log_likelihood_change,
    }


def translator_ablation(tr, source: str, reference: str | None, heads, mode: str, beam: int) -> dict:
    """A translator's clean and ablated translation (beam ``beam``) and the forced log-likelihood of
    ``reference`` (default: the clean translation) clean and ablated: attnkit's Transformer and a Hugging
    Face encoder-decoder by their heads; RNNsearch by its one attention (``zero``: the context set to 0;
    ``mean``: uniform weights, the context the mean annotation; :mod:`attnkit.attribution.translator_ablation`)."""
    from ..attribution.interventions import intervene
    from ..attribution.translator_ablation import (
        ablate_rnn_attention,
        forced_log_likelihood_of,
        translator_model_kind,
    )

    kind = translator_model_kind(tr)
    if kind == "transformer":
        return _transformer_ablation(tr, source, reference, heads, mode, beam)
    forced = (
        reference if reference is not None else tr.translate([source], beam_size=beam, truncate=True)[0].translation
    )
    core = tr.model
    was = core.training
    core.eval()
    try:
        with torch.no_grad():
            clean_ll = forced_log_likelihood_of(tr, source, forced)
            clean = tr.translate([source], beam_size=beam, truncate=True)[0].translation
            if kind == "rnnsearch":
                ablated = ablate_rnn_attention(core, mode)
            else:
                rec = None
                if mode == "mean":  # each head's mean over this input's own teacher-forced run
                    with record_heads(core) as rec:
                        forced_log_likelihood_of(tr, source, forced)
                ablated = intervene(core, interventions_for(core, heads, mode, rec))
            with ablated:
                ll = forced_log_likelihood_of(tr, source, forced)
                out = tr.translate([source], beam_size=beam, truncate=True)[0].translation
    finally:
        core.train(was)
    return {
        "source": source,
        "reference": forced,
        "reference_given": reference is not None,
        "beam": beam,
        "clean": clean,
        "ablated": out,
        "clean_log_likelihood": clean_ll,
        "log_likelihood": ll,
        "log_likelihood_change": ll - clean_ll,
    }


def _top(logits: torch.Tensor, k: int, piece) -> list[dict]:
    lp = F.log_softmax(logits.double(), -1)  # (V,)
    values, ids = lp.topk(k)
    return [{"id": int(i), "piece": piece(int(i)), "log_prob": float(v)} for v, i in zip(values, ids)]


def lm_ablation(sa, text: str, heads, mode: str, new_tokens: int, top_k: int) -> dict:
    """A language model's greedy continuation of ``text`` (``new_tokens`` at most) clean and ablated, its next
    token's top ``top_k`` both ways, the clean next token's log-probability change (:func:`lm_effect`) and the
    forced log-likelihood of the clean continuation, ``Σ_t log p(c_t | text, c_<t)``, clean and ablated."""
    from ..attribution.intervention_effects import lm_effect

    core = intervenable(sa)
    device = next(core.parameters()).device
    ids, _ = sa.encode(text)
    prompt = torch.tensor(ids, device=device)  # (N,)
    rec = None
    with torch.no_grad():
        if mode == "mean":
            with record_heads(core) as rec:
                core(prompt[None])
        ivs = interventions_for(core, heads, mode, rec)
        was = core.training
        core.eval()
        try:
            clean_ids, n = sa.generate(text, max_new_tokens=new_tokens)
            with intervene(core, ivs):
                ablated_ids, _ = sa.generate(text, max_new_tokens=new_tokens)
            full = torch.tensor(clean_ids, device=device)[None]  # (1, N + C): the prompt and the clean continuation
            clean_logits = core(full).logits[0].double()  # (N + C, V)
            with intervene(core, ivs):
                logits = core(full).logits[0].double()
        finally:
            core.train(was)
    target = int(clean_logits[n - 1].argmax())
    effect = lm_effect(sa, prompt, ivs, target=target)
    written = full[0, n:]  # (C,)

    def forced(lg: torch.Tensor) -> float:
        lp = F.log_softmax(lg[n - 1 : -1], -1)  # (C, V): each written token's prediction
        return float(lp.gather(-1, written[:, None]).sum())

    piece = lambda i: sa.pieces_of([i])[0]
    words = lambda out: sa.decode_plain([i for i in out[n:] if i != sa.eos_id])  # the end-of-text token not shown
    clean_ll, ll = forced(clean_logits), forced(logits)
    return {
        "text": text,
        "new_tokens": new_tokens,
        "clean": words(clean_ids),
        "ablated": words(ablated_ids),
        "clean_top": _top(clean_logits[n - 1], top_k, piece),
        "top": _top(logits[n - 1], top_k, piece),
        "next_token": {"id": target, "piece": piece(target)},
        "clean_log_prob": effect.clean_log_prob,
        "log_prob": effect.log_prob,
        "log_prob_change": effect.log_prob_change,
        "clean_log_likelihood": clean_ll,
        "log_likelihood": ll,
        "log_likelihood_change": ll - clean_ll,
    }


def ablation_answer(model_name: str, kind: str, impl, heads, mode: str, **kw) -> dict:
    """``/api/ablate``'s answer: the model, the ablated heads (1-based) and :func:`translator_ablation`'s or
    :func:`lm_ablation`'s numbers."""
    work = translator_ablation if kind == "translator" else lm_ablation
    shown = [{"site": s, "layer": layer, "head": h} for s, layer, h in heads]
    return {"model": model_name, "kind": kind, "mode": mode, "heads": shown, **work(impl, heads=heads, mode=mode, **kw)}


def patching_subject(cache: dict, name: str, sa) -> tuple:
    """``(model, best induction head (1-based), context, special ids)`` of text model ``sa``
    (:func:`attnkit.attribution.path_patching.induction_subject`: attnkit's language model or a Hugging Face
    decoder-only one), found once per model and kept (seeded rows: the same answer every time);
    ``TypeError`` for a model patching does not read."""
    from ..attribution.path_patching import induction_subject

    key = f"induction:{name}"
    if key not in cache:
        cache[key] = induction_subject(sa)
    return cache[key]


def patching_answer(cache: dict, name: str, sa, length: int, seed: int, direction: str) -> dict:
    """Activation patching of every head of text model ``sa`` (attnkit's language model or a Hugging Face
    decoder-only one) and path patching from every earlier head into its best induction head through q, k and
    v, on ``length`` random tokens repeated twice (the first copy redrawn in the corrupted run): the numbers
    ``attnkit heads --patching`` prints."""
    from ..attribution.path_patching import induction_circuit

    lm, best, _, specials = patching_subject(cache, name, sa)
    return {"model": name, **induction_circuit(lm, length, seed, direction, best, special_ids=specials)}


def roles_of(cache: dict, name: str, sa):
    """The :class:`~attnkit.attribution.head_roles.HeadRolesReport` of text model ``sa`` over :data:`ROLE_TEXTS`,
    computed once per model and kept in ``cache`` (a few seconds: the texts, and repeated random tokens)."""
    from ..attribution.head_roles import language_model_roles

    key = f"roles:{name}"
    with _ROLES_LOCK:  # one computation per model even when two requests ask at once
        if key not in cache:
            cache[key] = language_model_roles(sa, list(ROLE_TEXTS))
        return cache[key]


def head_why_answer(cache: dict, name: str, sa, text: str, layer: int, head: int, query: int | None) -> dict:
    """One head's role scores and, for attnkit's language model, the QK decomposition at ``query`` (1-based;
    default the last piece) of the key it attends to most: each residual-stream part's share of that score."""
    from ..attribution.interventions import core_model
    from ..models.language_model import LanguageModel

    report = roles_of(cache, name, sa)
    roles = report.get("lm", layer, head).to_dict(report.threshold)
    answer = {
        "model": name,
        "layer": layer,
        "head": head,
        "roles": {k: roles[k] for k in report.roles},
        "strongest": roles["strongest"],
        "threshold": report.threshold,
        "role_texts": report.inputs,
        "qk": None,
        "note": None,
    }
    try:
        lm = core_model(sa)
    except TypeError:
        lm = None
    if not isinstance(lm, LanguageModel):
        answer["note"] = "the QK decomposition reads attnkit's own language models' weights: not this model's"
        return answer
    from ..attribution.qk_decomposition import qk_decomposition

    ids, pieces = sa.encode(text)
    q = len(ids) if query is None else query
    d = qk_decomposition(lm, torch.tensor(ids, device=next(lm.parameters()).device), layer - 1, head - 1, q - 1)
    key = int(d.weights.argmax())
    parts = d.by_key_part()[key]  # (P,)
    answer["qk"] = {
        "query": q,
        "query_piece": pieces[q - 1],
        "key": key + 1,
        "key_piece": pieces[key],
        "weight": float(d.weights[key]),
        "score": float(d.scores[key]),
        "parts": [{"part": p, "value": float(v)} for p, v in zip(d.parts, parts.tolist())],
    }
    return answer
