"""A pretraining run resolved once, for every caller: `electra pretrain` and a Python caller of
`electra.pretrain` (through `electra.pretraining.train.pretrain`) and each arm of
`electra experiment` get the same run from the same settings, and a run opens its data folder once.

A run config comes from a preset, then a config file, then `section.field` overrides
(`run_config`; a resumed run from its folder's config.json and overrides, `resumed_config`).
`resolve_run` then decides the rest, writing nothing:

1. it opens the data folder (`electra.data.store.PretrainingData`: meta.json, the shards and the
   tokenizer's fingerprint checked), once;
2. a new run's settings that the caller left unset and that follow from others are filled, each
   change said on stderr: the data folder's sequence length (a preset's is only a default: the
   data was prepared at one length) and the settings the objective implies
   (`electra.objectives.fill_objective_settings`: a two_stage run switches at half the steps, an
   adversarial one warms up for a tenth); a continued run's rate and fresh heads' scale
   (`continuation_settings`); and a warm-up that fits the run (`fitted_warmup`: a preset's cut to
   a tenth of the steps, a warning where the rate stays far under its peak). A run continued from
   a folder that names no preset takes its family's of its size (`continuation_preset`, in
   `run_config`). What the caller "left unset" is the keys they did not
   set (`given`); from Python, without `given`, a setting is the caller's where it differs from
   its preset's;
3. given a run folder: a resumed run keeps its saved settings but those that may change
   (`electra.folders.run_folder`), a new run needs a free folder (or `overwrite`), and the data
   must be of the run's tokenizer;
4. the config is fitted to the weights it starts from and to the data: a resumed run takes its
   checkpoint's architecture, a run continued from a pretrained pair (`train.init_from`) the
   pair's; a new model takes its vocabulary size and padding id from the tokenizer; an unset
   `data.document_mask` is the family's.

No torch here: the data folder, the objectives and the run folder are imported when a run is
resolved.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.config import (
    DEFAULT_PRESET,
    ObjectiveConfig,
    RunConfig,
    apply_overrides,
    preset,
    presets,
    with_architecture_of,
)
from electra.errors import ElectraError
from electra.overrides import flatten, read_config_file

if TYPE_CHECKING:  # the data folder imports numpy and the tokenizers
    from electra.data.store import PretrainingData
    from electra.model.configs import AnyModelConfig


def _to_stderr(note: str) -> None:
    print(note, file=sys.stderr)


def run_config(
    preset_name: str | None = None,
    config_file: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    source: str = "command line",
) -> tuple[RunConfig, set[str]]:
    """The config of a new run: the preset (`preset_name`, else the config file's `preset`, else
    small), then the config file's values, then `overrides` ({"train.lr": "1e-4"}, typed by the
    fields); and the section.field keys the file and the overrides set, for `resolve_run`."""
    file_values = flatten(read_config_file(config_file)) if config_file else {}
    name = preset_name or file_values.pop("preset", None)
    file_values.pop("preset", None)
    init_from = {**file_values, **(overrides or {})}.get("train.init_from")
    if not name:
        name = continuation_preset(init_from) if init_from else DEFAULT_PRESET
    cfg = apply_overrides(preset(str(name)), file_values, source=str(config_file or "config"))
    cfg = apply_overrides(cfg, dict(overrides or {}), source=source)
    return cfg, {*file_values, *(overrides or {})}


def resumed_config(
    run_dir: str | Path, overrides: Mapping[str, Any] | None = None, source: str = "command line"
) -> RunConfig:
    """The config a run in `run_dir` was started with (its config.json holds what was filled in
    then), with `overrides` on top (`--steps` to train further; `resolve_run` refuses those that
    may not change on resume, `electra.folders.run_folder`). `train.stop_after` is an
    invocation's, not the run's: unset unless given again."""
    saved = Path(run_dir) / "config.json"
    if not saved.is_file():
        raise ElectraError(f"{run_dir} is not a run folder (no config.json): check the path")
    cfg = RunConfig.load(saved)
    cfg = replace(cfg, train=replace(cfg.train, stop_after=None))
    return apply_overrides(cfg, dict(overrides or {}), source=source)


def given_keys(cfg: RunConfig) -> set[str]:
    """The section.field keys whose values differ from those of `cfg`'s preset: what a Python
    caller set, where no one listed it."""
    base = preset(cfg.preset) if cfg.preset in presets() else RunConfig()
    mine, theirs = flatten(cfg.to_dict()), flatten(base.to_dict())
    return {k for k, v in mine.items() if k != "preset" and theirs.get(k) != v}


@dataclass
class ResolvedRun:
    """What `resolve_run` decided: the config the run trains with, its data folder (open), the
    checkpoint it resumes from (None: it starts afresh), whether it starts from a pretrained
    pair's weights (`train.init_from`), and whether it resumes or overwrites an earlier run (a
    worker torchrun restarts resumes, whatever its flags say)."""

    cfg: RunConfig
    data: PretrainingData
    latest: Path | None = None
    init_from_pair: bool = False
    resume: bool = False
    overwrite: bool = False


def resolve_run(
    cfg: RunConfig,
    run_dir: str | Path | None = None,
    *,
    given: Collection[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    data: PretrainingData | None = None,
    note: Callable[[str], None] | None = _to_stderr,
    hold: Callable[[bool], None] | None = None,
) -> ResolvedRun:
    """The run `cfg` asks for, resolved (the module's steps 1-4), writing nothing. `given` is the
    section.field keys the caller set (default: those that differ from the preset's,
    `given_keys`); a resumed run's (`resume`) are its saved ones and are not filled again. Each
    filled setting is passed to `note` (default: a line on stderr; None: silent). `data` is the
    run's data folder where the caller has it open already (an experiment, for all its arms).
    Without `run_dir`, the run is a new one whose folder is not looked at (an experiment's arm
    priced before it runs). `hold(resuming)` is called once the data is open and before the run
    folder is read: the trainer takes the folder's lock there."""
    if not resume:
        given = given_keys(cfg) if given is None else set(given)
        cfg, data = _fill_settings(cfg, given, data, note or (lambda _: None))
    if not cfg.data.path:
        raise ElectraError(
            "no data folder: pass --data DIR (a folder written by `electra prepare`)"
        )
    if data is None:
        from electra.data.store import PretrainingData

        data = PretrainingData(cfg.data.path, seq_len=cfg.data.seq_len)
    if run_dir is None:
        return _fitted(ResolvedRun(cfg, data))
    run = ResolvedRun(cfg, data, resume=resume, overwrite=overwrite)
    return _fitted(_with_folder(run, Path(run_dir), hold))


def _fill_settings(
    cfg: RunConfig,
    given: set[str],
    data: PretrainingData | None,
    say: Callable[[str], None],
) -> tuple[RunConfig, PretrainingData | None]:
    """A new run's unset settings (step 2): the data folder's sequence length, opening the folder
    (a seq len the caller set must be the folder's), then the objective's implied settings."""
    from electra.objectives import fill_objective_settings

    if getattr(cfg.model, "hf_config", ""):
        cfg = _model_from_config_json(cfg, given, say)
    if cfg.data.path and data is None:
        from electra.data.store import PretrainingData

        mine = cfg.data.seq_len if "data.seq_len" in given else None
        data = PretrainingData(cfg.data.path, seq_len=mine)
    if data is not None and "data.seq_len" not in given and data.seq_len != cfg.data.seq_len:
        say(
            f"using seq len {data.seq_len} from the data folder {cfg.data.path} "
            f"(the {cfg.preset} preset's is {cfg.data.seq_len})"
        )
        cfg = replace(cfg, data=replace(cfg.data, seq_len=data.seq_len))
    cfg, change = fill_objective_settings(cfg, given)
    if change:
        say(change)
    if cfg.train.init_from:
        cfg = continuation_settings(cfg, given, say)
    return fitted_warmup(cfg, given, say), data


# A schedule's warm-up left to a preset takes at most this share of the run's steps: a preset's
# 10,000 steps are for its million, and a shorter run would end before its rate had risen.
WARMUP_SHARE = 0.1
# Continued pretraining's settings, where the caller sets none (measured on a sentence-transformers
# MiniLM-L6 continued on SST-2's text: docs/pretraining.md §Continuing a checkpoint, and
# benchmarks/RESULTS.md "Issue 59"): a from-scratch preset's peak rate pulls a trained encoder's
# states together, and fresh heads need a higher rate than the encoder under them.
CONTINUE_LR = 3e-5
CONTINUE_HEAD_LR_SCALE = 10.0
CONTINUE_HEAD_WARMUP_SHARE = 0.0


def continuation_preset(folder: str | Path) -> str:
    """The preset of a run continued from `folder` that names none: its family's, of the width
    nearest the folder's (the folder's config replaces the architecture; the preset gives the
    rest: the batch, the objective's weights, the generator's rate)."""
    from electra.folders.model_folder import model_config_of_file

    folder = Path(folder)
    config = next(
        (
            f
            for f in (folder / "config.json", folder / "discriminator" / "config.json")
            if f.is_file()
        ),
        None,
    )
    if config is None:
        return DEFAULT_PRESET  # refused with its reason where the run reads the folder
    model = model_config_of_file(config)
    same = [n for n in presets() if preset(n).model.arch == model.arch]
    if not same:
        return DEFAULT_PRESET
    return min(same, key=lambda n: abs(preset(n).model.hidden_size - model.hidden_size))


def continuation_settings(cfg: RunConfig, given: set[str], say: Callable[[str], None]) -> RunConfig:
    """A continued run's learning rate, fresh heads' rate and head-only warm-up, where the
    caller set none (the constants above), said in one line with the preset they go with."""
    train = cfg.train
    chosen = {
        "lr": CONTINUE_LR,
        "head_lr_scale": CONTINUE_HEAD_LR_SCALE,
        "head_warmup_steps": round(CONTINUE_HEAD_WARMUP_SHARE * train.steps),
    }
    chosen = {k: v for k, v in chosen.items() if f"train.{k}" not in given}
    train = replace(train, **chosen)
    held = f", encoder held {train.head_warmup_steps} steps" if train.head_warmup_steps else ""
    say(
        f"continuing {train.init_from} with preset {cfg.preset}: lr {train.lr:g}, fresh heads at "
        f"{train.head_lr_scale:g}x{held} (continued pretraining's, where train.lr, "
        "train.head_lr_scale and train.head_warmup_steps are not set)"
    )
    return replace(cfg, train=train)


def fitted_warmup(cfg: RunConfig, given: set[str], say: Callable[[str], None]) -> RunConfig:
    """A warm-up the caller left to the preset, cut to `WARMUP_SHARE` of the steps; and a
    warning where the schedule keeps the rate far under `train.lr` for the whole run."""
    train = cfg.train
    mine = {"train.warmup_steps", "train.warmup_proportion"} & given
    if not mine and train.warmup > WARMUP_SHARE * train.steps:
        warmup = max(1, round(WARMUP_SHARE * train.steps))
        say(
            f"warm-up {warmup} step{'s' * (warmup > 1)} ({WARMUP_SHARE:.0%} of {train.steps}; the {cfg.preset} "
            f"preset's {train.warmup} is for longer runs: set train.warmup_steps to change it)"
        )
        train = replace(train, warmup_steps=warmup, warmup_proportion=0.0)
    highest = peak_rate(train.lr, train.steps, train.warmup)
    if highest < 0.5 * train.lr:
        say(
            f"warning: the learning rate never passes {highest:.2g} in this run, under half of "
            f"train.lr={train.lr:g}: a warm-up of {train.warmup} steps is long for "
            f"{train.steps} steps; shorten train.warmup_steps"
        )
    return replace(cfg, train=train)


def peak_rate(lr: float, steps: int, warmup: int) -> float:
    """The highest rate of the official schedule (`electra.engine.optim.learning_rate`:
    lr * (1 - s/steps) * min(1, s/warmup)): at the warm-up's end, or at half the run where the
    warm-up is longer than that."""
    if warmup <= 0:
        return lr
    at = min(warmup, steps / 2)
    return lr * (1 - at / steps) * min(1.0, at / warmup)


def _model_from_config_json(
    cfg: RunConfig, given: set[str], say: Callable[[str], None]
) -> RunConfig:
    """A new model whose architecture is a `config.json` (`model.hf_config`), of whichever family
    runs its `model_type` (an ELECTRA or ModernBERT one: the native family), with the `model.*`
    settings also given over it."""
    from electra.folders.model_folder import model_config_of_file

    file = Path(cfg.model.hf_config)
    model = model_config_of_file(file)
    names = {f.name for f in fields(model)} - {"arch", "hf_config"}
    given_here = {n: getattr(cfg.model, n) for n in names if f"model.{n}" in given}
    model = replace(model, **given_here)
    if hasattr(model, "hf_config"):
        model = replace(model, hf_config=str(file))
    say(f"model: {model.arch} family, from {file}")
    return replace(cfg, model=model)


def _with_folder(
    run: ResolvedRun, run_dir: Path, hold: Callable[[bool], None] | None
) -> ResolvedRun:
    """Step 3: what the run does with its folder, and the architecture it resumes with."""
    from electra.engine.distributed import restarted_by_torchrun
    from electra.folders.run_folder import check_new_folder, resume_point

    restarted = restarted_by_torchrun()
    if restarted:  # with the same flags: it continues, never starts over
        run.resume, run.overwrite = True, False
    if hold is not None:
        hold(run.resume)
    if run.resume and run.overwrite:
        raise ElectraError(
            "--resume continues a run and --overwrite starts it again: choose one of them"
        )
    if run.resume:
        run.cfg, run.latest = resume_point(run.cfg, run_dir, run.data, restarted)
    else:
        check_new_folder(run_dir, run.overwrite, run.cfg)
    if run.latest is not None:
        run.cfg = with_architecture_of(run.cfg, RunConfig.load(run.latest / "config.json"))
    return run


def _fitted(run: ResolvedRun) -> ResolvedRun:
    """Step 4: a run that starts afresh from a pair takes the pair's architecture; then the config
    is fitted to the data."""
    run.init_from_pair = bool(run.cfg.train.init_from) and run.latest is None
    if run.init_from_pair:
        run.cfg = configure_from_pair(run.cfg, run.data)
    keep_vocab = run.latest is not None or run.init_from_pair
    run.cfg = fit_config_to_data(run.cfg, run.data, keep_vocab)
    return run


def fit_config_to_data(cfg: RunConfig, data: PretrainingData, keep_vocab: bool) -> RunConfig:
    """A new model takes its vocabulary size and padding id from the tokenizer; a model that
    already has weights (resumed, or continued from a pair) keeps its size, and the data must fit."""
    if cfg.model.max_position_embeddings < data.seq_len:
        raise ElectraError(
            f"model.max_position_embeddings={cfg.model.max_position_embeddings} is shorter than the "
            f"data's seq len {data.seq_len}: raise it or prepare shorter sequences"
        )
    if keep_vocab and data.vocab_size > cfg.model.vocab_size:
        raise ElectraError(
            f"the data in {cfg.data.path} uses {data.vocab_size} token ids but the model has "
            f"{cfg.model.vocab_size}: prepare the data with the model's tokenizer"
        )
    vocab = cfg.model.vocab_size if keep_vocab else data.vocab_size
    model = replace(cfg.model, vocab_size=vocab, pad_token_id=data.special.pad)
    data_cfg = replace(cfg.data, seq_len=data.seq_len, document_mask=document_mask(cfg))
    return replace(cfg, model=model, data=data_cfg)


def document_mask(cfg: RunConfig) -> bool:
    """`data.document_mask` resolved: unset is the family's `document_mask`."""
    from electra.model.family import families, family_of

    family = family_of(cfg.model)
    if cfg.data.document_mask and not family.document_mask:
        masking = [f.name for f in families().values() if f.document_mask]
        raise ElectraError(
            f"data.document_mask=true needs model.arch {' or '.join(masking)}: the "
            f"{cfg.model.arch} family's encoder attends across a row's documents; leave the "
            "setting unset or false"
        )
    return family.document_mask if cfg.data.document_mask is None else cfg.data.document_mask


def configure_from_pair(cfg: RunConfig, data: PretrainingData) -> RunConfig:
    """Continued pretraining: the folders' configs replace the preset's architecture, and the data
    must have been prepared with their tokenizer. `train.init_from` is a pair, or one model folder
    of a family that continues from one (`electra.folders.model_folder.one_folder_source`): its
    encoder starts the run's network, and the generator is `train.generator_from`'s masked LM (a
    network of its own: sharing none) or the folder's lower layers at its width, sharing its
    token table (`continuation_generator` says why; the depth is the family's fraction, or
    `objective.generator_num_hidden_layers`). The objective is the run's own."""
    from electra.data.tokenizer import fingerprint, load_tokenizer
    from electra.folders.continuation import pair_configs, pair_tokenizer_dir
    from electra.objectives import objective_class

    source, generator_from = cfg.train.init_from, cfg.train.generator_from
    if not objective_class(cfg.objective.name).continues:
        raise ElectraError(
            f"objective.name={cfg.objective.name}: its generator is no masked LM, so --init-from "
            "cannot start it from a folder; continue with the electra or mlm objective"
        )
    if generator_from and not objective_class(cfg.objective.name).has_generator:
        raise ElectraError(
            f"--generator-from: objective.name={cfg.objective.name} trains no generator; drop it"
        )
    disc, gen = pair_configs(source, cfg.objective.generator_num_hidden_layers, generator_from)
    tokenizer_dir = pair_tokenizer_dir(source)
    if fingerprint(load_tokenizer(tokenizer_dir)) != data.meta["tokenizer_fingerprint"]:
        raise ElectraError(
            f"the data in {cfg.data.path} was not prepared with the tokenizer of {source}: run "
            f"`electra prepare ... --tokenizer {tokenizer_dir}`"
        )
    return replace(cfg, model=disc, objective=pair_objective(cfg.objective, gen, generator_from))


def pair_objective(
    objective: ObjectiveConfig, gen: AnyModelConfig, generator_from: str | None
) -> ObjectiveConfig:
    """A continued run's objective: its generator of `gen`'s exact sizes, sharing the
    discriminator's token table (or, from `--generator-from`, nothing: its own)."""
    return replace(
        objective,
        sharing="none" if generator_from else "embeddings",
        generator_hidden_size=gen.hidden_size,
        generator_num_hidden_layers=gen.num_hidden_layers,
        generator_num_attention_heads=gen.num_attention_heads,
        generator_intermediate_size=gen.intermediate_size,
    )
