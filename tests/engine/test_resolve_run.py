"""`resolve_run`: the decisions taken before a pretraining run writes anything, the data folder
opened once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from electra.data.store import PretrainingData
from electra.errors import ElectraError
from electra.folders.checkpoint import checkpoint_dirs
from electra.locks import LOCK_FILE
from electra.pretraining.resolve import resolve_run
from electra.pretraining.train import pretrain

from ..conftest import tiny_cfg


@pytest.fixture(autouse=True)
def not_restarted(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)


@pytest.fixture(scope="module")
def finished_run(wikitext_data, tmp_path_factory) -> Path:
    """A two-step run: checkpoints, and a discriminator/generator pair."""
    cfg = tiny_cfg(wikitext_data, **{"train.steps": 2})
    return pretrain(cfg, tmp_path_factory.mktemp("finished") / "run")


def data_of(cfg) -> PretrainingData:
    return PretrainingData(cfg.data.path, seq_len=cfg.data.seq_len)


def decide(cfg, run_dir, resume, data):
    """`resolve_run`'s decisions: the config, the checkpoint resumed from, whether from a pair."""
    run = resolve_run(cfg, run_dir, resume=resume, data=data, note=None)
    return run.cfg, run.latest, run.init_from_pair


def test_a_new_run_fits_the_config_to_the_data_and_writes_nothing(wikitext_data, tmp_path):
    cfg = tiny_cfg(wikitext_data, **{"model.vocab_size": 7, "model.pad_token_id": 3})
    data = data_of(cfg)
    run_dir = tmp_path / "run"
    fitted, latest, from_pair = decide(cfg, run_dir, False, data)
    assert (latest, from_pair) == (None, False)
    assert fitted.model.vocab_size == data.vocab_size
    assert fitted.model.pad_token_id == data.special.pad
    assert fitted.data.seq_len == data.seq_len
    assert fitted.model.hidden_size == cfg.model.hidden_size
    assert not run_dir.exists()
    run_dir.mkdir()
    (run_dir / LOCK_FILE).touch()  # a folder holding only a lock is still new
    assert decide(cfg, run_dir, False, data)[0] == fitted


def test_sequences_longer_than_the_model_takes_are_refused(wikitext_data, tmp_path):
    cfg = tiny_cfg(wikitext_data, **{"model.max_position_embeddings": 32})
    with pytest.raises(ElectraError, match=r"max_position_embeddings=32 is shorter than .* 64"):
        decide(cfg, tmp_path / "run", False, data_of(cfg))


def test_a_used_folder_is_not_started_again(wikitext_data, tmp_path):
    cfg = tiny_cfg(wikitext_data)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(ElectraError, match=r"already exists: continue it with --resume") as e:
        decide(cfg, tmp_path / "run", False, data_of(cfg))
    assert "start it again with --overwrite" in str(e.value)


def test_resuming_needs_a_complete_checkpoint(wikitext_data, tmp_path):
    cfg = tiny_cfg(wikitext_data)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(
        ElectraError,
        match=r"has no checkpoint to resume from \(nor a config.json\): start it without",
    ):
        decide(cfg, run_dir, True, data_of(cfg))
    (run_dir / "checkpoints" / "step_000002").mkdir(parents=True)
    with pytest.raises(ElectraError, match=r"has only incomplete checkpoints to resume from"):
        decide(cfg, run_dir, True, data_of(cfg))


def test_a_restarted_worker_without_a_checkpoint_starts_afresh(
    wikitext_data, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    cfg = tiny_cfg(wikitext_data)
    assert decide(cfg, tmp_path / "run", True, data_of(cfg))[1:] == (None, False)


def test_a_resumed_run_keeps_its_checkpoints_architecture(finished_run, wikitext_data):
    cfg = tiny_cfg(wikitext_data, **{"train.steps": 4})
    fitted, latest, from_pair = decide(cfg, finished_run, True, data_of(cfg))
    assert latest == checkpoint_dirs(finished_run)[-1]
    assert from_pair is False
    saved = tiny_cfg(wikitext_data)
    assert fitted.model.hidden_size == saved.model.hidden_size
    assert fitted.train.steps == 4  # the schedule is this invocation's
    # Another architecture is refused, not silently replaced by the checkpoint's (issue 46).
    other = tiny_cfg(wikitext_data, **{"model.hidden_size": 48, "train.steps": 4})
    with pytest.raises(ElectraError, match=r"model.hidden_size is 32 in the run but 48 here"):
        decide(other, finished_run, True, data_of(other))


def test_a_pair_gives_its_architecture_and_keeps_its_vocabulary(
    finished_run, wikitext_data, tmp_path
):
    cfg = tiny_cfg(wikitext_data, **{"model.hidden_size": 48, "train.init_from": str(finished_run)})
    data = data_of(cfg)
    fitted, latest, from_pair = decide(cfg, tmp_path / "run", False, data)
    assert (latest, from_pair) == (None, True)
    pair = tiny_cfg(wikitext_data)
    assert fitted.model.hidden_size == pair.model.hidden_size
    assert fitted.model.vocab_size == data.vocab_size  # as the pair was trained
    assert fitted.objective.name == "electra"
    assert fitted.objective.generator_hidden_size > 0


def count_data_opens(monkeypatch) -> dict[str, int]:
    """Counts, from now on, the data folders opened and the data tokenizers fingerprinted."""
    from electra.data import store

    counts = {"opened": 0, "fingerprinted": 0}
    open_folder, fingerprint = store.PretrainingData.__init__, store.fingerprint

    def opened(self, *args, **kwargs):
        counts["opened"] += 1
        open_folder(self, *args, **kwargs)

    def fingerprinted(tokenizer):
        counts["fingerprinted"] += 1
        return fingerprint(tokenizer)

    monkeypatch.setattr(store.PretrainingData, "__init__", opened)
    monkeypatch.setattr(store, "fingerprint", fingerprinted)
    return counts


def test_a_run_opens_its_data_folder_once(wikitext_data, tmp_path, monkeypatch, capsys):
    """The settings read from the data (its seq len) and the trainer's checks share one open of
    the folder, and one fingerprint of its tokenizer: from Python, new and resumed."""
    import electra
    from electra.config import RunConfig, apply_overrides, preset

    unset = {"data.seq_len": preset("tiny").data.seq_len, "train.steps": 2}
    cfg = apply_overrides(tiny_cfg(wikitext_data), unset)  # the seq len left to the data
    counts = count_data_opens(monkeypatch)
    run = electra.pretrain(cfg, out=tmp_path / "run")
    assert counts == {"opened": 1, "fingerprinted": 1}
    assert f"using seq len 64 from the data folder {wikitext_data}" in capsys.readouterr().err
    counts.update(opened=0, fingerprinted=0)
    saved = RunConfig.load(run / "config.json")
    electra.pretrain(replace(saved, train=replace(saved.train, steps=4)), out=run, resume=True)
    assert counts == {"opened": 1, "fingerprinted": 1}
    assert checkpoint_dirs(run)[-1].name == "step_00000004"


def test_fsdp_wraps_the_layers_of_families_registered_after_import(monkeypatch):
    """The layers FSDP shards are asked of the registry when a run is built, so that a family
    registered after `electra.pretraining.train` was imported is sharded layer by layer too."""
    from types import SimpleNamespace

    from electra.pretraining import train

    class Layer:
        pass

    late = {"late": SimpleNamespace(layer=Layer)}
    monkeypatch.setattr(train, "families", lambda: late)
    assert train.wrapped_layers() == (Layer,)
