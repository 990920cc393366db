"""``attnkit heads --model M --patching [--repeated N --seed S --direction D]``: which heads of a language model
(attnkit's own, or a Hugging Face decoder-only one: GPT-2, GPT-NeoX, the Llama-like families) carry the answer
of an induction task, by activation patching and path patching.

The task (:func:`attnkit.attribution.patching.repeated_tokens_pair`): ``N`` random tokens repeated twice
without the last token (clean), the same with the first copy redrawn (corrupted), the answer the token
that repeats; the metric its log-probability at the last position. Printed: the clean and corrupted
metric, every head's activation-patching effect (:func:`~attnkit.attribution.patching.patch_heads`), and
path patching from every earlier head into the best induction head
(:func:`attnkit.models.induction.induction_scores`, or for a Hugging Face model
:func:`attnkit.hf.induction.hf_induction_scores`: found, not given; a Hugging Face tokenizer's special tokens
are never drawn) through its query, key and value
(:func:`~attnkit.attribution.path_patching.path_patch_senders`). The default direction is ``noise`` (the
corrupted activation into the clean run, Wang et al. 2022's path patching): with the first copy redrawn
the token an induction head would copy is itself corrupted, so no single clean head restores the answer
(``denoise``) while a single corrupted head can break it. Layers and heads are numbered from 1."""

from __future__ import annotations

from .common import CLIError, _shown_name

__all__ = ["format_patching", "patching_report"]


def patching_report(model, length: int, seed: int, direction: str) -> dict:
    """The JSON of ``attnkit heads --patching`` (:func:`attnkit.attribution.path_patching.induction_circuit`) for
    attnkit's language model or a Hugging Face decoder-only one (a folder or a hub name)."""
    from ..attribution.path_patching import induction_circuit, induction_subject

    try:
        lm, best, context, specials = induction_subject(model.impl)
    except TypeError:
        raise CLIError(
            f"--patching: {_shown_name(model)} is not a language model patching reads: attnkit's own, or a Hugging "
            "Face decoder-only one (GPT-2, GPT-NeoX, the Llama-like families)"
        ) from None
    if context is not None and 2 * length - 1 > context:
        raise CLIError(f"--repeated: 2 x {length} tokens exceed the model's {context} positions")
    if best[0] == 1:
        raise CLIError(f"the best induction head of {_shown_name(model)} is in layer 1: no earlier head sends to it")
    try:
        circuit = induction_circuit(lm, length, seed, direction, best, special_ids=specials)
    except ValueError as exc:
        raise CLIError(f"--patching: {exc}") from None
    return {"model": _shown_name(model), **circuit}


def format_patching(report: dict) -> str:
    """The text tables of :func:`patching_report`."""
    h, ind = report["heads"], report["induction_head"]
    noise = report["direction"] == "noise"
    what = (
        "each head's corrupted output patched into the clean run; effect = the share of the answer lost"
        if noise
        else "each head's clean output patched into the corrupted run; effect = the share of the answer restored"
    )
    lines = [
        f"activation patching of {report['model']} on {report['length']} random tokens repeated twice "
        f"(seed {report['seed']}), the first copy redrawn in the corrupted input; metric: log p(target = "
        f"{report['target']}) at the last position, clean {h['clean']:.4f}, corrupted {h['corrupt']:.4f}",
        f"{report['direction']}: {what}",
        "",
        "layer head |   effect",
    ]
    lines += [f"{c['layer']:>5} {c['head']:>4} | {c['effect']:8.4f}" for c in h["cells"]]
    top = max(h["cells"], key=lambda c: c["effect"])
    lines.append(f"largest: L{top['layer']}H{top['head']} ({top['effect']:.4f})")
    lines += [
        "",
        f"path patching into the best induction head L{ind['layer']}H{ind['head']} (prefix matching "
        f"{ind['prefix_matching']:.2f}): each earlier head's {'corrupted' if noise else 'clean'} output reaching "
        "only its query (q), key (k) or value (v) input, every other head frozen (Wang et al. 2022)",
        "sender |        q        k        v",
    ]
    by_via = {via: {(s["layer"], s["head"]): s["effect"] for s in p["senders"]} for via, p in report["paths"].items()}
    for key in sorted(by_via["k"]):
        lines.append(f"  L{key[0]}H{key[1]} | " + " ".join(f"{by_via[v][key]:8.4f}" for v in "qkv"))
    for via in "qkv":
        best = report["paths"][via]["senders"][0]
        lines.append(f"largest via {via}: L{best['layer']}H{best['head']} ({best['effect']:.4f})")
    return "\n".join(lines)
