"""Export to Hugging Face: folders that `transformers` loads unchanged
(docs/specification.md §Hugging Face naming).

Our module names are Hugging Face's, so export is a re-save through our own loader: the weights are
checked against their config on the way, and a model that its family's HF classes cannot represent
is refused rather than written as weights that load but compute something else.

A fine-tuned model (`electra.folders.finetuned`) goes to `AutoModelForSequenceClassification`,
`...TokenClassification` or `...QuestionAnswering` (`export_finetuned`, the classes of
`electra.model.hf_names`), with its labels, problem type and a model card (`electra.hf.cards`);
the family's `HFNames.export_state` puts the head's weights under HF's class (ELECTRA's paper
one-layer classifier rewritten exactly into HF's two-layer head,
`electra.model.electra.head_rewrite`, docs/huggingface.md; ModernBERT's heads, HF's own, as they
are), and a head HF has no class for (`HFNames.unexported`: the XLNet-style QA head) is refused.
The exported config keeps the fine-tuning dropout, the rate our head was trained with.

A family without Hugging Face names (`Family.hf` None) is refused in one line before anything is
written (`refuse_without_hf`).
"""

from __future__ import annotations

import json
from pathlib import Path

import tokenizers
import torch
from safetensors.torch import load_model
from torch import nn

from electra.atomic import atomic_dir, write_json_atomic, write_text_atomic
from electra.config import RunConfig
from electra.data.tokenizer import load_tokenizer, tokenizer_special_ids
from electra.errors import ElectraError
from electra.folders.checkpoint import PREFIX, checkpoint_dirs
from electra.folders.finetuned import (
    finetuned_dir,
    is_finetuned,
    load_finetuned,
    read_finetune_info,
)
from electra.folders.model_folder import (
    ROLES,
    exported_form,
    is_model_dir,
    load_pretrained,
    read_model_config,
    resolve_model_dir,
    save_pretrained,
    write_model_files,
)
from electra.folders.run_folder import check_run_tokenizer, say
from electra.hf.cards import model_card
from electra.locks import claim_output
from electra.model.family import family_of
from electra.model.hf_names import TaskHead, hf_of
from electra.objectives import build_objective


def check_exportable(model: nn.Module, source: Path) -> None:
    """Refuses what `transformers`' class of the model's family cannot express, weights beyond its
    names (an unfolded GDES residual, say), rather than writing a model that loads but computes
    something else. (Every activation a model config accepts is one `transformers.activations.
    ACT2FN` computes alike.)"""
    cfg = model.config
    with torch.device("meta"):
        reference = set(type(model)(cfg).state_dict())
    extra = sorted(set(model.state_dict()) - reference)
    if extra:
        raise ElectraError(
            f"{source}: weights {', '.join(extra[:3])} have no Hugging Face "
            f"{family_of(cfg).title} counterpart; export the model folder pretraining "
            "wrote (it folds them in)"
        )


def checkpoint_models(
    run_dir: Path, step: int
) -> tuple[list[tuple[str, nn.Module]], tokenizers.Tokenizer]:
    """The networks of RUN/checkpoints/step_N by role, and the run's tokenizer: a finished or
    unfinished run's intermediate weights, as the model folders pretraining would have written."""
    found = {int(p.name[len(PREFIX) :]): p for p in checkpoint_dirs(run_dir)}
    if step not in found:
        have = ", ".join(map(str, found)) or "none"
        raise ElectraError(f"{run_dir} has no checkpoint at step {step} (it has: {have})")
    ckpt = found[step]
    cfg = RunConfig.load(ckpt / "config.json")
    check_run_tokenizer(run_dir, cfg.data.path, data_fingerprint(cfg.data.path))
    tokenizer = load_tokenizer(run_dir / "tokenizer")
    special = tokenizer_special_ids(run_dir / "tokenizer", tokenizer)  # as prepare named them
    objective = build_objective(cfg.model, cfg.objective, special, cfg.data.seq_len)
    try:
        load_model(objective, str(ckpt / "model.safetensors"), strict=True)
    except (OSError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0]
        raise ElectraError(f"cannot load {ckpt / 'model.safetensors'}: {first}") from None
    return list(objective.models().items()), tokenizer


def data_fingerprint(data_path: str | None) -> str | None:
    """The tokenizer fingerprint a run's data folder recorded, or None where it is gone."""
    try:
        return json.loads((Path(data_path) / "meta.json").read_text())["tokenizer_fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def export_hf(
    model_path: str | Path, out: str | Path, overwrite: bool = False, step: int | None = None
) -> list[Path]:
    """Writes OUT/discriminator, OUT/generator (for a run or pair folder) or OUT (one model). With
    `step`, the networks come from that checkpoint of the run at `model_path`. A fine-tuned model
    (or a finetune --out folder: its best seed) goes to `export_finetuned`."""
    model_path, out = Path(model_path), Path(out)
    refuse_without_hf(model_path, step)
    if step is None and is_finetuned(model_path):
        return [export_finetuned(model_path, out, overwrite)]
    held = ("config.json", "discriminator", "encoder", "generator", "mlm")  # what it writes
    # An existing OUT only with `overwrite`, and only an export; one writer.
    with claim_output(out, overwrite, reads=[model_path], replaces=held):
        if step is not None:
            models, tokenizer = checkpoint_models(model_path, step)
            sources = [(model_path, role, model, tokenizer) for role, model in models]
        else:
            roles = [r for r in ROLES if is_model_dir(model_path / r)]
            dirs = [(model_path / r, r) for r in roles] or [(resolve_model_dir(model_path), "")]
            sources = [(src, role, *load_pretrained(src)) for src, role in dirs]
        written = []
        with atomic_dir(out, tag="export-tmp") as tmp:
            for src, role, model, tokenizer in sources:
                check_exportable(model, src)
                model, notes = exported_form(model)  # what HF's class cannot hold, left out
                save_pretrained(model, tmp / role if role else tmp, tokenizer)
                written.append(role)
                if notes:  # said now, and in the folder's card for whoever loads it
                    say(f"{out / role if role else out}: {'; '.join(notes)}")
                    card = (tmp / role if role else tmp) / "README.md"
                    write_text_atomic(card, "".join(f"{note}.\n" for note in notes))
                if role == "discriminator" and hf_of(model.config).discriminator_as:
                    save_encoder(model, tmp / "encoder", tokenizer)
                    written.append("encoder")
    return [out / role if role else out for role in written]


def save_encoder(model: nn.Module, folder: Path, tokenizer: tokenizers.Tokenizer) -> None:
    """A discriminator's encoder as its type's bare model (`BertModel`, `ModernBertModel`, ...),
    what `AutoModel` loads: where HF has no class for our discriminator, the form a hub user
    expects beside the token classifier. A pooler the bare model holds (BERT's, RoBERTa's) is
    as `transformers` initialises it (`HFNames.base_model_state`): RTD trains none."""
    names, prefix = hf_of(model.config), model.base_model_prefix
    state = {
        k[len(prefix) + 1 :]: v.detach().cpu().clone().contiguous()
        for k, v in model.state_dict().items()
        if k.startswith(f"{prefix}.")
    }
    if names.base_model_state is not None:
        state = names.base_model_state(model.config, state)
    config = names.config_json(names.encoder, model.config, tokenizer)
    folder.mkdir()
    write_model_files(folder, config, state, tokenizer)


def refuse_without_hf(model_path: Path, step: int | None = None) -> None:
    """`hf_of`'s one-line refusal where the model at `model_path` (a run with `step`, a fine-tuned
    folder, a model or run folder) is of a family without Hugging Face names, before anything is
    written. A folder that cannot be read is left to the export itself to report."""
    try:
        if step is not None:
            cfg = RunConfig.load(model_path / "config.json").model
        else:
            found = finetuned_dir(model_path) if is_finetuned(model_path) else model_path
            cfg = read_model_config(resolve_model_dir(found), None)[1]
    except ElectraError:
        return
    hf_of(cfg)


# --- fine-tuned models ----------------------------------------------------------------------------


def export_finetuned(model_path: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Writes OUT: a Hugging Face folder that `AutoModelForSequenceClassification`,
    `AutoModelForTokenClassification` or `AutoModelForQuestionAnswering` loads, with its labels,
    problem type, tokenizer files and a model card (README.md)."""
    out = Path(out)
    refuse_without_hf(Path(model_path))
    with claim_output(out, overwrite, reads=[model_path], replaces=("config.json",)):
        source = finetuned_dir(model_path)
        task, model, tokenizer, cfg = load_finetuned(source)
        model.eval()
        head, state, head_config = hf_head_state(task, model, source)
        family = hf_of(model.config)
        extra = {**hf_label_config(task, head), **head_config}
        config = family.config_json(head.hf_class, model.config, tokenizer, **extra)
        info = read_finetune_info(source)
        with atomic_dir(out, tag="export-tmp") as tmp:
            write_model_files(tmp, config, state, tokenizer)
            limit_length(tmp / "tokenizer_config.json", cfg.max_seq_len)
            write_text_atomic(tmp / "README.md", model_card(source, task, info, config, cfg))
    return out


def limit_length(tokenizer_config: Path, max_len: int) -> None:
    """Sets the tokenizer's `model_max_length` to the fine-tuning length, so that a pipeline
    called with `truncation=True` cuts long inputs where `electra predict` does (longest first)."""
    config = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    config["model_max_length"] = max_len
    write_json_atomic(tokenizer_config, config)


def hf_head_state(
    task, model: nn.Module, source: Path
) -> tuple[TaskHead, dict[str, torch.Tensor], dict]:
    """The `transformers` head that the model exports to, the weights under its names (the
    encoder's as they are, the head's as HF's class holds them: the family's
    `HFNames.export_state`) and the config keys the head adds."""
    name, family = type(model).__name__, hf_of(model.config)
    head = family.exported_head(name)
    if head is None:
        why = dict(family.unexported).get(
            name, f"a {name} has no Hugging Face counterpart to export to"
        )
        raise ElectraError(f"{source}: {why}")
    state = {
        k: v.detach().cpu().float().clone().contiguous() for k, v in model.state_dict().items()
    }
    if family.export_state is None:  # HF's own head: the keys are already its
        return head, state, {}
    state, extra = family.export_state(task, model, head, state, source)
    return head, state, extra


def task_labels(task) -> tuple[str, ...]:
    """The task's label names in the order of the head's outputs (none for regression and QA)."""
    return tuple(getattr(task, "labels", None) or ())


def problem_type(task) -> str:
    """HF's `problem_type` of a sequence classifier: it sets the pipeline's function (softmax,
    sigmoid or none) and the loss of further training."""
    if task.regression:
        return "regression"
    if task.multilabel:
        return "multi_label_classification"
    return "single_label_classification"


def hf_label_config(task, head: TaskHead) -> dict:
    """`id2label`, `label2id`, `num_labels` and (sequence classification) `problem_type`."""
    if head.pipeline == "question-answering":
        return {}  # qa_outputs' two logits: HF's default num_labels
    kind = problem_type(task) if head.pipeline == "text-classification" else None
    labels = ("value",) if kind == "regression" else task_labels(task)
    config = {
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "num_labels": len(labels),
    }
    return {**config, "problem_type": kind} if kind else config
