"""The Python API, equal to the command line: each function takes the typed settings of its
command (`electra.config.RunConfig`, `electra.finetuning.config.FinetuneConfig`,
`electra.config.InferenceRuntime`) and does what the command does; the commands in
`electra.cli.commands` read their flags and call these. docs/python.md shows them end to end.

Each function imports torch and the rest of the library when called, so that `import electra`
stays light (`electra.__init__` names them lazily).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.config import InferenceRuntime, RunConfig, preset
from electra.errors import ElectraError
from electra.finetuning.config import FinetuneConfig
from electra.settings import DEFAULT_PRESET, resolve_run_settings, resumed_config

if TYPE_CHECKING:  # the tasks import torch
    from electra.tasks.tables import DataSource


def pretrain(
    cfg: RunConfig | None = None,
    data: str | Path | None = None,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    given: Collection[str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Pretrains a discriminator and generator as `electra pretrain` does, into the run folder
    `out` (default runs/PRESET), and returns it. `cfg` defaults to the small preset; `data` (a
    folder written by `electra prepare`) sets `cfg.data.path`. The settings left unset are filled
    as the command fills them (`electra.settings.resolve_run_settings`: the data folder's sequence
    length, the objective's implied settings), where `given` names the section.field keys the
    caller set (default: those that differ from the preset's). With `resume`, the run in `out`
    continues from its last checkpoint (from step 0 where it has none yet) with the config it was
    started with; a `cfg` given may change only what may change on resume (the steps, the
    learning rate, how it runs: `electra.folders.run_folder.MAY_CHANGE_ON_RESUME`), else it is
    refused. `overwrite` starts a new run over an earlier one in `out`."""
    from electra.engine.train import pretrain as train

    if resume:
        if out is None:
            raise ElectraError("resuming needs the run folder: pass out=RUN")
        cfg = cfg or resumed_config(out)
    else:
        cfg = cfg or preset(DEFAULT_PRESET)
    if data is not None:
        cfg = replace(cfg, data=replace(cfg.data, path=str(data)))
        given = None if given is None else {*given, "data.path"}
    if not resume:
        cfg = resolve_run_settings(cfg, given)
    out = out if out is not None else f"runs/{cfg.preset}"
    return train(cfg, out, resume=resume, overwrite=overwrite)


def finetune(
    model: str | Path,
    task: str,
    data: DataSource,
    out: str | Path,
    cfg: FinetuneConfig | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
    **settings: Any,
) -> dict[str, Any]:
    """Fine-tunes a pretrained model (a model, run or Hugging Face folder) on `task` as
    `electra finetune` does, `cfg.seeds` times, scoring each seed on dev; writes `out` (its best
    seed is a fine-tuned model folder) and returns the summary it writes as out/results.json.
    `data` is the task's folder, one file, or {"train": FILE, "dev": FILE, ...}. `settings` are
    recipe fields set over `cfg` (`epochs=1, seeds=3`), checked as the flags are."""
    from electra.finetuning.run import finetune as run

    cfg = FinetuneConfig.from_values(settings, source="electra.finetune", base=cfg)
    return run(model, task, data, out, cfg, overwrite=overwrite, resume=resume)


def evaluate(
    model: str | Path,
    data: DataSource,
    split: str = "dev",
    out: str | Path | None = None,
    task: str | None = None,
    runtime: InferenceRuntime | None = None,
    reading: dict[str, Any] | None = None,
    drop_overlap: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Predicts and scores a split with a fine-tuned model as `electra evaluate` does, writing
    its predictions and scores to `out` (default MODEL/eval-SPLIT; an existing one is replaced
    only with `overwrite`); returns the scores. `task`,
    where given, is checked against the model's; `reading` ({"text_columns", "delimiter",
    "label_column"}) reads files of your own by other columns or separator than its training
    files' (a Hugging Face folder records none). Rows the model trained on are refused, or with
    `drop_overlap` left out of the score and counted."""
    from electra.finetuning.evaluate import evaluate as run

    return run(
        model,
        data,
        split,
        out,
        task,
        runtime=runtime,
        reading=reading,
        drop_overlap=drop_overlap,
        overwrite=overwrite,
    )


def export(
    model: str | Path, out: str | Path, *, step: int | None = None, overwrite: bool = False
) -> list[Path]:
    """Writes Hugging Face folders as `electra export` does: out/discriminator and out/generator
    for a run or pair folder (with `step`, that checkpoint of the run), out itself for one model
    or a fine-tuned one (`AutoModelFor*` and `pipeline()` load it). Returns the folders."""
    from electra.hf.export import export_hf

    return export_hf(model, out, overwrite=overwrite, step=step)
