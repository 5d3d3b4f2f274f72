"""The hf family in pretraining (issue 48, items 3, 6 and 8): a random-weight folder of each
`transformers` type continued with RTD starts exactly from its weights, with a generator of its
lower half or from `--generator-from`; every objective but Electric runs; a model from scratch takes
a `config.json`; an exported continued run loads in `transformers` with no missing or unexpected
keys; and RTD from a random xlm-roberta learns."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from electra.config import apply_overrides, preset
from electra.data.prepare import prepare
from electra.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from electra.folders.continuation import continued_networks, load_pair_weights
from electra.model.family import encoder_of
from electra.model.hf.config import HFConfig, config_from_json, hf_values
from electra.objectives import build_objective
from electra.pretraining.resolve import resolve_run
from electra.pretraining.train import pretrain
from electra.scoring.heldout import corrupt_and_score

from ...conftest import assert_one_line_error, run_cli, sentence, shared_data
from .shapes import TYPES


def hf_config(model_type: str, vocab: int, **sizes) -> transformers.PretrainedConfig:
    """A tiny random config of `model_type` as the hub ships its kind (RoBERTa's positions)."""
    size = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    size |= {"intermediate_size": 64, **sizes}
    if model_type == "distilbert":
        size = {"dim": size["hidden_size"], "n_layers": size["num_hidden_layers"], "n_heads": 2}
        size["hidden_dim"] = 64
    extra = {}
    if model_type in ("roberta", "xlm-roberta", "camembert"):
        extra = {"type_vocab_size": 1, "max_position_embeddings": 66}  # 65 tokens: pad 0, + 1
    return transformers.AutoConfig.for_model(
        model_type, vocab_size=vocab, pad_token_id=0, **size, **extra
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    (root / "c.txt").write_text("\n".join(sentence(i) for i in range(300)) + "\n")
    # One tokenizer for every folder (training one again may order ties otherwise).
    tok = train_tokenizer([root / "c.txt"], vocab_size=120, min_frequency=1)
    save_tokenizer(tok, root / "tok", lowercase=True)
    return root


def mlm_folder(root, model_type, corpus, name="mlm", seed=0):
    """A random `...ForMaskedLM` folder of `model_type`, saved by `transformers`, and data
    prepared with its tokenizer."""
    tok = load_tokenizer(corpus / "tok")
    torch.manual_seed(seed)
    folder = root / name
    transformers.AutoModelForMaskedLM.from_config(
        hf_config(model_type, tok.get_vocab_size())
    ).save_pretrained(folder)
    save_tokenizer(tok, folder, lowercase=True)
    data = root / f"{name}-data"
    if not data.exists():
        prepare([str(corpus / "c.txt")], folder, seq_len=32, out_dir=data, workers=1)
    return folder, data


@pytest.mark.parametrize("model_type", TYPES)
def test_config_json_round_trips_through_transformers(model_type):
    """A type's config.json read into `HFConfig` gives back, in `transformers`, the same
    architecture keys (RoBERTa's position offset, DistilBERT's names, DeBERTa-v3's settings)."""
    given = hf_config(model_type, 97).to_dict()
    cfg = config_from_json(given, "config.json")
    assert isinstance(cfg, HFConfig) and cfg.vocab_size == 97 and cfg.hidden_size == 32
    if model_type in ("roberta", "xlm-roberta", "camembert"):
        assert cfg.max_position_embeddings == 65  # what a row holds: 66 - pad_token_id - 1
    back = transformers.AutoConfig.for_model(model_type, **hf_values(cfg)).to_dict()
    for key in set(given) - {"transformers_version", "architectures", "_name_or_path"}:
        assert back.get(key) == given[key], key


@pytest.mark.parametrize("model_type", TYPES)
def test_continued_rtd_starts_from_the_folder_exactly(tmp_path, corpus, model_type):
    """`--init-from` a masked-LM folder: the discriminator's encoder is the folder's, tensor for
    tensor, and computes what `transformers`' own model does; the generator is its lower half
    (DeBERTa-v3's rule) with its MLM head, sharing the discriminator's token table."""
    folder, data = mlm_folder(tmp_path, model_type, corpus)
    over = {"data.path": str(data), "train.init_from": str(folder), "train.device": "cpu"}
    cfg = resolve_run(apply_overrides(preset("hf-tiny"), over), note=None).cfg
    assert cfg.model.model_type == model_type and cfg.objective.sharing == "embeddings"
    objective = build_objective(cfg.model, cfg.objective, None, 32)
    line = load_pair_weights(*continued_networks(objective), folder)
    assert "lower 1 of 2 layers and its MLM head" in line, line
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    base = theirs.base_model_prefix
    disc, gen = objective.discriminator.eval(), objective.generator.eval()
    mine = disc.state_dict()
    for name, tensor in theirs.state_dict().items():
        if name.startswith(f"{base}."):
            assert torch.equal(mine[name], tensor), name
    assert encoder_of(gen).embeddings is encoder_of(disc).embeddings
    layers = r"(encoder|transformer)\.layer\.1\."
    for name, tensor in gen.state_dict().items():  # layer 0 and the head: the folder's
        if not __import__("re").search(layers, name):
            assert torch.equal(tensor, theirs.state_dict()[name]), name
    ids = torch.randint(5, 100, (2, 12))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = theirs.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        got = encoder_of(disc)(ids, None, mask)
    assert torch.equal(got, want)


def test_generator_from_mlm_objective_and_export(tmp_path, corpus, capsys):
    """`--generator-from` takes a masked LM whole (its own embeddings); the mlm objective continues
    the folder's masked LM, head included; an exported continued run loads in `transformers` as
    the type's `...ForMaskedLM`, `...ForTokenClassification` and bare model with no missing or
    unexpected keys."""
    folder, data = mlm_folder(tmp_path, "roberta", corpus)
    small, _ = mlm_folder(tmp_path, "roberta", corpus, name="small", seed=1)
    run = tmp_path / "run"
    args = ("--data", data, "--train.steps", 2, "--train.batch_size", 4, "--no-progress")
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--generator-from", small, "--out", run, *args
    )
    assert code == 0, err
    assert f"generator: all of {small}" in err
    assert json.loads((run / "config.json").read_text())["objective"]["sharing"] == "none"
    out = tmp_path / "export"
    assert run_cli(capsys, "export", "--model", run, "--out", out)[0] == 0
    for sub, auto in (
        ("generator", transformers.AutoModelForMaskedLM),
        ("discriminator", transformers.AutoModelForTokenClassification),
        ("encoder", transformers.AutoModel),
    ):
        model, info = auto.from_pretrained(out / sub, output_loading_info=True)
        assert not any(info.values()), (sub, info)
        assert type(model).__name__.startswith("Roberta"), type(model).__name__
    mlm = tmp_path / "mlm-run"
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--objective.name", "mlm", "--out", mlm, *args
    )
    assert code == 0 and "model: all of it" in err, err


def test_bad_continuations_are_one_line_errors(tmp_path, corpus, capsys):
    folder, data = mlm_folder(tmp_path, "bert", corpus)
    other = tmp_path / "other"
    tok = train_tokenizer([corpus / "c.txt"], vocab_size=90, min_frequency=1)
    transformers.AutoModelForMaskedLM.from_config(
        hf_config("bert", tok.get_vocab_size())
    ).save_pretrained(other)
    save_tokenizer(tok, other, lowercase=True)
    run = tmp_path / "run"
    args = ("--data", data, "--out", run, "--train.steps", 1)
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--generator-from", other, *args
    )
    assert_one_line_error(code, err, "--generator-from", "another tokenizer")
    assert not run.exists()
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--objective.name", "electric", *args
    )
    assert_one_line_error(code, err, "objective.name=electric", "no masked LM")
    assert not run.exists()


def test_a_model_from_scratch_takes_a_config_json(tmp_path, corpus, capsys):
    """`model.hf_config`: an XLM-R config.json builds the hf family's model (its settings kept,
    the vocabulary the data's); an ELECTRA one goes to the native family (a DeBERTa-v3 one to
    the deberta-v3 family: tests/model/deberta/test_deberta_folders.py)."""
    _, data = mlm_folder(tmp_path, "bert", corpus)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(hf_config("xlm-roberta", 250002).to_dict()))
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--model.arch", "hf", "--model.hf_config", config, "--data", data),
        *("--out", run, "--train.steps", 2, "--train.batch_size", 4, "--no-progress"),
    )
    assert code == 0, err
    model = json.loads((run / "config.json").read_text())["model"]
    assert model["model_type"] == "xlm-roberta" and model["vocab_size"] < 200
    saved = json.loads((run / "discriminator" / "config.json").read_text())
    assert saved["max_position_embeddings"] == 66 and saved["architectures"] == [
        "XLMRobertaForTokenClassification"
    ]
    electra = tmp_path / "electra.json"
    electra.write_text(json.dumps(transformers.ElectraConfig(hidden_size=64).to_dict()))
    cfg = resolve_run(
        apply_overrides(
            preset("hf-tiny"), {"model.hf_config": str(electra), "data.path": str(data)}
        ),
        note=None,
    ).cfg
    assert cfg.model.arch == "electra" and cfg.model.hidden_size == 64


def test_rtd_from_a_random_xlm_roberta_learns(tmp_path):
    """Item 8: RTD continued from a random-weight xlm-roberta folder (hf-tiny's shape and
    schedule, 200 steps of 16 on one Wikipedia file) scores held-out text it never saw at AUC
    0.65 or more."""
    wiki = shared_data("wikipedia-en", "AA")
    tok = train_tokenizer([wiki / "wiki_01"], vocab_size=8000)
    folder = tmp_path / "xlmr"
    torch.manual_seed(0)
    transformers.XLMRobertaForMaskedLM(
        transformers.XLMRobertaConfig(
            vocab_size=tok.get_vocab_size(), hidden_size=128, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=512, max_position_embeddings=130,
            pad_token_id=0, type_vocab_size=1,
        )
    ).save_pretrained(folder)  # fmt: skip
    save_tokenizer(tok, folder, lowercase=True)
    for name, file in (("train", "wiki_02"), ("heldout", "wiki_03")):
        prepare([str(wiki / file)], folder, seq_len=128, out_dir=tmp_path / name, workers=1)
    over = {
        "data.path": str(tmp_path / "train"),
        "train.init_from": str(folder),
        "train.steps": 200,
        "train.batch_size": 16,
        "train.log_every": 25,
        "train.progress": False,
        "train.tensorboard": False,
        "train.device": "cpu",
    }
    # Random weights: the from-scratch rate and warm-up it was measured at, not continued
    # pretraining's (made for trained weights).
    mine = {*over, "train.lr", "train.head_lr_scale", "train.warmup_steps"}
    run = pretrain(apply_overrides(preset("hf-tiny"), over), tmp_path / "run", given=mine)
    auc = corrupt_and_score(run, tmp_path / "heldout").auc
    assert auc >= 0.65, auc


@pytest.mark.parametrize(
    ("objective", "sharing"),
    [
        ("electra", "gdes"),
        ("electra15", "embeddings"),
        ("adversarial", "embeddings"),
        ("mlm", "embeddings"),
        ("replace_mlm", "none"),
        ("all_tokens_mlm", "embeddings"),
        ("two_stage", "none"),
    ],
)
def test_every_objective_runs_on_the_family(tmp_path, corpus, capsys, objective, sharing):
    """Each objective but Electric trains a model from scratch of the family (`hf-tiny`, a BERT
    type), GDES included; what it writes exports to classes `transformers` loads whole."""
    _, data = mlm_folder(tmp_path, "bert", corpus)
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--preset", "hf-tiny", "--data", data, "--out", run, "--no-progress"),
        *("--objective.name", objective, "--objective.sharing", sharing),
        *("--train.steps", 2, "--train.batch_size", 4),
    )
    assert code == 0, err
    out = tmp_path / "export"
    assert run_cli(capsys, "export", "--model", run, "--out", out)[0] == 0
    for folder in sorted(p for p in out.iterdir() if (p / "config.json").is_file()):
        arch = json.loads((folder / "config.json").read_text())["architectures"][0]
        auto = getattr(transformers, arch)
        _, info = auto.from_pretrained(folder, output_loading_info=True)
        assert not any(info.values()), (folder.name, info)


def test_electric_is_refused_on_the_family(tmp_path, corpus, capsys):
    _, data = mlm_folder(tmp_path, "bert", corpus)
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--preset", "hf-tiny", "--data", data, "--out", run),
        *("--objective.name", "electric"),
    )
    assert_one_line_error(code, err, "objective.name=electric", "cloze towers")
    assert not run.exists()


class _Payload:
    """What a malicious pickle would run on load: it writes a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_weights_as_the_hub_ships_them_and_a_bin_that_is_not(tmp_path, corpus, capsys):
    """`pytorch_model.bin` of tensors (as `transformers` wrote it before safetensors) continues
    with RTD; one carrying a pickled payload is refused in one line, the payload never run."""
    folder, data = mlm_folder(tmp_path, "roberta", corpus)
    from safetensors.torch import load_file

    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    run = tmp_path / "run"
    args = ("--data", data, "--train.steps", 1, "--train.batch_size", 4, "--no-progress")
    code, _, err = run_cli(capsys, "pretrain", "--init-from", folder, "--out", run, *args)
    assert code == 0, err
    marker = tmp_path / "ran"
    torch.save({**state, "x": _Payload(marker)}, folder / "pytorch_model.bin")
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--out", tmp_path / "run2", *args
    )
    assert_one_line_error(code, err, "refusing to load", "pytorch_model.bin")
    assert not marker.exists() and not (tmp_path / "run2").exists()
