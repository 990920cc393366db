"""What ``attnkit train captioning`` takes: the task's options and, nested, the model's config."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...checks import COUNT, LEARNING_RATE, between, check_fields
from ...config import option
from ...data.vocab import VOCAB_FILENAME
from ...errors import ConfigError
from ...models.captioner import CaptionerConfig
from ...training.run_config import RunConfig, TaskConfig, run_options

VOCAB_FILE = VOCAB_FILENAME  # a captioner checkpoint keeps its vocabulary under the scenes' file name


def _default_model() -> CaptionerConfig:
    return CaptionerConfig()


@dataclass
class CaptioningConfig(TaskConfig):
    """The training options of a captioner and its model's config (``model_config``, whose fields
    are flags too: ``--attention hard``, ``--hidden-dim 256``). Saved as ``train_config.json``.

    ``captions`` and ``images`` train on photos captioned in a Karpathy-split JSON instead of the scenes
    (read as grayscale ``canvas × canvas`` inputs, as ``attnkit caption`` reads image files).
    The model's ``vocab_size`` comes from the training captions' vocabulary and its ``grid`` from the canvas
    (one conv block halves it: ``canvas / 2^len(channels)``), in :func:`attnkit.tasks.captioning.build_captioner`.
    """

    batch_size: int = option(32, "scenes per batch", check=COUNT)
    lr: float = option(2e-3, "Adam's learning rate", check=LEARNING_RATE)
    scenes_per_epoch: int | None = option(
        4000,
        "scenes (or image-caption pairs, with --captions) per epoch: a "
        "validation and a `best` checkpoint this often; 0: one whole pass",
        check=between(0, COUNT.high, integer=True),
    )
    valid_scenes: int = option(
        300, "validation scenes (or `val` images, with --captions) captioned at every validation", check=COUNT
    )
    limit_train: int | None = option(None, "train on the first N scenes (or images) only", check=COUNT)
    captions: str | None = option(
        None,
        "train on photos instead of the scenes: a Karpathy-split caption JSON "
        "(Flickr8k, Flickr30k, COCO); its `val` images validate",
        metavar="JSON",
    )
    images: str | None = option(None, "the folder of the --captions images", metavar="DIR")
    encoder_from: str | None = option(
        None, "a `train classifier` checkpoint (a model name or a folder) whose conv trunk starts the encoder"
    )
    init_from: str | None = option(
        None, "warm start from a captioner (a model name or a checkpoint folder; every weight whose shape fits)"
    )
    model_config: CaptionerConfig = option(default_factory=_default_model, help="the model's config")
    run: RunConfig = run_options(epochs=30, save_every_steps=200, clip_grad_norm=5.0)

    def __post_init__(self) -> None:
        if isinstance(self.model_config, dict):
            self.model_config = CaptionerConfig.from_dict(self.model_config)
        if not isinstance(self.model_config, CaptionerConfig):
            raise ConfigError(f"model_config must be a CaptionerConfig, got {type(self.model_config).__name__}")
        check_fields(self)
        if (self.captions is None) != (self.images is None):
            raise ConfigError(
                "captions and images go together: give both (a Karpathy JSON and its image folder) "
                "or neither (the scenes)"
            )
        if self.run.out_dir is None:
            self.run.out_dir = f"runs/captioner-{self.model_config.attention}"

    def to_dict(self) -> dict:
        return asdict(self)
