"""The base of the typed inference results, without torch (the CTranslate2 engine's results use it too)."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ResultRecord"]


class ResultRecord:
    """Base of the typed inference results (:class:`attnkit.tasks.translation.Translation`,
    :class:`attnkit.tasks.captioning.Caption`): read them by attribute (``r.attention is None`` when
    not requested). Mapping reads (``r["translation"]``, ``"attention" in r``) still work, for code
    written against the plain dicts these results used to be; a field that is ``None`` is absent."""

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if isinstance(key, str) and not key.startswith("_") else None
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and not key.startswith("_") and getattr(self, key, None) is not None

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]  # type: ignore[arg-type]
