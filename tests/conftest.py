"""Shared fixtures and helpers: tiny configs, special ids, the path of the real data beside the
repository, the `gpu` marker, and the helpers several test files use (running the CLI, writing task
files, tiny batches)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
from pathlib import Path

import pytest
import torch

from electra.cli.main import main
from electra.config import ObjectiveConfig, apply_overrides, preset
from electra.data.prepare import prepare
from electra.data.tokenizer import SpecialIds, save_tokenizer, train_tokenizer
from electra.engine.runtime import key_compile_cache_by_cpu
from electra.model.electra.config import ElectraModelConfig
from electra.model.modernbert.config import ModernConfig

# Tests read local folders only; should one name a hub model by mistake, it fails here at once
# rather than reaching for the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tests that call torch.compile themselves share inductor's cache with runs under other kernel sets
# (.ci/run runs the numeric tests again with ATEN_CPU_CAPABILITY=avx2), as `compile_model` does.
key_compile_cache_by_cpu()

ROOT = Path(__file__).resolve().parents[1]  # the repository
SHARED_DATA = ROOT.parent / "shared" / "data"


def pytest_collection_modifyitems(config, items):
    """GPU-only tests carry one marker, `gpu`, and skip together where there is no CUDA GPU (they
    run on the GPU machine: benchmarks/gpu_session.sh)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU: a `gpu` test runs on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data, or a skip saying why when it is absent (CI always has it)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"../shared/data not present ({path} missing): real-data test skipped")
    return path


@pytest.fixture
def special() -> SpecialIds:
    return SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)


def tiny_model_config(**overrides) -> ElectraModelConfig:
    """A two-layer encoder small enough for tests to build and run in milliseconds."""
    fields = dict(
        vocab_size=100,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return ElectraModelConfig(**{**fields, **overrides})


def tiny_modern_config(**overrides) -> ModernConfig:
    """A three-layer modern encoder (layers 0 and 2 global, 1 local; a local token sees 4 keys
    each side, so windows matter at 20 tokens and more), in milliseconds."""
    fields = dict(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=48,
        pad_token_id=0,
        global_attn_every_n_layers=2,
        local_attention=8,
    )
    return ModernConfig(**{**fields, **overrides})


@pytest.fixture
def tiny_model() -> ElectraModelConfig:
    return tiny_model_config()


@pytest.fixture
def objective_cfg() -> ObjectiveConfig:
    return ObjectiveConfig(generator_hidden_fraction=0.25)  # generator width 8, E 16, D 32


WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "mat",
    "big",
    "small",
    "red",
    "blue",
    "car",
    "house",
    "paris",
    "france",
    "capital",
    "city",
    "of",
    "is",
    "what",
    "where",
    "who",
    "river",
    "bank",
    "money",
    "good",
    "bad",
    "film",
    "movie",
    "great",
    "awful",
    "john",
    "mary",
    "went",
    "to",
    "store",
    "yesterday",
    "today",
    "green",
    "tree",
    "apple",
    "was",
    "in",
    "and",
    "it",
    "not",
    "very",
    "fun",
]


@pytest.fixture(scope="session")
def task_tokenizer(tmp_path_factory):
    """A WordPiece vocabulary over the words the fine-tuning tests use."""
    root = tmp_path_factory.mktemp("task_tok")
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(400)]
    (root / "c.txt").write_text("\n".join(lines) + "\nParis France John Mary\n")
    return train_tokenizer([root / "c.txt"], vocab_size=200, min_frequency=1)


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory, task_tokenizer):
    """A tiny randomly initialized discriminator folder, as `electra pretrain` writes one."""
    from electra.folders.model_folder import save_pretrained
    from electra.model.electra.modeling import ElectraForPreTraining

    out = tmp_path_factory.mktemp("pretrained") / "discriminator"
    torch.manual_seed(0)
    cfg = tiny_model_config(vocab_size=task_tokenizer.get_vocab_size(), max_position_embeddings=128)
    save_pretrained(ElectraForPreTraining(cfg), out, task_tokenizer)
    return out


@pytest.fixture(scope="session")
def wikitext_data(tmp_path_factory):
    """WikiText-2 validation text, a 4k WordPiece vocabulary, packed at seq len 64."""
    corpus = shared_data("wikitext-2-raw", "wiki.valid.raw")
    root = tmp_path_factory.mktemp("wikitext")
    save_tokenizer(train_tokenizer([corpus], vocab_size=4000), root / "tok", lowercase=True)
    prepare([str(corpus)], root / "tok", seq_len=64, out_dir=root / "data", workers=1)
    return root / "data"


def tiny_cfg(data, **overrides):
    """A very small model for mechanics tests: seconds per run, on the CPU also where a GPU is
    visible (gloo, and results compared bit for bit with CI's)."""
    o = {
        "train.device": "cpu",
        "data.path": str(data),
        "data.seq_len": 64,
        "model.hidden_size": 32,
        "model.embedding_size": 16,
        "model.num_hidden_layers": 2,
        "model.num_attention_heads": 2,
        "model.intermediate_size": 64,
        "model.hidden_dropout_prob": 0.1,
        "model.attention_probs_dropout_prob": 0.1,
        "train.batch_size": 8,
        "train.steps": 6,
        "train.warmup_steps": 2,
        "train.log_every": 2,
        "train.save_every": 2,
        "train.keep_last": 2,
        "train.progress": False,
        "train.tensorboard": False,
    }
    o.update(overrides)
    return apply_overrides(preset("tiny"), o)


# --- helpers shared by the test files ----------------------------------------------------------


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *needles):
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("electra: error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]


FAST_OWN_FLAGS = ["--batch-size", "8", "--no-progress", "--lr", "3e-3", "--epochs", "1"]
FAST_OWN_FLAGS += ["--max-seq-len", "32", "--device", "cpu"]


def glue_rows(task: str, split: str, n: int) -> list[dict[str, str]]:
    """The first `n` rows of a GLUE TSV as dicts by header name (quoting off, as GLUE needs)."""
    path = shared_data("glue", task, f"{split}.tsv")
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        return [dict(zip(header, row, strict=True)) for row in itertools.islice(reader, n)]


def write_csv(path, header, rows, delimiter=","):
    path.parent.mkdir(parents=True, exist_ok=True)
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter, quoting=quoting, escapechar="\\")
        writer.writerows([header, *rows])
    return path


def write_tsv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(map(str, r)) for r in rows) + "\n")
    return path


FILLER = [w for w in WORDS if w not in ("good", "bad")]


def sentence(i, n=6):
    return " ".join(FILLER[(i * 5 + j * 3) % len(FILLER)] for j in range(n))


FAST_FLAGS = ["--batch-size", "8", "--no-progress", "--lr", "3e-3"]


def evaluate_cli(capsys, model, data, *extra):
    return run_cli(capsys, "evaluate", "--model", model, "--data", data, *extra)


def finetune_cli(capsys, model, task, data, out, *extra):
    return run_cli(
        capsys, "finetune", "--model", model, "--task", task, "--data", data, "--out", out, *extra
    )


def varied_sst_dir(root, n=32):
    """SST-2-format files as `sst_dir`'s, with sentences of 1 to 6 filler words."""
    rows = [[f"{sentence(i, 1 + i % 6)} {'good' if i % 2 else 'bad'}", i % 2] for i in range(n + 8)]
    write_tsv(root / "train.tsv", [["sentence", "label"], *rows[:n]])
    write_tsv(root / "dev.tsv", [["sentence", "label"], *rows[n:]])  # rows it does not train on
    return root


def train_losses(capsys, model, data, out, *flags):
    """Two epochs of SST-2 with dropout off, in fp32 (a GPU would default to bf16, whose rounding
    the comparisons of these losses do not allow): the recipe and its per-epoch training losses."""
    code, _, err = finetune_cli(
        capsys,
        model,
        "sst2",
        data,
        out,
        *("--epochs", "2", "--dropout", "0", "--precision", "fp32"),
        *FAST_FLAGS,
        *flags,
    )
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    return results["config"], results["per_seed"][0]["train_loss"]


def random_batch(special, b=64, t=40, vocab=100, seed=0):
    """Rows of [CLS] tokens [SEP] tokens [SEP] with varying real lengths, then padding."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, t), generator=g)
    lengths = torch.randint(8, t + 1, (b,), generator=g)
    pos = torch.arange(t)[None, :]
    attention = (pos < lengths[:, None]).long()
    ids[:, 0] = special.cls
    ids[torch.arange(b), lengths - 1] = special.sep
    ids[torch.arange(b), lengths // 2] = special.sep
    ids = ids.masked_fill(attention == 0, special.pad)
    types = ((pos > (lengths // 2)[:, None]) & (attention == 1)).long()
    return ids, types, attention


CONTEXT = (
    "John went to the store yesterday . The big red car was in Paris , the capital city of "
    "France . Mary sat on the mat and it was not very fun . The green tree ran to the river bank ."
)


def squad_file(path, questions, context=CONTEXT):
    data = {
        "version": "v2.0",
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": questions}]}],
    }
    path.write_text(json.dumps(data, indent=1))
    return path


def qa(qid, question, answer=None, impossible=False, start=None):
    answers = (
        []
        if answer is None
        else [{"text": answer, "answer_start": CONTEXT.index(answer) if start is None else start}]
    )
    return {"id": qid, "question": question, "answers": answers, "is_impossible": impossible}


def predict_cli(capsys, model, *args):
    return run_cli(capsys, "predict", "--model", model, *args)


def stdin_lines(monkeypatch, text):
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


# Flags of a tiny pretraining run, for the commands that pretrain arms (experiment).
TINY_OVERRIDES = {
    "model.hidden_size": "32",
    "model.embedding_size": "16",
    "model.num_hidden_layers": "2",
    "model.num_attention_heads": "2",
    "model.intermediate_size": "64",
    "train.batch_size": "8",
    "train.warmup_steps": "2",
    "train.log_every": "5",
    "train.save_every": "100",
    "train.progress": "false",
    "train.tensorboard": "false",
}
