"""Captioning with Show, Attend and Tell: data, training, captioning, evaluating.

The glue between the Fashion-MNIST scenes (:mod:`attnkit.data.datasets.scenes`) or photos with Karpathy-format
captions (:mod:`attnkit.data.karpathy`), the model (:mod:`attnkit.models.captioner`), the shared trainer and the shared decoding, in the shape every
task has: ``config`` (the task's options nesting the model's config), ``data`` (batches, input
files), ``loss``, ``inference`` (the wrapper people use: :class:`Captioner`), ``metrics``,
``caption_quality`` (evaluation), ``train``, and the ``demo`` part. The CLI (``attnkit train captioning``, ``caption``,
``evaluate captioning``) and ``make demo`` call these.
"""

from .caption_quality import evaluate_captioning
from .config import VOCAB_FILE, CaptioningConfig
from .data import collate_photo_captions, load_image_file, photo_caption_batches, scene_batches, scene_order
from .demo import caption_demo, overlay_for_scene
from .inference import Caption, Captioner
from .loss import caption_loss_fn, update_reward_baseline
from .metrics import attention_correctness, attention_mass_in_box, caption_scores, words_to_items
from .train import build_captioner, train_captioning, warm_start

__all__ = [
    "VOCAB_FILE",
    "Caption",
    "Captioner",
    "CaptioningConfig",
    "attention_correctness",
    "attention_mass_in_box",
    "build_captioner",
    "caption_demo",
    "caption_loss_fn",
    "caption_scores",
    "collate_photo_captions",
    "evaluate_captioning",
    "load_image_file",
    "overlay_for_scene",
    "photo_caption_batches",
    "scene_batches",
    "scene_order",
    "train_captioning",
    "update_reward_baseline",
    "warm_start",
    "words_to_items",
]
