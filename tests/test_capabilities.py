"""What a model can do, as protocols (:mod:`attnkit.tasks.capabilities`), and its kind derived from them
(:func:`attnkit.service.model.kind_of`): on every shipped model and on tiny Hugging Face models of each kind,
each wrapper satisfies the protocols of what it does and no other, the kind ``open_model`` gives is the
derived one, and a :class:`Model` whose kind and wrapper disagree is refused in one line."""

from __future__ import annotations

import pytest

from attnkit.service import Model, ModelKind, ModelSpec, open_model
from attnkit.service.model import kind_of, text_model
from attnkit.tasks.capabilities import Captions, ContinuesText, ReadsText, Translates
from hf_tiny import saved_tiny

SHIPPED = {
    "transformer-es-en": (ModelKind.TRANSLATOR, {Translates}),
    "rnnsearch-es-en": (ModelKind.TRANSLATOR, {Translates}),
    "rnnencdec-es-en": (ModelKind.TRANSLATOR, {Translates}),
    "captioner-soft": (ModelKind.CAPTIONER, {Captions}),
    "captioner-hard": (ModelKind.CAPTIONER, {Captions}),
    "lm-4l-en": (ModelKind.LANGUAGE_MODEL, {ReadsText, ContinuesText}),
    "attention-only-2l-en": (ModelKind.LANGUAGE_MODEL, {ReadsText, ContinuesText}),
}
ALL = (Translates, Captions, ReadsText, ContinuesText)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_shipped_model_has_the_protocols_of_what_it_does_and_its_kind_follows(name):
    kind, protocols = SHIPPED[name]
    model = open_model(name)
    assert {p for p in ALL if isinstance(model.impl, p)} == protocols
    assert kind_of(model.impl) is kind is model.kind
    assert all(model.can(p) == (p in protocols) for p in ALL)


@pytest.mark.parametrize(
    ("family", "kind", "writes"),
    [
        ("marian", ModelKind.TRANSLATOR, None),
        ("bert", ModelKind.SELF_ATTENTION, False),
        ("gpt2", ModelKind.SELF_ATTENTION, True),
    ],
)
def test_hugging_face_models_get_their_kind_from_their_protocols(family, kind, writes):
    model = open_model(str(saved_tiny(family)))
    assert kind_of(model.impl) is kind is model.kind
    if writes is not None:  # a text model: it reads text; whether it writes is its can_generate
        assert model.can(ReadsText) and model.can(ContinuesText) and model.impl.can_generate is writes
        assert not model.can(Translates) and not model.can(Captions)


def test_a_model_whose_kind_and_wrapper_disagree_is_refused():
    lm = open_model("lm-4l-en").impl
    with pytest.raises(TypeError, match=r"kind TRANSLATOR but its impl .* is a LANGUAGE_MODEL model"):
        Model("lm", ModelKind.TRANSLATOR, lm, ModelSpec("lm"))
    hf = open_model(str(saved_tiny("gpt2"))).impl
    with pytest.raises(TypeError, match=r"kind LANGUAGE_MODEL but its impl .* is a SELF_ATTENTION model"):
        Model("twin", ModelKind.LANGUAGE_MODEL, hf, ModelSpec("twin"))  # a transformers twin is not attnkit's model
    assert text_model("lm", lm).kind is ModelKind.LANGUAGE_MODEL
    assert text_model("hf", hf).kind is ModelKind.SELF_ATTENTION
    with pytest.raises(TypeError, match="impl must be a text model"):
        text_model("tr", open_model("transformer-es-en").impl)
    assert kind_of(object()) is None
