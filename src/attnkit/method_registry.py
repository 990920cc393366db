"""Every attribution method attnkit has, declared once: :data:`REGISTRY`.

A method is a :class:`MethodSpec`: one name (ALTI and ALTI+ are two methods: ``alti`` reads a language
model's blocks, ``alti_plus`` an encoder-decoder's two stacks), a one-line title, the paper it comes
from, the **capabilities** it needs of a model and of its trace, its **cost** for a language model in the
explorer (``light``: answered in the server's own lane; ``heavy``: a backward or a traced pass per token, a
worker job; a translator's methods all run as worker jobs) and **where it applies**:

- ``translation``, ``caption``: a translator's or captioner's target pieces attributed to the source
  pieces or image cells (:func:`attnkit.attribution.explain`, :func:`attnkit.attribution.explain_caption`);
- ``text_rows``: a language model's next tokens, each attributed to the tokens before it
  (:func:`attnkit.attribution.explain_generation`);
- ``text_layers``: every layer's token-to-token map of a text (the self-attention views);
- ``text_view``: a view of one prediction, a table or a graph, not rows (:class:`attnkit.service.LMViewRequest`).

A method added by a module of its own names the function that computes a language model's rows in
``rows`` (``"attnkit.attribution.attention_flow:flow_rows"``): it is called as ``fn(text_model, ids,
prompt_len, layer=, head=)`` and returns a :class:`~attnkit.attribution.result.MethodRows` whose ``scores (G,
n − 1)`` have as row ``t`` the position ``P − 1 + t`` that predicts token ``ids[P + t]``, over the inputs
``ids[:-1]``. Its translator rows, where it has them, are named in ``pairs``: ``fn(model, pair, *, layer=)``
with a forced pair (:class:`~attnkit.attribution.forced.ForcedTranslation`) returns ``scores (T, S)``, and the
translators that have the method are those with every capability in ``needs``. Every front end has the method
with no other edit: its entry here and its module are the whole change.

Every list of method names elsewhere (the CLI's choices, the explorer's menus and its lane/worker split,
the language-model tables, the docs' method table) is derived from this one; ``tests/test_method_registry.py``
fails on a second table of names.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ATTENTION",
    "ATTENTION_GRADIENTS",
    "ATTENTION_LAYERS",
    "GRADIENTS",
    "NEXT_TOKEN",
    "REGISTRY",
    "RESIDUAL_TRACE",
    "MethodSpec",
    "names",
]

#: capabilities a method needs: attention weights to read; the residual blocks traced (a decomposition);
#: gradients with respect to the input embeddings (Captum, a float model); the attention weights in the
#: autograd graph (a gradient with respect to attention); a next-token prediction (a logit); attention in
#: layers that can be composed from the input up (a translator's encoder self-attention, then its
#: cross-attention; every layer of a language model), which RNN attention is not
ATTENTION = "attention"
ATTENTION_LAYERS = "attention layers to compose"
RESIDUAL_TRACE = "residual trace"
GRADIENTS = "gradients"
ATTENTION_GRADIENTS = "attention in the autograd graph"
NEXT_TOKEN = "next-token prediction"


@dataclass(frozen=True)
class MethodSpec:
    """One method (see the module docstring): ``name``, ``title``, ``reference``, ``needs`` (capabilities),
    ``heavy`` (a worker job), and the places it applies."""

    name: str
    title: str
    reference: str
    needs: frozenset[str]
    heavy: bool = False
    translation: bool = False
    caption: bool = False
    text_rows: bool = False
    text_layers: bool = False
    text_view: bool = False
    rows: str | None = None  # a language model's rows computed by a method's own module: "module:function"
    pairs: str | None = None  # a translator's rows computed by a method's own module: "module:function"
    magnitude: str | None = None  # what its raw values are, where they are magnitudes rather than shares

    @property
    def needs_gradients(self) -> bool:
        return GRADIENTS in self.needs or ATTENTION_GRADIENTS in self.needs

    def info(self) -> dict:
        """What a front end lists of the method (the explorer's ``MethodInfo``)."""
        return {
            "name": self.name,
            "title": self.title,
            "reference": self.reference,
            "needs_gradients": self.needs_gradients,
        }


def _spec(name, title, reference, needs, **where) -> MethodSpec:
    return MethodSpec(name, title, reference, frozenset(needs), **where)


REGISTRY: dict[str, MethodSpec] = {
    s.name: s
    for s in (
        _spec(
            "attention",
            "raw attention (a layer's cross-attention, one head or the head mean)",
            "Bahdanau et al. 2015; Vaswani et al. 2017",
            {ATTENTION},
            translation=True,
            caption=True,
            text_rows=True,
            text_layers=True,
        ),
        _spec(
            "rollout",
            "cross-attention × the encoder's attention rollout",
            "Abnar & Zuidema 2020",
            {ATTENTION, ATTENTION_LAYERS},
            translation=True,
            text_rows=True,
            text_layers=True,
        ),
        _spec(
            "attention_norm",
            "attention × ‖transformed value‖: ‖Σ_h α^h_tj f^h(m_j)‖ (RNN attention: α_tj ‖h_j‖)",
            "Kobayashi et al. 2020",
            {RESIDUAL_TRACE},
            translation=True,
            text_rows=True,
            text_layers=True,
            magnitude="‖Σ_h α f(u_j)‖",
        ),
        _spec(
            "value_zeroing",
            "cosine distance of a decoder layer's output when one source piece's values are zeroed",
            "Mohebbi et al. 2023",
            {RESIDUAL_TRACE},
            heavy=True,
            translation=True,
            text_rows=True,
            text_layers=True,
            magnitude="1 − cos(y_i, y_i without token j)",
        ),
        _spec(
            "attention_flow",
            "attention flow: the most attention that can pass from each input token through every layer at once",
            "Abnar & Zuidema 2020, Quantifying attention flow in Transformers",
            {ATTENTION, ATTENTION_LAYERS},
            heavy=True,
            translation=True,
            text_rows=True,
            rows="attnkit.attribution.attention_flow:flow_rows",
            pairs="attnkit.attribution.attention_flow:flow_pairs",
        ),
        _spec(
            "attention_relevance",
            "gradient-weighted attention relevance: R ← R + E_h[(∇A ⊙ A)⁺] R through every layer (translators: the encoder-decoder rules)",
            "Chefer, Gur & Wolf 2021, Generic attention-model explainability",
            {ATTENTION_GRADIENTS},
            heavy=True,
            translation=True,
            text_rows=True,
            rows="attnkit.attribution.attention_relevance:relevance_rows",
            pairs="attnkit.attribution.attention_relevance:relevance_pairs",
        ),
        _spec(
            "alti_plus",
            "ALTI+: every block's output split into per-input terms, composed through both stacks",
            "Ferrando et al. 2022",
            {RESIDUAL_TRACE},
            translation=True,
        ),
        _spec(
            "alti",
            "ALTI, rolled out through every layer",
            "Ferrando et al. 2022, Measuring the mixing of contextual information in the Transformer",
            {RESIDUAL_TRACE},
            text_rows=True,
            text_layers=True,
        ),
        _spec(
            "alti_logit",
            "ALTI-Logit: each token's share of the predicted logit",
            "Ferrando et al. 2023, Explaining how Transformers use context to build predictions",
            {RESIDUAL_TRACE, NEXT_TOKEN},
            heavy=True,
            text_rows=True,
        ),
        _spec(
            "saliency",
            "gradient norm |∂ log p(y_t) / ∂x|",
            "Simonyan et al. 2014",
            {GRADIENTS},
            heavy=True,
            translation=True,
            caption=True,
            text_rows=True,
        ),
        _spec(
            "input_x_gradient",
            "input × gradient x ⊙ ∂ log p(y_t) / ∂x",
            "Shrikumar et al. 2016",
            {GRADIENTS},
            heavy=True,
            translation=True,
            caption=True,
            text_rows=True,
        ),
        _spec(
            "integrated_gradients",
            "integrated gradients from a zero baseline (Gauss-Legendre)",
            "Sundararajan et al. 2017",
            {GRADIENTS},
            heavy=True,
            translation=True,
            caption=True,
            text_rows=True,
        ),
        _spec(
            "logit_lens",
            "logit lens: each block's residual read as a prediction",
            "nostalgebraist 2020",
            {RESIDUAL_TRACE, NEXT_TOKEN},
            text_view=True,
        ),
        _spec(
            "direct_logit",
            "direct logit attribution of every head and MLP",
            "Elhage et al. 2021",
            {RESIDUAL_TRACE, NEXT_TOKEN},
            text_view=True,
        ),
        _spec(
            "routes",
            "information-flow routes",
            "Ferrando & Voita 2024, Information flow routes: automatically interpreting language models at scale",
            {RESIDUAL_TRACE, NEXT_TOKEN},
            heavy=True,
            text_view=True,
        ),
    )
}


def names(*, where: str | None = None, needs: str | None = None, without: str | None = None, heavy: bool | None = None):
    """The registry's names, in its order, that apply ``where`` (``translation``, ``caption``, ``text_rows``,
    ``text_layers``, ``text_view``), need capability ``needs``, do not need ``without``, and are ``heavy``
    or not (None: any): a tuple."""
    return tuple(
        s.name
        for s in REGISTRY.values()
        if (where is None or getattr(s, where))
        and (needs is None or needs in s.needs)
        and (without is None or without not in s.needs)
        and (heavy is None or s.heavy == heavy)
    )


_PLACES = (
    ("translation", "translators"),
    ("caption", "captioners"),
    ("text_rows", "language models' next tokens"),
    ("text_layers", "every layer's map of a text"),
    ("text_view", "one prediction of a language model"),
)


def markdown_table() -> str:
    """The docs' table of every method (``docs/reference/methods.md`` holds it; a test keeps the two equal)."""
    lines = [
        "| method | what it is | reference | needs | cost for a language model in the explorer | applies to |",
        "|---|---|---|---|---|---|",
    ]
    for s in REGISTRY.values():
        where = ", ".join(label for field, label in _PLACES if getattr(s, field))
        needs = ", ".join(sorted(s.needs))
        cost = "heavy (a worker job)" if s.heavy else "light"
        cells = [f"`{s.name}`", s.title, s.reference, needs, cost, where]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
