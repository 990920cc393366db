"""The translator protocol, :class:`TranslationEngine`: what every translation engine offers, without torch.

Three engines translate text: the PyTorch :class:`attnkit.tasks.translation.Translator`, the
CTranslate2 :class:`attnkit.deploy.ct2_engine.CT2Translator`, and its explorer adapter
:class:`attnkit.deploy.ct2_explorer.CT2ExplorerTranslator`. Each declares this protocol and satisfies
it, so the evaluation loop, the CLI and the explorer read any of them the same way: the tokenizer,
the subword ids a sentence is read as (:meth:`encode_sources`, after the spelling rewrite), and
:meth:`translate`, which gives one result per sentence with ``translation`` (text), ``tokens``
(subword ids) and ``score`` (log-probability), and with ``return_attention`` the cross-attention
``(T_out, S_in)`` and its pieces. The module imports no torch: the CTranslate2 path must not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["TranslationEngine"]


@runtime_checkable
class TranslationEngine(Protocol):
    """A translation engine (see the module docstring); ``isinstance(x, TranslationEngine)`` checks that
    ``x`` has ``tokenizer``, ``spelling``, ``encode_sources`` and ``translate``."""

    tokenizer: Any
    """The target side's tokenizer (``decode``, ``id_to_piece``, ``bos_id``/``eos_id``)."""

    @property
    def spelling(self) -> str:
        """The spelling the input is rewritten to before tokenizing (``"modern"``: unchanged)."""
        ...

    def encode_sources(self, sentences: Sequence[str], *, truncate: bool = False) -> list[list[int]]:
        """The subword ids each sentence is read as (too long: ``ValueError``, or cut with ``truncate``)."""
        ...

    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam_size: int = 1,
        batch_size: int = 64,
        return_attention: bool = False,
        truncate: bool = False,
    ) -> list:
        """One result per sentence, in order: ``translation``, ``tokens``, ``score``, ``source``, and with
        ``return_attention`` the ``attention (T_out, S_in)`` with ``source_pieces``/``target_pieces``."""
        ...
