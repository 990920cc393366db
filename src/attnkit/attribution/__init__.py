"""Beyond attention weights: which source pieces (or image cells) each output word used, by several methods.

One result type (:class:`Attribution`: ``(T, S)`` rows that sum to 1, under forced decoding of a
given or generated target), one registry of method names (:data:`METHODS`), two entry points:
:func:`explain` for translators and :func:`explain_caption` for captioners.

| method | what | models |
|---|---|---|
| ``attention`` | a layer's cross-attention (one head or the head mean); RNN attention's α | with attention |
| ``rollout`` | cross-attention × the encoder's rollout (Abnar & Zuidema 2020) | Transformer, HF encoder-decoders |
| ``attention_norm`` | ‖α f(x)‖ (Kobayashi et al. 2020) | with attention; HF: LayerNorm blocks |
| ``value_zeroing`` | a decoder layer's output change when a source piece's values are zeroed (Mohebbi et al. 2023) | Transformer; HF: LayerNorm blocks |
| ``alti_plus`` | ALTI+ (Ferrando et al. 2022) | Transformer; HF: LayerNorm blocks |
| ``saliency``, ``input_x_gradient``, ``integrated_gradients`` | gradients of log p(y_t) through Captum | every translator and captioner |

HF LayerNorm blocks: Hugging Face Marian and BART (post-norm), mBART, M2M100/NLLB and Pegasus (pre-norm), traced by
:mod:`attnkit.hf.decomposition`; not T5, whose RMSNorm and relative position bias do not fit.

:func:`explain_generation` attributes a decoder-only Hugging Face model's own continuation (GPT-2, Llama)
to the tokens before each generated one (:mod:`.generation`).

Interventions ask whether a head matters rather than where it looks: :mod:`.interventions` ablates (zero,
mean, resample), patches or gates any head of attnkit's language models and Transformer translators for one
``with`` block; :mod:`.intervention_effects` reports what that changes in a prediction or a translation;
:mod:`.head_importance` scores every head of a translator by ablation and by Michel et al. (2019)'s gate
gradient (``attnkit heads``).
"""

from .forced import ForcedCaption, ForcedTranslation, forced_caption, forced_translation
from .generation import GENERATION_METHODS, explain_generation
from .gradients import DEFAULT_STEPS
from .methods import METHODS, Method, UnknownMethodError, canonical_method, explain, explain_caption, methods_for
from .result import Attribution, normalise_rows

__all__ = [
    "DEFAULT_STEPS",
    "GENERATION_METHODS",
    "METHODS",
    "Attribution",
    "ForcedCaption",
    "ForcedTranslation",
    "Method",
    "UnknownMethodError",
    "canonical_method",
    "explain",
    "explain_caption",
    "explain_generation",
    "forced_caption",
    "forced_translation",
    "methods_for",
    "normalise_rows",
]
