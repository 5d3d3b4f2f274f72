"""`electra probe`: a linear classifier on a model's frozen features, scored on a task's dev split
with the task's own metric, beside the same architecture's random weights and the trivial
baseline (docs/objectives.md §Probing frozen features).

At CPU scale, fine-tuning lets even random weights learn a task, which hides what pretraining
gave; a probe trains no weight of the encoder, so what it scores is in the features. The recipe is
fixed (`ProbeConfig`, saved in results.json): for each seed s, `train_examples` training examples
(tagging: sentences) drawn with `np.random.default_rng(s)` (all where fewer), features
standardized on them, scikit-learn's `LogisticRegression(C=c, max_iter=max_iter)` fitted, dev
predicted; the median and range over seeds are reported. The random-weights encoder of seed s is
the family's own initialization under `torch.manual_seed(s)`.
"""

from __future__ import annotations

import json
import statistics
import sys
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from electra.atomic import replace_dir, temporary_dir, write_json_atomic
from electra.data.store import file_sha256
from electra.errors import ElectraError
from electra.finetuning.baselines import baseline_scores
from electra.finetuning.dev_split import one_file_as_train
from electra.finetuning.overlap import row_keys
from electra.finetuning.results import read_file, read_split
from electra.folders.model_folder import resolve_model_dir
from electra.folders.weights import weights_file
from electra.locks import claim_output
from electra.probing.features import (
    Frozen,
    load_frozen,
    pooled_features,
    random_encoder,
    token_features,
    word_positions,
)
from electra.scoring.spread import BETTER, WORSE, Difference, compared
from electra.tasks import get_task
from electra.tasks.base import Encoded, Task
from electra.tasks.finetune_config import FinetuneConfig, resolve_recipe
from electra.tasks.splits import DataSource, SplitFiles, source_paths

KINDS = {"classification": ("mean", "first"), "tagging": ("token",)}
# What the table calls each feature kind.
SHOWN = {"mean": "mean-pooled", "first": "first-token", "token": "token"}
TAKES = "single-label classification (classification, cola, sst2, mrpc, rte, ...) or tagging"


@dataclass(frozen=True)
class ProbeConfig:
    """The probe's fixed recipe; results.json keeps it, resolved, as `recipe`."""

    seeds: int = 3  # probes, each on its own draw of training examples (and random init)
    # Training examples each probe sees (tagging: sentences), all where fewer; None: 2000, or
    # 1000 sentences for tagging.
    train_examples: int | None = None
    # Tokens per example; None: the task's (128), at most the model's positions.
    max_seq_len: int | None = None
    c: float = 1.0  # LogisticRegression's C, the inverse of its L2 penalty
    max_iter: int = 1000  # LogisticRegression's iterations (lbfgs)
    random_weights: bool = True  # also probe the same architecture with random weights


def probe(
    model_path: str | Path,
    task_name: str,
    data: DataSource,
    out_dir: str | Path,
    cfg: ProbeConfig | None = None,
    *,
    task_cfg: FinetuneConfig | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Probes the frozen features of `model_path` (any folder `electra finetune` takes) on
    `task_name`'s data (a folder, one training file, or {"train": FILE, "dev": FILE}) and writes
    OUT/results.json, which it returns. `task_cfg` holds the task family's settings (text and
    label columns, ...). A finished results.json in `out_dir` of the same model, data and recipe
    is returned as it is; another is replaced only with `overwrite`."""
    cfg = cfg or ProbeConfig()
    check_config(cfg)
    task = get_task(task_name, task_cfg or FinetuneConfig())
    kind = probe_kind(task)
    files = task.resolve(one_file_as_train(data))
    if not files.has("dev"):
        raise ElectraError(
            f"{files.missing['dev']}: a probe is scored on examples it did not train on; pass "
            "--dev FILE (or a --data folder holding a dev file)"
        )
    inputs = _inputs(model_path, task, files, cfg, task_cfg)
    out = Path(out_dir)
    if not overwrite and (saved := finished(out, inputs)) is not None:
        print(f"note: {out}/results.json holds this probe already: kept", file=sys.stderr)
        return saved
    task, train = _read_train(task, files, kind)
    dev = read_split(task, files, "dev")
    model = load_frozen(model_path)
    cfg = resolved(cfg, kind, task, model)  # a length past the model's: refused before writing
    dev, dropped = _unseen_dev(task, model, files, train, dev)
    reads = [model_path, *source_paths(data)]
    with claim_output(out, overwrite, reads=reads, replaces=("results.json",)):
        _check_probe_folder(out)
        results = _run(task, kind, model, train, dev, dropped, cfg, inputs)
        tmp = temporary_dir(out)
        tmp.mkdir(parents=True, exist_ok=True)
        write_json_atomic(tmp / "results.json", results)
        replace_dir(tmp, out)
    return results


def check_config(cfg: ProbeConfig) -> None:
    """Refuses a recipe no probe can run, before anything is read."""
    for name in ("seeds", "train_examples", "max_iter"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            flag = name.replace("_", "-")
            raise ElectraError(f"--{flag} {value}: give at least 1")
    if not cfg.c > 0:
        raise ElectraError(f"c={cfg.c}: LogisticRegression's C must be above 0")


def probe_kind(task: Task) -> str:
    """The task's kind as a probe reads it, classification or tagging; others are refused."""
    if task.family == "tagging":
        return "tagging"
    if task.family == "classification" and not task.regression and not task.multilabel:
        return "classification"
    what = "regression" if task.regression else "multilabel" if task.multilabel else task.family
    raise ElectraError(f"--task {task.name} is {what}: a probe takes {TAKES} (tagging, conll2003)")


def _inputs(model_path, task: Task, files: SplitFiles, cfg: ProbeConfig, task_cfg) -> dict:
    """What a results.json answers: the model (its weights' SHA-256), the task and its settings,
    the data files (their SHA-256) and the recipe asked for, as JSON reads them back."""
    source = resolve_model_dir(model_path)
    data = {
        f"{split}_{name}": {"file": str(path), "sha256": file_sha256(path)}
        for split in ("train", "dev")
        for name, path in files[split].items()
    }
    found = {
        "model": str(source),
        "model_sha256": file_sha256(weights_file(source)),
        "task": task.name,
        "task_settings": asdict(task_cfg) if task_cfg else None,
        "data": data,
        "asked": asdict(cfg),
    }
    return json.loads(json.dumps(found))


def finished(out: Path, inputs: dict) -> dict | None:
    """The results.json in `out` of a probe with these `inputs`, else None."""
    try:
        saved = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) and saved.get("inputs") == inputs else None


def _check_probe_folder(out: Path) -> None:
    """An existing --out is replaced only where a probe wrote it (finetune's has results.json
    too)."""
    try:
        saved = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return
    if not (isinstance(saved, dict) and "features" in saved and "recipe" in saved):
        raise ElectraError(
            f"{out} holds another command's results.json, not a probe's: choose another --out"
        )


def _read_train(task: Task, files: SplitFiles, kind: str) -> tuple[Task, list]:
    """The training examples and the task fitted to them; one label is refused: a probe
    separates two at least."""
    path = files.file("train")
    train = read_file(task, path, "train")
    if kind == "tagging":
        labels = {t for s in train for t in s.tags or ()}
    else:
        labels = {e.label for e in train}
    if len(labels) < 2:
        only = next(iter(labels), None)
        raise ElectraError(
            f"{task.name} has one label ({only}) in {path}: a probe needs at least two"
        )
    return task.fit(train, path), train


def _unseen_dev(task: Task, model: Frozen, files: SplitFiles, train: list, dev: dict):
    """The dev sets without any row of the training file (the same text, normalised as the
    model reads it: `electra.finetuning.overlap.row_keys`), and how many rows were left out."""
    trained = np.unique(row_keys(task, train, model.tokenizer))
    dropped = 0
    for name, examples in dev.items():
        seen = np.isin(row_keys(task, examples, model.tokenizer), trained).tolist()
        if not any(seen):
            continue
        where = files["dev"][name]
        if all(seen):
            raise ElectraError(
                f"{where}: all {len(seen)} of its rows are rows of the training file "
                f"{files.file('train')}: nothing is left to score; pass another --dev FILE"
            )
        dev[name] = [e for e, s in zip(examples, seen, strict=True) if not s]
        dropped += sum(seen)
        print(
            f"note: {where}: {sum(seen)} of its {len(seen)} rows left out of the score: they "
            f"are rows of the training file {files.file('train')}",
            file=sys.stderr,
        )
    return dev, dropped


def resolved(cfg: ProbeConfig, kind: str, task: Task, model: Frozen) -> ProbeConfig:
    """The recipe with its defaults filled: the length checked against the model's positions
    as fine-tuning checks it."""
    length = resolve_recipe(
        FinetuneConfig(max_seq_len=cfg.max_seq_len), model.cfg, task.epochs, task.max_seq_len
    ).max_seq_len
    examples = cfg.train_examples or (1000 if kind == "tagging" else 2000)
    return replace(cfg, max_seq_len=length, train_examples=examples)


def draws(n: int, cfg: ProbeConfig) -> list[np.ndarray]:
    """Each seed's training rows: `train_examples` of `n` drawn with default_rng(seed), sorted;
    all of them where there are no more."""
    if n <= cfg.train_examples:
        return [np.arange(n) for _ in range(cfg.seeds)]
    return [
        np.sort(np.random.default_rng(s).choice(n, cfg.train_examples, replace=False))
        for s in range(cfg.seeds)
    ]


@dataclass
class _Data:
    """The encoded examples a probe reads: the training rows some seed draws, and dev."""

    task: Task
    kind: str
    train: Encoded
    dev: dict[str, tuple[list, Encoded]]
    picks: list[np.ndarray]  # each seed's rows of `train`


def _run(task, kind, model: Frozen, train, dev, dropped, cfg, inputs) -> dict[str, Any]:
    """The probe's results.json: the training rows drawn and encoded once, then each feature
    kind probed on the model's encoder and on each seed's random one (`cfg` resolved)."""
    picks = draws(len(train), cfg)
    used = np.unique(np.concatenate(picks))  # the rows some seed trains on: encoded once
    rows = {int(r): i for i, r in enumerate(used)}
    length = cfg.max_seq_len
    data = _Data(
        task,
        kind,
        task.encode([train[i] for i in used], model.tokenizer, length, training=False),
        {k: (v, task.encode(v, model.tokenizer, length, training=False)) for k, v in dev.items()},
        [np.array([rows[int(r)] for r in p]) for p in picks],
    )
    unit = "sentences" if kind == "tagging" else "examples"
    n_dev = sum(len(v) for v in dev.values())
    print(
        f"{task.name}: probing the frozen features of {model.source}, "
        f"{len(picks[0])} of {len(train)} training {unit} per seed, {cfg.seeds} seeds, "
        f"{n_dev} dev {unit}",
        file=sys.stderr,
    )
    features = _probe_encoder(data, [model.encoder] * cfg.seeds, cfg, "pretrained")
    randoms = None
    if cfg.random_weights:
        encoders = (random_encoder(model.cfg, s) for s in range(cfg.seeds))
        randoms = _probe_encoder(data, encoders, cfg, "random weights")
    results = {
        "model": str(model.source),
        "task": task.name,
        "kind": kind,
        "main_metric": task.main_metric,
        "recipe": asdict(cfg),
        "examples": {
            "unit": unit,
            "train": len(train),
            "probed": len(picks[0]),
            "dev": n_dev,
            "dev_dropped_overlap": dropped,
        },
        "features": features,
        "random_weights": randoms,
        "baseline": baseline_scores(task, task.baseline(train), dev),
        "inputs": inputs,
    }
    return {**results, **_gains(features, randoms)}


def _probe_encoder(data: _Data, encoders, cfg: ProbeConfig, name: str) -> dict[str, dict]:
    """Each feature kind's scores over the seeds, seed s probing `encoders`' s-th (the same
    pretrained encoder every seed, or a random one each): {kind: {"median", "min", "max",
    "per_seed", "metrics"}}."""
    kinds = KINDS[data.kind]
    per_seed: dict[str, list[dict]] = {k: [] for k in kinds}
    last, train, dev = None, {}, {}
    for seed, encoder in enumerate(encoders):
        if encoder is not last:  # the pretrained encoder's features are read once
            train, dev = _features(data, encoder)
            last = encoder
        for k in kinds:
            per_seed[k].append(_fit_and_score(data, train, dev, k, data.picks[seed], cfg))
        shown = ", ".join(f"{SHOWN[k]} {per_seed[k][-1][data.task.main_metric]:.2f}" for k in kinds)
        print(f"{name} seed {seed}: {shown}", file=sys.stderr)
    return {k: summary(v, data.task.main_metric) for k, v in per_seed.items()}


def _features(data: _Data, encoder) -> tuple[dict, dict]:
    """The training rows' features, and each dev set's, by kind."""
    read = token_features if data.kind == "tagging" else pooled_features
    return read(encoder, data.train), {k: read(encoder, enc) for k, (_, enc) in data.dev.items()}


def _targets(data: _Data, encoded: Encoded) -> np.ndarray:
    """The class index of each feature row: each example's, or each word's (at its first
    sub-token)."""
    labels = encoded.tensors["labels"].numpy()
    if data.kind != "tagging":
        return labels
    sentences, positions = word_positions(encoded)
    return labels[sentences, positions]


def _fit_and_score(data: _Data, train: dict, dev: dict, kind: str, picks, cfg) -> dict:
    """One seed's probe on one feature kind: standardize, fit, predict each dev set, and score
    with the task's metric (several dev sets' metrics prefixed by the set, as fine-tuning's)."""
    x, y = train[kind], _targets(data, data.train)
    if data.kind == "tagging":
        sentences, _ = word_positions(data.train)
        rows = np.isin(sentences, picks)
    else:
        rows = picks
    scaler = StandardScaler().fit(x[rows])
    classifier = _classifier(scaler.transform(x[rows]), y[rows], cfg)
    scores = {}
    for name, (examples, encoded) in data.dev.items():
        log_p = classifier(scaler.transform(dev[name][kind]))
        outputs = _outputs(data, encoded, log_p)
        prefix = f"{name}_" if len(data.dev) > 1 else ""
        predicted = data.task.score(data.task.decode(examples, encoded, outputs))
        scores.update({prefix + k: v for k, v in predicted.items()})
    return scores


def _classifier(x: np.ndarray, y: np.ndarray, cfg: ProbeConfig):
    """A function from features to log-probabilities over every label of the task, a label the
    draw holds no example of at -inf (one label only: that one, always)."""
    classes = np.unique(y)
    if len(classes) == 1:
        return lambda features: _spread(np.zeros((len(features), 1)), classes)
    model = LogisticRegression(C=cfg.c, max_iter=cfg.max_iter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(x, y)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        print(f"note: the probe did not converge in {cfg.max_iter} iterations", file=sys.stderr)
    return lambda features: _spread(model.predict_log_proba(features), model.classes_)


def _spread(log_p: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Log-probabilities over the probe's classes, placed at the classes' indices (the others
    -inf): [N, max class + 1], widened by `_outputs` to the task's labels."""
    full = np.full((len(log_p), int(classes.max()) + 1), -np.inf)
    full[:, classes] = log_p
    return full


def _outputs(data: _Data, encoded: Encoded, log_p: np.ndarray) -> dict[str, torch.Tensor]:
    """What `task.decode` reads: {"logits": [N, labels]} per example, or {"tags": [N, T]} with
    each word's predicted tag at its first sub-token."""
    labels = len(data.task.labels)
    if data.kind != "tagging":
        logits = torch.full((len(log_p), labels), -float("inf"))
        logits[:, : log_p.shape[1]] = torch.from_numpy(log_p).float()
        return {"logits": logits}
    tags = torch.zeros(encoded.tensors["input_ids"].shape, dtype=torch.long)
    sentences, positions = word_positions(encoded)
    if len(sentences):
        tags[sentences, positions] = torch.from_numpy(log_p.argmax(-1))
    return {"tags": tags}


def summary(per_seed: list[dict], main: str) -> dict[str, Any]:
    """The main metric's median and range over seeds, with every seed's metrics."""
    values = [s[main] for s in per_seed]
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "per_seed": values,
        "metrics": per_seed,
    }


def _differences(features: dict, randoms: dict) -> dict[str, Difference]:
    """By kind, in the table's order: the pretrained scores against the random ones
    (`electra.scoring.spread`)."""
    return {k: compared(features[k], randoms[k]) for k in SHOWN if k in features}


def _gains(features: dict, randoms: dict | None) -> dict[str, Any]:
    """By kind: the pretrained median less the random one, and whether the seeds show it;
    pretraining beats random weights only where every kind is better beyond the seed spread."""
    if randoms is None:
        return {"gain": None, "difference": None, "beats_random": None}
    d = _differences(features, randoms)
    return {
        "gain": {k: x.gain for k, x in d.items()},
        "difference": {k: x.shown for k, x in d.items()},
        "beats_random": all(x.shown == BETTER for x in d.values()),
    }


def table(results: dict[str, Any]) -> list[str]:
    """What `electra probe` prints: the main metric's median [min, max] by feature kind for the
    pretrained and random weights, the trivial baseline, and whether pretraining helped."""
    kinds, main = KINDS[results["kind"]], results["main_metric"]  # saved JSON sorts its keys
    seeds = results["recipe"]["seeds"]
    width = 18

    def cell(s: dict) -> str:
        return f"{s['median']:.2f} [{s['min']:.2f}, {s['max']:.2f}]".ljust(width + 6)

    lines = [
        f"{results['task']} dev {main}, median [min, max] over {seeds} seed"
        f"{'s' * (seeds > 1)}, a linear probe on frozen features:",
        " " * width + "".join(SHOWN[k].ljust(width + 6) for k in kinds),
        "pretrained".ljust(width) + "".join(cell(results["features"][k]) for k in kinds),
    ]
    if results["random_weights"]:
        row = "".join(cell(results["random_weights"][k]) for k in kinds)
        lines.append("random weights".ljust(width) + row)
    bar = ((results.get("baseline") or {}).get("metrics") or {}).get(main)
    if bar is not None:
        lines.append(
            "trivial baseline".ljust(width) + "".join(f"{bar:.2f}".ljust(24) for _ in kinds)
        )
    if results["gain"] is not None:
        lines.append(_verdict(results))
    return [line.rstrip() for line in lines]


def _verdict(results: dict[str, Any]) -> str:
    """Pretrained against random weights: beaten (or lost to) beyond the seed spread, or no
    difference shown, kind by kind."""
    said = _differences(results["features"], results["random_weights"])
    shown = "; ".join(f"{SHOWN[k]} {d.in_words()}" for k, d in said.items())
    better = [SHOWN[k] for k, d in said.items() if d.shown == BETTER]
    worse = [SHOWN[k] for k, d in said.items() if d.shown == WORSE]
    if len(better) == len(said):
        return f"pretrained features beat random weights beyond the seed spread: {shown}"
    parts = [f"beat random weights with {' and '.join(better)}"] if better else []
    parts += [f"do worse than random weights with {' and '.join(worse)}"] if worse else []
    if not parts:
        return f"pretrained features show no difference from random weights: {shown}"
    return f"pretrained features {' and '.join(parts)}, beyond the seed spread: {shown}"
