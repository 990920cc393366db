"""What ``attnkit train translation`` takes: the task's options and, nested, the model's config."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

from ...checks import COUNT, LEARNING_RATE, MAX_LENGTH, POSITIVE_WEIGHT, PROBABILITY, STEPS, VOCABULARY, check_fields
from ...config import config_from_dict, config_from_json, option, option_names
from ...errors import ConfigError
from ...models.registry import model_class
from ...models.seq2seq import Seq2SeqConfig
from ...models.transformer import TransformerConfig
from ...training.run_config import RunConfig, TaskConfig, run_options

#: The models ``attnkit train translation --model`` accepts (registry names). A new translation
#: model is added here and in the registry; the CLI, the decoders and the viewers need no edit.
TRANSLATION_MODELS = ("rnnsearch", "rnnencdec", "transformer")

#: Each model's training recipe: what ``lr`` and the batching are when they are not given. The RNNs'
#: were measured (``benchmarks/rnn_recipe.py``, benchmarks/RESULTS.md): Adam at 3e-3 on batches of
#: 2,048 tokens learns far faster per second than 1e-3 on 64 verses. The Transformer keeps its
#: warm-up peak of 1e-3 on 64-verse batches.
RECIPES = {
    "rnnsearch": {"lr": 3e-3, "max_tokens": 2048},
    "rnnencdec": {"lr": 3e-3, "max_tokens": 2048},
    "transformer": {"lr": 1e-3, "batch_size": 64, "warmup_steps": 2000},
}

#: ``--lr-schedule``: auto fits warm-up and decay to a short budget (one that ends the run within
#: :data:`attnkit.training.budget.SHORT_RUN_EPOCHS` epochs) and keeps the recipe otherwise, or when
#: ``--warmup-steps`` is given; budget always fits; recipe never does.
LR_SCHEDULES = ("auto", "budget", "recipe")


def model_config_class(model: str) -> type:
    """The config dataclass of translation model ``model`` (its class's ``config_class``)."""
    if model not in TRANSLATION_MODELS:
        raise ConfigError(f"model must be one of {', '.join(TRANSLATION_MODELS)}; got {model!r}")
    return model_class(model).config_class


@dataclass
class TranslationConfig(TaskConfig):
    """Everything ``attnkit train translation`` takes: the task's options and, nested, the model's
    config (``model_config``, a :class:`Seq2SeqConfig` or :class:`TransformerConfig`). Saved as
    ``train_config.json`` beside the checkpoints.

    Two model fields are derived from the task, in :meth:`sized_model_config` only: the model's
    ``vocab_size`` is the tokenizer's, and its ``max_src_len`` is ``max_len`` (a Transformer's
    position table is made at least that long).
    """

    model: str = option("rnnsearch", "the model to train", choices=TRANSLATION_MODELS)
    data: str = option(
        "bible",
        "the corpus: bible (built in, Spanish→English) or the NAME of one prepared with "
        "`attnkit data prepare parallel NAME`",
    )
    vocab_size: int | None = option(
        None,
        "bible: size of its joint sentencepiece vocabulary (default: 8000); "
        "a prepared corpus has its own (`data prepare parallel --vocab-size`)",
        check=VOCABULARY,
    )
    max_len: int = option(
        100, "drop training pairs longer than this many subword tokens; the model's longest source", check=MAX_LENGTH
    )
    limit_train: int | None = option(None, "train on the first N training pairs only", check=COUNT)
    batch_size: int | None = option(
        None,
        "at most this many verse pairs per batch (with neither this nor "
        "--max-tokens: the model's recipe, 2,048 tokens for the RNNs, 64 pairs "
        "for the Transformer)",
        check=COUNT,
    )
    max_tokens: int | None = option(None, "at most about this many padded tokens per batch", check=COUNT)
    lr: float | None = option(
        None,
        "Adam's learning rate; for the Transformer the peak, reached at the end of "
        "warm-up (default: the model's recipe, 3e-3 for the RNNs, 1e-3 for the Transformer)",
        check=LEARNING_RATE,
    )
    warmup_steps: int | None = option(
        None,
        "Transformer: linear warm-up steps before the 1/sqrt(step) decay (default: the recipe's 2,000; "
        "given, the schedule is kept as given, with a warning when the budget cannot finish the warm-up)",
        check=STEPS,
    )
    lr_schedule: str = option(
        "auto",
        "budget: a short warm-up, then linear decay to 0 exactly at the end of the budget (--max-time-s, "
        "--max-steps or --epochs; Li et al. 2020); recipe: the model's own; auto: budget for a run its budget "
        "ends within 3 epochs, unless --warmup-steps is given",
        choices=LR_SCHEDULES,
    )
    warmup_fraction: float = option(
        0.05, "budget schedule: the share of the budget's steps spent warming up", check=PROBABILITY
    )
    label_smoothing: float = option(0.1, "label smoothing of the cross-entropy", check=PROBABILITY)
    valid_bleu_sentences: int = option(300, "validation verses translated for BLEU at every validation", check=COUNT)
    guided_alignment: str | None = option(
        None,
        "guided alignment (Garg et al. 2019): a file of Pharaoh word links, one line per training pair in "
        "order (`attnkit data links`), that one cross-attention head learns to follow",
    )
    guided_alignment_weight: float = option(0.05, "λ, the weight of the guided alignment loss", check=POSITIVE_WEIGHT)
    init_from: str | None = option(
        None,
        "fine-tune: start from this translation model's weights (a model name or a checkpoint folder) with a "
        "new optimizer and schedule; the model options must give its sizes and the corpus its tokenizer",
    )
    model_config: Seq2SeqConfig | TransformerConfig | None = option(None, "the model's config", cli=False)
    run: RunConfig = run_options(epochs=10, save_every_steps=500, patience=3, keep_last=3, clip_grad_norm=1.0)

    def __post_init__(self) -> None:
        cls = model_config_class(self.model)
        if self.model_config is None:
            self.model_config = cls()
        elif isinstance(self.model_config, dict):
            self.model_config = config_from_json(cls, self.model_config)
        if not isinstance(self.model_config, cls):
            raise ConfigError(
                f"model_config must be a {cls.__name__} for model {self.model!r}, "
                f"got {type(self.model_config).__name__}"
            )
        if self.run.out_dir is None:
            self.run.out_dir = f"runs/{self.model}"
        recipe = RECIPES[self.model]
        if self.lr is None:
            self.lr = recipe["lr"]
        if self.warmup_steps is not None and self.lr_schedule == "auto":
            self.lr_schedule = "recipe"  # a schedule given stays as given
        if self.batch_size is None and self.max_tokens is None:
            self.batch_size, self.max_tokens = recipe.get("batch_size"), recipe.get("max_tokens")
        check_fields(self)
        self._check_guided()

    def _check_guided(self) -> None:
        """Guided alignment needs attention; a Transformer's supervised head defaults to the
        penultimate layer's first (Garg et al. 2019), recorded in the model's config."""
        mc = self.model_config
        if self.guided_alignment is None:
            return
        if self.model == "rnnencdec":
            raise ConfigError("guided alignment supervises attention; rnnencdec has none (use rnnsearch)")
        if isinstance(mc, TransformerConfig):
            if mc.alignment_layer is None:
                mc.alignment_layer = max(1, mc.num_decoder_layers - 1)
            if mc.alignment_head is None:
                mc.alignment_head = 1
            mc.validate()

    def recipe_warmup_steps(self) -> int:
        """The Transformer's warm-up: ``warmup_steps`` when given, else its recipe's."""
        return self.warmup_steps if self.warmup_steps is not None else RECIPES["transformer"]["warmup_steps"]

    def guided(self):
        """The :class:`~.guided.GuidedAlignment` the loss applies, or None without guided alignment."""
        from .guided import GuidedAlignment, guided_input_step

        if self.guided_alignment is None:
            return None
        mc = self.model_config
        return GuidedAlignment(
            self.guided_alignment_weight,
            getattr(mc, "alignment_layer", None),
            getattr(mc, "alignment_head", None),
            guided_input_step(mc),
        )

    @classmethod
    def from_options(cls, model: str = "rnnsearch", **options) -> TranslationConfig:
        """Build from flat options, as the command line gives them: each name goes to the task or to
        the model's config, whichever has it (``TranslationConfig.from_options("transformer",
        d_model=128, lr=5e-4)``). A name neither has is a :class:`ConfigError`."""
        mcls = model_config_class(model)
        task_names, model_names = option_names(cls), option_names(mcls)
        run_names = {f.name for f in dataclasses.fields(RunConfig)}
        unknown = set(options) - task_names - model_names - run_names
        if unknown:
            raise ConfigError(f"{', '.join(sorted(unknown))}: not an option of the {model} model or of training")
        model_config = config_from_dict(mcls, {k: v for k, v in options.items() if k in model_names})
        run = dataclasses.replace(cls().run, **{k: v for k, v in options.items() if k in run_names})
        task = {k: v for k, v in options.items() if k in task_names and k not in run_names}
        return cls(model=model, model_config=model_config, run=run, **task)

    def sized_model_config(self, vocab_size: int, *, src_vocab_size: int | None = None, corpus=None):
        """The model config for a tokenizer of ``vocab_size`` (see the class docstring); with a
        :class:`attnkit.data.corpus.Corpus`, its languages and name too, and ``src_vocab_size`` for
        separate source and target vocabularies."""
        extra = (
            {"max_len": max(self.model_config.max_len, self.max_len)} if hasattr(self.model_config, "max_len") else {}
        )
        if corpus is not None:
            extra.update(src_lang=corpus.src_lang, tgt_lang=corpus.tgt_lang, corpus=corpus.name)
        return dataclasses.replace(
            self.model_config, vocab_size=vocab_size, src_vocab_size=src_vocab_size, max_src_len=self.max_len, **extra
        )

    def to_dict(self) -> dict:
        return asdict(self)
