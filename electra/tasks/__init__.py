"""The fine-tuning tasks by name. The tasks on the user's own files (classification, multilabel,
regression, tagging, qa) are the general cases; GLUE, SQuAD 1.1/2.0 and CoNLL-2003 NER are named
configurations of them (their reader, metric and defaults).

Light to import (no torch): a task's module is imported when the task is built, so that the
command line's flags (`electra.tasks.settings`) cost nothing."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from electra.errors import ElectraError
from electra.tasks.settings import ClassificationSettings, QaSettings, TaggingSettings

if TYPE_CHECKING:
    from electra.tasks.base import Task
    from electra.tasks.finetune_config import FinetuneConfig

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
BENCHMARKS = ("squad1", "squad2", "conll2003")
OWN_DATA = ("classification", "multilabel", "regression", "tagging", "qa")
TASKS = (*GLUE_TASKS, *BENCHMARKS, *OWN_DATA)
ALIASES = {"ner": "conll2003", "sst-2": "sst2", "sts-b": "stsb", "squad": "squad1"}


def get_task(name: str, cfg: FinetuneConfig | None = None) -> Task:
    """The task `name` (or an alias), built with its family's settings from the recipe `cfg`
    (`cfg.classification`, `cfg.tagging`, `cfg.qa`; the defaults without one)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in TASKS:
        hint = difflib.get_close_matches(key, TASKS, n=1)
        did_you_mean = f" (did you mean {hint[0]}?)" if hint else ""
        raise ElectraError(f"unknown task {name!r}{did_you_mean}: choose one of {', '.join(TASKS)}")
    if key in GLUE_TASKS:
        from electra.tasks.glue import GLUE, glue_task

        return glue_task(GLUE[key])
    if key == "conll2003":
        from electra.tasks.ner import NerTask

        return NerTask()
    if key == "tagging":
        from electra.tasks.tagging import TaggingTask

        return TaggingTask(cfg.tagging if cfg else TaggingSettings())
    qa = cfg.qa if cfg else QaSettings()
    if key in ("squad1", "squad2"):
        from electra.tasks.squad import SquadTask

        return SquadTask("1.1" if key == "squad1" else "2.0", qa)
    if key == "qa":
        from electra.tasks.qa import QaTask

        return QaTask(qa)
    from electra.tasks.labelled import ClassificationTask, RegressionTask
    from electra.tasks.multilabel import MultilabelTask

    kinds = {
        "classification": ClassificationTask,
        "multilabel": MultilabelTask,
        "regression": RegressionTask,
    }
    return kinds[key](cfg.classification if cfg else ClassificationSettings())
