"""The fine-tuning recipe's settings (docs/specification.md §Fine-tuning: the paper's Table 7) and
the defaults that depend on the task and the model's size.

It sits with the tasks, below fine-tuning, because what stands between them reads it too: the
fine-tuned folder keeps it in `finetune.json` (`electra.folders.finetuned`) and a Hugging Face
task folder is read into one (`electra.hf.from_transformers`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from electra.config import OptimConfig, RuntimeConfig
from electra.errors import ElectraError
from electra.model.configs import AnyModelConfig
from electra.overrides import none_for_unset, unknown_key, with_values
from electra.tasks.settings import (
    FAMILIES,
    ClassificationSettings,
    QaSettings,
    TaggingSettings,
)


@dataclass
class FinetuneConfig(OptimConfig, RuntimeConfig):
    """The fine-tuning recipe (docs/specification.md §Fine-tuning: the paper's Table 7), plus the
    shared optimizer and runtime settings. None (unset) means "the default for this task or model
    size", resolved by `resolve_recipe` and saved resolved; a 0 there (the old spelling of unset,
    in a finetune.json or on the command line) still means it."""

    lr: float | None = None  # unset: by model size, small 3e-4, base 1e-4, large 5e-5
    weight_decay: float = 0.0  # paper 0; the official code 0.01
    warmup_proportion: float = 0.1
    layerwise_lr_decay: float | None = None  # unset: 0.8; large 0.9
    # The official code gives the top layer lr * decay^2 (docs/specification.md §Fine-tuning,
    # issue #51); off by default.
    layerwise_off_by_one: bool = False
    batch_size: int = 32  # examples per step
    epochs: int | None = None  # unset: 3; RTE and STS-B 10; SQuAD 2
    max_seq_len: int | None = None  # unset: 128; SQuAD 512
    dropout: float = 0.1  # the encoder's and the head's
    # The official code sums per-example losses over the batch (then clips at 1.0); "mean" averages.
    loss_reduction: str = "sum"
    double_unordered: bool = False  # add swapped copies of MRPC and STS-B training pairs
    seed: int = 0  # runs use seeds seed, seed+1, ...
    seeds: int = 1  # fine-tuning runs, each scored; the summary gives their median
    max_train_examples: int | None = None  # unset: all; else a seeded random subset
    # Where the data has no dev file (one file, or a folder or --train without dev): this fraction
    # of the training file's examples, drawn with `seed`, is held out of training and scored as
    # dev (e.g. 0.1); unset, such data is refused rather than scored on its own training rows.
    dev_split: float | None = None
    # A dev or test row whose text is a training row's is left out of the score and counted,
    # instead of refusing the run (electra.finetuning.overlap)
    drop_overlap: bool = False
    # The same architecture from random weights (the no-pretraining baseline).
    random_init: bool = False
    # Training batches of GLUE tasks packed several examples to a row (electra.finetuning.packing): the same
    # encoder arithmetic as padded rows, without computing the padding. Under cuda_graph, batches
    # are padded to a few widths (powers of two from 32) instead, one graph per width.
    pack: bool = True
    # --- each task family's own settings (electra.tasks.settings), flat on the command line
    qa: QaSettings = field(default_factory=QaSettings)
    classification: ClassificationSettings = field(default_factory=ClassificationSettings)
    tagging: TaggingSettings = field(default_factory=TaggingSettings)

    UNSET_WAS: ClassVar[dict[str, Any]] = {
        "lr": 0.0,
        "layerwise_lr_decay": 0.0,
        "epochs": 0,
        "max_seq_len": 0,
        "max_train_examples": 0,
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        none_for_unset(self, self.UNSET_WAS)
        if self.loss_reduction not in ("sum", "mean"):
            raise ElectraError(f"loss_reduction={self.loss_reduction!r}: use sum or mean")
        self._check_ranges()
        if self.dev_split is not None and not 0 < self.dev_split < 1:
            raise ElectraError(
                f"dev_split={self.dev_split}: a fraction of the training examples, between 0 and "
                "1 (e.g. 0.1)"
            )

    @classmethod
    def from_values(
        cls, values: dict[str, Any], source: str, base: FinetuneConfig | None = None
    ) -> FinetuneConfig:
        """The recipe from named values, typed or strings (`electra.overrides.with_values`): a
        family's settings nested (`{"qa": {"qa_head": ...}}`, as `finetune.json` saves them) or
        flat (`{"qa_head": ...}`, as the command line, `--finetune-set` and the `finetune.json` of
        models fine-tuned before the families had their own settings give them), set over `base`
        (default: the defaults)."""
        owner = {f.name: family for family, kind in FAMILIES.items() for f in fields(kind)}
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {family: {} for family in FAMILIES}
        for key, value in values.items():
            if key in FAMILIES and isinstance(value, dict):
                nested[key].update(value)
            elif key in owner:
                nested[owner[key]][key] = value
            elif key in FAMILIES or key not in {f.name for f in fields(cls)}:
                known = [f.name for f in fields(cls) if f.name not in FAMILIES]
                raise unknown_key(key, [*known, *owner], source)
            else:
                top[key] = value
        cfg = with_values(base or cls(), top, source)
        sections = {
            family: with_values(getattr(cfg, family), given, source)
            for family, given in nested.items()
        }
        return replace(cfg, **sections)

    def _check_ranges(self) -> None:
        """A count or rate out of its range is one error, not a run that trains nothing."""
        for name, low in _FINETUNE_MINIMA.items():
            value = getattr(self, name)
            if value is not None and value < low:
                default = " (unset: the default)" if name in self.UNSET_WAS else ""
                raise ElectraError(f"{name} must be at least {low}{default} (got {value:g})")
        for name in ("warmup_proportion", "dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ElectraError(f"{name}={getattr(self, name):g}: a fraction in [0, 1)")
        if self.layerwise_lr_decay is not None and not 0 < self.layerwise_lr_decay <= 1:
            raise ElectraError(
                f"layerwise_lr_decay={self.layerwise_lr_decay} must be in (0, 1], or unset for "
                "the default"
            )


_FINETUNE_MINIMA = {
    "batch_size": 1,
    "seeds": 1,
    "seed": 0,
    "epochs": 0,
    "lr": 0,
    "weight_decay": 0,
    "clip_norm": 0,
    "max_seq_len": 0,
    "max_train_examples": 0,
}


def model_size(model: AnyModelConfig) -> str:
    """The paper's size class of an encoder, which sets its fine-tuning LR and layer decay: by
    width, in either family (modern-small's 256 is small, ModernBERT-base's 768 base)."""
    if model.hidden_size >= 1024:
        return "large"
    return "base" if model.hidden_size >= 512 else "small"


FINETUNE_LR = {"small": 3e-4, "base": 1e-4, "large": 5e-5}
# The shortest row fine-tuning takes: a pair's three special tokens leave room for a few tokens of
# text (a length of 2 trained on [CLS] [SEP] alone).
MIN_SEQ_LEN = 8
LAYERWISE_DECAY = {"small": 0.8, "base": 0.8, "large": 0.9}


def resolve_recipe(
    cfg: FinetuneConfig, model: AnyModelConfig, epochs: int, max_seq_len: int
) -> FinetuneConfig:
    """Fills the unset (None) fields from the model's size and the task's defaults. An unset
    length is the task's, at most the model's positions (512 for electra's presets, 8192 for the
    modern family's); a length given past them is refused, not cut to them."""
    size = model_size(model)
    limit = model.max_position_embeddings
    if cfg.max_seq_len is not None and cfg.max_seq_len < MIN_SEQ_LEN:
        raise ElectraError(
            f"max_seq_len={cfg.max_seq_len} leaves no room for text beside the special tokens: "
            f"pass --max-seq-len {MIN_SEQ_LEN} or more (the task's default where left out)"
        )
    if cfg.max_seq_len is not None and cfg.max_seq_len > limit:
        raise ElectraError(
            f"max_seq_len={cfg.max_seq_len} is longer than the model's {limit} positions "
            f"(max_position_embeddings in its config.json): pass --max-seq-len {limit} or less"
        )
    return replace(
        cfg,
        lr=cfg.lr or FINETUNE_LR[size],
        layerwise_lr_decay=cfg.layerwise_lr_decay or LAYERWISE_DECAY[size],
        epochs=cfg.epochs or epochs,
        max_seq_len=cfg.max_seq_len or min(max_seq_len, limit),
    )
