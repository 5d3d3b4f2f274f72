"""SQuAD: reading and its errors, sliding windows, token-to-character offsets, answers that cross
window boundaries, the max-context rule, and span decoding with the null threshold."""

from __future__ import annotations

import json

import pytest
import torch

from electra.errors import ElectraError
from electra.tasks.qa import _is_max_context, _windows
from electra.tasks.qa_files import read_squad
from electra.tasks.settings import QaSettings
from electra.tasks.squad import SquadTask

from ..conftest import CONTEXT, assert_one_line_error, qa, run_cli, squad_file


def test_windows_cover_the_document_with_the_stride():
    assert _windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert _windows(3, 4, 2) == [(0, 3)]
    windows = _windows(10, 4, 2)
    # Token 3 sits in windows 0 (right edge) and 1 (middle): window 1 gives it more context.
    assert not _is_max_context(windows, (0, 4), 3) and _is_max_context(windows, (2, 4), 3)
    # every token is max-context in exactly one window
    for t in range(10):
        assert sum(_is_max_context(windows, w, t) for w in windows if w[0] <= t < w[0] + w[1]) == 1


def test_answers_map_to_tokens_and_back_to_text_across_windows(tmp_path, task_tokenizer):
    path = squad_file(
        tmp_path / "train.json",
        [
            qa("q1", "what is the capital of france ?", "Paris"),
            qa("q2", "who sat on the mat ?", "Mary sat on the mat"),
        ],
    )
    questions = read_squad(path)
    task = SquadTask("2.0", QaSettings(doc_stride=6, max_query_length=16))
    enc = task.encode(questions, task_tokenizer, max_len=24, training=True)
    t = enc.tensors
    assert t["input_ids"].shape[1] == 24 and len(enc) > 2 * len(questions)  # several windows each
    seen = {0: [], 1: []}
    for row, ex in enumerate(enc.meta["example"]):
        s, e = int(t["start_positions"][row]), int(t["end_positions"][row])
        seen[ex].append(s > 0)
        if s == 0:
            assert e == 0 and t["is_impossible"][row] == 1
            continue
        assert t["is_impossible"][row] == 0 and t["token_type_ids"][row, s] == 1
        offsets = enc.meta["offsets"][row]
        text = CONTEXT[offsets[s][0] : offsets[e][1]]
        assert text == questions[ex].answers[0][0]  # original case, from the offsets
    # Each answer is whole in some windows and cut (so labelled position 0) in others.
    assert all(any(v) and not all(v) for v in seen.values())


def test_offset_mismatch_is_an_error_naming_file_line_and_question(tmp_path):
    path = squad_file(
        tmp_path / "dev.json", [qa("ok", "x ?", "Paris"), qa("bad-7", "y ?", "Paris", start=3)]
    )
    with pytest.raises(ElectraError) as e:
        read_squad(path)
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if '"bad-7"' in text)
    assert str(path) in str(e.value) and f"line {line}" in str(e.value) and "bad-7" in str(e.value)
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(ElectraError, match="is empty"):
        read_squad(tmp_path / "empty.json")


def fake_outputs(enc, best_row, start, end, answerable):
    """Model outputs that put all probability on one span in one window."""
    n, k = len(enc), 2
    start_lp = torch.full((n, k), -5.0)
    start_ix = torch.zeros((n, k), dtype=torch.long)
    end_lp = torch.full((n, k, k), -5.0)
    end_ix = torch.zeros((n, k, k), dtype=torch.long)
    start_lp[best_row, 0], start_ix[best_row, 0] = -0.1, start
    end_lp[best_row, 0, 0], end_ix[best_row, 0, 0] = -0.1, end
    return {
        "start_log_probs": start_lp,
        "start_index": start_ix,
        "end_log_probs": end_lp,
        "end_index": end_ix,
        "answerable_logit": torch.full((n,), float(answerable)),
    }


def test_decoding_cuts_the_span_and_applies_the_null_threshold(tmp_path, task_tokenizer):
    questions = read_squad(
        squad_file(tmp_path / "d.json", [qa("q", "where was the car ?", "Paris")])
    )
    task = SquadTask("2.0", QaSettings(doc_stride=6, max_query_length=16, null_threshold=0.0))
    enc = task.encode(questions, task_tokenizer, max_len=24, training=False)
    # find a window where "Paris" has max context, and its token position
    target = CONTEXT.index("Paris")
    row, pos = next(
        (r, p)
        for r in range(len(enc))
        for p, off in enumerate(enc.meta["offsets"][r])
        if off and off[0] == target and enc.meta["max_context"][r][p]
    )
    pred = task.decode(questions, enc, fake_outputs(enc, row, pos, pos, answerable=-1.0))[0]
    assert pred["prediction"] == pred["best_span"] == "Paris" and pred["null_score"] == -1.0
    assert task.score([pred])["exact"] == 100.0
    pred = task.decode(questions, enc, fake_outputs(enc, row, pos, pos, answerable=1.0))[0]
    assert pred["prediction"] == "" and pred["best_span"] == "Paris"  # null above the threshold
    # a span longer than max_answer_length is never chosen
    task.max_answer_length = 0
    assert task.decode(questions, enc, fake_outputs(enc, row, pos, pos, -1.0))[0]["best_span"] == ""


def test_score_command_scores_official_files(tmp_path, capsys):

    data = squad_file(
        tmp_path / "dev-v1.1.json",
        [qa("a", "where ?", "Paris"), qa("b", "who ?", "Mary sat on the mat")],
    )
    (tmp_path / "p.json").write_text(json.dumps({"a": "paris", "b": "Mary sat"}))
    code, out, err = run_cli(
        capsys, "score", "--task", "squad1", "--data", data, "--predictions", tmp_path / "p.json"
    )
    assert code == 0, err
    # a: exact; b: F1 of {mary, sat} against {mary, sat, on, mat} = 2/3
    assert json.loads(out) == {"exact_match": 50.0, "f1": pytest.approx(100 * (1 + 2 / 3) / 2)}
    (tmp_path / "short.json").write_text(json.dumps({"a": "paris"}))
    code, _, err = run_cli(
        capsys,
        "score",
        "--task",
        "squad2",
        "--data",
        data,
        "--predictions",
        tmp_path / "short.json",
    )
    assert_one_line_error(code, err, "short.json has no answer for 1 of 2 questions")
    bad = squad_file(tmp_path / "bad.json", [qa("z", "y ?", "Paris", start=0)])
    code, _, err = run_cli(
        capsys, "score", "--task", "squad2", "--data", bad, "--predictions", tmp_path / "p.json"
    )
    assert_one_line_error(code, err, "bad.json, line", "question z", "not at offset 0")


def test_evaluate_test_file_writes_official_files_scored_as_the_run(
    tmp_path, capsys, tiny_pretrained
):
    """`electra evaluate --test FILE` (no --split) evaluates that file; a labelled SQuAD 2.0 test
    file is scored and still gets predictions.json and null_odds.json, whose exact and F1
    `electra score` gives as evaluate did (its best_* search the file's answers, where a question
    predicted unanswerable holds "": no higher than evaluate's over the best spans)."""

    questions = [
        qa("q1", "where was the car ?", "Paris"),
        qa("q2", "who sat on the mat ?", "Mary"),
        qa("q3", "what is money ?", None, impossible=True),
    ]
    data = tmp_path / "squad"
    data.mkdir()
    squad_file(data / "train-v2.0.json", questions)
    # Copies of train would be refused as dev or test: the same questions, asked again.
    asked = [{**q, "question": f"so {q['question']}"} for q in questions]
    squad_file(data / "dev-v2.0.json", asked[::-1])
    test = squad_file(tmp_path / "labelled-test.json", asked[1:] + asked[:1])
    out = tmp_path / "ft"
    fast = ["--epochs", "1", "--max-seq-len", "32", "--doc-stride", "8", "--no-progress"]
    code, _, err = run_cli(
        capsys, "finetune", "--model", tiny_pretrained, "--task", "squad2", "--data", data,
        "--out", out, "--batch-size", "8", *fast,
    )  # fmt: skip
    assert code == 0, err
    code, stdout, err = run_cli(capsys, "evaluate", "--model", out, "--test", test)
    assert code == 0, err
    evaluated = out / "seed_0" / "eval-test"
    results = json.loads((evaluated / "results.json").read_text())
    assert results["split"] == "test" and results["examples"] == {"test": 3}
    assert results["submission_files"] == ["predictions.json"]
    assert "submission file:" in stdout
    null_odds = json.loads((evaluated / "null_odds.json").read_text())
    assert sorted(json.loads((evaluated / "predictions.json").read_text())) == ["q1", "q2", "q3"]
    assert sorted(null_odds) == ["q1", "q2", "q3"]
    for extra in ([], ["--null-odds", evaluated / "null_odds.json"]):
        code, scored, err = run_cli(
            capsys, "score", "--task", "squad2", "--data", test,
            "--predictions", evaluated / "predictions.json", *extra,
        )  # fmt: skip
        assert code == 0, err
        scored = json.loads(scored)
        if extra:  # the search tries the answers as given, among others
            assert scored["best_f1"] >= scored["f1"] - 1e-9
        else:
            for name in ("exact", "f1"):
                assert scored[name] == pytest.approx(results["metrics"][name])
