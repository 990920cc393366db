"""The explorer's views inline in Jupyter, VS Code and Colab: no server, no CDN.

A view is the self-contained page that ``--html`` and the page's export button write
(:func:`attnkit.explorer.html.standalone_html`, every script and style inline) inside an ``<iframe
srcdoc=…>``, so its script runs in a document of its own, as in a browser tab. ``_repr_html_`` on
:class:`~attnkit.attribution.Attribution` and :class:`attnkit.tasks.translation.TranslationAttention`
return one, through the display registry (:mod:`attnkit.display`) that this module registers into
on import; :func:`show` makes one from a model and its input, or from an explorer payload::

    import attnkit
    attnkit.show(translator, "Jesús lloró.", method="alti_plus")      # a translation, with ALTI+
    attnkit.show(captioner, image, method="integrated_gradients")      # a caption
    attnkit.attribution.explain(translator, "Jesús lloró.", method="input_x_gradient")   # shows itself
"""

from __future__ import annotations

import html as html_lib
from pathlib import Path

from ..attribution.result import Attribution
from ..display import register_html
from ..hf.self_attention import SelfAttentionMaps
from ..tasks.translation.inference import TranslationAttention

__all__ = [
    "ExplorerView",
    "attribution_html",
    "repeated_view",
    "self_attention_html",
    "self_attention_view",
    "show",
    "translation_attention_html",
]


class ExplorerView:
    """Explorer payloads as an inline page: ``_repr_html_`` (an iframe), ``html`` (the page), ``save(path)``."""

    def __init__(
        self,
        *,
        translations: list | None = None,
        captions: list | None = None,
        self_attention: list | None = None,
        continuations: list | None = None,
        height: int | None = None,
    ):
        from .schema import ExplorerData

        self.data = ExplorerData(
            translations=translations or [],
            captions=captions or [],
            self_attention=self_attention or [],
            continuations=continuations or [],
        ).model_dump(mode="json")
        rows = max(
            [len(t["target_pieces"]) for t in self.data["translations"]]
            + [len(c["written_pieces"]) for c in self.data["continuations"]]
            + [0]
        )
        layers = sum(p["num_layers"] for p in self.data["self_attention"])
        self.height = height or (760 if self.data["captions"] or layers else min(1200, 360 + 18 * rows))

    @property
    def html(self) -> str:
        from .html import standalone_html

        return standalone_html(self.data)

    def save(self, path: str | Path) -> Path:
        """Write the page (the same file ``--html`` writes) to ``path``."""
        from .html import write_explorer_html

        return write_explorer_html(
            path,
            translations=self.data["translations"],
            captions=self.data["captions"],
            self_attention=self.data["self_attention"],
            continuations=self.data["continuations"],
        )

    def _repr_html_(self) -> str:
        return (
            f'<iframe class="attnkit-view" srcdoc="{html_lib.escape(self.html, quote=True)}" '
            f'style="width: 100%; height: {self.height}px; border: 1px solid #ddd; resize: vertical"></iframe>'
        )


def _translation_view(att) -> ExplorerView:
    from ..service import GenerationAnalysis, TranslationAnalysis
    from .payload import translation_answer

    extra = att.extra
    if extra.get("kind") in ("continuation", "forced text"):  # a decoder-only model's tokens: a continuation
        from .self_attention import continuation_answer

        g = GenerationAnalysis(
            model=extra.get("model", ""),
            kind=extra["kind"],
            request=None,
            text=extra.get("source", ""),
            continuation=extra.get("translation", ""),
            attention=None,
            attribution=att,
            mode="forced" if extra.get("forced") else "greedy",
            step_scores=extra.get("step_scores"),
        )
        c = continuation_answer(g)
        if not extra.get("forced"):  # a continuation handed to the method: greedy or sampled, it does not say
            c = c.model_copy(update={"decoding": None})
        return ExplorerView(continuations=[c])
    a = TranslationAnalysis(
        model=extra.get("model", ""),
        kind=extra.get("kind", "translation"),
        request=None,
        source=extra.get("source", ""),
        translation=extra.get("translation", ""),
        source_pieces=att.source,
        target_pieces=att.target,
        forced=bool(extra.get("forced", True)),
        attribution=att,
    )
    return ExplorerView(translations=[translation_answer(a)])


def _caption_view(att) -> ExplorerView:
    from .payload import caption_attribution_fields, image_data_url
    from .schema import Caption

    fields = caption_attribution_fields(att)
    p = Caption(
        model=att.extra.get("model", ""),
        kind="captioner",
        attention_type=att.method,
        caption=" ".join(att.target),
        words=att.target,
        grid=tuple(att.grid),
        canvas=int(att.image.shape[-1]),
        attention=fields.maps,  # the view shows the attribution's maps (the same numbers)
        image=image_data_url(att.image),
        boxes=None,
        word_items=None,
        correctness=None,
        scene=None,
        attribution=fields,
    )
    return ExplorerView(captions=[p])


def attribution_html(att) -> str:
    """An :class:`~attnkit.attribution.Attribution` as an inline explorer view (iframe HTML)."""
    return (_caption_view(att) if att.is_image else _translation_view(att))._repr_html_()


def _translation_attention_view(ta) -> ExplorerView:
    from ..service import TranslationAnalysis
    from .payload import translation_answer

    text = "".join(ta.target_pieces).replace("\u2581", " ").strip()
    a = TranslationAnalysis(
        model="",
        kind="translation",
        request=None,
        source="",
        translation=text,
        source_pieces=ta.source_pieces,
        target_pieces=ta.target_pieces,
        attention=ta,
    )
    return ExplorerView(translations=[translation_answer(a, heads=True)])


def translation_attention_html(ta) -> str:
    """A :class:`attnkit.tasks.translation.TranslationAttention` (every attention of one pair) as an inline view."""
    return _translation_attention_view(ta)._repr_html_()


def self_attention_view(maps, *, model: str = "") -> ExplorerView:
    """A :class:`attnkit.hf.self_attention.SelfAttentionMaps` (every layer and head of one text) as an
    inline view: the heads grid, the head means and the rollout, as the server's page shows them.
    Every ``"layer"`` in the view's data is the map's layer number (1-based, as ``maps.layers``)."""
    from ..alignment import attention_rollout, words_from_pieces
    from .payload import _rows
    from .schema import SelfAttention, SelfAttentionLayer
    from .self_attention import ROLLOUT_RULE

    mean = maps.head_mean  # (L, N, N)
    consecutive = maps.layers == list(range(1, len(maps.layers) + 1))  # layer numbers count from 1
    p = SelfAttention(
        model=model,
        kind="self-attention",
        text="".join(maps.pieces).replace("\u2581", " ").strip(),
        causal=maps.causal,
        pieces=list(maps.pieces),
        words=words_from_pieces(maps.pieces),
        num_layers=len(maps.layers),
        num_heads=len(maps.heads),
        kv_groups=maps.kv_groups,
        head_mean=_rows(mean, 4),
        rollout=_rows(attention_rollout(mean)) if consecutive else None,
        rollout_rule=ROLLOUT_RULE,
        layers=[
            SelfAttentionLayer(layer=int(li), heads=_rows(maps.attention[k], 4)) for k, li in enumerate(maps.layers)
        ],
    )
    return ExplorerView(self_attention=[p])


def repeated_view(analysis) -> ExplorerView:
    """A :class:`attnkit.service.RepeatedAnalysis` (random tokens repeated twice) as an inline view: the
    heads grid of every layer and head, each titled with its prefix-matching score, the induction stripe and
    the previous-token diagonal outlined, the best induction head named (what ``/api/repeated`` shows)."""
    from .self_attention import repeated_answer

    return ExplorerView(self_attention=[repeated_answer(analysis)])


def self_attention_html(maps) -> str:
    """A :class:`attnkit.hf.self_attention.SelfAttentionMaps` as an inline view (iframe HTML)."""
    return self_attention_view(maps)._repr_html_()


def show(obj, data=None, *, method: str | None = None, target: str | None = None, beam: int = 5) -> ExplorerView:
    """An inline explorer view of ``obj``: a ``Translator`` with Spanish text ``data`` (``target`` forces
    the English), a ``Captioner`` with an image tensor ``(1, C, C)`` ``data``, an
    :class:`~attnkit.attribution.Attribution`, a ``TranslationAttention``, a decoder-only model's
    :class:`~attnkit.service.GenerationAnalysis` (:func:`attnkit.service.analyse`), a
    :class:`~attnkit.service.RepeatedAnalysis` (the heads on repeated random tokens), the routes view of an
    :class:`~attnkit.service.LMViewAnalysis` (the information-flow graph), or an explorer payload dict
    (:func:`attnkit.explorer.translation_payload` / ``caption_payload``). ``method``: an attribution method."""
    from ..errors import InputError
    from ..tasks.captioning import Captioner
    from ..tasks.translation import Translator

    if isinstance(obj, Translator):
        from .payload import translation_payload

        if not isinstance(data, str):
            raise InputError("show(translator, text): give the Spanish text to translate")
        return ExplorerView(
            translations=[translation_payload(obj, data, beam=beam, heads=True, target=target, method=method)]
        )
    if isinstance(obj, Captioner):
        from .payload import caption_payload

        if data is None:
            raise InputError("show(captioner, image): give the image, a (1, C, C) tensor in [0, 1]")
        return ExplorerView(captions=[caption_payload(obj, data, beam=1 if beam == 5 else beam, method=method)])
    if isinstance(obj, Attribution):
        return _caption_view(obj) if obj.is_image else _translation_view(obj)
    if isinstance(obj, TranslationAttention):
        return _translation_attention_view(obj)
    from ..service import GenerationAnalysis, LMViewAnalysis, RepeatedAnalysis

    if isinstance(obj, RepeatedAnalysis):  # random tokens repeated twice: the heads grid, the stripe marked
        return repeated_view(obj)
    if isinstance(obj, LMViewAnalysis):  # the routes graph (the logit lens, the direct logit attribution: tables)
        from .flow_view import flow_view
        from .lm_view_answer import lm_view_json

        data = lm_view_json(obj)
        if "graph" not in data:
            raise InputError(f"show() draws the routes view; {data['view']} is a table: display the analysis itself")
        return flow_view(data)
    if isinstance(obj, GenerationAnalysis):  # a decoder-only model's tokens: the attention and the method's view
        from .self_attention import continuation_answer

        return ExplorerView(continuations=[continuation_answer(obj)])
    if isinstance(obj, SelfAttentionMaps):
        return self_attention_view(obj)
    if isinstance(obj, dict) and "target_pieces" in obj:
        return ExplorerView(translations=[obj])
    if isinstance(obj, dict) and "grid" in obj:
        return ExplorerView(captions=[obj])
    raise InputError(
        f"show() takes a Translator and text, a Captioner and an image, an Attribution, a TranslationAttention "
        f"or an explorer payload; got {type(obj).__name__}"
    )


register_html(Attribution, attribution_html)
register_html(TranslationAttention, translation_attention_html)
register_html(SelfAttentionMaps, self_attention_html)


def _lm_view_html(analysis) -> str:
    from .flow_view import lm_view_html

    return lm_view_html(analysis)


def _register_lm_view() -> None:
    from ..service import LMViewAnalysis, RepeatedAnalysis

    register_html(LMViewAnalysis, _lm_view_html)
    register_html(RepeatedAnalysis, lambda analysis: repeated_view(analysis)._repr_html_())


_register_lm_view()
