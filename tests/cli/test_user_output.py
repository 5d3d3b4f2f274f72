"""What a user reads (issue 45 item 6): `--help` lists every preset, `electra presets` shows the
vocabulary it counts with, `--init-from` names only what it takes and says what it started
from, `detect --json` has one shape and full-precision floats with tokens as text, and progress
has one off switch and turns into a few plain lines where stderr is not a terminal."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from electra.cli.flags import config_flags_given
from electra.cli.main import build_parser, main
from electra.config import preset, presets
from electra.data.prepare import prepare
from electra.data.tokenizer import save_tokenizer, train_tokenizer
from electra.engine import progress
from electra.errors import ElectraError
from electra.folders.continuation import pair_configs
from electra.folders.model_folder import load_pretrained, save_pretrained
from electra.model.electra.modeling import ElectraForPreTraining
from electra.model.family import encoder_of
from electra.model.layers import count_parameters, format_count
from electra.objectives.sharing import build_pair
from electra.scoring.detect import format_table, piece_text

from ..conftest import WORDS, run_cli, tiny_model_config, write_csv
from ..numerics import assert_same_computation, encoder_depth

# --- presets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["pretrain", "experiment"])
def test_help_lists_every_preset_of_both_families(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "50")  # narrow: names must not be cut at their hyphens
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    preset_help = text.split("\n  --preset PRESET", 1)[1].split("\n  --", 1)[0]
    words = set(re.split(r"[\s,()]+", preset_help))
    missing = [name for name in presets() if name not in words]
    assert not missing, preset_help
    assert any(name.startswith("modern-") for name in presets())  # both families are in the table


def rows_of(out: str) -> dict[str, list[str]]:
    lines = out.splitlines()
    assert lines[0].split()[-1] == "vocab"
    return {line.split()[0]: line.split() for line in lines[1:]}


def counts_at(name: str, vocab: int | None) -> tuple[str, str]:
    """The discriminator's and the generator's own counts of preset `name` at `vocab` tokens."""
    c = preset(name)
    model = c.model if vocab is None else replace(c.model, vocab_size=vocab, pad_token_id=0)
    with torch.device("meta"):
        g, d = build_pair(model, c.objective)
    own = count_parameters(d, g) - count_parameters(d)
    return format_count(count_parameters(encoder_of(d))), format_count(own)


def test_presets_shows_the_vocabulary_it_counts_with_and_takes_vocab_size(capsys):
    code, out, _ = run_cli(capsys, "presets")
    assert code == 0
    rows = rows_of(out)
    assert list(rows) == list(presets())
    for name, row in rows.items():  # each family's default vocabulary, said in its row
        assert int(row[-1]) == preset(name).model.vocab_size
    assert {rows["small"][-1], rows["modern-small"][-1]} == {"30522", "50368"}
    code, out, _ = run_cli(capsys, "presets", "--vocab-size", 1000)
    assert code == 0
    smaller = rows_of(out)
    for name in presets():
        assert smaller[name][-1] == "1000"
        assert tuple(smaller[name][1:3]) == counts_at(name, 1000), name
    assert smaller["modern-base"][1] != rows["modern-base"][1]
    code, out, err = run_cli(capsys, "presets", "--vocab-size", 0)
    assert code == 2 and not out and "--vocab-size 0" in err


# --- detect --json ----------------------------------------------------------------------------


def probabilities(folder, text: str) -> list[float]:
    model, tok = load_pretrained(folder)
    enc = tok.encode(text)
    with torch.no_grad():
        p = torch.sigmoid(model(torch.tensor([enc.ids]), torch.tensor([enc.type_ids])))[0]
    return p[1:-1].tolist()


def test_detect_json_is_a_list_per_text_at_full_precision(tiny_pretrained, capsys):
    code, out, err = run_cli(capsys, "detect", "--model", tiny_pretrained, "--json", "the cat")
    assert code == 0, err
    one = json.loads(out)
    assert isinstance(one, list) and len(one) == 1 and isinstance(one[0], list)
    assert [t["token"] for t in one[0]] == ["the", "cat"]
    code, out, err = run_cli(
        capsys, "detect", "--model", tiny_pretrained, "--json", "the cat", "a dog sat"
    )
    assert code == 0, err
    two = json.loads(out)
    assert [len(tokens) for tokens in two] == [2, 3] and two[0] == one[0]
    p = [t["p_replaced"] for t in two[1]]
    # Not rounded: float32 values as the model gives them (within the rounding of the stock
    # layers' forward that `probabilities` runs: 2 layers of up to 64 terms, and the head), of
    # more digits than 4 decimals hold.
    assert_same_computation(
        torch.tensor(p),
        torch.tensor(probabilities(tiny_pretrained, "a dog sat")),
        terms=64,
        depth=encoder_depth(2, extra=3),
    )
    assert all(float(torch.tensor(x, dtype=torch.float32)) == x for x in p)
    assert any(round(x, 4) != x for x in p)


def byte_level_folder(root):
    """A tiny discriminator folder with a byte-level BPE tokenizer (RoBERTa's pieces: Ġche)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(200)]
    tok.train_from_iterator([*lines, "the chef ate the meal"], trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    torch.manual_seed(0)
    cfg = tiny_model_config(vocab_size=tok.get_vocab_size(), max_position_embeddings=64)
    save_pretrained(ElectraForPreTraining(cfg), root / "bpe", tok)
    return root / "bpe", tok


def test_detect_gives_pieces_as_text_in_json_and_table_alike(tmp_path, tiny_pretrained, capsys):
    folder, tok = byte_level_folder(tmp_path)
    text = "the chef ate the meal"
    assert any(piece.startswith("Ġ") for piece in tok.encode(text).tokens)  # raw pieces: Ġche
    code, out, err = run_cli(capsys, "detect", "--model", folder, "--json", text)
    assert code == 0, err
    [rows] = json.loads(out)
    tokens = [r["token"] for r in rows]
    assert not any("Ġ" in t for t in tokens)
    assert "".join(tokens) == text  # each piece decoded: " chef", the space marking a word
    code, out, err = run_cli(capsys, "detect", "--model", folder, text)
    assert code == 0, err
    table = out.splitlines()[1 : 1 + len(rows)]
    assert all(line.startswith(t) for line, t in zip(table, tokens, strict=True))
    assert table == format_table(rows).splitlines()
    # Unigram: a piece's word-start mark is a space too, as Metaspace decodes it inside a text.
    corpus = tmp_path / "unigram.txt"
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(200)]
    corpus.write_text("\n".join([*lines, "the chef ate the meal"]) + "\n")
    unigram = train_tokenizer([corpus], 120, model="unigram")
    pieces = [piece_text(unigram, p, "") for p in unigram.encode("the chef").tokens[1:-1]]
    assert "".join(pieces) == " the chef" and pieces[0].startswith(" ")
    # WordPiece: a continuation keeps its ## (BERT's decoder on the piece alone).
    code, out, err = run_cli(capsys, "detect", "--model", tiny_pretrained, "--json", "cats")
    assert code == 0, err
    [rows] = json.loads(out)
    pieces = [r["token"] for r in rows]
    assert len(pieces) > 1 and pieces[1].startswith("##") and pieces[0] == "cat"


# --- progress ----------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere(monkeypatch):
    log = io.StringIO()
    with progress.progress_bar(126, "fine-tune", stream=log) as bar:
        for _ in range(126):
            bar.update(1)
        bar.set_postfix(loss="0.5")
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and 1 <= len(lines) <= 10
    assert lines[-1].startswith("fine-tune: 126/126 steps (100%)")
    # A run stopped before its end says where it stopped, once.
    log = io.StringIO()
    with progress.progress_bar(100, "pretrain", stream=log) as bar:
        bar.update(37)  # a tenth crossed: a line
        bar.update(1)  # none
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("pretrain: 38/100 steps (38%)")
    # A slow run also gets a line after the interval, though no tenth was crossed.
    clock = iter(range(0, 10_000, 70))
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    log = io.StringIO()
    bar = progress.progress_bar(1000, "pretrain", stream=log, initial=500)
    bar.set_postfix({"loss": "3.1"})
    bar.update(1)
    assert log.getvalue().startswith("pretrain: 501/1000 steps (50%), 1m10s elapsed, ~9h42m left")
    assert log.getvalue().rstrip().endswith("loss=3.1")
    assert isinstance(progress.progress_bar(10, "x", stream=Terminal()), progress.tqdm)
    quiet = io.StringIO()
    progress.progress_bar(10, "x", stream=quiet, enabled=False).update(10)
    with progress.progress_off():
        progress.progress_bar(10, "x", stream=quiet).update(10)
    assert quiet.getvalue() == ""


@pytest.mark.parametrize(
    ("argv", "setting"),
    [
        (["pretrain"], {"train.progress": "false"}),  # what --train.progress false sets
        (["finetune", "--model", "m", "--task", "sst2", "--out", "o"], {"progress": False}),
        (["predict", "--model", "m", "-"], {"progress": False}),
        (["experiment", "--arm", "electra", "--data", "d", "--out", "o", "--steps", "1"], {}),
        (["demo"], {}),
    ],
)
def test_every_command_that_shows_progress_takes_no_progress(argv, setting):
    args, extra = build_parser().parse_known_args([*argv, "--no-progress"])
    assert not extra
    assert config_flags_given(args) == setting
    if argv[0] in ("experiment", "demo"):  # no setting of the plan: a continuation may differ in it
        assert args.no_progress
    if argv[0] == "pretrain":
        given, _ = build_parser().parse_known_args(["pretrain", "--train.progress", "false"])
        assert config_flags_given(given) == setting


def prepared(root, task_tokenizer):
    save_tokenizer(task_tokenizer, root / "tok", lowercase=True)
    lines = [" ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(20)) for i in range(300)]
    (root / "c.txt").write_text("\n".join(lines) + "\n")
    prepare([str(root / "c.txt")], root / "tok", seq_len=32, out_dir=root / "data", workers=1)
    return root / "data"


PRETRAIN_TINY = ["--preset", "tiny", "--steps", 20, "--batch-size", 4, "--seq-len", 32]
PRETRAIN_TINY += ["--model.num_hidden_layers", 1, "--model.hidden_size", 32]
PRETRAIN_TINY += ["--model.num_attention_heads", 2, "--model.intermediate_size", 64]
PRETRAIN_TINY += ["--train.tensorboard", "false", "--device", "cpu", "--train.save_every", 100]


def test_pretraining_progress_is_plain_lines_off_a_terminal_and_no_progress_stops_it(
    tmp_path, task_tokenizer, capsys
):
    data = prepared(tmp_path, task_tokenizer)
    code, _, err = run_cli(
        capsys, "pretrain", "--data", data, "--out", tmp_path / "a", *PRETRAIN_TINY
    )
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("pretrain: ")]
    assert "\r" not in err and 2 <= len(lines) <= 10, err
    assert lines[-1].startswith("pretrain: 20/20 steps (100%)")
    for flags in (["--no-progress"], ["--train.progress", "false"]):  # one setting, two names
        out = tmp_path / flags[0].strip("-")
        code, _, err = run_cli(
            capsys, "pretrain", "--data", data, "--out", out, *PRETRAIN_TINY, *flags
        )
        assert code == 0, err
        assert "pretrain: " not in err and "\r" not in err
        assert json.loads((out / "config.json").read_text())["train"]["progress"] is False


def test_fine_tuning_and_predict_with_stderr_in_a_file_write_a_few_plain_lines(
    tmp_path, tiny_pretrained
):
    rows = [
        [" ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(6)), str(i % 2)] for i in range(80)
    ]
    write_csv(tmp_path / "data" / "train.csv", ["text", "label"], rows)
    near = [[text.rsplit(" ", 1)[0], label] for text, label in rows[:16]]  # not training rows
    dev = write_csv(tmp_path / "data" / "dev.csv", ["text", "label"], near)
    log = tmp_path / "stderr.log"
    flags = ["--batch-size", "8", "--epochs", "3", "--seeds", "1", "--max-seq-len", "32"]
    flags += ["--device", "cpu", "--lr", "3e-3"]
    tuned = tmp_path / "tuned"
    argv = [sys.executable, "-m", "electra.cli", "finetune", "--model", str(tiny_pretrained)]
    argv += ["--task", "classification", "--data", str(tmp_path / "data")]
    argv += ["--out", str(tuned), *flags, "--threads", "1"]
    with open(log, "w") as stderr:
        done = subprocess.run(argv, stderr=stderr, stdout=subprocess.DEVNULL, check=False)
    text = log.read_text()
    assert done.returncode == 0, text
    lines = [line for line in text.splitlines() if line.startswith("fine-tune: ")]
    assert "\r" not in text and 2 <= len(lines) <= 10, text  # 30 steps
    assert lines[-1].startswith("fine-tune: 30/30 steps (100%)") and "loss=" in lines[-1]
    argv = [sys.executable, "-m", "electra.cli", "predict", "--model", str(tuned)]
    argv += [str(dev), "--threads", "1"]
    with open(log, "w") as stderr:
        done = subprocess.run(argv, stderr=stderr, stdout=subprocess.PIPE, check=False)
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\r" not in text and f"predict {dev}: 16/16 rows (100%)" in text
    assert len(done.stdout.splitlines()) == 16


# --- --init-from --------------------------------------------------------------------------------


def test_init_from_says_what_it_started_from(tmp_path, capsys):
    from tests.hf.test_hf import make_hf_pair, pair_run_args

    text = " ".join(f"word{i % 97} token{i % 13}" for i in range(3000))  # test_hf's tokenizer
    (tmp_path / "t.txt").write_text(text)
    make_hf_pair(tmp_path, train_tokenizer([tmp_path / "t.txt"], vocab_size=120, min_frequency=1))
    code, _, err = run_cli(capsys, *pair_run_args(tmp_path))
    assert code == 0, err
    [line] = [line for line in err.splitlines() if line.startswith("started from ")]
    assert line == (
        f"started from {tmp_path / 'pair'}: discriminator ElectraForPreTraining (2 layers) from "
        "discriminator/, generator ElectraForMaskedLM (2 layers) from generator/, sharing the "
        "discriminator's embeddings; nothing built fresh"
    )


def test_init_from_an_hf_masked_lm_says_what_was_built_fresh(tmp_path, capsys):
    from tests.model.modernbert.test_hf import TEXTS, hf_folder

    folder, _ = hf_folder(tmp_path, "ModernBertForMaskedLM")
    (tmp_path / "c.txt").write_text("\n\n".join(TEXTS) + "\n")
    data = tmp_path / "data"
    prepare([str(tmp_path / "c.txt")], folder, seq_len=16, out_dir=data, workers=1)
    code, _, err = run_cli(
        capsys, "pretrain", "--init-from", folder, "--data", data, "--out", tmp_path / "run",
        "--steps", 1, "--batch-size", 4, "--no-progress", "--train.tensorboard", "false",
    )  # fmt: skip
    assert code == 0, err
    [line] = [line for line in err.splitlines() if line.startswith("started from ")]
    assert line == (
        f"started from {folder}: ModernBertForMaskedLM, 3 layers; discriminator: its encoder "
        "(3 layers) and a fresh RTD head; generator: its lower 1 of 3 layers and its MLM head, "
        "sharing the discriminator's token table"
    )
    # The generator of that run's pair, given alone, would become a one-layer discriminator.
    with pytest.raises(ElectraError) as e:
        pair_configs(tmp_path / "run" / "generator")
    assert f"the generator of the pair in {tmp_path / 'run'}" in str(e.value)
    assert f"--init-from {tmp_path / 'run'}" in str(e.value)


@pytest.mark.parametrize(
    "kind",
    ["ModernBertModel", "ModernBertForSequenceClassification", "ModernBertForTokenClassification"],
)
def test_init_from_takes_any_folder_holding_the_encoder(tmp_path, kind):
    """A bare encoder or a fine-tuned head continues too: its encoder starts the discriminator,
    and the generator is its lower third with a fresh MLM head."""
    from tests.model.modernbert.test_hf import hf_folder

    folder, _ = hf_folder(tmp_path, kind)
    disc, gen = pair_configs(folder)
    assert (disc.num_hidden_layers, gen.num_hidden_layers) == (3, 1)


def test_init_from_names_only_the_folders_it_takes(tmp_path, tiny_pretrained):
    """A single folder of a family that continues from pairs (ELECTRA's) is refused, naming what
    --init-from takes: the pair, or one folder of the types that continue alone."""
    with pytest.raises(ElectraError) as e:
        pair_configs(tiny_pretrained)
    text = str(e.value)
    assert "discriminator/ and generator/" in text and "modernbert" in text, text
    assert "\n" not in text and "not supported here" not in text


def test_every_command_takes_no_progress():
    """A script passes --no-progress to every command alike: those that show no progress take
    it too, rather than stop at "unrecognized arguments"."""
    from electra.cli.main import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in commands.items():
        if name == "tokenizer":
            command = command._subparsers._group_actions[0].choices["train"]
        assert any("--no-progress" in a.option_strings for a in command._actions), name
