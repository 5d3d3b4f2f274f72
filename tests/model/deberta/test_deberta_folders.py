"""Microsoft's DeBERTa-v3 folders in the deberta-v3 family (issue 49): a `transformers`
`DebertaV2ForMaskedLM`, `DebertaV2Model` or `DebertaV2ForTokenClassification` folder with
DeBERTa-v3's settings continues with RTD from its encoder exactly (`pretrain --init-from`), its
generator the folder's lower half or `--generator-from`'s masked LM, the run a deberta-v3 one;
the weights the official checkpoints carry beside the encoder are dropped; a DeBERTa-v3
config.json builds a model from scratch; and a folder the family does not compute (DeBERTa v1,
no relative attention, a relative table of another size) or an attention path it lacks is one
line, with nothing written."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from electra.config import apply_overrides, preset
from electra.data.prepare import prepare
from electra.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from electra.folders.continuation import continued_networks, load_pair_weights
from electra.folders.model_folder import load_pretrained
from electra.model.attention import check_model
from electra.model.deberta.config import DebertaV3Config
from electra.model.family import encoder_of
from electra.objectives import build_objective
from electra.pretraining.resolve import resolve_run

from ...conftest import assert_one_line_error, run_cli, sentence
from ...numerics import encoder_depth, largest, rounding_bound

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip(
    "transformers", reason="transformers (the hf extra) not installed"
)

# DeBERTa-v3 as microsoft ships it (deberta-v3-base's config.json).
DEBERTA_V3 = {
    "relative_attention": True,
    "pos_att_type": ["p2c", "c2p"],
    "position_buckets": 256,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "position_biased_input": False,
    "max_relative_positions": -1,
    "type_vocab_size": 0,
}
LAYERS, INTERMEDIATE = 2, 64
# What microsoft's checkpoints carry beside the encoder (the pretraining code's RTD and MLM heads,
# an absolute table the encoder never reads), which `transformers` ignores.
HUB_EXTRAS = {
    "deberta.embeddings.position_embeddings.weight": (512, 32),
    "mask_predictions.dense.weight": (32, 32),
    "mask_predictions.LayerNorm.weight": (32,),
    "mask_predictions.classifier.weight": (1, 32),
    "mask_predictions.classifier.bias": (1,),
    "lm_predictions.lm_head.dense.weight": (32, 32),
    "lm_predictions.lm_head.bias": (120,),
}


def hf_config(vocab: int, **settings) -> transformers.DebertaV2Config:
    sizes = {"hidden_size": 32, "num_hidden_layers": LAYERS, "num_attention_heads": 2}
    sizes |= {"intermediate_size": INTERMEDIATE, "max_position_embeddings": 512}
    return transformers.DebertaV2Config(
        vocab_size=vocab, pad_token_id=0, **sizes, **(DEBERTA_V3 | settings)
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """One tokenizer for every folder and the data prepared with it."""
    root = tmp_path_factory.mktemp("deberta_folders")
    (root / "c.txt").write_text("\n".join(sentence(i) for i in range(300)) + "\n")
    tok = train_tokenizer([root / "c.txt"], vocab_size=120, min_frequency=1)
    save_tokenizer(tok, root / "tok", lowercase=True)
    prepare([str(root / "c.txt")], root / "tok", seq_len=32, out_dir=root / "data", workers=1)
    return root


def hub_folder(root, corpus, cls="DebertaV2ForMaskedLM", name="hub", seed=0, model_type=None,
               **settings):  # fmt: skip
    """A random folder of `transformers`' class `cls` (DeBERTa-v3's settings unless `settings`
    say otherwise), saved by `transformers`, with the corpus's tokenizer."""
    tok = load_tokenizer(corpus / "tok")
    torch.manual_seed(seed)
    if model_type == "deberta":  # DeBERTa v1
        config = transformers.DebertaConfig(
            vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64, relative_attention=True,
        )  # fmt: skip
        model = transformers.DebertaForMaskedLM(config)
    else:
        model = getattr(transformers, cls)(hf_config(tok.get_vocab_size(), **settings))
    folder = root / name
    model.save_pretrained(folder)
    save_tokenizer(tok, folder, lowercase=True)
    return folder


def continued(folder, data, generator_from=None):
    """The networks of RTD continued from `folder`, as `pretrain` starts them, and the line it
    prints."""
    over = {"data.path": str(data), "train.init_from": str(folder), "train.device": "cpu"}
    if generator_from:
        over["train.generator_from"] = str(generator_from)
    cfg = resolve_run(apply_overrides(preset("deberta-v3-tiny"), over), note=None).cfg
    assert cfg.model.arch == "deberta-v3" and isinstance(cfg.model, DebertaV3Config)
    objective = build_objective(cfg.model, cfg.objective, None, 32)
    line = load_pair_weights(*continued_networks(objective), folder, generator_from)
    return cfg, objective, line


def assert_same_encoder(mine, theirs):
    """Our encoder computes `transformers`' last hidden states up to the rounding of two orders
    of the same terms (SDPA with the position terms as a bias against an eager softmax): 2 layers
    of 3 more reductions each and the embeddings' LayerNorm; the longest reduction 64 terms."""
    torch.manual_seed(2)
    ids = torch.randint(5, 120, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    with torch.no_grad():
        want = theirs(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
        got = mine(ids, None, mask)[mask.bool()]
    depth = encoder_depth(LAYERS, 1) + 3 * LAYERS
    bound = rounding_bound(torch.float32, INTERMEDIATE, depth, largest(want))
    assert (got - want).abs().max().item() <= bound


@pytest.mark.parametrize(
    "cls", ["DebertaV2ForMaskedLM", "DebertaV2Model", "DebertaV2ForTokenClassification"]
)
def test_rtd_continues_from_a_microsoft_folder_exactly(tmp_path, corpus, cls):
    """The discriminator's encoder is the folder's, tensor for tensor, computing what
    `transformers`' does; the generator is its lower half (DeBERTa-v3's rule), with its MLM head
    where the folder has one, sharing the discriminator's token table."""
    folder = hub_folder(tmp_path, corpus, cls)
    cfg, objective, line = continued(folder, corpus / "data")
    assert cfg.objective.sharing == "embeddings" and cfg.model.position_buckets == 256
    theirs = getattr(transformers, cls).from_pretrained(folder).eval()
    base = theirs if cls == "DebertaV2Model" else theirs.deberta
    disc, gen = objective.discriminator.eval(), objective.generator.eval()
    mine = encoder_of(disc).state_dict()
    for name, tensor in base.state_dict().items():
        assert torch.equal(mine[name], tensor), name
    assert_same_encoder(encoder_of(disc), base)
    assert encoder_of(gen).embeddings is encoder_of(disc).embeddings
    assert gen.config.num_hidden_layers == 1
    head = "its MLM head" if cls == "DebertaV2ForMaskedLM" else "a fresh MLM head"
    assert f"lower 1 of 2 layers and {head}" in line, line
    layer0 = encoder_of(gen).encoder.layer[0].state_dict()
    for name, tensor in base.encoder.layer[0].state_dict().items():
        assert torch.equal(layer0[name], tensor), name
    if cls == "DebertaV2ForMaskedLM":
        for name in ("transform.dense.weight", "transform.LayerNorm.weight", "bias"):
            want = theirs.state_dict()[f"cls.predictions.{name}"]
            assert torch.equal(gen.cls.predictions.state_dict()[name], want), name


def test_the_weights_official_checkpoints_carry_beside_the_encoder_are_dropped(
    tmp_path, corpus, capsys
):
    """microsoft/deberta-v3-*: config.json without `architectures`, the pretraining code's heads
    (`mask_predictions.*`, `lm_predictions.*`) and an absolute table beside the encoder; a
    masked-LM folder may carry them too. Both continue, the encoder exactly the folder's."""
    official = hub_folder(tmp_path, corpus, "DebertaV2ForMaskedLM", name="official")
    mlm = hub_folder(tmp_path, corpus, "DebertaV2ForMaskedLM", name="mlm")
    for folder in (official, mlm):
        state = load_file(folder / "model.safetensors")
        state |= {k: torch.randn(shape) for k, shape in HUB_EXTRAS.items()}
        if folder is official:
            state = {k: v for k, v in state.items() if not k.startswith("cls.")}
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((official / "config.json").read_text())
    del config["architectures"]
    (official / "config.json").write_text(json.dumps(config))

    for folder, head in ((official, "a fresh MLM head"), (mlm, "its MLM head")):
        _, objective, line = continued(folder, corpus / "data")
        assert head in line, line
        mine = encoder_of(objective.discriminator).state_dict()
        state = load_file(folder / "model.safetensors")
        for name, tensor in mine.items():
            assert torch.equal(tensor, state[f"deberta.{name}"]), name
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--init-from", official, "--data", corpus / "data", "--out", run),
        *("--train.steps", 2, "--train.batch_size", 4, "--no-progress", "--device", "cpu"),
    )
    assert code == 0, err
    assert json.loads((run / "config.json").read_text())["model"]["arch"] == "deberta-v3"


def test_a_masked_lm_saved_with_legacy_false_keeps_its_head(tmp_path, corpus):
    """`transformers`' other MLM head (`legacy` false: `lm_predictions.lm_head.*`) is ours under
    other names: the folder loads with it, computing `transformers`' logits, and continues with
    it as the generator's head."""
    folder = hub_folder(tmp_path, corpus, legacy=False)
    assert any(k.startswith("lm_predictions.") for k in load_file(folder / "model.safetensors"))
    mine, _ = load_pretrained(folder)
    theirs = transformers.DebertaV2ForMaskedLM.from_pretrained(folder).eval()
    torch.manual_seed(3)
    ids = torch.randint(5, 100, (2, 24))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want, got = theirs(input_ids=ids, attention_mask=mask).logits, mine(ids, None, mask)
    depth = encoder_depth(LAYERS, 4) + 3 * LAYERS
    assert (got - want).abs().max() <= rounding_bound(torch.float32, 64, depth, largest(want))
    _, objective, line = continued(folder, corpus / "data")
    assert "its MLM head" in line, line
    head = theirs.lm_predictions.lm_head
    assert torch.equal(objective.generator.cls.predictions.bias, head.bias)
    assert torch.equal(
        objective.generator.cls.predictions.transform.dense.weight, head.dense.weight
    )


def test_generator_from_the_mlm_objective_and_export(tmp_path, corpus, capsys):
    """`--generator-from` takes a DebertaV2ForMaskedLM whole (its own embeddings); the run is a
    deberta-v3 one and exports to folders `transformers` loads with no missing or unexpected
    weight; the mlm objective continues the folder's masked LM, head included."""
    folder = hub_folder(tmp_path, corpus, "DebertaV2ForMaskedLM")
    small = hub_folder(tmp_path, corpus, "DebertaV2ForMaskedLM", name="small", seed=1)
    _, objective, line = continued(folder, corpus / "data", generator_from=small)
    theirs = transformers.DebertaV2ForMaskedLM.from_pretrained(small).state_dict()
    for name, tensor in objective.generator.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name
    run = tmp_path / "run"
    data = corpus / "data"
    args = ("--data", data, "--train.steps", 2, "--train.batch_size", 4, "--no-progress")
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--generator-from", small, "--out", run, *args
    )
    assert code == 0, err
    assert f"generator: all of {small}" in err
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["arch"] == "deberta-v3" and saved["objective"]["sharing"] == "none"
    out = tmp_path / "export"
    assert run_cli(capsys, "export", "--model", run, "--out", out)[0] == 0
    for sub, auto in (
        ("generator", transformers.AutoModelForMaskedLM),
        ("discriminator", transformers.AutoModelForTokenClassification),
        ("encoder", transformers.AutoModel),
    ):
        model, info = auto.from_pretrained(out / sub, output_loading_info=True)
        assert not any(info.values()), (sub, info)
        assert type(model).__name__.startswith("DebertaV2"), type(model).__name__
    mlm = tmp_path / "mlm-run"
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--objective.name", "mlm", "--out", mlm, *args
    )
    assert code == 0 and "model: all of it" in err, err
    assert json.loads((mlm / "config.json").read_text())["model"]["arch"] == "deberta-v3"


def test_a_model_from_scratch_takes_a_deberta_v3_config_json(tmp_path, corpus, capsys):
    """`model.hf_config`: a DeBERTa-v3 config.json builds the family's model (its settings kept,
    the vocabulary the data's), whichever family the command named."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(hf_config(128100).to_dict()))
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--model.arch", "hf", "--model.hf_config", config),
        *("--data", corpus / "data", "--out", run, "--train.steps", 2),
        *("--train.batch_size", 4, "--no-progress", "--device", "cpu"),
    )
    assert code == 0, err
    model = json.loads((run / "config.json").read_text())["model"]
    assert model["arch"] == "deberta-v3" and model["vocab_size"] < 200
    assert model["position_buckets"] == 256 and model["hidden_size"] == 32
    saved = json.loads((run / "discriminator" / "config.json").read_text())
    assert saved["relative_attention"] and saved["architectures"] == [
        "DebertaV2ForTokenClassification"
    ]


# --- what the family does not compute -------------------------------------------------------------


def refused(capsys, folder, out, *needles, args=()):
    code, _, err = run_cli(
        capsys,
        *("pretrain", "--init-from", folder, "--data", folder.parent / "data", "--out", out),
        *("--train.steps", 1, "--no-progress", "--device", "cpu", *args),
    )
    assert_one_line_error(code, err, *needles)
    assert not out.exists()


@pytest.fixture
def here(tmp_path, corpus):
    """tmp_path with the corpus's data beside the folders made in it."""
    (tmp_path / "data").symlink_to(corpus / "data")
    return tmp_path


def test_a_deberta_v1_folder_is_one_line(here, corpus, capsys):
    folder = hub_folder(here, corpus, model_type="deberta")
    refused(capsys, folder, here / "run", str(folder / "config.json"), "'deberta' model")


def test_a_folder_without_relative_attention_is_one_line(here, corpus, capsys):
    folder = hub_folder(here, corpus, relative_attention=False)
    refused(
        capsys, folder, here / "run", str(folder / "config.json"), "relative_attention=False",
        "not DeBERTa-v3's",
    )  # fmt: skip


def test_a_relative_table_of_another_bucket_count_is_one_line(here, corpus, capsys):
    """config.json says 128 buckets, the checkpoint's table has 512 rows (256 buckets): the file,
    the weight and the value that fits, not torch's size mismatch."""
    folder = hub_folder(here, corpus)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "position_buckets": 128}))
    refused(
        capsys, folder, here / "run", str(folder), "model.safetensors",
        "deberta.encoder.rel_embeddings.weight is [512, 32]", "position_buckets=128",
        "position_buckets=256", "fix config.json",
    )  # fmt: skip


def test_varlen_attention_is_one_line_naming_the_familys_paths(here, corpus, capsys, monkeypatch):
    """On the CPU the device is refused first; where the device takes varlen (CUDA: its check
    passed here), the family is, naming its paths; nothing is written either way."""
    cfg = DebertaV3Config(attention_probs_dropout_prob=0.0)
    with pytest.raises(Exception, match=r"the deberta-v3 family runs sdpa or flex") as error:
        check_model("varlen", cfg, "train.")
    assert "\n" not in str(error.value)
    args = ("--preset", "deberta-v3-tiny", "--data", here / "data", "--out", here / "run")
    args += ("--steps", 1, "--no-progress", "--device", "cpu", "--attention", "varlen")
    code, _, err = run_cli(capsys, "pretrain", *args)
    assert_one_line_error(code, err, "train.attention=varlen")
    assert not (here / "run").exists()
    monkeypatch.setattr("electra.engine.runtime.check_attention", lambda *a, **k: None)
    code, _, err = run_cli(capsys, "pretrain", *args)
    assert_one_line_error(
        code, err, "train.attention=varlen", "deberta-v3 family runs sdpa or flex"
    )
    assert not (here / "run").exists()
    assert not re.search(r"size mismatch|Traceback", err)
