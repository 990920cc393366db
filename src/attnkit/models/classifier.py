"""A Fashion-MNIST classifier with the captioner encoder's layout, so its conv trunk can start a captioner's."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from ..checks import CANVAS, WIDTH, Range, check_fields
from ..config import ConfigRecord, option
from .captioner import ENCODER_CHANNELS, CNNEncoder, encoder_channels
from .registry import ConfiguredModel, register_model

__all__ = ["ClassifierConfig", "FashionClassifier"]


@dataclass
class ClassifierConfig(ConfigRecord):
    """A Fashion-MNIST classifier whose conv trunk and head have the captioner encoder's layout."""

    channels: list = option(default_factory=lambda: list(ENCODER_CHANNELS), help="conv block widths", cli=False)
    feature_dim: int = option(128, "features before the class layer", check=WIDTH)
    num_classes: int = option(10, "classes", cli=False, check=Range(2))
    canvas: int = option(32, "canvas size in pixels (photos pasted at random offsets)", check=CANVAS)

    def __post_init__(self) -> None:
        self.channels = encoder_channels(self.channels)
        check_fields(self)


@register_model("fashion_classifier")
class FashionClassifier(ConfiguredModel, nn.Module):
    """``CNNEncoder`` (conv blocks + head) → global average pool → linear: one photo → 10 classes.

    Trained with ``attnkit train classifier``; ``attnkit train captioning --encoder-from DIR``
    copies its ``encoder`` into the captioner's, so the grid cells start class-discriminative.
    """

    config_class = ClassifierConfig

    def __init__(self, config: ClassifierConfig):
        super().__init__()
        self.config = config
        self.encoder = CNNEncoder(list(config.channels), config.feature_dim, grid=1)
        self.fc = nn.Linear(config.feature_dim, config.num_classes)

    def forward(self, images: Tensor) -> Tensor:
        x = self.encoder.head(self.encoder.trunk(images))  # (B, D, h, w)
        return self.fc(x.mean((-1, -2)))
