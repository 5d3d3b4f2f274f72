"""A third architecture family, declared in this file alone, runs through the whole toolkit: a
one-layer encoder registered with `register_family` pretrains under the electra and mlm
objectives, `detect` reads its run, and a classification `finetune` trains from it and
`predict`s. It has no Hugging Face names, so `export` refuses it in one line and writes nothing;
neither has it the pieces of All-Tokens MLM, Electric or GDES, which are refused in one line too.
If any of this needed a change outside `electra/model/`, the toolkit would still know its
families by name (docs/architecture.md §Adding a family)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import nn

from electra.data.prepare import prepare
from electra.data.tokenizer import save_tokenizer
from electra.errors import ElectraError
from electra.model.family import _FAMILIES, Family, Preset, register_family
from electra.model.flops import Network

from ..conftest import (
    assert_one_line_error,
    finetune_cli,
    run_cli,
    sentence,
    stdin_lines,
    write_csv,
)

# --- the family: config, encoder, heads, FLOPs, depth, a preset ----------------------------------


@dataclass
class ToyConfig:
    """The toy family's encoder: the sizes every family carries, and one dropout rate."""

    ffn_ratio: ClassVar[int] = 2  # a narrower generator's FFN width / hidden size
    arch: str = "toy"
    vocab_size: int = 100
    hidden_size: int = 32
    num_hidden_layers: int = 1
    num_attention_heads: int = 2
    intermediate_size: int = 64
    max_position_embeddings: int = 64
    pad_token_id: int = 0
    initializer_range: float = 0.02
    dropout: float = 0.0


class ToyEmbeddings(nn.Module):
    def __init__(self, cfg: ToyConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))


class ToyLayer(nn.TransformerEncoderLayer):
    def __init__(self, cfg: ToyConfig):
        super().__init__(
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.intermediate_size,
            cfg.dropout,
            batch_first=True,
        )


class ToyModel(nn.Module):
    """The encoder: embeddings (or another network's, to share them) and its layers."""

    def __init__(self, cfg: ToyConfig, embeddings: ToyEmbeddings | None = None):
        super().__init__()
        self.config = cfg
        self.embeddings = embeddings if embeddings is not None else ToyEmbeddings(cfg)
        self.layers = nn.ModuleList(ToyLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        x = self.embeddings(input_ids)
        padding = None if attention_mask is None else ~attention_mask.bool()
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=padding)
        return x


class ToyWithEncoder(nn.Module):
    """A network whose encoder sits under `base_model_prefix`, as every family's."""

    base_model_prefix = "toy"

    def __init__(self, cfg: ToyConfig, embeddings: ToyEmbeddings | None = None):
        super().__init__()
        self.config = cfg
        self.toy = ToyModel(cfg, embeddings)

    def init_weights(self, shared: nn.Module | None) -> None:
        """Normal(initializer_range) weights, zero biases; shared embeddings are left as they are."""
        skip = set() if shared is None else set(shared.modules())
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding) and m not in skip:
                nn.init.normal_(m.weight, std=self.config.initializer_range)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)


class ToyForMaskedLM(ToyWithEncoder):
    def __init__(self, cfg: ToyConfig, embeddings: ToyEmbeddings | None = None):
        super().__init__(cfg, embeddings)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size)
        self.init_weights(embeddings)
        self.tie_weights()

    def tie_weights(self) -> None:
        self.decoder.weight = self.toy.embeddings.word_embeddings.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(hidden)

    def hidden_at(self, input_ids, token_type_ids, attention_mask, positions) -> torch.Tensor:
        hidden = self.toy(input_ids, token_type_ids, attention_mask)
        return torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, positions=None):
        hidden = self.toy(input_ids, token_type_ids, attention_mask)
        if positions is not None:
            hidden = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        return self.logits(hidden)


class ToyForPreTraining(ToyWithEncoder):
    """The discriminator: one logit per token."""

    def __init__(self, cfg: ToyConfig, embeddings: ToyEmbeddings | None = None):
        super().__init__(cfg, embeddings)
        self.classifier = nn.Linear(cfg.hidden_size, 1)
        self.init_weights(embeddings)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        return self.classifier(self.toy(input_ids, token_type_ids, attention_mask)).squeeze(-1)


class ToyForSequenceClassification(ToyWithEncoder):
    def __init__(self, cfg: ToyConfig, num_labels: int):
        super().__init__(cfg)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        self.init_weights(None)

    def forward(
        self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, cls_index=None
    ) -> torch.Tensor:
        return self.classifier(self.toy(input_ids, token_type_ids, attention_mask)[:, 0])


def toy_forward_flops(n: Network, s: int, convention: str) -> float:
    """Matmuls only. The official convention counts BERT's 2018 layer, which this is not: its
    refusal makes the run's logs count in the model convention."""
    if convention != "model":
        raise ElectraError("the toy family has no count in the official FLOP convention")
    m = n.config
    h, i = m.hidden_size, m.intermediate_size
    forward = m.num_hidden_layers * (2 * s * (4 * h * h + 2 * h * i) + 4 * s * s * h)
    forward += round(n.mlm_frac * s) * 2 * h * m.vocab_size
    return forward + (2 * s * h if n.rtd_head else 0)


def toy_layerwise_depth(name: str, n: int) -> int:
    if name.startswith("toy.embeddings"):
        return 0
    if m := re.match(r"toy\.layers\.(\d+)\.", name):
        return int(m.group(1)) + 1
    return n + 1


TOY = Family(
    name="toy",
    title="Toy",
    config=ToyConfig,
    presets={
        # A generator that shares the embeddings shares their width: full width, one layer.
        "toy-tiny": Preset(
            ToyConfig,
            objective={"generator_hidden_fraction": 1.0},
            data={"seq_len": 32},
            train={"steps": 2, "batch_size": 4, "lr": 1e-3, "warmup_steps": 1, "log_every": 1},
        ),
    },
    encoder=ToyModel,
    masked_lm=ToyForMaskedLM,
    pretraining=ToyForPreTraining,
    layer=ToyLayer,
    heads={"sequence": ToyForSequenceClassification},
    forward_flops=toy_forward_flops,
    layerwise_depth=toy_layerwise_depth,
    shared_fields=("vocab_size", "hidden_size", "max_position_embeddings"),
    shares_at_full_width=True,
    dropout_fields=("dropout",),
)


@pytest.fixture(scope="module")
def toy_family():
    """The toy family registered for this module's tests, and gone after them."""
    register_family(TOY)
    yield TOY
    _FAMILIES.pop("toy")


# --- data ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory, task_tokenizer):
    """A data folder of 32-token rows over the fine-tuning tests' words."""
    root = tmp_path_factory.mktemp("toy_data")
    save_tokenizer(task_tokenizer, root / "tok", lowercase=True)
    (root / "corpus.txt").write_text("\n".join(sentence(i, 12) for i in range(300)) + "\n")
    prepare([str(root / "corpus.txt")], root / "tok", seq_len=32, out_dir=root / "data", workers=1)
    return root / "data"


RUN_FLAGS = ["--train.device", "cpu", "--train.progress", "false", "--train.tensorboard=false"]


@pytest.fixture(scope="module")
def toy_runs(toy_family, toy_data, tmp_path_factory):
    """{objective: its run folder}, each pretrained once on first use."""
    runs = {}

    def get(objective, capsys):
        if objective not in runs:
            out = tmp_path_factory.mktemp(f"toy_{objective}") / "run"
            argv = ["pretrain", "--preset", "toy-tiny", "--data", toy_data, "--out", out]
            code, _, err = run_cli(
                capsys, *argv, "--objective.name", objective, "--train.save_every", 2, *RUN_FLAGS
            )
            assert code == 0, err
            runs[objective] = out
        return runs[objective]

    return get


# --- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", ["electra", "mlm"])
def test_the_toy_family_pretrains(toy_runs, objective, capsys):
    run = toy_runs(objective, capsys)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    assert all(math.isfinite(r["loss"]) for r in rows if "loss" in r)
    assert json.loads((run / "config.json").read_text())["model"]["arch"] == "toy"
    # Its model folders are the toolkit's own: its classes, the family's name as model_type.
    roles = {"electra": ["discriminator", "generator"], "mlm": ["mlm"]}[objective]
    written = [json.loads((run / role / "config.json").read_text()) for role in roles]
    assert {c["model_type"] for c in written} == {"toy"}
    classes = {"electra": ["ToyForPreTraining", "ToyForMaskedLM"], "mlm": ["ToyForMaskedLM"]}
    assert [c["architectures"][0] for c in written] == classes[objective]


def test_detect_reads_a_toy_run(toy_runs, capsys):
    run = toy_runs("electra", capsys)
    code, out, err = run_cli(capsys, "detect", "--model", run, "--json", "the cat sat")
    assert code == 0, err
    [tokens] = json.loads(out)
    assert [t["token"] for t in tokens] == ["the", "cat", "sat"]
    assert all(0.0 <= t["p_replaced"] <= 1.0 for t in tokens)


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        (["--objective.name", "all_tokens_mlm"], "has no copy gate"),
        (["--objective.name", "electric"], "has no cloze towers"),
        (["--objective.sharing", "gdes"], "has no GDES embeddings"),
    ],
)
def test_an_objective_needing_a_piece_the_family_lacks_is_one_line(
    toy_family, toy_data, setting, says, tmp_path, capsys
):
    argv = ["pretrain", "--preset", "toy-tiny", "--data", toy_data, "--out", tmp_path / "run"]
    code, _, err = run_cli(capsys, *argv, *setting, *RUN_FLAGS)
    assert_one_line_error(code, err, "the Toy family", says)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def toy_finetuned(toy_runs, tmp_path_factory):
    """A classification finetune --out folder trained from the toy electra run, made on first use."""
    made = []

    def get(capsys):
        if not made:
            root = tmp_path_factory.mktemp("toy_finetune")
            for split, n, offset in (("train", 16, 0), ("dev", 8, 40)):
                rows = [
                    [f"{sentence(i + offset, 3 + i % 5)} {'good' if i % 2 else 'bad'}", i % 2]
                    for i in range(n)
                ]
                write_csv(root / "data" / f"{split}.csv", ["text", "label"], rows)
            flags = ["--batch-size", "8", "--no-progress", "--epochs", "1", "--max-seq-len", "32"]
            flags += ["--device", "cpu", "--precision", "fp32", "--dropout", "0.2"]
            run = toy_runs("electra", capsys)
            code, _, err = finetune_cli(
                capsys, run, "classification", root / "data", root / "out", *flags
            )
            assert code == 0, err
            made.append(root / "out")
        return made[0]

    return get


def test_a_toy_run_finetunes_a_classifier_that_predicts(
    toy_finetuned, tmp_path, capsys, monkeypatch
):
    out = toy_finetuned(capsys)
    results = json.loads((out / "results.json").read_text())
    assert results["model"].endswith("discriminator")  # the run's encoder, not a fresh one
    assert len(results["per_seed"][0]["train_loss"]) == 1  # one epoch
    [config] = (out).rglob("config.json")
    saved = json.loads(config.read_text())
    assert saved["architectures"] == ["ToyForSequenceClassification"]
    assert saved["dropout"] == 0.2  # --dropout sets the record's `dropout_fields`
    stdin_lines(monkeypatch, "the cat sat good\nthe dog ran bad\n")
    code, stdout, err = run_cli(capsys, "predict", "--model", out, "-")
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [r["id"] for r in records] == ["0", "1"]
    assert all(r["label"] in ("0", "1") and 0.5 <= r["score"] <= 1 for r in records)


@pytest.mark.parametrize("folder", ["run", "finetuned"])
def test_export_of_a_family_without_hf_names_is_one_line(
    toy_runs, toy_finetuned, folder, tmp_path, capsys
):
    model = toy_runs("electra", capsys) if folder == "run" else toy_finetuned(capsys)
    out = tmp_path / "exported"
    code, _, err = run_cli(capsys, "export", "--model", model, "--out", out)
    assert_one_line_error(code, err, "model.arch=toy", "no Hugging Face names")
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary folder beside it
