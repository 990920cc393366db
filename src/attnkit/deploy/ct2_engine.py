"""Translating with a CTranslate2 export (``--engine ctranslate2``), without torch.

:class:`CT2Translator` reads a folder written by :func:`attnkit.deploy.ct2_export.export_ctranslate2`
(CTranslate2's model, the sentencepiece model, ``attnkit.json``) and translates like
:class:`attnkit.tasks.translation.Translator`: the same source checks, the same batching (sources
sorted by length, batches of 64, at most ``min(200, 2 · longest source + 10)`` tokens decoded per
batch), and results of the same shape (``translation``, ``tokens``, ``score``, ``source`` and, on
request, ``attention (T, S)`` with the pieces). It imports only ``ctranslate2``, ``numpy`` and
``sentencepiece``, so ``attnkit translate --engine ctranslate2`` never pays torch's import.

**Greedy** decoding is the same computation as attnkit's, so a float32 export gives the same tokens.

**Beam search** differs in one formula. attnkit ranks finished hypotheses by ``s / ((5 + L) / 6)^α``
(GNMT, Wu et al. 2016, ``α = 0.6``); CTranslate2 by ``s / L^α``, where ``s`` is the summed
log-probability and ``L`` counts the eos. No ``α`` makes the two rankings equal for every pair of
lengths, so the export carries the ``α`` whose CTranslate2 beam output is closest to attnkit's:
``α = 0.5`` agreed on 197 of the first 200 test verses of the shipped ``transformer-es-en`` at beam 5
(0.6: 187, 0.4: 189). ``score`` here is the raw ``s``, as attnkit reports it (CTranslate2's
penalised score times ``L^α``).

**Attention.** CTranslate2 returns one map per hypothesis: the mean of the alignment heads of the
alignment layer (the export picks the guided head alone for a model trained with guided alignment, else
every head of the last decoder layer, attnkit's own alignment; ``attnkit.json`` says which, and which rows).
:meth:`CT2Translator.forced_alignments` reads it under teacher forcing, which is how
:class:`attnkit.deploy.ct2_align.CT2Aligner` moves a document's tags. Per-layer and per-head maps exist only
in the PyTorch engine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import LENGTH_PENALTY, check
from ..data.tokenizer import Tokenizer, encode_sources
from ..errors import InputError
from ..tasks.engine import TranslationEngine
from ..tasks.results import ResultRecord
from .manifest import DeployError, read_manifest

__all__ = ["ENGINE", "CT2Translation", "CT2Translator", "ct2_available", "ctranslate2_length_penalty", "evaluate_ct2"]


@dataclass
class CT2Translation(ResultRecord):
    """One translated sentence, with the fields of :class:`attnkit.tasks.translation.Translation` (that
    class imports torch; this path must not): ``attention`` is a numpy array ``(T_out, S_in)``. Read by
    attribute, or as a mapping (``r["tokens"]``, ``"attention" in r``; a field that is ``None`` is absent)."""

    translation: str
    tokens: list[int]
    score: float
    source: str | None = None
    attention: Any = None
    source_pieces: list[str] | None = None
    target_pieces: list[str] | None = None


ENGINE = "ctranslate2"


def ct2_available() -> str | None:
    """``None`` when ctranslate2 imports, else the one-line reason it does not."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as exc:
        return f"ctranslate2 is not installed ({exc}); install it with pip install 'attnkit[deploy]'"
    return None


def _device(spec: str | None) -> tuple[str, int]:
    """``--device`` for CTranslate2: ``(device, index)``; auto picks CUDA where CTranslate2 sees one."""
    import ctranslate2

    spec = (spec or "auto").strip()
    if spec == "auto":
        return ("cuda", 0) if ctranslate2.get_cuda_device_count() > 0 else ("cpu", 0)
    kind, _, index = spec.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise DeployError(f"device {spec!r}: the CTranslate2 engine runs on cpu or cuda[:N]")
    if kind == "cuda" and int(index or 0) >= ctranslate2.get_cuda_device_count():
        raise DeployError(f"device {spec!r}: CTranslate2 sees {ctranslate2.get_cuda_device_count()} CUDA device(s)")
    return kind, int(index or 0)


def ctranslate2_length_penalty(alpha: float) -> float:
    """CTranslate2's ``β`` (it ranks by ``score / L^β``) that ranks two lengths like attnkit's GNMT ``α``
    (``score / ((5 + L) / 6)^α``) near 25 pieces, where the slopes ``α / (5 + L)`` and ``β / L`` meet:
    ``β = 5α / 6`` (0.6 ↦ 0.5, measured to give attnkit's beam-5 output on nearly all test verses:
    benchmarks/RESULTS.md, section "attnkit against CTranslate2")."""
    return round(float(check("length_penalty", alpha, LENGTH_PENALTY)) * 5 / 6, 4)


class CT2Translator(TranslationEngine):
    """A CTranslate2 export with its tokenizer; see the module docstring. Build with :meth:`load`.
    A :class:`attnkit.tasks.engine.TranslationEngine`."""

    engine = ENGINE
    model_type = "transformer"

    def __init__(self, translator, tokenizer: Tokenizer, manifest: dict, path: Path):
        self.translator, self.tokenizer, self.manifest, self.path = translator, tokenizer, manifest, path
        self.max_src_len = int(manifest["max_src_len"])
        self.max_len = int(manifest["max_len"])
        self.length_penalty = float(manifest["length_penalty"])
        self.has_vocabulary_map = bool(manifest.get("vocabulary_map"))
        self._pieces = [tokenizer.id_to_piece(i) for i in range(len(tokenizer))]
        # the source spelling the model was trained on (exports made before it was recorded: unchanged input)
        self.source_spelling = str(manifest.get("source_spelling", "modern"))
        self.normalize_spelling = True

    @property
    def spelling(self) -> str:
        """The spelling input is rewritten to before tokenizing (as the PyTorch translator's)."""
        return self.source_spelling if self.normalize_spelling else "modern"

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str | None = "auto", threads: int = 0) -> CT2Translator:
        """Load the export in folder ``path`` on ``device`` (auto, cpu, cuda, cuda:N), computing in the
        type it was exported with; ``threads``: CTranslate2's threads per translation (0: ``$OMP_NUM_THREADS``
        where it is set, as torch reads it, else CTranslate2's default)."""
        reason = ct2_available()
        if reason:
            raise DeployError(reason)
        import ctranslate2

        path = Path(path)
        if not path.is_dir():
            raise DeployError(
                f"model folder {path} does not exist (make one with `attnkit export MODEL OUT --format ctranslate2`)"
            )
        manifest = read_manifest(path, engine=ENGINE)
        kind, index = _device(device)
        if not threads:
            env = os.environ.get("OMP_NUM_THREADS", "")
            threads = int(env) if env.isdigit() else 0
        translator = ctranslate2.Translator(
            str(path), device=kind, device_index=index, compute_type="default", inter_threads=1, intra_threads=threads
        )
        return cls(translator, Tokenizer.load(path / manifest["tokenizer"]), manifest, path)

    @property
    def quantization(self) -> str:
        return str(self.manifest.get("quantization", "?"))

    def encode_sources(self, sentences: Sequence[str], *, truncate: bool = False) -> list[list[int]]:
        """Subword ids of each sentence (see :func:`attnkit.data.tokenizer.encode_sources`)."""
        return encode_sources(self.tokenizer, sentences, self.max_src_len, truncate=truncate, spelling=self.spelling)

    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam_size: int = 1,
        batch_size: int = 64,
        return_attention: bool = False,
        truncate: bool = False,
        use_vocabulary_map: bool = False,
        length_penalty: float | None = None,
    ) -> list[CT2Translation]:
        """Translate ``sentences`` (see the module docstring); ``use_vocabulary_map``: decode over each
        batch's lexical shortlist (the export's ``vmap.txt``, from ``attnkit export --shortlist``);
        ``length_penalty``: attnkit's GNMT ``α`` (as the PyTorch engine takes it), matched to CTranslate2's
        ``β`` by :func:`ctranslate2_length_penalty` (default: the export's own)."""
        results = self.translate_ids(
            self.encode_sources(sentences, truncate=truncate),
            beam_size=beam_size,
            batch_size=batch_size,
            return_attention=return_attention,
            use_vocabulary_map=use_vocabulary_map,
            length_penalty=None if length_penalty is None else ctranslate2_length_penalty(length_penalty),
        )
        for r, s in zip(results, sentences):
            r.source = s
        return results

    def translate_ids(
        self,
        ids: Sequence[Sequence[int]],
        *,
        beam_size: int = 1,
        batch_size: int = 64,
        return_attention: bool = False,
        use_vocabulary_map: bool = False,
        length_penalty: float | None = None,
    ) -> list[CT2Translation]:
        """Translate already-tokenised sources, batching similar lengths as attnkit's Translator does;
        ``length_penalty``: CTranslate2's own ``β`` (default: the export's)."""
        import numpy as np

        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
            raise InputError(f"beam_size must be a positive int, got {beam_size!r}")
        if use_vocabulary_map and not self.has_vocabulary_map:
            raise DeployError(
                f"{self.path} has no vocabulary map; export it with `attnkit export MODEL OUT --format "
                "ctranslate2 --shortlist FILE`"
            )
        alpha = (self.length_penalty if length_penalty is None else float(length_penalty)) if beam_size > 1 else 0.0
        piece, to_id = self._pieces, self.tokenizer.piece_to_id
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: list[CT2Translation | None] = [None] * len(ids)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            longest = max(len(ids[i]) for i in chunk)
            out = self.translator.translate_batch(
                [[piece[t] for t in ids[i]] for i in chunk],
                beam_size=beam_size,
                length_penalty=alpha,
                max_decoding_length=min(self.max_len, 2 * longest + 10),
                max_batch_size=0,
                return_scores=True,
                return_attention=return_attention,
                use_vmap=use_vocabulary_map,
            )
            for i, r in zip(chunk, out):
                tokens = [to_id(p) for p in r.hypotheses[0]]
                finished = len(tokens) < min(self.max_len, 2 * longest + 10)
                length = len(tokens) + int(finished)
                score = float(r.scores[0]) * (length**alpha if length else 1.0)  # back to the summed log-probability
                res = CT2Translation(self.tokenizer.decode(tokens), tokens, score)
                if return_attention:
                    res.attention = np.asarray(r.attention[0], dtype=np.float32).reshape(-1, len(ids[i]))[: len(tokens)]
                    res.source_pieces = [piece[t] for t in ids[i]]
                    res.target_pieces = [piece[t] for t in tokens]
                results[i] = res
        return results  # type: ignore[return-value]

    @property
    def alignment_rows(self) -> str:
        """``"input"`` when the export's alignment is a guided head read at the step whose input is each
        target piece (how it was trained), ``"output"`` when it is read at the step that outputs it."""
        return str(self.manifest.get("alignment", {}).get("rows", "output"))

    def forced_alignment(self, source_ids: Sequence[int], target_ids: Sequence[int]):
        """``(T, S)`` float32: the alignment while the decoder is forced to write ``target_ids``
        (teacher forcing, CTranslate2's ``target_prefix``). Row ``t`` is the step that writes
        ``target_ids[t]``, as :meth:`attnkit.tasks.translation.Translator.attention` has it; for a
        guided alignment head (``"rows": "input"`` in the manifest) it is the step whose input is
        ``target_ids[t]``, the one after: one more forced piece (any: only its step's input
        matters) makes the last piece an input too."""
        if not target_ids:
            raise InputError("target has no tokens: there is no output token to show attention for")
        return self.forced_alignments([(source_ids, target_ids)])[0]

    def forced_alignments(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, batch_size: int = 32):
        """:meth:`forced_alignment` of each ``(source ids, target ids)`` pair (each non-empty), batched:
        one ``translate_batch`` per ``batch_size`` pairs, each row its own ``target_prefix``."""
        import numpy as np

        piece = self._pieces
        shift = int(self.alignment_rows == "input")
        out = []
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            prefixes = [[piece[t] for t in tgt] + [piece[self.tokenizer.unk_id]] * shift for _, tgt in chunk]
            res = self.translator.translate_batch(
                [[piece[t] for t in src] for src, _ in chunk],
                target_prefix=prefixes,
                beam_size=1,
                max_decoding_length=max(len(p) for p in prefixes),
                return_attention=True,
            )
            for (src, tgt), r in zip(chunk, res):
                att = np.asarray(r.attention[0], dtype=np.float32).reshape(-1, len(src))  # (≥ T + shift, S)
                out.append(att[shift : shift + len(tgt)])
        return out


def evaluate_ct2(
    tr: CT2Translator,
    *,
    split: str = "test",
    limit: int | None = None,
    beam_size: int = 1,
    home=None,
    use_vocabulary_map: bool = False,
    modernize: bool = False,
) -> dict:
    """``attnkit evaluate translation --engine ctranslate2``: the PyTorch engine's report
    (:func:`attnkit.tasks.translation.evaluate_translator`) for an export, with ``engine`` and ``quantization``."""
    from ..tasks.translation.translation_quality import evaluate_translator

    report = evaluate_translator(
        tr,
        split=split,
        limit=limit,
        beam_size=beam_size,
        home=home,
        shortlist=use_vocabulary_map,
        options={"use_vocabulary_map": use_vocabulary_map},
        modernize=modernize,
    )
    return {
        "model": str(tr.path),
        "model_type": tr.model_type,
        "engine": ENGINE,
        "quantization": tr.quantization,
        **report,
    }
