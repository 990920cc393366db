"""A Fashion-MNIST classifier with the captioner encoder's layout, so its conv trunk can start a captioner's."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import Tensor, nn

from ..config import config_from_json, option
from .captioner import CNNEncoder
from .registry import register_model

__all__ = ["ClassifierConfig", "FashionClassifier"]


@dataclass
class ClassifierConfig:
    """A Fashion-MNIST classifier whose conv trunk and head have the captioner encoder's layout."""

    channels: list = option(default_factory=lambda: [32, 64, 96], help="conv block widths", cli=False)
    feature_dim: int = option(128, "features before the class layer")
    num_classes: int = option(10, "classes", cli=False)
    canvas: int = option(32, "canvas size in pixels (photos pasted at random offsets)")

    def to_dict(self) -> dict:
        return asdict(self)


@register_model("fashion_classifier")
class FashionClassifier(nn.Module):
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

    @classmethod
    def from_config(cls, config: dict | ClassifierConfig) -> "FashionClassifier":
        return cls(config if isinstance(config, ClassifierConfig) else config_from_json(ClassifierConfig, config))

    def to_config(self) -> dict:
        return {**self.config.to_dict(), "model_type": self.model_type}

    def forward(self, images: Tensor) -> Tensor:
        x = self.encoder.head(self.encoder.trunk(images))  # (B, D, h, w)
        return self.fc(x.mean((-1, -2)))
