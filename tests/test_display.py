"""The notebook display registry (:mod:`attnkit.display`): renderers found by class, providers loaded once."""

import pytest

from attnkit import display


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(display, "_RENDERERS", {})
    monkeypatch.setattr(display, "_PROVIDERS", [])
    return display


class Base:
    pass


class Child(Base):
    pass


def test_the_nearest_class_in_the_mro_renders(registry):
    registry.register_html(Base, lambda obj: f"<b>{type(obj).__name__}</b>")
    assert registry.html_for(Child()) == "<b>Child</b>"
    registry.register_html(Child, lambda obj: "<i>child</i>")
    assert registry.html_for(Child()) == "<i>child</i>"
    assert registry.html_for(Base()) == "<b>Base</b>"
    assert registry.html_for(object()) is None  # no renderer: the notebook falls back to repr


def test_providers_run_once_before_the_first_display(registry):
    calls = []

    def load():
        calls.append(1)
        registry.register_html(Base, lambda obj: "loaded")

    registry.add_provider(load)
    assert calls == []  # nothing is imported until something is displayed
    assert registry.html_for(Base()) == "loaded"
    assert registry.html_for(Base()) == "loaded"
    assert calls == [1]


def test_bad_registrations_name_the_argument(registry):
    with pytest.raises(TypeError, match="cls"):
        registry.register_html("Base", str)
    with pytest.raises(TypeError, match="render"):
        registry.register_html(Base, "not callable")
    with pytest.raises(TypeError, match="load"):
        registry.add_provider(None)


def test_the_package_wires_the_explorer_views_for_the_result_types():
    from attnkit.attribution import Attribution
    from attnkit.explorer.notebook import attribution_html, translation_attention_html
    from attnkit.tasks.translation import TranslationAttention

    display.html_for(object())  # runs the package's provider
    assert display._RENDERERS[Attribution] is attribution_html
    assert display._RENDERERS[TranslationAttention] is translation_attention_html
