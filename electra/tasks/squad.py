"""SQuAD 1.1 and 2.0, named configurations of the general question answering task
(`electra.tasks.qa`, whose windows, heads, decoding and scoring they use): the official JSON
files, the version fixed by the benchmark, the official submission files (predictions.json and,
for 2.0, null_odds.json), and `electra score` of them as the official scripts score.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import electra.tasks.metrics as metrics
from electra.atomic import write_json_atomic
from electra.errors import ElectraError
from electra.tasks.base import require_suffix
from electra.tasks.qa import QaTask
from electra.tasks.qa_files import Question, gold_answers, read_squad
from electra.tasks.settings import QaSettings


class SquadTask(QaTask):
    finetune_test = False  # the test split is predicted by `evaluate --split test`
    writes_submission = True
    fixed_splits = True  # the published splits, scored as published

    def __init__(self, version: str = "2.0", settings: QaSettings | None = None):
        super().__init__(settings, version)
        self.name = "squad1" if version == "1.1" else "squad2"
        v = "v1.1" if version == "1.1" else "v2.0"
        self.files = {s: {s: (f"{s}-{v}.json", f"{s}.json")} for s in ("train", "dev", "test")}

    def fit(self, train: list[Question], path: Path) -> SquadTask:
        return self  # the benchmark fixes the version

    def head_config(self):
        return {"qa_head": self.qa_head}

    def with_head_config(self, head):
        task = copy.copy(self)
        task._set_head(head.get("qa_head", "official"))  # models saved before the setting
        return task

    def read(self, path, split):
        return read_squad(path)

    def write_submission(self, predictions, set_name, out_dir) -> Path:
        """The official format: {question id: answer text} (and null scores for 2.0)."""
        path = Path(out_dir) / "predictions.json"
        write_json_atomic(path, {p["id"]: p["prediction"] for p in predictions})
        if self.version != "1.1":
            write_json_atomic(
                Path(out_dir) / "null_odds.json", {p["id"]: p["null_score"] for p in predictions}
            )
        return path

    # --- `electra predict` --------------------------------------------------------------------

    def read_inputs(self, path: Path) -> list[Question]:
        """Questions of a SQuAD JSON file; its answers, if any, are ignored."""
        require_suffix(path, (".json",), self.name)
        return read_squad(path)


def score_file(
    version: str,
    data: Path,
    predictions: Path,
    null_odds: Path | None = None,
    threshold: float = 1.0,
) -> dict[str, float]:
    """`electra score`: a predictions file scored as the official script for `version` does."""
    golds = gold_answers(read_squad(data))
    preds = _read_json_map(predictions)
    if version == "1.1":
        return metrics.squad_v1_scores(golds, preds)
    missing = [q for q in golds if q not in preds]
    if missing:
        raise ElectraError(
            f"{predictions} has no answer for {len(missing)} of {len(golds)} questions (first: "
            f'{missing[0]}): write "" for a question you predict unanswerable'
        )
    nulls = _read_json_map(null_odds) if null_odds else None
    if nulls is not None and (gaps := [q for q in golds if q not in nulls]):
        raise ElectraError(f"{null_odds} has no score for question {gaps[0]}")
    return metrics.squad_v2_scores(golds, preds, nulls, threshold)


def _read_json_map(path: Path) -> dict:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ElectraError(f"cannot read {path}: {e}") from None
    if not isinstance(value, dict):
        raise ElectraError(f"{path} must be a JSON object mapping question ids to values")
    return value
