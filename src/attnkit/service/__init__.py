"""One way in: every front end (the CLI, the server and its workers, the notebook, the Python API) opens a
model with :func:`open_model` and analyses an input with :func:`analyse`, passing typed records.

- :func:`open_model`: the one place a model is loaded (any kind, any engine), returning a :class:`Model`;
  :func:`model_folder`: only the folder a model argument means, for commands that read its files.
- :class:`Model`: a loaded model of a known :class:`ModelKind`, with the :class:`ModelSpec` that loads it
  again (in a worker process, or at a training run's newer checkpoint).
- :func:`repeated_attention`: a language model's maps and induction scores on random tokens repeated twice
  (the induction stripe), for notebooks: ``analyse`` of a :class:`RepeatedRequest`.
- :mod:`attnkit.service.head_step` (imported on its own, as it needs torch, which this package does not: a
  CTranslate2 command imports it without torch): ``head_step``, one head at one query step by step (q, K,
  V, the mask, the scale, the weights, the head's output and its slice of the concatenation), a
  ``HeadStep``: the explorer's step-through view.
- ``Request`` records say what to analyse and which views to compute; an ``Analysis`` holds what was
  computed (tokens, maps, attributions, alignment, timings); the server's payloads and the CLI's output
  are pure functions of an ``Analysis``.
"""

from .analyse import analyse, check_method
from .analysis import (
    Analysis,
    CaptionAnalysis,
    GenerationAnalysis,
    GuidedLinks,
    LMViewAnalysis,
    RepeatedAnalysis,
    TranslationAnalysis,
)
from .model import Model, ModelKind, ModelSpec, text_model
from .open import model_folder, model_kind, newest_spec, open_model
from .repeated import repeated_attention
from .requests import (
    CaptionRequest,
    GenerationRequest,
    LMViewRequest,
    MethodOptions,
    RepeatedRequest,
    Request,
    TranslationRequest,
)

__all__ = [
    "Analysis",
    "CaptionAnalysis",
    "CaptionRequest",
    "GenerationAnalysis",
    "GenerationRequest",
    "GuidedLinks",
    "LMViewAnalysis",
    "LMViewRequest",
    "MethodOptions",
    "Model",
    "ModelKind",
    "ModelSpec",
    "RepeatedAnalysis",
    "RepeatedRequest",
    "Request",
    "TranslationAnalysis",
    "TranslationRequest",
    "analyse",
    "check_method",
    "model_folder",
    "model_kind",
    "newest_spec",
    "open_model",
    "repeated_attention",
    "text_model",
]
