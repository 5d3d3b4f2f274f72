"""The modern family in and out of `transformers` (issue 38 items 4 and 5), on tiny random models:
our discriminator folder is HF's two-label ModernBertForTokenClassification (softmax[..., 1] is our
sigmoid), the generator HF's ModernBertForMaskedLM, the encoder HF's ModernBertModel, each loading
with no missing or unexpected weights and equal outputs (fp32, padded batch, `sdpa` and `eager`);
config.json carries the 4.x and the 5.x keys alike; HF-saved ModernBERT folders read as ours, feed
`electra finetune` their encoder and `pretrain --init-from` an RTD continuation; bad input is one
ElectraError line."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from electra.config import generator_config, preset
from electra.data.tokenizer import fingerprint, special_ids
from electra.errors import ElectraError
from electra.folders.continuation import load_pair_weights, pair_configs
from electra.folders.model_folder import load_pretrained, read_model_config, save_pretrained
from electra.hf.export import export_hf
from electra.hf.from_transformers import load_encoder
from electra.model.configs import GLOBAL, LOCAL
from electra.model.modernbert.config import ModernConfig
from electra.model.modernbert.modeling import ModernBertForMaskedLM, ModernBertForPreTraining
from electra.pretraining.resolve import configure_from_pair, fit_config_to_data
from electra.scoring.detect import detect

from ...conftest import run_cli, tiny_modern_config
from ...numerics import assert_same_computation, encoder_depth, rounding_bound

pytestmark = pytest.mark.numeric

transformers = pytest.importorskip("transformers")

SPECIALS = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"]  # ModernBERT's, in its order
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "the bird sang to the sun"] * 10


def bpe_tokenizer() -> Tokenizer:
    """A small BPE tokenizer with ModernBERT's special tokens and [CLS] A [SEP] template."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=60, special_tokens=SPECIALS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tok


TOK = bpe_tokenizer()
# Layers 0 and 2 global, 1 local; a local token sees 4 each side, so windows matter at length 16.
CFG = tiny_modern_config(
    vocab_size=64,
    pad_token_id=TOK.token_to_id("[PAD]"),
    global_rope_theta=20_000.0,  # not HF's defaults, so a file that loses them shows it
    local_rope_theta=500.0,
)


def bigger(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Weights far from HF's near-uniform initialisation, so a wrong theta or window shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.2 * noise)
    return model.eval()


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 16 ids, the second 6 real tokens then padding."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, TOK.get_vocab_size(), (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 6:] = 0
    ids[1, 6:] = CFG.pad_token_id
    return ids, mask


def hf_load(auto: str, folder: Path, attn: str):
    model, info = getattr(transformers, auto).from_pretrained(
        folder, attn_implementation=attn, output_loading_info=True
    )
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    return model.float().eval()


def assert_real_close(
    ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor, cfg: ModernConfig | None = None
) -> None:
    """Equal at the real tokens (padded positions are nobody's output) to the rounding of a
    model of `cfg` (by default CFG, the tiny one): its layers, the embeddings' and final
    LayerNorms (4) and at most an MLM head (dense layer, LayerNorm, decoder: 4); the longest
    reduction the intermediate size (or a longer row)."""
    cfg = cfg or CFG
    real = mask.bool()
    terms = max(cfg.intermediate_size, cfg.hidden_size, mask.shape[1])
    depth = encoder_depth(cfg.num_hidden_layers, extra=8)
    assert_same_computation(ours[real], theirs[real], terms=terms, depth=depth)


def head_bound(logits: torch.Tensor) -> float:
    """The rounding of CFG's model with a head at `logits` of this size: probabilities taken
    from them move no more than they do (a softmax's sum adds one reduction)."""
    depth = encoder_depth(CFG.num_hidden_layers, extra=9)
    size = max(logits.abs().max().item(), 1.0)
    return rounding_bound(torch.float32, CFG.intermediate_size, depth, size)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    """A discriminator/ and generator/ pair of ours, sharing the token table, as a run leaves it."""
    out = tmp_path_factory.mktemp("modern-pair")
    disc = bigger(ModernBertForPreTraining(CFG))
    gen = bigger(ModernBertForMaskedLM(replace(CFG, num_hidden_layers=1)), seed=1)
    gen.model.embeddings = disc.model.embeddings
    gen.tie_weights()
    save_pretrained(disc, out / "discriminator", TOK)
    save_pretrained(gen, out / "generator", TOK)
    return out


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_discriminator_folder_is_hfs_two_label_token_classifier(pair, attn):
    ours, _ = load_pretrained(pair / "discriminator")
    assert isinstance(ours, ModernBertForPreTraining)
    hf = hf_load("AutoModelForTokenClassification", pair / "discriminator", attn)
    assert type(hf).__name__ == "ModernBertForTokenClassification"
    assert hf.config.id2label == {0: "original", 1: "replaced"}
    ids, mask = padded_batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).logits.softmax(-1)[..., 1]
        mine = torch.sigmoid(ours(ids, attention_mask=mask))
    assert_real_close(mine, theirs, mask)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_generator_and_encoder_load_as_hfs_masked_lm_and_base_model(pair, tmp_path, attn):
    gen, _ = load_pretrained(pair / "generator")
    hf_gen = hf_load("AutoModelForMaskedLM", pair / "generator", attn)
    disc, _ = load_pretrained(pair / "discriminator")
    save_pretrained(disc.model, tmp_path / "encoder", TOK)  # the encoder alone
    hf_enc = hf_load("AutoModel", tmp_path / "encoder", attn)
    assert type(hf_enc).__name__ == "ModernBertModel"
    ids, mask = padded_batch()
    with torch.no_grad():
        assert_real_close(gen(ids, attention_mask=mask), hf_gen(ids, mask).logits, mask)
        theirs = hf_enc(input_ids=ids, attention_mask=mask).last_hidden_state
        assert_real_close(disc.model(ids, attention_mask=mask), theirs, mask)


def test_config_json_has_both_key_sets_and_4x_keys_alone_give_the_same_model(pair):
    raw = json.loads((pair / "discriminator" / "config.json").read_text())
    assert "arch" not in raw and raw["model_type"] == "modernbert"
    assert raw["global_attn_every_n_layers"] == 2 and raw["local_rope_theta"] == 500.0
    assert raw["layer_types"] == [GLOBAL, LOCAL, GLOBAL]
    assert raw["rope_parameters"][GLOBAL]["rope_theta"] == 20_000.0
    ids = {k: raw[k] for k in ("pad_token_id", "cls_token_id", "sep_token_id")}
    assert ids == {
        k: TOK.token_to_id(t) for k, t in zip(ids, ("[PAD]", "[CLS]", "[SEP]"), strict=True)
    }
    old = {k: v for k, v in raw.items() if k not in ("layer_types", "rope_parameters")}
    from_4x = transformers.ModernBertConfig(**old)
    assert from_4x.layer_types == raw["layer_types"]
    assert from_4x.rope_parameters == transformers.ModernBertConfig(**raw).rope_parameters
    # And we read 5.x's keys alone (a file transformers 5 wrote from layer_types) the same way.
    new = {k: v for k, v in raw.items() if not k.endswith("rope_theta")}
    new.pop("global_attn_every_n_layers")
    folder = pair / "discriminator"
    assert read_model_config_of(new, folder) == read_model_config(folder)[1] == CFG
    assert read_model_config_of(old, folder) == CFG  # and 4.x's alone


def read_model_config_of(raw: dict, like: Path) -> ModernConfig:
    from electra.model.hf_names import model_config_from_hf

    return model_config_from_hf(raw, like / "config.json")


def test_exported_tokenizer_gives_no_token_type_ids(pair):
    hf_tok = transformers.AutoTokenizer.from_pretrained(pair / "generator")
    enc = hf_tok("the cat sat")
    assert "token_type_ids" not in enc and enc["input_ids"] == TOK.encode("the cat sat").ids


def test_fill_mask_pipeline_agrees_with_ours(pair):
    gen, _ = load_pretrained(pair / "generator")
    fill = transformers.pipeline("fill-mask", model=str(pair / "generator"), top_k=3)
    found = fill("the cat [MASK] on the mat")
    enc = TOK.encode("the cat [MASK] on the mat")
    at = enc.ids.index(TOK.token_to_id("[MASK]"))
    with torch.no_grad():
        logits = gen(torch.tensor([enc.ids]))[0, at]
    top = logits.softmax(-1).topk(3)
    assert [r["token"] for r in found] == top.indices.tolist()
    scores = torch.tensor([r["score"] for r in found])
    assert (scores - top.values).abs().max().item() <= head_bound(logits)


def test_export_of_a_pair_round_trips(pair, tmp_path):
    written = export_hf(pair, tmp_path / "out")
    # The discriminator also as the bare ModernBertModel, what AutoModel loads.
    assert [p.name for p in written] == ["discriminator", "encoder", "generator"]
    for role in ("discriminator", "generator"):
        a, _ = load_pretrained(pair / role)
        b, _ = load_pretrained(tmp_path / "out" / role)
        for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
            assert torch.equal(x, y), name


def test_load_encoder_of_our_discriminator_folder(pair):
    ours, _ = load_pretrained(pair / "discriminator")
    cfg, state, _, path = load_encoder(pair)  # a run or pair folder: its discriminator
    assert cfg == CFG and path == pair / "discriminator"
    assert state.keys() == {f"model.{k}" for k in ours.model.state_dict()}


def test_detect_reads_a_modern_discriminator(pair):
    ours, _ = load_pretrained(pair / "discriminator")
    [rows] = detect(pair / "discriminator", ["the cat sat"])
    enc = TOK.encode("the cat sat")
    with torch.no_grad():
        logits = ours(torch.tensor([enc.ids]))[0, 1:-1]
    p = torch.sigmoid(logits)
    assert [r["token"] for r in rows] == enc.tokens[1:-1]
    # At full precision (not rounded), as the model computes them; the detect path's kernels
    # may differ from the plain forward's by float32 rounding.
    found = torch.tensor([r["p_replaced"] for r in rows])
    assert (found - p).abs().max().item() <= head_bound(logits)


# --- Hugging Face in ------------------------------------------------------------------------------


def hf_config(**settings):
    """HF's config of CFG (with `settings`) as transformers 5 builds it (5.x keys only), with
    ModernBERT's token ids."""
    cfg = replace(CFG, **{k: v for k, v in settings.items() if hasattr(CFG, k)})
    return transformers.ModernBertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        local_attention=cfg.local_attention,
        layer_types=[cfg.layer_type(i) for i in range(cfg.num_hidden_layers)],
        rope_parameters={
            GLOBAL: {"rope_type": "default", "rope_theta": CFG.global_rope_theta},
            LOCAL: {"rope_type": "default", "rope_theta": CFG.local_rope_theta},
        },
        pad_token_id=CFG.pad_token_id,
        bos_token_id=TOK.token_to_id("[CLS]"),
        eos_token_id=TOK.token_to_id("[SEP]"),
        cls_token_id=TOK.token_to_id("[CLS]"),
        sep_token_id=TOK.token_to_id("[SEP]"),
        **{k: v for k, v in settings.items() if not hasattr(CFG, k)},
    )


def hf_folder(tmp_path: Path, kind: str, **settings) -> tuple[Path, torch.nn.Module]:
    """A folder `transformers` saved from a random `kind` model, with our BPE tokenizer.json."""
    torch.manual_seed(0)
    model = bigger(getattr(transformers, kind)(hf_config(**settings)))
    folder = tmp_path / kind
    model.save_pretrained(folder)
    TOK.save(str(folder / "tokenizer.json"))
    return folder, model


def test_an_hf_masked_lm_folder_loads_with_equal_outputs(tmp_path):
    folder, hf = hf_folder(tmp_path, "ModernBertForMaskedLM")
    assert "decoder.weight" not in load_file(folder / "model.safetensors")  # tied: left out
    ours, tok = load_pretrained(folder)
    assert isinstance(ours, ModernBertForMaskedLM) and ours.config == CFG
    ids, mask = padded_batch()
    with torch.no_grad():
        assert_real_close(ours(ids, attention_mask=mask), hf(ids, mask).logits, mask)


@pytest.mark.parametrize(
    "kind", ["ModernBertForMaskedLM", "ModernBertModel", "ModernBertForSequenceClassification"]
)
def test_load_encoder_gives_the_encoder_of_any_hf_modern_folder(tmp_path, kind):
    folder, hf = hf_folder(tmp_path, kind)
    cfg, state, tok, path = load_encoder(folder)
    assert cfg == CFG and path == folder and tok.get_vocab_size() == TOK.get_vocab_size()
    assert all(k.startswith("model.") for k in state)
    encoder = ModernBertForPreTraining(cfg).eval()
    encoder.load_state_dict(state, strict=False)
    base = hf if kind == "ModernBertModel" else hf.model
    ids, mask = padded_batch()
    with torch.no_grad():
        theirs = base(input_ids=ids, attention_mask=mask).last_hidden_state
        assert_real_close(encoder.model(ids, attention_mask=mask), theirs, mask)


def continuation_run(folder: Path, seq_len: int = 16, tokenizer: Tokenizer = TOK):
    cfg = preset("modern-tiny")
    cfg = replace(cfg, train=replace(cfg.train, init_from=str(folder)))
    data = SimpleNamespace(
        meta={"tokenizer_fingerprint": fingerprint(tokenizer)},
        seq_len=seq_len,
        vocab_size=tokenizer.get_vocab_size(),
        special=special_ids(tokenizer),
    )
    return fit_config_to_data(configure_from_pair(cfg, data), data, keep_vocab=True)


DEEPER = ("model.layers.1.", "model.layers.2.")


def test_rtd_continues_an_hf_masked_lm(tmp_path):
    """Discriminator: the HF model's encoder, a fresh RTD head. Generator: its width, its lower
    third of layers (1 of 3), its final norm and MLM head, sharing the discriminator's table."""
    folder, hf = hf_folder(tmp_path, "ModernBertForMaskedLM")
    cfg = continuation_run(folder)
    assert cfg.model == CFG and cfg.objective.name == "electra"
    assert cfg.objective.sharing == "embeddings"
    gen_cfg = pair_configs(folder)[1]
    assert gen_cfg == replace(CFG, num_hidden_layers=1)
    assert cfg.objective.generator_num_hidden_layers == 1
    assert cfg.objective.generator_hidden_size == CFG.hidden_size
    assert generator_config(cfg.model, cfg.objective) == gen_cfg  # what the objective builds
    disc = ModernBertForPreTraining(cfg.model).eval()
    gen = ModernBertForMaskedLM(gen_cfg, disc.model.embeddings).eval()
    load_pair_weights(disc, gen, folder)
    # The generator is HF's model cut to its first layer, the MLM head kept.
    hf_state = hf.state_dict()
    cut = transformers.ModernBertForMaskedLM(hf_config(num_hidden_layers=1)).eval()
    cut.load_state_dict({k: v for k, v in hf_state.items() if not k.startswith(DEEPER)})
    ids, mask = padded_batch()
    with torch.no_grad():
        assert_real_close(disc.model(ids, attention_mask=mask), hf.model(ids, mask)[0], mask)
        assert_real_close(gen(ids, attention_mask=mask), cut(ids, mask).logits, mask)
    assert gen.decoder.weight is disc.model.embeddings.tok_embeddings.weight


def assert_one_line(error: pytest.ExceptionInfo, *parts: str) -> None:
    text = str(error.value)
    assert "\n" not in text and all(p in text for p in parts), text


def test_bad_inputs_are_one_line(tmp_path, pair):
    folder, _ = hf_folder(tmp_path, "ModernBertForMaskedLM")
    raw = json.loads((folder / "config.json").read_text())
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**raw, "model_type": "gpt2"}))
    with pytest.raises(ElectraError) as e:
        read_model_config(other)
    assert_one_line(e, str(other / "config.json"), "'gpt2'", "does not run", "bert", "modernbert")
    # Data longer than the model's positions: refused before anything is built.
    short = tmp_path / "short"
    hf_folder(short, "ModernBertForMaskedLM", max_position_embeddings=8)
    with pytest.raises(ElectraError) as e:
        continuation_run(short / "ModernBertForMaskedLM")
    assert_one_line(e, "max_position_embeddings=8", "seq len 16")
    # Data prepared with another tokenizer.
    other_tok = Tokenizer.from_str(TOK.to_str())
    other_tok.add_tokens(["zebra"])
    with pytest.raises(ElectraError) as e:
        continuation_run(folder, tokenizer=other_tok)
    assert_one_line(e, "not prepared with the tokenizer", f"--tokenizer {folder}")
    # A file whose 4.x and 5.x keys disagree would be two models.
    (folder / "config.json").write_text(json.dumps({**raw, "global_rope_theta": 1.0}))
    with pytest.raises(ElectraError) as e:
        read_model_config(folder)
    assert_one_line(e, "global_rope_theta=1.0", "4.x and 5.x")


def test_cli_continues_an_hf_modernbert_with_rtd_and_fine_tunes_it(tmp_path, capsys):
    """From a folder `transformers` saved (BPE tokenizer.json, 5.x config keys) to an RTD run, a
    detect, and a fine-tuned classifier that HF's pipeline runs: the commands a user types."""
    folder, _ = hf_folder(tmp_path, "ModernBertForMaskedLM")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(TEXTS) + "\n", encoding="utf-8")
    data, run = tmp_path / "data", tmp_path / "run"
    code, _, err = run_cli(
        capsys, "prepare", corpus, "--tokenizer", folder, "--seq-len", 16, "--out", data
    )
    assert code == 0, err
    steps = ["--steps", "3", "--batch-size", "4", "--train.progress", "false"]
    steps += ["--train.warmup_steps", "1"]
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--data", data, "--out", run, *steps
    )
    assert code == 0, err
    saved = json.loads((run / "discriminator" / "config.json").read_text())
    assert saved["architectures"] == ["ModernBertForTokenClassification"]
    assert saved["num_hidden_layers"] == CFG.num_hidden_layers
    assert json.loads((run / "generator" / "config.json").read_text())["num_hidden_layers"] == 1
    code, out, err = run_cli(capsys, "detect", "--model", run, "--json", "the cat sat")
    assert code == 0, err
    [verdicts] = json.loads(out)  # a list per text
    assert "".join(v["token"] for v in verdicts) == "thecatsat"
    assert all(0 <= v["p_replaced"] <= 1 for v in verdicts)

    rows = [{"text": t, "label": "cat" if "cat" in t else "other"} for t in TEXTS]
    train = tmp_path / "train.csv"
    with open(train, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    tuned, hf_out = tmp_path / "tuned", tmp_path / "hf"
    flags = ["--batch-size", "8", "--no-progress", "--epochs", "1", "--seeds", "1"]
    flags += ["--dev-split", "0.2"]
    code, _, err = run_cli(
        capsys, "finetune", "--model", run, "--task", "classification", "--data", train,
        "--out", tuned, *flags,
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run_cli(capsys, "export", "--model", tuned, "--format", "hf", "--out", hf_out)
    assert code == 0, err
    classify = transformers.pipeline("text-classification", model=str(hf_out), device="cpu")
    texts = tmp_path / "texts.csv"
    texts.write_text("text\nthe cat sat\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "predict", "--model", tuned, texts)
    assert code == 0, err
    ours = json.loads(out.splitlines()[0])
    theirs = classify("the cat sat")[0]
    with torch.no_grad():
        logits = classify.model(**classify.tokenizer("the cat sat", return_tensors="pt")).logits
    assert theirs["label"] == ours["label"]
    assert abs(theirs["score"] - ours["score"]) <= head_bound(logits)


# ModernBERT-base's config.json as the hub holds it (written by transformers 4.47: 4.x keys only).
MODERNBERT_BASE = {
    "architectures": ["ModernBertForMaskedLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 50281,
    "classifier_activation": "gelu",
    "classifier_bias": False,
    "classifier_dropout": 0.0,
    "classifier_pooling": "mean",
    "cls_token_id": 50281,
    "decoder_bias": True,
    "deterministic_flash_attn": False,
    "embedding_dropout": 0.0,
    "eos_token_id": 50282,
    "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0,
    "gradient_checkpointing": False,
    "hidden_activation": "gelu",
    "hidden_size": 768,
    "initializer_cutoff_factor": 2.0,
    "initializer_range": 0.02,
    "intermediate_size": 1152,
    "layer_norm_eps": 1e-05,
    "local_attention": 128,
    "local_rope_theta": 10000.0,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "mlp_dropout": 0.0,
    "model_type": "modernbert",
    "norm_bias": False,
    "norm_eps": 1e-05,
    "num_attention_heads": 12,
    "num_hidden_layers": 22,
    "pad_token_id": 50283,
    "position_embedding_type": "absolute",
    "sep_token_id": 50282,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "transformers_version": "4.47.0.dev0",
    "vocab_size": 50368,
}


def test_modernbert_base_and_ettin_17m_configs_read_as_the_presets(tmp_path):
    """The hub's ModernBERT-base config.json reads as the modern-base preset's encoder, and its
    weights (random, built by transformers on the meta device) have exactly our names; a random
    model of Ettin-17M's shape (modern-small's), saved by transformers with ModernBERT's 50,368
    tokens, loads with equal logits."""
    base = read_model_config_of(MODERNBERT_BASE, tmp_path)
    assert base == replace(preset("modern-base").model, pad_token_id=50283)
    with torch.device("meta"):
        theirs = transformers.ModernBertForMaskedLM(
            transformers.ModernBertConfig(**MODERNBERT_BASE)
        )
        ours = ModernBertForMaskedLM(base)
    assert set(theirs.state_dict()) == set(ours.state_dict())

    small = preset("modern-small").model
    ettin = {**MODERNBERT_BASE, **{k: getattr(small, k) for k in CARRIED_SIZES}}
    torch.manual_seed(0)
    hf = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**ettin)).eval()
    hf.save_pretrained(tmp_path / "ettin")
    loaded, _ = load_pretrained_without_tokenizer(tmp_path / "ettin")
    assert loaded.config == replace(small, pad_token_id=50283)
    assert sum(p.numel() for p in loaded.model.parameters()) == 16_797_440  # "17M"
    ids = torch.randint(0, 50280, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    with torch.no_grad():
        assert_real_close(loaded(ids, attention_mask=mask), hf(ids, mask).logits, mask, small)


CARRIED_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def load_pretrained_without_tokenizer(folder: Path):
    """`load_pretrained` on a folder that `transformers` saved without tokenizer files (ours are
    given the test's BPE, whose ids the model's larger table covers)."""
    TOK.save(str(folder / "tokenizer.json"))
    return load_pretrained(folder)
