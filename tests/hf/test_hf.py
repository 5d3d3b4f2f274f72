"""Hugging Face interoperability: export, import, parity both ways, round trips, continued pretraining."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
import torch

from electra.cli.main import main
from electra.data.prepare import prepare
from electra.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from electra.engine.tracking import read_metrics
from electra.errors import ElectraError
from electra.folders.model_folder import load_pretrained, save_pretrained
from electra.hf.export import check_exportable, export_hf
from electra.model.electra.modeling import ElectraForMaskedLM, ElectraForPreTraining

from ..conftest import shared_data, tiny_model_config
from ..numerics import assert_same_computation, encoder_depth

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

# The configs of google/electra-{small,base,large}-{discriminator,generator}
# (docs/specification.md §Hugging Face naming).
RELEASED = {
    "small-discriminator": ("ElectraForPreTraining", 128, 256, 12, 4, 1024),
    "small-generator": ("ElectraForMaskedLM", 128, 256, 12, 4, 1024),
    "base-discriminator": ("ElectraForPreTraining", 768, 768, 12, 12, 3072),
    "base-generator": ("ElectraForMaskedLM", 768, 256, 12, 4, 1024),
    "large-discriminator": ("ElectraForPreTraining", 1024, 1024, 24, 16, 4096),
    "large-generator": ("ElectraForMaskedLM", 1024, 256, 24, 4, 1024),
}
SMALL_CONFIGS = {
    "E<H": dict(embedding_size=16, hidden_size=32, num_attention_heads=2),
    "E=H": dict(embedding_size=32, hidden_size=32, num_attention_heads=4),
    "E>H, 3 heads": dict(embedding_size=48, hidden_size=24, num_attention_heads=3),
    "1 head, relu": dict(
        embedding_size=16, hidden_size=16, num_attention_heads=1, hidden_act="relu"
    ),
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    text = " ".join(f"word{i % 97} token{i % 13}" for i in range(3000))
    (root / "c.txt").write_text(text)
    tok = train_tokenizer([root / "c.txt"], vocab_size=120, min_frequency=1)
    return tok


def small_config(**kw):
    return replace(tiny_model_config(vocab_size=120, max_position_embeddings=40), **kw)


def inputs(vocab, seed=0):
    """Random ids with padding in two rows and both segment ids."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 24), generator=g)
    types = torch.zeros_like(ids)
    types[:, 12:] = 1
    mask = torch.ones_like(ids)
    mask[1, 17:] = 0
    mask[2, 6:] = 0
    return ids, types, mask


def assert_parity(ours, hf, vocab):
    ids, types, mask = inputs(vocab)
    with torch.no_grad():
        a = ours(ids, types, mask)
        b = hf(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
    real = mask.bool()
    assert a.shape == b.shape
    # The longest reduction: the intermediate size (or a wider hidden or embedding size; the
    # rows' 24 keys are fewer). The chain: the layers, the embeddings' LayerNorm and projection
    # (3) and the generator's head, the longer one: dense layer, LayerNorm, decoder (4).
    cfg = ours.config
    terms = max(cfg.intermediate_size, cfg.hidden_size, cfg.embedding_size, ids.shape[1])
    depth = encoder_depth(cfg.num_hidden_layers, extra=7)
    assert_same_computation(a[real], b[real], terms=terms, depth=depth)


def hf_class(arch):
    return getattr(transformers, arch)


@pytest.mark.numeric
@pytest.mark.parametrize("name", SMALL_CONFIGS)
@pytest.mark.parametrize("cls", [ElectraForPreTraining, ElectraForMaskedLM])
def test_export_loads_in_transformers_with_parity(name, cls, tokenizer, tmp_path):
    torch.manual_seed(0)
    ours = cls(small_config(**SMALL_CONFIGS[name])).eval()
    save_pretrained(ours, tmp_path / "ours", tokenizer)
    (out,) = export_hf(tmp_path / "ours", tmp_path / "hf")
    hf, info = hf_class(cls.__name__).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert_parity(ours, hf.eval(), 120)
    # The exported tokenizer loads with AutoTokenizer and gives our ids.
    auto = transformers.AutoTokenizer.from_pretrained(out)
    text = "word3 token7 word42 unseenword"
    assert auto(text)["input_ids"] == tokenizer.encode(text).ids


@pytest.mark.numeric
@pytest.mark.parametrize("name", RELEASED)
def test_released_configs_import_with_parity(name, tokenizer, tmp_path):
    """HF models with the released checkpoints' configs (random weights: the hub is unreachable)."""
    arch, emb, hidden, layers, heads, ffn = RELEASED[name]
    config = transformers.ElectraConfig(
        vocab_size=30522,
        embedding_size=emb,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
    )
    torch.manual_seed(0)
    hf = hf_class(arch)(config).eval()
    # Half as pytorch_model.bin (read with weights_only=True), half as safetensors.
    hf.save_pretrained(
        tmp_path / "hf", safe_serialization=name.startswith("small") or "generator" in name
    )
    save_tokenizer(tokenizer, tmp_path / "hf", lowercase=True)
    ours, _ = load_pretrained(tmp_path / "hf")
    assert type(ours).__name__ == arch
    assert_parity(ours, hf, 30522)


def test_round_trip_gives_identical_tensors(tokenizer, tmp_path):
    torch.manual_seed(0)
    for cls in (ElectraForPreTraining, ElectraForMaskedLM):
        ours = cls(small_config(**SMALL_CONFIGS["E<H"]))
        save_pretrained(ours, tmp_path / cls.__name__, tokenizer)
        (out,) = export_hf(tmp_path / cls.__name__, tmp_path / f"hf-{cls.__name__}")
        hf = hf_class(cls.__name__).from_pretrained(out)
        hf.save_pretrained(tmp_path / f"hf2-{cls.__name__}")  # as transformers writes it
        save_tokenizer(tokenizer, tmp_path / f"hf2-{cls.__name__}", lowercase=True)
        back, _ = load_pretrained(tmp_path / f"hf2-{cls.__name__}")
        a, b = ours.state_dict(), back.state_dict()
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


def test_tokenizer_round_trip_on_real_text(tmp_path):
    corpus = shared_data("wikitext-2-raw", "wiki.test.raw")
    tok = train_tokenizer([corpus], vocab_size=3000)
    model = ElectraForPreTraining(small_config(vocab_size=tok.get_vocab_size()))
    save_pretrained(model, tmp_path / "m", tok)
    (out,) = export_hf(tmp_path / "m", tmp_path / "hf")
    auto = transformers.AutoTokenizer.from_pretrained(out)
    lines = [
        line.strip() for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    for line in lines[:300]:
        assert auto(line)["input_ids"] == tok.encode(line).ids, line
    pair = auto(lines[1], lines[2])
    ours = tok.encode(lines[1], lines[2])
    assert pair["input_ids"] == ours.ids and pair["token_type_ids"] == ours.type_ids


def make_hf_pair(root, tokenizer, gen_embedding=16, name="pair"):
    """Random HF discriminator + generator in ROOT/NAME, and ROOT/data prepared with their tokenizer."""
    disc = transformers.ElectraConfig(**asdict(tiny_model_config(vocab_size=120)))
    gen_cfg = tiny_model_config(
        vocab_size=120,
        embedding_size=gen_embedding,
        hidden_size=16,
        num_attention_heads=1,
        intermediate_size=48,
    )
    torch.manual_seed(0)
    models = {
        "discriminator": transformers.ElectraForPreTraining(disc),
        "generator": transformers.ElectraForMaskedLM(transformers.ElectraConfig(**asdict(gen_cfg))),
    }
    for role, m in models.items():
        m.save_pretrained(root / name / role)
        save_tokenizer(tokenizer, root / name / role, lowercase=True)
    (root / "c.txt").write_text(
        "\n".join(f"word{i % 97} token{i % 13} word{i % 7}" for i in range(600))
    )
    if not (root / "data").exists():
        prepare(
            [str(root / "c.txt")],
            root / name / "discriminator",
            seq_len=32,
            out_dir=root / "data",
            workers=1,
        )
    return models


def pair_run_args(root, *extra, pair="pair", data="data"):
    """`electra pretrain --init-from ROOT/pair` for two short steps."""
    args = [
        "pretrain",
        "--init-from",
        root / pair,
        "--data",
        root / data,
        "--out",
        root / "run",
        "--steps",
        2,
        "--batch-size",
        4,
        "--seq-len",
        32,
        "--train.progress",
        "false",
        "--train.tensorboard",
        "false",
        *extra,
    ]
    return [str(a) for a in args]


def test_continued_pretraining_from_an_hf_pair(tokenizer, tmp_path, capsys):
    hf = make_hf_pair(tmp_path, tokenizer)
    # LR 0: the weights that come out are the ones that went in, so the load is checked exactly.
    args = pair_run_args(tmp_path, "--train.lr", 0)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "generator:" in err and "hidden 16" in err
    disc, _ = load_pretrained(tmp_path / "run" / "discriminator")
    gen, _ = load_pretrained(tmp_path / "run" / "generator")
    for k, v in hf["discriminator"].state_dict().items():
        assert torch.equal(disc.state_dict()[k], v), k
    for k, v in hf["generator"].state_dict().items():
        if not k.startswith("electra.embeddings.") and k != "generator_lm_head.weight":
            assert torch.equal(gen.state_dict()[k], v), k
    # Embedding sharing restored: the generator now uses the discriminator's tables.
    assert torch.equal(
        gen.electra.embeddings.word_embeddings.weight,
        hf["discriminator"].electra.embeddings.word_embeddings.weight,
    )
    assert torch.equal(gen.generator_lm_head.weight, gen.electra.embeddings.word_embeddings.weight)
    assert len(read_metrics(tmp_path / "run")) == 1
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["objective"]["generator_hidden_size"] == 16


def test_pairs_that_do_not_fit_are_refused(tokenizer, tmp_path, capsys):
    make_hf_pair(tmp_path, tokenizer, gen_embedding=24)
    args = pair_run_args(tmp_path)
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("electra:")]
    assert len(err) == 1 and "embedding_size=16" in err[0] and "24" in err[0]
    assert not (tmp_path / "run").exists()
    # Data prepared with another tokenizer than the pair's.
    make_hf_pair(tmp_path, tokenizer, name="pair2")
    other = train_tokenizer([tmp_path / "c.txt"], vocab_size=60, min_frequency=1)
    save_tokenizer(other, tmp_path / "other-tok", lowercase=True)
    prepare(
        [str(tmp_path / "c.txt")],
        tmp_path / "other-tok",
        seq_len=32,
        out_dir=tmp_path / "d2",
        workers=1,
    )
    args = pair_run_args(tmp_path, pair="pair2", data="d2")
    assert main(args) == 2
    assert "not prepared with the tokenizer" in capsys.readouterr().err


def test_export_refuses_what_hf_cannot_represent(tmp_path):
    model = ElectraForPreTraining(small_config())
    check_exportable(model, tmp_path)
    model.register_parameter("residual", torch.nn.Parameter(torch.zeros(1)))  # e.g. GDES's
    with pytest.raises(ElectraError, match="residual have no Hugging Face ELECTRA counterpart"):
        check_exportable(model, tmp_path)


def test_export_cli_writes_both_networks_of_a_run(tokenizer, tmp_path, capsys):
    torch.manual_seed(0)
    run = tmp_path / "run"
    save_pretrained(ElectraForPreTraining(small_config()), run / "discriminator", tokenizer)
    save_pretrained(
        ElectraForMaskedLM(small_config(hidden_size=16, num_attention_heads=1, embedding_size=16)),
        run / "generator",
        tokenizer,
    )
    assert (
        main(["export", "--model", str(run), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    )
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["discriminator", "generator"]
    assert load_tokenizer(tmp_path / "hf" / "generator").get_vocab_size() == 120
    assert main(["export", "--model", str(run), "--out", str(tmp_path / "hf")]) == 2  # exists
    assert "already exists" in capsys.readouterr().err


def test_weights_that_do_not_fit_their_config_are_refused(tokenizer, tmp_path, capsys):
    save_pretrained(ElectraForPreTraining(small_config()), tmp_path / "m", tokenizer)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["hidden_size"] = 64  # the file now describes another model than the weights
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert main(["detect", "--model", str(tmp_path / "m"), "word3"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("electra:")]
    assert len(err) == 1 and "do not fit its config.json" in err[0]
    assert main(["export", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 2
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf*"))
