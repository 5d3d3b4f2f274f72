"""Typed run configuration: model, objective, data and training settings, named presets, and overrides.

A run is fully described by one `RunConfig`. It is built from a preset, then an optional config file
(JSON or TOML), then `section.field=value` overrides (`electra.overrides` parses them all), and the
settings left unset that follow from the data and the objective are filled by
`electra.pretraining.resolve`; it is saved with every checkpoint so a run can be resumed or
reproduced from its folder alone.
A setting left unset is None wherever "unset" means something else than a value (the old spellings
0, -1 and "" still load as None: `electra.overrides.none_for_unset`).

The model section is the config of the family `model.arch` names (`electra.model.family`; each
family's in its folder, `electra/model/<family>/config.py`), with the field names of its Hugging
Face config class, so a model folder's `config.json` is that class's and export needs no renaming.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from electra.atomic import write_json_atomic
from electra.errors import ElectraError
from electra.model.configs import KERNELS, AnyModelConfig, other_family, with_arch
from electra.model.family import Preset, families, family
from electra.overrides import (
    flatten,
    none_for_unset,
    read_config_file,
    unknown_key,
    with_values,
)

# The objectives of the registry (one module each in electra/objectives/) and the sharing modes of
# objectives/sharing.py, named here so that a config stays plain data that imports neither torch
# nor the objectives; tests/objectives/test_variants_and_sharing.py checks that they match the registry.
OBJECTIVE_NAMES = (
    "electra",
    "electra15",
    "adversarial",
    "electric",
    "mlm",
    "replace_mlm",
    "all_tokens_mlm",
    "two_stage",
)
SHARINGS = ("none", "embeddings", "all", "gdes")
# Other names of sharing modes, taken as the canonical one (which a saved config holds): the
# paper's "tie all weights" is `full` in the README's list of objectives.
SHARING_ALIASES = {"full": "all", "embedding": "embeddings"}


@dataclass
class ObjectiveConfig:
    """The pretraining objective (docs/specification.md §Replaced token detection) and the
    generator's size relative to the discriminator."""

    # electra, electra15, mlm, replace_mlm, all_tokens_mlm, two_stage, adversarial, electric: one
    # module each in electra/objectives/ (docs/objectives.md).
    name: str = "electra"
    mask_prob: float = 0.15
    # Slots per row; unset: the official int((mask_prob + 0.005) * seq_len).
    max_predictions: int | None = None
    # False: positions drawn with replacement, as the official code does (a position drawn twice
    # is masked once and counts twice in the MLM loss); True: distinct positions.
    distinct_positions: bool = False
    # What happens to a selected position in the generator's (or MLM model's) input.
    mask_frac: float = 0.85
    keep_frac: float = 0.15
    random_frac: float = 0.0
    gen_weight: float = 1.0
    disc_weight: float = 50.0
    temperature: float = 1.0
    # Generator width and depth as fractions of the discriminator's (paper: small 1/4, base 1/3).
    generator_hidden_fraction: float = 0.25
    generator_layers_fraction: float = 1.0
    # Exact generator dimensions; unset: derived from the fractions. Set when continuing from a
    # released pair whose generator does not follow the formula.
    generator_hidden_size: int | None = None
    generator_num_hidden_layers: int | None = None
    generator_num_attention_heads: int | None = None
    generator_intermediate_size: int | None = None
    # Weights the generator shares with the network it trains: none, embeddings (word, position
    # and token-type tables and the embedding LayerNorm, as the official code), all (one encoder,
    # equal sizes only; also called full) or gdes (gradient-disentangled, DeBERTa-v3). See
    # objectives/sharing.py.
    sharing: str = "embeddings"
    # two_stage: the step at which the discriminator, initialised from the generator, takes over
    # (unset: half of train.steps).
    two_stage_steps: int | None = None
    # adversarial: steps of maximum-likelihood training before the generator turns to REINFORCE
    # (unset: a tenth of train.steps).
    adversarial_mlm_steps: int | None = None

    UNSET_WAS: ClassVar[dict[str, Any]] = {
        "max_predictions": 0,
        "generator_hidden_size": 0,
        "generator_num_hidden_layers": 0,
        "generator_num_attention_heads": 0,
        "generator_intermediate_size": 0,
        "two_stage_steps": 0,  # 0 was never a valid switch: it meant "half of train.steps"
    }

    def __post_init__(self) -> None:
        none_for_unset(self, self.UNSET_WAS)
        if self.name not in OBJECTIVE_NAMES:
            raise ElectraError(
                f"objective.name={self.name!r} is unknown: choose one of {', '.join(OBJECTIVE_NAMES)}"
            )
        self.sharing = SHARING_ALIASES.get(self.sharing, self.sharing)
        if self.sharing not in SHARINGS:
            aliases = ", ".join(f"{k} for {v}" for k, v in SHARING_ALIASES.items())
            raise ElectraError(
                f"objective.sharing={self.sharing!r} is unknown: choose one of "
                f"{', '.join(SHARINGS)} ({aliases})"
            )
        split = self.mask_frac + self.keep_frac + self.random_frac
        if abs(split - 1.0) > 1e-6 or min(self.mask_frac, self.keep_frac, self.random_frac) < 0:
            raise ElectraError(
                "objective.mask_frac + keep_frac + random_frac must be non-negative and sum to 1 "
                f"(got {self.mask_frac} + {self.keep_frac} + {self.random_frac})"
            )
        if not 0 < self.mask_prob < 1:
            raise ElectraError(f"objective.mask_prob={self.mask_prob} must be in (0, 1)")
        if (
            not 0 < self.generator_hidden_fraction <= 1
            or not 0 < self.generator_layers_fraction <= 1
        ):
            raise ElectraError("objective.generator_*_fraction must be in (0, 1]")

    def num_predictions(self, seq_len: int) -> int:
        """Masked slots per row: the official max_predictions_per_seq unless set explicitly."""
        return self.max_predictions or max(1, int((self.mask_prob + 0.005) * seq_len))


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
GRAPHING_COMPILE_MODES = ("reduce-overhead", "max-autotune")  # torch.compile's CUDA graphs
PARALLEL_MODES = ("ddp", "fsdp")
# The modern encoder's attention paths (electra.model.attention; docs/performance.md, §Attention
# paths of the modern family).
ATTENTION_PATHS = ("sdpa", "flex", "varlen")

# Objective fields that shape the networks: a resumed run takes them from its checkpoint.
ARCHITECTURE_FIELDS = (
    "name",
    "sharing",
    "generator_hidden_fraction",
    "generator_layers_fraction",
    "generator_hidden_size",
    "generator_num_hidden_layers",
    "generator_num_attention_heads",
    "generator_intermediate_size",
)


def with_architecture_of(cfg: RunConfig, saved: RunConfig) -> RunConfig:
    """`cfg` with the network shapes of `saved`: a checkpoint's weights fix its architecture."""
    shapes = {name: getattr(saved.objective, name) for name in ARCHITECTURE_FIELDS}
    return replace(cfg, model=saved.model, objective=replace(cfg.objective, **shapes))


@dataclass
class DataConfig:
    path: str | None = None  # a folder written by `electra prepare`
    seq_len: int = 128
    # Whether the documents `prepare --packing documents` packs into one row attend only within
    # themselves (docs/pretraining.md, §Document masking); unset: on for the modern family, which
    # has no absolute positions to tell them apart, and off for the electra family, whose encoder
    # cannot take it. Folders of one document per row need no mask: the setting changes nothing.
    document_mask: bool | None = None

    def __post_init__(self) -> None:
        none_for_unset(self, {"path": ""})


@dataclass
class OptimConfig:
    """Adam(W), its schedule's warm-up and gradient clipping: the optimizer settings pretraining
    (`TrainConfig`) and fine-tuning (`FinetuneConfig`) share, each with its own defaults."""

    section: ClassVar[str] = ""  # how the user names these fields: "train." in a run config

    lr: float = 5e-4  # the peak learning rate, after warm-up
    weight_decay: float = 0.01  # decoupled (AdamW), not on biases and LayerNorms
    warmup_proportion: float = 0.0  # of all steps, over which the learning rate rises to lr
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    # The official optimizer has no Adam bias correction (docs/specification.md §Optimizer): its
    # updates are 3-6.5x larger than torch's over the first 100 steps, which the learning-parity
    # benchmark shows matters.
    bias_correction: bool = False
    clip_norm: float = 1.0  # the gradient's global norm is clipped to this


@dataclass
class RuntimeConfig:
    """Where and how a loop runs its model (`electra.engine.runtime`): device, precision, compilation,
    CUDA graphs and kernels, shared by pretraining and fine-tuning."""

    section: ClassVar[str] = ""

    device: str = "auto"  # auto, cpu, cuda, cuda:N
    precision: str = "auto"  # auto (bf16 on GPU, fp32 on CPU), fp32, bf16
    compile: bool = False  # torch.compile the model
    # torch.compile's mode: reduce-overhead replays the compiled forward and backward as CUDA
    # graphs, which pays where a small model is bound by kernel launches (the small pair on a GPU).
    compile_mode: str = "default"
    # Capture the whole step (forward, backward, clipping, optimizer) as one CUDA graph and replay
    # it (electra.engine.graphs): one launch per step where a small model is bound by kernel launches.
    # One process on a GPU; with compile, a mode that makes no graphs of its own.
    cuda_graph: bool = False
    # Which kernels the built model runs (electra.model.kernels): auto puts in the CPU kernels (oneDNN
    # linear, cheap dropout bits, per-head attention) where they are faster; stock keeps plain
    # PyTorch layers and SDPA everywhere.
    kernels: str = "auto"
    # The modern family's attention (electra.model.attention): sdpa (masked SDPA, every device),
    # flex (FlexAttention under block masks) or varlen (flash variable-length, one sequence per
    # document); flex and varlen train on CUDA only. The electra family runs sdpa.
    attention: str = "sdpa"
    # progress on stderr: a bar on a terminal, else (a log file) a plain line at each tenth of
    # the work or every minute; --no-progress turns it off (every command takes it)
    progress: bool = True

    def __post_init__(self) -> None:
        s = self.section
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ElectraError(f"{s}precision={self.precision!r}: use auto, fp32 or bf16")
        if self.kernels not in KERNELS:
            raise ElectraError(f"{s}kernels={self.kernels!r}: use {' or '.join(KERNELS)}")
        if self.attention not in ATTENTION_PATHS:
            raise ElectraError(f"{s}attention={self.attention!r}: use {', '.join(ATTENTION_PATHS)}")
        if self.compile_mode not in COMPILE_MODES:
            raise ElectraError(
                f"{s}compile_mode={self.compile_mode!r}: use {', '.join(COMPILE_MODES)}"
            )
        if self.cuda_graph and self.compile and self.compile_mode in GRAPHING_COMPILE_MODES:
            raise ElectraError(
                f"{s}compile_mode={self.compile_mode} makes CUDA graphs of its own, inside the "
                f"step {s}cuda_graph captures: use {s}compile_mode=default or "
                "max-autotune-no-cudagraphs"
            )


RuntimeConfigT = TypeVar("RuntimeConfigT", bound=RuntimeConfig)


@dataclass
class InferenceRuntime:
    """The runtime of a fine-tuned model run on new data (`electra evaluate`, `predict`,
    `electra.Predictor`): on the device `auto` picks, with progress on stderr (a bar on a terminal,
    plain lines elsewhere), never compiled (compiling pays only over a long training run), attention
    through masked SDPA; the settings left unset (None) are the ones it was
    fine-tuned with. The command line's flags are `RuntimeConfig`'s of the same names."""

    device: str = "auto"
    precision: str | None = None
    cuda_graph: bool | None = None
    kernels: str | None = None
    progress: bool = True

    def over(self, cfg: RuntimeConfigT) -> RuntimeConfigT:
        """`cfg` (a fine-tuned model's settings) with these settings on it, checked as its own."""
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        # Prediction runs the plain masked SDPA on any device, whatever path trained the model.
        given = {k: v for k, v in given.items() if v is not None}
        return replace(cfg, compile=False, attention="sdpa", **given)


@dataclass
class TrainConfig(OptimConfig, RuntimeConfig):
    """Pretraining: the batch, the schedule's length, checkpoints and logging, plus the shared
    optimizer and runtime settings."""

    section: ClassVar[str] = "train."

    steps: int = 1_000_000
    batch_size: int = 128  # sequences per optimizer step, over all devices and accumulation steps
    grad_accum: int = 1
    warmup_steps: int = 10_000  # warmup = max(warmup_steps, warmup_proportion * steps)
    # The generator's own parameters (not those it shares with the discriminator) train at lr
    # times this: a generator that barely learns at a rate the discriminator needs makes easy
    # replacements (DeBERTa-v3's official code gives the two networks optimizers of their own).
    generator_lr_scale: float = 1.0
    # A continued run (`init_from`): the heads it builds fresh (an RTD head on a checkpoint that
    # has none, an MLM head for a generator made of its lower layers) train at lr times this, so
    # they catch up with the pretrained encoder under them; and for the first `head_warmup_steps`
    # the checkpoint's encoder (its embeddings included) is held still while those heads and the
    # generator train (docs/pretraining.md §Continuing a checkpoint says which values were measured).
    head_lr_scale: float = 1.0
    head_warmup_steps: int = 0
    seed: int = 42
    log_every: int = 100
    save_every: int = 1000
    keep_last: int = 5
    # Stop (with a checkpoint) after this many steps; the schedule still runs to `steps`.
    stop_after: int | None = None
    # Start from a discriminator + generator pair (folders discriminator/ and generator/, ours or
    # Hugging Face's), or a Hugging Face ModernBertForMaskedLM folder continued with RTD, instead
    # of random weights; the architecture comes from their configs.
    init_from: str | None = None
    # With `init_from` one model folder: the generator's masked-LM folder (the same model type and
    # tokenizer), instead of the folder's lower layers.
    generator_from: str | None = None
    tensorboard: bool = True  # curves in RUN/tensorboard
    # A prepared data folder of held-out text (the run's tokenizer) that the run scores itself on
    # every `eval_every` steps (0: at each checkpoint) and at its end: held-out AUC, the
    # generator's loss and whether the discriminator's states collapse (electra.scoring.health).
    eval_data: str | None = None
    eval_every: int = 0
    # Under torchrun: ddp (a replica per process) or fsdp (parameters, gradients and optimizer
    # state sharded over the processes, for models that do not fit one device).
    parallel: str = "ddp"
    # A step with a non-finite loss or gradient is skipped; this many in a row stop the run.
    max_skipped_steps: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        none_for_unset(
            self, {"stop_after": 0, "init_from": "", "generator_from": "", "eval_data": ""}
        )
        if self.eval_every < 0:
            raise ElectraError(f"train.eval_every must be 0 or more (got {self.eval_every})")
        for name in ("generator_lr_scale", "head_lr_scale"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ElectraError(f"train.{name} must be a positive number (got {value})")
        if self.head_warmup_steps < 0:
            raise ElectraError(
                f"train.head_warmup_steps must be 0 or more (got {self.head_warmup_steps})"
            )
        if self.parallel not in PARALLEL_MODES:
            raise ElectraError(
                f"train.parallel={self.parallel!r}: use {' or '.join(PARALLEL_MODES)}"
            )
        for name in (
            "steps",
            "batch_size",
            "grad_accum",
            "log_every",
            "save_every",
            "keep_last",
            "max_skipped_steps",
        ):
            if getattr(self, name) < 1:
                raise ElectraError(f"train.{name} must be at least 1 (got {getattr(self, name)})")
        if self.cuda_graph and self.grad_accum != 1:
            raise ElectraError(
                f"train.cuda_graph captures one micro-batch per step, but train.grad_accum="
                f"{self.grad_accum}: set train.grad_accum=1 or turn train.cuda_graph off"
            )
        if self.batch_size % self.grad_accum:
            raise ElectraError(
                f"train.batch_size={self.batch_size} is not divisible by train.grad_accum={self.grad_accum}"
            )

    def micro_batch(self, world_size: int) -> int:
        """Sequences per forward pass on each process: the global batch over processes and
        accumulation steps."""
        parts = self.grad_accum * world_size
        if self.batch_size % parts:
            raise ElectraError(
                f"train.batch_size={self.batch_size} (the global batch) is not divisible by "
                f"train.grad_accum={self.grad_accum} x {world_size} processes: change one of them"
            )
        return self.batch_size // parts

    @property
    def warmup(self) -> int:
        return max(self.warmup_steps, int(self.warmup_proportion * self.steps))


DEFAULT_PRESET = "small"  # a run that names none


@dataclass
class RunConfig:
    preset: str = DEFAULT_PRESET
    model: AnyModelConfig = field(default_factory=lambda: family().config())
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> RunConfig:
        return apply_overrides(cls(), flatten(d), source=source)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(read_config_file(path), source=str(path))


def generator_config(disc: AnyModelConfig, objective: ObjectiveConfig) -> AnyModelConfig:
    """The generator's encoder config, derived as the official `get_generator_config` does, unless
    the objective gives exact dimensions. A narrower generator's FFN keeps its family's ratio
    (`ffn_ratio`: ELECTRA's 4x; the modern family's 1.5x, ModernBERT-base's 1152 / 768). Sizes
    that make no valid encoder are refused naming the `objective.generator_*` settings (the
    config's own message names the discriminator's `model.*` fields)."""
    sizes = _generator_sizes(disc, objective)
    try:
        return replace(disc, **sizes)
    except ElectraError as e:
        shape = ", ".join(f"{k}={v}" for k, v in sizes.items())
        reason = str(e).replace("model.", "")
        raise ElectraError(
            f"objective.generator_*: the generator's sizes ({shape}) make no valid encoder: "
            f"{reason}; set objective.generator_hidden_size, generator_num_attention_heads, "
            "generator_intermediate_size or generator_num_hidden_layers so that they do"
        ) from None


def _generator_sizes(disc: AnyModelConfig, objective: ObjectiveConfig) -> dict[str, int]:
    o = objective
    hidden = o.generator_hidden_size or max(
        1, round(disc.hidden_size * o.generator_hidden_fraction)
    )
    layers = o.generator_num_hidden_layers or max(
        1, round(disc.num_hidden_layers * o.generator_layers_fraction)
    )
    # A generator of the discriminator's width is the discriminator's shape, whatever its FFN and
    # heads (the formula below gives the official presets' values either way).
    full = hidden == disc.hidden_size
    return {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": o.generator_num_attention_heads
        or (disc.num_attention_heads if full else max(1, hidden // 64)),
        "intermediate_size": o.generator_intermediate_size
        or (disc.intermediate_size if full else round(disc.ffn_ratio * hidden)),
    }


# --- presets -------------------------------------------------------------------------------------


def presets() -> dict[str, Preset]:
    """Every registered family's presets, by name (`electra/model/<family>/presets.py`)."""
    return {name: p for f in families().values() for name, p in f.presets.items()}


def preset(name: str) -> RunConfig:
    """The run a preset names: its family's encoder and its objective, data and train sections
    (those of the preset it takes its schedule of, with its changes)."""
    found = presets()
    if name not in found:
        hint = difflib.get_close_matches(name, found, n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ElectraError(
            f"unknown preset {name!r}{did_you_mean}: choose one of {', '.join(found)}"
        )
    p = found[name]
    base = preset(p.schedule_of) if p.schedule_of else RunConfig()
    return RunConfig(
        name,
        p.model(),
        replace(base.objective, **p.objective),
        replace(base.data, **p.data),
        replace(base.train, **p.train),
    )


# --- overrides -----------------------------------------------------------------------------------


def apply_overrides(
    cfg: RunConfig, overrides: dict[str, Any], source: str = "override"
) -> RunConfig:
    """Returns a new config with `section.field` values replaced; unknown keys are an error."""
    sections = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "preset"}
    if "model.arch" in overrides:  # the family decides which model fields exist
        sections["model"] = with_arch(sections["model"], str(overrides["model.arch"]))
    known = [f"{s}.{f.name}" for s, o in sections.items() for f in fields(o)]
    grouped: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section == "preset" and not name:
            top["preset"] = str(value)
        elif key in known:
            grouped.setdefault(section, {})[name] = value
        else:  # named in full here, so that the hint may be another section's field
            raise other_family(key, sections["model"], source) or unknown_key(key, known, source)
    new_sections = {
        s: with_values(o, grouped.get(s, {}), source, prefix=f"{s}.") for s, o in sections.items()
    }
    return replace(cfg, **top, **new_sections)
