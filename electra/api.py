"""The Python API, equal to the command line: one function per command, taking the settings its
flags take (a preset name and a settings file, `section.field` overrides, or the typed settings:
`electra.config.RunConfig`, `electra.tasks.finetune_config.FinetuneConfig`,
`electra.config.InferenceRuntime`) with the same defaults and the same one-line errors, and doing
what the command does; the commands in `electra.cli.commands` read their flags, call these and
print. docs/python.md shows them end to end.

Each function imports torch and the rest of the library when called, so that `import electra`
stays light (`electra.__init__` names them lazily).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields, is_dataclass
from dataclasses import replace as dataclass_replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.config import InferenceRuntime, RunConfig, apply_overrides
from electra.errors import ElectraError
from electra.overrides import flatten, read_config_file, unknown_key
from electra.pretraining.resolve import given_keys, resumed_config, run_config
from electra.tasks.finetune_config import FinetuneConfig

if TYPE_CHECKING:  # the tasks import torch
    from electra.probing.probe import ProbeConfig
    from electra.tasks.tables import DataSource


def train_tokenizer(
    corpus: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    vocab_size: int = 30522,
    model: str = "wordpiece",
    lowercase: bool | None = None,
    min_frequency: int | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Trains a tokenizer on `corpus` (text, jsonl or gz files, globs or folders) and writes its
    folder `out`, as `electra tokenizer train` does: `model` wordpiece (BERT's, uncased unless
    `lowercase=False`), bpe (RoBERTa's byte-level, cased) or unigram (DeBERTa-v3's, cased);
    `vocab_size` is a ceiling, `min_frequency` the least count of a merged pair (wordpiece and
    bpe; default 2). Returns {"out": folder, "tokens": its size, "note": why it is smaller than
    `vocab_size`, or None}."""
    from electra.data.tokenizer_folder import train_tokenizer_folder

    return train_tokenizer_folder(
        corpus,
        out,
        vocab_size=vocab_size,
        model=model,
        lowercase=lowercase,
        min_frequency=min_frequency,
        overwrite=overwrite,
    )


def prepare(
    corpus: str | Path | Sequence[str | Path],
    tokenizer: str | Path,
    out: str | Path,
    *,
    seq_len: int = 128,
    seed: int = 12345,
    workers: int | None = None,
    packing: str = "carry",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Tokenizes and packs `corpus` into the data folder `out` that `pretrain` reads, as
    `electra prepare` does: rows of `seq_len` tokens, shuffled with `seed`, packed by `packing`
    (carry, official or documents), on `workers` processes (default: all cores; a script that
    calls this needs the `if __name__ == "__main__":` guard). `tokenizer` is a tokenizer folder,
    tokenizer.json or vocab.txt. Returns the summary the command prints (examples, tokens,
    shards, documents, and the corpus tokens read, kept and dropped)."""
    from electra.data.prepare import prepare as run

    corpus = [str(corpus)] if isinstance(corpus, str | Path) else [str(c) for c in corpus]
    return run(
        corpus,
        tokenizer,
        seq_len=seq_len,
        out_dir=out,
        seed=seed,
        workers=workers,
        overwrite=overwrite,
        packing=packing,
    )


def pretrain(
    cfg: RunConfig | None = None,
    data: str | Path | Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    *,
    preset: str | None = None,
    config: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    resume: bool = False,
    given: Collection[str] | None = None,
    overwrite: bool = False,
    **sections: Mapping[str, Any],
) -> Path:
    """Pretrains a discriminator and generator as `electra pretrain` does, into the run folder
    `out` (default runs/PRESET), and returns it. Its settings are `cfg` (a `RunConfig`), or as the
    command takes them: the `preset` (default small, or the settings file's `preset`), the
    settings file `config` (JSON or TOML, `--config`), then `section.field` values, as
    `overrides={"train.lr": 1e-4}` and/or keyword sections (`train={"lr": 1e-4}`), set over
    either. `data` is the data folder (written by `electra prepare`; `--data`), or the data
    section's settings. The settings left unset are filled as the command fills them
    (`electra.pretraining.resolve.resolve_run`: the data folder's sequence length, the objective's
    implied settings), where `given` names the section.field keys the caller set (default: those
    set here, and where `cfg` is given, those that differ from its preset's). With `resume`, the
    run in `out` continues from its last checkpoint (from step 0 where it has none yet) with the
    config it was started with, the settings given here on top: they may change only what may
    change on resume (the steps, the learning rate, how it runs:
    `electra.folders.run_folder.MAY_CHANGE_ON_RESUME`), else they are refused. `overwrite`
    starts a new run over an earlier one in `out`."""
    from electra.pretraining.train import pretrain as train

    if resume and out is None:
        raise ElectraError("resuming needs the run folder: pass out=RUN")
    values = _section_values(data, overrides, sections)
    if cfg is None:
        source, resumed = "electra.pretrain", out if resume else None
        cfg, keys = run_settings(preset, config, values, resume=resumed, source=source)
        given = keys if given is None else {*given, *keys}
    else:
        if preset is not None or config is not None:
            raise ElectraError(
                "pass a RunConfig or preset=/config=, not both: a RunConfig holds its preset's "
                "settings already (set others over it with overrides=)"
            )
        if values:
            before = given_keys(cfg) if given is None else set(given)
            cfg = apply_overrides(cfg, values, source="electra.pretrain")
            given = {*before, *values}
    out = out if out is not None else f"runs/{cfg.preset}"
    return train(cfg, out, resume=resume, overwrite=overwrite, given=given)


def run_settings(
    preset: str | None = None,
    config: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    resume: str | Path | None = None,
    source: str = "electra.pretrain",
) -> tuple[RunConfig, set[str]]:
    """A run's config before its unset settings are filled, and the section.field keys the caller
    set, from what `electra pretrain` and `electra.pretrain` take: a new run's from `preset`,
    the settings file `config` and `overrides` (`electra.pretraining.resolve.run_config`); with
    `resume` (a run folder), the run's saved config with them on top, where `preset` and `config`
    are settings too, checked as the others on resume. `source` is how errors name the overrides."""
    overrides = dict(overrides or {})
    if resume is None:
        return run_config(preset, config, overrides, source=source)
    given = flatten(read_config_file(config)) if config else {}
    if preset:
        given["preset"] = preset
    given.update(overrides)
    return resumed_config(resume, given, source=source), set(given)


def _section_values(
    data: str | Path | Mapping[str, Any] | None,
    overrides: Mapping[str, Any] | None,
    sections: Mapping[str, Any],
) -> dict[str, Any]:
    """`electra.pretrain`'s settings as section.field keys: the keyword sections, the data folder
    or data section, then `overrides`."""
    odd = next((name for name, value in sections.items() if not isinstance(value, Mapping)), None)
    if odd is not None:
        raise ElectraError(
            f"{odd}={sections[odd]!r}: a section's settings are a mapping of its fields, e.g. "
            "train={'lr': 1e-4}; a single setting is overrides={'train.lr': 1e-4}"
        )
    values = flatten({name: dict(fields) for name, fields in sections.items()})
    if isinstance(data, Mapping):
        values.update(flatten({"data": dict(data)}))
    elif data is not None:
        values["data.path"] = str(data)
    values.update(overrides or {})
    return values


def finetune(
    model: str | Path,
    task: str,
    data: DataSource,
    out: str | Path,
    cfg: FinetuneConfig | None = None,
    *,
    config: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    resume: bool = False,
    **settings: Any,
) -> dict[str, Any]:
    """Fine-tunes a pretrained model (a model, run or Hugging Face folder) on `task` as
    `electra finetune` does, `seeds` times, scoring each seed on dev; writes `out` (its best
    seed is a fine-tuned model folder) and returns the summary it writes as out/results.json.
    `data` is the task's folder, one file, or {"train": FILE, "dev": FILE, ...}. The recipe is
    `cfg` (default: the defaults), then the settings file `config` (JSON or TOML, `--config`),
    then `settings`, recipe fields as keywords (`epochs=1, seeds=3`: the flags `--epochs 1
    --seeds 3`), and `overrides`, section.field keys (`{"classification.label_column": "y"}`:
    `--classification.label_column y`); all checked as the flags are
    (`finetune_settings`)."""
    from electra.finetuning.run import finetune as run

    values = {**settings, **(overrides or {})}
    cfg = finetune_settings(config, values, base=cfg, source="electra.finetune")
    return run(model, task, data, out, cfg, overwrite=overwrite, resume=resume)


def finetune_settings(
    config: str | Path | None = None,
    values: Mapping[str, Any] | None = None,
    *,
    base: FinetuneConfig | None = None,
    source: str = "electra.finetune",
) -> FinetuneConfig:
    """The fine-tuning recipe from what `electra finetune` and `electra.finetune` take: `base`
    (default: the defaults), then the settings file `config` (JSON or TOML: the recipe's fields,
    each task family's in its own table, `[classification]`, as finetune.json saves them; a
    fine-tuned folder's finetune.json itself gives its recipe), then
    `values`: fields by name (`lr`, `text_columns`: the flat flags) or as section.field keys
    (`classification.text_columns`: the `--section.field` overrides). An unknown setting or a
    bad value is one error naming where it came from (`source` for `values`)."""
    cfg = base
    if config is not None:
        read = read_config_file(config)
        # A fine-tuned folder's finetune.json holds the recipe as its `config` table, beside
        # what the run recorded (task, data, head): its recipe is what reruns it.
        if isinstance(read.get("config"), Mapping) and "task" in read:
            read = read["config"]
        from_file = _nested(read, str(config))
        cfg = FinetuneConfig.from_values(from_file, source=str(config), base=cfg)
    return FinetuneConfig.from_values(_nested(values or {}, source), source=source, base=cfg)


def _nested(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Recipe values with their section.field keys (`qa.qa_head`) nested as
    `FinetuneConfig.from_values` takes them ({"qa": {"qa_head": ...}}), after the flat ones, so
    that a section.field key wins over the same field's flat name."""
    defaults = FinetuneConfig()
    sections = {  # each task family's settings (`electra.tasks.settings`)
        f.name: getattr(defaults, f.name)
        for f in fields(FinetuneConfig)
        if is_dataclass(getattr(defaults, f.name))
    }
    flat: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, dot, name = key.partition(".")
        if not dot:
            flat[key] = dict(value) if isinstance(value, Mapping) else value
        elif section in sections:
            nested.setdefault(section, {})[name] = value
        else:
            known = [f"{s}.{f.name}" for s, kind in sections.items() for f in fields(kind)]
            raise unknown_key(key, known, source)
    for section, given in nested.items():
        before = flat.pop(section, {})
        flat[section] = {**before, **given} if isinstance(before, dict) else before  # refused
    return flat


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


def probe(
    model: str | Path,
    task: str,
    data: DataSource,
    out: str | Path,
    cfg: ProbeConfig | None = None,
    *,
    task_cfg: FinetuneConfig | None = None,
    overwrite: bool = False,
    **settings: Any,
) -> dict[str, Any]:
    """A linear probe on the frozen features of `model` (a model, run or Hugging Face folder) for
    `task` (single-label classification or tagging), beside the same architecture's random
    weights and the trivial baseline, as `electra probe` does; writes out/results.json and
    returns it. `data` is the task's folder, its training file (then no dev split: refused), or
    {"train": FILE, "dev": FILE}. The recipe is `cfg` (default `ProbeConfig()`) with `settings`,
    its fields as keywords (`seeds=5, train_examples=500, random_weights=False`); `task_cfg`
    holds the task family's settings (`FinetuneConfig(classification=...)`). A finished probe of
    the same model, data and recipe in `out` is returned without running again."""
    from electra.probing.probe import ProbeConfig
    from electra.probing.probe import probe as run

    known = {f.name for f in fields(ProbeConfig)}
    if unknown := sorted(set(settings) - known):
        raise ElectraError(
            f"electra.probe: unknown setting {unknown[0]!r}: choose from {', '.join(sorted(known))}"
        )
    given = {k: v for k, v in settings.items() if v is not None}  # None: the recipe's value
    cfg = dataclass_replace(cfg or ProbeConfig(), **given)
    return run(model, task, data, out, cfg, task_cfg=task_cfg, overwrite=overwrite)


def export(
    model: str | Path, out: str | Path, *, step: int | None = None, overwrite: bool = False
) -> list[Path]:
    """Writes Hugging Face folders as `electra export` does: out/discriminator and out/generator
    for a run or pair folder (with `step`, that checkpoint of the run), out itself for one model
    or a fine-tuned one (`AutoModelFor*` and `pipeline()` load it). Returns the folders."""
    from electra.hf.export import export_hf

    return export_hf(model, out, overwrite=overwrite, step=step)


def detect(model: str | Path, texts: str | Sequence[str]) -> list[list[dict[str, float | str]]]:
    """Each token's probability of having been replaced, by the discriminator in `model` (a run
    folder or a discriminator folder), as `electra detect --json` prints it: for each text (one
    text is a list of one), [{"token", "p_replaced"}] over its word pieces."""
    from electra.scoring.detect import detect as run

    return run(model, _texts(texts))


def score_text(model: str | Path, texts: str | Sequence[str]) -> list[dict[str, Any]]:
    """Electric's pseudo-log-likelihood of each text under `model` (pretrained with
    objective.name=electric), as `electra score-text --json` prints it: for each text,
    {"text", "pll", "tokens", "energies"}; higher is more likely (for re-ranking)."""
    from electra.scoring.pll import pseudo_log_likelihood

    return pseudo_log_likelihood(model, _texts(texts))


def health(
    run: str | Path,
    data: str | Path,
    *,
    step: int | None = None,
    max_rows: int | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """A pretraining run's held-out health, as `electra health --json` prints it: its networks
    (the finished models, or checkpoint `step`) on the first `max_rows` rows (default 256) of
    `data` (a folder `prepare` wrote with the run's tokenizer), masked and sampled from `seed`
    (default: the run's), and judged against the run's start and the history it logged on the
    same rows. {"scored": which networks, "disc_auc", "disc_auc_fixed", "disc_ap",
    "disc_prior_gain", "mlm_loss", "hidden_rms", "mean_cosine", "effective_rank", "verdict",
    "verdict_reason", "in_words", ...}."""
    from electra.scoring.health import MAX_ROWS
    from electra.scoring.run_health import score_run
    from electra.scoring.verdict import in_words

    if max_rows is not None and max_rows < 1:
        raise ElectraError(f"--rows {max_rows}: score at least 1 held-out row")
    measured, which = score_run(run, data, step, max_rows or MAX_ROWS, seed)
    return {"scored": which, **measured.record(), "in_words": in_words(measured)}


def _texts(texts: str | Sequence[str]) -> list[str]:
    return [texts] if isinstance(texts, str) else list(texts)


def experiment(
    out: str | Path,
    arms: Sequence[str],
    data: str | Path,
    *,
    flops: float | None = None,
    steps: int | None = None,
    preset: str = "tiny",
    glue: str | Path | None = None,
    tasks: Sequence[str] | None = None,
    task: str | None = None,
    task_data: str | Path | None = None,
    seeds: int = 3,
    score: str = "finetune",
    points: int = 1,
    pretrain_set: Mapping[str, Any] | None = None,
    finetune_set: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Pretrains each of `arms` (an objective name, or "LABEL:section.field=value,...") from
    `preset` on the data folder `data` at one budget, `flops` per arm or what the first arm
    spends in `steps` (one of the two), fine-tunes `points` checkpoints of each on `tasks`
    (GLUE's under `glue`; default mrpc stsb rte, none where `task` is given) and on `task`, a
    task on your own files in `task_data`, over `seeds` seeds (`score` "probe": probes their
    frozen features instead, `electra probe`; "both": both), and writes the table and plots to
    `out`, as `electra experiment` does; returns the results it writes as out/results.json.
    `pretrain_set` ({"train.lr": 1e-4}) is set on every arm, `finetune_set` ({"epochs": 3}) on
    every fine-tuning. Called again with the same plan, it continues where it stopped."""
    from electra.engine.progress import progress_off
    from electra.recipes.experiment import Plan, parse_arm, run_experiment

    if (flops is None) == (steps is None):
        raise ElectraError(
            "give the budget as flops=N (training FLOPs per arm) or steps=N (the first arm's "
            "steps set it), one of the two"
        )
    if bool(task) != bool(task_data):
        raise ElectraError(
            "--task and --task-data go together: the task and the folder of its files"
        )
    tasks = list(tasks) if tasks else ([] if task else ["mrpc", "stsb", "rte"])
    plan = Plan(
        preset=preset,
        data=str(data),
        glue=None if glue is None else str(glue),
        arms=[parse_arm(a) for a in arms],
        tasks=[*tasks, *([task] if task else [])],
        seeds=seeds,
        score=score,
        flops=flops,
        steps=steps,
        points=points,
        pretrain_set=_as_text(pretrain_set),
        finetune_set=_as_text(finetune_set),
        task_data={task: str(task_data)} if task else {},
    )
    with contextlib.nullcontext() if progress else progress_off():
        return run_experiment(plan, out)


def adapt(
    model: str | Path,
    task: str,
    data: str | Path,
    out: str | Path,
    *,
    corpus: Sequence[str | Path] | None = None,
    arms: Sequence[str] = ("none", "electra", "mlm"),
    steps: int = 200,
    seeds: int = 3,
    pretrain_seeds: int = 1,
    batch_size: int = 16,
    seq_len: int = 128,
    probe: bool = True,
    pretrain_set: Mapping[str, Any] | None = None,
    finetune_set: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Whether continuing the checkpoint `model` helps `task` (its files in `data`), as
    `electra adapt` does: the checkpoint as it is (arm none), continued with RTD for `steps`
    steps (electra) and with MLM at the same FLOPs (mlm), `pretrain_seeds` times each, on
    `corpus` (text files; default: the task's training text, labels dropped; never a row of its
    dev or test files), each fine-tuned `seeds` times and probed (`probe`); writes `out` and
    returns its results.json. `finetune_set` holds fine-tuning's settings ({"text_columns":
    "a,b", "label_column": "y", "max_train_examples": 500, "epochs": 3}), `pretrain_set`
    pretraining's ({"train.lr": 5e-5}). Called again with the same plan, it continues."""
    from electra.engine.progress import progress_off
    from electra.recipes.adapt import AdaptPlan, run_adapt

    plan = AdaptPlan(
        model=str(model),
        task=task,
        data=str(data),
        corpus=[str(c) for c in corpus or []],
        arms=list(arms),
        steps=steps,
        seeds=seeds,
        pretrain_seeds=pretrain_seeds,
        batch_size=batch_size,
        seq_len=seq_len,
        probe=probe,
        pretrain_set=_as_text(pretrain_set),
        finetune_set=_as_text({k: v for k, v in (finetune_set or {}).items() if v is not None}),
    )
    with contextlib.nullcontext() if progress else progress_off():
        return run_adapt(plan, out)


def _as_text(values: Mapping[str, Any] | None) -> dict[str, str]:
    """Settings as the command line spells them (the plan saved in experiment.json compares
    equal whether a run was started from Python or from the command)."""

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, list | tuple):
            return ",".join(map(str, value))
        return str(value)

    return {key: text(value) for key, value in (values or {}).items()}


def score(
    task: str,
    predictions: str | Path,
    data: str | Path | None = None,
    null_odds: str | Path | None = None,
    null_threshold: float = 1.0,
) -> dict[str, Any]:
    """Scores a predictions file as `electra score` does: a run's predictions.jsonl for any task,
    or for SQuAD the official predictions.json with its questions' file `data` (and for 2.0 the
    official `null_odds` file, {id: null score}, thresholded at `null_threshold`). Returns the
    scores the command prints."""
    from electra.finetuning.results import score_predictions
    from electra.tasks import get_task
    from electra.tasks.qa import QaTask
    from electra.tasks.squad import score_file

    kind = get_task(task)
    path = Path(predictions)
    if not path.is_file():
        raise ElectraError(f"predictions file not found: {path}")
    if path.suffix == ".jsonl":
        return score_predictions(kind, path)
    if isinstance(kind, QaTask):
        if not data:
            raise ElectraError(
                "scoring a SQuAD predictions.json needs the questions: pass --data FILE"
            )
        return score_file(kind.version, Path(data), path, null_odds, null_threshold)
    raise ElectraError(
        f"{path}: pass the predictions.jsonl of a {kind.name} run (SQuAD also takes the "
        "official predictions.json)"
    )


def plot(run: str | Path, out: str | Path | None = None) -> Path:
    """Draws a run's learning curves to a PNG as `electra plot` does (default
    RUN/learning_curves.png) and returns its path."""
    from electra.engine.plot import plot_run

    return plot_run(run, out)


def preset_sizes(vocab_size: int | None = None) -> list[dict[str, Any]]:
    """Each preset's sizes, as `electra presets` lists them: its name, the discriminator's
    parameters (embeddings and encoder), the generator's not shared with it, its hidden size,
    layers and embedding size ("-" for a family without one), the generator's hidden size, and
    the sequence length, batch size, learning rate and vocabulary it trains with; counted at
    each family's vocabulary, or at `vocab_size` (a run's is its data's tokenizer's)."""
    import torch

    from electra.config import generator_config, preset, presets
    from electra.model.family import encoder_of
    from electra.model.layers import count_parameters
    from electra.objectives.sharing import build_pair

    if vocab_size is not None and vocab_size < 1:
        raise ElectraError(f"--vocab-size {vocab_size}: give at least 1")
    rows = []
    for name in presets():
        c = preset(name)
        if vocab_size is not None:  # the padding id only has to be a token of it
            c.model = dataclass_replace(c.model, vocab_size=vocab_size, pad_token_id=0)
        with torch.device("meta"):  # sizes only, no memory
            # The pair as the preset's sharing builds it, in its family (electra.model.family).
            g, d = build_pair(c.model, c.objective)
        rows.append(
            {
                "preset": name,
                "discriminator": count_parameters(encoder_of(d)),
                "generator_not_shared": count_parameters(d, g) - count_parameters(d),
                "hidden_size": c.model.hidden_size,
                "layers": c.model.num_hidden_layers,
                "embedding_size": getattr(c.model, "embedding_size", "-"),
                "generator_hidden_size": generator_config(c.model, c.objective).hidden_size,
                "seq_len": c.data.seq_len,
                "batch_size": c.train.batch_size,
                "lr": c.train.lr,
                "vocab_size": c.model.vocab_size,
            }
        )
    return rows
