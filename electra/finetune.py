"""Fine-tuning and evaluation: the paper's recipe (docs/specification.md §Fine-tuning) over any
task in `electra.tasks`.

`finetune` reads top to bottom: load the pretrained encoder and the task's data, then for each seed
build the head, train with layer-wise LR decay and the official schedule, predict the dev set and
score it; finally report the median and spread over seeds, as the paper does. Each seed's folder is
a complete fine-tuned model with its `results.json` and `predictions.jsonl`; `evaluate` loads one.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import tokenizers
import torch
from torch import nn
from tqdm import tqdm

from electra.atomic import (
    atomic_dir,
    atomic_path,
    replace_dir,
    temporary_dir,
    write_json_atomic,
)
from electra.config import (
    INFERENCE_RUNTIME,
    FinetuneConfig,
    ModelConfig,
    resolve_recipe,
    with_values,
)
from electra.dev_split import (
    SPLIT_FILE,
    HeldOut,
    draw,
    file_sha256,
    no_dev_error,
    one_file_as_train,
    trained_on,
)
from electra.errors import ElectraError
from electra.graphs import check_graphable
from electra.heads import HEADS
from electra.hf_import import is_hf_task_dir, load_hf_encoder, load_hf_finetuned
from electra.objectives import StepOutput
from electra.optim import build_optimizer, learning_rate, set_learning_rate
from electra.packing import pack_batch
from electra.pretrained import (
    load_pretrained,
    load_strict,
    read_model_config,
    read_state_dict,
    resolve_model_dir,
    save_pretrained,
)
from electra.runtime import (
    Runtime,
    configure_process,
    inference_function,
    prepare_model,
    resolve_device,
    to_device,
    train_step_function,
)
from electra.step import Window
from electra.tasks import get_task
from electra.tasks.base import Batch, Encoded, Task, utf8_text
from electra.tasks.tables import DataSource
from electra.tokenizer import load_tokenizer

FINETUNE_FILE = "finetune.json"


# --- the recipe -----------------------------------------------------------------------------------


def layerwise_groups(model: nn.Module, cfg: FinetuneConfig) -> list[dict]:
    """Parameter groups with `lr_scale` = decay^(top - depth): embeddings are depth 0, encoder
    layer i is i + 1, and the task head is the top, n + 1, at the full LR. With the official
    off-by-one the encoder sits one level further down, so its top layer gets decay^2."""
    n = model.config.num_hidden_layers
    top = n + 1
    groups: dict[tuple[float, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if name.startswith("electra.embeddings"):
            depth = 0
        elif m := re.match(r"electra\.encoder\.layer\.(\d+)\.", name):
            depth = int(m.group(1)) + 1
        elif name.startswith("electra."):
            raise ElectraError(f"no layer-wise LR depth for parameter {name}")
        else:
            depth = top
        exponent = top - depth + (1 if cfg.layerwise_off_by_one and depth < top else 0)
        no_decay = "LayerNorm" in name or name.endswith("bias")
        groups.setdefault((cfg.layerwise_lr_decay**exponent, no_decay), []).append(p)
    return [
        {"params": ps, "lr_scale": scale, "weight_decay": 0.0 if nd else cfg.weight_decay}
        for (scale, nd), ps in groups.items()
    ]


def trim(batch: Batch, static: bool = False, multiple: int = 8) -> Batch:
    """Cuts padding columns that no row in the batch uses, before the batch goes to the device:
    short GLUE sentences need not pay for max_seq_len. The width kept is a multiple of `multiple`
    (8; prediction on a CPU takes 1, as aligned widths buy nothing there and SST-2's sentences
    average 16 tokens), or with `static` a power of two from 32 (or the whole width), so that
    captured steps see few shapes."""
    width = batch["attention_mask"].shape[1]
    used = int(batch["attention_mask"].sum(1).max())
    keep = max(32, 1 << (used - 1).bit_length()) if static else -(-used // multiple) * multiple
    keep = min(width, keep)
    return {k: v[:, :keep] if v.dim() > 1 and v.shape[1] == width else v for k, v in batch.items()}


def task_step(task: Task, model: nn.Module, reduction: str, **batch: torch.Tensor) -> StepOutput:
    """A task's training objective as the step function of `electra.step.train_step`: the loss
    to differentiate (the per-example losses summed or averaged), and their sum as a statistic."""
    losses = task.losses(model, batch)
    loss = losses.sum() if reduction == "sum" else losses.mean()
    return StepOutput(loss=loss, stats={"example_loss": losses.detach().sum()})


def train_model(
    task: Task, model: nn.Module, data: Encoded, cfg: FinetuneConfig, runtime: Runtime, seed: int
) -> list[float]:
    """Trains in place on `runtime.device`; returns the mean per-example loss of each epoch. A
    step is pretraining's (`electra.step.train_step`: clipping, and no update where the loss or
    the gradient is not finite), compiled and captured per batch shape as `runtime` asks
    (`electra.runtime.train_step_function`)."""
    device = runtime.device
    n = len(data)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warmup = int(cfg.warmup_proportion * total)
    optimizer = build_optimizer(layerwise_groups(model, cfg), cfg, device)
    params = [p for p in model.parameters() if p.requires_grad]
    order = torch.Generator().manual_seed(seed)
    run_step = train_step_function(
        model,
        optimizer,
        params,
        cfg.clip_norm,
        runtime,
        loss=lambda forward: functools.partial(task_step, task, forward, cfg.loss_reduction),
    )
    pack = cfg.pack and task.packable and not runtime.cuda_graph  # packed rows vary in number
    model.train()
    epoch_losses, skipped = [], 0
    bar = tqdm(total=total, disable=not cfg.progress, unit="step", file=sys.stderr, leave=False)
    step = 0
    for _ in range(cfg.epochs):
        window = Window()
        for idx in torch.randperm(n, generator=order).split(cfg.batch_size):
            batch = _rows(data, idx)  # untrimmed: pack_batch chooses its rows' width itself
            batch = pack_batch(batch) if pack else trim(batch, static=runtime.cuda_graph)
            set_learning_rate(optimizer, learning_rate(step, cfg.lr, total, warmup))
            run_step([to_device(batch, device)], window=window)
            step += 1
            bar.update(1)
        epoch_losses.append(window.sums["example_loss"].item() / n)  # one sync per epoch
        skipped += int(window.skipped)
        bar.set_postfix(loss=f"{epoch_losses[-1]:.4g}")
    bar.close()
    optimizer.zero_grad(set_to_none=True)  # a captured step leaves its gradient buffers in .grad
    if skipped:
        print(
            f"warning: {skipped} of {total} steps were skipped, their loss or gradient not finite",
            file=sys.stderr,
        )
    return epoch_losses


def _rows(data: Encoded, idx: torch.Tensor) -> Batch:
    return {k: v[idx] for k, v in data.tensors.items()}


def predict(
    task: Task,
    model: nn.Module,
    examples: list,
    data: Encoded,
    runtime: Runtime,
) -> list[dict]:
    """The task's predictions for `examples` (encoded as `data`): `predict_outputs` decoded."""
    return task.decode(examples, data, predict_outputs(task, model, data, runtime))


@torch.no_grad()
def predict_outputs(
    task: Task,
    model: nn.Module,
    data: Encoded,
    runtime: Runtime,
    batch_size: int = 0,
    on_batch: Callable[[int], None] | None = None,
) -> Batch:
    """The task's model outputs (`Task.infer`) for the rows of `data`, in their order, on the host,
    computed on `runtime.device` in `runtime.precision`. Batches (`batch_size` rows; 0: the task's
    own) hold rows of similar lengths (longest first, so that a too-large batch fails at once),
    each trimmed to its longest row; the outputs stay on the device until the last batch (read
    back once). `on_batch(rows)` is called after each batch (a progress bar). With
    `runtime.cuda_graph` the batches take a few static shapes (`trim(static=True)`, the last
    filled up with repeated rows) and, on a GPU, each shape's forward is captured after one eager
    call (each capture synchronizes the device) and replayed (`electra.runtime.inference_function`,
    `electra.graphs.ShapeGraphs`)."""
    model.eval()
    device, cuda_graph = runtime.device, runtime.cuda_graph

    def infer(batch: Batch) -> Batch:
        with runtime.autocast(cache_casts=not cuda_graph):
            return task.infer(model, batch)

    run = inference_function(infer, runtime)
    size = batch_size or task.eval_batch_size
    multiple = 1 if device.type == "cpu" else 8  # exact widths: 15% faster on SST-2 on a CPU
    order = data.tensors["attention_mask"].sum(1).argsort(descending=True, stable=True)
    width = data.tensors["input_ids"].shape[1]
    parts: dict[str, list[torch.Tensor]] = {}
    for idx in order.split(size):
        n = len(idx)
        if cuda_graph and n < size:
            idx = torch.cat([idx, idx[:1].repeat(size - n)])
        batch = trim(_rows(data, idx), static=cuda_graph, multiple=multiple)
        out = run(to_device(batch, device))
        for k, v in out.items():
            v = v[:n].clone()  # a replay's outputs are rewritten by the next replay
            if k in task.token_outputs:  # trimmed to the batch: pad back to the common width
                v = nn.functional.pad(v, (0, width - v.shape[1]))
            parts.setdefault(k, []).append(v)
        if on_batch is not None:
            on_batch(n)
    return {k: torch.cat(v).cpu()[order.argsort()] for k, v in parts.items()}


# --- loading --------------------------------------------------------------------------------------


def load_encoder(path: str | Path) -> tuple[ModelConfig, dict, tokenizers.Tokenizer, Path]:
    """A pretrained model folder (ours or Hugging Face's, or a run): its encoder's config,
    weights (the `electra.*` tensors) and tokenizer. A Hugging Face folder with a task head, or
    none (`ElectraModel`), gives its encoder (`electra.hf_import.load_hf_encoder`)."""
    if (found := load_hf_encoder(path)) is not None:
        return found
    model, tokenizer = load_pretrained(path)
    encoder_state = {f"electra.{k}": v for k, v in model.electra.state_dict().items()}
    return model.config, encoder_state, tokenizer, resolve_model_dir(path)


def finetuned_dir(path: str | Path) -> Path:
    """A fine-tuned model folder, or a fine-tuning output folder (its best seed), or a Hugging
    Face classifier, tagger or QA folder (`electra.hf_import.is_hf_task_dir`)."""
    path = Path(path)
    if (path / FINETUNE_FILE).is_file():
        return path
    results = path / "results.json"
    if results.is_file():
        best = json.loads(results.read_text()).get("best_seed_dir")
        if best and (path / best / FINETUNE_FILE).is_file():
            return path / best
    if not path.exists():
        raise ElectraError(f"fine-tuned model not found: {path}")
    if is_hf_task_dir(path):
        return path
    raise ElectraError(
        f"{path} is not a fine-tuned model (no {FINETUNE_FILE}): pass the --out folder of "
        "`electra finetune` or one of its seed folders"
    )


def load_finetuned(
    path: str | Path,
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig]:
    path = finetuned_dir(path)
    if not (path / FINETUNE_FILE).is_file():
        return load_hf_finetuned(path)
    try:
        info = json.loads((path / FINETUNE_FILE).read_text())
    except (OSError, ValueError) as e:
        raise ElectraError(
            f"cannot read {path / FINETUNE_FILE} ({e}): it may be truncated; fine-tune again"
        ) from None
    cfg = finetune_config(info["config"], source=str(path / FINETUNE_FILE))
    task = get_task(info["task"], cfg).with_head_config(info.get("head", {}))
    _, model_cfg = read_model_config(path, HEADS)
    model = task.build_model(model_cfg)
    load_strict(model, read_state_dict(path), path)
    return task, model, load_tokenizer(path), cfg


def load_for_inference(
    path: str | Path, runtime: dict[str, Any] | None = None
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig, Runtime]:
    """A fine-tuned model (`load_finetuned`) ready to predict, in eval mode: its runtime is the
    one it was fine-tuned with, but on the device `auto` picks, with a progress bar and without
    compiling, with the `INFERENCE_RUNTIME` settings in `runtime` (the command line's) on top.
    CUDA graphs are captured only where there is a GPU."""
    task, model, tokenizer, cfg = load_finetuned(path)
    if unknown := set(runtime or {}) - set(INFERENCE_RUNTIME):
        raise ElectraError(f"{', '.join(sorted(unknown))}: not a setting of inference")
    fresh = {"device": "auto", "compile": False, "progress": True}  # not the training machine's
    cfg = with_values(cfg, {**fresh, **(runtime or {})}, "command line")
    device = resolve_device(cfg.device)
    configure_process(device)
    cfg = replace(cfg, cuda_graph=cfg.cuda_graph and device.type == "cuda")
    model = prepare_model(model, device, cfg.kernels).eval()
    return task, model, tokenizer, cfg, Runtime.of(cfg, device)


def finetune_config(values: dict[str, Any], source: str) -> FinetuneConfig:
    """The recipe from named values (see `electra.config.with_values`)."""
    return with_values(FinetuneConfig(), values, source)


# --- runs -----------------------------------------------------------------------------------------


def read_split(task: Task, data_dir: DataSource, split: str) -> dict[str, list]:
    """A split's examples by evaluation set (MNLI's dev split has two: matched and mismatched)."""
    return {
        name: read_file(task, path, split)
        for name, path in task.split_files(data_dir, split).items()
    }


def read_file(task: Task, path: Path, split: str) -> list:
    """One file's examples, read by the task; a file that is not UTF-8 is one error naming it,
    and so is an id given twice in a dev or test file, whose predictions are matched by id."""
    with utf8_text(path):
        examples = task.read(path, split)
    if split != "train":
        check_unique_ids(path, examples)
    return examples


def check_unique_ids(path: Path, examples: list) -> None:
    seen: set[str] = set()
    for e in examples:
        if e.id in seen:
            raise ElectraError(
                f"{path}: the id {e.id!r} is given to two examples: make the ids unique "
                "(or leave them out, and the examples are numbered)"
            )
        seen.add(e.id)


def evaluate_sets(
    task: Task,
    model: nn.Module,
    sets: dict[str, list],
    encoded: dict[str, Encoded],
    runtime: Runtime,
) -> tuple[dict[str, float], list[dict]]:
    """Predictions for every set, and their scores where gold labels are known."""
    scores, rows = {}, []
    # A model fine-tuned with cuda_graph may be evaluated on the CPU: nothing to capture.
    graphed = runtime.cuda_graph and runtime.device.type == "cuda"
    runtime = replace(runtime, cuda_graph=graphed)
    for name, examples in sets.items():
        preds = predict(task, model, examples, encoded[name], runtime)
        if all(p["label"] is not None for p in preds):
            prefix = f"{name}_" if len(sets) > 1 else ""
            scores.update({prefix + k: v for k, v in task.score(preds).items()})
        rows += [{**p, "set": name} if len(sets) > 1 else p for p in preds]
    return scores, rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise ElectraError(f"{path}, line {line_no}: not JSON ({e})") from None
    if not rows:
        raise ElectraError(f"{path} is empty")
    return rows


def score_predictions(task: Task, path: Path) -> dict[str, float]:
    """Recomputes a run's metrics from its `predictions.jsonl`."""
    rows = read_jsonl(path)
    missing = [r.get("id") for r in rows if "prediction" not in r or r.get("label") is None]
    if missing:
        raise ElectraError(
            f"{path}: {len(missing)} rows lack a prediction or a gold label (first id: {missing[0]})"
        )
    sets: dict[str, list[dict]] = {}
    for r in rows:
        sets.setdefault(r.get("set", ""), []).append(r)
    scores = {}
    for name, preds in sets.items():
        prefix = f"{name}_" if len(sets) > 1 else ""
        scores.update({prefix + k: v for k, v in task.score(preds).items()})
    return scores


def summarize(per_seed: list[dict]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Median of each metric over seeds, and its spread (min, max, standard deviation)."""
    names = per_seed[0]["metrics"].keys()
    medians, spread = {}, {}
    for name in names:
        values = [s["metrics"][name] for s in per_seed]
        medians[name] = statistics.median(values)
        spread[name] = {
            "min": min(values),
            "max": max(values),
            "std": statistics.pstdev(values),
        }
    return medians, spread


# --- the trivial baseline -------------------------------------------------------------------------

# Counts, and the thresholds SQuAD 2.0 tunes, are reported with the scores but are no bar to beat.
_NOT_SCORES = ("total", "thresh")


def baseline_scores(task: Task, fitted: dict | None, sets: dict[str, list]) -> dict | None:
    """The trivial predictor `fitted` (`Task.baseline`) scored with the task's own metrics on
    every labelled set, named as `evaluate_sets` names the model's scores: {"rule", "prediction",
    "metrics"}. None without a predictor or a labelled set."""
    if fitted is None:
        return None
    scores = {}
    for name, examples in sets.items():
        rows = task.constant_predictions(fitted["prediction"], examples)
        if all(r["label"] is not None for r in rows):
            prefix = f"{name}_" if len(sets) > 1 else ""
            scores.update(
                {prefix + k: v for k, v in task.score(rows).items() if not k.endswith(_NOT_SCORES)}
            )
    return {**fitted, "metrics": scores} if scores else None


def sole_prediction(rows: list[dict]) -> tuple[bool, Any]:
    """Whether every prediction (every tag, for tagging) is one value, and that value: the mark
    of a model that learned the label prior and nothing else."""
    values: set[str] = set()
    for r in rows:
        p = r["prediction"]
        values.update(json.dumps(v) for v in (p if isinstance(p, list) else [p]))
        if len(values) > 1:
            return False, None
    return bool(values), json.loads(values.pop()) if values else None


def judge(
    main_metric: str, baseline: dict | None, scores: dict[str, float], rows: list[dict]
) -> dict[str, Any]:
    """A run's flags: whether its main metric beats the baseline's (strictly: predicting the
    baseline's constant scores exactly the baseline; None without a baseline), and whether all its
    predictions are one value."""
    bar = (baseline or {}).get("metrics", {}).get(main_metric)
    single, _ = sole_prediction(rows)
    beats = None if bar is None or main_metric not in scores else scores[main_metric] > bar
    return {"beats_baseline": beats, "single_prediction": single}


def baseline_warning(
    seed: int, main_metric: str, baseline: dict | None, result: dict, rows: list[dict], cfg
) -> str | None:
    """The two lines `finetune` prints for a seed that does not beat the baseline, else None."""
    if result["beats_baseline"] is not False:
        return None
    single, value = sole_prediction(rows)
    shown = "the empty answer" if value == "" else repr(value)
    same = f"; every dev prediction is {shown}" if single else ""
    return (
        f"warning: seed {seed} does not beat the baseline: dev {main_metric} "
        f"{result['metrics'][main_metric]:.2f}, baseline {baseline['metrics'][main_metric]:.2f} "
        f"by predicting {baseline['rule']}{same}\n"
        f"  likely fixes: a longer-pretrained model, another --lr (this run {cfg.lr:g}) or more "
        f"--epochs (this run {cfg.epochs})"
    )


def summary_lines(results: dict[str, Any], split: str) -> list[str]:
    """What `electra finetune` and `electra evaluate` print: each metric with its spread over seeds
    and the baseline's score beside it, then what the baseline predicts."""
    baseline = results.get("baseline") or {"metrics": {}}
    seeds, lines = results.get("seeds", []), []
    for name, value in results["metrics"].items():
        notes = []
        if len(seeds) > 1:
            low, high = results["spread"][name]["min"], results["spread"][name]["max"]
            notes.append(f"min {low:.2f}, max {high:.2f} over {len(seeds)} seeds")
        if name in baseline["metrics"]:
            notes.append(f"baseline {baseline['metrics'][name]:.2f}")
            lost = results.get("seeds_not_beating_baseline")
            if name == results["main_metric"] and lost:
                which = ", ".join(map(str, lost))
                notes[-1] += f", not beaten by seed{'s' if len(lost) > 1 else ''} {which}"
            elif name == results["main_metric"] and results.get("beats_baseline") is False:
                notes[-1] += ", not beaten"
        shown = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{results['task']} {split} {name}: {value:.2f}{shown}")
    if baseline.get("rule"):
        lines.append(f"baseline: {baseline['rule']}")
    return lines


def save_finetuned(
    model: nn.Module,
    task: Task,
    tokenizer,
    cfg: FinetuneConfig,
    out_dir: Path,
    source: Path,
    baseline: dict | None = None,
    data: dict[str, str] | None = None,
    trained: dict[str, str] | None = None,
    held_out: HeldOut | None = None,
) -> None:
    """`baseline` is the fitted trivial predictor, kept so that `evaluate` can score it on any
    split without reading the training set again; `data` the files it was trained and scored on
    (`data_files`), for the model card of an export; `trained` the training file and its hash and
    `held_out` the dev examples held out of it, so that `evaluate` scores no training row."""
    save_pretrained(model, out_dir, tokenizer)
    write_json_atomic(
        out_dir / FINETUNE_FILE,
        {
            "task": task.name,
            "head": task.head_config(),
            "config": asdict(cfg),
            "pretrained": str(source),
            "baseline": baseline,
            "data": data,
            "trained_on": trained,
            "dev_split": held_out.to_json() if held_out else None,
        },
    )


def finished_seed(seed_dir: Path, cfg: FinetuneConfig, source: Path) -> dict | None:
    """The result of a seed an earlier run finished with this exact recipe and model, else None."""
    try:
        saved = json.loads((seed_dir / "results.json").read_text())
        pretrained = json.loads((seed_dir / FINETUNE_FILE).read_text())["pretrained"]
    except (OSError, ValueError, KeyError):
        return None
    if saved.get("config") != json.loads(json.dumps(asdict(cfg))) or pretrained != str(source):
        return None
    return {
        k: saved[k] for k in ("task", "seed", "metrics", "train_loss", "test_metrics") if k in saved
    }


@dataclass
class _Job:
    """What every seed of one `finetune` call shares: the task, the resolved recipe, the pretrained
    encoder, the device, and the data with its trivial baseline."""

    task: Task
    cfg: FinetuneConfig
    model_cfg: ModelConfig
    encoder_state: dict
    tokenizer: tokenizers.Tokenizer
    source: Path
    device: torch.device
    train: list
    dev: dict[str, list]
    fitted: dict | None
    baseline: dict | None
    train_data: Encoded
    dev_data: dict[str, Encoded]
    # An optional test split, predicted by every seed (the tasks on the user's own files).
    test: dict[str, list] = field(default_factory=dict)
    test_data: dict[str, Encoded] = field(default_factory=dict)
    # The files read, by split (and set): kept with each model, for its exported model card.
    data: dict[str, str] = field(default_factory=dict)
    # The training file ({"file", "sha256"}), which `evaluate` refuses to score, and the examples
    # of it held out as dev (`--dev-split`), if any.
    trained_on: dict[str, str] = field(default_factory=dict)
    held_out: HeldOut | None = None


def finetune(
    model_path: str | Path,
    task_name: str,
    data_dir: DataSource,
    out_dir: str | Path,
    cfg: FinetuneConfig,
    overwrite: bool = False,
    resume: bool = False,
) -> dict[str, Any]:
    """Fine-tunes `cfg.seeds` times and scores each on the dev split; returns the summary that is
    also written to OUT/results.json. With `resume`, seeds that an interrupted run with the same
    recipe and model already finished (in OUT's hidden .tmp folder) are kept, not retrained."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ElectraError(f"{out_dir} already exists: choose another --out or pass --overwrite")
    job = _finetune_job(model_path, task_name, data_dir, cfg)

    tmp = temporary_dir(out_dir)
    if not resume:
        shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True, exist_ok=True)
    if job.held_out:
        _keep_held_out(job.held_out, tmp / SPLIT_FILE)
    seeds = range(job.cfg.seed, job.cfg.seed + job.cfg.seeds)
    per_seed = [_finetune_seed(job, seed, tmp / f"seed_{seed}") for seed in seeds]

    results = _finetune_results(job, per_seed)
    write_json_atomic(tmp / "results.json", results)
    replace_dir(tmp, out_dir)
    return results


def _keep_held_out(held_out: HeldOut, path: Path) -> None:
    """Saves the dev split with the run; a resumed run must have drawn the same one."""
    if path.is_file() and HeldOut.from_json(json.loads(path.read_text())) != held_out:
        raise ElectraError(
            f"{held_out.file} changed since the interrupted run drew its dev split: fine-tune "
            "again without --resume"
        )
    write_json_atomic(path, held_out.to_json())


def _finetune_job(
    model_path: str | Path, task_name: str, data_dir: DataSource, cfg: FinetuneConfig
) -> _Job:
    """Loads the encoder, resolves the recipe and device, reads and encodes the task's data."""
    task = get_task(task_name, cfg)
    model_cfg, encoder_state, tokenizer, source = load_encoder(model_path)
    cfg = resolve_recipe(cfg, model_cfg, task.epochs, task.max_seq_len)
    model_cfg = replace(
        model_cfg, hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout
    )
    device = resolve_device(cfg.device)
    check_graphable(cfg, device)
    configure_process(device)

    data_dir = one_file_as_train(data_dir)
    trained, train, dev, held_out = _train_and_dev(task, data_dir, cfg)
    train = _train_examples(task, train, cfg)
    test = _test_examples(task, data_dir)
    fitted = task.baseline(train)
    baseline = baseline_scores(task, fitted, dev)
    train_data = task.encode(train, tokenizer, cfg.max_seq_len, training=True)
    dev_data = {
        k: task.encode(v, tokenizer, cfg.max_seq_len, training=False) for k, v in dev.items()
    }
    init = "random initialization" if cfg.random_init else str(source)
    print(
        f"{task.name}: {len(train)} training examples, {cfg.epochs} epochs, lr {cfg.lr:g}, "
        f"layer decay {cfg.layerwise_lr_decay:g}, from {init}",
        file=sys.stderr,
    )
    return _Job(
        task=task,
        cfg=cfg,
        model_cfg=model_cfg,
        encoder_state=encoder_state,
        tokenizer=tokenizer,
        source=source,
        device=device,
        train=train,
        dev=dev,
        fitted=fitted,
        baseline=baseline,
        train_data=train_data,
        dev_data=dev_data,
        test=test,
        test_data={
            k: task.encode(v, tokenizer, cfg.max_seq_len, training=False) for k, v in test.items()
        },
        data=data_files(
            task, data_dir, ["train", *([] if held_out else ["dev"]), *(["test"] if test else [])]
        ),
        trained_on=trained,
        held_out=held_out,
    )


def data_files(task: Task, data: DataSource, splits: list[str]) -> dict[str, str]:
    """{split (or split_set, MNLI's dev_matched): the file read} of the splits read; a dev split
    held out of the training file is named as such."""
    files = {}
    if "dev" not in splits:
        files["dev"] = "held out of the training file by --dev-split"
    for split in splits:
        found = task.split_files(data, split)
        for name, path in found.items():
            files[split if len(found) == 1 else f"{split}_{name}"] = str(path)
    return files


def _test_examples(task: Task, data: DataSource) -> dict[str, list]:
    """The test split where the task predicts one while fine-tuning and the data holds one: read
    with the others, before anything is written, so that a bad test file stops the run too."""
    if not task.finetune_test or not task.has_split(data, "test"):
        return {}
    return read_split(task, data, "test")


def _train_and_dev(
    task: Task, data: DataSource, cfg: FinetuneConfig
) -> tuple[dict[str, str], list, dict[str, list], HeldOut | None]:
    """The training file ({"file", "sha256"}, hashed once) and its examples, and the dev sets:
    the data's own dev files, or with `cfg.dev_split` a seeded part of the training examples held
    out (`electra.dev_split`). Data without a dev split is refused unless `dev_split` says what
    to hold out."""
    train_file = task.split_files(data, "train")["train"]
    train = read_file(task, train_file, "train")
    trained = {"file": str(train_file), "sha256": file_sha256(train_file)}
    if task.has_split(data, "dev"):
        if cfg.dev_split is not None:
            dev_file = next(iter(task.split_files(data, "dev").values()))
            raise ElectraError(
                f"--dev-split holds out a dev split where the data has none, and {dev_file} is "
                "one: drop --dev-split, or pass the training file alone (--train FILE)"
            )
        for dev_file in task.split_files(data, "dev").values():
            if trained_on(dev_file, trained):
                raise ElectraError(
                    f"{dev_file} holds what the training file {train_file} holds: a dev score "
                    "on it would be on training examples; pass another --dev FILE, or "
                    "--dev-split 0.1 with the training file alone"
                )
        return trained, train, read_split(task, data, "dev"), None
    if cfg.dev_split is None:
        expected = [n for names in task.files.get("dev", {}).values() for n in names]
        raise no_dev_error(data, train_file, task.name, expected)
    if len(task.files.get("dev", {})) > 1:
        raise ElectraError(
            f"{task.name}'s dev split has {len(task.files['dev'])} sets "
            f"({', '.join(task.files['dev'])}): pass its folder as --data, not --dev-split"
        )
    held_out = draw(train_file, trained["sha256"], len(train), cfg.dev_split, cfg.seed)
    train, dev = held_out.split(train)
    check_unique_ids(train_file, dev)
    print(held_out.describe(), file=sys.stderr)
    return trained, train, {_dev_set(task): dev}, held_out


def _dev_set(task: Task) -> str:
    """The name of a task's one dev set (most tasks': "dev")."""
    return next(iter(task.files.get("dev", {"dev": ()})))


def _train_examples(task: Task, train: list, cfg: FinetuneConfig) -> list:
    """The training examples, doubled for unordered pairs and subsampled as the recipe says."""
    if cfg.double_unordered:
        train = task.double_unordered(train)
    if 0 < cfg.max_train_examples < len(train):
        keep = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.seed))
        train = [train[i] for i in sorted(keep[: cfg.max_train_examples].tolist())]
    return train


def _finetune_seed(job: _Job, seed: int, seed_dir: Path) -> dict:
    """One seed's result, judged against the baseline: kept when an interrupted run finished it,
    else trained, scored and written to `seed_dir`."""
    task, cfg = job.task, job.cfg
    result = finished_seed(seed_dir, cfg, job.source)
    if result is not None and bool(job.test) != ("test_metrics" in result):
        # Finished with another set of files: keeping it would leave its test predictions out.
        print(f"seed {seed}: trained again, the test file differs from the run", file=sys.stderr)
        result = None
    if result is not None:
        predictions = read_jsonl(seed_dir / "predictions.jsonl")
        result |= judge(task.main_metric, job.baseline, result["metrics"], predictions)
        print(f"seed {seed}: kept from the interrupted run in {seed_dir}", file=sys.stderr)
    else:
        result, predictions = _train_seed(job, seed, seed_dir)
    if warning := baseline_warning(seed, task.main_metric, job.baseline, result, predictions, cfg):
        print(warning, file=sys.stderr)
    return result


def _train_seed(job: _Job, seed: int, seed_dir: Path) -> tuple[dict, list[dict]]:
    """Trains and scores one seed into a fresh `seed_dir`; its result and dev predictions."""
    task, cfg, device = job.task, job.cfg, job.device
    shutil.rmtree(seed_dir, ignore_errors=True)
    torch.manual_seed(seed)
    model = task.build_model(job.model_cfg)
    if not cfg.random_init:
        missing, unexpected = model.load_state_dict(job.encoder_state, strict=False)
        assert not unexpected and all(not k.startswith("electra.") for k in missing)
    model = prepare_model(model, device, cfg.kernels)
    runtime = Runtime.of(cfg, device)
    losses = train_model(task, model, job.train_data, cfg, runtime, seed)
    scores, predictions = evaluate_sets(task, model, job.dev, job.dev_data, runtime)
    if job.test:  # before the model leaves the device for saving
        test_scores, test_rows = evaluate_sets(task, model, job.test, job.test_data, runtime)
    save_finetuned(
        model.cpu(),
        task,
        job.tokenizer,
        cfg,
        seed_dir,
        job.source,
        job.fitted,
        job.data,
        job.trained_on,
        job.held_out,
    )
    write_jsonl(seed_dir / "predictions.jsonl", predictions)
    result = {"task": task.name, "seed": seed, "metrics": scores, "train_loss": losses}
    if job.test:
        write_jsonl(seed_dir / "test_predictions.jsonl", test_rows)
        result["test_metrics"] = test_scores  # empty for an unlabelled test file
    result |= judge(task.main_metric, job.baseline, scores, predictions)
    # Written last: a seed folder with results.json is complete (see finished_seed).
    write_json_atomic(seed_dir / "results.json", {**result, "config": asdict(cfg)})
    shown = ", ".join(f"{k} {v:.2f}" for k, v in scores.items())
    print(f"seed {seed}: {shown}", file=sys.stderr)
    return result, predictions


def _finetune_results(job: _Job, per_seed: list[dict]) -> dict[str, Any]:
    """The run's results.json: median and spread over seeds, the baseline, the best seed."""
    task, cfg = job.task, job.cfg
    medians, spread = summarize(per_seed)
    best = max(per_seed, key=lambda s: s["metrics"][task.main_metric])
    return {
        "task": task.name,
        "model": str(job.source),
        "random_init": cfg.random_init,
        "main_metric": task.main_metric,
        "metrics": medians,
        "spread": spread,
        "baseline": job.baseline,
        "seeds_not_beating_baseline": [s["seed"] for s in per_seed if s["beats_baseline"] is False],
        "seeds": [s["seed"] for s in per_seed],
        "per_seed": per_seed,
        "best_seed_dir": f"seed_{best['seed']}",
        "examples": {
            "train": len(job.train),
            **{f"dev_{k}": len(v) for k, v in job.dev.items()},
            **{f"test_{k}": len(v) for k, v in job.test.items()},
        },
        **_test_summary(per_seed),
        **({"dev_split": job.held_out.describe()} if job.held_out else {}),
        "config": asdict(cfg),
    }


def _test_summary(per_seed: list[dict]) -> dict[str, Any]:
    """The median test metrics over seeds, where a labelled test file was predicted."""
    if not all(s.get("test_metrics") for s in per_seed):
        return {}
    medians, spread = summarize([{"metrics": s["test_metrics"]} for s in per_seed])
    return {"test_metrics": medians, "test_spread": spread}


def unseen_sets(
    task: Task, data: DataSource, split: str, info: dict[str, Any], source: Path
) -> dict[str, list]:
    """The examples of a split that `evaluate` scores: `read_split`'s, except that the file the
    model trained on is refused, or, where its dev split was held out of that file (or the data
    has no dev file), stands for the held-out examples only (`electra.dev_split`)."""
    held = HeldOut.from_json(info["dev_split"]) if info.get("dev_split") else None
    if split == "dev" and held and not task.has_split(data, "dev"):  # a folder without dev.*
        files = {_dev_set(task): task.split_files(data, "train")["train"]}
    else:
        files = task.split_files(data, split)
    sets = {}
    for name, path in files.items():
        if not trained_on(path, info.get("trained_on")):
            sets[name] = read_file(task, path, split)
        elif held and split == "dev":
            sets[name] = held.split(read_file(task, path, "train"))[1]
            print(
                f"{path}: scoring the {len(sets[name])} examples held out as dev", file=sys.stderr
            )
        else:
            raise ElectraError(
                f"{path} is the file {source} was fine-tuned on: a score on it would be on "
                "training examples; pass a file it did not train on"
            )
    return sets


def evaluate(
    model_path: str | Path,
    data_dir: DataSource,
    split: str = "dev",
    out_dir: str | Path | None = None,
    task_name: str | None = None,
    runtime: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Predicts a split with a fine-tuned model: scores (where gold labels are known), per-example
    predictions and, for a test split of a benchmark with a submission format (GLUE's, SQuAD's),
    its submission files, labelled or not: a labelled SQuAD test file gets the official
    predictions.json and null_odds.json to score. A labelled test split is scored as dev is."""
    source = finetuned_dir(model_path)
    task, model, tokenizer, cfg, run_time = load_for_inference(source, runtime)
    if task_name and get_task(task_name).name != task.name:
        raise ElectraError(f"{source} was fine-tuned for {task.name}, not {task_name}")
    saved = source / FINETUNE_FILE  # none in a Hugging Face folder: no baseline, no train file
    info = json.loads(saved.read_text()) if saved.is_file() else {}
    sets = unseen_sets(task, data_dir, split, info, source)
    encoded = {
        k: task.encode(v, tokenizer, cfg.max_seq_len, training=False) for k, v in sets.items()
    }
    scores, predictions = evaluate_sets(task, model, sets, encoded, run_time)
    # None for a model fine-tuned before baselines were kept: its training set is not read here.
    fitted = info.get("baseline")
    baseline = baseline_scores(task, fitted, sets)
    out_dir = Path(out_dir) if out_dir else source / f"eval-{split}"
    with atomic_dir(out_dir) as tmp:
        write_jsonl(tmp / "predictions.jsonl", predictions)
        files = []
        for name in sets:
            rows = [p for p in predictions if p.get("set", name) == name]
            if split == "test" and task.writes_submission:
                files.append(task.write_submission(rows, name, tmp).name)
        results = {
            "task": task.name,
            "model": str(source),
            "split": split,
            "main_metric": task.main_metric,
            "metrics": scores,
            "baseline": baseline,
            **judge(task.main_metric, baseline, scores, predictions),
            "examples": {k: len(v) for k, v in sets.items()},
            "submission_files": files,
            "config": asdict(cfg),
        }
        write_json_atomic(tmp / "results.json", results)
    return {**results, "out": str(out_dir)}
