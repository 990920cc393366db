"""``attnkit heads --composition`` and ``attnkit heads --qk LAYER.HEAD --text T``: why a head of an attnkit
language model attends where it does, from its weights (Elhage et al. 2021's Q-, K- and V-composition,
:mod:`attnkit.attribution.head_composition`) and on one text (one head's pre-softmax scores at one position split
over the residual stream's parts, :mod:`attnkit.attribution.qk_decomposition`). Layers, heads and positions are
numbered from 1 in the tables and in the JSON's ``position`` (the library's ``query`` is 0-based)."""

from __future__ import annotations

from .common import CLIError, _shown_name

__all__ = ["composition_report", "format_composition", "format_qk", "language_model_of", "parse_head", "qk_report"]

KIND_NAMES = {"q": "Q-composition (queries)", "k": "K-composition (keys)", "v": "V-composition (values)"}


def language_model_of(model, flag: str):
    """The attnkit :class:`~attnkit.models.language_model.LanguageModel` inside an opened ``model``, or a
    one-line refusal naming ``flag`` (these readings need attnkit's own weights)."""
    from ..models.language_model import LanguageModel

    lm = getattr(model.impl, "model", None)
    if not isinstance(lm, LanguageModel):
        raise CLIError(
            f"{flag}: {_shown_name(model)} is not an attnkit language model: the composition scores and the QK "
            "decomposition read attnkit's own attention weights"
        )
    return lm


def parse_head(text: str, lm) -> tuple[int, int]:
    """``"LAYER.HEAD"`` (1-based) as 0-based ``(layer, head)``, checked against ``lm``'s layers and heads."""
    parts = str(text).split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise CLIError(f"--qk must be LAYER.HEAD (1-based, e.g. 2.1), got {text!r}")
    layer, head = int(parts[0]), int(parts[1])
    n_layers, n_heads = lm.config.n_layers, lm.config.n_heads
    if not 1 <= layer <= n_layers or not 1 <= head <= n_heads:
        raise CLIError(f"--qk: layer must be in 1..{n_layers} and head in 1..{n_heads}, got {text!r}")
    return layer - 1, head - 1


def composition_report(model, top: int) -> dict:
    """The JSON of ``attnkit heads --composition``."""
    from ..attribution.head_composition import composition_scores

    return {"model": _shown_name(model), **composition_scores(language_model_of(model, "--composition")).to_dict(top)}


def format_composition(report: dict) -> str:
    """The text tables of :func:`composition_report`: the top pairs of each kind."""
    base = report["baseline"]
    lines = [
        f"head composition of {report['model']} (Elhage et al. 2021), from the weights: "
        "||W_QK^T W_OV|| (Q), ||W_QK W_OV|| (K), ||W_OV W_OV|| (V), each over the product of the norms; "
        "norms and rotary positions left out",
        f"adjusted = score - the mean score of random matrices of the same shapes ({report['samples']} draws "
        f"each side, seed {report['seed']}: " + ", ".join(f"{k.upper()} {v:.4f}" for k, v in base.items()) + ")",
    ]
    for kind, name in KIND_NAMES.items():
        lines += ["", name, "source -> reader |   score  adjusted"]
        lines += [
            f"{p['source']:>6} -> {p['reader']:<6} | {p['score']:7.4f}  {p['adjusted']:8.4f}"
            for p in report["top"][kind]
        ]
    return "\n".join(lines)


def qk_report(model, head_text: str, text: str, position: int | None, top: int) -> dict:
    """The JSON of ``attnkit heads --qk LAYER.HEAD --text T [--position N]`` (``position`` 1-based over the
    text's pieces with its ``<s>``; default the last)."""
    import torch

    from ..attribution.qk_decomposition import qk_decomposition

    lm = language_model_of(model, "--qk")
    layer, head = parse_head(head_text, lm)
    try:
        ids, pieces = model.impl.encode(text)
    except ValueError as exc:
        raise CLIError(f"--text: {exc}") from None
    ids, pieces = ids[: lm.config.max_len], pieces[: lm.config.max_len]
    position = len(ids) if position is None else position
    if not 1 <= position <= len(ids):
        raise CLIError(f"--position must be in 1..{len(ids)} (the text's pieces with its <s>), got {position}")
    d = qk_decomposition(lm, torch.tensor(ids, device=model.impl.device), layer, head, position - 1)
    key = int(d.weights.argmax())
    return {
        "model": _shown_name(model),
        "position": position,
        "pieces": pieces[:position],
        "attended": key + 1,
        "top_terms": [{"query_part": a, "key_part": b, "value": v} for a, b, v in d.top_terms(key, top)],
        **d.to_dict(),
    }


def format_qk(report: dict) -> str:
    """The text table of :func:`qk_report`: each key's weight and score and its key parts' shares, then the
    largest terms at the most-attended key."""
    parts, pieces = report["parts"], report["pieces"]
    q = report["position"]
    lines = [
        f"why layer {report['layer']}, head {report['head']} of {report['model']} attends where it does from "
        f"position {q} ({pieces[q - 1]!r}): its pre-softmax scores split over the residual stream's parts "
        "on the key side (summed over the query side; Elhage et al. 2021)",
        "",
        "key piece        | weight   score | " + " ".join(f"{p:>9}" for p in parts),
    ]
    for j, piece in enumerate(pieces):
        cells = " ".join(f"{v:9.3f}" for v in report["by_key_part"][j])
        mark = "*" if j + 1 == report["attended"] else " "
        lines.append(
            f"{j + 1:>3}{mark}{piece[:12]:<12} | {report['weights'][j]:6.3f} {report['scores'][j]:7.3f} | {cells}"
        )
    lines += ["", f"largest terms at the most-attended key (* position {report['attended']}): query part x key part"]
    lines += [f"  {t['query_part']:>9} x {t['key_part']:<9} {t['value']:8.3f}" for t in report["top_terms"]]
    return "\n".join(lines)
