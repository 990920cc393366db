"""What ``attnkit train language-model`` will take: every option one field of
:class:`LanguageModelTaskConfig`, and the :class:`~attnkit.models.language_model.LanguageModelConfig`
it sizes for a tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

from ...checks import (
    COUNT,
    FRACTION,
    LAYERS,
    LEARNING_RATE,
    LOSS_WEIGHT,
    MAX_LENGTH,
    PROBABILITY,
    VOCABULARY,
    WIDTH,
    check_fields,
)
from ...config import option
from ...errors import ConfigError
from ...models.language_model import LanguageModelConfig
from ...training.run_config import RunConfig, TaskConfig, run_options

#: ``--shape``: GPT-2's (learned positions, LayerNorm, GELU MLP, biases) or Llama's (RoPE, RMSNorm,
#: SwiGLU, no biases, grouped-query attention).
SHAPES = ("gpt2", "llama")


@dataclass
class LanguageModelTaskConfig(TaskConfig):
    """Everything ``attnkit train language-model`` takes, saved as ``train_config.json`` beside the checkpoints.

    The text is one side of a corpus (``data``, ``side``) as a token stream with **bos before each
    text** and eos after it (:mod:`.data`), cut into blocks of ``context`` tokens. The model fields
    become a :class:`LanguageModelConfig` in :meth:`model_config` (its ``vocab_size`` is the
    tokenizer's and its ``max_len`` is ``context``).
    """

    data: str = option(
        "bible",
        "the text: bible (built in; --side en or es) or the NAME of a corpus prepared with `attnkit data prepare`",
    )
    side: str = option("en", "which side of the corpus is the text: src, tgt, or one of its two languages (en, es)")
    vocab_size: int | None = option(
        None,
        "bible: size of its sentencepiece vocabulary (default: 8000); a prepared corpus has its own",
        check=VOCABULARY,
    )
    limit_train: int | None = option(None, "train on the first N texts of the train split only", check=COUNT)
    context: int = option(256, "tokens per training block: the longest sequence the model reads", check=MAX_LENGTH)
    batch_size: int = option(32, "blocks per batch", check=COUNT)
    lr: float = option(3e-4, "AdamW's peak learning rate (reached at the end of warm-up)", check=LEARNING_RATE)
    warmup_fraction: float = option(0.05, "the share of the budget's steps spent warming up", check=PROBABILITY)
    weight_decay: float = option(
        0.1,
        "AdamW's decoupled weight decay, on the matrices and embeddings (not on norms and biases)",
        check=LOSS_WEIGHT,
    )
    valid_blocks: int = option(
        64,
        "validate on the first N blocks of the valid split (loss and perplexity; the first 8 also give the "
        "in-context-learning score)",
        check=COUNT,
    )
    repeats: float = option(
        0.0,
        "the share of training blocks replaced by random tokens repeated at a period drawn from "
        "--repeat-min..--repeat-max: text only an induction head predicts (Olsson et al. 2022), which makes one "
        "form within minutes",
        check=FRACTION,
    )
    repeat_min: int = option(8, "--repeats: the shortest period of a repeated sequence", check=COUNT)
    repeat_max: int = option(64, "--repeats: the longest period of a repeated sequence", check=COUNT)
    shape: str = option("llama", "the model's shape", choices=SHAPES)
    layers: int = option(4, "transformer blocks", check=LAYERS)
    heads: int = option(4, "attention heads per block", check=LAYERS)
    kv_heads: int | None = option(
        None, "llama: key/value heads (grouped-query attention; must divide --heads) (default: --heads)", check=LAYERS
    )
    d_model: int = option(256, "the width of the residual stream", check=WIDTH)
    d_ff: int | None = option(
        None, "the MLP's hidden width (default: 4×d_model for gpt2, SwiGLU's 8/3×d_model for llama)", check=WIDTH
    )
    attention_only: bool = option(False, "no MLP blocks (Olsson et al.'s attention-only models)")
    dropout: float = option(0.0, "dropout", check=PROBABILITY)
    run: RunConfig = run_options(epochs=10, save_every_steps=500, keep_last=3, clip_grad_norm=1.0)

    def __post_init__(self) -> None:
        if self.run.out_dir is None:
            self.run.out_dir = "runs/language-model"
        check_fields(self)
        if self.shape not in SHAPES:
            raise ConfigError(f"shape must be one of {', '.join(SHAPES)}; got {self.shape!r}")
        if self.repeats > 0 and not self.repeat_min <= self.repeat_max <= self.context:
            raise ConfigError(
                f"--repeat-min {self.repeat_min} and --repeat-max {self.repeat_max} must satisfy "
                f"min <= max <= --context {self.context}"
            )
        if self.kv_heads is not None and self.shape != "llama":
            raise ConfigError("kv_heads (grouped-query attention) needs shape llama")
        self.model_config(8)  # the model's own checks (heads divide d_model, kv_heads divide heads), named now

    def model_config(self, vocab_size: int) -> LanguageModelConfig:
        """The model's config for a tokenizer of ``vocab_size`` pieces; a model error is a :class:`ConfigError`."""
        try:
            return LanguageModelConfig(
                vocab_size=vocab_size,
                d_model=self.d_model,
                n_layers=self.layers,
                n_heads=self.heads,
                n_kv_heads=self.kv_heads,
                d_ff=self.d_ff,
                max_len=self.context,
                shape=self.shape,
                attention_only=self.attention_only,
                dropout=self.dropout,
            )
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(str(e)) from e
