"""Export to Hugging Face: folders that `transformers` loads unchanged
(docs/specification.md §Hugging Face naming).

Our module names are Hugging Face's, so export is a re-save through our own loader: the weights are
checked against their config on the way, and a model that HF ELECTRA cannot represent is refused
rather than written as weights that load but compute something else.

A fine-tuned model goes to `AutoModelForSequenceClassification`, `...TokenClassification` or
`...QuestionAnswering` (`export_finetuned`), with its labels, problem type and a model card; the
paper's one-layer classifier is rewritten exactly into HF's two-layer head
(`exact_classification_head`, docs/huggingface.md), and the XLNet-style QA head is refused. The
rewrite carries each logit in pairs of GELU units, GELU(a) - GELU(-a) = a, so that HF's dropout on
its hidden units leaves a model that `transformers` goes on training near its fine-tuned loss;
the exported config keeps the fine-tuning dropout (HF's `classifier_dropout` unset, so the
hidden dropout), the rate our head was trained with.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import tokenizers
import torch
from safetensors.torch import load_model, save_file
from torch import nn

from electra.atomic import atomic_dir, write_json_atomic, write_text_atomic
from electra.config import RunConfig
from electra.data.tokenizer import load_tokenizer, lowercases, save_tokenizer, special_ids
from electra.engine.checkpoint import PREFIX, checkpoint_dirs
from electra.errors import ElectraError
from electra.hf.pretrained import (
    ROLES,
    is_model_dir,
    load_pretrained,
    resolve_model_dir,
    save_pretrained,
)
from electra.objectives import build_objective


def check_exportable(model: nn.Module, source: Path) -> None:
    """Refuses what `transformers` ELECTRA cannot express, weights beyond its names (an unfolded
    GDES residual, say), rather than writing a model that loads but computes something else. (Every
    activation a ModelConfig accepts is one `transformers.activations.ACT2FN` computes alike.)"""
    cfg = model.config
    with torch.device("meta"):
        reference = set(type(model)(cfg).state_dict())
    extra = sorted(set(model.state_dict()) - reference)
    if extra:
        raise ElectraError(
            f"{source}: weights {', '.join(extra[:3])} have no Hugging Face ELECTRA counterpart; "
            "export the model folder pretraining wrote (it folds them in)"
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
    tokenizer = load_tokenizer(run_dir / "tokenizer")
    objective = build_objective(cfg.model, cfg.objective, special_ids(tokenizer), cfg.data.seq_len)
    try:
        load_model(objective, str(ckpt / "model.safetensors"), strict=True)
    except (OSError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0]
        raise ElectraError(f"cannot load {ckpt / 'model.safetensors'}: {first}") from None
    return list(objective.models().items()), tokenizer


def export_hf(
    model_path: str | Path, out: str | Path, overwrite: bool = False, step: int | None = None
) -> list[Path]:
    """Writes OUT/discriminator, OUT/generator (for a run or pair folder) or OUT (one model). With
    `step`, the networks come from that checkpoint of the run at `model_path`. A fine-tuned model
    (or a finetune --out folder: its best seed) goes to `export_finetuned`."""
    model_path, out = Path(model_path), Path(out)
    if step is None and is_finetuned(model_path):
        return [export_finetuned(model_path, out, overwrite)]
    if out.exists() and not overwrite:
        raise ElectraError(f"{out} already exists: pass --overwrite or another --out")
    if step is not None:
        models, tokenizer = checkpoint_models(model_path, step)
        sources = [(model_path, role, model, tokenizer) for role, model in models]
    else:
        roles = [r for r in ROLES if is_model_dir(model_path / r)]
        dirs = [(model_path / r, r) for r in roles] or [(resolve_model_dir(model_path), "")]
        sources = [(src, role, *load_pretrained(src)) for src, role in dirs]
    with atomic_dir(out, tag="export-tmp") as tmp:
        for src, role, model, tokenizer in sources:
            check_exportable(model, src)
            save_pretrained(model, tmp / role if role else tmp, tokenizer)
    return [out / role if role else out for _, role, _, _ in sources]


# --- fine-tuned models ----------------------------------------------------------------------------

# Our fine-tuned head -> the `transformers` class that loads its export.
HF_FINETUNED = {
    "ElectraForSequenceClassification": "ElectraForSequenceClassification",
    "ElectraForTokenClassification": "ElectraForTokenClassification",
    "ElectraForSpanQuestionAnswering": "ElectraForQuestionAnswering",
}
# The offset rewrite of the one-layer classifier into HF's two layers (`offset_head`), used when
# the labels outnumber the GELU pairs HF's head has room for: each logit's hidden unit runs in
# [GELU_FLOOR, GELU_FLOOR + 2 * HEAD_SPREAD], where exact-erf GELU is the identity in fp32 (Phi(z)
# rounds to 1 from z = 5.37). A wider spread makes the constant that the output layer takes back
# off smaller beside the signal (fp32 rounding ~ B (1 + 6/k)).
GELU_FLOOR = 6.0
HEAD_SPREAD = 64.0
# GELU pairs per label in the rewrite that keeps training (`paired_head`), at most. More pairs
# dilute HF's dropout on them further, but r copies of one value summed by out_proj add their
# fp32 rounding alike: at 16 the worst-case logit is ours to ~5e-7 of its size, as our own fp32
# is; at 64, ~3e-6, which a logit of 30 would take past REWRITE_TOLERANCE.
MAX_PAIRS = 16


def is_finetuned(path: str | Path) -> bool:
    """Whether `path` is a fine-tuned model folder or a finetune --out folder."""
    from electra.hf.finetuned import FINETUNE_FILE

    path = Path(path)
    if (path / FINETUNE_FILE).is_file():
        return True
    try:
        return "best_seed_dir" in json.loads((path / "results.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def export_finetuned(model_path: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Writes OUT: a Hugging Face folder that `AutoModelForSequenceClassification`,
    `AutoModelForTokenClassification` or `AutoModelForQuestionAnswering` loads, with its labels,
    problem type, tokenizer files and a model card (README.md)."""
    from electra.hf.finetuned import FINETUNE_FILE, finetuned_dir, load_finetuned

    out = Path(out)
    if out.exists() and not overwrite:
        raise ElectraError(f"{out} already exists: pass --overwrite or another --out")
    source = finetuned_dir(model_path)
    task, model, tokenizer, cfg = load_finetuned(source)
    model.eval()
    arch, state = hf_head_state(task, model, source)
    config = {
        "architectures": [arch],
        "model_type": "electra",
        "position_embedding_type": "absolute",
        **asdict(model.config),
        **hf_label_config(task, arch),
    }
    info = json.loads((source / FINETUNE_FILE).read_text())
    with atomic_dir(out, tag="export-tmp") as tmp:
        write_json_atomic(tmp / "config.json", config)
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        save_tokenizer(tokenizer, tmp, lowercase=lowercases(tokenizer))
        limit_length(tmp / "tokenizer_config.json", cfg.max_seq_len)
        write_text_atomic(tmp / "README.md", model_card(source, task, info, config, cfg))
    return out


def limit_length(tokenizer_config: Path, max_len: int) -> None:
    """Sets the tokenizer's `model_max_length` to the fine-tuning length, so that a pipeline
    called with `truncation=True` cuts long inputs where `electra predict` does (longest first)."""
    config = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    write_json_atomic(tokenizer_config, {**config, "model_max_length": max_len})


def hf_head_state(task, model: nn.Module, source: Path) -> tuple[str, dict[str, torch.Tensor]]:
    """The `transformers` architecture and the weights under its names: the encoder's as they
    are, the head's as HF's class holds them."""
    name = type(model).__name__
    if name not in HF_FINETUNED:
        raise ElectraError(
            f"{source}: the official XLNet-style QA head has no Hugging Face class; fine-tune "
            "with --qa-head linear for a model that exports"
            if name == "ElectraForQuestionAnswering"
            else f"{source}: a {name} has no Hugging Face counterpart to export to"
        )
    state = {
        k: v.detach().cpu().float().clone().contiguous() for k, v in model.state_dict().items()
    }
    if name == "ElectraForSequenceClassification":
        weight, bias = state.pop("classifier.weight"), state.pop("classifier.bias")
        if getattr(task, "regression", False):  # HF's logit is then the value itself
            # The task's `value_scale`, which decode and records apply (STS-B: 5, the head
            # being trained on score/5; regression on the user's files: its largest |target|).
            factor = float(task.value_scale)
            weight, bias = weight * factor, bias * factor
        last = f"electra.encoder.layer.{model.config.num_hidden_layers - 1}.output.LayerNorm"
        head = exact_classification_head(
            weight, bias, state[f"{last}.weight"], state[f"{last}.bias"], source
        )
        state.update({f"classifier.{k}": v for k, v in head.items()})
    return HF_FINETUNED[name], state


def exact_classification_head(
    weight: torch.Tensor,
    bias: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor,
    source: Path,
) -> dict[str, torch.Tensor]:
    """Our one linear layer (`weight` [L, H], `bias`) on the final [CLS] vector, rewritten as HF's
    `ElectraClassificationHead` (dense H->H, exact GELU, out_proj H->L) computing the same logits:
    in GELU pairs (`paired_head`) when 2L <= H, else with offset units (`offset_head`). The
    logits are then ours up to fp32 rounding, which is checked here on the worst-case inputs
    before anything is written."""
    labels, hidden = weight.shape
    if labels > hidden:
        raise ElectraError(
            f"{source}: {labels} labels exceed the hidden size {hidden}; HF's two-layer head "
            "cannot carry them exactly, so export is refused"
        )
    w, b = weight.double(), bias.double()
    if pairs_fit(labels, hidden):
        head = paired_head(w, b, beta.double())
    else:
        head = offset_head(w, b, gamma.double(), beta.double())
    head = {k: v.float() for k, v in head.items()}
    _check_rewrite(head, weight, bias, gamma, beta, source)
    return head


def pairs_fit(labels: int, hidden: int) -> bool:
    """Whether HF's head has room for a GELU pair per label (`paired_head`)."""
    return 2 * labels <= hidden


def paired_head(w: torch.Tensor, b: torch.Tensor, beta: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rewrite that keeps training: GELU(a) - GELU(-a) = a Phi(a) + a (1 - Phi(a)) = a for
    every a, so label j's part v_j = w_j . (x - beta) is carried by r = min(MAX_PAIRS, H // (2L))
    pairs of hidden units, a = +-v_j / (r s_j), with out_proj weights +-s_j; out_proj's bias adds
    b_j + w_j . beta back. No unit holds an offset, so HF's dropout on them (train mode) moves
    logit j by about |v_j| sqrt(p / ((1 - p) 2r)), 6% at r = 16 and p = 0.1, where offset units
    swing it by their whole size. w_j . beta, the logit of the [CLS] vector beta (a zero-mean
    LayerNorm input), is the middle of its reachable range (`offset_head`), found without data;
    s_j = sqrt(|w_j| / r) splits the map between the layers evenly (dense rows and out_proj
    weights of one norm, the smallest weights that carry it)."""
    labels, hidden = w.shape
    r = min(MAX_PAIRS, hidden // (2 * labels))
    scale = (w.norm(dim=1) / r).sqrt().clamp_min(1e-12)
    rows = w / (r * scale[:, None])
    centre = w @ beta
    dense_w = torch.zeros(hidden, hidden, dtype=torch.float64)
    dense_b = torch.zeros(hidden, dtype=torch.float64)
    out_w = torch.zeros(labels, hidden, dtype=torch.float64)
    for j in range(labels):
        for sign, first in ((1.0, 2 * j * r), (-1.0, (2 * j + 1) * r)):
            units = slice(first, first + r)
            dense_w[units] = sign * rows[j]
            dense_b[units] = -sign * centre[j] / (r * scale[j])
            out_w[j, units] = sign * scale[j]
    return {
        "dense.weight": dense_w,
        "dense.bias": dense_b,
        "out_proj.weight": out_w,
        "out_proj.bias": b + centre,
    }


def offset_head(
    w: torch.Tensor, b: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The rewrite for more labels than pairs fit: one unit per label, shifted to where GELU is
    the identity. Exact in eval mode; in train mode HF's dropout on a unit removes its offset
    (logits swing by tens), so further training starts far from the fine-tuned loss.

    The [CLS] vector is a LayerNorm output x = gamma * n + beta with sum(n) = 0 and |n|^2 < H, so
    logit j's linear part u_j = w_j . x lies within B_j = |centred(w_j * gamma)| sqrt(H) of
    m_j = w_j . beta (Cauchy-Schwarz; reached by some input). Dense unit j computes
    z_j = (u_j - m_j) k / B_j + k + 6, always in [6, 2k + 6], where GELU(z) = z exactly in fp32;
    out_proj takes the scale and shift back off. The other H - L units get zero weights and bias,
    so GELU(0) = 0 and they add nothing."""
    labels, hidden = w.shape
    v = w * gamma
    spread = ((v - v.mean(1, keepdim=True)).norm(dim=1) * math.sqrt(hidden)).clamp_min(1e-12)
    scale = HEAD_SPREAD / spread
    shift = HEAD_SPREAD + GELU_FLOOR - scale * (w @ beta)
    dense_w = torch.zeros(hidden, hidden, dtype=torch.float64)
    dense_w[:labels] = w * scale[:, None]
    dense_b = torch.zeros(hidden, dtype=torch.float64)
    dense_b[:labels] = shift
    out_w = torch.zeros(labels, hidden, dtype=torch.float64)
    out_w[:, :labels] = torch.diag(1.0 / scale)
    return {
        "dense.weight": dense_w,
        "dense.bias": dense_b,
        "out_proj.weight": out_w,
        "out_proj.bias": b - shift / scale,
    }


# The rewritten head's logits may differ from ours by this much (fp32 rounding), scaled up for
# logits beyond 50 in size: a [CLS] vector made to push a logit to its extreme.
REWRITE_TOLERANCE = 1e-4


def _check_rewrite(head, weight, bias, gamma, beta, source: Path) -> None:
    """Compares the rewritten head with ours in fp32 on LayerNorm outputs: random ones, and for
    each logit the two inputs at the ends of its range (where the hidden units are least and
    most, and the rounding largest). Refuses the export if they differ."""
    hidden = weight.shape[1]
    v = weight.double() * gamma.double()
    direction = v - v.mean(1, keepdim=True)
    n = direction / direction.norm(dim=1, keepdim=True).clamp_min(1e-12) * math.sqrt(hidden)
    n = torch.cat([n, -n, torch.randn(64, hidden, generator=torch.Generator().manual_seed(0))])
    n = n - n.mean(1, keepdim=True)
    n = n / n.pow(2).mean(1, keepdim=True).sqrt().clamp_min(1e-12) * (1 - 1e-6)
    x = (n * gamma.double() + beta.double()).float()
    ours = x @ weight.T + bias
    z = x @ head["dense.weight"].T + head["dense.bias"]
    theirs = nn.functional.gelu(z) @ head["out_proj.weight"].T + head["out_proj.bias"]
    limit = REWRITE_TOLERANCE * max(1.0, ours.abs().max().item() / 50)
    if (theirs - ours).abs().max().item() > limit:
        raise ElectraError(
            f"{source}: the classifier could not be rewritten exactly as Hugging Face's two-layer "
            "head (logits differ beyond fp32 rounding), so export is refused"
        )


def task_labels(task) -> tuple[str, ...]:
    """The task's label names in the order of the head's outputs (GLUE-style tasks keep them in
    their spec, tagging tasks on the task)."""
    spec = getattr(task, "spec", None)
    labels = spec.labels if spec is not None else getattr(task, "labels", None)
    return tuple(labels or ())


def problem_type(task) -> str:
    """HF's `problem_type` of a sequence classifier: it sets the pipeline's function (softmax,
    sigmoid or none) and the loss of further training."""
    if getattr(task, "regression", False):
        return "regression"
    if getattr(task, "multilabel", False):
        return "multi_label_classification"
    return "single_label_classification"


def hf_label_config(task, arch: str) -> dict:
    """`id2label`, `label2id`, `num_labels` and (sequence classification) `problem_type`."""
    if arch == "ElectraForQuestionAnswering":
        return {}  # qa_outputs' two logits: HF's default num_labels
    kind = problem_type(task) if arch == "ElectraForSequenceClassification" else None
    labels = ("value",) if kind == "regression" else task_labels(task)
    config = {
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "num_labels": len(labels),
    }
    return {**config, "problem_type": kind} if kind else config


PIPELINES = {
    "ElectraForSequenceClassification": "text-classification",
    "ElectraForTokenClassification": "token-classification",
    "ElectraForQuestionAnswering": "question-answering",
}


def model_card(source: Path, task, info: dict, config: dict, cfg) -> str:
    """README.md for the export: what the model is, where it came from, how it was trained, how
    well it did on dev (per seed), and how to run it."""
    arch = config["architectures"][0]
    pipeline = PIPELINES[arch]
    labels = list(config.get("id2label", {}).values())
    lines = [
        "---",
        "library_name: transformers",
        f"pipeline_tag: {pipeline}",
        "tags: [electra]",
        "---",
        "",
        f"# ELECTRA fine-tuned for {task.name}",
        "",
        f"- **Task:** {task.name} ({config.get('problem_type') or task.family}), "
        f"`{arch}` in `transformers`",
        f"- **Base model:** `{info.get('pretrained', 'unknown')}`",
        f"- **Labels:** {', '.join(f'`{x}`' for x in labels) if labels else 'answer spans'}",
        f"- **Data:** {_data_line(source, info)}",
        f"- **Exported from:** `{source}` by `electra export`",
        "",
        *_head_note(arch, config),
        "## Dev results",
        "",
        *_metric_lines(source, task),
        "",
        "## Recipe",
        "",
        "```json",
        json.dumps(asdict(cfg), indent=2, sort_keys=True),
        "```",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        f'model = pipeline("{pipeline}", model="PATH/TO/THIS/FOLDER")',
        "# truncation=True cuts inputs longer than the model's "
        f"{cfg.max_seq_len} tokens, as fine-tuning did",
        "```",
        "",
    ]
    return "\n".join(lines)


def _data_line(source: Path, info: dict) -> str:
    data = info.get("data")
    if data is None:
        run = _run_results(source)
        data = (run or {}).get("data")
    if not data:
        return "not recorded with the model (see the fine-tuning command)"
    if isinstance(data, dict):
        return ", ".join(f"{split}: `{path}`" for split, path in data.items())
    return f"`{data}`"


def _head_note(arch: str, config: dict) -> list[str]:
    if arch == "ElectraForSequenceClassification":
        note = (
            "The model was fine-tuned with the paper's one-layer head (a linear layer on the "
            "final [CLS] vector). It is shipped as the exact equivalent in HF's two-layer "
            "`ElectraClassificationHead`, so the logits are the fine-tuned model's (to fp32 "
            "rounding). "
        )
        if pairs_fit(config["num_labels"], config["hidden_size"]):
            note += (
                "Each logit is carried by pairs of `dense` units of opposite sign, since "
                "GELU(a) - GELU(-a) = a: HF's dropout on them (train mode) moves the logits only "
                "a few percent, so further training starts from the fine-tuned loss."
            )
        else:
            note += (
                "With more labels than half the hidden size, each logit is carried by one "
                "`dense` unit shifted to where GELU is the identity: HF's dropout on those units "
                "(train mode) swings the logits far, so further training starts well above the "
                "fine-tuned loss."
            )
        if config.get("problem_type") == "regression":
            note += " The logit is the predicted value itself, on the labels' scale."
        return [note, ""]
    if arch == "ElectraForQuestionAnswering":
        return ["Fine-tuned with the linear start/end head (`--qa-head linear`), HF's own.", ""]
    return []


def _run_results(source: Path) -> dict | None:
    """The finetune --out folder's results.json, when `source` is one of its seeds."""
    for path in (source / "results.json", source.parent / "results.json"):
        try:
            results = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if "per_seed" in results:
            return results
    return None


def _metric_lines(source: Path, task) -> list[str]:
    run = _run_results(source)
    if run is None:
        try:
            seed = json.loads((source / "results.json").read_text())
        except (OSError, ValueError):
            return ["No dev results were kept with the model."]
        run = {"per_seed": [seed], "metrics": seed.get("metrics", {})}
    per_seed = run["per_seed"]
    names = list(per_seed[0].get("metrics", {}))
    rows = ["| seed | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for s in per_seed:
        values = " | ".join(f"{s['metrics'][n]:.2f}" for n in names)
        mark = " (this model)" if f"seed_{s.get('seed')}" == source.name else ""
        rows.append(f"| {s.get('seed')}{mark} | {values} |")
    if len(per_seed) > 1:
        rows.append("| median | " + " | ".join(f"{run['metrics'][n]:.2f}" for n in names) + " |")
    return [f"Main metric: {task.main_metric}.", "", *rows]
