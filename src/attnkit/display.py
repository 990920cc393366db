"""Rich display in notebooks, wired without upward imports: a registry of HTML renderers by type.

Result types live low in the layer order (:class:`attnkit.attribution.Attribution`,
:class:`attnkit.tasks.translation.TranslationAttention`); the inline views that show them are built
by :mod:`attnkit.explorer`, near the top. A result's ``_repr_html_`` asks :func:`html_for` here;
the explorer registers its renderers (:func:`register_html`) when :mod:`attnkit.explorer.notebook`
is imported, and the package root (:mod:`attnkit`, the top of the order) names that module as the
provider to load on the first display (:func:`add_provider`), so a result shows itself even in a
session that never imported the explorer. Nothing here imports torch or another attnkit module.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["add_provider", "html_for", "register_html"]

_RENDERERS: dict[type, Callable[[object], str]] = {}
_PROVIDERS: list[Callable[[], object]] = []


def register_html(cls: type, render: Callable[[object], str]) -> None:
    """Show instances of ``cls`` (and of its subclasses) in notebooks as ``render(obj)`` (an HTML string)."""
    if not isinstance(cls, type):
        raise TypeError(f"cls must be a class, got {type(cls).__name__}")
    if not callable(render):
        raise TypeError(f"render must be callable, got {type(render).__name__}")
    _RENDERERS[cls] = render


def add_provider(load: Callable[[], object]) -> None:
    """Call ``load()`` (which imports a module that registers renderers) once, before the first display."""
    if not callable(load):
        raise TypeError(f"load must be callable, got {type(load).__name__}")
    _PROVIDERS.append(load)


def html_for(obj: object) -> str | None:
    """The HTML of ``obj`` from the renderer registered for the nearest class in its MRO, or ``None``
    when there is none (a notebook then falls back to ``repr``)."""
    while _PROVIDERS:
        _PROVIDERS.pop(0)()
    for cls in type(obj).__mro__:
        render = _RENDERERS.get(cls)
        if render is not None:
            return render(obj)
    return None
