"""Tiny fine-tuned models on real data (SST-2, STS-B, CoNLL-2003 from ../shared/data) and a few
hand-made SQuAD questions, for the tests of `electra predict` and of fine-tuned exports. Each is
built once per test session (in pytest's base temporary folder) and shared by both test files."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from electra.data.tokenizer import train_tokenizer
from electra.finetuning.run import finetune
from electra.folders.model_folder import save_pretrained
from electra.model.electra.modeling import ElectraForPreTraining
from electra.tasks.finetune_config import FinetuneConfig

from .conftest import CONTEXT, shared_data, tiny_model_config

QUESTIONS = [
    ("q1", "where was the car ?", "Paris"),
    ("q2", "who sat on the mat ?", "Mary"),
    ("q3", "who went to the store ?", "John"),
    ("q4", "what is money ?", None),
]
FAST = dict(batch_size=16, lr=3e-3, progress=False, device="cpu")


def head_lines(path: Path, n: int) -> str:
    return "".join(path.open(encoding="utf-8").readlines()[:n])


def conll_head(path: Path, sentences: int) -> str:
    """The first `sentences` sentences of a CoNLL file."""
    blocks = path.read_text(encoding="utf-8").split("\n\n")
    return "\n\n".join(blocks[: sentences + 1]) + "\n\n"


def _root(factory) -> Path:
    root = factory.getbasetemp() / "finetuned_models"
    root.mkdir(exist_ok=True)
    return root


def data_dirs(factory) -> dict[str, Path]:
    """Small copies of the real data sets (the same lines each session) and the SQuAD folder."""
    root = _root(factory) / "data"
    if root.exists():
        return {name: root / name for name in NAMES}
    glue, conll = shared_data("glue"), shared_data("conll2003")
    for name, source, train, dev in (("sst2", "SST-2", 801, 121), ("stsb", "STS-B", 401, 81)):
        (root / name).mkdir(parents=True)
        (root / name / "train.tsv").write_text(head_lines(glue / source / "train.tsv", train))
        (root / name / "dev.tsv").write_text(head_lines(glue / source / "dev.tsv", dev))
    (root / "conll").mkdir()
    (root / "conll" / "train.txt").write_text(conll_head(conll / "train.txt", 400))
    (root / "conll" / "valid.txt").write_text(conll_head(conll / "valid.txt", 60))
    (root / "qa").mkdir()
    qas = [
        {
            "id": qid,
            "question": q,
            "answers": [] if a is None else [{"text": a, "answer_start": CONTEXT.index(a)}],
            "is_impossible": a is None,
        }
        for qid, q, a in QUESTIONS
    ]
    # dev: train's questions reversed, a word longer each (a training question there is refused)
    near = [{**q, "question": f"so {q['question']}"} for q in qas[::-1]]
    for split, order in (("train", qas), ("dev", near)):
        squad = {"version": "v2.0", "data": [{"paragraphs": [{"context": CONTEXT, "qas": order}]}]}
        (root / "qa" / f"{split}.json").write_text(json.dumps(squad))
    _own_data(root)
    return {name: root / name for name in NAMES}


NAMES = ("sst2", "stsb", "conll", "qa", "multilabel", "regression")


def _own_data(root: Path) -> None:
    """JSON Lines files of SST-2's sentences for the own-data tasks: multilabel (`positive` from
    the SST-2 label, `long` above 12 words) and regression (the number of words)."""
    for split in ("train", "dev"):
        rows = [
            line.split("\t") for line in (root / "sst2" / f"{split}.tsv").read_text().splitlines()
        ]
        texts = [(r[0], r[1]) for r in rows[1:]]
        multi = [
            {
                "text": t,
                "label": [
                    *(["positive"] if y == "1" else []),
                    *(["long"] if len(t.split()) > 12 else []),
                ],
            }
            for t, y in texts
        ]
        numbers = [{"text": t, "label": len(t.split())} for t, _ in texts]
        for name, records in (("multilabel", multi), ("regression", numbers)):
            (root / name).mkdir(exist_ok=True)
            lines = "".join(json.dumps(r) + "\n" for r in records)
            (root / name / f"{split}.jsonl").write_text(lines)


def pretrained(factory) -> Path:
    """A tiny random discriminator whose vocabulary covers the four data sets' text."""
    out = _root(factory) / "pretrained"
    if out.exists():
        return out
    dirs = data_dirs(factory)
    text = _root(factory) / "text.txt"
    parts = [(dirs[n] / f).read_text() for n, f in (("sst2", "train.tsv"), ("stsb", "train.tsv"))]
    words = [line.split(" ")[0] for line in (dirs["conll"] / "train.txt").read_text().splitlines()]
    text.write_text("\n".join([*parts, " ".join(words), CONTEXT]))
    tokenizer = train_tokenizer([text], vocab_size=3000, min_frequency=1)
    torch.manual_seed(0)
    cfg = tiny_model_config(vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=128)
    save_pretrained(ElectraForPreTraining(cfg), out, tokenizer)
    return out


def finetuned(factory, name: str) -> Path:
    """The finetune --out folder of one of: sst2, stsb, conll (conll2003), qa (linear head),
    squad2 (the official head), multilabel, regression (own data), each a few epochs on its small
    data set."""
    out = _root(factory) / f"ft_{name}"
    if (out / "results.json").is_file():
        return out
    dirs = data_dirs(factory)
    recipes = {
        "sst2": ("sst2", dirs["sst2"], dict(epochs=2, max_seq_len=48)),
        "stsb": ("stsb", dirs["stsb"], dict(epochs=2, max_seq_len=64)),
        "conll": ("conll2003", dirs["conll"], dict(epochs=3, max_seq_len=64)),
        "qa": ("qa", dirs["qa"], dict(epochs=30, max_seq_len=32, doc_stride=8, qa_head="linear")),
        "squad2": ("squad2", dirs["qa"], dict(epochs=1, max_seq_len=32, doc_stride=8)),
        "multilabel": ("multilabel", dirs["multilabel"], dict(epochs=3, max_seq_len=48)),
        "regression": ("regression", dirs["regression"], dict(epochs=2, max_seq_len=48)),
    }
    task, data, recipe = recipes[name]
    finetune(
        pretrained(factory), task, data, out, FinetuneConfig.from_values({**FAST, **recipe}, "test")
    )
    return out


def best_seed(out: Path) -> Path:
    return out / json.loads((out / "results.json").read_text())["best_seed_dir"]


def dev_logits(model: Path, dev: Path) -> torch.Tensor:
    """The fine-tuned `model`'s logits (a regression's on its head's scale) on its task's `dev`
    file, as one padded batch: the size the rounding of predictions from them is taken at."""
    from electra.folders.finetuned import load_finetuned

    task, net, tokenizer, cfg = load_finetuned(model)
    batch = task.encode(task.read(dev, "dev"), tokenizer, cfg.max_seq_len, training=False).tensors
    with torch.no_grad():
        return net.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])


def prediction_bound(model: Path, dev: Path, scale: float = 1.0) -> float:
    """How far two float32 computations of the tiny fine-tuned `model`'s predictions on `dev`
    (probabilities, or values on the targets' scale) may lie apart: the rounding of its chain (2
    layers, the embeddings' LayerNorm and projection, the head's products: tests/numerics.py)
    over its longest reduction, the intermediate size 64 (above rows of at most 64 tokens), at
    the size of its logits times `scale` (a regression's targets' scale: STS-B's 5); a
    probability moves no more than its logits do."""
    from .numerics import encoder_depth, rounding_bound

    cfg = tiny_model_config()
    size = max(dev_logits(model, dev).abs().max().item(), 1.0) * scale
    return rounding_bound(
        torch.float32, cfg.intermediate_size, encoder_depth(cfg.num_hidden_layers, 5), size
    )
