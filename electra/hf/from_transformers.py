"""Hugging Face folders of a family's classes (`electra.model.hf_names`: `ElectraModel`,
`ModernBertForSequenceClassification`, ...) with a task head, or with none
(docs/huggingface.md#import).

- `load_encoder`: the encoder of any pretrained folder (ours, a run's, or one of these), which
  `electra finetune` trains a new head on.
- `load_hf_encoder`: the encoder of a bare encoder's folder (what `AutoModel` saves, its weights
  without the family's prefix, `electra.` or `model.`) or of a classifier, tagger or QA folder,
  for `electra finetune`, which trains a new head: the folder's own head is left behind, and said
  so once on stderr.
- `is_hf_task_dir` and `load_hf_finetuned`: a classifier (`...ForSequenceClassification`:
  single-label, multi-label or regression by `problem_type` and `num_labels`), tagger
  (`...ForTokenClassification`) or QA (`...ForQuestionAnswering`) folder run as it is by
  `electra predict` and `electra evaluate`, with the task its `config.json` describes (labels from
  `id2label`) and a model computing HF's logits (a classifier's from the family's
  `HFNames.import_classifier`); the weights load by name. No such folder records the text columns
  its classifier was trained on, so it reads one text or a pair, as each input gives it
  (`ClassificationTask.read_with`, `from_line`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tokenizers
import torch
from torch import nn

from electra.errors import ElectraError
from electra.folders.model_folder import (
    architectures,
    config_json,
    fit_state_dict,
    folder_class,
    is_model_dir,
    load_pretrained,
    load_strict,
    misfit,
    model_tokenizer,
    read_model_config,
    resolve_model_dir,
    with_article,
)
from electra.folders.saved_with import check_config
from electra.folders.weights import read_state_dict, weights_file
from electra.model.configs import AnyModelConfig
from electra.model.family import encoder_of, family_of
from electra.model.heads import build_head
from electra.model.hf_names import default_model_type, family_of_type, hf_families, hf_of
from electra.tasks.base import Task
from electra.tasks.finetune_config import FinetuneConfig
from electra.tasks.labelled import ClassificationTask, RegressionTask
from electra.tasks.multilabel import MultilabelTask
from electra.tasks.qa import QaTask
from electra.tasks.settings import QaSettings
from electra.tasks.tagging import TAG, TaggingTask


def task_heads() -> tuple[str, ...]:
    """The HF classes that `electra predict` and `evaluate` run as they are, of every family."""
    return tuple(name for family in hf_families().values() for name in family.task_heads)


def encoder_sources() -> dict[str, str]:
    """The HF classes whose encoder `electra finetune` takes, and the head each leaves behind (and
    our heads' classes, so that every fine-tuned folder of ours is taken too)."""
    return {
        name: description
        for family in hf_families().values()
        for name, description in (
            (family.encoder, ""),
            *((h.hf_class, h.description) for h in family.heads),
            *((h.ours, h.description) for h in family.heads),
            *family.other_encoders,
        )
    }


PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")


class _Encoder(nn.Module):
    """The encoder under its family's prefix (`electra.`, `model.`, `bert.`), as every head holds
    it: what the weights of a folder are checked against."""

    def __init__(self, cfg: AnyModelConfig):
        super().__init__()
        self.config = cfg
        network = family_of(cfg).pretraining(cfg)
        self.prefix = network.base_model_prefix
        setattr(self, self.prefix, encoder_of(network))


def load_encoder(path: str | Path) -> tuple[AnyModelConfig, dict, tokenizers.Tokenizer, Path]:
    """A pretrained model folder (ours or Hugging Face's, or a run): its encoder's config,
    weights (the `electra.*` or `model.*` tensors, its family's prefix), tokenizer and path, which
    `electra finetune` puts a new head on. A Hugging Face folder with a task head, or none
    (`ElectraModel`, `ModernBertModel`), gives its encoder (`load_hf_encoder`)."""
    if (found := load_hf_encoder(path)) is not None:
        return found
    model, tokenizer = load_pretrained(path)
    prefix = model.base_model_prefix
    encoder_state = {f"{prefix}.{k}": v for k, v in encoder_of(model).state_dict().items()}
    return model.config, encoder_state, tokenizer, resolve_model_dir(path)


def load_hf_encoder(
    path: str | Path,
) -> tuple[AnyModelConfig, dict[str, torch.Tensor], tokenizers.Tokenizer, Path] | None:
    """`load_encoder` for a folder of `encoder_sources()`: its config, encoder weights (under
    `electra.` or `model.`), tokenizer and path. None for a pretraining folder (a discriminator or
    generator: `load_pretrained` reads it); any other folder is an error naming what is taken."""
    path = resolve_model_dir(path)
    pretraining, sources = architectures(), encoder_sources()
    arch, cfg = read_model_config(path, (*pretraining, *sources))
    if arch in pretraining:
        return None
    tokenizer = model_tokenizer(path, cfg)
    state = read_state_dict(path)
    with torch.device("meta"):  # only the names and shapes are compared
        holder = _Encoder(cfg)
    prefix, bare = holder.prefix, arch == hf_of(cfg).encoder
    if bare and not any(k.startswith(f"{prefix}.") for k in state):
        state = {f"{prefix}.{k}": v for k, v in state.items()}  # a base model's names
    state = fit_state_dict(state, holder, path)  # drops the buffers older versions saved
    # The encoder's weights; a pooler (BERT's, RoBERTa's) is a head's first layer: left behind
    # with the head.
    inside, pooler = f"{prefix}.", f"{prefix}.pooler."
    state = {k: v for k, v in state.items() if k.startswith(inside) and not k.startswith(pooler)}
    if problem := misfit(holder, state, weights_file(path).name):
        raise ElectraError(
            f"the weights in {path} do not fit its config.json: {problem}: fix config.json or use "
            "the folder it came with"
        )
    check_config(path)  # an edit that keeps the sizes: not what the weights were saved with
    if head := sources[arch]:
        print(
            f"note: {path} is {with_article(arch)}: its {head} is not used: a new one is trained",
            file=sys.stderr,
        )
    return cfg, state, tokenizer, path


def is_hf_task_dir(path: Path) -> bool:
    """Whether `path` is a model folder of `task_heads()` (the fine-tuned-model check has found no
    finetune.json). False where it holds no model; a model of another kind is an error saying
    what `predict` and `evaluate` take."""
    if not is_model_dir(path):
        return False
    raw = _config(path)
    model_type = raw.get("model_type", default_model_type())
    known, heads = hf_families(), task_heads()
    # A discriminator written as a two-label token classifier: named as what it is.
    arch = folder_class(raw, known[model_type]) if model_type in known else ""
    if model_type in known and arch not in heads:
        raise ElectraError(
            f"{path} holds {'an' if arch[0] in 'AEIOU' else 'a'} {arch}, not a fine-tuned model: fine-tune it with `electra "
            "finetune`, or pass a finetune --out folder, one of its seed folders, or a Hugging "
            f"Face {', '.join(heads[:-1])} or {heads[-1]} folder"
        )
    read_model_config(path, heads)  # another model type: one line saying so
    return True


def load_hf_finetuned(
    path: Path,
) -> tuple[Task, nn.Module, tokenizers.Tokenizer, FinetuneConfig]:
    """`electra.folders.finetuned.load_finetuned` for a folder of `task_heads()`: the task its
    config.json describes, the model with its weights, the tokenizer, and the recipe's defaults with
    `max_seq_len` the tokenizer's `model_max_length` (at most the model's positions)."""
    raw = _config(path)
    arch, model_cfg = read_model_config(path, task_heads)
    tokenizer = model_tokenizer(path, model_cfg)
    family = hf_of(model_cfg)
    if arch not in family.task_heads:  # a config.json whose model_type and class disagree
        raise ElectraError(
            f"{path / 'config.json'}: a {family_of_type(family.model_type).title} model "
            f"(model_type {family.model_type!r}) cannot be a {arch}: fix its model_type or "
            "architectures"
        )
    head = family.task_head(arch)
    pipeline = head.pipeline
    qa = QaSettings(qa_head="linear" if pipeline == "question-answering" else "official")
    cfg = FinetuneConfig(max_seq_len=_max_length(path, model_cfg), qa=qa)
    state = read_state_dict(path)
    if head.own_weight and head.own_weight[0] in state:
        raise ElectraError(
            f"{path} holds {head.own_weight[1]} but no finetune.json: use the seed "
            "folder it came from, or `electra export` that one for Hugging Face"
        )
    if pipeline == "text-classification":
        task, model = _classifier(raw, model_cfg, cfg, path)
    elif pipeline == "token-classification":
        tags = _labels(raw, path)
        _check_tags(tags, path)
        task, model = TaggingTask(tags=tags), build_head("token", model_cfg, len(tags))
    else:
        if _num_labels(raw) != 2:
            raise ElectraError(
                f"{path / 'config.json'}: a question answering head with num_labels="
                f"{_num_labels(raw)}; HF's start and end logits need 2"
            )
        # An answer is withheld where the null score is above 0, as HF's run_squad does for
        # SQuAD 2.0; the record's null_score lets a caller draw its own line.
        head = {"qa_head": "linear", "version": "2.0"}
        task = QaTask(cfg.qa).with_head_config(head)
        model = build_head("span_qa", model_cfg)
    load_strict(model, fit_state_dict(state, model, path), path)
    return task, model, tokenizer, cfg


def _classifier(
    raw: dict, model_cfg: AnyModelConfig, cfg: FinetuneConfig, path: Path
) -> tuple[Task, nn.Module]:
    """The task of a sequence classifier, by `problem_type` (unset: regression for one label,
    as HF's own loss decides), and HF's head of the family (`HFNames.import_classifier`: ELECTRA's
    two-layer one, ModernBERT's with the config's `classifier_pooling`, ...)."""
    n = _num_labels(raw)
    kind = raw.get("problem_type") or ("regression" if n == 1 else PROBLEM_TYPES[0])
    if kind not in PROBLEM_TYPES:
        raise ElectraError(
            f"{path / 'config.json'}: problem_type {kind!r} is not one of {', '.join(PROBLEM_TYPES)}"
        )
    if kind == "regression":
        if n != 1:
            raise ElectraError(
                f"{path / 'config.json'}: regression on {n} outputs; electra's regression "
                "predicts one value (num_labels 1)"
            )
        task: Task = RegressionTask(cfg.classification).with_head_config(
            {"scale": 1.0}
        )  # the logit is the value
    else:
        kinds = {PROBLEM_TYPES[0]: ClassificationTask, PROBLEM_TYPES[1]: MultilabelTask}
        # No text_columns: the input says whether it is one text or a pair.
        task = kinds[kind](cfg.classification).with_head_config(
            {"labels": list(_labels(raw, path))}
        )
    return task, hf_of(model_cfg).import_classifier(raw, model_cfg, n)


def _config(path: Path) -> dict:
    """The folder's config.json; custom code (`auto_map`) and types no family runs refused first,
    before its class is judged."""
    return config_json(path / "config.json")


def _num_labels(raw: dict) -> int:
    """HF's rule: the size of `id2label` where there is one, else `num_labels` (default 2)."""
    return len(raw["id2label"]) if raw.get("id2label") else int(raw.get("num_labels", 2))


def _labels(raw: dict, path: Path) -> tuple[str, ...]:
    """The output names in order: `id2label`, or HF's defaults LABEL_0, LABEL_1, ..."""
    n = _num_labels(raw)
    given = {str(k): str(v) for k, v in (raw.get("id2label") or {}).items()}
    if given and set(given) != {str(i) for i in range(n)}:
        raise ElectraError(
            f"{path / 'config.json'}: id2label's keys are not 0 to {n - 1}: number the labels so"
        )
    labels = tuple(given.get(str(i), f"LABEL_{i}") for i in range(n))
    if len(set(labels)) != n:
        twice = next(x for x in labels if labels.count(x) > 1)
        raise ElectraError(
            f"{path / 'config.json'}: id2label names {twice!r} twice: give each output its own name"
        )
    return labels


def _check_tags(tags: tuple[str, ...], path: Path) -> None:
    if bad := [t for t in tags if not TAG.match(t)]:
        raise ElectraError(
            f"{path / 'config.json'}: the tagger's labels ({', '.join(bad[:3])}) are not IOB: "
            "electra's tagging reads O, B-TYPE and I-TYPE tags; rename id2label's tags so"
        )


def _max_length(path: Path, cfg: AnyModelConfig) -> int:
    """The tokenizer's `model_max_length` (what HF's pipeline truncates to), at most the model's
    positions, which are the length where there is none (or the "no limit" placeholder)."""
    try:
        given = json.loads((path / "tokenizer_config.json").read_text()).get("model_max_length")
    except (OSError, ValueError, AttributeError):
        given = None
    if isinstance(given, int | float) and 0 < given <= cfg.max_position_embeddings:
        return int(given)
    return cfg.max_position_embeddings
