"""`electra demo` end to end (stopped and continued), and the held-out detection it reports."""

import re

import pytest
import torch

from electra.cli.main import main
from electra.folders.checkpoint import latest_complete
from electra.pretraining.train import StopRequest
from electra.scoring.heldout import _scores, summary


def test_held_out_scores_against_chance_by_hand():
    # Word pieces 10..13 between [CLS] (2) and [SEP] (3); 11 and 13 were replaced.
    ids = torch.tensor([[2, 10, 11, 12, 13, 3]])
    probs = torch.tensor([[0.9, 0.8, 0.1, 0.7, 0.2, 0.9]])
    replaced = torch.tensor([[False, True, False, False, True, False]])
    scored = torch.tensor([[False, True, True, True, True, False]])
    d = _scores(ids, ids, probs, replaced, scored)
    assert d.tokens == 4 and d.replaced_fraction == 0.5
    assert d.auc == 0.75  # of the 4 (replaced, original) pairs, 3 are ordered right
    assert d.precision_at_r == 0.5 and d.threshold == pytest.approx(0.7)  # top 2: 0.8 yes, 0.7 no
    assert d.accuracy == 0.5 and d.always_original == 0.5
    text = summary(d)
    assert "AUC 0.750 (chance 0.5); of the 50.0% it scores highest, 50.0% were replaced" in text
    assert "no better than always 'original'" in text


def test_an_interrupted_demo_says_how_to_continue_and_a_rerun_finishes_it(
    tmp_path, monkeypatch, capsys
):
    out = tmp_path / "demo"
    enter = StopRequest.__enter__

    def ctrl_c_at_once(self):  # as if Ctrl-C came during the first step
        enter(self)
        self.requested = True
        return self

    monkeypatch.setattr(StopRequest, "__enter__", ctrl_c_at_once)
    assert main(["demo", "--out", str(out), "--steps", "3"]) == 130
    err = capsys.readouterr().err
    assert re.search(r"WordPiece, \d+ tokens \(asked for 8192: the corpus gave fewer\)", err)
    assert f"electra: the demo stopped: run `electra demo --out {out}` again to continue it" in err
    assert "held-out" not in err.split("electra pretrain")[-1]  # stopped before detection
    assert latest_complete(out / "run") is not None and not (out / "run" / "discriminator").exists()

    monkeypatch.setattr(StopRequest, "__enter__", enter)
    assert main(["demo", "--out", str(out), "--steps", "3"]) == 0
    stdout, err = capsys.readouterr()
    assert "continuing the interrupted demo" in err and "electra tokenizer train" not in err
    assert "done: 3 steps" in err and (out / "run" / "discriminator").is_dir()
    assert re.search(r"AUC \d\.\d{3} \(chance 0\.5\); of the [\d.]+% it scores highest", err)
    assert "always answering 'original'" in err
    assert "replaced (was " in stdout  # the showcase marks what the generator replaced
